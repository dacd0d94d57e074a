"""Filters over the release wheelhouse (plugin_utils/wheelhouse.py): locks and install plans."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import wheelhouse


class FilterModule:
    """Filters vllm.fleet.wheelhouse_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "wheelhouse_release_lock": wheelhouse.release_lock,
            "wheelhouse_install_plan": wheelhouse.install_plan,
        }
