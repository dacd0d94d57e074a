#!/usr/bin/env python3
"""What the gateway adds to each request: sequential one-token chat completions from a lab GPU host to its own
realtime scene, directly on loopback and through the gateway (and that host's ingress), interleaved in one run, on a
kept-alive connection and on a new connection per request (through the gateway: a full TLS handshake, or a resumed
TLS session). The other GPU host's scene is out of rotation meanwhile, so both paths reach the same scene.

With --before REF, the gateway and ingress are converged from that commit (a git worktree), then from this checkout,
and each run measures both configs in turn (swapped in place, each HAProxy reloaded): before and after a change, on
the same hosts, in one run. Runs on the lab `make lab` starts (two GPU hosts and a gateway; it runs `make lab` when
that lab is not up); prints medians over --runs runs of p50 and p99 per path, and the gateway's added milliseconds
(gateway minus direct)."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import REPO, BenchError, Lab

sys.path.insert(0, str(REPO / "tools"))

from gateway_load import runtime_api_shell  # noqa: E402
from lab_vault import lab_secrets  # noqa: E402

LAB = Lab("lab", 1)
HOST, OTHER, GATEWAY = 1, 2, 3
USER_KEY_VAR = "vault_lab_gateway_key_lab_user"
# Runs on the GPU host: stdlib only. Paths interleave request by request, so drift on the lab's shared cores
# touches each alike.
CLIENT = r"""
import http.client, json, socket, ssl, sys, time
with open(sys.argv[1]) as handle:
    args = json.load(handle)
body = json.dumps({"model": args["model"], "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]})
context = ssl.create_default_context(cafile="/root/bench-ca.pem")
session = {"tls": None}
def connect(path):
    if path.startswith("direct"):
        return http.client.HTTPConnection("127.0.0.1", 8000, timeout=30)
    conn = http.client.HTTPSConnection(args["gateway"], 443, context=context, timeout=30)
    if path == "gateway resumed" and session["tls"] is not None:
        raw = socket.create_connection((args["gateway"], 443), 30)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as http.client's own connect does
        conn.sock = context.wrap_socket(raw, server_hostname=args["gateway"], session=session["tls"])
    return conn
def ask(conn, path):
    key = args["scene_key"] if path.startswith("direct") else args["user_key"]
    started = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Authorization": "Bearer " + key,
                                                        "Content-Type": "application/json"})
    answer = conn.getresponse()
    answer.read()
    if answer.status != 200:
        raise SystemExit(f"{path}: {answer.status}")
    return (time.perf_counter() - started) * 1000
kept = {"direct kept-alive": connect("direct kept-alive"), "gateway kept-alive": connect("gateway kept-alive")}
paths = ["direct kept-alive", "gateway kept-alive", "direct new", "gateway new", "gateway resumed"]
times = {path: [] for path in paths}
for index in range(args["warmup"] + args["requests"]):
    for path in paths:
        conn = kept.get(path) or connect(path)
        ms = ask(conn, path)
        if path == "gateway new" and session["tls"] is None:
            session["tls"] = conn.sock.session
        if path not in kept:
            conn.close()
        if index >= args["warmup"]:
            times[path].append(ms)
print(json.dumps(times))
"""


def percentile(values: list[float], share: float) -> float:
    """Return the nearest-rank percentile of values (share in 0-1)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def measure(requests: int) -> dict[str, dict[str, float]]:
    """Run the client once on the GPU host; return p50 and p99 in ms per path."""
    secrets = lab_secrets(REPO / "inventory/lab/group_vars/gateways/vault.yml",
                          REPO / "inventory/lab/group_vars/gpu_hosts/vault.yml")
    args = {"model": "tiny-qwen2", "gateway": LAB.address(GATEWAY), "user_key": secrets[USER_KEY_VAR],
            "scene_key": secrets["vault_lab_realtime_api_key"], "requests": requests, "warmup": 10}
    # The keys travel over SSH's stdin into a root-only file the client reads, never on a command line.
    command = "umask 077; cat > /root/latency.py; python3 /root/latency.py /root/latency-args.json"
    LAB.on_host_stdin(HOST, "umask 077; cat > /root/latency-args.json", json.dumps(args))
    LAB.on_host_stdin(HOST, "cat > /root/bench-ca.pem", Path(f"/var/lib/vllm-fleet-lab/pki/{LAB.name}/ca.crt").read_text())
    times = json.loads(LAB.on_host_stdin(HOST, command, CLIENT))
    return {path: {"p50": statistics.median(ms), "p99": percentile(ms, 0.99)} for path, ms in times.items()}


