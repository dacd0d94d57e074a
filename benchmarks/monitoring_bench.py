#!/usr/bin/env python3
"""What monitoring costs a scene, on a lab of a GPU host and a gateway that monitors it:

1. `vllm bench serve` on the GPU host against its realtime scene, with the monitoring host's Prometheus scraping every
   15 s (the scene's /metrics through the ingress, node_exporter and the collector's textfile) and with Prometheus
   stopped, alternately, --runs times each: the medians of TPOT p50 and output throughput per mode, their difference
   and the runs' spread (the noise the difference is read against);
2. the scene's journal while it idles, scraped and health-checked by the gateway every second, with the kit's quiet
   access log (/metrics and /health left out) and with every path logged: bytes and lines per hour."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

from benchlib import REPO, Lab, lab_arguments

LAB = Lab("mmnb", 248)  # indexes 248..249: away from `make lab-up`, molecule and the other benchmarks
MODEL, TOKENIZER, VLLM = "tiny-qwen2", "/var/lib/vllm/models/tiny-qwen2-awq", "/opt/vllm/current/bin/vllm"
LOAD = ["--dataset-name=random", "--random-input-len=128", "--random-output-len=32", "--num-prompts=160",
        "--max-concurrency=16", "--ignore-eos"]
UNIT = "vllm-scene-realtime.service"
# Every path in the access log: vLLM's own default, which the kit's scenes change.
LOUD = json.dumps({"vllm_scenes_list": [{"name": "realtime", "api_key_var": "vault_lab_realtime_api_key",
                                         "engine_args": {"disable-access-log-for-endpoints": "/none"}}]})
SETTLE_S = 20  # after Prometheus starts or stops, before the load: scrapes at their steady pace, or none


JOURNAL_WINDOW_S = 120


def converge(*extra: str) -> None:
    """Converge the lab (site.yml without its verification) with Prometheus scraping every 15 s."""
    LAB.converge("-e", "vllm_monitoring_scrape_interval=15s", *extra)


def bench(seed: int) -> dict[str, float]:
    """Run vllm bench serve on host 1 against its realtime scene; return TPOT p50 (ms) and output tokens/s."""
    command = ("set -a; . /etc/vllm/scenes/realtime.env; export OPENAI_API_KEY=\"$VLLM_API_KEY\"; "
               f"HF_HUB_OFFLINE=1 {VLLM} bench serve --backend=openai-chat --endpoint=/v1/chat/completions "
               f"--base-url=http://127.0.0.1:8000 --model={MODEL} --tokenizer={TOKENIZER} --request-rate=inf "
               f"--seed={seed} --percentile-metrics=ttft,tpot --metric-percentiles=50,99 --save-result "
               f"--result-dir=/root --result-filename=bench.json {' '.join(LOAD)} >/root/bench.log 2>&1 "
               "&& cat /root/bench.json")
    result = json.loads(LAB.on_host(1, command))
    return {"median_tpot_ms": float(result["median_tpot_ms"]), "output_throughput": float(result["output_throughput"])}


def scraping(on: bool) -> None:
    """Start or stop Prometheus on the monitoring host (host 2), and let the scrapes settle."""
    LAB.on_host(2, f"systemctl {'start' if on else 'stop'} prometheus")
    time.sleep(SETTLE_S)


def journal_rate(window_s: int = JOURNAL_WINDOW_S) -> dict[str, float]:
    """Return the realtime scene's journal over window_s seconds of idling, per hour: bytes and lines."""
    time.sleep(window_s)
    text = LAB.on_host(1, f"journalctl -u {UNIT} --since=-{window_s}s --no-pager -o cat")
    return {"bytes per hour": len(text.encode()) * 3600 / window_s,
            "lines per hour": len(text.splitlines()) * 3600 / window_s}


def verdict(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Return per figure the median of each mode, the difference of scraping from not (%), and the noise: the larger
    of each mode's spread (max - min) relative to its median (%)."""
    out = {}
    for figure in ("median_tpot_ms", "output_throughput"):
        values = {mode: [r[figure] for r in listed] for mode, listed in runs.items()}
        medians = {mode: statistics.median(v) for mode, v in values.items()}
        noise = max((max(v) - min(v)) / statistics.median(v) * 100 for v in values.values())
        out[figure] = {"not scraping": medians["off"], "scraping every 15 s": medians["on"],
                       "difference %": (medians["on"] - medians["off"]) / medians["off"] * 100, "noise %": noise}
    return out


def main() -> int:
    """Bring up the lab, measure both modes alternately, print the verdict and write the JSON."""
    parser = lab_arguments(__doc__, runs=5)
    parser.add_argument("--json", help="also write the figures to this file (relative to the repo)")
    args = parser.parse_args()
    if problem := LAB.up("monitoring_bench.py", 1, 1, args.reuse):
        print(problem, file=sys.stderr)
        return 1
    try:
        converge()
        bench(0)  # a first load warms the scene's caches for both modes alike
        runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
        for run in range(args.runs):
            for mode in (("on", "off") if run % 2 else ("off", "on")):
                scraping(mode == "on")
                runs[mode].append(bench(run + 1))
                print(f"run {run + 1} {mode}: {runs[mode][-1]}", flush=True)
        scraping(True)
        result = verdict(runs)
        quiet = journal_rate()
        converge("-e", LOUD)
        time.sleep(SETTLE_S)
        logs = {"quiet (the kit's)": quiet, "every path logged": journal_rate()}
        print("| figure | not scraping | scraping every 15 s | difference | noise (max spread of a mode) |")
        print("|---|---|---|---|---|")
        for figure, row in result.items():
            print(f"| {figure} | {row['not scraping']:.2f} | {row['scraping every 15 s']:.2f} | "
                  f"{row['difference %']:+.1f}% | {row['noise %']:.1f}% |")
        print("\n| the scene's journal, idle, scraped every 15 s, health-checked every 1 s | bytes/hour | lines/hour |")
        print("|---|---:|---:|")
        for mode, rate in logs.items():
            print(f"| {mode} | {rate['bytes per hour']:,.0f} | {rate['lines per hour']:,.0f} |")
        if args.json:
            (REPO / args.json).write_text(json.dumps({"runs": runs, "verdict": result, "journal": logs}, indent=2) + "\n")
    finally:
        if not args.keep:
            subprocess.run(LAB.tool("down"), check=False, capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
