"""Rollouts: the deployed-state record of a host's scenes, the scenes a restore brings back, and failure reports."""

from __future__ import annotations

from typing import Any

Scene = dict[str, Any]


def state_scenes(digests: dict[str, dict[str, str]], resolved: list[Scene],
                 models: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Return scene -> the digests of its files on the host, the digest of the weights it serves (its model's
    manifest; None when unknown) and its resolved definition (API key by name only)."""
    definitions = {scene["name"]: scene for scene in resolved}
    return {name: {**sums, "definition": definitions.get(name),
                   "weights_sha256": ((models or {}).get((definitions.get(name) or {}).get("model")) or {}).get(
                       "manifest_sha256")}
            for name, sums in sorted(digests.items())}


def restored_scenes(fact: dict[str, Any] | None, names: list[str]) -> list[Scene]:
    """Return the recorded definitions of the restored scenes, for verifying them (none without a recorded fact)."""
    scenes = (fact or {}).get("scenes") or {}
    return [scenes[name]["definition"] for name in names if (scenes.get(name) or {}).get("definition")]


def failed_result(result: dict[str, Any] | None, task: dict[str, Any] | None) -> dict[str, str]:
    """Return what a failure report may keep of a failed task's result: its one-line reason, never the output of a
    task that hides it (no_log: its registered result still holds what it hid)."""
    if (task or {}).get("no_log"):
        return {"msg": "its output is hidden (no_log)"}
    return {"msg": failure_reason(result)}


def failure_reason(result: dict[str, Any] | None) -> str:
    """Return the one-line why of a failed task result."""
    result = result or {}
    text = result.get("msg") or result.get("stderr") or ""
    if not text and result.get("results"):
        failed = [item for item in result["results"] if isinstance(item, dict) and item.get("failed")]
        text = failure_reason(failed[0]) if failed else ""
    return " ".join(str(text).split())[:1200] or "no message"


# How each kind of run ends for a failed host, after its restore: a rollout stops, a converge goes on elsewhere.
RUN_ENDS = {"rollout": "The rollout stops here: hosts of later batches were not touched.",
            "converge": "The other hosts go on.", "restore": "The other hosts go on."}


def failure_message(host: str, step: str, task: str, result: dict[str, Any] | None, restore: dict[str, Any] | None,
                    run: str = "rollout") -> str:
    """Return the message a host's failed rollout or converge ends with: which host, step and task, why, and what
    was restored."""
    if step == "validate":
        done = "Nothing was changed or restarted."
    else:
        done = restore_summary(restore) if restore else "Nothing was restored: a check-mode run changes nothing."
    why = failure_reason(result).rstrip(".")
    return f"{host}: {run} failed at step {step} (task '{task}'): {why}. {done} {RUN_ENDS[run]}"


def restore_summary(restore: dict[str, Any]) -> str:
    """Return what a restore put back, restarted, removed and verified."""
    restarted = ", ".join(restore.get("restart") or []) or "none"
    removed = ", ".join(restore.get("removed") or [])
    verified = [scene["name"] for scene in restored_scenes(restore.get("fact"), restore.get("recorded") or [])]
    return (f"Restored release {restore.get('release') or '(none recorded)'} and the scene files; restarted: "
            f"{restarted}" + (f"; removed the new scenes {removed}" if removed else "") + "; "
            + (f"verified healthy: {', '.join(verified)}." if verified else
               "the restored scenes run but were not verified: no deployed-state fact recorded their definitions."))


def restore_failure_message(host: str, step: str, task: str, result: dict[str, Any] | None, restore_task: str,
                            restore_result: dict[str, Any] | None, run: str = "rollout") -> str:
    """Return the message of a host whose rollout or converge step failed and whose restore failed too: both
    reasons."""
    return (f"{host}: {run} failed at step {step} (task '{task}'): {failure_reason(result)}; and restoring the "
            f"recorded state failed too (task '{restore_task}'): {failure_reason(restore_result)}. The host needs a "
            f"person. {RUN_ENDS[run]}")
