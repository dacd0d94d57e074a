"""One lab machine: an overlay over a cached root, booted with systemd-nspawn in its own netns."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from . import ansiballz_pyc
from .plan import HostPlan, LabError
from .system import Held, children, container_init, hold, in_machine, process_cmdline, release, run

# What systemctl says while the machine's systemd starts: nothing until its bus is open (0.3 s of a 1.2 s boot
# measured on an idle machine, longer on a busy one), "offline" until it has marked itself booted. Ask again.
BOOTING = {"", "offline"}


def mount_overlay(root: Path, host_dir: Path) -> Path:
    """Mount a copy-on-write view of the cached root for one host and return it."""
    upper, work, merged = (host_dir / d for d in ("upper", "work", "merged"))
    for d in (upper, work, merged):
        d.mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", "overlay", f"vfl-{host_dir.name}", "-o",
         f"lowerdir={root},upperdir={upper},workdir={work}", str(merged)])
    return merged


def personalise(merged: Path, plan: HostPlan, public_key: str) -> str:
    """Give a host its name, resolver, root SSH key and own host keys; return its host public key."""
    (merged / "etc/hostname").write_text(f"{plan.name}\n")
    (merged / "etc/hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {plan.name}\n::1 localhost\n")
    resolv = merged / "etc/resolv.conf"
    # Ubuntu roots link it to systemd-resolved's stub, which has no upstream in the lab: replace the link, not its target.
    if resolv.is_symlink():
        resolv.unlink()
    shutil.copyfile("/etc/resolv.conf", resolv)
    ssh_dir = merged / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(public_key)
    os.chmod(ssh_dir / "authorized_keys", 0o600)
    run(["ssh-keygen", "-A", "-f", str(merged)])
    install_ansiballz_cache(merged)
    key_type, key = (merged / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[:2]
    return f"{key_type} {key}"


def install_ansiballz_cache(merged: Path) -> None:
    """Make the host's system Python keep the bytecode of Ansible's module code (tools/vfl_lab/ansiballz_pyc.py)."""
    site = merged / "usr/lib/python3/dist-packages"
    if not site.is_dir():
        return
    shutil.copyfile(ansiballz_pyc.__file__, site / f"{ansiballz_pyc.MODULE_NAME}.py")
    (site / f"{ansiballz_pyc.MODULE_NAME}.pth").write_text(ansiballz_pyc.PTH_LINE)


def boot(merged: Path, plan: HostPlan, log: Path) -> int:
    """Start systemd-nspawn in the background and return its pid."""
    # CAP_NET_ADMIN acts on the host's own network namespace only: the kit loads nftables rules there, as on a server.
    argv = ["systemd-nspawn", "--register=no", "--keep-unit", "--boot", "--console=passive", "--resolv-conf=off",
            "--capability=CAP_NET_ADMIN", f"--machine={plan.name}", f"--directory={merged}",
            f"--network-namespace-path=/run/netns/{plan.netns}"]
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    return proc.pid


def wait_ready(pid: int, plan: HostPlan, timeout: float = 60.0) -> None:
    """Wait until systemd inside the host reports `running` and its SSH port answers."""
    deadline = time.monotonic() + timeout
    init = None
    while init is None:
        if not process_cmdline(pid):
            raise LabError(f"{plan.name}: systemd-nspawn exited during boot")
        if time.monotonic() > deadline:
            raise LabError(f"{plan.name}: no init process after {timeout:.0f}s")
        init = container_init(pid)
        time.sleep(0.1)
    while True:
        left = max(1, int(deadline - time.monotonic()))
        state = in_machine(init, ["timeout", str(left), "systemctl", "is-system-running", "--wait"], check=False)
        if state.stdout.strip() not in BOOTING or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if state.stdout.strip() != "running":
        failed = in_machine(init, ["systemctl", "--failed", "--plain", "--no-legend"], check=False).stdout
        raise LabError(f"{plan.name}: systemd is {state.stdout.strip() or 'not up'}; failed units: {failed.strip()}")
    while True:
        try:
            with socket.create_connection((plan.address, 22), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise LabError(f"{plan.name}: SSH at {plan.address}:22 does not answer") from None
            time.sleep(0.1)


def is_ours(pid: int, plan: HostPlan) -> bool:
    """Tell whether pid is still an nspawn process this lab started for the host."""
    argv = process_cmdline(pid)
    return bool(argv) and argv[0].endswith("systemd-nspawn") and f"--machine={plan.name}" in argv


def _hold_ours(pid: int, plan: HostPlan) -> Held | None:
    """Return a pidfd on pid when it is the host's nspawn process, else None."""
    process = hold(pid)
    # The pidfd comes first: a process still there after the argv check is the one whose argv was read, not a later
    # process given the pid of one that has gone.
    if process and is_ours(pid, plan) and not process.gone():
        return process
    if process:
        release([process])
    return None


def _wait_gone(held: list[Held], timeout: float, reap_timeout: float) -> list[Held]:
    """Wait until the processes are gone; return those left at the timeout, or reap_timeout after all had exited."""
    deadline, reaped_by = time.monotonic() + timeout, None
    while left := [process for process in held if not process.gone()]:
        # An exited process stays in the process table until its parent collects it: for nspawn the init that adopted
        # it when the `lab up` that started it exited (measured: up to 1.4 s later). One that never does is not the
        # lab's to wait for.
        if reaped_by is None and all(process.exited() for process in left):
            reaped_by = time.monotonic() + reap_timeout
        if time.monotonic() > min(deadline, reaped_by or deadline):
            return left
        time.sleep(0.02)
    return []


def stop(hosts: list[tuple[int, HostPlan]], timeout: float = 30.0, kill_timeout: float = 10.0,
         reap_timeout: float = 5.0) -> None:
    """SIGTERM the hosts' nspawn processes at once (a clean power-off), SIGKILL them after the timeout; wait till gone."""
    main: list[Held] = []
    held: list[Held] = []
    for pid, plan in hosts:
        if process := _hold_ours(pid, plan):
            main.append(process)
            # nspawn's helper processes must be gone too before the overlay can be unmounted.
            held += [process, *filter(None, (_hold_ours(child, plan) for child in children(pid)))]
    try:
        for process in main:
            process.signal(signal.SIGTERM)
        left = [process for process in _wait_gone(held, timeout, reap_timeout) if not process.exited()]
        for process in left:
            process.signal(signal.SIGKILL)
        running = [process.pid for process in _wait_gone(left, kill_timeout, reap_timeout) if not process.exited()]
        if running:
            raise LabError(f"systemd-nspawn processes {running} still run {kill_timeout:.0f}s after SIGKILL")
    finally:
        release(held)


def unmount(host_dir: Path) -> None:
    """Unmount a host's overlay if mounted."""
    merged = host_dir / "merged"
    if os.path.ismount(merged):
        run(["umount", str(merged)])
