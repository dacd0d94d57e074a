"""HAProxy's runtime API for the fleet gateway: one host's scene servers in `show stat`, and draining them."""

from __future__ import annotations

import csv
import io
import socket
from typing import Dict, List

Row = Dict[str, str]
STATES = ("drain", "ready")


def parse_stat(text: str) -> List[Row]:
    """Return the rows of `show stat` output (CSV whose header line starts with '# ')."""
    lines = text.strip().splitlines()
    if not lines or not lines[0].startswith("# "):
        raise ValueError(f"not `show stat` output: {text[:80]!r}")
    return list(csv.DictReader(io.StringIO("\n".join([lines[0][2:], *lines[1:]]))))


def host_servers(rows: List[Row], host: str) -> List[Row]:
    """Return the servers that stand for one GPU host's scenes (named <host>:<scene>) in every backend."""
    return [r for r in rows if r.get("svname", "").startswith(f"{host}:")]


def commands(servers: List[Row], state: str) -> List[str]:
    """Return the runtime API commands that take these servers out of rotation (drain) or put them back (ready)."""
    if state not in STATES:
        raise ValueError(f"state must be one of {STATES}, not {state!r}")
    # HAProxy's own DRAIN still sends a server the requests its prefix affinity (a stick table) holds for it; MAINT
    # sends it nothing new, and the requests in flight there go on all the same.
    runtime_state = "maint" if state == "drain" else state
    return [f"set server {s['pxname']}/{s['svname']} state {runtime_state}" for s in servers]


def maxconn_commands(servers: List[Row], maxconn: Dict[str, int]) -> List[str]:
    """Return the runtime API commands that set each server's maxconn from its scene's entry in maxconn (by scene
    name) where that differs from show stat's slim; scenes without an entry keep theirs."""
    wanted = {s["svname"]: maxconn.get(s["svname"].split(":", 1)[1]) for s in servers}
    return [f"set maxconn server {s['pxname']}/{s['svname']} {wanted[s['svname']]}" for s in servers
            if wanted[s["svname"]] and str(wanted[s["svname"]]) != s.get("slim")]


def needs_change(servers: List[Row], state: str) -> bool:
    """Tell whether any server is not yet in the asked state (drain shows as DRAIN, ready as neither DRAIN nor MAINT)."""
    drained = [("DRAIN" in s.get("status", "") or "MAINT" in s.get("status", "")) for s in servers]
    return not all(drained) if state == "drain" else any(drained)


def in_flight(servers: List[Row]) -> int:
    """Return the requests in flight on these servers (current sessions)."""
    return sum(int(s.get("scur") or 0) for s in servers)


def serving(servers: List[Row]) -> bool:
    """Tell whether every server is up and takes new requests."""
    return all(s.get("status", "").startswith("UP") for s in servers)


def ask(socket_path: str, command: str, timeout: float = 10.0) -> str:
    """Send one command to HAProxy's stats socket and return its whole answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        connection.connect(socket_path)
        connection.sendall(command.encode() + b"\n")
        chunks = []
        while True:
            chunk = connection.recv(65536)
            if not chunk:
                return b"".join(chunks).decode()
            chunks.append(chunk)
