"""The fleet's monitoring logic: scrape targets from the inventory, the alert rules under promtool (every alert fires
on its condition and stays quiet off it), SLO thresholds equal to verification's, Alertmanager's config and inputs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards, monitoring, verify

PROMTOOL, AMTOOL = "/usr/bin/promtool", "/usr/bin/amtool"
SCENE = {"job": "vllm", "host": "h1", "scene": "realtime"}
QUIET_SCENE = {"job": "vllm", "host": "h2", "scene": "realtime"}
NODE, QUIET_NODE = {"job": "node", "host": "h1"}, {"job": "node", "host": "h2"}


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    """Return one promtool input series."""
    return {"series": name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}", "values": values}


def histogram(name: str, labels: dict[str, str], bounds: list[float], bucket: int) -> list[dict[str, str]]:
    """Return a histogram's buckets whose observations, 60 a minute, all fall in bucket (an index into bounds)."""
    out = []
    for index, bound in enumerate([*bounds, float("inf")]):
        le = "+Inf" if bound == float("inf") else repr(bound)
        out.append(series(f"{name}_bucket", {**labels, "le": le}, "0+60x30" if index >= bucket else "0x30"))
    return out


# Each alert: input series (one firing case, one quiet case) and the labels of the alert that must fire.
CASES: dict[str, tuple[list[dict[str, str]], dict[str, str]]] = {
    "VllmSceneDown": ([series("up", SCENE, "0x30"), series("up", QUIET_SCENE, "1x30")], SCENE),
    "VllmKvCacheFull": ([series("vllm:kv_cache_usage_perc", SCENE, "0.95x30"),
                         series("vllm:kv_cache_usage_perc", QUIET_SCENE, "0.85x30")],
                        {"host": "h1", "scene": "realtime"}),
    "VllmRequestsQueued": ([series("vllm:num_requests_waiting", SCENE, "20x30"),
                            series("vllm:num_requests_waiting", QUIET_SCENE, "16x30"),
                            series("vllm_fleet_scene_max_num_seqs", {**NODE, "scene": "realtime"}, "16x30"),
                            series("vllm_fleet_scene_max_num_seqs", {**QUIET_NODE, "scene": "realtime"}, "16x30")],
                           {"host": "h1", "scene": "realtime"}),
    "VllmPreemptions": ([series("vllm:num_preemptions_total", SCENE, "0+5x30"),
                         series("vllm:num_preemptions_total", QUIET_SCENE, "3x30")], {"host": "h1", "scene": "realtime"}),
    "GpuTooHot": ([series("vllm_fleet_gpu_temperature_celsius", {**NODE, "gpu": "0"}, "84x30"),
                   series("vllm_fleet_gpu_temperature_limit_celsius", {**NODE, "gpu": "0"}, "83x30"),
                   series("vllm_fleet_gpu_temperature_celsius", {**QUIET_NODE, "gpu": "0"}, "82x30"),
                   series("vllm_fleet_gpu_temperature_limit_celsius", {**QUIET_NODE, "gpu": "0"}, "83x30")],
                  {"host": "h1", "gpu": "0"}),
    "GpuMemoryBeyondPlan": ([series("vllm_fleet_gpu_memory_used_bytes", {**NODE, "gpu": "0"}, "23e9x30"),
                             series("vllm_fleet_gpu_memory_planned_bytes", {**NODE, "gpu": "0"}, "22e9x30"),
                             series("vllm_fleet_gpu_memory_used_bytes", {**QUIET_NODE, "gpu": "0"}, "21e9x30"),
                             series("vllm_fleet_gpu_memory_planned_bytes", {**QUIET_NODE, "gpu": "0"}, "22e9x30")],
                            {"host": "h1", "gpu": "0"}),
    "GpuDriverUnhealthy": ([series("vllm_fleet_nvidia_smi_up", {**NODE, "reason": "Driver/library version mismatch"},
                                   "0x30"),
                            series("vllm_fleet_nvidia_smi_up", {**QUIET_NODE, "reason": ""}, "1x30")],
                           {**NODE, "reason": "Driver/library version mismatch"}),
    "ModelDiskLow": ([series("node_filesystem_avail_bytes", {**NODE, "mountpoint": "/"}, "5x30"),
                      series("node_filesystem_size_bytes", {**NODE, "mountpoint": "/"}, "100x30"),
                      series("node_filesystem_avail_bytes", {**QUIET_NODE, "mountpoint": "/"}, "50x30"),
                      series("node_filesystem_size_bytes", {**QUIET_NODE, "mountpoint": "/"}, "100x30")],
                     {**NODE, "mountpoint": "/"}),
    "GatewayServerErrors": ([series("haproxy_frontend_http_responses_total",
                                    {"job": "gateway", "host": "g1", "proxy": "api", "code": "5xx"}, "0+10x30"),
                             series("haproxy_frontend_http_responses_total",
                                    {"job": "gateway", "host": "g1", "proxy": "api", "code": "2xx"}, "0+90x30"),
                             series("haproxy_frontend_http_responses_total",
                                    {"job": "gateway", "host": "g2", "proxy": "api", "code": "5xx"}, "0+1x30"),
                             series("haproxy_frontend_http_responses_total",
                                    {"job": "gateway", "host": "g2", "proxy": "api", "code": "2xx"}, "0+99x30")],
                            {"host": "g1"}),
    "GatewayKeyRateLimited": ([series("vllm_fleet_gateway_key_rate_limited_total", {**NODE, "user": "a"}, "0+20x30"),
                               series("vllm_fleet_gateway_key_requests_total", {**NODE, "user": "a"}, "0+100x30"),
                               series("vllm_fleet_gateway_key_rate_limited_total", {**NODE, "user": "b"}, "0+5x30"),
                               series("vllm_fleet_gateway_key_requests_total", {**NODE, "user": "b"}, "0+100x30")],
                              {**NODE, "user": "a"}),
    "DriftDetected": ([series("vllm_fleet_drift_verdict", {**NODE, "verdict": "drift"}, "1x30"),
                       series("vllm_fleet_drift_verdict", {**QUIET_NODE, "verdict": "drift"}, "0x30")],
                      {**NODE, "verdict": "drift"}),
    "DriftCheckFailing": ([series("vllm_fleet_drift_verdict", {**NODE, "verdict": "error"}, "1x30"),
                           series("vllm_fleet_drift_verdict", {**QUIET_NODE, "verdict": "error"}, "0x30")],
                          {**NODE, "verdict": "error"}),
    "SceneVerificationFailed": ([series("vllm_fleet_verification_passed", {**NODE, "scene": "realtime"}, "0x30"),
                                 series("vllm_fleet_verification_passed", {**QUIET_NODE, "scene": "realtime"}, "1x30")],
                                {**NODE, "scene": "realtime"}),
    # The test clock starts at 0: a verification at 0 is 15 minutes old at eval time, one at -86000 s over a day.
    "SceneNotVerified": ([series("vllm_fleet_verification_timestamp_seconds", {**NODE, "scene": "realtime"}, "-86000x30"),
                          series("vllm_fleet_verification_timestamp_seconds", {**QUIET_NODE, "scene": "realtime"},
                                 "0x30")],
                         {**NODE, "scene": "realtime"}),
    "TargetDown": ([series("up", NODE, "0x30"), series("up", QUIET_NODE, "1x30")], NODE),
    "HostMetricsStale": ([series("vllm_fleet_collector_last_run_timestamp_seconds", NODE, "0x30"),
                          series("vllm_fleet_collector_last_run_timestamp_seconds", QUIET_NODE, "0+60x30")], NODE),
}
SLO_ALERTS = {"VllmTtftSloBreached": ("vllm:time_to_first_token_seconds", "p99_ttft"),
              "VllmTpotSloBreached": ("vllm:request_time_per_output_token_seconds", "p99_tpot")}


