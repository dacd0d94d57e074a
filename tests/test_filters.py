"""The filter plugin provides exactly the vllm_fleet_* filters the kit's roles, playbooks and templates use."""

import re

from conftest import REPO, filter_plugin


def test_filters_used_and_provided_match() -> None:
    """Every filter used exists, and no filter is provided that nothing uses."""
    sources = "\n".join(p.read_text() for folder in ("roles", "playbooks", "templates", "molecule")
                        for p in sorted((REPO / folder).rglob("*")) if p.suffix in (".yml", ".j2"))
    used = set(re.findall(r"(?:\|\s*|map\(')(vllm_fleet_[a-z_]+)", sources))
    provided = set(filter_plugin().FilterModule().filters())
    assert used - provided == set(), f"filters used but not provided: {sorted(used - provided)}"
    assert provided - used == set(), f"filters provided but unused: {sorted(provided - used)}"


def test_host_values_are_none_where_a_host_has_none() -> None:
    """Each host's variable by name; None for a host without it or outside the inventory."""
    hostvars = {"a": {"vllm_scenes_resolved": [1]}, "b": {}}
    host_values = filter_plugin().FilterModule().filters()["vllm_fleet_host_values"]
    assert host_values(["a", "b", "c"], hostvars, "vllm_scenes_resolved") == {"a": [1], "b": None, "c": None}
