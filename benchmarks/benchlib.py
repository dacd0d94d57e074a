"""Shared pieces of the benchmarks: timing a command, recording runs, medians and the Markdown table."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
Results = dict[str, list[float]]


class BenchError(Exception):
    """A benchmarked command failed; the message carries its output."""


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    """Run a command from the repository root and return its wall time in seconds; raise BenchError on failure."""
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()[-3000:]
        raise BenchError(f"`{' '.join(argv)}` failed ({proc.returncode}):\n{output}")
    return seconds


def record(results: Results, name: str, seconds: float) -> None:
    """Add one timing to the results and show it as progress on stderr."""
    results.setdefault(name, []).append(seconds)
    print(f"  {name}: {seconds:.2f}s (run {len(results[name])})", file=sys.stderr, flush=True)


def repeat(results: Results, name: str, runs: int, step: Callable[[], float]) -> None:
    """Record `runs` timings of one step under one benchmark name."""
    for _ in range(runs):
        record(results, name, step())


def summary(times: list[float]) -> dict[str, float]:
    """Return the median, min and max of a list of timings, rounded to milliseconds."""
    return {"median": round(statistics.median(times), 3), "min": round(min(times), 3), "max": round(max(times), 3)}


def markdown_table(results: Results) -> str:
    """Return the results as a Markdown table: benchmark, runs, median, min, max (seconds)."""
    lines = ["| benchmark | runs | median s | min s | max s |", "|---|---:|---:|---:|---:|"]
    for name, times in results.items():
        s = summary(times)
        lines.append(f"| {name} | {len(times)} | {s['median']:.2f} | {s['min']:.2f} | {s['max']:.2f} |")
    return "\n".join(lines)


def write_json(path: Path, results: Results) -> None:
    """Write the raw timings and their summaries as JSON."""
    data = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpus": os.cpu_count(),
            "benchmarks": {name: {"runs": [round(t, 3) for t in times], **summary(times)}
                           for name, times in results.items()}}
    path.write_text(json.dumps(data, indent=2) + "\n")
