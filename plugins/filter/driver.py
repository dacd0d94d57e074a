"""Filters over the NVIDIA driver's plan per host (plugin_utils/driver.py)."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import driver


class FilterModule:
    """Filters vllm.fleet.driver_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "driver_plan": driver.host_plan,
        }
