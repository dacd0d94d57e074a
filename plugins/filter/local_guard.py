"""Filters over the loopback guards (plugin_utils/local_guard.py): the rules of each guard."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import local_guard
from ansible_collections.vllm.fleet.plugins.plugin_utils.filters import guarded


class FilterModule:
    """Filters vllm.fleet.local_guard_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "local_guard_scene_rules": guarded(local_guard.scene_rules),
            "local_guard_owner_rules": guarded(local_guard.owner_rules),
        }
