#!/usr/bin/env python3
"""Time rollouts on a three-host lab: a config change to one host, the same kind of change to all three (canary, then
a batch of two), and the restore of a canary whose change fails at start-up against a warm restart of its scene."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import REPO, BenchError, Lab, Results, markdown_table, record, summary, timed, write_json

LAB = Lab("mrlb", 245)  # lab indexes 245..247: far from `make lab-up`, molecule and the other benchmarks
UNIT = "vllm-scene-realtime.service"
# The rollout tests' light verification (three CPU vLLM servers share the machine).
LIGHT_VERIFY = REPO / "molecule" / "default" / "rollout" / "verify.yml"
ROLLOUT = "playbooks/rollout.yml"
SINGLE, FLEET = "config rollout, 1 host", "config rollout, 3 hosts (canary + batch of 2)"
RESTORE, WARM = "restore of the failed canary (files back, restart, healthy)", "warm restart of its scene"


def change(**engine_args: int) -> Path:
    """Write an extra-vars file that sets the realtime scene's engine args; return its path."""
    scenes = {"vllm_scenes_list": [{"name": "realtime", "api_key_var": "vault_lab_realtime_api_key",
                                    "engine_args": engine_args}]}
    handle, path = tempfile.mkstemp(prefix="rollout-bench-", suffix=".json")
    os.write(handle, json.dumps(scenes).encode())
    os.close(handle)
    return Path(path)


def rollout(limit: str, *extra_vars: Path, times: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the rollout on the lab with the light verification and the given extra-vars files; task times to `times`."""
    extra = [arg for path in (LIGHT_VERIFY, *extra_vars) for arg in ("-e", f"@{path}")]
    env = {**LAB.env, "ANSIBLE_CALLBACK_PLUGINS": str(REPO / "benchmarks" / "callback_plugins"),
           "ANSIBLE_CALLBACKS_ENABLED": "task_times", "VFL_TASK_TIMES": str(times or "")}
    return subprocess.run(LAB.playbook(ROLLOUT, limit, *extra), cwd=REPO, env=env, capture_output=True, text=True,
                          check=False)


def timed_rollout(limit: str, max_num_seqs: int) -> float:
    """Roll out a max_num_seqs change to limit; return its wall time; raise BenchError when it fails."""
    path = change(max_num_seqs=max_num_seqs)
    try:
        started = time.monotonic()
        done = rollout(limit, path)
        seconds = time.monotonic() - started
    finally:
        path.unlink()
    if done.returncode != 0:
        raise BenchError(f"rollout of max_num_seqs {max_num_seqs} to {limit} failed:\n{done.stdout[-3000:]}")
    return seconds


def task_window(times: list[dict[str, object]], host: str, first: str, last: str) -> float:
    """Return seconds from the start of task `first` to the end of task `last` on host (task_times callback)."""
    # A role's task is named "<role> : <task>".
    starts = [t["start"] for t in times if t["host"] == host and str(t["task"]).endswith(first)]
    ends = [t["end"] for t in times if t["host"] == host and str(t["task"]).endswith(last)]
    if not starts or not ends:
        raise BenchError(f"the rollout ran no tasks {first!r} and {last!r} on {host}")
    return float(ends[-1]) - float(starts[0])  # type: ignore[arg-type]


def restore_time() -> float:
    """Roll out the change that fails at start-up; return the canary's restore time (restore until healthy)."""
    failing = change(max_model_len=65536)  # passes the parser, fails at start-up: the model's limit is 4,096
    with tempfile.NamedTemporaryFile(suffix=".json") as times:
        try:
            done = rollout("gpu_hosts", failing, times=Path(times.name))
        finally:
            failing.unlink()
        if done.returncode == 0 or "rollout failed at step scenes" not in done.stdout:
            raise BenchError(f"the failing change did not fail on the canary as expected:\n{done.stdout[-3000:]}")
        return task_window(json.loads(Path(times.name).read_text()), f"{LAB.name}1", "Restore the snapshot",
                           "Wait until the restored scenes answer")


def pin_hosts() -> None:
    """Give each lab host one CPU of its own where there are enough (host n -> CPU (n-1) mod CPUs), every process of
    its container included; the processes it starts later inherit the pin."""
    hosts = json.loads(subprocess.run(LAB.tool("status"), capture_output=True, text=True, check=True).stdout)
    children: dict[int, list[int]] = {}
    table = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True, check=True).stdout
    for line in table.splitlines():
        pid, ppid = map(int, line.split())
        children.setdefault(ppid, []).append(pid)
    for n, host in enumerate(sorted(hosts, key=lambda h: h["name"])):
        tree, pending = [], [host["pid"]]
        while pending:
            pid = pending.pop()
            tree.append(pid)
            pending.extend(children.get(pid, []))
        for pid in tree:
            subprocess.run(["taskset", "-a", "-p", "-c", str(n % (os.cpu_count() or 1)), str(pid)], capture_output=True,
                           check=False)  # a process that ended meanwhile needs no pin


def main() -> int:
    """Run the rollout benchmarks on their own lab, always take it down, and print the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs of each benchmark (default 3)")
    parser.add_argument("--json", metavar="FILE", help="also write raw timings and medians to FILE")
    parser.add_argument("--pin-hosts", action="store_true",
                        help="a diagnostic: one CPU per lab host, as separate machines have their own (docs/benchmarks.md)")
    args = parser.parse_args()
    refusal = LAB.cannot_start("rollout_bench")
    if refusal:
        print(refusal, file=sys.stderr)
        return 1
    results: Results = {}
    try:
        timed(LAB.tool("up", "--hosts", "3", "--first-index", str(LAB.first_index)))
        if args.pin_hosts:
            pin_hosts()
        timed(LAB.playbook("site.yml", "gpu_hosts", "-e", f"@{LIGHT_VERIFY}"), LAB.env)
        for run in range(args.runs):
            # Each value differs from the one before on every host, so every rollout restarts what it covers.
            record(results, SINGLE, timed_rollout(f"{LAB.name}1", 10 + 4 * run))
            record(results, FLEET, timed_rollout("gpu_hosts", 12 + 4 * run))
            record(results, RESTORE, restore_time())
            record(results, WARM, LAB.restart_time(1, UNIT))
    except (BenchError, subprocess.CalledProcessError) as error:
        print(f"rollout_bench: {error}", file=sys.stderr)
        return 1
    finally:
        subprocess.run(LAB.tool("down"), capture_output=True, check=False)
        if args.json and results:
            write_json(REPO / args.json, results)
    print(markdown_table(results))
    if len(results) == 4:
        fleet, restore = (summary(results[FLEET])["median"] / summary(results[SINGLE])["median"],
                          summary(results[RESTORE])["median"] / summary(results[WARM])["median"])
        print(f"\n3-host rollout / 1-host rollout: {fleet:.2f}x (target <= 2.2x); "
              f"restore / warm restart: {restore:.2f}x (target <= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
