"""Filters over the lab's Vault guard (plugin_utils/vault.py)."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import vault


class FilterModule:
    """Filters vllm.fleet.vault_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "vault_lab_secret_problem": vault.lab_secret_problem,
        }
