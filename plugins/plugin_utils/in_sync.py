"""What a converge of one host is made of, as one digest: the kit's own files and the host's variables. A host whose
last full converge recorded the same digest, and whose files and services still match that converge, skips the next
one (site.yml's in-sync check, plugins/modules/in_sync.py)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# The kit's parts that decide what a converge does; docs, tests and benchmarks do not.
KIT_PARTS = ("site.yml", "playbooks", "roles", "plugins", "templates")
# Variables every host has that say nothing about what it should run, or that change from run to run.
RUN_VARIABLES = frozenset({
    "groups", "hostvars", "inventory_dir", "inventory_file", "inventory_hostname", "inventory_hostname_short",
    "omit", "play_hosts", "playbook_dir", "role_names", "vllm_fleet_skip_in_sync",
})


def kit_files(root: Path) -> list[tuple[str, bytes]]:
    """Return (path relative to root, content) of every file of the kit's parts, sorted, bytecode left out."""
    found: list[tuple[str, bytes]] = []
    for part in KIT_PARTS:
        base = root / part
        paths = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        found.extend((str(p.relative_to(root)), p.read_bytes()) for p in paths
                     if "__pycache__" not in p.parts and p.suffix != ".pyc")
    return found


def controller_files(paths: Iterable[str], whole_up_to: int = 1 << 20) -> list[tuple[str, bytes]]:
    """Return (path, content) of the controller files a host's converge reads (manifests, model directories, walked);
    a file over whole_up_to bytes stands for its size and modification time, not its content."""
    found: list[tuple[str, bytes]] = []
    for top in paths:
        base = Path(top)
        for path in [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file()):
            info = path.stat()
            found.append((str(path), path.read_bytes() if info.st_size <= whole_up_to
                          else f"{info.st_size}:{info.st_mtime_ns}".encode()))
    return found


def _as_json(host_vars: Mapping[str, Any], raw_vars: Mapping[str, Any], name: str) -> str:
    """Return one variable's value as JSON; one that cannot be templated yet (it names a role default or a later
    task's result) counts by its expression, and one that cannot be read at all (a Vault value without the Vault) by
    its name."""
    try:
        return json.dumps(host_vars[name], sort_keys=True, default=str)
    except Exception:  # noqa: BLE001 - Ansible raises its own error types for undefined names
        try:
            return json.dumps({"untemplated": str(raw_vars.get(name))})
        except Exception:  # noqa: BLE001 - a Vault value in a run without the Vault counts as unknown
            return json.dumps({"unreadable": name})


def host_inputs(host_vars: Mapping[str, Any], raw_vars: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Return the host's own variables (inventory, group and extra vars) as JSON, without Ansible's facts and run
    variables."""
    facts = host_vars.get("ansible_facts") or {}
    return {name: _as_json(host_vars, raw_vars or {}, name) for name in sorted(host_vars)
            if not name.startswith("ansible_") and name not in RUN_VARIABLES and name not in facts}


def files_digest(files: Iterable[tuple[str, bytes]]) -> str:
    """Return the sha256 of (path, content) pairs, each delimited so that no two lists hash alike."""
    digest = hashlib.sha256()
    for path, content in files:
        digest.update(f"\0{path}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def inputs_digest(host_vars: Mapping[str, Any], kit_digest: str, files: Iterable[tuple[str, bytes]],
                  raw_vars: Mapping[str, Any] | None = None, key: bytes = b"") -> str:
    """Return the HMAC-SHA256, keyed by the host's own key, of the host's inputs, the kit's digest and the controller
    files the host's converge reads: equal digests, equal converges; without the key, no guess at a secret among the
    inputs can be checked against a record."""
    inputs = json.dumps(host_inputs(host_vars, raw_vars), sort_keys=True)
    return hmac.new(key, f"{inputs}\0{kit_digest}\0{files_digest(files)}".encode(), hashlib.sha256).hexdigest()
