"""The collection's filter plugins provide exactly the vllm.fleet.* filters the kit's roles, playbooks and templates use,
each in the plugin named after its domain."""

import re

from conftest import REPO, filter_plugins, fleet_filters


def test_filters_used_and_provided_match() -> None:
    """Every filter used exists, and no filter is provided that nothing uses."""
    sources = "\n".join(p.read_text() for folder in ("roles", "playbooks", "templates", "molecule")
                        for p in sorted((REPO / folder).rglob("*")) if p.suffix in (".yml", ".j2"))
    used = set(re.findall(r"(?:\|\s*|map\(')(vllm\.fleet\.[a-z_]+)", sources))
    provided = set(fleet_filters())
    assert used - provided == set(), f"filters used but not provided: {sorted(used - provided)}"
    assert provided - used == set(), f"filters provided but unused: {sorted(provided - used)}"
    old = set(re.findall(r"(?:\|\s*|map\(')(vllm_fleet_[a-z_]+)", sources))
    assert not old, f"filters called without their collection name: {sorted(old)}"


def test_each_filter_is_named_after_its_plugin() -> None:
    """A filter's name starts with its plugin's, the domain it belongs to (vllm.fleet.gateway_routes in gateway.py)."""
    plugins = filter_plugins()
    assert len(plugins) > 10
    for stem, filters in plugins.items():
        strays = [name for name in filters if not name.startswith(f"{stem}_")]
        assert not strays, f"{stem}.py: {strays}"


def test_host_values_are_none_where_a_host_has_none() -> None:
    """Each host's variable by name; None for a host without it or outside the inventory."""
    hostvars = {"a": {"vllm_scenes_resolved": [1]}, "b": {}}
    host_values = fleet_filters()["vllm.fleet.fleet_host_values"]
    assert host_values(["a", "b", "c"], hostvars, "vllm_scenes_resolved") == {"a": [1], "b": None, "c": None}
