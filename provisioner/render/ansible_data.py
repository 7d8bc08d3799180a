"""YAML for files Ansible reads, with every string that could template marked `!unsafe`.

Ansible templates any string in group_vars, host_vars or an inventory that holds `{{`
or `{%`, so a profile field such as `hardware.gpu.model: "{{ lookup('pipe', 'id') }}"`
would run a command on the controller. A profile is data (it is shared between teams
and downloaded), so everything we render from it is tagged `!unsafe`: Ansible's
loader then keeps the string as literal text, never templates it, and the roles'
own defaults (`python_env_env_dir: "{{ python_env_prefix ~ ... }}"`) still work,
because an unsafe value may be used inside an expression; it is only never template
source itself. Mapping keys are left plain (Ansible never templates a variable's name).

Only strings holding one of Jinja's start markers (`{{`, `{%`, `{#`: what Ansible looks
for before it templates anything) are tagged; every other string is written plain (and
quoted where YAML needs it), because ansible-core 2.19 loads `!unsafe '11.8'` as the
float 11.8: tagging a CUDA version turned `['11.8']` into `[11.8]` and broke every
comparison with it (the Molecule nvidia scenario found it).
"""

from __future__ import annotations

from typing import Any

import yaml

UNSAFE_TAG = "!unsafe"
# What Ansible's templar needs to see in a string before it treats it as a template.
TEMPLATE_MARKERS = ("{{", "{%", "{#")


class _Unsafe(str):
    """A string to be written with the !unsafe tag."""


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:  # every value written out in full: no &anchors
        return True


_Dumper.add_representer(_Unsafe, lambda dumper, value: dumper.represent_scalar(UNSAFE_TAG, str(value)))


def could_template(text: str) -> bool:
    return any(marker in text for marker in TEMPLATE_MARKERS)


def _mark(value: Any) -> Any:
    if isinstance(value, str):
        return _Unsafe(value) if could_template(value) else value
    if isinstance(value, dict):
        return {str(k): _mark(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mark(v) for v in value]
    return value


def dump_unsafe(data: Any) -> str:
    """`data` as YAML, every string value that could template tagged !unsafe (keys stay plain)."""
    return yaml.dump(_mark(data), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100,
                     allow_unicode=True)


class _Loader(yaml.SafeLoader):
    """Reads what dump_unsafe wrote back as plain data (tests, `provision` itself)."""


_Loader.add_constructor(UNSAFE_TAG, lambda loader, node: loader.construct_scalar(node))


def load_unsafe(text: str) -> Any:
    """YAML written by dump_unsafe as plain Python values (the !unsafe tag dropped)."""
    return yaml.load(text, Loader=_Loader)
