"""Idempotence and the in-sync skip (docs/in-sync.md): after a full converge, site.yml skips every host whose record
matches; a file changed by hand makes that host converge in full again (and be repaired), the other stays skipped.

Molecule converges with its own --skip-tags (notest, ...), which is not a full converge and records nothing: the
first run here is site.yml again in full, load tests included, on the converged lab. It must change nothing but the
record it writes: it is the scenario's idempotence check (molecule.yml has no idempotence step)."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import testinfra.host

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parents[1] / "molecule" / "shared"))

from playbooks import run_playbook  # noqa: E402
from rerun_hosts import LIMIT, RERUN_HOSTS, SITE_REPORTS, rerun_host  # noqa: E402

testinfra_hosts = ["ansible://gpu_hosts"]  # mdef4, the gateway, has tests/test_gateway.py

LAB = os.environ.get("VFL_LAB", "mdef")
DRIFTED_HOST = "mdef2"
FACT = "/etc/ansible/facts.d/vllm_fleet.fact"  # vllm_state writes it 0644; a mode change restarts nothing
SKIPPED = "in sync with its last full converge: skipped"
REPORTS = SITE_REPORTS / "in-sync"


def rerun(*extra: str) -> str:
    """Run site.yml on the rerun hosts with the in-sync skip on (converge.yml turns it off) and extra arguments;
    return the output."""
    # Reports go beside the converge's (tests/test_main_job.py reads those, of every host); their directories exist
    # before the first run as the converge's did, so that run still changes nothing but the record.
    for name in RERUN_HOSTS:
        (REPORTS / name).mkdir(parents=True, exist_ok=True)
        (REPORTS / name).chmod(0o755)
    result = run_playbook(SCENARIO, LAB, LIMIT, "converge.yml", "-e", "vllm_fleet_skip_in_sync=true", "-e",
                          f"vllm_verify_report_dir={REPORTS}", *extra)
    assert result.returncode == 0, result.stdout[-4000:]
    return result.stdout


def recap(output: str, host: str) -> dict[str, int]:
    """Return the PLAY RECAP counters of host."""
    line = re.search(rf"^{re.escape(host)}\s+:(.*)$", output, re.M)
    assert line, output[-3000:]
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", line.group(1))}


def tasks_with(output: str, host: str, results: str) -> set[str]:
    """Return the names of the tasks (and handlers) that reported one of the results (regex) for host."""
    found, task = set(), ""
    for line in output.splitlines():
        header = re.match(r"^(?:TASK|RUNNING HANDLER) \[(.*)\] \*+$|^PLAY \[", line)
        task = (header.group(1) or "") if header else task
        if task and re.match(rf"^(?:{results}): \[{re.escape(host)}[] ]", line):
            found.add(task)
    return found


def changed_tasks(output: str, host: str) -> set[str]:
    """Return the names of the tasks that reported a change for host."""
    return tasks_with(output, host, "changed")


def ran_role_tasks(output: str, host: str) -> bool:
    """Tell whether any task of the vllm_scenes role reported a result for host."""
    return any(task.startswith("vllm_scenes : ") for task in tasks_with(output, host, "ok|changed|skipping"))


def drift_by_hand() -> None:
    """Change the fact's mode on the drifted host behind Ansible's back (as an admin's chmod would)."""
    inventory = str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)
    command = [str(Path(sys.executable).parent / "ansible"), "-i", inventory, DRIFTED_HOST, "-m", "ansible.builtin.command",
               "-a", f"chmod 0600 {FACT}"]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "VFL_LAB": LAB}, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@functools.cache
def runs() -> tuple[str, str, str]:
    """Converge the converged lab in full and record it; drift one host's fact mode by hand and rerun; rerun again.
    Return the outputs (the two reruns without the load tests: the first run has them)."""
    recorded = rerun()
    drift_by_hand()
    repaired = rerun("--skip-tags", "verify")
    return recorded, repaired, rerun("--skip-tags", "verify")


def test_first_full_converge_changes_nothing_and_records(host: testinfra.host.Host) -> None:
    """With no record yet, the host converges in full, says so, load-tests its scenes, and changes nothing but the
    record it writes (the scenario converged it): site.yml is idempotent."""
    output = runs()[0]
    name = rerun_host(host)
    assert "converges: no full converge is recorded" in output, output[-4000:]
    assert ran_role_tasks(output, name), output[-4000:]
    assert any(task.startswith("vllm_verify : Load-test") for task in tasks_with(output, name, "ok")), output[-4000:]
    assert changed_tasks(output, name) == {"vllm_state : Record the host as this full converge leaves it"}
    assert recap(output, name)["failed"] == 0
    assert host.file("/var/lib/vllm-fleet/in-sync.json").mode == 0o600


def test_converged_hosts_are_skipped(host: testinfra.host.Host) -> None:
    """Right after its full converge, a host is in sync: no converge task runs, nothing changes. The other host's
    first rerun and the drifted host's rerun after its repair show it."""
    _, repaired, again = runs()
    name = rerun_host(host)
    output = again if name == DRIFTED_HOST else repaired
    assert SKIPPED in output and recap(output, name)["changed"] == 0, output[-4000:]
    assert not ran_role_tasks(output, name), output[-4000:]


def test_a_file_changed_by_hand_makes_its_host_converge(host: testinfra.host.Host) -> None:
    """The drifted host converges in full, says why, and gets its file back; the other host is still skipped."""
    _, repaired, again = runs()
    name = rerun_host(host)
    if name == DRIFTED_HOST:
        assert f"converges: path {FACT} changed" in repaired, repaired[-4000:]
        assert ran_role_tasks(repaired, name) and recap(repaired, name)["changed"] >= 1
        assert host.file(FACT).mode == 0o644
    else:
        assert not ran_role_tasks(repaired, name) and recap(repaired, name)["changed"] == 0
    assert not ran_role_tasks(again, name) and recap(again, name)["changed"] == 0  # the repair was recorded
