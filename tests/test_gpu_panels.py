"""The dashboard's GPU panels on real collector output, scraped by a real Prometheus on loopback: the H200's own
output (results/gpu-proof/h200-host-metrics.prom, written by the collector on the card) and the collector's rendering of
a real RTX 4080 SUPER query with its registry temperature limit. The cpu lab has no GPU for these panels."""

from __future__ import annotations

import functools
import http.server
import json
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
from conftest import REPO, load_as

from ansible_collections.vllm.fleet.plugins.plugin_utils import dashboard, monitoring

host_metrics = load_as("host_metrics", REPO / "roles/vllm_host_metrics/files/host_metrics.py")

H200_OUTPUT = REPO / "results" / "gpu-proof" / "h200-host-metrics.prom"
H200_QUERY = REPO / "tests" / "data" / "nvidia" / "metrics-h200.csv"
RTX4080S_QUERY = REPO / "tests" / "data" / "nvidia" / "metrics-rtx4080-super.csv"


def free_port() -> int:
    """Return a TCP port free on loopback now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def rtx4080s_output() -> str:
    """Return what the collector writes on a host with the captured 4080 SUPER and a 0.90 plan on it."""
    rows = host_metrics.parse_query_gpu(RTX4080S_QUERY.read_text())
    facts = {"gpus": [{"index": int(r["index"]), "name": r["name"], "memory_total_mib": int(r["memory.total"])}
                      for r in rows]}
    metrics = host_metrics.Metrics()
    host_metrics.nvidia_metrics(host_metrics.SmiResult(0, RTX4080S_QUERY.read_text()), metrics)
    host_metrics.planned_gpu_metrics(monitoring.gpu_limits(facts, [{"gpus": [0], "engine_args": {}}]), metrics)
    return host_metrics.render(metrics)


def test_the_h200_proof_is_what_the_collector_makes_of_the_h200_query() -> None:
    """The H200's output has the series the collector renders from the raw query taken beside it on the card (the
    readings moved between the two calls: power drew 78.18 W, then 78.15 W), with the same card's fixed values."""
    metrics = host_metrics.Metrics()
    host_metrics.nvidia_metrics(host_metrics.SmiResult(0, H200_QUERY.read_text()), metrics)
    rendered = [line for line in host_metrics.render(metrics).splitlines() if not line.startswith("#")]
    proof = [line for line in H200_OUTPUT.read_text().splitlines() if not line.startswith("#")]
    assert {line.rpartition(" ")[0] for line in rendered} <= {line.rpartition(" ")[0] for line in proof}
    fixed = ("memory_total_bytes", "power_limit_watts", "pcie_link", "gpu_info", "nvidia_smi_up")
    assert {line for line in rendered if any(name in line for name in fixed)} <= set(proof)
    assert 'vllm_fleet_gpu_info{gpu="0",name="NVIDIA H200",' in H200_OUTPUT.read_text()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Serve both hosts' outputs on loopback, scrape them every second with /usr/bin/prometheus; yield its URL."""
    root = tmp_path_factory.mktemp("gpu-panels")
    (root / "h200.prom").write_text(H200_OUTPUT.read_text())
    (root / "rtx4080s.prom").write_text(rtx4080s_output())
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    files = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=files.serve_forever, daemon=True).start()
    port = free_port()
    target = f"127.0.0.1:{files.server_address[1]}"
    jobs = [{"job_name": f"node-{host}", "scrape_interval": "1s", "metrics_path": f"/{host}.prom",
             "static_configs": [{"targets": [target], "labels": {"job": "node", "host": host}}]}
            for host in ("h200", "rtx4080s")]
    (root / "prometheus.yml").write_text(json.dumps({"scrape_configs": jobs}))
    server = subprocess.Popen(["/usr/bin/prometheus", f"--config.file={root / 'prometheus.yml'}",
                               f"--storage.tsdb.path={root / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(query(url, 'up{job="node"} == 1')) < 2:
            time.sleep(0.5)
        time.sleep(4)  # a few scrapes of each, for the panels' rates
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        files.shutdown()


def query(url: str, expr: str) -> list[dict[str, object]]:
    """Return the series of an instant query ([] while Prometheus is not up yet)."""
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=5) as reply:
            return json.load(reply)["data"]["result"]
    except OSError:
        return []


def test_every_gpu_panel_answers_on_real_cards(prometheus: str) -> None:
    """Each GPU panel's query returns a series; the temperature limit only for the card the registry has one for."""
    gpu_queries = [(title, expr) for title, expr, needs in dashboard.panel_queries() if needs == "gpu"]
    assert len(gpu_queries) >= 8
    empty = [(title, expr) for title, expr in gpu_queries if not query(prometheus, expr)]
    assert empty == []
    limits = query(prometheus, "vllm_fleet_gpu_temperature_limit_celsius")
    assert [(s["metric"]["host"], s["value"][1]) for s in limits] == [("rtx4080s", "90")]  # type: ignore[index]
