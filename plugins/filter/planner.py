"""Filters over the capacity planner (plugin_utils/planner.py): model configs, plans and their table."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import planner
from ansible_collections.vllm.fleet.plugins.plugin_utils.filters import guarded


class FilterModule:
    """Filters vllm.fleet.planner_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "planner_config_paths": guarded(planner.config_paths),
            "planner_hub_config_urls": planner.hub_config_urls,
            "planner_hub_configs": planner.hub_configs,
            "planner_plan": guarded(planner.plan_host),
            "planner_table": planner.plan_table,
        }
