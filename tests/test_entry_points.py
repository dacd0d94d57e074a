"""Every task entry point that roles and playbooks include has an argument spec: what it is for, and the arguments
it takes, typed. A role included by its preflight in a loop (`name: "{{ item }}"`) has a spec for that entry too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from conftest import REPO, tracked

INCLUDES = ("ansible.builtin.include_role", "ansible.builtin.import_role")


class _Loader(yaml.SafeLoader):
    """A safe loader that reads a tagged value (a Vault string) as nothing: only the includes matter here."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def includes(node: Any) -> Iterator[tuple[str, str]]:
    """Yield (role, entry point) of every include_role and import_role inside a YAML document."""
    if isinstance(node, dict):
        for key in INCLUDES:
            if isinstance(node.get(key), dict):
                yield str(node[key].get("name")), str(node[key].get("tasks_from", "main"))
        for value in node.values():
            yield from includes(value)
    elif isinstance(node, list):
        for value in node:
            yield from includes(value)


def entry_points() -> set[tuple[str, str]]:
    """Return every (role, entry point) the repository's YAML includes by a role's own name."""
    files = tracked("roles/*.yml", "playbooks/*.yml", "molecule/*.yml", "site.yml")
    found = {pair for name in files for pair in includes(yaml.load((REPO / name).read_text(), _Loader))}
    return {(role, entry) for role, entry in found if "{{" not in role}


def specs(role: str) -> dict[str, Any]:
    """Return a role's argument specs by entry point."""
    return yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]


def test_every_included_entry_point_has_a_spec() -> None:
    """No include names a role's task file that its meta/argument_specs.yml does not describe."""
    found = entry_points()
    assert len(found) > 30, found  # the scan sees the kit's includes
    assert sorted((role, entry) for role, entry in found if entry not in specs(role)) == []


def test_every_preflight_has_a_spec() -> None:
    """playbooks/preflight.yml includes roles' preflights by a loop variable: each one is described."""
    roles = sorted(p.parent.parent.name for p in (REPO / "roles").glob("*/tasks/preflight.yml"))
    assert [role for role in roles if "preflight" not in specs(role)] == []


def test_every_spec_says_what_its_entry_point_is_for() -> None:
    """Each entry point's spec has a short description."""
    roles = sorted(p.parent.parent.name for p in (REPO / "roles").glob("*/meta/argument_specs.yml"))
    assert [(role, entry) for role in roles for entry, spec in specs(role).items()
            if not spec.get("short_description")] == []
