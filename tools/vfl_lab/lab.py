"""Bring a lab's hosts up and down, and describe them; every step undoes itself on failure."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import fileserver, machine, network
from .plan import HostPlan, LabError, ansible_inventory, debian_mirror, distro_for, host_plan, mirror_for
from .rootfs import ensure_root
from .system import run

NEEDED_COMMANDS = ["debootstrap", "systemd-nspawn", "ip", "iptables", "ssh-keygen", "nsenter"]


@dataclass(frozen=True)
class HostRecord:
    """What the lab keeps on disk about one started host."""

    plan: HostPlan
    pid: int
    root: str
    host_key: str

    @property
    def running(self) -> bool:
        """Tell whether the host's nspawn process is still the one the lab started."""
        return machine.is_ours(self.pid, self.plan)


class Lab:
    """The on-disk state of one named lab under the lab state directory."""

    def __init__(self, state_dir: Path, name: str) -> None:
        """Point at lab `name` under `state_dir` without touching anything."""
        self.state_dir, self.name = state_dir, name
        self.dir = state_dir / "labs" / name
        self.key_file, self.known_hosts = self.dir / "id_ed25519", self.dir / "known_hosts"

    def records(self) -> list[HostRecord]:
        """Return the recorded hosts of this lab, in index order."""
        found = []
        for path in sorted(self.dir.glob("hosts/*/host.json")):
            data = json.loads(path.read_text())
            found.append(HostRecord(HostPlan(**data["plan"]), data["pid"], data["root"], data["host_key"]))
        return sorted(found, key=lambda r: r.plan.index)

    def host_dir(self, plan: HostPlan) -> Path:
        """Return the directory of one host's overlay, log and record."""
        return self.dir / "hosts" / plan.name

    def inventory(self, monitoring: bool = False) -> dict[str, object]:
        """Return the Ansible inventory of this lab's running hosts (monitoring: its gateways monitor the fleet)."""
        return ansible_inventory([r.plan for r in self.records() if r.running], str(self.key_file),
                                 str(self.known_hosts), monitoring)


def all_labs(state_dir: Path) -> list[Lab]:
    """Return every lab that has state on disk."""
    return [Lab(state_dir, d.name) for d in sorted((state_dir / "labs").glob("*")) if d.is_dir()]


def read_mirror() -> str:
    """Return the Debian mirror named by this machine's apt configuration."""
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    sources = {p.name: p.read_text() for p in files if p.is_file() and p.suffix in (".list", ".sources")}
    return debian_mirror(sources)


