"""Molecule scenarios: each has real verify tests and lab hosts that cannot clash with another lab."""

import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO

SCENARIOS = sorted(p.parent for p in (REPO / "molecule").glob("*/molecule.yml"))
MAIN_LAB_INDEXES = range(1, 21)  # `make lab-up` and the lab tests of users stay below this bound


def platforms(scenario: Path) -> list[dict[str, object]]:
    """Return the platforms a scenario declares."""
    return yaml.safe_load((scenario / "molecule.yml").read_text())["platforms"]


def test_there_are_scenarios() -> None:
    """The suite has molecule scenarios to run."""
    assert SCENARIOS


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.name)
def test_scenario_has_testinfra_tests(scenario: Path) -> None:
    """molecule skips verify silently without tests, so every scenario must have test functions."""
    sources = [p.read_text() for p in (scenario / "tests").glob("test_*.py")]
    assert any(re.search(r"^def test_\w+\(host", s, re.M) for s in sources), f"{scenario.name} has no testinfra test"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.name)
def test_platforms_are_lab_hosts(scenario: Path) -> None:
    """Platforms are named <lab><n>, numbered in order within their lab, and share one first lab index per lab."""
    count: dict[str, int] = {}
    first: dict[str, int] = {}
    for platform in platforms(scenario):
        lab = str(platform["lab"])
        count[lab] = count.get(lab, 0) + 1
        assert platform["name"] == f"{lab}{count[lab]}"
        assert isinstance(platform["lab_index"], int) and platform["lab_index"] not in MAIN_LAB_INDEXES
        assert first.setdefault(lab, platform["lab_index"]) == platform["lab_index"]


def test_scenarios_use_disjoint_lab_indexes() -> None:
    """No two scenarios claim the same lab index, so one never tears down another's hosts."""
    claimed: dict[int, str] = {}
    for scenario in SCENARIOS:
        hosts = platforms(scenario)
        first = int(hosts[0]["lab_index"])  # type: ignore[arg-type]
        for index in range(first, first + len(hosts)):
            assert index not in claimed, f"{scenario.name} and {claimed[index]} both use lab index {index}"
            claimed[index] = scenario.name
