"""The fleet's monitoring on the lab, run for real (tests run in file order): mmon2 is the gateway and the monitoring
host, mmon1 a GPU host serving realtime. Queries go to the real Prometheus through its HTTP API on mmon2."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import testinfra.host

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
sys.path[:0] = [str(REPO / "tools"), str(SCENARIO.parent / "shared")]

from gateway_load import https_call  # noqa: E402
from lab_vault import lab_secrets  # noqa: E402
from playbooks import lab_host, run_playbook  # noqa: E402
from units import MAX_EXPOSURE, exposure  # noqa: E402

from ansible_collections.vllm.fleet.plugins.plugin_utils import dashboard  # noqa: E402

LAB, GPU_HOST, MONITOR = "mmon", "mmon1", "mmon2"
PKI = Path(f"/var/lib/vllm-fleet-lab/pki/{LAB}")
MONITOR_TLS = "/etc/prometheus/vllm-fleet-tls"  # the monitoring host's copy of its client certificate
ALERT_LOG = "/var/log/vllm-fleet-alerts/alerts.jsonl"
REPORTS = REPO / "reports" / "molecule-vllm_monitoring"
SCENE_UNIT = "vllm-scene-realtime.service"
GUARD = "vllm-fleet-monitoring-guard.service"
PORTS = (9090, 9093, 9095)  # Prometheus, Alertmanager, the alert log


def prometheus(path: str, **params: str) -> Any:
    """Return the data of one Prometheus HTTP API call, made on the monitoring host (it listens on loopback)."""
    query = urllib.parse.urlencode(params)
    answer = json.loads(lab_host(MONITOR).check_output(f"curl -sf 'http://127.0.0.1:9090/api/v1/{path}?{query}'"))
    assert answer["status"] == "success", answer
    return answer["data"]


def query(expr: str) -> list[dict[str, Any]]:
    """Return the series an instant query returns."""
    return prometheus("query", query=expr)["result"]


def value(expr: str) -> float:
    """Return the value of a query that must return exactly one series."""
    result = query(expr)
    assert len(result) == 1, (expr, result)
    return float(result[0]["value"][1])


def address(name: str) -> str:
    """Return a lab host's address, as the inventory gives it."""
    return str(lab_host(name).ansible.get_variables()["ansible_host"])


