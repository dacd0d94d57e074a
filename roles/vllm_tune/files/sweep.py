# Copied to a host by playbooks/tune.yml and run with the scene's own release Python: standard library and vLLM only,
# nothing imported from the vllm_fleet package, which is not there.
"""Run one candidate's tuning sweep: each step's `vllm bench serve` load test in turn, in this one process.

Usage: sweep.py PLAN.json OUT.json

`vllm bench serve` spends most of a short step starting (on an H100, 24 s of a 29 s step: importing vLLM and torch),
so the steps share one start. PLAN is {"share": S, "budget": SECONDS, "steps": [{"concurrency": C, "args": [...]}]},
each step's args those of `vllm bench serve` (its --goodput among them). After each step OUT holds {"steps": [...],
"stopped": REASON or null}: the sweep stops once two steps in a row break the SLO for more than 1 - S of their
requests, when the budget is spent, or when a load test fails. Exit status 0 whenever OUT was written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

# What `vllm bench serve` reports, kept per step: latency percentiles (ms), throughputs and the load's own seconds.
STEP_FIGURES = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms",
                "output_throughput", "total_token_throughput", "request_throughput", "duration")

Bench = Callable[[list[str]], dict[str, Any]]


class SweepError(ValueError):
    """A load test's result the sweep cannot judge."""


def step(bench: dict[str, Any], concurrency: int) -> dict[str, Any]:
    """Return one sweep step from a `vllm bench serve --goodput` result: its figures, the share of requests within
    the SLO and the goodput (output tokens/s of those requests)."""
    throughput = float(bench.get("request_throughput") or 0)
    good = bench.get("request_goodput")
    if good is None or not math.isfinite(float(good)):
        raise SweepError("the load test reported no request_goodput: run vllm bench serve with --goodput")
    share = min(1.0, float(good) / throughput) if throughput else 0.0
    figures = {name: bench.get(name) for name in STEP_FIGURES}
    failed = int(bench.get("failed") or 0)
    return {"concurrency": concurrency, **figures, "completed": int(bench.get("completed") or 0), "failed": failed,
            "slo_share": share, "goodput": float(bench.get("output_throughput") or 0) * share}


def meets(sweep_step: dict[str, Any], share: float) -> bool:
    """Return whether a step held the SLO for at least `share` of its requests, none failing."""
    return sweep_step["failed"] == 0 and sweep_step["slo_share"] >= share


def stop_early(steps: list[dict[str, Any]], share: float) -> bool:
    """Return whether the sweep should stop: its last two steps both broke the SLO."""
    return len(steps) >= 2 and not meets(steps[-1], share) and not meets(steps[-2], share)


def last_line(error: BaseException) -> str:
    """Return an exception's last line of text, or its type's name when it has none."""
    lines = str(error).strip().splitlines()
    return lines[-1] if lines else type(error).__name__


def run(plan: dict[str, Any], bench: Bench, record: Callable[[dict[str, Any]], None],
        clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Run the plan's steps with `bench` until one of them ends the sweep, recording the sweep after each step."""
    started, share = clock(), float(plan["share"])
    swept: dict[str, Any] = {"steps": [], "stopped": None}
    for planned in plan["steps"]:
        level = planned["concurrency"]
        if clock() - started >= float(plan["budget"]):
            swept["stopped"] = f"the time budget was spent before concurrency {level}"
            break
        began = clock()
        try:
            found = step(bench(list(planned["args"])), level)
        except (Exception, SystemExit) as error:  # vLLM's argument parser exits; the sweep still says why
            swept["stopped"] = f"the load test failed at concurrency {level}: {last_line(error)}"
            break
        swept["steps"].append({**found, "seconds": round(clock() - began, 1)})
        record(swept)
        if stop_early(swept["steps"], share):
            swept["stopped"] = "two steps in a row broke the SLO"
            break
    record(swept)
    return swept


def vllm_bench() -> Bench:
    """Return `vllm bench serve` as a function of its arguments, its result the dict it saves."""
    # The host's release, which the controller does not have (vLLM 0.26 to 0.32 keep both here).
    from vllm.benchmarks import serve  # type: ignore[import-not-found]
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    serve.add_cli_args(parser)
    return lambda args: serve.main(parser.parse_args(args))


def writer(path: str) -> Callable[[dict[str, Any]], None]:
    """Return a function that replaces the file at path with a sweep as JSON, whole or not at all."""
    def write(swept: dict[str, Any]) -> None:
        """Write the sweep beside the file, then move it over it."""
        with open(f"{path}.part", "w", encoding="utf-8") as out:
            json.dump(swept, out)
        os.replace(f"{path}.part", path)
    return write


def main(argv: list[str] | None = None) -> int:
    """Run the sweep of the plan file into the out file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("out")
    args = parser.parse_args(argv)
    began = time.monotonic()
    with open(args.plan, encoding="utf-8") as plan_file:
        plan = json.load(plan_file)
    bench = vllm_bench()
    # The budget counts from this process's start: importing vLLM is part of the sweep's cost.
    plan["budget"] = float(plan["budget"]) - (time.monotonic() - began)
    swept = run(plan, bench, writer(args.out))
    print(json.dumps({"steps": len(swept["steps"]), "stopped": swept["stopped"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
