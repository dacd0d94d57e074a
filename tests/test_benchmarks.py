"""The benchmarks' pure parts: timing windows from the task_times callback, medians."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from benchlib import BenchError, summary  # noqa: E402
from rollout_bench import task_window  # noqa: E402

TIMES = [{"task": "vllm_state : Restore the snapshot", "host": "h1", "start": 100.0, "end": 101.0},
         {"task": "Wait until the restored scenes answer", "host": "h1", "start": 101.5, "end": 131.5},
         {"task": "Wait until the restored scenes answer", "host": "h2", "start": 90.0, "end": 99.0}]


def test_window_runs_from_the_first_tasks_start_to_the_last_tasks_end_on_one_host() -> None:
    """A role's task matches by its own name; other hosts do not count."""
    assert task_window(TIMES, "h1", "Restore the snapshot", "Wait until the restored scenes answer") == 31.5


def test_window_without_its_tasks_is_an_error() -> None:
    """A run that never restored cannot be timed as a restore."""
    with pytest.raises(BenchError, match="ran no tasks"):
        task_window(TIMES, "h2", "Restore the snapshot", "Wait until the restored scenes answer")


def test_summary_gives_median_min_max() -> None:
    """Medians, not means: one slow run does not move the figure."""
    assert summary([3.0, 1.0, 10.0]) == {"median": 3.0, "min": 1.0, "max": 10.0}


def test_scrape_cost_is_the_difference_of_medians_against_the_spread() -> None:
    """The monitoring benchmark reports each mode's median, their difference and the larger relative spread."""
    from monitoring_bench import verdict
    runs = {"off": [{"median_tpot_ms": 10.0, "output_throughput": 100.0},
                    {"median_tpot_ms": 12.0, "output_throughput": 90.0},
                    {"median_tpot_ms": 11.0, "output_throughput": 95.0}],
            "on": [{"median_tpot_ms": 11.0, "output_throughput": 94.0},
                   {"median_tpot_ms": 11.5, "output_throughput": 96.0},
                   {"median_tpot_ms": 11.0, "output_throughput": 92.0}]}
    tpot = verdict(runs)["median_tpot_ms"]
    assert (tpot["not scraping"], tpot["scraping every 15 s"]) == (11.0, 11.0)
    assert tpot["difference %"] == 0 and tpot["noise %"] == pytest.approx(2 / 11 * 100)
    assert verdict(runs)["output_throughput"]["difference %"] == pytest.approx(-1 / 95 * 100)


def test_latency_percentile_is_nearest_rank() -> None:
    """p50 and p99 of the gateway latency benchmark are nearest-rank percentiles of the sorted times."""
    from gateway_latency import percentile
    times = [float(n) for n in range(100, 0, -1)]
    assert (percentile(times, 0.5), percentile(times, 0.99), percentile(times, 1.0)) == (50.0, 99.0, 100.0)
    assert percentile([3.0], 0.99) == 3.0
