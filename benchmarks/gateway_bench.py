#!/usr/bin/env python3
"""The fleet gateway on a lab of two GPU-role hosts and a gateway: its overhead against a scene reached directly,
prefix affinity against round robin on a workload of shared long prefixes larger than one scene's KV cache, and
rollouts of a change that restarts every scene while a steady load goes through the gateway.

The first two loads are `vllm bench serve` from the first GPU host's own vLLM: directly to its scene on loopback, or
through the gateway's TLS port with a user's key. The rollouts' load is tools/gateway_load.py from the controller.
Prints medians over --runs runs (and writes them with --json)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchlib import REPO, BenchError, Lab, lab_arguments, markdown_table, write_json

sys.path.insert(0, str(REPO / "tools"))

from gateway_load import Load, runtime_api_shell  # noqa: E402
from lab_vault import lab_secrets  # noqa: E402

LAB = Lab("mgwb", 236)  # indexes 236..238: away from `make lab-up`, molecule and the other benchmarks
HOST1, HOST2, GATEWAY = "mgwb1", "mgwb2", "mgwb3"
MODEL, TOKENIZER = "tiny-qwen2", "/var/lib/vllm/models/tiny-qwen2-awq"
VLLM = "/opt/vllm/current/bin/vllm"
GATEWAY_URL, CA_FILE = f"https://{LAB.address(3)}", f"/var/lib/vllm-fleet-lab/pki/{LAB.name}/ca.crt"
# Each scene's KV cache is capped so the affinity workload's prefixes (12 x 1,024 tokens, 8 blocks of 128 each)
# overflow one scene (64 blocks: 8,192 tokens) but fit the fleet's two (16,384).
KV_CAP = {"num_gpu_blocks_override": 64, "block_size": 128}


def bench_vars(**engine_args: int) -> dict[str, object]:
    """Return the benchmark's extra vars: the realtime scene alone, with these engine args, and the lab's user with
    limits the loads stay under (the lab's 600 a minute would refuse the second overhead run's requests)."""
    return {"vllm_scenes_list": [{"name": "realtime", "api_key_var": "vault_lab_realtime_api_key",
                                  "engine_args": engine_args}],
            "vllm_gateway_users": [{"name": "lab-user", "key_var": USER_KEY_VAR, "models": [MODEL],
                                    "requests_per_minute": 100000, "max_concurrent": 64}]}

USER_KEY_VAR = "vault_lab_gateway_key_lab_user"
# 20 rounds at the realtime scene's concurrency: long enough that the first and last requests' ramp is not the figure.
OVERHEAD = ["--dataset-name=random", "--random-input-len=128", "--random-output-len=32", "--num-prompts=320",
            "--max-concurrency=16", "--ignore-eos"]
AFFINITY = ["--dataset-name=prefix_repetition", "--prefix-repetition-prefix-len=1024",
            "--prefix-repetition-suffix-len=64", "--prefix-repetition-num-prefixes=12",
            "--prefix-repetition-output-len=8", "--num-prompts=240", "--max-concurrency=8"]
# The rollouts' light verification (molecule default's), and the pause between one load request's answer and the next.
LIGHT_VERIFY = REPO / "molecule" / "default" / "rollout" / "verify.yml"
ROLLOUT_PACE_S = 0.2


def lab_key(name: str) -> str:
    """Return a lab Vault variable of the gateways' group vars, decrypted with the lab's public password."""
    return lab_secrets(REPO / "inventory" / "lab" / "group_vars" / "gateways" / "vault.yml")[name]


def converge(*extra: str) -> None:
    """Converge the lab (site.yml without its verification) with the benchmark's scenes."""
    vars_file = Path("/tmp/gateway-bench-vars.json")
    vars_file.write_text(json.dumps(bench_vars(**KV_CAP)))
    LAB.converge("-e", f"@{vars_file}", *extra)


def gateway_only(*extra: str) -> None:
    """Converge the gateway alone (a reload) with extra variables."""
    vars_file = Path("/tmp/gateway-bench-vars.json")
    done = subprocess.run(LAB.playbook("playbooks/gateway.yml", "all", "-e", f"@{vars_file}", *extra), cwd=REPO,
                          env=LAB.env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"gateway converge failed:\n{done.stdout[-3000:]}")


def bench(base_url: str, key_file: str, args: list[str], seed: int) -> dict[str, Any]:
    """Run vllm bench serve on host 1 against base_url with the key in key_file (KEY=...); return its result."""
    command = (f"set -a; . {key_file}; SSL_CERT_FILE=/root/bench-ca.pem; export OPENAI_API_KEY=\"$KEY\"; "
               f"HF_HUB_OFFLINE=1 {VLLM} bench serve --backend=openai-chat --endpoint=/v1/chat/completions "
               f"--base-url={base_url} --model={MODEL} --tokenizer={TOKENIZER} --request-rate=inf --seed={seed} "
               f"--percentile-metrics=ttft,tpot,e2el --metric-percentiles=50,99 --save-result --result-dir=/root "
               f"--result-filename=bench.json {' '.join(args)} >/root/bench.log 2>&1 && cat /root/bench.json")
    return json.loads(LAB.on_host(1, command))


