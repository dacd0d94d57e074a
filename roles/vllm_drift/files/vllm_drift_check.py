# Installed by the vllm_drift role; run by vllm-drift.service. Python 3.11 standard library only.
"""Check this host for drift: ansible-pull the fleet repo at a pinned ref in check mode, write a status, log a line.

Usage: vllm_drift_check.py CONFIG.json

The run changes nothing on the host: ansible-pull runs the playbook with --check (and the unit runs it in a read-only
file system by default). It writes only the checkout, its own Ansible temp files, the full log and the status file.

Exit status: 0 in sync, 3 drift (the playbook would change something), 2 error (the check could not tell: the
checkout failed, a task failed, the host was unreachable or not in the inventory, no report). The unit counts 3 as a
failure unless vllm_drift_fail_on_drift is false.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import shlex
import tempfile
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

IN_SYNC = "in sync"
DRIFT = "drift"
ERROR = "error"
EXIT_CODES = {IN_SYNC: 0, ERROR: 2, DRIFT: 3}
CALLBACK = "vllm_drift_report"
MAX_LISTED = 10  # changed tasks named in the journal line; the status file lists them all
# Root already (no sudo: the unit sets NoNewPrivileges), every task checked, no Vault secret read.
CHECK_VARS = {"ansible_become": False, "vllm_fleet_skip_in_sync": False, "vllm_fleet_without_secrets": True}
UNDECRYPTABLE = "no vault secrets found"  # ansible-core's words for a Vault value read without a password


def _task_names(entries: Sequence[Mapping[str, Any]], many_hosts: bool) -> list[str]:
    """Unique task names in run order, prefixed with the host when the run covered more than one host."""
    names: list[str] = []
    for entry in entries:
        name = f"{entry.get('host')}: {entry.get('task')}" if many_hosts else str(entry.get("task"))
        if entry.get("handler"):
            name += " (handler)"
        if name not in names:
            names.append(name)
    return names


def evaluate(report: Mapping[str, Any] | None, pull_rc: int) -> dict[str, Any]:
    """Return the verdict of one ansible-pull run from its callback report (None: no report) and its exit status.

    in sync: every host ran with changed == failed == unreachable == 0 and ansible-pull exited 0; drift: changes
    and no failure; error: anything else (a failure or unreachable host, no host matched, no report, rc != 0).
    """
    result: dict[str, Any] = {"verdict": ERROR, "changed": 0, "changed_tasks": [], "failed": 0, "unreachable": 0,
                              "failed_tasks": [], "hosts": []}
    if report is None:
        result["message"] = (f"ansible-pull exited {pull_rc} before the playbook reported (checkout, inventory or "
                             "playbook missing?); see the log" if pull_rc else "the playbook wrote no report")
        return result
    hosts: Mapping[str, Mapping[str, int]] = report.get("hosts") or {}
    many = len(hosts) > 1
    result["hosts"] = sorted(hosts)
    result["changed"] = sum(int(s.get("changed", 0)) for s in hosts.values())
    result["failed"] = sum(int(s.get("failures", 0)) for s in hosts.values())
    result["unreachable"] = sum(int(s.get("unreachable", 0)) for s in hosts.values())
    result["changed_tasks"] = _task_names(report.get("changed") or [], many)
    failed_entries = [*(report.get("failed") or []), *(report.get("unreachable") or [])]
    result["failed_tasks"] = [
        f"{name}: {entry['msg']}" if entry.get("msg") else name
        for name, entry in zip(_task_names(failed_entries, many), failed_entries, strict=False)
    ]
    if not hosts:
        result["message"] = "no host matched the limit in the inventory: nothing was checked"
    elif result["failed"] or result["unreachable"]:
        result["message"] = (f"the check failed: {result['failed']} failed, {result['unreachable']} unreachable"
                             + (f": {'; '.join(result['failed_tasks'])}" if result["failed_tasks"] else ""))
    elif pull_rc:
        result["message"] = f"ansible-pull exited {pull_rc}; see the log"
    elif result["changed"]:
        result["verdict"] = DRIFT
        listed = result["changed_tasks"][:MAX_LISTED]
        more = len(result["changed_tasks"]) - len(listed)
        result["message"] = (f"{result['changed']} change{'s' if result['changed'] != 1 else ''}: "
                             + "; ".join(listed) + (f"; and {more} more" if more > 0 else ""))
    else:
        result["verdict"] = IN_SYNC
        result["message"] = "no change"
    return result


def build_status(result: Mapping[str, Any], *, checked_at: str, repo: str, ref: str, commit: str | None,
                 limit: str, duration_s: float, log: str) -> dict[str, Any]:
    """Return the status document written to the status file."""
    message = str(result["message"])
    if any(UNDECRYPTABLE in task for task in result["failed_tasks"]):
        message += (" (a task reads a Vault value, and the check holds no secret: have that task compare only the "
                    "file's owner and mode when vllm_fleet_without_secrets is true)")
    return {
        "checked_at": checked_at,
        "repo": repo,
        "ref": ref,
        "commit": commit,
        "limit": limit,
        "hosts": list(result["hosts"]),
        "verdict": result["verdict"],
        "changed": result["changed"],
        "changed_tasks": list(result["changed_tasks"]),
        "failed": result["failed"],
        "unreachable": result["unreachable"],
        "failed_tasks": list(result["failed_tasks"]),
        "message": message,
        "duration_s": round(duration_s, 1),
        "log": log,
        "exit_code": EXIT_CODES[str(result["verdict"])],
    }


def summary_line(status: Mapping[str, Any]) -> str:
    """Return the one line for the journal, e.g. 'vllm-drift: drift: 1 change: Write x (ref v1, commit 0123abcd)'."""
    commit = str(status.get("commit") or "none")[:12]
    return f"vllm-drift: {status['verdict']}: {status['message']} (ref {status['ref']}, commit {commit})"


def split_credentials(url: str) -> tuple[str, str, str]:
    """Return the URL without its user and password, and those two (URL-decoded, '' when absent)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None and parts.username is None:
        return url, "", ""
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    plain = urllib.parse.urlunsplit(parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")))
    return plain, urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or "")


