"""Every role has a README whose settings part is what tools/role_readme.py writes from its argument specs."""

from __future__ import annotations

from pathlib import Path

import pytest

import role_readme  # tools/role_readme.py, through conftest's sys.path

ROLES = sorted(p.parent.parent for p in role_readme.ROLES.glob("*/meta/argument_specs.yml"))


def test_every_role_has_a_spec_and_a_readme() -> None:
    """No role lacks its argument specs or its README."""
    every = sorted(p for p in role_readme.ROLES.iterdir() if p.is_dir())
    assert every == ROLES, sorted(set(every) - set(ROLES))
    assert [role.name for role in ROLES if not (role / "README.md").is_file()] == []


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_the_readme_lists_what_the_spec_says(role: Path) -> None:
    """The generated block equals its spec: run tools/role_readme.py --write after changing a spec."""
    assert role_readme.rewritten(role) == (role / "README.md").read_text(), (
        f"{role.name}/README.md differs from its spec: run tools/role_readme.py --write")


def test_every_option_and_entry_point_is_in_the_block() -> None:
    """The block names each option of each entry point, its default, and each entry point but main."""
    block = role_readme.generated({
        "main": {"options": {"a_port": {"type": "int", "default": 9090, "description": "C(port) | one"}}},
        "guard": {"short_description": "Guard it.", "options": {"a_rules": {"type": "list", "elements": "str",
                                                                           "required": True}}}})
    assert "| `a_port` | int | `9090` | `port` \\| one |" in block
    assert "## Entry point `tasks_from: guard`" in block and "| `a_rules` | list of str | required |  |" in block