def curl_from_controller(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run curl on the controller (off every lab host) against url; -w prints the status last."""
    return subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
                           "--cacert", str(PKI / "ca.crt"), *args, url], capture_output=True, text=True)


@functools.cache
def gateway_key() -> str:
    """Return the lab user's gateway key from the lab's Vault file."""
    return lab_secrets(REPO / "inventory/lab/group_vars/gateways/vault.yml")["vault_lab_gateway_key_lab_user"]


def load_through_gateway(requests: int = 24) -> None:
    """Send chat completions through the gateway as the lab user, so every scene and gateway series moves."""
    url = json.loads((REPO / "clients" / MONITOR / "lab-user.json").read_text())["base_url"]
    for n in range(requests):
        status, _, body = https_call(url + "/chat/completions", gateway_key(),
                                     {"model": "tiny-qwen2", "max_tokens": 8,
                                      "messages": [{"role": "user", "content": f"Count to {n}"}]},
                                     str(PKI / "ca.crt"), timeout=120)
        assert status == 200, body


def changed_tasks(output: str) -> list[str]:
    """Return the tasks a playbook's output says changed a host, as "TASK [...]: changed: [host]"."""
    task, found = "", []
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line.rstrip(" *")
        elif line.startswith("changed:"):
            found.append(f"{task}: {line}")
    return found


def wait_for(check: Any, timeout: float, step: float = 2) -> Any:
    """Call check until it returns something true or timeout seconds pass; return its last answer."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer or time.monotonic() > deadline:
            return answer
        time.sleep(step)


def test_a_full_converge_again_changes_nothing_on_the_monitoring_host() -> None:
    """site.yml again (its verification aside; outside molecule, so it records each host in sync, whose record the
    collector exports) changes nothing on the monitoring host."""
    result = run_playbook(REPO, LAB, "all", "site.yml", "--skip-tags", "verify")
    assert result.returncode == 0, result.stdout[-3000:]
    recap = [line for line in result.stdout.splitlines() if line.startswith(MONITOR) and "changed=" in line]
    assert recap and "changed=0" in recap[-1], [t for t in changed_tasks(result.stdout) if MONITOR in t]


def test_every_target_is_up_including_every_scene() -> None:
    """Prometheus scrapes the scene, both hosts' node_exporter, the gateway, itself and Alertmanager: all up."""
    def targets() -> list[dict[str, Any]]:
        active = prometheus("targets", state="active")["activeTargets"]
        return active if active and all(t["health"] == "up" for t in active) else []
    active = wait_for(targets, 60) or prometheus("targets", state="active")["activeTargets"]
    seen = sorted((t["labels"]["job"], t["labels"]["host"], t["labels"].get("scene", ""), t["health"]) for t in active)
    assert seen == [("alertmanager", MONITOR, "", "up"), ("gateway", MONITOR, "", "up"), ("node", GPU_HOST, "", "up"),
                    ("node", MONITOR, "", "up"), ("prometheus", MONITOR, "", "up"), ("vllm", GPU_HOST, "realtime", "up")]


def curl_from_monitor(url: str, *args: str) -> str:
    """Run curl on the monitoring host (an address every ingress admits) against url; return the status."""
    return lab_host(MONITOR).run(" ".join(["curl", "-s", "-o", "/dev/null", "-w", "'%{http_code}'", "--max-time", "10",
                                           "--cacert", f"{MONITOR_TLS}/fleet-ca.pem", *args, url])).stdout


def test_metrics_are_read_only_through_the_ingress_with_the_monitoring_certificate() -> None:
    """Off the host, a scene's metrics need the monitoring host's client certificate, from the monitoring host's own
    address (the ingress closes the controller's connections, certificate or not), and it reads metrics only; the
    scene's own port and Prometheus are not reachable from the controller at all."""
    gpu, monitor = address(GPU_HOST), address(MONITOR)
    cert = ["--cert", str(PKI / f"monitoring-client-{MONITOR}.crt"), "--key", str(PKI / f"monitoring-client-{MONITOR}.key")]
    own_cert = ["--cert", f"{MONITOR_TLS}/client.crt", "--key", f"{MONITOR_TLS}/client.key"]
    ingress = f"https://{gpu}:9443"
    assert curl_from_monitor(f"{ingress}/metrics/scene/realtime", *own_cert) == "200"
    assert curl_from_controller(f"{ingress}/metrics/scene/realtime", *cert).stdout == "000"  # not a monitor's address
    assert curl_from_monitor(f"{ingress}/metrics/scene/realtime") == "000"  # no client certificate
    assert curl_from_monitor(f"{ingress}/v1/chat/completions", *own_cert, "-X", "POST", "-d", "{}") == "405"
    assert curl_from_monitor(f"{ingress}/v1/models", *own_cert) == "404"
    assert curl_from_monitor(f"{ingress}/metrics/scene/other", *own_cert) == "404"
    assert curl_from_controller(f"https://{monitor}:9444/metrics/gateway", *cert).stdout == "200"
    assert curl_from_controller(f"https://{monitor}:9444/metrics/gateway").stdout == "000"
    assert curl_from_controller(f"http://{gpu}:8000/metrics").stdout == "000"
    assert curl_from_controller(f"http://{monitor}:9090/api/v1/targets").stdout == "000"


def test_every_dashboard_panel_answers_after_a_load() -> None:
    """Each panel's query returns a series from the lab's Prometheus after a load through the gateway (the GPU
    panels have no data on the cpu lab, the drift panel none without a drift check; the H200 shows the GPU ones)."""
    load_through_gateway()
    time.sleep(12)  # two scrapes of every target after the load
    empty = [(title, expr) for title, expr, needs in dashboard.panel_queries()
             if needs not in ("gpu", "drift") and not query(expr)]
    assert empty == []


def test_the_kits_state_is_exported_with_verifications_own_targets() -> None:
    """The verdict, the SLO targets verification held the scene to (the controller's report), the in-sync record,
    the gateway's per-key counters, and no GPU on the cpu lab: all are series in Prometheus."""
    report = json.loads((REPORTS / GPU_HOST / "realtime.json").read_text())
    scene = f'host="{GPU_HOST}",scene="realtime"'
    assert value(f"vllm_fleet_verification_passed{{{scene}}}") == 1
    for target in ("median_ttft", "p99_ttft", "median_tpot", "p99_tpot"):
        assert value(f'vllm_fleet_scene_slo_seconds{{{scene},target="{target}"}}') == \
            report["slo"]["targets"][f"{target}_ms"] / 1000
    assert value(f"vllm_fleet_scene_max_num_seqs{{{scene}}}") == 16
    assert time.time() - value(f'vllm_fleet_in_sync_record_timestamp_seconds{{host="{GPU_HOST}"}}') < 7200
    assert value(f'vllm_fleet_gpus{{host="{GPU_HOST}"}}') == 0
    # The collector reads the gateway's counters every 15 s: wait for a run after the load.
    requests = f'vllm_fleet_gateway_key_requests_total{{host="{MONITOR}",user="lab-user"}}'
    assert wait_for(lambda: value(requests) >= 24, 40), value(requests)


def test_a_stopped_scene_pages_within_two_minutes_and_resolves_when_back() -> None:
    """Stop the scene for real: VllmSceneDown reaches the receiver's file within 2 minutes; start it again: the
    resolved notification follows."""
    gpu, monitor = lab_host(GPU_HOST), lab_host(MONITOR)

    def notices(status: str) -> list[dict[str, Any]]:
        lines = monitor.run(f"cat {ALERT_LOG}").stdout.splitlines()
        return [a for line in lines for a in json.loads(line)["alerts"]
                if a["labels"]["alertname"] == "VllmSceneDown" and a["status"] == status
                and a["labels"].get("host") == GPU_HOST and json.loads(line)["received_at"] > stopped_at]

    stopped_at = time.time()
    gpu.check_output(f"systemctl stop {SCENE_UNIT}")
    try:
        firing = wait_for(lambda: notices("firing"), 120)
        assert firing, monitor.run(f"tail -3 {ALERT_LOG}").stdout
        assert firing[0]["labels"]["scene"] == "realtime"
    finally:
        gpu.check_output(f"systemctl start {SCENE_UNIT}")
    assert wait_for(lambda: notices("resolved"), 300), monitor.run(f"tail -3 {ALERT_LOG}").stdout


def test_scrapes_leave_no_line_in_the_scenes_journal() -> None:
    """Prometheus scraped the scene all along, yet its journal holds no access-log line of /metrics or /health."""
    assert value(f'count_over_time(up{{job="vllm",host="{GPU_HOST}"}}[2m])') >= 10
    journal = lab_host(GPU_HOST).check_output(f"journalctl -u {SCENE_UNIT} --no-pager -o cat")
    assert '"POST /v1/chat/completions' in journal  # the access log is on: only the polled paths are left out
    assert [line for line in journal.splitlines() if '"GET /metrics' in line or '"GET /health' in line] == []


def test_units_are_hardened(host: testinfra.host.Host) -> None:
    """Every unit the monitoring adds scores at most the kit's bar."""
    units = {MONITOR: ["prometheus.service", "prometheus-alertmanager.service", "vllm-fleet-alert-log.service",
                       "vllm-fleet-host-metrics.service", GUARD], GPU_HOST: ["vllm-fleet-host-metrics.service"]}
    scores = {(name, unit): exposure(lab_host(name), unit) for name, listed in units.items() for unit in listed}
    assert all(score <= MAX_EXPOSURE for score in scores.values()), scores


def local_status(user: str, port: int) -> str:
    """Return the HTTP status a local user gets from a port of the monitoring host on loopback ("000": refused)."""
    drop = "" if user == "root" else f"setpriv --reuid={user} --regid=nogroup --clear-groups "
    return lab_host(MONITOR).run(f"{drop}curl -s -m 5 -o /dev/null -w %{{http_code}} "
                                 f"http://127.0.0.1:{port}/-/healthy").stdout


def test_no_local_user_but_root_and_prometheus_reaches_prometheus_alertmanager_or_the_alert_log() -> None:
    """The monitoring guard resets another local user's connections (Alertmanager's API could silence every
    alert); root and prometheus get through, and Prometheus's own traffic (to Alertmanager, Alertmanager's to the
    alert log) is the paging test's."""
    monitor = lab_host(MONITOR)
    assert monitor.check_output(f"systemctl is-active {GUARD}") == "active"
    for port in PORTS:
        assert local_status("nobody", port) == "000", port
        assert local_status("prometheus", port) != "000", port
        assert local_status("root", port) != "000", port
    assert local_status("root", 9090) == "200" and local_status("prometheus", 9093) == "200"


def test_rules_and_config_pass_their_own_tools() -> None:
    """promtool and amtool accept what the role installed, on the host."""
    monitor = lab_host(MONITOR)
    monitor.check_output("promtool check rules /etc/prometheus/vllm-fleet.rules.yml")
    monitor.check_output("promtool check config /etc/prometheus/prometheus.yml")
    monitor.check_output("amtool check-config /etc/prometheus/alertmanager.yml")


def test_bad_inputs_are_refused_before_the_host_changes() -> None:
    """A retention that is no duration, a size that is no size, a receiver URL that is no URL and a target the
    monitoring host cannot reach each fail preflight with the host, the variable and the fix; nothing changes."""
    monitor = lab_host(MONITOR)
    before = monitor.check_output("sha256sum /etc/prometheus/* /etc/default/prometheus* 2>/dev/null | sha256sum")
    cases = [
        (["-e", "vllm_monitoring_retention_time=2weeks"], "vllm_monitoring_retention_time: '2weeks'"),
        (["-e", "vllm_monitoring_retention_size=10gigs"], "vllm_monitoring_retention_size: '10gigs'"),
        (["-e", '{"vllm_monitoring_receivers": [{"name": "ops", "webhook_url": "alerts.example.org"}]}'],
         "vllm_monitoring_receivers[ops]: webhook_url"),
        # An address on the monitoring host's own network that no host has: nothing answers there.
        (["-e", f"vllm_gateway_metrics_advertise_address={address(MONITOR).rpartition('.')[0]}.200"],
         f"{MONITOR} cannot reach {MONITOR} ("),
        (["-e", '{"vllm_monitoring_local_users": ["no-such-user"]}'],
         "vllm_monitoring_local_users names no-such-user, which this host has no user of")]
    for extra, message in cases:
        result = run_playbook(REPO, LAB, f"{MONITOR},{GPU_HOST}", "playbooks/monitoring.yml", *extra)
        assert result.returncode != 0, result.stdout[-2000:]
        assert message in result.stdout, (message, result.stdout[-3000:])
        assert f"{MONITOR}: " in result.stdout or f"{MONITOR} cannot" in result.stdout
    assert monitor.check_output("sha256sum /etc/prometheus/* /etc/default/prometheus* 2>/dev/null | sha256sum") == before


def test_monitoring_rerun_changes_nothing() -> None:
    """Run alone again after the refused runs, the monitoring and host metrics playbooks change nothing."""
    for playbook in ("playbooks/host_metrics.yml", "playbooks/monitoring.yml"):
        result = run_playbook(REPO, LAB, f"{MONITOR},{GPU_HOST}", playbook)
        assert result.returncode == 0, result.stdout[-3000:]
        recap = [line for line in result.stdout.splitlines() if "changed=" in line]
        assert recap and all("changed=0" in line for line in recap), changed_tasks(result.stdout)


def test_prometheus_off_loopback_answers_only_over_tls_with_the_password() -> None:
    """Listening on every address, Prometheus answers the controller only over TLS (the fleet CA's certificate) and
    with the password: 401 without it; it still scrapes itself; the password is in no process and only in files of
    root and group prometheus. A user in vllm_monitoring_local_users gets through the guard. (Last: the lab is
    destroyed after it.)"""
    result = run_playbook(REPO, LAB, f"{MONITOR},{GPU_HOST}", "playbooks/monitoring.yml",
                          "-e", "vllm_monitoring_listen_address=0.0.0.0",
                          "-e", "vllm_monitoring_web_password_var=vault_lab_monitoring_password",
                          "-e", '{"vllm_monitoring_local_users": ["nobody"]}')
    assert result.returncode == 0, result.stdout[-3000:]
    assert local_status("nobody", 9093) == "200"  # a listed local user gets through the guard
    password = lab_secrets(REPO / "inventory/lab/group_vars/monitoring/vault.yml")["vault_lab_monitoring_password"]
    assert password not in result.stdout
    url = f"https://{address(MONITOR)}:9090/api/v1/query?query=up"
    assert curl_from_controller(url).stdout == "401"
    assert curl_from_controller(url, "-u", f"admin:{password}x").stdout == "401"
    assert curl_from_controller(url, "-u", f"admin:{password}").stdout == "200"
    assert curl_from_controller(url.replace("https://", "http://")).stdout != "200"

    def itself_up() -> bool:
        answer = subprocess.run(["curl", "-sf", "--cacert", str(PKI / "ca.crt"), "-u", f"admin:{password}",
                                 url.replace("query=up", f"query=up%7Bjob%3D%22prometheus%22%2Chost%3D%22{MONITOR}%22%7D")],
                                capture_output=True, text=True).stdout
        return bool(answer) and [r["value"][1] for r in json.loads(answer)["data"]["result"]] == ["1"]
    assert wait_for(itself_up, 30)
    monitor = lab_host(MONITOR)
    holders = monitor.run("grep -rlF --file=/etc/prometheus/vllm-fleet-tls/web-password /etc /var/lib/prometheus "
                          "/usr/local /run").stdout.split()
    assert holders == ["/etc/prometheus/vllm-fleet-tls/web-password"]
    assert monitor.file(holders[0]).mode == 0o640 and monitor.file(holders[0]).group == "prometheus"
    assert password not in monitor.check_output("ps -eo args")