def askpass_script(user: str, password: str) -> str:
    """Return the GIT_ASKPASS program that answers git's user and password prompts: the secret lives in a root-only
    file for the length of one check, never in a command line, an environment, the status or the log."""
    return ("#!/bin/sh\n# vllm-drift: answers git's prompts for the repository's credentials during one check\n"
            f'case "$1" in Username*) printf "%s\\n" {shlex.quote(user)} ;;\n'
            f'  *) printf "%s\\n" {shlex.quote(password)} ;;\nesac\n')


def pull_argv(config: Mapping[str, Any]) -> list[str]:
    """Return the ansible-pull command line: check mode with diff, a full clone at the pinned commit (its signature
    verified when keys are trusted), local connection, no secret, every task checked (a host in sync with its last
    converge is not skipped: drift is what the record may miss)."""
    argv = [str(Path(config["venv_dir"]) / "bin" / "ansible-pull"), "--check", "--diff", "--full", "--clean",
            "--url", split_credentials(str(config["repo_url"]))[0], "--checkout", str(config["ref"]), "--directory",
            str(config["checkout_dir"]), "--inventory", str(config["inventory"]), "--limit", str(config["limit"]),
            "--extra-vars", "ansible_connection=local", "--extra-vars", json.dumps(CHECK_VARS)]
    if config.get("gnupg_home"):
        argv.append("--verify-commit")
    return [*argv, *[str(arg) for arg in config.get("extra_args") or []], str(config["playbook"])]


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace path with text in one rename, so a reader sees the old or the new file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.",
                                     delete=False) as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
        os.chmod(handle.name, mode)
    os.replace(handle.name, path)


def _git(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run git in the checkout without raising."""
    return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, check=False)


def main(argv: Sequence[str]) -> int:
    """Run the check described by the config file argv[1]; write the status; print the summary; return the exit code."""
    config = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    state_dir = Path(config["state_dir"])
    work = state_dir / "ansible"
    (work / "tmp").mkdir(parents=True, exist_ok=True, mode=0o700)
    log_path = state_dir / "last-run.log"
    report_path = work / "report.json"
    report_path.unlink(missing_ok=True)
    repo_url, user, password = split_credentials(str(config["repo_url"]))
    askpass = work / "askpass"
    askpass.unlink(missing_ok=True)
    if user or password:
        fd = os.open(askpass, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        with os.fdopen(fd, "w", encoding="utf-8") as script:
            script.write(askpass_script(user, password))
    env = {
        **os.environ,
        "LANG": "C.UTF-8",
        "ANSIBLE_HOME": str(work),
        "ANSIBLE_LOCAL_TEMP": str(work / "tmp"),
        "ANSIBLE_REMOTE_TEMP": str(work / "tmp"),
        "ANSIBLE_CALLBACK_PLUGINS": str(config["callback_dir"]),
        "ANSIBLE_CALLBACKS_ENABLED": CALLBACK,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_NO_TARGET_SYSLOG": "1",  # modules would log each invocation to the journal: keep it to one line
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",  # ansible-pull's own lines in order with its children's in the log
        "VLLM_DRIFT_REPORT": str(report_path),
        **({"GNUPGHOME": str(config["gnupg_home"])} if config.get("gnupg_home") else {}),
        **({"GIT_ASKPASS": str(askpass)} if user or password else {}),
    }
    started = time.monotonic()
    checked_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as log:
            pull = subprocess.run(pull_argv(config), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  env=env, cwd=str(work), check=False)
    finally:
        askpass.unlink(missing_ok=True)
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.is_file() else None
    checkout = Path(config["checkout_dir"])
    head = _git(checkout, "rev-parse", "--verify", "HEAD^{commit}") if (checkout / ".git").exists() else None
    commit = head.stdout.strip() if head is not None and head.returncode == 0 else None
    result = evaluate(report, pull.returncode)
    status = build_status(result, checked_at=checked_at, repo=repo_url, ref=str(config["ref"]),
                          commit=commit, limit=str(config["limit"]),
                          duration_s=time.monotonic() - started, log=str(log_path))
    write_atomically(Path(config["status_file"]), json.dumps(status, indent=2) + "\n")
    print(summary_line(status), flush=True)
    if status["verdict"] == ERROR:
        tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        print("\n".join(f"vllm-drift: log: {line}" for line in tail), flush=True)
    return int(status["exit_code"])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
