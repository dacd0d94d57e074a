"""tools/molecule_lanes.py: lanes checked against the scenarios, run at once, stopped after a failure, logs whole."""

from __future__ import annotations

import threading
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


def test_scenario_command_runs_molecule_at_the_niceness_asked() -> None:
    """A lane after the first runs its scenarios under nice, so the first lane's scenario gets the cores first."""
    assert molecule_lanes.scenario_command("vllm") == ["molecule", "test", "-s", "vllm"]
    assert molecule_lanes.scenario_command("vllm", 10) == ["nice", "-n", "10", "molecule", "test", "-s", "vllm"]


def test_lanes_run_at_once_and_each_log_is_printed_whole(tmp_path: Path) -> None:
    """a (lane 1) and c (lane 2) each wait until the other has started: lanes one after another would fail them."""
    printed: list[str] = []
    peers = {"a": "c", "c": "a"}

    def scenario(name: str) -> list[str]:
        """A scenario that marks its start, waits up to 30 s for its peer's (if any), then says it is done."""
        peer = tmp_path / f"{peers.get(name, name)}.started"
        return ["sh", "-c", f"touch {tmp_path}/{name}.started; i=0; while [ ! -e {peer} ] && [ $i -lt 300 ]; "
                            f"do sleep 0.1; i=$((i+1)); done; [ -e {peer} ] && echo done {name}"]

    runner = molecule_lanes.LaneRunner(scenario, tmp_path, printed.append)
    assert runner.run([["a", "b"], ["c"]]) is True
    assert "done a\n" in printed and (tmp_path / "c.log").read_text() == "done c\n"
    assert sorted(name for name, *_ in runner.results) == ["a", "b", "c"]
    assert "| b | 1 |" in runner.summary() and "passed" in runner.summary()


def test_phase_seconds_from_molecule_banners() -> None:
    """Each action lasts from its Executing to its Executed banner; destroy (run twice) is summed; an action that
    never ended (a failure) lasts until the scenario ended; other lines are ignored."""
    banners = [(0.0, "\x1b[36mINFO    \x1b[0m \x1b[32mdefault\x1b[0m ➜ \x1b[33mdestroy\x1b[0m: \x1b[36mExecuting\x1b[0m\n"),
               (1.0, "INFO     default ➜ destroy: Executed: Successful\n"),
               (1.5, "  │ some ➜ output: Executing\n"),
               (2.0, "INFO     default ➜ converge: Executing\n"),
               (12.0, "INFO     default ➜ converge: Executed: Successful\n"),
               (12.0, "INFO     default ➜ destroy: Executing\n"),
               (14.5, "INFO     default ➜ destroy: Executed: Successful\n"),
               (15.0, "INFO     default ➜ verify: Executing\n")]
    assert molecule_lanes.phase_seconds(banners, ended=20.0) == {"destroy": 3.5, "converge": 10.0, "verify": 5.0}


def test_summary_has_a_phase_table(tmp_path: Path) -> None:
    """The summary's second table holds each scenario's seconds per phase, from the banners it printed."""
    ticks = iter(range(100))
    command = ["sh", "-c", "echo 'INFO     x ➜ converge: Executing'; echo 'INFO     x ➜ converge: Executed: Successful'"]
    runner = molecule_lanes.LaneRunner(lambda n: command, tmp_path, lambda text: None, clock=lambda: float(next(ticks)))
    assert runner.run([["x"]]) is True
    assert "| scenario | create | prepare | check | converge | idempotence | verify | destroy |" in runner.summary()
    assert "| x |  |  |  | 1 |  |  |  |" in runner.summary()


