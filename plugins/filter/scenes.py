"""Filters over scene resolution (plugin_utils/scenes.py): a host's scenes whole, their checks and addresses."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import scenes
from ansible_collections.vllm.fleet.plugins.plugin_utils.filters import guarded


class FilterModule:
    """Filters vllm.fleet.scenes_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "scenes_of_host": guarded(scenes.host_scenes),
            "scenes_problem": scenes.resolve_problem,
            "scenes_exposure_problems": guarded(scenes.exposure_problems),
            "scenes_gpu_problems": guarded(scenes.gpu_problems),
            "scenes_models_by_name": guarded(scenes.models_by_name),
            "scenes_is_ip": scenes.is_ip_literal,
            "scenes_is_loopback": scenes.is_loopback,
            "scenes_env_problem": scenes.env_problem,
            "scenes_reach_address": scenes.reach_address,
            "scenes_local_url": scenes.local_url,
            "scenes_ready_targets": scenes.ready_targets,
            "scenes_users": guarded(scenes.scene_users),
        }
