"""The host's sweep runner: every step's load test in one process, stopped by two steps breaking the SLO in a row,
the time budget or a failing load test, its record written after each step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, load_as


sweep = load_as("sweep", REPO / "roles/vllm_tune/files/sweep.py")


def result(share: float, output: float = 300.0) -> dict[str, Any]:
    """Return a `vllm bench serve --goodput` result with this share of 10 requests/s within the SLO."""
    return {"request_goodput": 10 * share, "request_throughput": 10.0, "output_throughput": output, "completed": 40,
            "failed": 0, "p99_ttft_ms": 90.0, "p99_tpot_ms": 5.0, "duration": 2.5}


def plan(levels: list[int], budget: float = 600) -> dict[str, Any]:
    """Return a runner plan over these concurrencies, each step's args naming its concurrency."""
    return {"share": 0.99, "budget": budget,
            "steps": [{"concurrency": c, "args": [f"--max-concurrency={c}"]} for c in levels]}


class Clock:
    """A clock that advances by `tick` seconds each time it is read."""

    def __init__(self, tick: float) -> None:
        """Start at zero."""
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        """Return the time, then advance it."""
        self.now += self.tick
        return self.now


def by_level(shares: dict[int, float], seen: list[list[str]]) -> sweep.Bench:
    """Return a fake load test answering each concurrency with its share within the SLO, noting its args."""
    def bench(args: list[str]) -> dict[str, Any]:
        """Answer the step its args name."""
        seen.append(args)
        return result(shares[int(args[0].split("=")[1])])
    return bench


def test_every_step_runs_in_order_and_each_is_recorded_as_it_ends() -> None:
    """All levels held: every step runs once, with its own args; the record grows a step at a time."""
    seen: list[list[str]] = []
    records: list[int] = []
    swept = sweep.run(plan([1, 2, 4]), by_level({1: 1.0, 2: 1.0, 4: 1.0}, seen),
                      lambda s: records.append(len(s["steps"])), Clock(1))
    assert seen == [["--max-concurrency=1"], ["--max-concurrency=2"], ["--max-concurrency=4"]]
    assert [s["concurrency"] for s in swept["steps"]] == [1, 2, 4] and swept["stopped"] is None
    assert records == [1, 2, 3, 3]
    assert swept["steps"][0]["duration"] == 2.5 and swept["steps"][0]["seconds"] == 1.0


def test_two_steps_in_a_row_breaking_the_slo_end_the_sweep() -> None:
    """One breaking step is noise; the second in a row stops it before the next level."""
    seen: list[list[str]] = []
    swept = sweep.run(plan([1, 2, 4, 8, 16]), by_level({1: 1.0, 2: 0.5, 4: 1.0, 8: 0.9, 16: 1.0}, seen),
                      lambda s: None, Clock(1))
    assert [s["concurrency"] for s in swept["steps"]] == [1, 2, 4, 8, 16] and swept["stopped"] is None
    seen.clear()
    swept = sweep.run(plan([1, 2, 4, 8]), by_level({1: 1.0, 2: 0.5, 4: 0.4, 8: 1.0}, seen), lambda s: None, Clock(1))
    assert len(seen) == 3 and swept["stopped"] == "two steps in a row broke the SLO"


def test_the_budget_is_checked_before_each_step() -> None:
    """A step starts only while the budget lasts; a budget spent before the first runs none."""
    swept = sweep.run(plan([1, 2, 4], budget=5), by_level({1: 1.0, 2: 1.0, 4: 1.0}, []), lambda s: None, Clock(2))
    assert [s["concurrency"] for s in swept["steps"]] == [1]
    assert swept["stopped"] == "the time budget was spent before concurrency 2"
    assert sweep.run(plan([1], budget=0), by_level({}, []), lambda s: None, Clock(1))["stopped"] == (
        "the time budget was spent before concurrency 1")


@pytest.mark.parametrize(("failure", "told"), [
    (ConnectionError("Cannot connect\nto host 127.0.0.1:8000"), "to host 127.0.0.1:8000"),
    (SystemExit(2), "2"),
    (KeyError(""), "''"),
])
def test_a_failing_load_test_ends_the_sweep_with_its_last_line(failure: BaseException, told: str) -> None:
    """An exception, or vLLM's parser exiting, keeps the steps before it and names the concurrency and the error."""
    calls: list[int] = []

    def bench(args: list[str]) -> dict[str, Any]:
        """Hold the first step, fail the second."""
        calls.append(1)
        if len(calls) == 2:
            raise failure
        return result(1.0)
    swept = sweep.run(plan([1, 2, 4]), bench, lambda s: None, Clock(1))
    assert [s["concurrency"] for s in swept["steps"]] == [1]
    assert swept["stopped"] == f"the load test failed at concurrency 2: {told}"


def test_a_result_without_goodput_ends_the_sweep() -> None:
    """A load test run without --goodput cannot be judged: the sweep says so."""
    swept = sweep.run(plan([1]), lambda args: {"request_throughput": 1.0}, lambda s: None, Clock(1))
    assert swept["steps"] == [] and "reported no request_goodput" in swept["stopped"]


def test_the_record_replaces_the_file_whole(tmp_path: Path) -> None:
    """Each write leaves the JSON whole at the path and no part file beside it."""
    out = tmp_path / "realtime-deployed.sweep.json"
    write = sweep.writer(str(out))
    write({"steps": [], "stopped": None})
    write({"steps": [{"concurrency": 1}], "stopped": "two steps in a row broke the SLO"})
    assert json.loads(out.read_text())["steps"] == [{"concurrency": 1}]
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_the_budget_counts_the_import_of_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """main charges loading vLLM to the budget: a budget the import used up runs no step, and the record says so."""
    now = [0.0]
    monkeypatch.setattr(sweep.time, "monotonic", lambda: now[0])

    def slow_import() -> sweep.Bench:
        """Take 10 s to load, then answer every step within the SLO."""
        now[0] += 10
        return lambda args: result(1.0)
    monkeypatch.setattr(sweep, "vllm_bench", slow_import)
    plan_file, out = tmp_path / "p.json", tmp_path / "s.json"
    plan_file.write_text(json.dumps(plan([1, 2], budget=5)))
    assert sweep.main([str(plan_file), str(out)]) == 0
    assert json.loads(out.read_text()) == {"steps": [], "stopped": "the time budget was spent before concurrency 1"}
