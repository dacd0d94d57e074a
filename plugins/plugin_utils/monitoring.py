"""The fleet's monitoring, as pure functions: scrape targets from the inventory, the alert rules, Alertmanager's
config, each host's collector settings, and the checks on the monitoring role's inputs."""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from typing import Any

from .errors import FleetError
from . import cards
from .local_guard import USER_NAME

MIB = 1024 * 1024
# Prometheus 2.42's duration (model.ParseDuration) and retention size (units.ParseBase2Bytes as its flag takes them).
DURATION = re.compile(r"(?!$)(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?")
SIZE = re.compile(r"\d+(B|KB|MB|GB|TB|PB|EB)")
# vLLM's default gpu_memory_utilization, for a scene that does not set it.
VLLM_DEFAULT_UTILIZATION = 0.9
# Metric paths the ingress (roles/vllm_ingress) and the gateway's metrics frontend answer for the monitoring hosts.
NODE_PATH = "/metrics/node"
SCENE_PATH = "/metrics/scene/"
GATEWAY_PATH = "/metrics/gateway"

# Every alert: how long its condition must hold (the role's vllm_monitoring_alert_for may shorten or lengthen each),
# its severity, its PromQL, and what it tells the person it pages. Thresholds that differ per scene or card are not
# here: they are series the hosts export (the SLO targets and max_num_seqs verification held each scene to, each
# card's temperature limit from the hardware registry and its planned memory), so the rules hold every scene and
# card to the very numbers the kit verified and planned.
ALERTS: dict[str, dict[str, str]] = {
    "VllmSceneDown": {
        "for": "1m", "severity": "critical",
        "expr": 'up{job="vllm"} == 0',
        "summary": "Scene {{ $labels.scene }} on {{ $labels.host }} does not answer /metrics",
    },
    "VllmKvCacheFull": {
        "for": "5m", "severity": "warning",
        "expr": 'max by (host, scene) (vllm:kv_cache_usage_perc{job="vllm"}) > 0.9',
        "summary": "Scene {{ $labels.scene }} on {{ $labels.host }} has used over 90% of its KV cache for 5 minutes",
    },
    "VllmRequestsQueued": {
        "for": "5m", "severity": "warning",
        "expr": ('sum by (host, scene) (vllm:num_requests_waiting{job="vllm"})'
                 ' > on (host, scene) vllm_fleet_scene_max_num_seqs'),
        "summary": "Scene {{ $labels.scene }} on {{ $labels.host }} has more requests waiting than it runs at once",
    },
    "VllmTtftSloBreached": {
        "for": "10m", "severity": "warning",
        "expr": ('histogram_quantile(0.99, sum by (le, host, scene) (rate(vllm:time_to_first_token_seconds_bucket'
                 '{job="vllm"}[5m]))) > on (host, scene) vllm_fleet_scene_slo_seconds{target="p99_ttft"}'),
        "summary": "Scene {{ $labels.scene }} on {{ $labels.host }}: p99 time to first token above its SLO",
    },
    "VllmTpotSloBreached": {
        "for": "10m", "severity": "warning",
        "expr": ('histogram_quantile(0.99, sum by (le, host, scene) (rate('
                 'vllm:request_time_per_output_token_seconds_bucket{job="vllm"}[5m])))'
                 ' > on (host, scene) vllm_fleet_scene_slo_seconds{target="p99_tpot"}'),
        "summary": "Scene {{ $labels.scene }} on {{ $labels.host }}: p99 time per output token above its SLO",
    },
    "VllmPreemptions": {
        "for": "5m", "severity": "warning",
        "expr": 'sum by (host, scene) (increase(vllm:num_preemptions_total{job="vllm"}[5m])) > 0',
        "summary": "Scene {{ $labels.scene }} on {{ $labels.host }} keeps preempting requests (KV cache too small)",
    },
    "GpuTooHot": {
        "for": "2m", "severity": "critical",
        "expr": ('vllm_fleet_gpu_temperature_celsius >= on (host, gpu) vllm_fleet_gpu_temperature_limit_celsius'),
        "summary": "GPU {{ $labels.gpu }} on {{ $labels.host }} is at or above its card's temperature limit",
    },
    "GpuMemoryBeyondPlan": {
        "for": "10m", "severity": "warning",
        "expr": 'vllm_fleet_gpu_memory_used_bytes > on (host, gpu) vllm_fleet_gpu_memory_planned_bytes',
        "summary": "GPU {{ $labels.gpu }} on {{ $labels.host }} uses more memory than the kit planned for it",
    },
    "GpuDriverUnhealthy": {
        "for": "2m", "severity": "critical",
        "expr": "vllm_fleet_nvidia_smi_up == 0",
        "summary": "nvidia-smi fails on {{ $labels.host }}: {{ $labels.reason }}",
    },
    "ModelDiskLow": {
        "for": "10m", "severity": "warning",
        "expr": ('node_filesystem_avail_bytes{job="node",mountpoint=~"MOUNTPOINTS"}'
                 ' / node_filesystem_size_bytes{job="node",mountpoint=~"MOUNTPOINTS"} < 0.10'),
        "summary": "{{ $labels.mountpoint }} on {{ $labels.host }} has under 10% free",
    },
    "GatewayServerErrors": {
        "for": "5m", "severity": "critical",
        "expr": ('sum by (host) (rate(haproxy_frontend_http_responses_total{job="gateway",proxy="api",code="5xx"}[5m]))'
                 ' / sum by (host) (rate(haproxy_frontend_http_responses_total{job="gateway",proxy="api"}[5m]))'
                 ' > 0.05'),
        "summary": "Over 5% of the gateway's answers on {{ $labels.host }} are 5xx",
    },
    "GatewayKeyRateLimited": {
        "for": "10m", "severity": "info",
        "expr": ('rate(vllm_fleet_gateway_key_rate_limited_total[5m])'
                 ' / rate(vllm_fleet_gateway_key_requests_total[5m]) > 0.10'),
        "summary": "Over 10% of key {{ $labels.user }}'s requests get 429 on the gateway {{ $labels.host }}",
    },
    "DriftDetected": {
        "for": "0s", "severity": "warning",
        "expr": 'vllm_fleet_drift_verdict{verdict="drift"} == 1',
        "summary": "{{ $labels.host }} differs from the fleet's git (its drift check)",
    },
    "DriftCheckFailing": {
        "for": "0s", "severity": "warning",
        "expr": 'vllm_fleet_drift_verdict{verdict="error"} == 1',
        "summary": "The drift check of {{ $labels.host }} cannot tell (see its status file)",
    },
    "SceneVerificationFailed": {
        "for": "0s", "severity": "warning",
        "expr": "vllm_fleet_verification_passed == 0",
        "summary": "Scene {{ $labels.scene }} on {{ $labels.host }} failed its last verification",
    },
    "SceneNotVerified": {
        "for": "0s", "severity": "warning",
        "expr": "time() - vllm_fleet_verification_timestamp_seconds > 86400",
        "summary": "Scene {{ $labels.scene }} on {{ $labels.host }} has not been verified for 24 hours",
    },
    "TargetDown": {
        "for": "2m", "severity": "critical",
        "expr": 'up{job=~"node|gateway|prometheus|alertmanager"} == 0',
        "summary": "{{ $labels.job }} of {{ $labels.host }} does not answer",
    },
    "HostMetricsStale": {
        "for": "0s", "severity": "warning",
        "expr": "time() - vllm_fleet_collector_last_run_timestamp_seconds > 120",
        "summary": "The kit's metrics collector on {{ $labels.host }} has not run for 2 minutes",
    },
}


