"""Who may hold a host's run lock: pure logic for the vllm.fleet.run_lock module, which reads and writes the lock."""

from __future__ import annotations

from typing import Any

Owner = dict[str, Any]  # controller, pid, started (the controller's own words), playbook, since and until (epoch s)


def same_run(held: Owner, me: Owner) -> bool:
    """Return whether a lock is held by this very run (same controller, process and process start)."""
    return all(held.get(key) == me.get(key) for key in ("controller", "pid", "started"))


def verdict(held: Owner | None, me: Owner, now: float, holder_ended: bool, force: bool) -> str:
    """Return "take" when this run may hold the lock now (free, its own, expired, its holder ended, forced), or
    "wait" while another live run may hold it."""
    if held is None or force or same_run(held, me) or holder_ended:
        return "take"
    return "take" if float(held.get("until", 0)) <= now else "wait"


def describe(held: Owner) -> str:
    """Return the holder of a lock in words, for the one line that refuses a run."""
    return (f"a run of {held.get('playbook', '?')} from controller {held.get('controller', '?')} (process "
            f"{held.get('pid', '?')}, started {held.get('started', '?')})")
