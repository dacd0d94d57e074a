"""Filters over compile-cache bundles (plugin_utils/compile_cache.py)."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import compile_cache


class FilterModule:
    """Filters vllm.fleet.compile_cache_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "compile_cache_parts": compile_cache.cache_parts,
            "compile_cache_bundles": compile_cache.scene_bundles,
            "compile_cache_seedable": compile_cache.seedable,
            "compile_cache_unpublished": compile_cache.unpublished,
            "compile_cache_index": compile_cache.index_entries,
            "compile_cache_packers": compile_cache.packers,
        }