# Receivers the kit writes itself: the default route's (alerts kept in Alertmanager) and the lab's alert log.
RESERVED_RECEIVERS = ("none", "alert-log")


class MonitoringError(FleetError):
    """Monitoring input the kit refuses; the message names the variable and the fix."""


def alert_rules(alert_for: dict[str, str], mountpoints: str) -> dict[str, Any]:
    """Return the rules file: every alert of ALERTS, with its `for` from alert_for where given and the disk alert on
    the mountpoints regex."""
    unknown = sorted(set(alert_for) - set(ALERTS))
    if unknown:
        raise MonitoringError(f"vllm_monitoring_alert_for: unknown alerts {unknown}; valid are {sorted(ALERTS)}")
    rules = []
    for name, alert in ALERTS.items():
        duration = str(alert_for.get(name, alert["for"]))
        if not is_duration(duration):
            raise MonitoringError(f"vllm_monitoring_alert_for.{name}: {duration!r} is not a duration; set e.g. 5m")
        rules.append({"alert": name, "expr": alert["expr"].replace("MOUNTPOINTS", mountpoints), "for": duration,
                      "labels": {"severity": alert["severity"]},
                      "annotations": {"summary": alert["summary"]}})
    return {"groups": [{"name": "vllm-fleet", "rules": rules}]}