def converge_front(checkout: Path) -> None:
    """Converge the lab's ingress and gateway from a checkout, the lab's user allowed every request the runs make;
    raise BenchError on failure."""
    users = {"vllm_gateway_users": [{"name": "lab-user", "key_var": USER_KEY_VAR, "models": ["tiny-qwen2"],
                                     "requests_per_minute": 100000, "max_concurrent": 16}]}
    extra = Path(tempfile.mkdtemp()) / "users.json"
    extra.write_text(json.dumps(users))
    for playbook in ("playbooks/ingress.yml", "playbooks/gateway.yml"):
        argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "inventory/lab", playbook, "-e", f"@{extra}"]
        done = subprocess.run(argv, cwd=checkout, env={**LAB.env, "ANSIBLE_CONFIG": str(checkout / "ansible.cfg")},
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BenchError(f"{playbook} from {checkout} failed:\n{done.stdout[-3000:]}")


# The HAProxy configs a converge leaves, by host: the gateway's and each GPU host's ingress.
CONFIGS = {GATEWAY: "/etc/vllm-gateway/haproxy.cfg", HOST: "/etc/vllm-ingress/haproxy.cfg",
           OTHER: "/etc/vllm-ingress/haproxy.cfg"}


def read_configs() -> dict[int, str]:
    """Return the gateway's and the ingresses' configs as the last converge left them."""
    return {n: LAB.on_host(n, f"cat {path}") for n, path in CONFIGS.items()}


def install_configs(configs: dict[int, str]) -> None:
    """Put these configs in place and reload each HAProxy (a checked, hitless reload), then let it settle."""
    for n, path in CONFIGS.items():
        unit = "vllm-gateway" if n == GATEWAY else "vllm-ingress"
        LAB.on_host_stdin(n, f"cat > {path}; systemctl reload {unit}", configs[n])
    time.sleep(3)
    LAB.on_host(GATEWAY, runtime_api_shell(f"set server model_0/lab{OTHER}:realtime state maint"))


def add_run(rows: dict[str, list[float]], figures: dict[str, dict[str, float]]) -> None:
    """Add one run's p50 and p99 per path, and what the gateway adds to the direct path, to rows."""
    for path, values in figures.items():
        for name, value in values.items():
            rows.setdefault(f"{path} {name}", []).append(value)
    for added, gateway, direct in (("kept-alive", "gateway kept-alive", "direct kept-alive"),
                                   ("new", "gateway new", "direct new"), ("resumed", "gateway resumed", "direct new")):
        for name in ("p50", "p99"):
            rows.setdefault(f"added {added} {name}", []).append(figures[gateway][name] - figures[direct][name])


def main() -> int:
    """Converge before (optional) and after, then measure them in turn, run by run; print one Markdown table of
    medians in ms."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200, help="requests per path and run")
    parser.add_argument("--before", help="a commit whose gateway and ingress to measure beside the checkout's")
    parser.add_argument("--json", help="also write the medians to this file")
    args = parser.parse_args()
    if not LAB.exists():  # the lab `make lab` starts and converges, left up for the next run
        subprocess.run(["make", "lab"], cwd=REPO, check=True)
    configs: dict[str, dict[int, str]] = {}
    if args.before:
        with tempfile.TemporaryDirectory() as scratch:
            worktree = Path(scratch) / "before"
            subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.before], cwd=REPO, check=True,
                           capture_output=True)
            try:
                converge_front(worktree)
                configs[f"before ({args.before})"] = read_configs()
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, check=False)
    converge_front(REPO)  # leaves the checkout's configs in place at the end
    configs["after"] = read_configs()
    # Each run measures every config in turn, so the lab's drift over the runs touches each alike.
    columns: dict[str, dict[str, list[float]]] = {label: {} for label in configs}
    try:
        for _ in range(args.runs):
            for label, config in configs.items():
                install_configs(config)
                add_run(columns[label], measure(args.requests))
    finally:
        install_configs(configs["after"])
        LAB.on_host(GATEWAY, runtime_api_shell(f"set server model_0/lab{OTHER}:realtime state ready"))
    names = list(columns["after"])
    print("| ms (median of runs) | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name in names:
        print(f"| {name} | " + " | ".join(f"{statistics.median(c[name]):.2f}" for c in columns.values()) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps({label: {n: statistics.median(v) for n, v in c.items()}
                                               for label, c in columns.items()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
