"""Filters over rollouts (plugin_utils/rollout.py): state, restores and failure messages."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import rollout


class FilterModule:
    """Filters vllm.fleet.rollout_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "rollout_state_scenes": rollout.state_scenes,
            "rollout_restored_scenes": rollout.restored_scenes,
            "rollout_failure": rollout.failure_message,
            "rollout_failed_result": rollout.failed_result,
            "rollout_restore_failure": rollout.restore_failure_message,
        }
