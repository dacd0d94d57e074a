"""Facts of the host layout have one home each in roles/vllm_fleet: no role, playbook, template or library function
writes the scene unit prefix itself."""

from __future__ import annotations

import subprocess

import yaml

from conftest import REPO

PREFIX = yaml.safe_load((REPO / "roles/vllm_fleet/vars/main.yml").read_text())["_vllm_fleet_scene_unit_prefix"]


def test_only_vllm_fleet_names_the_scene_unit_prefix() -> None:
    """The prefix is written in roles/vllm_fleet/vars/main.yml and nowhere else the kit runs from (the modules'
    documentation examples and the stand-alone tools aside)."""
    found = subprocess.run(["git", "grep", "-l", "-F", PREFIX, "--", "roles", "playbooks", "site.yml",
                            "plugins/filter", "plugins/plugin_utils", "templates"], cwd=REPO, text=True, capture_output=True,
                           check=False).stdout.split()
    assert PREFIX == "vllm-scene-"
    assert [name for name in found if not name.endswith(".md")] == ["roles/vllm_fleet/vars/main.yml"], found