def summary(alert: str, labels: dict[str, str]) -> str:
    """Return an alert's summary as Prometheus renders it for labels."""
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""),
                  monitoring.ALERTS[alert]["summary"])


def expected(alert: str, labels: dict[str, str]) -> dict[str, Any]:
    """Return promtool's expected alert for labels."""
    return {"exp_labels": {**labels, "severity": monitoring.ALERTS[alert]["severity"]},
            "exp_annotations": {"summary": summary(alert, labels)}}


def promtool_test(tmp_path: Path, rules: dict[str, Any], tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """Run `promtool test rules` on rules and tests; return the run."""
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    (tmp_path / "tests.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                                                        "tests": tests}))
    return subprocess.run([PROMTOOL, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True)


def slo_case(alert: str, threshold_s: float, fires: bool) -> list[dict[str, str]]:
    """Return a scene's histogram whose p99 is above (fires) or below the threshold, and the scene's SLO series."""
    metric, target = SLO_ALERTS[alert]
    bounds = [threshold_s * f for f in (0.5, 0.9, 1.1, 2.0)]
    return [*histogram(metric, SCENE, bounds, 3 if fires else 1),
            series("vllm_fleet_scene_slo_seconds", {**NODE, "scene": "realtime", "target": target}, f"{threshold_s}x30")]


def test_every_alert_has_a_case() -> None:
    """Each alert the kit ships is tested below (a new alert without a case fails here)."""
    assert set(CASES) | set(SLO_ALERTS) == set(monitoring.ALERTS)


def test_rules_pass_promtool_check(tmp_path: Path) -> None:
    """The rendered rules file is valid for Prometheus 2.42."""
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(monitoring.alert_rules({}, "/")))
    run = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "rules.yml")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{len(monitoring.ALERTS)} rules found" in run.stdout


def test_each_alert_fires_on_its_case_and_not_on_the_quiet_one(tmp_path: Path) -> None:
    """promtool: at 15 minutes each alert fires for exactly its firing case; at 0 nothing fires (`for` holds)."""
    tests = []
    for alert, (inputs, labels) in CASES.items():
        tests.append({"interval": "1m", "input_series": inputs, "alert_rule_test": [
            {"eval_time": "15m", "alertname": alert, "exp_alerts": [expected(alert, labels)]},
            *([{"eval_time": "0m", "alertname": alert, "exp_alerts": []}]
              if monitoring.ALERTS[alert]["for"] != "0s" else [])]})
    run = promtool_test(tmp_path, monitoring.alert_rules({}, "/"), tests)
    assert run.returncode == 0, run.stdout + run.stderr


def test_slo_alerts_hold_each_profile_to_verifications_targets(tmp_path: Path) -> None:
    """For every profile and preset of the SLO table, the p99 alerts fire above the very targets verification uses and
    stay quiet below them: the rules compare with the scene's own SLO series, which carries those targets."""
    tests, checked = [], 0
    for profile, presets in verify.DEFAULT_SLO.items():
        for preset in sorted(p for p in presets if presets[p]):
            targets = verify.targets_for(profile, preset)
            record = verify.verdict_record({"scene": "realtime", "passed": True, "slo": {"targets": targets}},
                                           {"engine_args": {"max-num-seqs": 16}}, 0.0)
            assert record["targets"] == targets
            for alert, (_, target) in SLO_ALERTS.items():
                threshold = targets[f"{target}_ms"] / 1000
                for fires in (True, False):
                    tests.append({"interval": "1m", "input_series": slo_case(alert, threshold, fires),
                                  "alert_rule_test": [{"eval_time": "20m", "alertname": alert, "exp_alerts": [
                                      expected(alert, {"host": "h1", "scene": "realtime"})] if fires else []}]})
            checked += 1
    assert checked >= len(cards.slo_table())
    run = promtool_test(tmp_path, monitoring.alert_rules({}, "/"), tests)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr


def test_alert_for_overrides_and_refusals() -> None:
    """A shorter `for` reaches the rule; an unknown alert or a bad duration is refused with the variable named."""
    rules = monitoring.alert_rules({"VllmSceneDown": "10s"}, "/")["groups"][0]["rules"]
    assert {r["alert"]: r["for"] for r in rules}["VllmSceneDown"] == "10s"
    with pytest.raises(monitoring.MonitoringError, match="unknown alerts"):
        monitoring.alert_rules({"SceneDown": "1m"}, "/")
    with pytest.raises(monitoring.MonitoringError, match="VllmSceneDown"):
        monitoring.alert_rules({"VllmSceneDown": "ten seconds"}, "/")


@pytest.mark.parametrize(("text", "duration", "size"), [
    ("15d", True, False), ("1h30m", True, False), ("500ms", True, False), ("", False, False), ("15 days", False, False),
    ("10GB", False, True), ("0B", False, True), ("10G", False, False), ("10 GB", False, False), ("1.5GB", False, False)])
def test_durations_and_sizes(text: str, duration: bool, size: bool) -> None:
    """Durations and retention sizes are judged as Prometheus 2.42 parses them."""
    assert monitoring.is_duration(text) is duration
    assert monitoring.is_size(text) is size


def test_input_problems_name_the_variable_and_fix() -> None:
    """Bad retention, size, route or receiver URL each give one problem naming the variable and what to set."""
    problems = monitoring.input_problems({
        "retention_time": "2 weeks", "retention_size": "10 gigs", "scrape_interval": "15s", "evaluation_interval": "15s",
        "route": {"group_wait": "soon"}, "receivers": [{"name": "ops", "webhook_url": "alerts.example.org/hook"}],
        "smtp": {}, "mountpoints": "/"})
    assert len(problems) == 4
    assert problems[0].startswith("vllm_monitoring_retention_time: '2 weeks'") and "15d" in problems[0]
    assert problems[1].startswith("vllm_monitoring_retention_size: '10 gigs'") and "10GB" in problems[1]
    assert problems[2].startswith("vllm_monitoring_route.group_wait")
    assert "vllm_monitoring_receivers[ops]: webhook_url" in problems[3] and "https://" in problems[3]
    assert monitoring.input_problems({"retention_time": "15d", "retention_size": "10GB", "scrape_interval": "15s",
                                      "evaluation_interval": "15s", "route": {}, "receivers": [], "smtp": {},
                                      "mountpoints": "/|/data.*"}) == []


def test_reserved_receivers_email_without_smtp_and_quoted_mountpoints_are_refused() -> None:
    """The kit's own receiver names, an email receiver without SMTP settings, a password written into the SMTP
    settings and a mount-point regex that would break the rule's quotes are each refused with the variable named."""
    problems = monitoring.input_problems({
        "retention_time": "15d", "retention_size": "10GB", "scrape_interval": "15s", "evaluation_interval": "15s",
        "route": {}, "receivers": [{"name": "none", "webhook_url": "http://x/"}, {"name": "ops", "email_to": "o@x.org"}],
        "smtp": {"smarthost": "mail:587", "auth_password": "secret"}, "mountpoints": '/data"'})
    assert [p.split(":")[0] for p in problems] == ["vllm_monitoring_smtp", "vllm_monitoring_smtp",
                                                   "vllm_monitoring_disk_mountpoints", "vllm_monitoring_receivers[none]"]
    assert all("secret" not in p for p in problems)


def test_a_local_user_that_is_no_user_name_is_refused() -> None:
    """The monitoring guard's users are checked with the guard's own rule for a user name, before any host changes."""
    settings = {"retention_time": "15d", "retention_size": "10GB", "scrape_interval": "15s",
                "evaluation_interval": "15s", "route": {}, "receivers": [], "smtp": {}, "mountpoints": "/"}
    assert monitoring.input_problems({**settings, "local_users": ["ops", "backup_1"]}) == []
    problems = monitoring.input_problems({**settings, "local_users": ["ops", "ops.admin", "x\nreject"]})
    assert problems == ["vllm_monitoring_local_users: ['ops.admin', 'x\\nreject'] are not user names; list the "
                        "host's users by name (lower-case letters, digits, _ and -, 32 at most)"]


def test_alertmanager_config_passes_amtool(tmp_path: Path) -> None:
    """Every receiver gets every alert (each route continues), resolved notices on; amtool accepts the config."""
    config = monitoring.alertmanager_config(
        [{"name": "hook", "webhook_url": "http://hooks.example.org/"}, {"name": "ops", "email_to": "ops@example.org"}],
        {"group_wait": "5s"}, {"smarthost": "mail.example.org:587", "from": "alerts@example.org"},
        "http://127.0.0.1:9095/")
    assert [r["receiver"] for r in config["route"]["routes"]] == ["hook", "ops", "alert-log"]
    assert all(r["continue"] for r in config["route"]["routes"])
    assert config["receivers"][1]["webhook_configs"][0]["send_resolved"] is True
    (tmp_path / "am.yml").write_text(yaml.safe_dump(config))
    run = subprocess.run([AMTOOL, "check-config", str(tmp_path / "am.yml")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    with pytest.raises(monitoring.MonitoringError, match="one of webhook_url or email_to"):
        monitoring.alertmanager_config([{"name": "x"}], {}, {})


def test_targets_cover_every_scene_of_every_host_through_its_ingress() -> None:
    """Two GPU hosts (two scenes and one), a gateway: every scene, node and gateway target, labelled by host/scene."""
    scenes = {"g1": [{"name": "realtime"}, {"name": "batch"}], "g2": [{"name": "realtime"}], "g3": None}
    ingress = {"g1": {"address": "10.0.0.1", "port": 9443, "enabled": True},
               "g2": {"address": "fd00::2", "port": 9443, "enabled": True}, "g3": None}
    jobs = monitoring.scrape_targets(scenes, ingress, {"gw": {"address": "10.0.0.9", "port": 9444}})
    assert [(g["labels"]["host"], g["labels"]["scene"], g["targets"][0], g["labels"]["__metrics_path__"])
            for g in jobs["vllm"]] == [("g1", "batch", "10.0.0.1:9443", "/metrics/scene/batch"),
                                       ("g1", "realtime", "10.0.0.1:9443", "/metrics/scene/realtime"),
                                       ("g2", "realtime", "[fd00::2]:9443", "/metrics/scene/realtime")]
    assert [(g["labels"]["host"], g["targets"][0]) for g in jobs["node"]] == [
        ("g1", "10.0.0.1:9443"), ("g2", "[fd00::2]:9443"), ("gw", "10.0.0.9:9444")]
    assert jobs["gateway"] == [{"targets": ["10.0.0.9:9444"],
                                "labels": {"host": "gw", "__metrics_path__": "/metrics/gateway"}}]


def test_metric_paths_have_one_home_that_the_haproxy_templates_read() -> None:
    """The ingress allows node_exporter's path and each scene's, the field HAProxy reads from a scene's path is its
    name, and neither HAProxy template writes one of the paths itself."""
    paths = monitoring.metrics_paths([{"name": "realtime"}, {"name": "batch"}])
    assert paths["ingress"] == ["/metrics/node", "/metrics/scene/batch", "/metrics/scene/realtime"]
    assert "/metrics/scene/realtime".split("/")[paths["scene_field"] - 1] == "realtime"
    for role in ("vllm_ingress", "vllm_gateway"):
        template = (REPO / "roles" / role / "templates" / "haproxy.cfg.j2").read_text()
        assert not re.findall(r"/metrics/\w", template), role


def test_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    """The rendered prometheus.yml (mutual TLS to the fleet's jobs) passes promtool's check."""
    for name in ("ca.pem", "client.crt", "client.key"):
        (tmp_path / name).write_text("")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(monitoring.alert_rules({}, "/")))
    config = monitoring.prometheus_config({
        "host": "mon", "listen": "127.0.0.1", "prometheus_port": 9090, "alertmanager_port": 9093,
        "scrape_interval": "15s", "evaluation_interval": "15s", "rules_file": str(tmp_path / "rules.yml"),
        "targets_dir": str(tmp_path), "ca_file": str(tmp_path / "ca.pem"), "cert_file": str(tmp_path / "client.crt"),
        "key_file": str(tmp_path / "client.key")})
    assert [j["job_name"] for j in config["scrape_configs"]] == ["prometheus", "alertmanager", "vllm", "node", "gateway"]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    run = subprocess.run([PROMTOOL, "check", "config", "--syntax-only", str(tmp_path / "prometheus.yml")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_gpu_limits_come_from_the_registry_and_the_plan() -> None:
    """A 3090 gets the registry's temperature limit and the memory its scenes are planned to take; an unknown card
    no temperature limit."""
    gpus = {"gpus": [{"index": 0, "name": "NVIDIA GeForce RTX 3090", "compute_capability": "8.6",
                      "memory_total_mib": 24576},
                     {"index": 1, "name": "Some Future Card", "compute_capability": "13.0", "memory_total_mib": 1000}]}
    scenes = [{"gpus": [0], "engine_args": {"gpu-memory-utilization": 0.5}}, {"gpus": [0], "engine_args": {}},
              {"gpus": [1], "engine_args": {"gpu-memory-utilization": 0.3}}]
    limits = monitoring.gpu_limits(gpus, scenes)
    assert limits["0"]["temperature_limit_celsius"] == cards.known("rtx3090").temperature_limit_c
    assert limits["0"]["planned_memory_bytes"] == 24576 * 1024 * 1024  # 0.5 + vLLM's default 0.9, capped at all
    assert limits["1"] == {"planned_memory_bytes": int(0.3 * 1000 * 1024 * 1024)}


def test_prometheus_off_loopback_takes_tls_and_basic_auth(tmp_path: Path) -> None:
    """Off loopback, Prometheus scrapes itself over TLS with the password file; the web config (a real certificate,
    the bcrypt hash) passes promtool check web-config, and no password is in either document."""
    key, cert = tmp_path / "server.key", tmp_path / "server.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-noenc",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=mon"], check=True,
                   capture_output=True)
    for name in ("ca.pem", "client.crt", "client.key", "web-password"):
        (tmp_path / name).write_text("")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(monitoring.alert_rules({}, "/")))
    config = monitoring.prometheus_config({
        "host": "mon", "listen": "::1", "tls": True, "web_user": "admin", "password_file": str(tmp_path / "web-password"),
        "prometheus_port": 9090, "alertmanager_port": 9093, "scrape_interval": "15s", "evaluation_interval": "15s",
        "rules_file": str(tmp_path / "rules.yml"), "targets_dir": str(tmp_path), "ca_file": str(tmp_path / "ca.pem"),
        "cert_file": str(tmp_path / "client.crt"), "key_file": str(tmp_path / "client.key")})
    itself = config["scrape_configs"][0]
    assert itself["static_configs"][0]["targets"] == ["[::1]:9090"] and itself["scheme"] == "https"
    assert itself["basic_auth"] == {"username": "admin", "password_file": str(tmp_path / "web-password")}
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    run = subprocess.run([PROMTOOL, "check", "config", "--syntax-only", str(tmp_path / "prometheus.yml")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    hashed = "$2b$12$" + "a" * 53  # the form of a bcrypt hash
    web = monitoring.web_config(str(cert), str(key), "admin", hashed)
    (tmp_path / "web.yml").write_text(yaml.safe_dump(web))
    run = subprocess.run([PROMTOOL, "check", "web-config", str(tmp_path / "web.yml")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert web["basic_auth_users"] == {"admin": hashed}


def test_host_port_brackets_ipv6() -> None:
    """Listen flags and targets write IPv6 literals in brackets, host names and IPv4 as they are."""
    assert [monitoring.host_port(a, 9090) for a in ("127.0.0.1", "::", "fd00::2", "mon1")] == [
        "127.0.0.1:9090", "[::]:9090", "[fd00::2]:9090", "mon1:9090"]


def test_a_host_this_run_did_not_reach_keeps_its_targets_and_a_removed_one_loses_them() -> None:
    """A GPU host that failed or was left out of the run (no endpoint) keeps last run's targets; a host gone from the
    inventory loses them; the monitoring host's own node_exporter is scraped on loopback when it is nothing else."""
    previous = monitoring.scrape_targets({"g1": [{"name": "realtime"}], "g2": [{"name": "batch"}]},
                                         {"g1": {"address": "10.0.0.1", "port": 9443, "enabled": True},
                                          "g2": {"address": "10.0.0.2", "port": 9443, "enabled": True}}, {})
    jobs = monitoring.scrape_targets({"g1": None}, {"g1": None}, {}, previous, {"host": "mon", "port": 9100})
    assert [(g["labels"]["host"], g["labels"].get("scene")) for g in jobs["vllm"]] == [("g1", "realtime")]
    assert [(g["labels"]["host"], g["targets"][0]) for g in jobs["node"]] == [("g1", "10.0.0.1:9443"),
                                                                             ("mon", "127.0.0.1:9100")]
    assert jobs["node"][1]["labels"]["__scheme__"] == "http"
