"""The kernel limits many lab hosts need (provisioner/lab/limits.py): what `lab up` refuses
before it starts containers, and how it names the limit that stopped a boot."""

from __future__ import annotations

import os

import pytest

from provisioner.errors import ProvisionError
from provisioner.lab import hosts, limits


def usage(instances=40, watches=600, max_instances=128, max_watches=192536, mem=20000):
    return limits.Usage(instances, watches, max_instances, max_watches, mem)


def test_the_default_inotify_instances_stop_a_thirty_host_lab_and_name_the_fix():
    (short,) = limits.shortfalls(30, usage())
    assert short.startswith("fs.inotify.max_user_instances is 128: 40 in use and 30 new host(s) need about 240 more")
    assert "sysctl -w fs.inotify.max_user_instances=8192" in short and "scripts/setup-dev-host" in short


def test_a_hundred_hosts_fit_once_setup_dev_host_raised_the_limits():
    assert limits.shortfalls(100, usage(max_instances=8192, max_watches=524288)) == []


def test_watches_and_memory_are_named_too():
    found = limits.shortfalls(100, usage(max_instances=8192, max_watches=4000, mem=1000))
    assert [s.split(" ")[0] for s in found] == ["fs.inotify.max_user_watches", "memory:"]
    assert "1000 MiB available and 100 new host(s) need about 4000 MiB" in found[1]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_usage_reads_this_machine():
    now = limits.usage()
    assert now.max_instances >= 1 and now.max_watches >= 1 and now.mem_available_mib > 0
    assert now.instances >= 0 and now.watches >= 0


def test_the_host_count_is_capped_far_above_a_hundred():
    assert hosts.MAX_HOSTS >= 100
    with pytest.raises(ProvisionError, match=f"use 1 to {hosts.MAX_HOSTS}"):
        hosts.up(hosts.MAX_HOSTS + 1, "x")
