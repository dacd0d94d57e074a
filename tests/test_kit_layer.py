"""The kit layer: every vllm_fleet_* variable the roles and playbooks read is declared, typed and documented in
roles/vllm_fleet (its argument specs), or is a fact the kit publishes; a playbook's fallback for a declared switch
(`vllm_fleet_x | default(...)`, where the role's defaults are not loaded) is the declared default."""

from __future__ import annotations

import ast
import re
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
    assert len(fallbacks) > 15, fallbacks  # the playbooks' fallbacks are seen
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
