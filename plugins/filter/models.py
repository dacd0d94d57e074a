"""Filters over model weights (plugin_utils/models.py): sources, manifests, markers and verdicts."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import models


class FilterModule:
    """Filters vllm.fleet.models_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "models_manifest_paths": models.manifest_paths,
            "models_controller_dirs": models.controller_dirs,
            "models_listings": models.listings,
            "models_problems": models.problems,
            "models_wanted": models.wanted,
            "models_marker_paths": models.marker_paths,
            "models_plan": models.plan,
            "models_subdirs": models.subdirs,
            "models_space_problem": models.space_problem,
            "models_verify": models.verify,
            "models_marker": models.marker,
            "models_failure": models.failure,
            "models_published": models.published,
        }