def is_duration(text: Any) -> bool:
    """Return whether text is a Prometheus duration such as 15d, 1h30m or 500ms."""
    return isinstance(text, str) and DURATION.fullmatch(text) is not None


def is_size(text: Any) -> bool:
    """Return whether text is a size Prometheus's --storage.tsdb.retention.size takes, such as 10GB (0B: no limit)."""
    return isinstance(text, str) and SIZE.fullmatch(text) is not None


def url_problem(url: Any) -> str | None:
    """Return why url is no http(s) URL with a host, or None when it is one."""
    if not isinstance(url, str) or not url:
        return "is empty or not a string"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "is not an http:// or https:// URL with a host"
    if any(c.isspace() for c in url):
        return "holds whitespace"
    return None


def receiver_problems(receivers: Any) -> list[str]:
    """Return what is wrong with vllm_monitoring_receivers: names, kinds (webhook: url; email: to) and URLs."""
    if not isinstance(receivers, list):
        return ["vllm_monitoring_receivers must be a list of {name, webhook_url} or {name, email_to}"]
    problems, names = [], set()
    for index, receiver in enumerate(receivers):
        where = f"vllm_monitoring_receivers[{index}]"
        if not isinstance(receiver, dict) or not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", str(receiver.get("name", ""))):
            problems.append(f"{where}: give it a name of a-z, 0-9, _ and -")
            continue
        where = f"vllm_monitoring_receivers[{receiver['name']}]"
        if receiver["name"] in names:
            problems.append(f"{where}: two receivers have this name")
        if receiver["name"] in RESERVED_RECEIVERS:
            problems.append(f"{where}: the kit uses this name itself; give the receiver another")
        names.add(receiver["name"])
        unknown = sorted(set(receiver) - {"name", "webhook_url", "email_to", "send_resolved"})
        kinds = [k for k in ("webhook_url", "email_to") if k in receiver]
        if unknown or len(kinds) != 1:
            problems.append(f"{where}: give exactly one of webhook_url or email_to (and optionally send_resolved)"
                            + (f"; unknown fields {unknown}" if unknown else ""))
        elif "webhook_url" in receiver and url_problem(receiver["webhook_url"]):
            problems.append(f"{where}: webhook_url {receiver['webhook_url']!r} {url_problem(receiver['webhook_url'])}; "
                            "set it to the receiver's URL, e.g. https://alerts.example.org/hook")
        elif "email_to" in receiver and not re.fullmatch(r"[^@\s,]+@[^@\s,]+", str(receiver["email_to"])):
            problems.append(f"{where}: email_to {receiver['email_to']!r} is not one address; set it to e.g. "
                            "oncall@example.org")
    return problems


def alertmanager_config(receivers: list[dict[str, Any]], route: dict[str, str], smtp: dict[str, Any],
                        alert_log_url: str | None = None) -> dict[str, Any]:
    """Return Alertmanager's config: every alert to every receiver, and to the alert log at alert_log_url when given
    (none: kept in Alertmanager only), grouped by alert, host and scene, with the route's group_wait, group_interval
    and repeat_interval."""
    problems = receiver_problems(receivers)
    if problems:
        raise MonitoringError("; ".join(problems))
    if alert_log_url:
        receivers = [*receivers, {"name": "alert-log", "webhook_url": alert_log_url}]
    entries: list[dict[str, Any]] = [{"name": "none"}]
    for receiver in receivers:
        resolved = bool(receiver.get("send_resolved", True))
        if "webhook_url" in receiver:
            entries.append({"name": receiver["name"],
                            "webhook_configs": [{"url": receiver["webhook_url"], "send_resolved": resolved}]})
        else:
            entries.append({"name": receiver["name"],
                            "email_configs": [{"to": receiver["email_to"], "send_resolved": resolved}]})
    config: dict[str, Any] = {
        "route": {"receiver": "none", "group_by": ["alertname", "host", "scene"], **route,
                  "routes": [{"receiver": r["name"], "continue": True} for r in receivers]},
        "receivers": entries,
    }
    if smtp:
        config["global"] = {f"smtp_{key}": value for key, value in smtp.items()}
    return config


def _scene_names(scenes: Any) -> list[str]:
    """Return the names of a host's resolved scenes."""
    return sorted(str(s["name"]) for s in scenes or [] if isinstance(s, dict) and s.get("name"))


