"""Command line of the lab tool: up, down, status, inventory, build-root."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from pathlib import Path

from . import lab as labs
from .plan import DISTROS, LabError, distro_for, mirror_for
from .rootfs import ensure_root
from .system import require_commands, require_root

DEFAULT_STATE_DIR = "/var/lib/vllm-fleet-lab"


def _parser() -> argparse.ArgumentParser:
    """Return the argument parser of the lab tool."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-dir", type=Path, default=Path(os.environ.get("VFL_LAB_DIR", DEFAULT_STATE_DIR)),
                        help="where roots, keys and host state live (env VFL_LAB_DIR)")
    common.add_argument("--lab", default=os.environ.get("VFL_LAB", "lab"), help="lab name (env VFL_LAB; default lab)")
    parser = argparse.ArgumentParser(prog="lab", description="Real systemd lab hosts for vllm-fleet (systemd-nspawn).")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", parents=[common], help="start hosts 1..N of the lab (harmless when they already run)")
    up.add_argument("--hosts", type=int, default=int(os.environ.get("VFL_LAB_HOSTS", "2")))
    up.add_argument("--gateways", type=int, default=int(os.environ.get("VFL_LAB_GATEWAYS", "0")),
                    help="gateway hosts after the GPU-role ones (group gateways)")
    up.add_argument("--first-index", type=int, default=1, help="lab index of the first host (its subnet)")
    for command in (up, sub.add_parser("build-root", parents=[common], help="build the cached root filesystem of a distro")):
        command.add_argument("--distro", default="debian12", help=f"one of {', '.join(sorted(DISTROS))}")
        command.add_argument("--mirror", help="apt mirror URL (default: read from /etc/apt)")
    down = sub.add_parser("down", parents=[common], help="stop the lab's hosts and remove their network and state")
    down.add_argument("--all", action="store_true", help="every lab, not just --lab")
    sub.add_parser("status", parents=[common], help="list the lab's hosts as JSON")
    sub.add_parser("inventory", parents=[common], help="print the Ansible inventory of the lab's running hosts")
    return parser


def _locked(state_dir: Path) -> object:
    """Take the lab's exclusive lock so two commands never change the same hosts at once."""
    state_dir.mkdir(parents=True, exist_ok=True)
    handle = (state_dir / "lock").open("w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def main(argv: list[str] | None = None) -> int:
    """Run one lab command; print a one-line error and return 1 on bad input."""
    args = _parser().parse_args(argv)
    lab = labs.Lab(args.state_dir, args.lab)
    try:
        if args.command == "inventory":
            print(json.dumps(lab.inventory(), indent=2))
            return 0
        if args.command == "status":
            print(json.dumps([{"name": r.plan.name, "address": r.plan.address, "index": r.plan.index,
                               "running": r.running, "pid": r.pid} for r in lab.records()], indent=2))
            return 0
        require_root()
        require_commands(labs.NEEDED_COMMANDS)
        lock = _locked(args.state_dir)
        started = time.monotonic()
        if args.command == "build-root":
            distro = distro_for(args.distro)
            root, built = ensure_root(args.state_dir / "roots", distro,
                                      mirror_for(distro, args.mirror or labs.read_mirror()))
            print(f"{'built' if built else 'cached'} {root} in {time.monotonic() - started:.1f}s")
        elif args.command == "up":
            started_names = {r.plan.name for r in labs.up(lab, args.hosts, args.first_index, args.distro, args.mirror,
                                                                   args.gateways)}
            for record in lab.records():
                state = "started" if record.plan.name in started_names else "already running"
                print(f"{record.plan.name} {record.plan.address} {state} (pid {record.pid})")
            print(f"lab {lab.name}: {args.hosts + args.gateways} host(s) up in {time.monotonic() - started:.1f}s")
        else:
            removed = sum(labs.down(each) for each in (labs.all_labs(args.state_dir) if args.all else [lab]))
            print(f"removed {removed} host(s) in {time.monotonic() - started:.1f}s")
        del lock
    except LabError as error:
        print(f"lab: error: {error}", file=sys.stderr)
        return 1
    return 0
