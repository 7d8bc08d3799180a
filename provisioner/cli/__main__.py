"""`python -m provisioner.cli`: the same as the `provision` command."""

from provisioner.cli import main

main()
