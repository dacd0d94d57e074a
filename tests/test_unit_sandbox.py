"""The sandbox every unit shares has one home (roles/vllm_fleet's _vllm_fleet_unit_sandbox): each unit template the
kit installs prints it, and none writes one of its directives itself."""

from __future__ import annotations

import re

import yaml

from conftest import REPO

SANDBOX = yaml.safe_load((REPO / "roles/vllm_fleet/vars/main.yml").read_text())["_vllm_fleet_unit_sandbox"]
UNITS = sorted(path for path in (REPO / "roles").glob("*/templates/*.j2")
               if re.search(r"^\[Service\]$", path.read_text(), re.M))
LOOP = "{% for directive in _vllm_fleet_unit_sandbox %}\n{{ directive }}\n{% endfor %}\n"


def test_the_scan_finds_every_unit_template() -> None:
    """Scenes, guards, HAProxy, the host collector, the drift check, the alert log and the distro units' drop-ins."""
    assert len(UNITS) >= 8, UNITS


def test_every_unit_prints_the_shared_sandbox_and_restates_none_of_it() -> None:
    """Each unit template prints the shared list once and writes none of its directives by hand."""
    for path in UNITS:
        text = path.read_text()
        assert text.count(LOOP) == 1, path
        restated = [line for line in text.splitlines() if line.strip() in SANDBOX]
        assert not restated, (path, restated)


def test_the_sandbox_holds_only_directives_systemd_knows_as_booleans_or_values() -> None:
    """Each entry is one Directive=value line."""
    assert all(re.fullmatch(r"[A-Z][A-Za-z]+=[A-Za-z0-9@ ~_-]+", line) for line in SANDBOX), SANDBOX