def test_a_failure_stops_every_lane_from_starting_more(tmp_path: Path) -> None:
    """After 'bad' fails, neither its lane nor the other starts another scenario; the run fails."""
    printed: list[str] = []

    slow_started = threading.Event()

    def fake_molecule(name: str) -> list[str]:
        """A scenario run that prints its name; 'bad' fails once 'slow' has started, 'slow' ends after that."""
        if name == "bad":
            assert slow_started.wait(30)
        if name == "slow":
            slow_started.set()
            assert runner.failed.wait(30)
        return ["sh", "-c", f"echo running {name}; [ {name} != bad ]"]

    runner = molecule_lanes.LaneRunner(fake_molecule, tmp_path, printed.append)
    assert runner.run([["bad", "never1"], ["slow", "never2"]]) is False
    ran = {name: ok for name, _, _, ok in runner.results}
    assert ran == {"bad": False, "slow": True}
    assert any(line.startswith("==== molecule bad (lane 1): FAILED") for line in printed)
    assert "running bad\n" in printed
    assert runner.failures().startswith("==== why molecule bad failed") and "slow" not in runner.failures()
    assert runner.failures().endswith("running bad")


# A failed `lab up` as molecule logs it: boxed, coloured, Ansible's YAML results (a loop item, then the loop).
LAB_UP_FAILED = """  \x1b[2m│\x1b[0m TASK [Start the lab hosts]
  \x1b[2m\x1b[31m│\x1b[0m \x1b[0;31m[ERROR]: Task failed: Action failed.\x1b[0m
  \x1b[2m\x1b[31m│\x1b[0m \x1b[0;31mfailed: [localhost] (item=mdft) => \x1b[0m
  \x1b[2m\x1b[31m│\x1b[0m \x1b[0;31m    cmd:\x1b[0m
  \x1b[2m\x1b[31m│\x1b[0m \x1b[0;31m    - /repo/tools/lab\x1b[0m
  \x1b[2m\x1b[31m│\x1b[0m \x1b[0;31m    msg: non-zero return code\x1b[0m
  \x1b[2m\x1b[31m│\x1b[0m \x1b[0;31m    rc: 1\x1b[0m
  \x1b[2m\x1b[31m│\x1b[0m \x1b[0;31m    stderr: 'lab: error: mdft1: systemd is degraded; failed units:\x1b[0m
  \x1b[2m\x1b[31m│\x1b[0m \x1b[0;31m        foo.service'\x1b[0m
  \x1b[2m\x1b[31m│\x1b[0m \x1b[0;31m    stderr_lines: <omitted>\x1b[0m
  \x1b[2m\x1b[31m│\x1b[0m \x1b[1;31mfatal: [localhost]: FAILED! => \x1b[0m
  \x1b[2m\x1b[31m│\x1b[0m \x1b[1;31m    msg: All items completed\x1b[0m
  \x1b[2m│\x1b[0m
  \x1b[2m│\x1b[0m PLAY RECAP ****
"""


def test_the_reason_is_the_failed_result_without_its_noise() -> None:
    """The task and the item's msg, rc and stderr; not cmd, *_lines nor the loop's 'All items completed'."""
    assert molecule_lanes.failure_reason(LAB_UP_FAILED + "ok\n" * 500).splitlines() == [
        "TASK [Start the lab hosts]", "failed: [localhost] (item=mdft) =>", "    msg: non-zero return code",
        "    rc: 1", "    stderr: 'lab: error: mdft1: systemd is degraded; failed units:", "        foo.service'"]


def test_the_reason_adds_pytest_errors_falls_back_to_the_end_and_fits_its_width() -> None:
    """pytest's E lines (boxed by molecule) come after the result; a log without either gives its end."""
    reason = molecule_lanes.failure_reason(LAB_UP_FAILED + "  │ E   assert 'running' == 'failed'\n")
    assert reason.endswith("\nE   assert 'running' == 'failed'")
    assert molecule_lanes.failure_reason("\n".join(f"line {i}" for i in range(100))).splitlines()[0] == "line 85"
    clipped = molecule_lanes.failure_reason(LAB_UP_FAILED, width=60)
    assert len(clipped) == 60 and clipped.endswith(" [...]")


def test_main_refuses_lanes_that_leave_a_scenario_out(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --only, lanes must cover every scenario; the message says where to fix them."""
    assert molecule_lanes.main(["default"]) == 2
    assert "no lane runs 'vllm_scenes'" in capsys.readouterr().err
