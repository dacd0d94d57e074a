"""Ansible filters over vllm-fleet's verification logic (lib/vllm_fleet/verify.py), used by the vllm_verify role."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lib"))

from ansible.errors import AnsibleFilterError  # noqa: E402

from vllm_fleet import verify  # noqa: E402


def _guarded(function: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the kit's VerifyError into an Ansible filter error carrying the same message."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except verify.VerifyError as error:
            raise AnsibleFilterError(str(error)) from None
    wrapper.__doc__ = function.__doc__
    return wrapper


class FilterModule:
    """vllm-fleet verification filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "vllm_fleet_slo_targets": _guarded(verify.targets_for),
            "vllm_fleet_slo_verdict": _guarded(verify.slo_verdict),
            "vllm_fleet_scene_report": _guarded(verify.scene_report),
            "vllm_fleet_scene_checks": _guarded(verify.scene_checks),
            "vllm_fleet_verify_summary": _guarded(verify.summary_markdown),
            "vllm_fleet_decode_floor": _guarded(verify.decode_floor_ms),
        }
