"""Filters over what every HAProxy config of the kit holds (plugin_utils/haproxy.py)."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import haproxy


class FilterModule:
    """Filters vllm.fleet.haproxy_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "haproxy_shared_lines": haproxy.shared_lines,
        }
