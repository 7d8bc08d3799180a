"""The key of a converged lab image (provisioner.lab.converged): what decides what a
converge leaves on a host changes it; nothing else does. Pure: no podman, no host."""

from __future__ import annotations

from pathlib import Path

from provisioner.lab import converged

DRIVER_ONLY = str(Path(__file__).resolve().parent / "data" / "profiles" / "lab-driver-only.yml")


def test_the_image_key_follows_the_profile_and_the_base_image(tmp_path: Path):
    base = "localhost/provisioner-lab:0123456789ab"
    edited = tmp_path / "edited.yml"
    edited.write_text(Path(DRIVER_ONLY).read_text().replace("description: ", "description: edited; ", 1))
    assert converged.key(DRIVER_ONLY, base) == converged.key(DRIVER_ONLY, base)
    assert converged.key(DRIVER_ONLY, base) != converged.key(str(edited), base)
    assert converged.key(DRIVER_ONLY, base) != converged.key(DRIVER_ONLY, "localhost/provisioner-lab:ba9876543210")


def _digest(root: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    converged._tree_digest(root, h)
    return h.hexdigest()


def test_a_changed_byte_in_the_product_changes_the_digest_and_bytecode_does_not(tmp_path: Path):
    (tmp_path / "roles" / "common" / "tasks").mkdir(parents=True)
    task = tmp_path / "roles" / "common" / "tasks" / "main.yml"
    task.write_text("- name: Do a thing.\n")
    before = _digest(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert _digest(tmp_path) == before
    task.write_text("- name: Do a thing!\n")
    assert _digest(tmp_path) != before
    assert len(converged.product_digest()) == 64


def test_an_image_layers_on_the_image_of_the_profile_file_it_extends_never_on_a_built_in(tmp_path: Path):
    data = Path(DRIVER_ONLY).parent
    assert converged.parent(str(data / "lab-state-timer.yml")) == DRIVER_ONLY
    assert converged.parent(str(data / "lab-ddp.yml")) == DRIVER_ONLY
    assert converged.parent(DRIVER_ONLY) is None  # extends the built-in debian12-lab: the base image
    own = tmp_path / "own.yml"
    own.write_text("extends: h100-train\nname: own\ndescription: a user's profile on a built-in\n")
    assert converged.parent(str(own)) is None
    child = tmp_path / "child.yml"
    child.write_text(f"extends: {own}\nname: child\ndescription: on a user's profile\n")
    assert converged.parent(str(child)) == str(own)
