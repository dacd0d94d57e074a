"""Filters over in-sync checks (plugin_utils/in_sync.py): the kit's digest and a host's inputs digest."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import in_sync


def kit_digest(kit_root: str) -> str:
    """Return the digest of the kit's files under kit_root (the same for every host of a run)."""
    return in_sync.files_digest(in_sync.kit_files(Path(kit_root)))


def inputs_digest(host_vars: Any, key_b64: str, kit: str, controller_paths: list[str]) -> str:
    """Return the HMAC, keyed by the host's own key (base64), of what a converge of the host deploys: its variables,
    the kit's digest and the controller files it reads."""
    # HostVarsVars keeps the host's untemplated variables; they stand for those that cannot be templated yet.
    return in_sync.inputs_digest(host_vars, kit, in_sync.controller_files(controller_paths),
                                 getattr(host_vars, "_vars", None), base64.b64decode(key_b64))


class FilterModule:
    """Filters vllm.fleet.in_sync_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "in_sync_kit_digest": kit_digest,
            "in_sync_inputs_digest": inputs_digest,
        }
