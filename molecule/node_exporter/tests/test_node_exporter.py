"""Real state of a lab host after the node_exporter role: systemd runs the host and the exporter answers."""

import pytest
import testinfra.host


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
