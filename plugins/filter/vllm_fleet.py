"""Ansible filters over vllm-fleet's pure logic (lib/vllm_fleet): scene resolution and config rendering."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lib"))

from ansible.errors import AnsibleFilterError  # noqa: E402

from vllm_fleet import scenes  # noqa: E402


def _guarded(function: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the kit's SceneError into an Ansible filter error carrying the same message."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except scenes.SceneError as error:
            raise AnsibleFilterError(str(error)) from None
    wrapper.__doc__ = function.__doc__
    return wrapper


class FilterModule:
    """vllm-fleet filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "vllm_fleet_resolve_scenes": _guarded(scenes.resolve_scenes),
            "vllm_fleet_scene_config": _guarded(scenes.config_file),
            "vllm_fleet_exposure_problems": _guarded(scenes.exposure_problems),
            "vllm_fleet_gpu_problems": _guarded(scenes.gpu_problems),
            "vllm_fleet_models_by_name": _guarded(scenes.models_by_name),
            "vllm_fleet_is_ip": scenes.is_ip_literal,
        }
