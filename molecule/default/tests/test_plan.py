"""playbooks/plan.yml on the lab hosts: a plan row per scene, whose KV cache is the one vLLM reports at start."""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import testinfra.host

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "shared"))

from playbooks import run_playbook  # noqa: E402

testinfra_hosts = ["ansible://gpu_hosts"]  # mdef4, the gateway, has tests/test_gateway.py


@functools.cache
def plan() -> str:
    """Run playbooks/plan.yml on every host of the lab once; return its output."""
    result = run_playbook(SCENARIO, "mdef", "gpu_hosts", "../../playbooks/plan.yml")
    assert result.returncode == 0, result.stdout[-3000:]
    return result.stdout


def test_plan_rows_match_the_kv_cache_vllm_reports(host: testinfra.host.Host) -> None:
    """Each scene's planned KV tokens on the cpu flavour are the 'CPU KV cache size' its running vLLM logged."""
    name = host.backend.get_hostname()
    output = plan()
    scenes = ["realtime", "batch"] if name == "mdef1" else ["realtime"]
    # Each host's table is printed under its name: scene | GPUs | util | budget | weights | reserve | KV | KV tokens.
    table = re.search(rf'ok: \[{name}\] => \{{\s*"msg": "([^"]*)"', output)
    assert table, f"no plan of {name} in: {output[-2000:]}"
    for scene in scenes:
        row = re.search(rf"\| {scene} +\| cpu +\|(?:[^|]*\|){{5}} *([\d,]+) *\|", table.group(1))
        assert row, f"no plan row for {scene} in: {table.group(1)}"
        logged = host.check_output(f"journalctl -u vllm-scene-{scene} -o cat --no-pager | grep -o "
                                   "'CPU KV cache size: [0-9,]* tokens' | tail -1")
        assert logged == f"CPU KV cache size: {row.group(1)} tokens"
