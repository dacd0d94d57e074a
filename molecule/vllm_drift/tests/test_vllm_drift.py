"""Drift detection on a lab host, for real: the timer, a check in sync, a hand edit found as drift and left alone.

Tests run in file order: the in-sync check comes before the hand edit, which the last test undoes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import testinfra.host

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from units import MAX_EXPOSURE, exposure  # noqa: E402

STATUS = "/var/lib/vllm-fleet/drift/status.json"
CONFIG = "/etc/fleet-demo/demo.conf"
COMMIT = Path("/var/lib/vllm-fleet-lab/www/vllm-drift/fleet.commit")
MARKER = "/run/vllm-drift-test.marker"


def check(host: testinfra.host.Host) -> tuple[int, dict[str, Any]]:
    """Start one check the way the timer does, wait for it (oneshot); return its exit status and the status file."""
    host.run("systemctl reset-failed vllm-drift.service")
    started = host.run("systemctl start vllm-drift.service")
    code = int(host.check_output("systemctl show -p ExecMainStatus --value vllm-drift.service"))
    assert started.rc == (0 if code == 0 else 1), started.stderr
    return code, json.loads(host.file(STATUS).content_string)


def journal(host: testinfra.host.Host) -> str:
    """The service's journal, messages only."""
    return host.check_output("journalctl -u vllm-drift.service -o cat --no-pager")


def test_timer_enabled_and_active_on_schedule(host: testinfra.host.Host) -> None:
    """The timer is enabled, waiting, hourly with a random delay, and starts the oneshot check service."""
    timer = host.service("vllm-drift.timer")
    assert timer.is_enabled and timer.is_running
    props = dict(line.split("=", 1) for line in host.check_output(
        "systemctl show -p TimersCalendar -p RandomizedDelayUSec -p Unit -p Persistent vllm-drift.timer").splitlines())
    assert "OnCalendar=*-*-* *:00:00" in props["TimersCalendar"]
    assert (props["RandomizedDelayUSec"], props["Unit"], props["Persistent"]) == ("15min", "vllm-drift.service", "yes")
    service = dict(line.split("=", 1) for line in host.check_output(
        "systemctl show -p Type -p ProtectSystem -p ReadWritePaths vllm-drift.service").splitlines())
    assert (service["Type"], service["ProtectSystem"]) == ("oneshot", "strict")
    assert "/var/lib/vllm-fleet/drift" in service["ReadWritePaths"].split()


def test_units_pass_systemd_verify(host: testinfra.host.Host) -> None:
    """systemd reads both units without a complaint."""
    result = host.run("systemd-analyze verify /etc/systemd/system/vllm-drift.service /etc/systemd/system/vllm-drift.timer")
    assert result.rc == 0 and not result.stderr.strip(), result.stderr


def test_ansible_core_from_the_wheelhouse(host: testinfra.host.Host) -> None:
    """The check's venv has the pinned ansible-core; git comes from apt."""
    assert host.check_output("/opt/vllm-fleet-drift/bin/ansible-pull --version").startswith("ansible-pull [core 2.19.14]")
    assert host.package("git").is_installed


def test_check_holds_no_secret(host: testinfra.host.Host) -> None:
    """No vault password on the host (one left by an earlier release is removed); the config names none."""
    assert not host.file("/etc/vllm-fleet/drift/vault-password").exists
    directory = host.file("/etc/vllm-fleet/drift")
    assert (directory.user, directory.mode) == ("root", 0o700)
    config = json.loads(host.file("/etc/vllm-fleet/drift/config.json").content_string)
    assert not [key for key in config if "vault" in key] and config["gnupg_home"] is None


def test_unit_is_sandboxed(host: testinfra.host.Host) -> None:
    """systemd-analyze security scores the check's unit at most 2.5; it keeps no capability but reading others' files."""
    assert exposure(host, "vllm-drift.service") <= MAX_EXPOSURE
    bounding = host.check_output("systemctl show -p CapabilityBoundingSet --value vllm-drift.service")
    assert bounding.split() == ["cap_dac_read_search"]


def test_check_in_sync(host: testinfra.host.Host) -> None:
    """On the converged host the check says in sync at the pinned commit, writes the status, logs one line."""
    host.run(f"touch {MARKER}")
    code, status = check(host)
    commit = COMMIT.read_text().strip()
    assert (code, status["verdict"], status["changed"], status["failed"]) == (0, "in sync", 0, 0), status
    assert (status["ref"], status["commit"], status["hosts"]) == (commit, commit, ["mdft1"])
    assert status["repo"].endswith("/vllm-drift/fleet.git")
    lines = journal(host).splitlines()
    assert f"vllm-drift: in sync: no change (ref {commit}, commit {commit[:12]})" in lines
    assert not [line for line in lines if "Invoked with" in line]  # modules do not log to the journal
    assert host.file(STATUS).mode == 0o644
    assert host.file("/var/lib/vllm-fleet/drift/checkout/site.yml").exists


def test_check_writes_only_its_own_files(host: testinfra.host.Host) -> None:
    """Nothing outside the check's state directory changed during the check (but logs, systemd's and the test's own).

    PrivateTmp= has systemd make (and remove) the unit's own /var/tmp/systemd-private-* directory, hence /var/tmp.
    """
    changed = host.check_output(
        f"find /etc /opt /usr /root /srv /home /var -xdev -newer {MARKER} "
        "-not -path '/var/lib/vllm-fleet/drift*' -not -path '/var/log/*' "
        "-not -path '/var/lib/systemd/*' -not -path '/root/.ansible*' -not -path /var/tmp "
        "-not -path '/var/tmp/systemd-private-*' -print")
    assert changed == "", changed


def test_hand_edit_is_drift_and_is_not_repaired(host: testinfra.host.Host) -> None:
    """A config edited by hand: drift naming the task, the unit failed, the file left as edited, a journal line."""
    host.check_output(f"sed -i 's/workers = 2/workers = 8/' {CONFIG}")
    code, status = check(host)
    assert (code, status["verdict"], status["changed"]) == (3, "drift", 1), status
    assert status["changed_tasks"] == ["Write the demo config"]
    assert host.run("systemctl is-failed vllm-drift.service").stdout.strip() == "failed"
    assert "workers = 8" in host.file(CONFIG).content_string
    assert "vllm-drift: drift: 1 change: Write the demo config" in journal(host)
    log = host.file("/var/lib/vllm-fleet/drift/last-run.log")
    assert log.mode == 0o600 and "+workers = 2" in log.content_string
    assert "drift-lab-token" not in log.content_string  # the vaulted token stays out of the log
    assert host.file("/etc/fleet-demo/token").content_string == "drift-lab-token-4f1c\n"  # the rollout's, unread

    host.check_output(f"sed -i 's/workers = 8/workers = 2/' {CONFIG}")
    code, status = check(host)
    assert (code, status["verdict"]) == (0, "in sync"), status
