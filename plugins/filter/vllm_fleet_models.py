"""Ansible filters over vllm-fleet's model-weights logic (lib/vllm_fleet/models.py), used by the vllm_model role."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lib"))

from vllm_fleet import models  # noqa: E402


class FilterModule:
    """vllm-fleet model filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "vllm_fleet_model_manifest_paths": models.manifest_paths,
            "vllm_fleet_model_controller_dirs": models.controller_dirs,
            "vllm_fleet_model_listings": models.listings,
            "vllm_fleet_model_problems": models.problems,
            "vllm_fleet_model_wanted": models.wanted,
            "vllm_fleet_model_marker_paths": models.marker_paths,
            "vllm_fleet_model_plan": models.plan,
            "vllm_fleet_model_subdirs": models.subdirs,
            "vllm_fleet_model_space_problem": models.space_problem,
            "vllm_fleet_model_verify": models.verify,
            "vllm_fleet_model_marker": models.marker,
            "vllm_fleet_model_failure": models.failure,
            "vllm_fleet_model_published": models.published,
        }
