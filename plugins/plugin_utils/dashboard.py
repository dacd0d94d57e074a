"""The fleet's Grafana dashboard: its panels and their PromQL as data, and the JSON model users import into Grafana.

tools/dashboard.py --write renders dashboard() into dashboards/vllm-fleet.json; tests/test_dashboard.py fails while the
file differs, while a query does not parse (promtool) or while it names a metric nobody exports. The molecule test
runs panel_queries() against the lab's Prometheus and wants a series from each query whose `needs` the lab feeds.

Every target carries `host` (inventory name) and `job` (vllm, node or gateway); vLLM's targets also `scene`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

UID = "vllm-fleet"
TITLE = "vLLM fleet"
SCHEMA_VERSION = 39
DATASOURCE_INPUT = "DS_PROMETHEUS"
DATASOURCE = {"type": "prometheus", "uid": "${" + DATASOURCE_INPUT + "}"}
# What feeds a panel: scene (vLLM's /metrics), gpu (the GPU collector: no data on a CPU-only host), gateway (HAProxy
# and the gateway's key textfile), host (node_exporter and the kit's textfiles), drift (drift checks, not run on the lab).
NEEDS = ("scene", "gpu", "gateway", "host", "drift")
ROWS = ("Scenes", "GPUs", "Gateway", "Hosts")
KINDS = {"timeseries": 8, "stat": 5}  # panel type: its height in grid units
KIND_NAMES = {"timeseries": "Time series", "stat": "Stat"}
# Grafana unit ids the panels use (Grafana's valueFormats).
UNITS = ("s", "percentunit", "reqps", "short", "bytes", "celsius", "watt")
# What a variable becomes in panel_queries(): every host and scene, and a fixed rate window.
RUNNABLE = {"host": ".*", "scene": ".*", "__rate_interval": "1m"}
VARIABLE = re.compile(r"\$(\w+)")

# Metric names the kit knows, by exporter. vLLM's V1 engine (docs.vllm.ai, Production Metrics); histograms as their
# family name (the series add _bucket, _sum, _count), counters as exposed (with _total).
VLLM_HISTOGRAMS = frozenset({
    "vllm:time_to_first_token_seconds", "vllm:request_time_per_output_token_seconds",
    "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
    "vllm:request_inference_time_seconds", "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
    "vllm:request_prompt_tokens", "vllm:request_generation_tokens", "vllm:request_max_num_generation_tokens",
    "vllm:request_params_n", "vllm:request_params_max_tokens", "vllm:iteration_tokens_total",
})
VLLM_METRICS = frozenset({
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total", "vllm:cache_config_info",
})
# The kit's own collectors: the GPU collector and the state textfiles (job="node") ...
COLLECTOR_METRICS = frozenset({
    "vllm_fleet_gpu_utilization_ratio", "vllm_fleet_gpu_memory_used_bytes", "vllm_fleet_gpu_memory_total_bytes",
    "vllm_fleet_gpu_memory_planned_bytes", "vllm_fleet_gpu_temperature_celsius",
    "vllm_fleet_gpu_temperature_limit_celsius", "vllm_fleet_gpu_power_draw_watts", "vllm_fleet_gpu_power_limit_watts",
    "vllm_fleet_gpu_throttled", "vllm_fleet_nvidia_smi_up", "vllm_fleet_in_sync_record_timestamp_seconds",
    "vllm_fleet_drift_verdict", "vllm_fleet_verification_passed", "vllm_fleet_verification_timestamp_seconds",
    # ... and the gateway's per-key textfile (label user) on the gateway host.
    "vllm_fleet_gateway_key_requests_total", "vllm_fleet_gateway_key_client_errors_total",
    "vllm_fleet_gateway_key_server_errors_total", "vllm_fleet_gateway_key_rate_limited_total",
    "vllm_fleet_gateway_key_in_flight",
})
# HAProxy 2.6's built-in exporter (addons/promex/service-prometheus.c at v2.6.0): labels proxy, server, code, state.
HAPROXY_METRICS = frozenset({
    "haproxy_backend_http_responses_total", "haproxy_backend_http_requests_total", "haproxy_backend_active_servers",
    "haproxy_backend_backup_servers", "haproxy_backend_status", "haproxy_backend_current_queue",
    "haproxy_backend_current_sessions", "haproxy_backend_response_time_average_seconds", "haproxy_server_status",
    "haproxy_server_current_sessions", "haproxy_server_http_responses_total", "haproxy_frontend_http_requests_total",
    "haproxy_frontend_http_responses_total", "haproxy_process_uptime_seconds",
})
NODE_METRICS = frozenset({
    "node_cpu_seconds_total", "node_filesystem_avail_bytes", "node_filesystem_size_bytes", "node_memory_MemTotal_bytes",
    "node_memory_MemAvailable_bytes", "node_load1", "node_boot_time_seconds",
})
PROMETHEUS_METRICS = frozenset({"up", "scrape_duration_seconds"})

SCENE = 'job="vllm", host=~"$host", scene=~"$scene"'
NODE = 'job="node", host=~"$host"'
GATEWAY = 'job="gateway", host=~"$host"'
IDLE = '"idle"'
BY_SCENE = "{{host}} {{scene}}"
BY_GPU = "{{host}} gpu{{gpu}}"
UP_DOWN = ((1, "up", "green"), (0, "down", "red"))

Query = tuple[str, str]  # (PromQL as the dashboard holds it, legend format)


@dataclass(frozen=True)
class Panel:
    """One dashboard panel: its row, title, queries (expr, legend), Grafana unit and what feeds it."""

    row: str
    title: str
    queries: tuple[Query, ...]
    unit: str
    needs: str
    kind: str = "timeseries"
    width: int = 12
    states: tuple[tuple[int, str, str], ...] = ()  # value mappings of a 0/1 stat: (value, text, colour)
    text_mode: str = "auto"  # a stat's text: "name" shows the legend alone (for a filter such as `== 1`)


def rate(metric: str, selector: str) -> str:
    """Return the per-second rate of a counter over Grafana's rate interval."""
    return f"rate({metric}{{{selector}}}[$__rate_interval])"