def metrics_paths(scenes: Any) -> dict[str, Any]:
    """Return what the ingress and the gateway answer the monitoring hosts: node_exporter's and HAProxy's paths, the
    scene prefix and which field of a scene's path (HAProxy's field(N,/)) names it, and the ingress's allowed paths."""
    return {"node": NODE_PATH, "gateway": GATEWAY_PATH, "scene_prefix": SCENE_PATH,
            "scene_field": SCENE_PATH.count("/") + 1,
            "ingress": [NODE_PATH, *(SCENE_PATH + name for name in _scene_names(scenes))]}


def scrape_targets(scenes_by_host: dict[str, Any], ingress_by_host: dict[str, Any], gateway_by_host: dict[str, Any],
                   previous: dict[str, Any] | None = None, local: dict[str, Any] | None = None) -> dict[str, list[Any]]:
    """Return file-based discovery groups per job: each GPU host's scenes and node_exporter through its ingress, each
    gateway's HAProxy and (on a host that is no GPU host) node_exporter through its metrics endpoint, and the
    monitoring host's own node_exporter on loopback when it is neither (local: its host and node_exporter port). An
    inventory host this run did not reach (its endpoint None) keeps its targets from `previous`, the last files, so a
    host that is down stays a target that is down. Every target is labelled with its host, a scene's with the scene."""
    jobs: dict[str, list[Any]] = {"vllm": [], "node": [], "gateway": []}
    reached = {h for h, e in {**ingress_by_host, **gateway_by_host}.items() if e}
    for host, endpoint in sorted(ingress_by_host.items()):
        if not (endpoint or {}).get("enabled"):
            continue
        address = host_port(endpoint["address"], endpoint["port"])
        jobs["node"].append({"targets": [address], "labels": {"host": host, "__metrics_path__": NODE_PATH}})
        for scene in _scene_names(scenes_by_host.get(host)):
            labels = {"host": host, "scene": scene, "__metrics_path__": SCENE_PATH + scene}
            jobs["vllm"].append({"targets": [address], "labels": labels})
    for host, endpoint in sorted(gateway_by_host.items()):
        if not endpoint:
            continue
        address = host_port(endpoint["address"], endpoint["port"])
        jobs["gateway"].append({"targets": [address], "labels": {"host": host, "__metrics_path__": GATEWAY_PATH}})
        if not (ingress_by_host.get(host) or {}).get("enabled"):
            jobs["node"].append({"targets": [address], "labels": {"host": host, "__metrics_path__": NODE_PATH}})
    if local and local["host"] not in reached:
        jobs["node"].append({"targets": [host_port("127.0.0.1", local["port"])],
                             "labels": {"host": local["host"], "__scheme__": "http"}})
        reached.add(local["host"])
    unreached = ({*ingress_by_host, *gateway_by_host} - reached)
    for job, groups in (previous or {}).items():
        jobs.setdefault(job, []).extend(g for g in groups if g.get("labels", {}).get("host") in unreached)
    for groups in jobs.values():
        groups.sort(key=lambda g: (g["labels"]["host"], g["labels"].get("scene", "")))
    return jobs


def prometheus_config(settings: dict[str, Any]) -> dict[str, Any]:
    """Return prometheus.yml: the intervals, the rules, the local Alertmanager, Prometheus (over TLS with basic auth
    when it listens off loopback) and Alertmanager themselves, and the fleet's jobs from file-based discovery over
    mutual TLS with the monitoring certificate."""
    alertmanager = host_port("127.0.0.1", settings["alertmanager_port"])
    tls = {"ca_file": settings["ca_file"], "cert_file": settings["cert_file"], "key_file": settings["key_file"]}
    itself: dict[str, Any] = {"job_name": "prometheus", "static_configs": [
        {"targets": [host_port(settings["listen"], settings["prometheus_port"])], "labels": {"host": settings["host"]}}]}
    if settings.get("tls"):
        itself.update(scheme="https", tls_config={"ca_file": settings["ca_file"], "server_name": settings["host"]},
                      basic_auth={"username": settings["web_user"], "password_file": settings["password_file"]})
    jobs = [itself, {"job_name": "alertmanager", "static_configs": [
        {"targets": [alertmanager], "labels": {"host": settings["host"]}}]}]
    jobs += [{"job_name": name, "scheme": "https", "tls_config": tls,
              "file_sd_configs": [{"files": [f"{settings['targets_dir']}/{name}.json"], "refresh_interval": "30s"}]}
             for name in ("vllm", "node", "gateway")]
    return {
        "global": {"scrape_interval": settings["scrape_interval"],
                   "evaluation_interval": settings["evaluation_interval"]},
        "rule_files": [settings["rules_file"]],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": jobs,
    }


