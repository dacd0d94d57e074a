"""The lab tool against the real machine: hosts boot, Ansible reaches them, and nothing is left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import lab_vault
from conftest import REPO
from vfl_lab.cli import DEFAULT_STATE_DIR
from vfl_lab.system import children, process_cmdline

LAB, FIRST_INDEX = "itest", 201
LAB_TOOL = str(REPO / "tools" / "lab")
STATE = Path(DEFAULT_STATE_DIR)
ENV = {**os.environ, "VFL_LAB": LAB, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
       "ANSIBLE_VAULT_IDENTITY_LIST": lab_vault.IDENTITY}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root")


def lab(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the lab tool for the test lab."""
    return subprocess.run([LAB_TOOL, *args], env=ENV, text=True, capture_output=True, check=check, timeout=600)


def live_nspawn_machines() -> list[str]:
    """Return the --machine= names of running (non-zombie) nspawn processes."""
    names = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            state = next(line for line in status.read_text().splitlines() if line.startswith("State:"))
            argv = (status.parent / "cmdline").read_bytes().decode().split("\0")
        except (OSError, StopIteration):
            continue
        if "Z" not in state and argv[0].endswith("systemd-nspawn"):
            names += [a.split("=", 1)[1] for a in argv if a.startswith("--machine=")]
    return names