def summed_rate(metric: str, selector: str, by: str = "host, scene") -> str:
    """Return a counter's rate summed by the given labels."""
    return f"sum by ({by}) ({rate(metric, selector)})"


def quantile(q: float, family: str) -> str:
    """Return a histogram's q-quantile per host and scene."""
    return f"histogram_quantile({q}, {summed_rate(family + '_bucket', SCENE, 'le, host, scene')})"


def age(metric: str, by: str = "host") -> str:
    """Return the seconds since the newest timestamp a metric holds."""
    return f"time() - max by ({by}) ({metric}{{{NODE}}})"


def gpu(metric: str, aggregate: str = "max") -> str:
    """Return a per-GPU gauge of the GPU collector."""
    return f"{aggregate} by (host, gpu) ({metric}{{{NODE}}})"


def per_key(metric: str) -> str:
    """Return a gateway key counter's rate per user."""
    return summed_rate(metric, NODE, "user")


PANELS: tuple[Panel, ...] = (
    Panel("Scenes", "Time to first token", (
        (quantile(0.5, "vllm:time_to_first_token_seconds"), "p50 " + BY_SCENE),
        (quantile(0.99, "vllm:time_to_first_token_seconds"), "p99 " + BY_SCENE)), "s", "scene"),
    Panel("Scenes", "Time per output token", (
        (quantile(0.5, "vllm:request_time_per_output_token_seconds"), "p50 " + BY_SCENE),
        (quantile(0.99, "vllm:request_time_per_output_token_seconds"), "p99 " + BY_SCENE)), "s", "scene"),
    Panel("Scenes", "Output tokens/s", ((summed_rate("vllm:generation_tokens_total", SCENE), BY_SCENE),),
          "short", "scene"),
    Panel("Scenes", "Prompt tokens/s", ((summed_rate("vllm:prompt_tokens_total", SCENE), BY_SCENE),), "short", "scene"),
    Panel("Scenes", "Requests running and waiting", (
        (f"sum by (host, scene) (vllm:num_requests_running{{{SCENE}}})", "running " + BY_SCENE),
        (f"sum by (host, scene) (vllm:num_requests_waiting{{{SCENE}}})", "waiting " + BY_SCENE)), "short", "scene"),
    # A fraction per engine: the fullest engine of a scene, not their sum.
    Panel("Scenes", "KV cache usage", ((f"max by (host, scene) (vllm:kv_cache_usage_perc{{{SCENE}}})", BY_SCENE),),
          "percentunit", "scene"),
    # 0/0 while a scene is idle: a NaN-valued series, still a series.
    Panel("Scenes", "Prefix cache hit rate", ((f"{summed_rate('vllm:prefix_cache_hits_total', SCENE)} / "
                                               f"{summed_rate('vllm:prefix_cache_queries_total', SCENE)}", BY_SCENE),),
          "percentunit", "scene"),
    Panel("Scenes", "Preemptions/s", ((summed_rate("vllm:num_preemptions_total", SCENE), BY_SCENE),), "reqps", "scene"),
    Panel("Scenes", "Finished requests/s by reason", (
        (summed_rate("vllm:request_success_total", SCENE, "host, scene, finished_reason"),
         BY_SCENE + " {{finished_reason}}"),), "reqps", "scene"),

    Panel("GPUs", "GPU utilization", ((gpu("vllm_fleet_gpu_utilization_ratio"), BY_GPU),), "percentunit", "gpu"),
    # The plans of several scenes on one card add up.
    Panel("GPUs", "GPU memory: used, total and planned", (
        (gpu("vllm_fleet_gpu_memory_used_bytes"), "used " + BY_GPU),
        (gpu("vllm_fleet_gpu_memory_total_bytes"), "total " + BY_GPU),
        (gpu("vllm_fleet_gpu_memory_planned_bytes", "sum"), "planned " + BY_GPU)), "bytes", "gpu"),
    Panel("GPUs", "GPU temperature and its limit", (
        (gpu("vllm_fleet_gpu_temperature_celsius"), BY_GPU),
        (gpu("vllm_fleet_gpu_temperature_limit_celsius"), "limit " + BY_GPU)), "celsius", "gpu"),
    Panel("GPUs", "GPU power draw and its limit", (
        (gpu("vllm_fleet_gpu_power_draw_watts"), BY_GPU),
        (gpu("vllm_fleet_gpu_power_limit_watts"), "limit " + BY_GPU)), "watt", "gpu"),
    Panel("GPUs", "GPU throttled", ((gpu("vllm_fleet_gpu_throttled"), BY_GPU),), "short", "gpu", kind="stat",
          states=((1, "throttled", "red"), (0, "no", "green"))),
    Panel("GPUs", "nvidia-smi answers", ((f"max by (host) (vllm_fleet_nvidia_smi_up{{{NODE}}})", "{{host}}"),),
          "short", "gpu", kind="stat", states=UP_DOWN),

    Panel("Gateway", "Requests/s per key", ((per_key("vllm_fleet_gateway_key_requests_total"), "{{user}}"),),
          "reqps", "gateway"),
    Panel("Gateway", "Errors/s per key", (
        (per_key("vllm_fleet_gateway_key_client_errors_total"), "4xx {{user}}"),
        (per_key("vllm_fleet_gateway_key_server_errors_total"), "5xx {{user}}")), "reqps", "gateway"),
    Panel("Gateway", "Rate-limited (429)/s per key", (
        (per_key("vllm_fleet_gateway_key_rate_limited_total"), "{{user}}"),), "reqps", "gateway"),
    Panel("Gateway", "In-flight requests per key", (
        (f"sum by (user) (vllm_fleet_gateway_key_in_flight{{{NODE}}})", "{{user}}"),), "short", "gateway"),
    Panel("Gateway", "Backend responses/s by code", (
        (summed_rate("haproxy_backend_http_responses_total", GATEWAY, "proxy, code"), "{{proxy}} {{code}}"),),
        "reqps", "gateway"),
    Panel("Gateway", "Backend active servers", (
        (f"max by (proxy) (haproxy_backend_active_servers{{{GATEWAY}}})", "{{proxy}}"),), "short", "gateway",
        kind="stat", width=6),
    # HAProxy exports one series per state, 1 on the server's own: its UP series reads 1 (up) or 0.
    Panel("Gateway", "Backend servers up", (
        (f'max by (proxy, server) (haproxy_server_status{{{GATEWAY}, state="UP"}})', "{{proxy}}/{{server}}"),),
        "short", "gateway", kind="stat", width=6, states=UP_DOWN),

    Panel("Hosts", "Scrape health", (('min by (job, host) (up{host=~"$host"})', "{{host}} {{job}}"),), "short",
          "host", kind="stat", width=8, states=UP_DOWN),
    Panel("Hosts", "Since the in-sync record", ((age("vllm_fleet_in_sync_record_timestamp_seconds"), "{{host}}"),),
          "s", "host", kind="stat", width=8),
    Panel("Hosts", "Drift verdict", ((f"vllm_fleet_drift_verdict{{{NODE}}} == 1", "{{host}} {{verdict}}"),), "short",
          "drift", kind="stat", width=8, text_mode="name"),
    Panel("Hosts", "Verification passed", (
        (f"min by (host, scene) (vllm_fleet_verification_passed{{{NODE}}})", BY_SCENE),), "short", "host",
        kind="stat", states=((1, "passed", "green"), (0, "failed", "red"))),
    Panel("Hosts", "Since verification", ((age("vllm_fleet_verification_timestamp_seconds", "host, scene"), BY_SCENE),),
          "s", "host", kind="stat"),
    Panel("Hosts", "Model disk free (/)", ((f'node_filesystem_avail_bytes{{{NODE}, mountpoint="/"}} / '
                                            f'node_filesystem_size_bytes{{{NODE}, mountpoint="/"}}', "{{host}}"),),
          "percentunit", "host"),
    # Busy seconds per second over the host's CPU count.
    Panel("Hosts", "CPU busy", ((f'{summed_rate("node_cpu_seconds_total", NODE + ", mode!=" + IDLE, "host")} / '
                                 f"count by (host) (node_cpu_seconds_total{{{NODE}, mode={IDLE}}})", "{{host}}"),),
          "percentunit", "host"),
)

