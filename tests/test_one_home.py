"""Facts of the host layout and kit-wide policies have one home each in roles/vllm_fleet: no role, playbook, template
or library function writes the scene unit prefix, or its own apt lock wait and retries."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import yaml

from conftest import REPO, tracked

PREFIX = yaml.safe_load((REPO / "roles/vllm_fleet/vars/main.yml").read_text())["_vllm_fleet_scene_unit_prefix"]


def test_only_vllm_fleet_names_the_scene_unit_prefix() -> None:
    """The prefix is written in roles/vllm_fleet/vars/main.yml and nowhere else the kit runs from (the modules'
    documentation examples and the stand-alone tools aside)."""
    found = subprocess.run(["git", "grep", "-l", "-F", PREFIX, "--", "roles", "playbooks", "site.yml",
                            "plugins/filter", "plugins/plugin_utils", "templates"], cwd=REPO, text=True, capture_output=True,
                           check=False).stdout.split()
    assert PREFIX == "vllm-scene-"
    assert [name for name in found if not name.endswith(".md")] == ["roles/vllm_fleet/vars/main.yml"], found


def apt_tasks(tasks: Any) -> list[dict[str, Any]]:
    """Return every task of a task list (or of a playbook's plays) that runs ansible.builtin.apt, in blocks too."""
    found: list[dict[str, Any]] = []
    for task in tasks or []:
        for section in ("block", "rescue", "always", "pre_tasks", "tasks", "post_tasks", "handlers"):
            found += apt_tasks(task.get(section))
        if "ansible.builtin.apt" in task:
            found.append(task)
    return found


def test_every_apt_task_waits_and_retries_as_the_kit_says() -> None:
    """Each apt task waits for dpkg's lock and retries with roles/vllm_fleet's settings, never numbers of its own."""
    tasks = [(name, task) for name in tracked("roles/*/tasks/*.yml", "playbooks/*.yml", "playbooks/**/*.yml")
             for task in apt_tasks(yaml.safe_load((REPO / name).read_text()))]
    assert len(tasks) >= 10
    for name, task in tasks:
        where = f"{name}: {task['name']}"
        assert task["ansible.builtin.apt"]["lock_timeout"] == "{{ vllm_fleet_apt_lock_timeout }}", where
        assert task["retries"] == "{{ vllm_fleet_apt_retries }}", where
        assert task["delay"] == "{{ vllm_fleet_apt_retry_delay }}", where
        assert task["until"] == f"{task['register']} is succeeded", where


def host_layout() -> dict[str, str]:
    """Return the kit's places on a host (roles/vllm_fleet/vars/main.yml's table) and its HAProxy instances' names."""
    kit_vars = yaml.safe_load((REPO / "roles/vllm_fleet/vars/main.yml").read_text())
    return {**kit_vars["_vllm_fleet_host_paths"], **kit_vars["_vllm_fleet_haproxy_instances"]}


def test_only_the_layout_table_writes_the_kits_places_on_a_host() -> None:
    """Every role derives its host paths from roles/vllm_fleet's table: no other role file, playbook, template or
    library function writes one of its places (or an instance's name) itself."""
    layout = host_layout()
    assert layout["state"] == "/var/lib/vllm-fleet" and layout["ingress"] == "vllm-ingress"
    patterns = {name: re.compile(rf"(?<![\w./-]){re.escape(value)}(?![\w-])") for name, value in layout.items()}
    files = [name for name in tracked("roles", "playbooks", "site.yml", "templates", "plugins/filter",
                                      "plugins/plugin_utils")
             if name.endswith((".yml", ".j2", ".py")) and name != "roles/vllm_fleet/vars/main.yml"
             and not name.endswith("meta/argument_specs.yml")  # a spec documents a default's value as it resolves
             and "/files/" not in name]  # a program for hosts is told its paths by its unit or config
    found = [(name, place) for name in files for place, pattern in patterns.items()
             if pattern.search((REPO / name).read_text())]
    assert not found, found


def test_the_deployment_module_takes_its_paths_from_the_kit() -> None:
    """vllm.fleet.deployment has no default of its own for a path the kit lays out: roles/vllm_state passes each."""
    source = (REPO / "plugins/modules/deployment.py").read_text()
    spec = source[source.index("argument_spec={"):source.index("supports_check_mode")]
    for option in ("config_dir", "release_link", "model_dir"):
        assert f'"{option}": {{"type": "path", "required": True}}' in spec, option
    for option in ("fact_path", "snapshot_dir"):  # required by the states that write them
        assert f'"{option}": {{"type": "path"}}' in spec, option


def test_roles_read_the_fleets_topology_from_the_kit_layer() -> None:
    """Which hosts are gateways and which monitor is read from the inventory's groups once, in roles/vllm_fleet's
    vars; the other roles read _vllm_fleet_gateways and _vllm_fleet_monitoring_hosts."""
    groups = re.compile(r"groups\[['\"](gateways|monitoring)['\"]\]")
    found = [name for name in tracked("roles") if name.endswith((".yml", ".j2"))
             and name != "roles/vllm_fleet/vars/main.yml" and groups.search((REPO / name).read_text())]
    assert not found, found
    kit_vars = yaml.safe_load((REPO / "roles/vllm_fleet/vars/main.yml").read_text())
    assert kit_vars["_vllm_fleet_gateways"] == "{{ groups['gateways'] | default([]) }}"


def test_the_cuda_repository_has_one_home() -> None:
    """NVIDIA's CUDA repository (its URL, the release/architecture folder, the keyring's file name) is written in
    roles/vllm_fleet alone; the driver and the toolkit read it from there."""
    facts = [re.compile(r"developer\.download\.nvidia\.com"), re.compile(r"cuda-keyring_"), re.compile(r"'sbsa'")]
    own = {"roles/vllm_fleet/defaults/main.yml", "roles/vllm_fleet/vars/main.yml",
           "roles/vllm_fleet/meta/argument_specs.yml"}
    found = [(name, fact.pattern) for name in tracked("roles", "playbooks") if name.endswith((".yml", ".j2"))
             and name not in own for fact in facts if fact.search((REPO / name).read_text())]
    assert not found, found


def test_dpkg_is_asked_and_read_in_one_way() -> None:
    """roles/vllm_fleet holds the one dpkg-query every role runs, and plugin_utils/packages.py the one reading of its
    lines: no role or playbook writes dpkg-query or matches dpkg's status words itself."""
    own = "roles/vllm_fleet/vars/main.yml"
    pattern = re.compile(r"dpkg-query|install ok installed|Status-Abbrev|\^\[ih\]i")
    found = [name for name in tracked("roles", "playbooks") if name.endswith((".yml", ".j2")) and name != own
             and pattern.search((REPO / name).read_text())]
    assert not found, found
    assert "dpkg-query" in (REPO / own).read_text()
