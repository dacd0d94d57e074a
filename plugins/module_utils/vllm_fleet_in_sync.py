"""Whether a host still is as its last full converge left it: pure logic for the vllm.fleet.in_sync module, which
reads the host."""

from __future__ import annotations

import stat
from typing import Any

Fingerprint = dict[str, dict[str, Any]]


def path_entry(info: Any, link_target: str | None) -> list[Any]:
    """Return what identifies one path (from os.lstat): a link's target; a directory's owner and mode; a file's
    owner, mode, size and modification time, which any write changes."""
    if link_target is not None:
        return ["link", link_target]
    owner = [info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)]
    if stat.S_ISDIR(info.st_mode):
        return ["dir", *owner]
    return ["file", *owner, info.st_size, info.st_mtime_ns]


def unit_states_of(listing: str) -> dict[str, str]:
    """Return unit -> "load/active" from `systemctl list-units --plain --no-legend` lines; the sub-state is left out,
    as a timer's flips from waiting to running each time its service runs (a crashed unit changes its active state)."""
    return {fields[0]: "/".join(fields[1:3]) for fields in (line.split() for line in listing.splitlines())
            if len(fields) >= 4}


def _first_change(kind: str, recorded: dict[str, Any], current: dict[str, Any]) -> str:
    """Return the first key whose value differs between two maps, described, or ""."""
    for key in sorted(set(recorded) | set(current)):
        if key not in current:
            return f"{kind} {key} is gone"
        if key not in recorded:
            return f"{kind} {key} is new"
        if recorded[key] != current[key]:
            return f"{kind} {key} changed ({recorded[key]} -> {current[key]})" if kind != "path" \
                else f"{kind} {key} changed"
    return ""


def difference(record: dict[str, Any] | None, inputs: str, current: Fingerprint) -> str:
    """Return why the host is not as its recorded converge left it, or "" when it is."""
    if not record or "fingerprint" not in record:
        return "no full converge is recorded"
    if record.get("inputs") != inputs:
        return "what this run deploys changed (host variables, extra vars or the kit's files)"
    recorded: Fingerprint = record["fingerprint"]
    for kind in ("host", "unit", "path"):
        change = _first_change(kind, recorded.get(kind, {}), current.get(kind, {}))
        if change:
            return change
    return ""
