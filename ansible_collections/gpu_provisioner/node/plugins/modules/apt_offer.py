#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Which versions of some packages the host's own distribution archive offers, read through
a private apt run that writes nothing of the host's (module_utils/apt_offer.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: apt_offer
short_description: Ask the host's own distribution archive which versions it offers, changing nothing.
description:
  - Reads the host's apt sources (C(/etc/apt/sources.list), C(/etc/apt/sources.list.d/*.list) one-line
    and C(*.sources) deb822) and keeps the C(deb) entries for O(suites), the distribution's own
    (C(bookworm bookworm-updates bookworm-security)); entries for other suites (NVIDIA's repository,
    a vendor's) are not read.
  - Writes those entries, with their C(Signed-By) and other trust options and the components apt
    will read once the role common has enabled O(components) in O(component_files), into a private
    sources file in a new temporary folder; runs C(apt-get update) and C(apt-cache madison) with
    C(Dir::Etc::SourceList) that file, C(Dir::Etc::SourceParts) an empty folder, private
    C(Dir::State::Lists) and C(Dir::Cache), C(Debug::NoLocking), the host's update hooks cleared,
    Packages indices only; removes the folder. The host's apt.conf (its proxy), keyrings and
    network path apply, and apt checks the signatures. Nothing under C(/etc/apt) or C(/var/lib/apt)
    is written, no lock is taken, no package changes.
  - Only sources whose verified Release file names the distribution's Origin (C(Debian), C(Ubuntu),
    from C(/etc/os-release)) count; a third-party repository that reuses the codename as its suite is
    fetched but left out, and said so.
  - The controller judges the result (C(provisioner/judge/distro.py)), per package the exact version
    the profile's upstream version resolves to, or the versions the archive does carry.
  - Read-only; supports check mode (it runs the same way, and changes nothing).
options:
  packages:
    description: The packages to ask for, each with the upstream version or prefix the profile wants
      (C(nvidia-driver) C(535.309.01), C(nvidia-cuda-toolkit) C(11.8)); returned as given.
    type: dict
    required: true
  suites:
    description: The distribution's own suites, whose entries are read.
    type: list
    elements: str
    required: true
  components:
    description: The components the role common enables (C(main contrib non-free non-free-firmware)).
    type: list
    elements: str
    default: []
  component_files:
    description: The files whose entries the role common adds O(components) to; entries in other files
      keep their own components, as apt will read them.
    type: list
    elements: path
    default: []
  proxy:
    description: The apt HTTP proxy the role common will configure (the profile's C(mirrors.apt_proxy));
      empty keeps the host's own.
    type: str
    default: ""
  origin:
    description: The Origin of the distribution's Release files; empty reads it from C(/etc/os-release).
    type: str
    default: ""
  timeout:
    description: Seconds C(apt-get update) may take.
    type: int
    default: 300
"""

EXAMPLES = r"""
- name: Ask the host's Debian archive which driver and toolkit versions it offers.
  gpu_provisioner.node.apt_offer:
    packages: {nvidia-driver: "535.309.01", nvidia-cuda-toolkit: "11.8"}
    suites: [bookworm, bookworm-updates, bookworm-security]
    components: [main, contrib, non-free, non-free-firmware]
    component_files: [/etc/apt/sources.list, /etc/apt/sources.list.d/debian.sources]
"""

RETURN = r"""
provisioner_apt_offer:
  description: What the archive offers; judged on the controller.
  returned: always
  type: dict
  contains:
    wanted:
      description: O(packages) as given.
      type: dict
    origin:
      description: The distribution's Origin the sources were held to.
      type: str
    sources:
      description: One per URI and suite read, with uri, suite, components, files (the host's files it
        came from), signed_by, fetched (apt kept a verified Release file), release (its Origin, Label,
        Suite, Codename, Version, Date, Valid-Until), used (its offers count), why_not, and apt's
        messages about it.
      type: list
      elements: dict
    packages:
      description: Per package, the versions the used sources offer, newest first, each with version,
        uri, suite and component.
      type: dict
    messages:
      description: apt's warning and error lines (C(W:), C(E:)).
      type: list
      elements: str
    update_rc:
      description: apt-get update's exit status.
      type: int
    error:
      description: Why nothing could be read (no entry for the suites, apt missing or too slow); empty if none.
      type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpu_provisioner.node.plugins.module_utils.apt_offer import offer


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "dict", "required": True},
            "suites": {"type": "list", "elements": "str", "required": True},
            "components": {"type": "list", "elements": "str", "default": []},
            "component_files": {"type": "list", "elements": "path", "default": []},
            "proxy": {"type": "str", "default": ""},
            "origin": {"type": "str", "default": ""},
            "timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    p = module.params
    proxy = p["proxy"] or ""
    if proxy and (not proxy.startswith(("http://", "https://")) or any(c in proxy for c in " \t\r\n")):
        module.fail_json(msg=f"proxy must be an http(s) URL without spaces: {proxy!r}")
    wanted = {str(name): str(version or "") for name, version in p["packages"].items()}
    result = offer(sorted(wanted), p["suites"], p["components"], p["component_files"], proxy=proxy,
                   timeout=max(1, p["timeout"]), origin=p["origin"])
    module.exit_json(changed=False, provisioner_apt_offer=dict(result, wanted=wanted))


if __name__ == "__main__":
    main()
