"""The kit layer: every vllm_fleet_* variable the roles and playbooks read is declared, typed and documented in
roles/vllm_fleet (its argument specs), or is a fact the kit publishes; a playbook's fallback for a declared switch
(`vllm_fleet_x | default(...)`, where the role's defaults are not loaded) is the declared default."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from conftest import REPO, tracked

NAME = re.compile(r"\bvllm_fleet_[a-z0-9_]+\b")
FALLBACK = re.compile(r"\b(vllm_fleet_[a-z0-9_]+) \| default\(([^()]*(?:\([^()]*\))?[^()]*)\)")
# Facts the kit publishes (vllm_fleet's README lists them), not settings with a default.
PUBLISHED = {
    "vllm_fleet_gpus": "the vllm.fleet.gpu_facts module; an inventory may give it instead",
    "vllm_fleet_plans": "playbooks/plan.yml",
    "vllm_fleet_preflight_passed": "playbooks/preflight.yml",
    "vllm_fleet_context": "roles/vllm_fleet/tasks/context.yml, which every play starts from",
}
# Names that are no variables: files, nftables tables, a Lua action.
NOT_VARIABLES = {"vllm_fleet_cpu", "vllm_fleet_cpu_version", "vllm_fleet_cpu_kernels", "vllm_fleet_shared_site",
                 "vllm_fleet_scenes", "vllm_fleet_monitoring", "vllm_fleet_repeated_field"}


def kit_files() -> list[str]:
    """Return the tracked YAML and Jinja files of the roles, playbooks and kit-level templates."""
    return [name for name in tracked("roles", "playbooks", "site.yml", "templates") if name.endswith((".yml", ".j2"))]


def declared() -> dict[str, Any]:
    """Return every option of roles/vllm_fleet's entry points, by name."""
    specs = yaml.safe_load((REPO / "roles/vllm_fleet/meta/argument_specs.yml").read_text())["argument_specs"]
    return {name: option for spec in specs.values() for name, option in (spec.get("options") or {}).items()}


def jinja_literal(text: str) -> Any:
    """Return the value of a Jinja literal (true, none, lists, strings)."""
    python = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnone\b", "None", text)))
    return ast.literal_eval(python)


def test_every_kit_variable_read_is_declared_or_published() -> None:
    """No role or playbook reads a vllm_fleet_* variable that roles/vllm_fleet does not declare or publish."""
    known = set(declared()) | set(PUBLISHED) | NOT_VARIABLES
    found = {name: path for path in kit_files() for name in NAME.findall((REPO / path).read_text())
             if name not in known}
    assert not found, found


def test_a_fallback_is_the_declared_default() -> None:
    """`vllm_fleet_x | default(v)` writes the very default roles/vllm_fleet declares for it."""
    options = declared()
    fallbacks = [(path, name, literal) for path in kit_files()
                 for name, literal in FALLBACK.findall((REPO / path).read_text()) if "default" in options.get(name, {})]
    # The fallbacks left: a play's serial and max_fail_percentage, and a switch an import sets for one playbook.
    assert len(fallbacks) >= 3, fallbacks
    wrong = [(path, name, literal) for path, name, literal in fallbacks
             if jinja_literal(literal) != options[name]["default"]]
    assert not wrong, wrong


def test_the_published_facts_are_documented() -> None:
    """vllm_fleet's README names each fact the kit publishes."""
    readme = (REPO / "roles/vllm_fleet/README.md").read_text()
    assert all(f"`{name}`" in readme for name in PUBLISHED)


def test_endpoint_facts_come_from_endpoint_task_files_and_are_documented() -> None:
    """Each *_endpoint fact is set in one role's tasks/endpoint.yml and nowhere else, and vllm_fleet's README
    describes it."""
    readme = (REPO / "roles/vllm_fleet/README.md").read_text()
    setters: dict[str, list[str]] = {}
    for path in tracked("roles/*/tasks/*.yml", "playbooks/*.yml", "playbooks/**/*.yml"):
        for name in re.findall(r"^\s+([a-z_]+_endpoint):", (REPO / path).read_text(), re.M):
            setters.setdefault(name, []).append(path)
    assert {"node_exporter_endpoint", "vllm_ingress_endpoint", "vllm_gateway_endpoint",
            "vllm_gateway_metrics_endpoint"} <= setters.keys()
    for name, paths in setters.items():
        assert len(paths) == 1 and paths[0].endswith("/tasks/endpoint.yml"), (name, paths)
        assert f"| `{name}` |" in readme, name


def plays() -> list[tuple[str, dict[str, Any]]]:
    """Return every play of the kit's playbooks (not the imports) with its playbook's path."""
    return [(path, play) for path in tracked("playbooks/*.yml")
            for play in yaml.safe_load((REPO / path).read_text()) if "hosts" in play]


def test_every_play_starts_from_the_fleet_context() -> None:
    """The first task of every play (its pre_tasks' when it has them or roles) reads the fleet context."""
    assert len(plays()) > 30
    for path, play in plays():
        first = (play.get("pre_tasks") or play.get("tasks") or [{}])[0]
        assert first.get("ansible.builtin.import_tasks") == "tasks/fleet-context.yml", (path, play["name"])


def test_only_the_kit_layer_reads_the_topology_from_the_groups() -> None:
    """The gpu_hosts, gateways and monitoring groups are read in roles/vllm_fleet's vars alone; everything else reads
    the fleet context or the kit layer's internals."""
    groups = re.compile(r"groups\[['\"](?:gpu_hosts|gateways|monitoring)['\"]\]")
    readers = [path for path in kit_files() if groups.search((REPO / path).read_text())]
    assert readers == ["roles/vllm_fleet/vars/main.yml"], readers


def test_the_context_holds_the_topology_the_switches_and_the_output_directory(tmp_path: Path) -> None:
    """A play over an inventory of each kind of host publishes the context once per host: the groups' hosts, the run's
    switches as given (-e), the directory ansible-playbook runs from; a second play finds it already set."""
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "children": {"gpu_hosts": {"hosts": {"g1": {}, "g2": {}}}, "gateways": {"hosts": {"gw": {}}}}}}))
    play = {"hosts": "all", "gather_facts": False, "tasks": [
        {"ansible.builtin.import_tasks": str(REPO / "playbooks" / "tasks" / "fleet-context.yml")}]}
    record = {**play, "tasks": [*play["tasks"], {"ansible.builtin.copy": {
        "content": "{{ vllm_fleet_context | to_json }}", "dest": str(tmp_path) + "/{{ inventory_hostname }}.json",
        "mode": "0644"}, "delegate_to": "localhost"}]}
    (tmp_path / "play.yml").write_text(yaml.safe_dump([play, record]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory",
           "PWD": str(tmp_path / "project")}
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
            "-e", "vllm_fleet_without_secrets=true"]
    run = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert run.stdout.count("vllm_fleet : Publish the fleet context") == 1, run.stdout[-3000:]
    for host in ("g1", "g2", "gw"):
        context = json.loads((tmp_path / f"{host}.json").read_text())
        assert (context["gpu_hosts"], context["gateways"], context["monitoring_hosts"]) == (["g1", "g2"], ["gw"], [])
        assert (context["without_secrets"], context["host_metrics"], context["lab"]) == (True, True, False)
        assert context["output_dir"] == str(tmp_path / "project")
