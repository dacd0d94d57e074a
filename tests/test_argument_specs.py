"""Every role's public interface is declared once: defaults/main.yml and meta/argument_specs.yml agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROLES_DIR = Path(__file__).resolve().parent.parent / "roles"


def _role_names() -> list[str]:
    """Names of the role directories under roles/, sorted."""
    if not ROLES_DIR.is_dir():
        return []
    return sorted(p.name for p in ROLES_DIR.iterdir() if p.is_dir() and not p.name.startswith("."))


ROLES = _role_names()


def _find(role: str, subdir: str, stem: str = "main") -> Path | None:
    """Path of roles/ROLE/SUBDIR/STEM.yml (or .yaml), or None when neither exists."""
    for suffix in (".yml", ".yaml"):
        path = ROLES_DIR / role / subdir / f"{stem}{suffix}"
        if path.is_file():
            return path
    return None


def _load_mapping(path: Path) -> dict[str, Any]:
    """Parse a YAML file that must hold a mapping (an empty file counts as an empty mapping)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if data is None:
        return {}
    assert isinstance(data, dict), f"{path}: top level must be a mapping, got {type(data).__name__}"
    return data


def _defaults(role: str) -> dict[str, Any]:
    """The role's defaults/main.yml as a mapping; a role without one has no public variables."""
    path = _find(role, "defaults")
    return _load_mapping(path) if path else {}


def _spec_options(role: str) -> dict[str, dict[str, Any]]:
    """The options of the `main` entry point in the role's meta/argument_specs.yml."""
    path = _find(role, "meta", "argument_specs")
    assert path is not None, f"role {role}: meta/argument_specs.yml is missing"
    specs = _load_mapping(path).get("argument_specs") or {}
    assert "main" in specs, f"{path}: no argument_specs.main entry point"
    options = specs["main"].get("options") or {}
    assert isinstance(options, dict), f"{path}: argument_specs.main.options must be a mapping"
    return options


def _is_template(value: Any) -> bool:
    """True for a string that Ansible would template (so its literal value is not comparable)."""
    return isinstance(value, str) and "{{" in value


def test_roles_exist() -> None:
    """roles/ holds at least one role, so the per-role tests below are not vacuous."""
    assert ROLES, f"no role directories found under {ROLES_DIR}"


@pytest.mark.parametrize("role", ROLES)
def test_spec_options_match_defaults(role: str) -> None:
    """The option names in argument_specs are exactly the keys of defaults/main.yml."""
    spec_names = set(_spec_options(role))
    default_names = set(_defaults(role))
    missing = sorted(default_names - spec_names)
    extra = sorted(spec_names - default_names)
    assert not missing and not extra, (
        f"role {role}: in defaults but not in argument_specs: {missing}; in argument_specs but not in defaults: {extra}"
    )


@pytest.mark.parametrize("role", ROLES)
def test_spec_options_have_type_and_description(role: str) -> None:
    """Every option in argument_specs declares a type and a non-empty description."""
    problems = [
        f"{name}: {', '.join(key for key in ('type', 'description') if not (spec or {}).get(key))}"
        for name, spec in _spec_options(role).items()
        if not (spec or {}).get("type") or not (spec or {}).get("description")
    ]
    assert not problems, f"role {role}: options lacking type/description: {problems}"


@pytest.mark.parametrize("role", ROLES)
def test_defaults_are_prefixed_with_role_name(role: str) -> None:
    """Every variable in defaults/main.yml starts with the role name and an underscore."""
    unprefixed = sorted(name for name in _defaults(role) if not str(name).startswith(f"{role}_"))
    assert not unprefixed, f"role {role}: defaults not prefixed with '{role}_': {unprefixed}"


@pytest.mark.parametrize("role", ROLES)
def test_spec_defaults_equal_defaults(role: str) -> None:
    """Where argument_specs declares a default, it equals the literal value in defaults/main.yml."""
    defaults = _defaults(role)
    mismatches = [
        f"{name}: argument_specs {spec['default']!r} != defaults {defaults[name]!r}"
        for name, spec in _spec_options(role).items()
        if isinstance(spec, dict)
        and "default" in spec
        and name in defaults
        and not _is_template(defaults[name])
        and not _is_template(spec["default"])
        and (spec["default"] != defaults[name] or type(spec["default"]) is not type(defaults[name]))
    ]
    assert not mismatches, f"role {role}: default values disagree: {mismatches}"


@pytest.mark.parametrize("role", ROLES)
def test_role_layout(role: str) -> None:
    """The role has meta/main.yml and tasks/main.yml (a settings-only role has defaults instead, and only task files
    that other roles run by tasks_from, each an entry point of its argument spec), and each templates/*.j2 starts
    with ansible_managed."""
    assert _find(role, "meta") is not None, f"role {role}: meta/main.yml is missing"
    task_files = sorted(p.stem for p in (ROLES_DIR / role / "tasks").glob("*.yml"))
    spec = _find(role, "meta", "argument_specs")
    entry_points = set((_load_mapping(spec).get("argument_specs") or {}) if spec else {})
    settings_only = (_find(role, "tasks") is None and _find(role, "defaults") is not None
                     and set(task_files) <= entry_points - {"main"})
    assert settings_only or _find(role, "tasks") is not None, f"role {role}: tasks/main.yml is missing"
    templates_dir = ROLES_DIR / role / "templates"
    unmanaged = [
        str(path.relative_to(ROLES_DIR))
        for path in sorted(templates_dir.rglob("*.j2"))
        if "ansible_managed" not in (path.read_text(encoding="utf-8").splitlines() or [""])[0]
    ]
    assert not unmanaged, f"role {role}: templates whose first line lacks ansible_managed: {unmanaged}"
