"""Every setting a template writes is checked for line breaks first: each public variable a role's template reads,
directly or through the role's computed internals, is among the settings its preflight's shared check reads (the
role's own, the kit's, and the roles it names in vllm_fleet_strings_also). A setting a template reads unchecked is
how a newline in vllm_fleet_scene_cache_dir once became root ExecStartPre lines in every scene unit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import pytest
import yaml

from conftest import REPO

ROLES = REPO / "roles"
# Names a template may read that are not settings: each is refused or computed elsewhere.
NOT_SETTINGS = {
    "ansible_managed": "Ansible's own header",
    "item": "a loop's item: the role's own checked lists, or resolved scenes (followed as ITEMS says)",
    "lookup": "a function",
    "query": "a function",
    "hostvars": "other hosts' values: each host's own preflight refuses its settings",
    "groups": "the inventory's group names",
    "node_exporter_endpoint": "a fact node_exporter's preflight computes from its checked settings",
    "vllm_scenes_resolved": "a fact of resolved scenes: resolution refuses unsafe strings",
    "ansible_facts": "gathered from the host",
    "vllm_fleet_gpus": "GPU facts: a scene takes only card indexes and memory sizes from them, numbers resolution checks",
    "vllm_fleet_local_guard_name": "an entry point's argument, one of the choices its argument spec lists",
    "vllm_fleet_local_guard_rules": "written by the local-guard filters, which refuse anything but user names",
}
# The internal a role's templates loop over as `item`: a scene's unit and config print fields computed from settings.
ITEMS = {"vllm_scenes": "_vllm_scenes_resolved"}
# A library role (no tasks/main.yml) renders its templates from entry points other roles include: the shared check
# in every role's preflight reads its settings.
LIBRARY_ROLES = {p.parent.parent.name for p in ROLES.glob("*/meta/argument_specs.yml")
                 if not (p.parent.parent / "tasks" / "main.yml").is_file()}


class _AnyName(dict[str, Any]):
    """Filters and tests by any name: the templates are parsed, never rendered."""

    def get(self, key: str, default: Any = None) -> Any:
        """Return a stand-in for every name."""
        return dict.get(self, key) or (lambda *args, **kwargs: None)


ENV = jinja2.Environment(extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"])
ENV.filters, ENV.tests = _AnyName(ENV.filters), _AnyName(ENV.tests)


def _strings(value: Any) -> list[str]:
    """Return every string inside a YAML value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _names(text: str) -> set[str]:
    """Return the variables a Jinja text reads."""
    return set(jinja2.meta.find_undeclared_variables(ENV.parse(text)))


def _internals() -> dict[str, set[str]]:
    """Return every role's computed internal (vars/main.yml) with the variables it reads."""
    found: dict[str, set[str]] = {}
    for path in ROLES.glob("*/vars/main.yml"):
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            found[name] = set().union(*(_names(text) for text in _strings(value)))
    return found


def settings_read(template: Path) -> set[str]:
    """Return the variables a template reads, its internals' variables followed to the end."""
    internals, seen, todo = _internals(), set(), list(_names(template.read_text()))
    if "item" in todo and template.parent.parent.name in ITEMS:
        todo.append(ITEMS[template.parent.parent.name])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(internals.get(name, ()))
    # A leading underscore outside vars/main.yml: what a role registered or computed from its host, not a setting.
    return {name for name in seen if name not in internals and not name.startswith("_")}


def checked(role: str) -> set[str]:
    """Return the settings the role's preflight checks for line breaks (a library role's: those every one checks)."""
    also = []
    if role not in LIBRARY_ROLES:
        first = yaml.safe_load((ROLES / role / "tasks" / "preflight.yml").read_text())[0]
        also = first["vars"].get("vllm_fleet_strings_also", [])
    roles = [role, *also, "vllm_fleet"]
    names = {"inventory_hostname", "ansible_host"}
    for name in roles:
        spec = yaml.safe_load((ROLES / name / "meta" / "argument_specs.yml").read_text())
        names |= set(spec["argument_specs"]["main"].get("options") or {})
    return names


TEMPLATES = sorted(path.relative_to(ROLES) for path in ROLES.glob("*/templates/*.j2"))


@pytest.mark.parametrize("template", TEMPLATES, ids=str)
def test_every_setting_a_template_writes_is_checked_first(template: Path) -> None:
    """Each variable the template reads is a setting its role's preflight checks, or one of NOT_SETTINGS."""
    role = template.parts[0]
    unchecked = sorted(settings_read(ROLES / template) - checked(role) - set(NOT_SETTINGS))
    assert not unchecked, f"{template} writes {unchecked}, which the shared check in {role}'s preflight never reads"


def test_the_check_would_miss_a_setting_outside_its_roles() -> None:
    """The test sees through internals: the gateway's template reads vllm_pki_tls12_ciphers, which only the
    vllm_fleet_strings_also of its preflight brings into the check."""
    template = ROLES / "vllm_gateway" / "templates" / "haproxy.cfg.j2"
    assert "vllm_pki_tls12_ciphers" in settings_read(template)
    assert "vllm_pki_tls12_ciphers" in checked("vllm_gateway")
    assert "vllm_fleet_scene_cache_dir" in settings_read(ROLES / "vllm_scenes" / "templates" / "vllm-scene.service.j2")