VARIABLES = (
    ("host", "Host", "label_values(up, host)"),
    ("scene", "Scene", 'label_values(vllm:num_requests_running{host=~"$host"}, scene)'),
)


def runnable(expr: str) -> str:
    """Return a dashboard query with its variables replaced (all hosts and scenes, a 1m window), ready for Prometheus."""
    return VARIABLE.sub(lambda m: RUNNABLE[m.group(1)], expr)


def panel_queries() -> list[tuple[str, str, str]]:
    """Return (panel title, runnable expr, needs) for every query of every panel."""
    return [(p.title, runnable(expr), p.needs) for p in PANELS for expr, _legend in p.queries]


def target(ref: int, query: Query) -> dict[str, Any]:
    """Return one Grafana query target; refIds run A, B, C..."""
    expr, legend = query
    return {"datasource": DATASOURCE, "refId": chr(ord("A") + ref), "expr": expr, "legendFormat": legend,
            "range": True, "instant": False, "editorMode": "code"}


def field_config(panel: Panel) -> dict[str, Any]:
    """Return a panel's field defaults: its unit, a 0-1 scale for fractions and its value mappings."""
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.unit == "percentunit":
        defaults.update({"min": 0, "max": 1})
    if panel.states:
        defaults["mappings"] = [{"type": "value", "options": {str(value): {"text": text, "color": colour, "index": i}
                                                              for i, (value, text, colour) in enumerate(panel.states)}}]
    return {"defaults": defaults, "overrides": []}


