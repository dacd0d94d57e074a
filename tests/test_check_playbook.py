"""playbooks/check.yml on copies of the example fleet, whose hosts' addresses (192.0.2.0/24) reach nothing: every
controller-side check, no host contacted."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from conftest import REPO
from example_fleet import example_fleet


def check(inventory: Path) -> subprocess.CompletedProcess[str]:
    """Run check.yml against an inventory; return the finished process."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory",
           "ANSIBLE_NOCOLOR": "1"}
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "playbooks/check.yml", "-i", str(inventory)]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_every_check_runs_without_contacting_a_host(tmp_path: Path) -> None:
    """Three GPU hosts and a gateway at addresses that reach nothing: all checks pass, no host unreachable (its speed
    is benchmarks/check_bench.py's)."""
    done = check(example_fleet(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "unreachable=1" not in done.stdout
    assert "Check the gateway's users" in done.stdout and "Refuse plans and options" in done.stdout


def test_bad_hosts_fail_alone_with_one_line_each(tmp_path: Path) -> None:
    """A misspelt engine argument on one host and no GPU facts on another: each fails alone, in one line; the gateway
    passes, saying it cannot route to the failed hosts (with no SSH it cannot read its record of their routes)."""
    inventory = example_fleet(tmp_path)
    host_vars = inventory / "host_vars"
    (host_vars / "gpu-4090-a.yml").write_text((host_vars / "gpu-4090-a.yml").read_text() + (
        "\nvllm_scenes_list:\n  - name: realtime\n    api_key_var: vault_realtime_api_key\n"
        "    engine_args: {max_num_seq: 32}\n"))
    b = yaml.safe_load((host_vars / "gpu-3090-b.yml").read_text())
    b.pop("vllm_fleet_gpus")
    (host_vars / "gpu-3090-b.yml").write_text(yaml.safe_dump(b))
    done = check(inventory)
    summary = done.stdout.split("FAILED HOSTS")[1].strip().splitlines()[1:]
    assert [line.split(":")[0] for line in summary] == ["gpu-3090-b", "gpu-4090-a"], done.stdout[-3000:]
    assert "vllm_fleet_gpus is not set, so checking this host would mean asking it" in summary[0]
    assert "engine_args.max_num_seq: vllm 0.33.0 has no such argument; did you mean max_num_seqs?" in summary[1]
    for host in ("gpu-3090-b", "gpu-4090-a"):
        assert f"{host}: not routed: its scenes are unknown to this run" in done.stdout
    assert "gpu-3090-a                 : ok=" in done.stdout and "unreachable=1" not in done.stdout
