"""What dpkg says a host has installed and held (plugins/plugin_utils/packages.py), from the kit's own dpkg-query run
on this machine and from lines of states this machine has no package in."""

from __future__ import annotations

import subprocess

import yaml

from ansible_collections.vllm.fleet.plugins.plugin_utils import packages
from conftest import REPO

QUERY = yaml.safe_load((REPO / "roles/vllm_fleet/vars/main.yml").read_text())["_vllm_fleet_dpkg_query"]


def kit_query(*names: str) -> list[str]:
    """Return the lines of the kit's dpkg-query here, run with the argv Ansible runs (YAML made the format's \\n a
    newline already)."""
    return subprocess.run([*QUERY, *names], capture_output=True, text=True, check=False).stdout.splitlines()


def test_the_kits_query_finds_what_this_machine_has_installed() -> None:
    """dpkg itself and bash are installed here; a package name that does not exist is not."""
    installed = packages.installed(kit_query())
    assert {"dpkg", "bash", "coreutils"} <= set(installed)
    assert packages.installed(kit_query("dpkg", "no-such-package-here")) == ["dpkg"]


def test_held_and_removed_packages_are_told_apart() -> None:
    """Held and installed counts as both; held but not installed as held alone; a removed package's left config
    (rc) and a package dpkg only knows of (un) as neither; a line of another shape is skipped."""
    lines = ["ii |nvidia-driver|550.1", "hi |libcuda1|550.1", "hn |nvidia-kernel-dkms|", "rc |old-driver|1.0",
             "un |never-installed|", "garbage", "iU |half-configured|2.0"]
    assert packages.installed(lines) == ["nvidia-driver", "libcuda1"]
    assert packages.held(lines) == ["libcuda1", "nvidia-kernel-dkms"]
