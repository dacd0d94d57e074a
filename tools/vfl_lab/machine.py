"""One lab machine: an overlay over a cached root, booted with systemd-nspawn in its own netns."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from .plan import HostPlan, LabError
from .system import children, container_init, in_machine, process_cmdline, run

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
    key_type, key = (merged / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[:2]
    return f"{key_type} {key}"


def boot(merged: Path, plan: HostPlan, log: Path) -> int:
    """Start systemd-nspawn in the background and return its pid."""
    argv = ["systemd-nspawn", "--register=no", "--keep-unit", "--boot", "--console=passive", "--resolv-conf=off",
            f"--machine={plan.name}", f"--directory={merged}", f"--network-namespace-path=/run/netns/{plan.netns}"]
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


def stop(hosts: list[tuple[int, HostPlan]], timeout: float = 30.0) -> None:
    """Power hosts off cleanly and at once with SIGTERM to their nspawn processes; SIGKILL after the timeout."""
    ours = [(pid, plan) for pid, plan in hosts if is_ours(pid, plan)]
    # nspawn's helper processes must be gone too before the overlay can be unmounted.
    watched = [(p, plan) for pid, plan in ours for p in (pid, *children(pid)) if is_ours(p, plan)]
    for pid, _ in ours:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive := [(p, plan) for p, plan in watched if is_ours(p, plan)]:
        if time.monotonic() > deadline:
            for p, _ in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
        time.sleep(0.1)


def unmount(host_dir: Path) -> None:
    """Unmount a host's overlay if mounted."""
    merged = host_dir / "merged"
    if os.path.ismount(merged):
        run(["umount", str(merged)])
