"""Profiles that validated but could never work, or said one thing and meant another (issue 28,
item 15): keys written twice, numbers out of any real range, two services on one port, the
exporter without DCGM, a key fingerprint that cannot match. Each bad case also sits in the
bad-input corpus (tests/data/bad/profiles); these tests pin the edges."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner import profiles
from provisioner.errors import ProvisionError


def _profile(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "p.yml"
    path.write_text("extends: debian12-lab\nname: p\ndescription: d\n" + body)
    return path


@pytest.mark.parametrize("body,message", [
    ("hardware: {gpu: {count: 0}, min_ram_gib: 100000000000000000000000000000}", "less than or equal to 65536"),
    ("hardware: {gpu: {count: 0}, min_cpu_cores: 100000}", "less than or equal to 4096"),
    ("verify: {nccl_min_busbw_gbps: .inf}", "finite number"),
    ("verify: {nccl_min_busbw_gbps: .nan}", "finite number"),
    ("verify: {ecc_correctable_max: 10000000000000}", "less than or equal to 1000000000"),
    ("network: {ethernet_gbps: -.inf}", "finite number"),
    ("network: {min_gbps: 1e300}", "less than or equal to 1600"),
    ("reboot: {timeout_s: 99999999}", "less than or equal to 7200"),
])
def test_numbers_out_of_any_real_range_are_refused(tmp_path: Path, body: str, message: str):
    with pytest.raises(ProvisionError, match=message):
        profiles.load(str(_profile(tmp_path, body + "\n")))


def test_every_number_of_a_profile_has_an_upper_bound_stated_in_the_reference():
    from annotated_types import Le, Lt

    from provisioner.profiles import reference
    from provisioner.profiles.models import Profile

    def numbers(model, prefix=""):
        for name, info in model.model_fields.items():
            inner = reference._models(info.annotation)
            if inner:
                yield from (n for m in inner for n in numbers(m, f"{prefix}{name}."))
            elif reference.type_name(info.annotation).startswith(("integer", "number")):
                yield f"{prefix}{name}", info

    found = dict(numbers(Profile))
    assert "hardware.min_ram_gib" in found and "verify.nccl_min_busbw_gbps" in found
    unbounded = [n for n, info in found.items()
                 if not any(isinstance(c, (Le, Lt)) for c in reference._constraints(info.annotation, info))]
    assert unbounded == []
    page = (Path(__file__).parent.parent / "docs/reference/profile.md").read_text()
    assert "| `min_ram_gib` | integer | `1` | >= 1, <= 65536 |" in page


def test_the_exporter_follows_dcgm_unless_asked_for_and_then_is_refused(tmp_path: Path):
    from provisioner.profiles.packages import Plan
    from provisioner.render import role_vars

    off = profiles.load(str(_profile(tmp_path, "dcgm: {enabled: false}\n")))
    assert role_vars(off, Plan())["dcgm_exporter_enabled"] is False
    with pytest.raises(ProvisionError, match="dcgm.exporter.enabled is true but dcgm.enabled is false"):
        profiles.load(str(_profile(tmp_path, "dcgm: {enabled: false, exporter: {enabled: true}}\n")))


def test_two_services_on_one_port_are_refused_and_a_port_of_a_service_that_is_off_is_free(tmp_path: Path):
    with pytest.raises(ProvisionError, match="network.port and network.ddp.port are both 29500"):
        profiles.load(str(_profile(tmp_path, "network: {port: 29500}\n")))
    body = "dcgm: {enabled: false}\nmonitoring: {node_exporter: {port: 9400}}\n"
    assert profiles.load(str(_profile(tmp_path, body))).profile.monitoring.node_exporter.port == 9400


def test_a_fingerprint_for_a_mirrors_own_key_is_taken(tmp_path: Path):
    body = ("mirrors: {cuda_repo_url: 'https://mirror.example/cuda', "
            "cuda_repo_key_fingerprint: '0000000000000000000000000000000000000000'}\n")
    path = tmp_path / "m.yml"
    path.write_text("extends: h100-train\nname: m\ndescription: d\n" + body)
    assert profiles.load(str(path)).profile.mirrors.cuda_repo_key_fingerprint == "0" * 40


@pytest.fixture(params=["libyaml", "pure-python"])
def yaml_loader(request, monkeypatch):
    """read_yaml on libyaml's parser (the fast path) and on PyYAML's own (the fallback where
    PyYAML was built without libyaml): both must refuse the same way, at the same line."""
    import importlib

    import yaml

    from provisioner import yamlfile

    if request.param == "libyaml":
        if not yaml.__with_libyaml__:
            pytest.skip("this PyYAML was built without libyaml")
        assert issubclass(yamlfile._UniqueKeyLoader, yaml.CSafeLoader), "the fast path is not taken"
        yield yamlfile.read_yaml
        return
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    try:
        yield importlib.reload(yamlfile).read_yaml
    finally:
        monkeypatch.undo()
        importlib.reload(yamlfile)


def test_both_yaml_parsers_refuse_a_key_written_twice_and_bad_syntax_at_the_same_line(tmp_path: Path, yaml_loader):
    path = tmp_path / "x.yml"
    for twice in ("c: 2", "'c': 2"):  # the same key, plain or quoted
        path.write_text(f"a: 1\nb:\n  c: 1\n  {twice}\n")
        with pytest.raises(ProvisionError) as err:
            yaml_loader(path)
        assert "'c' is written twice in one mapping, on line 3 and line 4" in err.value.message
        assert err.value.where == f"{path}:4:3"
    # A merge may still be overridden: that is not a key written twice.
    path.write_text("base: &b {c: 1, d: 2}\nchild:\n  <<: *b\n  c: 3\n")
    assert yaml_loader(path)["child"] == {"c": 3, "d": 2}
    path.write_text("a: 1\nb: [1, 2\nc: 3\n")
    with pytest.raises(ProvisionError) as err:
        yaml_loader(path)
    assert err.value.message.startswith("YAML syntax error:") and err.value.where.startswith(f"{path}:3:")
    path.write_text("base: &b {c: 1}\nchild: {<<: *b, d: 2}\n")
    assert yaml_loader(path) == {"base": {"c": 1}, "child": {"c": 1, "d": 2}}
