"""MIG layouts: which GPU instance profiles a GPU model offers and whether a declared layout
fits its placements (data/mig.yml, cited per chip and model). Checked before any host is
touched; the host side (module_utils/mig_layout.py) creates what this accepted."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cache

from provisioner import paths
from provisioner.yamlfile import load_data


@dataclass(frozen=True)
class MigModel:
    name: str
    source: str
    slices: int
    profiles: dict[str, tuple[int, int]]               # name -> (GPU instance profile ID, instances available)
    placements: dict[int, tuple[tuple[int, ...], int]]  # profile ID -> (starts, size in memory slices)

    def offered(self) -> str:
        return ", ".join(f"{n} (up to {count})" for n, (_, count) in self.profiles.items())


@cache
def _data() -> dict:
    return load_data((paths.DATA_DIR / "mig.yml").read_text(encoding="utf-8"))


def known_models() -> list[str]:
    return list(_data()["models"])


def model_for(gpu_name: str) -> MigModel | None:
    """The table for a GPU as nvidia-smi (or hardware.gpu.model) names it; None where none is known."""
    data = _data()
    for name, entry in data["models"].items():
        if any(m.lower() in (gpu_name or "").lower() for m in entry["match"]):
            chip = data["chips"][entry["chip"]]
            return MigModel(
                name=name, source=entry["source"], slices=chip["slices"],
                profiles={p: (v[0], v[1]) for p, v in entry["profiles"].items()},
                placements={int(k): (tuple(v[0]), v[1]) for k, v in chip["placements"].items()})
    return None


def fit(model: MigModel, names: list[str]) -> list[tuple[str, int]] | None:
    """A placement for every instance (name, first memory slice), largest first, or None when the
    layout cannot be placed. At most 7 instances on 8 slices: a plain search is instant."""
    order = sorted(names, key=lambda n: -model.placements[model.profiles[n][0]][1])
    used = [False] * model.slices

    def place(i: int) -> list[tuple[str, int]] | None:
        if i == len(order):
            return []
        starts, size = model.placements[model.profiles[order[i]][0]]
        for start in starts:
            if start + size <= model.slices and not any(used[start:start + size]):
                used[start:start + size] = [True] * size
                rest = place(i + 1)
                if rest is not None:
                    return [(order[i], start), *rest]
                used[start:start + size] = [False] * size
        return None

    return place(0)


def layout_error(model: MigModel, names: list[str], where: str) -> str | None:
    """Why `names` cannot be one GPU's layout on `model` (one sentence naming the valid profiles), or None."""
    for i, name in enumerate(names):
        if name not in model.profiles:
            return (f"{where}[{i}]: {name!r} is not a MIG profile of the {model.name}; its profiles are "
                    f"{model.offered()} ({model.source})")
    for name, count in Counter(names).items():
        if count > model.profiles[name][1]:
            return (f"{where}: {count} x {name}, but the {model.name} holds at most {model.profiles[name][1]}; "
                    f"its profiles are {model.offered()} ({model.source})")
    if fit(model, names) is None:
        return (f"{where}: {', '.join(names)} cannot be placed together on the {model.name}'s {model.slices} "
                f"memory slices (NVIDIA's placements, provisioner/data/mig.yml); drop or shrink an instance. "
                f"Its profiles are {model.offered()}")
    return None


def creation_order(model: MigModel, names: list[str]) -> list[str]:
    """The instances largest first (the order `fit` placed them in), for `nvidia-smi mig -cgi`: a small
    instance created first could take the slices a large one needs."""
    return [name for name, _ in fit(model, names) or []]


def per_gpu(layout: dict, gpu_count: int, gpu_model: str) -> dict[int, list[str]]:
    """mig.layout per GPU index (`all` spread over every GPU), each GPU's instances in creation
    order; {} when the profile declares none."""
    if not layout:
        return {}
    model = model_for(gpu_model)
    spread = dict.fromkeys(range(gpu_count), layout["all"]) if "all" in layout else layout
    return {int(i): creation_order(model, names) if model else list(names) for i, names in sorted(spread.items())}
