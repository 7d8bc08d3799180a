"""The profile reference page, written from the models themselves (scripts/gen-docs writes it to
docs/reference/profile.md, and tests/test_docs.py fails when the committed page is stale), so the
manual cannot drift from the schema: every field with its type, default, bounds, description and
an example taken from the built-in profiles."""

from __future__ import annotations

import json
import types
import typing
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from provisioner.profiles.models import Profile

INTRO = """\
# Profile reference

Generated from the profile's models (`provisioner/profiles/models.py`) by `scripts/gen-docs`;
do not edit by hand. Every section and field a profile may hold, with its type, its default
(a field without one is required), its bounds, what it means, and an example (a value a
built-in or a test profile writes, else the default). Unknown keys are refused, so a typo is an error that
names the field; so is a key written twice. Every number has bounds, a floor no real host could meet is
refused, and so are `.inf` and `.nan`; two services of one host on one port are refused. `provision profiles show h100-train` prints a resolved profile with every
field; [Concepts](../concepts.md#profiles) explains `extends:` and the built-ins.
"""


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The models inside an annotation (a section, an optional section, a list of them)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _constraints(annotation: Any, info: FieldInfo) -> list[Any]:
    """The field's metadata and that of the types inside its annotation (Annotated aliases)."""
    found = list(info.metadata)
    for arg in typing.get_args(annotation):
        found += _constraints(arg, FieldInfo()) if typing.get_args(arg) else []
    if typing.get_origin(annotation) is typing.Annotated:
        found += [m for m in annotation.__metadata__ if not isinstance(m, FieldInfo)]
        found += [c for m in annotation.__metadata__ if isinstance(m, FieldInfo) for c in m.metadata]
    return found


def _patterns(annotation: Any, info: FieldInfo) -> list[str]:
    found = [getattr(m, "pattern", None) for m in _constraints(annotation, info)]
    if typing.get_origin(annotation) is typing.Annotated:
        found += [getattr(m, "pattern", None) for m in annotation.__metadata__]
    return [p for p in found if isinstance(p, str)]


def type_name(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is Literal:
        return " \\| ".join(f"`{json.dumps(a)}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        named = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"list of {type_name(args[0])}"
    if origin is dict:
        return f"mapping of {type_name(args[0])} to {type_name(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(annotation, str(annotation))


def bounds(annotation: Any, info: FieldInfo) -> str:
    words = ((Ge, "ge", ">= {}"), (Gt, "gt", "> {}"), (Le, "le", "<= {}"), (Lt, "lt", "< {}"),
             (MinLen, "min_length", "at least {} items"), (MaxLen, "max_length", "at most {} items"))
    out = [text.format(getattr(item, attr)) for item in _constraints(annotation, info)
           for kind, attr, text in words if isinstance(item, kind)]
    out += [f"matches `{p}`" for p in _patterns(annotation, info)]
    return ", ".join(dict.fromkeys(out))


def default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()
        return "(section)" if isinstance(value, BaseModel) else f"`{json.dumps(value)}`"
    if info.default is PydanticUndefined:
        return "required"
    return f"`{json.dumps(info.default)}`"


def _set_in(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def example(path: tuple[str, ...], info: FieldInfo, samples: list[dict]) -> str:
    """A value one of the sample profiles writes for this field, else the field's own example,
    else its default."""
    if _models(info.annotation):
        return "(below)"
    for raw in samples:
        value = _set_in(raw, path)
        if value is not None and not isinstance(value, dict):
            return f"`{json.dumps(value)}`"
    given = info.examples or [e for m in _annotation_fields(info.annotation) for e in (m.examples or [])]
    if given:
        return f"`{json.dumps(given[0])}`"
    return default(info) if default(info) not in ("required", "`null`") else "-"


def _annotation_fields(annotation: Any) -> list[FieldInfo]:
    found = []
    if typing.get_origin(annotation) is typing.Annotated:
        found += [m for m in annotation.__metadata__ if isinstance(m, FieldInfo)]
    for arg in typing.get_args(annotation):
        found += _annotation_fields(arg)
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _section(model: type[BaseModel], path: tuple[str, ...], builtins: list[dict], out: list[str]) -> None:
    title = ".".join(path) or "top level"
    out += ["", f"## `{title}`" if path else "## The top level", ""]
    doc = (model.__doc__ or "").strip()
    if doc and model is not Profile:
        out += [" ".join(doc.split()), ""]
    out += ["| field | type | default | bounds | description | example |", "|---|---|---|---|---|---|"]
    nested = []
    for name, info in model.model_fields.items():
        out.append(f"| `{name}` | {type_name(info.annotation)} | {default(info)} | "
                   f"{_cell(bounds(info.annotation, info)) or '-'} | {_cell(info.description or '')} | "
                   f"{_cell(example((*path, name), info, builtins))} |")
        nested += [((*path, name), m) for m in _models(info.annotation)]
    for sub_path, sub_model in nested:
        _section(sub_model, sub_path, builtins, out)


def undocumented(model: type[BaseModel] = Profile, path: tuple[str, ...] = ()) -> list[str]:
    """Every field (dotted path) without a description: tests/test_docs.py keeps this empty."""
    missing = []
    for name, info in model.model_fields.items():
        if not info.description:
            missing.append(".".join((*path, name)))
        for sub in _models(info.annotation):
            missing += undocumented(sub, (*path, name))
    return missing


def page(builtins: list[dict]) -> str:
    """The reference page; `builtins`: profiles as written (raw YAML: the built-ins first), whose
    values are the examples."""
    out = [INTRO.rstrip()]
    _section(Profile, (), builtins, out)
    return "\n".join(out) + "\n"