def input_problems(settings: dict[str, Any]) -> list[str]:
    """Return what is wrong with the monitoring role's inputs (durations, sizes, receivers, local users), each with
    the fix."""
    problems = []
    for name in ("retention_time", "scrape_interval", "evaluation_interval"):
        value = settings.get(name)
        if not is_duration(value) or value in ("0s", "0ms"):
            problems.append(f"vllm_monitoring_{name}: {value!r} is not a Prometheus duration; set it to e.g. 15d, "
                            "15s or 1h30m (units y, w, d, h, m, s, ms)")
    size = settings.get("retention_size")
    if not is_size(size):
        problems.append(f"vllm_monitoring_retention_size: {size!r} is not a size Prometheus takes; set it to e.g. "
                        "10GB or 500MB (units B, KB, MB, GB, TB, PB, EB; 0B: no size limit)")
    for name, value in sorted((settings.get("route") or {}).items()):
        if name not in ("group_wait", "group_interval", "repeat_interval") or not is_duration(value):
            problems.append(f"vllm_monitoring_route.{name}: {value!r} must be a duration of group_wait, "
                            "group_interval or repeat_interval, e.g. 30s")
    receivers = settings.get("receivers")
    smtp = settings.get("smtp") or {}
    if isinstance(receivers, list) and any(isinstance(r, dict) and "email_to" in r for r in receivers) and not (
            smtp.get("smarthost") and smtp.get("from")):
        problems.append("vllm_monitoring_smtp: an email receiver needs smarthost and from, e.g. "
                        '{smarthost: "mail.example.org:587", from: "alerts@example.org"}')
    if "auth_password" in smtp:
        problems.append("vllm_monitoring_smtp: keep the password out of it; name its Vault variable in "
                        "vllm_monitoring_smtp_password_var")
    mountpoints = settings.get("mountpoints")
    if not isinstance(mountpoints, str) or not mountpoints or any(c in mountpoints for c in '"\\'):
        problems.append(f"vllm_monitoring_disk_mountpoints: {mountpoints!r} must be a regex without quotes or "
                        'backslashes, e.g. "/|/var/lib/vllm.*"')
    wrong_users = [user for user in settings.get("local_users") or [] if not USER_NAME.match(str(user))]
    if wrong_users:
        problems.append(f"vllm_monitoring_local_users: {wrong_users} are not user names; list the host's users by "
                        "name (lower-case letters, digits, _ and -, 32 at most)")
    return problems + receiver_problems(receivers)


def host_port(address: str, port: Any) -> str:
    """Return address:port as a URL or a listen flag writes it: IPv6 literals in brackets."""
    try:
        host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    except ValueError:
        host = address
    return f"{host}:{int(port)}"


def gpu_limits(gpus_fact: dict[str, Any] | None, scenes: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Return, per GPU index, the card's temperature limit (hardware registry) and the memory its scenes are planned
    to take (the sum of their gpu_memory_utilization, of its total memory, at most all of it)."""
    limits: dict[str, dict[str, int]] = {}
    for gpu in (gpus_fact or {}).get("gpus") or []:
        index = gpu.get("index")
        if not isinstance(index, int):
            continue
        entry: dict[str, int] = {}
        profile = cards.profile_of(gpu)
        if profile and profile.temperature_limit_c:
            entry["temperature_limit_celsius"] = profile.temperature_limit_c
        total = int(gpu.get("memory_total_mib") or 0) * MIB
        share = sum(float((s.get("engine_args") or {}).get("gpu-memory-utilization", VLLM_DEFAULT_UTILIZATION))
                    for s in scenes if index in (s.get("gpus") or []))
        if total and share:
            entry["planned_memory_bytes"] = int(min(share, 1.0) * total)
        limits[str(index)] = entry
    return limits


def web_config(cert_file: str, key_file: str, user: str, password_hash: str) -> dict[str, Any]:
    """Return Prometheus's --web.config.file document: TLS with the host's certificate, one basic-auth user."""
    return {"tls_server_config": {"cert_file": cert_file, "key_file": key_file, "min_version": "TLS12"},
            "basic_auth_users": {user: password_hash}}
