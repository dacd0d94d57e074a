"""Run one of a scenario's playbooks again from a testinfra test, the way molecule runs it, and reach any of its hosts."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import testinfra
import testinfra.host


@functools.cache
def lab_host(name: str) -> testinfra.host.Host:
    """Return a testinfra connection to one lab host through molecule's inventory (not only the test's own host)."""
    return testinfra.get_host(f"ansible://{name}", ansible_inventory=os.environ["MOLECULE_INVENTORY_FILE"])


def run_playbook(scenario: Path, lab: str, limit: str, playbook: str, *extra: str, timeout: float = 1200,
                 kit_output: bool = False, vault: bool = True) -> subprocess.CompletedProcess[str]:
    """Run scenario/playbook with molecule's inventory on one host of one lab; stdout and stderr merged, no colour;
    killed after timeout seconds (its return code then is negative); kit_output: the kit's own callback, as users
    see it (one line per failed host, and the FAILED HOSTS summary), instead of molecule's; vault false: without any
    Vault password, as a pull-request preview runs."""
    inventory = str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)  # holds the links to the lab's inventory
    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory, "--limit", limit,
               str(scenario / playbook), *extra]
    env = {**os.environ, "VFL_LAB": lab, "ANSIBLE_CALLBACK_RESULT_FORMAT": "json", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_FORCE_COLOR": "0"}
    if not vault:
        env.pop("ANSIBLE_VAULT_IDENTITY_LIST", None)
        env.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    if kit_output:
        repo = Path(__file__).resolve().parents[2]
        env.update(ANSIBLE_STDOUT_CALLBACK="vllm_fleet", ANSIBLE_CALLBACK_PLUGINS=str(repo / "plugins" / "callback"))
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as run:
        try:
            output, _ = run.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # A result, not an exception: the tests that share a run (functools.cache) must not each run it again.
            run.kill()
            output = run.communicate()[0] + f"\n(killed: still running after {timeout} s)\n"
    return subprocess.CompletedProcess(command, run.returncode, output)


def scene_health(name: str, timeout: float = 10) -> int:
    """Return the HTTP status of the realtime scene's /health, asked on its host (0 when nothing answers)."""
    answer = lab_host(name).run(f"curl -s -o /dev/null -w '%{{http_code}}' --max-time {timeout} http://127.0.0.1:8000/health")
    return int(answer.stdout.strip() or 0)
