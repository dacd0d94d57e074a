"""Real state of a lab host after the node_exporter role: systemd runs the host and the exporter answers."""

import sys
from pathlib import Path

import pytest
import testinfra.host

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from units import MAX_EXPOSURE, exposure  # noqa: E402


def test_systemd_is_pid1_and_running(host: testinfra.host.Host) -> None:
    """PID 1 is systemd and the boot finished with no failed unit."""
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"
    state = host.run("systemctl is-system-running")
    assert state.stdout.strip() == "running", host.run("systemctl --failed --no-legend").stdout


def test_node_exporter_unit_active_and_enabled(host: testinfra.host.Host) -> None:
    """The unit the node_exporter role installs is enabled and active."""
    service = host.service("prometheus-node-exporter")
    assert service.is_enabled
    assert service.is_running


@pytest.mark.parametrize("address", ["127.0.0.1:9100"])
def test_node_exporter_listens_on_loopback_only(host: testinfra.host.Host, address: str) -> None:
    """The exporter listens on loopback by default and nowhere else."""
    assert host.socket(f"tcp://{address}").is_listening
    assert not host.socket("tcp://0.0.0.0:9100").is_listening


def test_node_exporter_serves_metrics(host: testinfra.host.Host) -> None:
    """Its port answers HTTP with real node metrics."""
    body = host.check_output("curl -fsS http://127.0.0.1:9100/metrics")
    assert "node_uname_info" in body
    assert 'nodename="' + host.check_output("hostname") + '"' in body


# Collectors that work in a lab host without the sandbox: the sandbox must not stop any of them.
CORE_COLLECTORS = ["cpu", "diskstats", "filesystem", "loadavg", "meminfo", "netdev", "stat", "uname", "vmstat"]


def test_node_exporter_unit_is_sandboxed_without_losing_collectors(host: testinfra.host.Host) -> None:
    """The kit's drop-in brings the distribution's unit to at most 2.5 in systemd-analyze security, and the core
    collectors still succeed."""
    assert exposure(host, "prometheus-node-exporter.service") <= MAX_EXPOSURE
    body = host.check_output("curl -fsS http://127.0.0.1:9100/metrics")
    for collector in CORE_COLLECTORS:
        assert f'node_scrape_collector_success{{collector="{collector}"}} 1' in body, collector