def prefix_counters() -> tuple[float, float]:
    """Return the fleet's prefix-cache (queries, hits) token counters from each scene's /metrics, asked on its host."""
    queries = hits = 0.0
    for n in (1, 2):
        text = LAB.on_host(n, "set -a; . /etc/vllm/scenes/realtime.env; curl -s -H \"Authorization: Bearer "
                              "$VLLM_API_KEY\" http://127.0.0.1:8000/metrics")
        for line in text.splitlines():
            if line.startswith("vllm:prefix_cache_queries_total"):
                queries += float(line.split()[-1])
            elif line.startswith("vllm:prefix_cache_hits_total"):
                hits += float(line.split()[-1])
    return queries, hits


def rollout_under_load(run: int, user_key: str) -> dict[str, object]:
    """Roll out a max_num_seqs change to both GPU hosts (canary, then the other) while the load runs through the
    gateway; return the load's figures."""
    change = Path("/tmp/gateway-bench-rollout.json")
    change.write_text(json.dumps(bench_vars(**KV_CAP, max_num_seqs=12 + 2 * (run % 3))))
    with Load(GATEWAY_URL, user_key, CA_FILE, MODEL, ROLLOUT_PACE_S) as load:
        done = subprocess.run(LAB.playbook("playbooks/rollout.yml", "gpu_hosts", "-e", f"@{LIGHT_VERIFY}", "-e",
                                           f"@{change}"), cwd=REPO, env=LAB.env, capture_output=True, text=True,
                              check=False)
    if done.returncode != 0:
        raise BenchError(f"rollout failed:\n{done.stdout[-3000:]}")
    return load.figures()


def set_server(state: str) -> None:
    """Put host 2's scene in `state` (maint or ready) at the gateway through its runtime API."""
    LAB.on_host(3, runtime_api_shell(f"set server model_0/{HOST2}:realtime state {state}"))


def main() -> int:
    """Bring up the lab, measure overhead and affinity, print the table and write the JSON."""
    parser = lab_arguments(__doc__, runs=3)
    parser.add_argument("--json", help="also write the timings to this file (relative to the repo)")
    args = parser.parse_args()
    if problem := LAB.up("gateway_bench.py", 2, 1, args.reuse):
        print(problem, file=sys.stderr)
        return 1
    try:
        converge()
        ca = Path(CA_FILE).read_text()
        user_key = lab_key(USER_KEY_VAR)
        subprocess.run(LAB.on_host_argv(1, f"umask 077; cat > /root/bench-ca.pem; printf 'KEY=%s\\n' '{user_key}' "
                                           "> /root/bench-user.env"), input=ca, text=True, check=True)
        LAB.on_host(1, "umask 077; . /etc/vllm/scenes/realtime.env; printf 'KEY=%s\\n' \"$VLLM_API_KEY\" "
                       "> /root/bench-scene.env")
        rows: dict[str, list[float]] = {}
        set_server("maint")  # overhead: the gateway's only scene is host 1's, the one the direct runs reach
        for run in range(args.runs):
            for name, url, key in (("direct", "http://127.0.0.1:8000", "/root/bench-scene.env"),
                                   ("gateway", GATEWAY_URL, "/root/bench-user.env")):
                result = bench(url, key, OVERHEAD, seed=run)
                rows.setdefault(f"{name}: TTFT p50 ms", []).append(result["median_ttft_ms"])
                rows.setdefault(f"{name}: output tok/s", []).append(result["output_throughput"])
        set_server("ready")
        for mode, extra in (("prefix affinity", ()), ("round robin", ("-e", "vllm_gateway_balance=roundrobin"))):
            gateway_only(*extra)
            for run in range(args.runs):
                before = prefix_counters()
                result = bench(GATEWAY_URL, "/root/bench-user.env", AFFINITY, seed=100 + run + (50 if extra else 0))
                after = prefix_counters()
                rows.setdefault(f"{mode}: prefix-cache hit rate %", []).append(
                    100 * (after[1] - before[1]) / max(after[0] - before[0], 1))
                rows.setdefault(f"{mode}: TTFT p50 ms", []).append(result["median_ttft_ms"])
        for run in range(args.runs):
            figures = rollout_under_load(run, user_key)
            for name in ("requests", "failed", "p50_ms", "p99_ms", "seconds"):
                rows.setdefault(f"rollout under load: {name.replace('_', ' ')}", []).append(float(figures[name]))
        if args.json:
            write_json(REPO / args.json, rows)
        print(markdown_table(rows, unit=""))
    finally:
        if not args.keep:
            subprocess.run(LAB.tool("down"), check=False, capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
