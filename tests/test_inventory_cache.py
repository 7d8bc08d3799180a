"""The inventory kept between runs (render/inventory_cache): a hit gives exactly what
Ansible's parser gave, without it; anything the parse read that changes is a miss; an entry
someone else could have written is never used."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from provisioner.errors import ProvisionError
from provisioner.render import inventory, inventory_cache


@pytest.fixture
def cache(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "gpu-provisioner" / "inventory"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """An inventory with group_vars, a host_vars folder and a secret that is dropped."""
    folder = tmp_path / "site"
    (folder / "group_vars").mkdir(parents=True)
    (folder / "host_vars" / "node2").mkdir(parents=True)
    (folder / "hosts.ini").write_text("[gpu]\nnode1 ansible_host=10.0.0.1\nnode2 ansible_host=10.0.0.2 "
                                      "ansible_become_password=hunter2\n[rack_a:children]\ngpu\n")
    (folder / "group_vars" / "gpu.yml").write_text("network_switch: sw1\n")
    (folder / "host_vars" / "node2" / "main.yml").write_text("ansible_port: 2222\n")
    return folder / "hosts.ini"


def _parse_refused(monkeypatch) -> None:
    def no_parse(path):
        raise AssertionError("Ansible's parser ran on a hit")
    monkeypatch.setattr(inventory, "_parse", no_parse)


def test_a_hit_is_what_the_parser_gave_without_the_parser(cache: Path, site: Path, monkeypatch):
    fresh = inventory.load(site)
    assert fresh.dropped_secrets == ["host node2: ansible_become_password"]
    assert fresh.origins["group gpu"]["network_switch"] == site.parent / "group_vars" / "gpu.yml"
    assert [p.stat().st_mode & 0o777 for p in cache.iterdir()] == [0o600]
    assert cache.stat().st_mode & 0o777 == 0o700
    _parse_refused(monkeypatch)
    kept = inventory.load(site)
    assert kept == fresh
    assert kept.effective_vars("node2") == fresh.effective_vars("node2")


@pytest.mark.parametrize("change", ["inventory", "group_vars added", "host_vars edited", "group_vars removed",
                                    "ansible env"])
def test_anything_the_parse_read_changing_is_a_miss(cache: Path, site: Path, monkeypatch, change: str):
    inventory.load(site)
    if change == "inventory":
        site.write_text(site.read_text().replace("[gpu]\n", "[gpu]\nnode3 ansible_host=10.0.0.3\n"))
    elif change == "group_vars added":
        (site.parent / "group_vars" / "all.yml").write_text("network_switch: sw9\n")
    elif change == "host_vars edited":
        (site.parent / "host_vars" / "node2" / "main.yml").write_text("ansible_port: 2223\n")
    elif change == "group_vars removed":
        (site.parent / "group_vars" / "gpu.yml").unlink()
    else:
        monkeypatch.setenv("ANSIBLE_INVENTORY_UNPARSED_WARNING", "false")
    parsed = []
    real = inventory._parse
    monkeypatch.setattr(inventory, "_parse", lambda path: parsed.append(path) or real(path))
    again = inventory.load(site)
    assert parsed == [site]
    assert again == real(site)
    _parse_refused(monkeypatch)  # and the new answer is what is kept now
    assert inventory.load(site) == again


def test_the_code_that_shapes_the_answer_is_in_the_key(site: Path, tmp_path: Path):
    module = tmp_path / "shaper.py"
    module.write_text("A = 1\n")
    before = inventory_cache.key(site, [module])
    module.write_text("A = 2\n")
    assert inventory_cache.key(site, [module]) != before
    assert inventory_cache.key(site, [module]) == inventory_cache.key(site, [module])


@pytest.mark.parametrize("tamper", ["group-writable", "symlink", "damaged", "other key", "other inventory"])
def test_an_entry_that_cannot_be_trusted_is_ignored(cache: Path, site: Path, monkeypatch, tmp_path: Path,
                                                    tamper: str):
    inventory.load(site)
    (entry,) = cache.iterdir()
    data = json.loads(entry.read_text())
    data["inventory"]["hosts"]["node1"]["ansible_host"] = "10.6.6.6"  # what a planted entry would say
    if tamper == "group-writable":
        entry.write_text(json.dumps(data))
        entry.chmod(0o620)
    elif tamper == "symlink":
        planted = tmp_path / "planted.json"
        planted.write_text(json.dumps(data))
        entry.unlink()
        entry.symlink_to(planted)
    elif tamper == "damaged":
        entry.write_text(json.dumps(data)[:-40])
    elif tamper == "other key":
        data["key"] = "0" * 64
        entry.write_text(json.dumps(data))
    else:
        data["source"] = "/elsewhere/hosts.ini"
        entry.write_text(json.dumps(data))
    assert inventory.load(site).hosts["node1"]["ansible_host"] == "10.0.0.1"


def test_a_refused_inventory_is_never_kept(cache: Path, tmp_path: Path):
    bad = tmp_path / "hosts.ini"
    bad.write_text("[gpu\nnode1\n")
    for _ in range(2):
        with pytest.raises(ProvisionError, match="cannot parse the inventory"):
            inventory.load(bad)
    assert not cache.exists() or not list(cache.iterdir())


def test_too_many_files_beside_the_inventory_are_not_kept(cache: Path, site: Path, monkeypatch):
    monkeypatch.setattr(inventory_cache, "MAX_FILES", 1)
    inventory.load(site)
    assert not cache.exists() or not list(cache.iterdir())


def test_a_cache_that_cannot_be_written_costs_only_a_parse(site: Path, tmp_path: Path, monkeypatch):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert inventory.load(site).hostnames() == ["node1", "node2"]
    assert os.path.isfile(blocked)
