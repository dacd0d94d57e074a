#!/usr/bin/env python3
"""Start, stop or check a vllm-fleet scene from its rendered systemd unit, on a host whose PID 1 is not systemd.

The GPU proof host (docs/gpu-proof.md) is a container without systemd. This runs the unit's very ExecStartPre and
ExecStart with its User, Group, EnvironmentFile, Environment, WorkingDirectory and RuntimeDirectory, so what is proven
is what the unit would run. systemd's sandboxing and restart policy are not reproduced.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

UNIT_DIR = Path("/etc/systemd/system")
STATE_DIR = Path("/run/vllm-fleet-scenes")
# What a service would get from the host rather than from its unit: the driver's library path, and the variables a
# shared GPU host sets for every program (KINDS.md of the device: keep NVLink multicast off).
DEFAULT_KEEP = ["PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "LANG", "NCCL_*", "NVSHMEM_*", "TORCH_SYMM_MEM_*"]


@dataclass
class Unit:
    """The [Service] settings of a scene unit that decide how its process runs."""

    exec_start: list[str]
    exec_start_pre: list[list[str]] = field(default_factory=list)
    user: str = "root"
    group: str = ""
    working_directory: str = "/"
    runtime_directory: str = ""
    environment_files: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    timeout_stop_sec: int = 90


def parse_unit(text: str) -> Unit:
    """Read the [Service] section of a unit file into a Unit."""
    settings: dict[str, list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    if "ExecStart" not in settings:
        raise ValueError("the unit has no ExecStart in its [Service] section")
    environment: dict[str, str] = {}
    for value in settings.get("Environment", []):
        for assignment in shlex.split(value):
            name, _, content = assignment.partition("=")
            environment[name] = content
    last = {key: values[-1] for key, values in settings.items()}
    return Unit(exec_start=shlex.split(last["ExecStart"]),
                exec_start_pre=[shlex.split(command) for command in settings.get("ExecStartPre", [])],
                user=last.get("User", "root"), group=last.get("Group", ""),
                working_directory=last.get("WorkingDirectory", "/"), runtime_directory=last.get("RuntimeDirectory", ""),
                environment_files=settings.get("EnvironmentFile", []), environment=environment,
                timeout_stop_sec=int(last.get("TimeoutStopSec", "90")))


def parse_environment_file(text: str) -> dict[str, str]:
    """Read KEY=VALUE lines as systemd's EnvironmentFile does (comments and blank lines skipped, quotes removed)."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        name, _, value = line.partition("=")
        values[name.strip()] = " ".join(shlex.split(value)) if value.strip() else ""
    return values


def kept_environment(current: dict[str, str], patterns: list[str]) -> dict[str, str]:
    """Return the caller's variables whose names match one of the patterns."""
    return {name: value for name, value in current.items() if any(fnmatch.fnmatchcase(name, p) for p in patterns)}


def service_environment(unit: Unit, kept: dict[str, str]) -> dict[str, str]:
    """Return the process environment: kept host variables, then the environment files, then Environment= lines."""
    environment = dict(kept)
    for path in unit.environment_files:
        optional = path.startswith("-")
        file = Path(path.lstrip("-"))
        if optional and not file.exists():
            continue
        environment.update(parse_environment_file(file.read_text(encoding="utf-8")))
    environment.update(unit.environment)
    return environment


def start(name: str, unit_dir: Path, log: Path, keep: list[str]) -> int:
    """Start the scene's process in its own session as the unit's user; return its PID."""
    unit = parse_unit((unit_dir / f"vllm-scene-{name}.service").read_text(encoding="utf-8"))
    if unit.runtime_directory:
        runtime = Path("/run") / unit.runtime_directory
        runtime.mkdir(mode=0o755, exist_ok=True)
        subprocess.run(["chown", f"{unit.user}:{unit.group or unit.user}", str(runtime)], check=True)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    environment = service_environment(unit, kept_environment(dict(os.environ), keep))
    for command in unit.exec_start_pre:
        subprocess.run(command, cwd=unit.working_directory, user=unit.user, group=unit.group or None, env=environment,
                       check=True)
    with log.open("ab") as output:
        process = subprocess.Popen(unit.exec_start, cwd=unit.working_directory, user=unit.user, group=unit.group or None,
                                   env=environment,
                                   stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    (STATE_DIR / f"{name}.pid").write_text(f"{process.pid}\n", encoding="utf-8")
    return process.pid


def stop(name: str, unit_dir: Path, kill_timeout: float = 10.0) -> bool:
    """Stop the scene's process group as systemd would (SIGTERM, then SIGKILL after TimeoutStopSec); wait till it is gone."""
    pid_file = STATE_DIR / f"{name}.pid"
    if not pid_file.exists():
        return False
    unit = parse_unit((unit_dir / f"vllm-scene-{name}.service").read_text(encoding="utf-8"))
    pid = int(pid_file.read_text(encoding="utf-8"))
    # systemd waits for every process of the unit, not just the main one: a member left running still holds the GPU.
    for sig, timeout in ((signal.SIGTERM, unit.timeout_stop_sec), (signal.SIGKILL, kill_timeout)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + timeout
        while group_members(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not group_members(pid):
            break
    pid_file.unlink()
    return True


def group_members(pgid: int) -> list[int]:
    """Return the processes of a process group that have not exited (zombies wait only for their parent)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(encoding="utf-8").rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def alive(pid: int) -> bool:
    """Tell whether a process (started by an earlier call, so not our child) still exists."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(") ", 1)[-1][:1]
    except (ProcessLookupError, FileNotFoundError):
        return False  # gone, or collected by its parent between the two looks
    return state not in ("Z", "X")


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and start or stop a scene."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("scene", help="scene name, as in vllm-scene-<scene>.service")
    parser.add_argument("--unit-dir", type=Path, default=UNIT_DIR)
    parser.add_argument("--log", type=Path, help="where the scene's output goes (default /var/log/vllm-scene-<scene>.log)")
    parser.add_argument("--keep", action="append", default=None, help=f"host variables kept (default {DEFAULT_KEEP})")
    args = parser.parse_args(argv)
    if args.action == "status":
        pid_file = STATE_DIR / f"{args.scene}.pid"
        running = pid_file.exists() and alive(int(pid_file.read_text(encoding="utf-8")))
        print(f"{args.scene}: {'running' if running else 'not running'}")
        return 0 if running else 1
    if args.action == "stop":
        print(f"{args.scene}: {'stopped' if stop(args.scene, args.unit_dir) else 'not running'}")
        return 0
    log = args.log or Path(f"/var/log/vllm-scene-{args.scene}.log")
    print(f"{args.scene}: started, pid {start(args.scene, args.unit_dir, log, args.keep or DEFAULT_KEEP)}, log {log}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
