"""playbooks/plan.yml on the example fleet, whose GPU facts are host variables: no host is contacted."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from conftest import REPO

EXAMPLE = REPO / "inventory" / "example"


def plan(*extra: str, inventory: Path = EXAMPLE) -> subprocess.CompletedProcess[str]:
    """Run plan.yml against the example inventory (or another); return the finished process."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory",
           "ANSIBLE_NOCOLOR": "1"}
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "playbooks/plan.yml", "-i", str(inventory), *extra]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_seed_scenario_is_planned_on_both_cards() -> None:
    """Every example scene fits, with the seeds' shape: AWQ weights, ~15 GiB of KV and ~70x concurrency at 4,096."""
    result = plan()
    assert result.returncode == 0, result.stdout[-3000:]
    host, cells = "", {}
    for line in result.stdout.splitlines():
        if found := re.match(r"ok: \[(\S+)\]", line):
            host = found[1]
        elif line.strip().startswith(("| realtime", "| batch")):
            cells[(host, line.split("|")[1].strip())] = line
    rows = list(cells.values())
    assert len(rows) == 4, result.stdout[-3000:]
    assert "| 1 RTX 3090 " in cells[("gpu-3090-a", "batch")] and "| 0.95 |" in cells[("gpu-3090-a", "batch")]
    assert "| 0 RTX 4090 " in cells[("gpu-4090-a", "realtime")]
    for row in rows:
        assert row.rstrip().endswith("| yes  |"), row
        assert "| 5.38 " in row, row
    assert result.stdout.count("57,344 B of KV per token") == 4


def test_impossible_plan_is_refused_before_any_change() -> None:
    """Llama 8B BF16 at 131,072 tokens and two engines on one card fail every host, naming variable and fix."""
    result = plan("-e", f"@{REPO / 'inventory' / 'extra-vars' / 'impossible-plan.yml'}")
    assert result.returncode != 0
    assert "failed=1" in result.stdout
    for needle in ("fatal: [gpu-3090-a]: ", "vllm_scenes_list[name=realtime].engine_args.max_model_len",
                   "lower max_model_len to", "give each scene its own GPU"):
        assert needle in result.stdout, needle
    assert "changed=0" in result.stdout and "changed=1" not in result.stdout


def recap(stdout: str) -> dict[str, dict[str, int]]:
    """Return the play recap's counters by host."""
    return {match[1]: {name: int(n) for name, n in re.findall(r"(\w+)=(\d+)", match[2])}
            for match in re.finditer(r"^(\S+)\s+: (ok=.*)$", stdout, re.MULTILINE)}


def one_bad_host(tmp_path: Path) -> Path:
    """Return a copy of the example inventory in which gpu-3090-a puts both its scenes on GPU 0."""
    inventory = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, inventory)
    host_vars = inventory / "host_vars" / "gpu-3090-a.yml"
    host_vars.write_text(host_vars.read_text().replace("gpus: [1]", "gpus: [0]"))
    return inventory


def test_a_bad_host_fails_alone(tmp_path: Path) -> None:
    """One host's impossible plan fails that host only: the others are planned and reach the play's end."""
    result = plan(inventory=one_bad_host(tmp_path))
    counters = recap(result.stdout)
    assert counters["gpu-3090-a"]["failed"] == 1, result.stdout[-3000:]
    assert counters["gpu-3090-b"]["failed"] == counters["gpu-4090-a"]["failed"] == 0, result.stdout[-3000:]
    # One line per problem, once, as host, variable and fix: no error block with its Origin repeating it.
    refusals = [line for line in result.stdout.splitlines() if line.startswith("fatal: [gpu-3090-a]: ")]
    assert len(refusals) == 1 and "give each scene its own GPU" in refusals[0], result.stdout[-3000:]
    assert "[ERROR]" not in result.stdout and "Origin:" not in result.stdout
    # The play's end names each failed host and why, in one line.
    summary = result.stdout.split("FAILED HOSTS")[1].strip().splitlines()[1:]
    assert len(summary) == 1 and summary[0].startswith("gpu-3090-a: GPU 0 (NVIDIA GeForce RTX 3090"), summary
    assert summary[0].endswith("(task: Refuse plans and options the hardware cannot run)")
    # The good hosts went on to the next play (a play keyword's "{{ ... }}" once made every host stop here).
    assert "PLAY [All or nothing" in result.stdout and "NO MORE HOSTS LEFT" not in result.stdout


def test_all_or_nothing_stops_every_host(tmp_path: Path) -> None:
    """With vllm_fleet_preflight_all_or_nothing (rollouts), the good hosts fail too, naming the bad one."""
    result = plan("-e", "vllm_fleet_preflight_all_or_nothing=true", inventory=one_bad_host(tmp_path))
    counters = recap(result.stdout)
    assert all(counters[host]["failed"] == 1 for host in ("gpu-3090-a", "gpu-3090-b", "gpu-4090-a")), result.stdout
    assert "fatal: [gpu-3090-b]: gpu-3090-b: not changed: gpu-3090-a failed its checks" in result.stdout


def test_bad_engine_arguments_are_one_line_each(tmp_path: Path) -> None:
    """A misspelt argument and a percentage for a fraction: one line each, the closest name, before any change."""
    inventory = one_bad_host(tmp_path)
    (inventory / "host_vars" / "gpu-4090-a.yml").write_text(
        (EXAMPLE / "host_vars" / "gpu-4090-a.yml").read_text() + "\nvllm_scenes_list:\n  - name: realtime\n"
        "    engine_args: {max_num_seq: 32, gpu_memory_utilization: '90%'}\n")
    result = plan(inventory=inventory)
    refusals = [line for line in result.stdout.splitlines() if line.startswith("fatal: [gpu-4090-a]: ")]
    assert refusals == [
        "fatal: [gpu-4090-a]: gpu-4090-a: vllm_scenes_list[name=realtime].engine_args.gpu_memory_utilization: '90%' is "
        "not a "
        "number such as 0.9, which vllm 0.33.0 takes here; give a number such as 0.9",
        "fatal: [gpu-4090-a]: gpu-4090-a: vllm_scenes_list[name=realtime].engine_args.max_num_seq: vllm 0.33.0 has no "
        "such "
        "argument; did you mean max_num_seqs?"], result.stdout[-3000:]
    assert recap(result.stdout)["gpu-3090-b"]["failed"] == 0 and "changed=1" not in result.stdout


def test_the_tensor_parallel_example_splits_over_two_3090s_and_one_card_is_refused() -> None:
    """examples/tp-32b: Qwen2.5-32B-AWQ at 32,768 tokens plans split over two RTX 3090 without P2P (the plan names the
    NCCL settings); on one card the same scene is refused before any change, naming host, variable and fix."""
    example = REPO / "examples" / "tp-32b"
    result = plan(inventory=example)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "split over 2 cards: 9.10 GiB of weights and" in result.stdout
    assert "no P2P between the cards: NCCL_P2P_DISABLE=1, custom all-reduce off" in result.stdout
    one_card = ('{"vllm_scenes_list": [{"name": "realtime", "gpus": [0], "api_key_var": "vault_realtime_api_key", '
                '"engine_args": {"max_model_len": 32768, "gpu_memory_utilization": 0.9}}]}')
    refused = plan("-e", one_card, inventory=example)
    assert refused.returncode != 0 and "failed=1" in refused.stdout
    assert "gpu-2x3090: vllm_scenes_list[name=realtime].engine_args.max_model_len: one 32,768-token" in refused.stdout
