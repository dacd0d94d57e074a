"""Filters over the fleet gateway (plugin_utils/gateway.py): users, keys, backends, routes and limits."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import gateway


class FilterModule:
    """Filters vllm.fleet.gateway_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "gateway_key_problem": gateway.key_problem,
            "gateway_user_problems": gateway.user_problems,
            "gateway_users": gateway.gateway_users,
            "gateway_user_keys": gateway.user_keys,
            "gateway_backend_problems": gateway.backend_problems,
            "gateway_backend_record": gateway.backend_record,
            "gateway_backends": gateway.backends,
            "gateway_backend_notes": gateway.backend_notes,
            "gateway_routes": gateway.routes,
            "gateway_scene_limits": gateway.scene_limits,
            "gateway_scene_tls_name": gateway.scene_tls_name,
            "gateway_server_name": gateway.server_name,
            "gateway_scene_tls_names": gateway.scene_tls_names,
            "gateway_models_document": gateway.models_document,
            "gateway_first_user": gateway.first_user,
            "gateway_error": gateway.error_document,
            "gateway_tls_problems": gateway.tls_problems,
            "gateway_buffer_bytes": gateway.buffer_bytes,
            "gateway_memory_ceiling": gateway.memory_ceiling,
            "gateway_source_problems": gateway.source_problems,
            "gateway_host_addresses": gateway.host_addresses,
        }
