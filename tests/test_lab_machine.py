"""The lab machine: power-off on stand-in processes that take a while to shut down, boot readiness, the trash."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vfl_lab import lab, machine, system
from vfl_lab.plan import HostPlan

# A host whose shutdown lasts until every host of the test has been told to stop (each says so with a file in $TOLD):
# only a stop that tells them all at once ends them all, and one stopped alone is never done. SIGWINCH is the test's
# fence: its handler runs only after that of any SIGTERM sent before it (Python runs handlers in signal number order).
STAND_IN = """
import os, signal, sys, time
def term(*_):
    print('term', flush=True)
    open(os.path.join(os.environ['TOLD'], sys.argv[1]), 'w').close()
    while len(os.listdir(os.environ['TOLD'])) < int(os.environ['HOSTS']):
        time.sleep(0.01)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
signal.signal(signal.SIGWINCH, lambda *_: print('fence', flush=True))
print('ready', flush=True)
time.sleep(60)
"""


def plan(name: str) -> HostPlan:
    """Return a host plan whose only field that matters here is the machine name."""
    return HostPlan(lab="t", name=name, index=250, netns="n", veth="v", gateway="10.0.0.1", address="10.0.0.2")


def start_time(pid: int) -> str | None:
    """Return when a process started (field 22 of /proc/<pid>/stat), or None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
    except OSError:
        return None


def reap(proc: subprocess.Popen[bytes], delay: float) -> None:
    """Collect a stand-in's exit status `delay` s after it exits, as the init that adopts a real nspawn does."""
    with contextlib.suppress(ChildProcessError):
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        time.sleep(delay)
    proc.wait()


@pytest.fixture
def hosts(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], HostPlan]]]:
    """Start two stand-ins whose argv is that of `systemd-nspawn --machine=NAME`, collected request.param s after they
    exit (default at once); kill leftovers after the test."""
    env = {**os.environ, "STAND_IN": STAND_IN, "TOLD": str(tmp_path), "HOSTS": "2"}
    started = []
    for name in ("h1", "h2"):
        argv = ["bash", "-c", 'exec -a systemd-nspawn "$0" -c "$STAND_IN" "$1"', sys.executable, f"--machine={name}"]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env)
        threading.Thread(target=reap, args=(proc, getattr(request, "param", 0.0)), daemon=True).start()
        started.append((proc, plan(name)))
    for proc, _ in started:
        assert proc.stdout and proc.stdout.readline() == b"ready\n"  # its SIGTERM handler is in place
    yield started
    for proc, _ in started:
        proc.kill()
        proc.wait()


def test_hosts_power_off_at_once(hosts: list[tuple[subprocess.Popen[bytes], HostPlan]]) -> None:
    """Two hosts that each stop only once both were told to are both ended by SIGTERM: stop tells them at once."""
    machine.stop([(proc.pid, host) for proc, host in hosts], timeout=10)
    assert [proc.wait(timeout=5) for proc, _ in hosts] == [0, 0]


@pytest.mark.parametrize("hosts", [1.0], indirect=True)
def test_stop_returns_once_the_processes_are_gone(hosts: list[tuple[subprocess.Popen[bytes], HostPlan]]) -> None:
    """An exited nspawn process (its argv already gone) stays until its parent collects it: stop returns after that."""
    started = [start_time(proc.pid) for proc, _ in hosts]
    stopping = time.monotonic()
    machine.stop([(proc.pid, host) for proc, host in hosts], timeout=10)
    left = [start_time(proc.pid) == began for (proc, _), began in zip(hosts, started, strict=True)]
    assert left == [False, False], f"stop returned after {time.monotonic() - stopping:.2f}s"
    assert [proc.wait(timeout=5) for proc, _ in hosts] == [0, 0]


def test_a_host_slower_than_the_timeout_is_killed(hosts: list[tuple[subprocess.Popen[bytes], HostPlan]]) -> None:
    """A stop timeout shorter than the host's shutdown ends it with SIGKILL."""
    machine.stop([(hosts[0][0].pid, hosts[0][1])], timeout=0.3)
    assert hosts[0][0].wait(timeout=5) == -9
    assert hosts[1][0].poll() is None


def test_processes_not_of_the_lab_are_left_alone(hosts: list[tuple[subprocess.Popen[bytes], HostPlan]]) -> None:
    """A pid that is not the named host's nspawn (another machine name) gets no signal."""
    proc = hosts[0][0]
    machine.stop([(proc.pid, plan("other"))], timeout=0.3)
    # Instead of waiting a while for a stray SIGTERM: the fence is answered only after any SIGTERM sent before it.
    proc.send_signal(signal.SIGWINCH)
    assert proc.stdout and proc.stdout.readline() == b"fence\n"
    assert proc.poll() is None


def test_a_host_that_never_booted_is_nothing_to_stop() -> None:
    """A host whose start failed before nspawn ran is recorded with pid 0: stopping it signals nothing and raises nothing."""
    machine.stop([(0, plan("h1"))], timeout=0.3)


def booting_host(monkeypatch: pytest.MonkeyPatch, states: list[str]) -> None:
    """Make wait_ready see a live host whose systemctl prints `states` in turn and whose SSH port answers."""
    answers = iter(states)
    monkeypatch.setattr(machine, "process_cmdline", lambda pid: ["systemd-nspawn"])
    monkeypatch.setattr(machine, "container_init", lambda pid: 2)
    monkeypatch.setattr(machine, "in_machine", lambda init, argv, check: subprocess.CompletedProcess(
        argv, 0, stdout=next(answers) if "is-system-running" in argv else "foo.service failed\n", stderr=""))
    monkeypatch.setattr(machine.socket, "create_connection", lambda address, timeout: open("/dev/null"))


def test_a_host_still_marking_itself_booted_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """systemctl's "offline" and silence right after init appears mean booting, not failed (a race on busy CI)."""
    booting_host(monkeypatch, ["offline\n", "", "offline\n", "running\n"])
    machine.wait_ready(1, plan("h1"), timeout=10)


def test_a_degraded_host_fails_with_its_failed_units(monkeypatch: pytest.MonkeyPatch) -> None:
    """A boot that ends degraded names the host and the units that failed."""
    booting_host(monkeypatch, ["offline\n", "degraded\n"])
    with pytest.raises(machine.LabError, match="h1: systemd is degraded; failed units: foo.service failed"):
        machine.wait_ready(1, plan("h1"), timeout=10)


def test_init_counts_only_once_nspawn_has_executed_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """PID 1 of the machine still named like nspawn sees the host (systemctl would answer for it): not yet init."""
    names = {10: "systemd-nspawn", 11: "systemd-nspawn"}
    monkeypatch.setattr(system, "children", lambda pid: [11] if pid == 10 else [])
    monkeypatch.setattr(system, "namespace_pid", lambda pid: 1 if pid == 11 else pid)
    monkeypatch.setattr(system, "process_name", names.get)
    assert system.container_init(10) is None
    names[11] = "systemd"
    assert system.container_init(10) == 11


def test_only_old_trash_is_swept(tmp_path: Path) -> None:
    """Entries a running rm still deletes (moved in the last 10 min) are left to it; older or unnamed ones are swept."""
    now = 2_000 * 10**9
    for name in ("lab1-1999000000000", "lab2-1000000000000", "odd"):
        (tmp_path / name).mkdir()
    assert lab.stale_trash(tmp_path, now) == [tmp_path / "lab2-1000000000000", tmp_path / "odd"]
    assert lab.stale_trash(tmp_path / "missing", now) == []
