"""Filters over what dpkg says a host has installed (plugin_utils/packages.py)."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import packages


class FilterModule:
    """Filters vllm.fleet.packages_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "packages_installed": packages.installed,
            "packages_held": packages.held,
        }
