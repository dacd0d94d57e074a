"""tools/molecule_lanes.py: lanes checked against the scenarios, run at once, stopped after a failure, logs whole."""

from __future__ import annotations

import time
from pathlib import Path

import molecule_lanes
import pytest

SCENARIOS = ["a", "b", "c", "d"]


def test_lanes_are_comma_separated_names() -> None:
    """One argument per lane; empty names from stray commas are dropped."""
    assert molecule_lanes.parse_lanes(["a,b,", "c"]) == [["a", "b"], ["c"]]


@pytest.mark.parametrize(("lanes", "problem"), [
    ([["a", "b"], ["c", "d"]], ""),
    ([["a", "b"], ["c", "d", "e"]], "no scenario 'e'"),
    ([["a", "b"], ["c", "a", "d"]], "'a' is in more than one lane"),
    ([["a", "b"], ["c"]], "no lane runs 'd'"),
])
def test_every_scenario_runs_in_exactly_one_lane(lanes: list[list[str]], problem: str) -> None:
    """Unknown, repeated and forgotten scenarios are named; a full cover has no problem."""
    problems = molecule_lanes.lane_problems(lanes, SCENARIOS)
    assert (problem in problems[0]) if problem else problems == []


def test_a_subset_may_leave_scenarios_out_but_not_repeat_one() -> None:
    """With every=False (--only) forgotten scenarios are fine; unknown and repeated ones are not."""
    assert molecule_lanes.lane_problems([["a"], ["c"]], SCENARIOS, every=False) == []
    assert molecule_lanes.lane_problems([["a"], ["a", "e"]], SCENARIOS, every=False) == [
        "no scenario 'e' (molecule/e/molecule.yml)", "'a' is in more than one lane"]


def test_makefile_lanes_cover_the_repo_scenarios() -> None:
    """The lanes `make molecule` runs name every scenario of the repo once."""
    makefile = (molecule_lanes.REPO / "Makefile").read_text()
    spec = next(line for line in makefile.splitlines() if line.startswith("MOLECULE_LANES ?="))
    scenarios = sorted(p.parent.name for p in (molecule_lanes.REPO / "molecule").glob("*/molecule.yml"))
    assert molecule_lanes.lane_problems(molecule_lanes.parse_lanes(spec.split("=", 1)[1].split()), scenarios) == []


def test_lanes_run_at_once_and_each_log_is_printed_whole(tmp_path: Path) -> None:
    """Two lanes of one-second scenarios take about one second per scenario of the longer lane, not the sum."""
    printed: list[str] = []
    runner = molecule_lanes.LaneRunner(lambda n: ["sh", "-c", f"sleep 1; echo done {n}"], tmp_path, printed.append)
    started = time.monotonic()
    assert runner.run([["a", "b"], ["c"]]) is True
    assert time.monotonic() - started < 2.9
    assert "done a\n" in printed and (tmp_path / "c.log").read_text() == "done c\n"
    assert sorted(name for name, *_ in runner.results) == ["a", "b", "c"] and runner.results[-1][0] == "b"
    assert "| b | 1 |" in runner.summary() and "passed" in runner.summary()


def test_a_failure_stops_every_lane_from_starting_more(tmp_path: Path) -> None:
    """After 'bad' fails, neither its lane nor the other starts another scenario; the run fails."""
    printed: list[str] = []

    def fake_molecule(name: str) -> list[str]:
        """A scenario run that prints its name; 'bad' fails; 'slow' starts only once the other lane has failed."""
        if name == "slow":
            assert runner.failed.wait(30)
        return ["sh", "-c", f"echo running {name}; [ {name} != bad ]"]

    runner = molecule_lanes.LaneRunner(fake_molecule, tmp_path, printed.append)
    assert runner.run([["bad", "never1"], ["slow", "never2"]]) is False
    ran = {name: ok for name, _, _, ok in runner.results}
    assert ran == {"bad": False, "slow": True}
    assert any(line.startswith("==== molecule bad (lane 1): FAILED") for line in printed)
    assert "running bad\n" in printed
    assert runner.failures().startswith("==== why molecule bad failed") and "slow" not in runner.failures()


def test_the_failure_excerpt_keeps_why_then_the_end() -> None:
    """Ansible's fatal lines and pytest's E lines (boxed and coloured by molecule) from anywhere, then the log's end."""
    log = "\n".join(["TASK [x]", "fatal: [mdef1]: FAILED! => {}", *[f"ok {i}" for i in range(100)],
                     "  \x1b[2m│\x1b[0m E   assert 1 == 2", "  │ Every test passed", *[f"tail {i}" for i in range(5)]])
    excerpt = molecule_lanes.failure_excerpt(log, tail=5).splitlines()
    assert excerpt == ["fatal: [mdef1]: FAILED! => {}", "  │ E   assert 1 == 2", "[...]", *[f"tail {i}" for i in range(5)]]
    assert molecule_lanes.failure_excerpt("a\nb\nc", tail=2) == "b\nc"
    assert molecule_lanes.failure_excerpt("a\nb", tail=5) == "a\nb"
    assert molecule_lanes.failure_excerpt("fatal: x\nb", tail=0) == "fatal: x\n[...]"


def test_main_refuses_lanes_that_leave_a_scenario_out(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --only, lanes must cover every scenario; the message says where to fix them."""
    assert molecule_lanes.main(["default"]) == 2
    assert "no lane runs 'rollout'" in capsys.readouterr().err