def _delete_in_background(paths: list[Path]) -> None:
    """Start one detached `rm` for paths; the lab command does not wait for it."""
    if paths:
        subprocess.Popen(["rm", "-rf", "--one-file-system", *map(str, paths)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def stale_trash(trash: Path, now_ns: int, age_s: int = 600) -> list[Path]:
    """Return what a deletion cut short (a reboot) left in the trash: entries moved there over age_s ago."""
    def moved_ns(entry: Path) -> int:
        """Return when an entry was moved to the trash, from its name (0 when the name does not say)."""
        stamp = entry.name.rpartition("-")[2]
        return int(stamp) if stamp.isdigit() else 0
    return sorted(e for e in trash.glob("*") if moved_ns(e) < now_ns - age_s * 10**9)


def _discard(host_dir: Path, trash: Path) -> None:
    """Move a host's directory to the trash and delete it in the background.

    A served host's overlay holds gigabytes in ~70,000 files (the release, caches): deleting them took 19 s per host,
    which every `lab down` waited for. A move on the same filesystem is instant.
    """
    if host_dir.exists():
        trash.mkdir(exist_ok=True)
        moved = trash / f"{host_dir.name}-{time.time_ns()}"
        host_dir.rename(moved)
        _delete_in_background([moved])


def _teardown(lab: Lab, record: HostRecord) -> None:
    """Stop one host (if still up) and remove its overlay, network and record."""
    machine.stop([(record.pid, record.plan)])
    host_dir = lab.host_dir(record.plan)
    machine.unmount(host_dir)
    network.destroy(record.plan)
    _discard(host_dir, lab.state_dir / "trash")


def _check_free(lab: Lab, plans: list[HostPlan], live: set[str]) -> None:
    """Fail before creating anything when a wanted lab index is held by another lab or by something else."""
    owners = {r.plan.index: (other.name, r.plan.name) for other in all_labs(lab.state_dir) for r in other.records()}
    for plan in plans:
        if plan.name in live:
            continue
        owner = owners.get(plan.index)
        if owner and owner[0] != lab.name:
            raise LabError(f"lab index {plan.index} is in use by host {owner[1]} of lab {owner[0]!r}: "
                           f"pick another --first-index, or run `lab down --lab {owner[0]}`")
        if not owner and network.index_in_use(plan):
            raise LabError(f"lab index {plan.index} is in use: netns or link {plan.netns} already exists "
                           "outside the lab; pick another --first-index")


def _release_shared(state_dir: Path) -> None:
    """Remove the NAT rules, the file server and the trash once no lab has hosts any more."""
    if not any(lab.records() for lab in all_labs(state_dir)):
        network.disable_nat(state_dir / "nat.json")
        fileserver.stop(state_dir)
        _delete_in_background(stale_trash(state_dir / "trash", time.time_ns()))


def _write_known_hosts(lab: Lab) -> None:
    """Record the SSH host key of every host of the lab so Ansible can check it strictly."""
    lines = [f"{r.plan.address} {r.host_key}\n" for r in lab.records()]
    lab.known_hosts.write_text("".join(lines))


def _start(lab: Lab, plan: HostPlan, root: Path, public_key: str) -> HostRecord:
    """Create one host's network and overlay and boot it; undo what was done if a step fails."""
    host_dir = lab.host_dir(plan)
    try:
        network.create(plan)
        merged = machine.mount_overlay(root, host_dir)
        host_key = machine.personalise(merged, plan, public_key)
        record = HostRecord(plan, machine.boot(merged, plan, host_dir / "console.log"), str(root), host_key)
        (host_dir / "host.json").write_text(json.dumps({**asdict(record), "plan": asdict(plan)}))
        return record
    except BaseException:
        _teardown(lab, HostRecord(plan, 0, str(root), ""))
        raise


def up(lab: Lab, count: int, first_index: int, distro_name: str, mirror: str | None,
       gateways: int = 0) -> list[HostRecord]:
    """Make sure the lab's count GPU-role hosts and its gateways run, starting the missing ones; return those started."""
    distro = distro_for(distro_name)
    plans = host_plan(lab.name, first_index, count, gateways)
    records = {r.plan.name: r for r in lab.records()}
    wanted = {p.name: p for p in plans}
    for record in records.values():
        if wanted.get(record.plan.name, record.plan) != record.plan or not Path(record.root).name.startswith(
                f"{distro.name}-"):
            raise LabError(f"lab {lab.name!r} already runs {record.plan.name} at index {record.plan.index} from "
                           f"{Path(record.root).name}: run `lab down --lab {lab.name}` first to change its layout")
    live = {name for name, r in records.items() if r.running}
    _check_free(lab, plans, live)
    created_dir = not lab.dir.exists()
    started: list[HostRecord] = []
    try:
        lab.dir.mkdir(parents=True, exist_ok=True)
        if not lab.key_file.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"vllm-fleet-lab-{lab.name}",
                 "-f", str(lab.key_file)])
        root, _ = ensure_root(lab.state_dir / "roots", distro, mirror_for(distro, mirror or read_mirror()))
        network.enable_nat(lab.state_dir / "nat.json")
        fileserver.ensure(lab.state_dir)
        public_key = lab.key_file.with_suffix(".pub").read_text()
        for plan in plans:
            if plan.name in live:
                continue
            if plan.name in records:
                _teardown(lab, records[plan.name])
            started.append(_start(lab, plan, root, public_key))
        for record in started:
            machine.wait_ready(record.pid, record.plan)
    except BaseException:
        for record in started:
            _teardown(lab, record)
        if created_dir:
            shutil.rmtree(lab.dir, ignore_errors=True)
        _release_shared(lab.state_dir)
        raise
    _write_known_hosts(lab)
    return started


def down(lab: Lab) -> int:
    """Stop every host of the lab and remove its state; return how many hosts were removed."""
    records = lab.records()
    # Their services stop in parallel (vLLM takes seconds to shut down), then each host is removed.
    machine.stop([(record.pid, record.plan) for record in records])
    for record in records:
        _teardown(lab, record)
    shutil.rmtree(lab.dir, ignore_errors=True)
    _release_shared(lab.state_dir)
    return len(records)
