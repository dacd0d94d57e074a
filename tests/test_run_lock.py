"""The host's run lock (roles/vllm_state tasks_from lock/unlock, module vllm.fleet.run_lock): two runs never change one
host at once; a run that ended, an expired lock or an explicit break frees it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, load_as

logic = load_as("ansible.module_utils.vllm_fleet_run_lock", REPO / "plugins" / "module_utils" / "vllm_fleet_run_lock.py")

ME = {"controller": "ctl", "pid": "10", "started": "Thu Dec  3 21:00:00 2026", "playbook": "converge"}


def test_verdict_waits_only_for_another_live_unexpired_run() -> None:
    """Free, own, ended, expired or forced: take; another live run's lock before its expiry: wait."""
    other = {**ME, "pid": "11", "until": 200.0}
    assert logic.verdict(None, ME, 100.0, holder_ended=False, force=False) == "take"
    assert logic.verdict({**ME, "until": 200.0}, ME, 100.0, holder_ended=False, force=False) == "take"
    assert logic.verdict(other, ME, 100.0, holder_ended=False, force=False) == "wait"
    assert logic.verdict(other, ME, 100.0, holder_ended=True, force=False) == "take"
    assert logic.verdict(other, ME, 200.0, holder_ended=False, force=False) == "take"
    assert logic.verdict(other, ME, 100.0, holder_ended=False, force=True) == "take"
    assert logic.describe(other) == ("a run of converge from controller ctl (process 11, started "
                                     "Thu Dec  3 21:00:00 2026)")


def start_run(tmp_path: Path, lock: Path, hold: int, wait: int, extra: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    """Start a run on the controller as its own host that takes the lock, holds it hold seconds and releases it."""
    play = tmp_path / "run.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                    "    - {ansible.builtin.include_role: {name: vllm_state, tasks_from: lock}}\n"
                    "    - {ansible.builtin.command: {argv: [sleep, '{{ hold }}']}, changed_when: false}\n"
                    "    - {ansible.builtin.include_role: {name: vllm_state, tasks_from: unlock}}\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory"}
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "gpu1,", "-c", "local", str(play),
            "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"vllm_state_lock_path={lock}",
            "-e", f"hold={hold}", "-e", f"vllm_state_lock_wait={wait}", *extra]
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(run: subprocess.Popen[str]) -> tuple[int, str]:
    """Wait for a run; return its exit status and output."""
    output, _ = run.communicate(timeout=300)
    return run.returncode, output


def test_a_second_run_waits_for_the_first_or_fails_naming_it(tmp_path: Path) -> None:
    """While one run holds the host, a run that may not wait long enough fails in one line naming the holder and the
    fix; one that may, waits and then runs; the lock is gone after both."""
    lock = tmp_path / "run" / "run.lock"
    first = start_run(tmp_path, lock, hold=12, wait=0)
    deadline = time.monotonic() + 120
    while not lock.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    holder = json.loads(lock.read_text())
    guard = lock.with_name(".run.lock.guard")
    assert (holder["controller"], holder["pid"], oct(lock.stat().st_mode & 0o777), oct(guard.stat().st_mode & 0o777)) \
        == (socket.gethostname(), str(first.pid), "0o600", "0o600")
    status, output = finish(start_run(tmp_path, lock, hold=0, wait=2))
    assert status != 0
    failure = output.split("FAILED HOSTS")[-1].strip().splitlines()[1:]
    assert len(failure) == 1 and f"gpu1: a run of converge from controller {socket.gethostname()} (process " \
        f"{first.pid}, started " in failure[0] and "vllm_state_lock_wait=2 s passed" in failure[0] \
        and "-e vllm_state_lock_break=true" in failure[0], output[-3000:]
    waiting = start_run(tmp_path, lock, hold=0, wait=120)
    assert finish(first)[0] == 0
    released_at = time.monotonic()
    status, output = finish(waiting)
    assert status == 0, output[-3000:]
    assert time.monotonic() - released_at < 60 and not lock.exists()


def test_a_lock_left_by_a_run_that_ended_here_is_taken_over(tmp_path: Path) -> None:
    """A run that failed or was killed on this controller left its lock: the next run takes it at once."""
    ended = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout.strip()
    lock = tmp_path / "run.lock"
    lock.write_text(json.dumps({"controller": socket.gethostname(), "pid": ended, "started": "long ago",
                                "playbook": "rollout", "until": time.time() + 3600}))
    status, output = finish(start_run(tmp_path, lock, hold=0, wait=0))
    assert status == 0 and not lock.exists(), output[-3000:]


def test_another_controllers_lock_holds_until_it_expires_or_is_broken(tmp_path: Path) -> None:
    """A lock of a run elsewhere is respected until its expiry; -e vllm_state_lock_break=true takes it anyway."""
    lock = tmp_path / "run.lock"
    elsewhere = {"controller": "other-laptop", "pid": "1", "started": "x", "playbook": "converge"}
    lock.write_text(json.dumps({**elsewhere, "until": time.time() + 3600}))
    status, output = finish(start_run(tmp_path, lock, hold=0, wait=0))
    assert status != 0 and "from controller other-laptop" in output and lock.exists(), output[-3000:]
    status, output = finish(start_run(tmp_path, lock, hold=0, wait=0, extra=("-e", "vllm_state_lock_break=true")))
    assert status == 0 and not lock.exists(), output[-3000:]
    lock.write_text(json.dumps({**elsewhere, "until": time.time() - 1}))
    status, output = finish(start_run(tmp_path, lock, hold=0, wait=0))
    assert status == 0 and not lock.exists(), output[-3000:]