def start_time(pid: int) -> str | None:
    """Return when a process started (field 22 of /proc/<pid>/stat), or None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
    except OSError:
        return None


def nspawn_processes(pids: list[int]) -> dict[int, str | None]:
    """Return the start times of nspawn processes pids and of their nspawn children, by pid."""
    candidates = [*pids, *(child for pid in pids for child in children(pid))]
    return {pid: start_time(pid) for pid in candidates
            if any(arg.endswith("systemd-nspawn") for arg in process_cmdline(pid)[:1])}


@pytest.fixture(scope="module")
def two_hosts() -> Iterator[list[dict[str, object]]]:
    """Start two hosts of the test lab for the module and remove them afterwards."""
    lab("up", "--hosts=2", f"--first-index={FIRST_INDEX}")
    yield json.loads(lab("status").stdout)
    lab("down")


def test_hosts_boot_with_systemd_and_answer_ansible(two_hosts: list[dict[str, object]]) -> None:
    """Both hosts run, and `ansible -i inventory/lab gpu_hosts -m ping` reaches them over SSH."""
    assert [h["name"] for h in two_hosts] == ["itest1", "itest2"] and all(h["running"] for h in two_hosts)
    ping = subprocess.run([str(REPO / ".venv/bin/ansible"), "-i", "inventory/lab", "gpu_hosts", "-m",
                           "ansible.builtin.ping"], cwd=REPO, env=ENV, text=True, capture_output=True, check=False)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert ping.stdout.count("SUCCESS") == 2


def test_file_server_reaches_lab_hosts_only(two_hosts: list[dict[str, object]]) -> None:
    """Lab hosts fetch from the lab file server at 10.213.0.1:8213."""
    marker = STATE / "www" / "itest-marker.txt"
    marker.write_text("itest\n")
    try:
        url = "url=http://10.213.0.1:8213/itest-marker.txt return_content=true"
        fetch = subprocess.run([str(REPO / ".venv/bin/ansible"), "-i", "inventory/lab", "itest1", "-m",
                                "ansible.builtin.uri", "-a", url], cwd=REPO, env=ENV, text=True, capture_output=True,
                               check=False)
    finally:
        marker.unlink()
    assert fetch.returncode == 0 and "itest" in fetch.stdout, fetch.stdout + fetch.stderr


def test_second_up_is_harmless(two_hosts: list[dict[str, object]]) -> None:
    """Running up again keeps the same processes and starts nothing."""
    again = lab("up", "--hosts=2", f"--first-index={FIRST_INDEX}")
    assert again.stdout.count("already running") == 2
    assert [h["pid"] for h in json.loads(lab("status").stdout)] == [h["pid"] for h in two_hosts]


def test_index_in_use_is_refused_and_nothing_created(two_hosts: list[dict[str, object]]) -> None:
    """Another lab asking for a taken index gets a one-line error and leaves no state."""
    clash = subprocess.run([LAB_TOOL, "up", "--lab=iclash", "--hosts=1", f"--first-index={FIRST_INDEX + 1}"],
                           env=ENV, text=True, capture_output=True, check=False)
    assert clash.returncode == 1
    assert clash.stderr.strip().splitlines() == [
        f"lab: error: lab index {FIRST_INDEX + 1} is in use by host itest2 of lab 'itest': "
        "pick another --first-index, or run `lab down --lab itest`"]
    assert not (STATE / "labs" / "iclash").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["up", "--distro=fedora40"], "unknown distro 'fedora40': use one of debian12, ubuntu22.04, ubuntu24.04"),
    (["up", "--lab=Bad"], "lab name 'Bad' is invalid"),
    (["up", "--first-index=254", "--hosts=2"], "lab indexes 254..255 are out of range"),
])
def test_bad_input_is_one_line_and_exits_non_zero(args: list[str], message: str) -> None:
    """Bad input gets one line on stderr that says what to do, and exit 1."""
    result = lab(*args, check=False)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr


def test_without_root_says_so() -> None:
    """A non-root user is told the lab needs root."""
    # The checkout may sit below a directory the user cannot enter (a clone under /root, mode 0700): run a copy of the
    # tool from a directory anyone can read, as root installed it.
    tool = Path(tempfile.mkdtemp(prefix="vfl-lab-"))
    try:
        shutil.copy(LAB_TOOL, tool / "lab")
        shutil.copytree(REPO / "tools" / "vfl_lab", tool / "vfl_lab", ignore=shutil.ignore_patterns("__pycache__"))
        for path in [tool, *tool.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        result = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3",
                                 str(tool / "lab"), "up"], cwd=tool, text=True, capture_output=True, check=False)
    finally:
        shutil.rmtree(tool)
    assert result.returncode == 1, result.stderr
    assert "the lab needs root" in result.stderr


def test_down_leaves_nothing_behind() -> None:
    """After down: no nspawn process, netns, veth, mount or state of the lab; NAT gone when no lab is left; the
    hosts' files are gone from the trash soon after."""
    lab("up", "--hosts=2", f"--first-index={FIRST_INDEX}")
    nspawn = nspawn_processes([host["pid"] for host in json.loads(lab("status").stdout)])
    lab("down")
    # Right after down, not a while later: not even an exited nspawn its parent has yet to collect (`lab up` races it).
    assert len(nspawn) >= 2 and [pid for pid, began in nspawn.items() if start_time(pid) == began] == []
    assert not (STATE / "labs" / LAB).exists()
    deadline = time.monotonic() + 60
    while list((STATE / "trash").glob(f"{LAB}*")) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not list((STATE / "trash").glob(f"{LAB}*"))
    netns = subprocess.run(["ip", "netns", "list"], text=True, capture_output=True, check=True).stdout
    links = subprocess.run(["ip", "-o", "link"], text=True, capture_output=True, check=True).stdout
    assert not [m for m in live_nspawn_machines() if m.startswith(LAB)]
    assert f"vfl{FIRST_INDEX}" not in netns and f"vfl{FIRST_INDEX + 1}" not in netns
    assert f"vfl{FIRST_INDEX}@" not in links and f"vfl{FIRST_INDEX + 1}@" not in links
    assert f"/labs/{LAB}/" not in Path("/proc/mounts").read_text()
    if not list((STATE / "labs").glob("*")):
        rules = subprocess.run(["iptables-save"], text=True, capture_output=True, check=True).stdout
        assert "vllm-fleet-lab" not in rules
        lo = subprocess.run(["ip", "-o", "addr", "show", "dev", "lo"], text=True, capture_output=True, check=True)
        assert "10.213.0.1" not in lo.stdout
        assert not [p for p in Path("/proc").glob("[0-9]*/cmdline")
                    if b"http.server" in p.read_bytes() and b"vllm-fleet-lab" in p.read_bytes()]
