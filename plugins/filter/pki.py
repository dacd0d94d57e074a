"""Filters over the fleet's PKI (plugin_utils/pki.py): client certificate names, files and fingerprints."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import pki


class FilterModule:
    """Filters vllm.fleet.pki_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "pki_client_cert_name": pki.client_cert_name,
            "pki_client_cert_files": pki.client_cert_files,
            "pki_fingerprints": pki.fingerprints,
        }