def options(panel: Panel) -> dict[str, Any]:
    """Return a panel's display options by its type."""
    if panel.kind == "stat":
        # Colour only from a verdict's value mappings: Grafana's default thresholds (red from 80) mean nothing here.
        return {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "colorMode": "background"
                if panel.states else "none", "graphMode": "none", "textMode": panel.text_mode, "justifyMode": "auto",
                "orientation": "auto"}
    return {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"}}


def grafana_panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    """Return a panel's Grafana JSON at the given grid position."""
    return {"type": panel.kind, "title": panel.title, "id": panel_id, "datasource": DATASOURCE,
            "gridPos": {"h": KINDS[panel.kind], "w": panel.width, "x": x, "y": y},
            "fieldConfig": field_config(panel), "options": options(panel),
            "targets": [target(i, q) for i, q in enumerate(panel.queries)]}


def row_panel(title: str, panel_id: int, y: int) -> dict[str, Any]:
    """Return an expanded row's Grafana JSON: a full-width title line."""
    return {"type": "row", "title": title, "id": panel_id, "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []}


def layout(panels: tuple[Panel, ...]) -> list[dict[str, Any]]:
    """Return the rows and their panels as Grafana JSON, left to right on a 24-wide grid, a new line when one is full."""
    out: list[dict[str, Any]] = []
    y = 0
    for row in ROWS:
        out.append(row_panel(row, len(out) + 1, y))
        y, x, tallest = y + 1, 0, 0
        for panel in (p for p in panels if p.row == row):
            if x + panel.width > 24:
                y, x, tallest = y + tallest, 0, 0
            out.append(grafana_panel(panel, len(out) + 1, x, y))
            x, tallest = x + panel.width, max(tallest, KINDS[panel.kind])
        y += tallest
    return out


def variable(name: str, label: str, query: str) -> dict[str, Any]:
    """Return a query template variable: multi-value, with All as the regex .* (used as label=~"$name")."""
    # The query as a string: every Grafana since 7 reads it (an object would need the editor's own fields).
    return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE, "definition": query,
            "query": query, "refresh": 2, "sort": 1,
            "multi": True, "includeAll": True, "allValue": ".*", "current": {}, "options": [], "regex": "", "hide": 0}


def dashboard() -> dict[str, Any]:
    """Return the dashboard's Grafana JSON model, as Grafana's Import dashboard takes it."""
    kinds = sorted({p.kind for p in PANELS})
    return {
        "__inputs": [{"name": DATASOURCE_INPUT, "label": "Prometheus", "description": "Prometheus scraping the fleet",
                      "type": "datasource", "pluginId": "prometheus", "pluginName": "Prometheus"}],
        "__requires": [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.4.0"},
                       {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"}]
        + [{"type": "panel", "id": kind, "name": KIND_NAMES[kind], "version": ""} for kind in kinds],
        "id": None, "uid": UID, "title": TITLE, "description": "vLLM scenes, their GPUs, the gateway and the hosts "
        "(generated by tools/dashboard.py)", "tags": ["vllm", "vllm-fleet"], "editable": True, "graphTooltip": 1,
        "timezone": "browser", "schemaVersion": SCHEMA_VERSION, "version": 1, "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s", "annotations": {"list": []}, "links": [],
        "templating": {"list": [variable(*v) for v in VARIABLES]},
        "panels": layout(PANELS),
    }
