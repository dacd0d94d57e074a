"""Shared pieces of the benchmarks: timing a command, recording runs, medians and the Markdown table."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

import lab_vault  # noqa: E402

LAB_WWW = Path("/var/lib/vllm-fleet-lab/www")  # the lab file server's root (Makefile LAB_WWW)
Results = dict[str, list[float]]


class BenchError(Exception):
    """A benchmarked command failed; the message carries its output."""


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    """Run a command from the repository root and return its wall time in seconds; raise BenchError on failure."""
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()[-3000:]
        raise BenchError(f"`{' '.join(argv)}` failed ({proc.returncode}):\n{output}")
    return seconds


def record(results: Results, name: str, seconds: float) -> None:
    """Add one timing to the results and show it as progress on stderr."""
    results.setdefault(name, []).append(seconds)
    print(f"  {name}: {seconds:.2f}s (run {len(results[name])})", file=sys.stderr, flush=True)


def repeat(results: Results, name: str, runs: int, step: Callable[[], float]) -> None:
    """Record `runs` timings of one step under one benchmark name."""
    for _ in range(runs):
        record(results, name, step())


def summary(times: list[float]) -> dict[str, float]:
    """Return the median, min and max of a list of timings, rounded to milliseconds."""
    return {"median": round(statistics.median(times), 3), "min": round(min(times), 3), "max": round(max(times), 3)}


def markdown_table(results: Results, unit: str = "s") -> str:
    """Return the results as a Markdown table: benchmark, runs, median, min, max (in `unit`; "" when names say it)."""
    suffix = f" {unit}" if unit else ""
    lines = [f"| benchmark | runs | median{suffix} | min{suffix} | max{suffix} |", "|---|---:|---:|---:|---:|"]
    for name, times in results.items():
        s = summary(times)
        lines.append(f"| {name} | {len(times)} | {s['median']:.2f} | {s['min']:.2f} | {s['max']:.2f} |")
    return "\n".join(lines)


def write_json(path: Path, results: Results) -> None:
    """Write the raw timings and their summaries as JSON."""
    data = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpus": os.cpu_count(),
            "benchmarks": {name: {"runs": [round(t, 3) for t in times], **summary(times)}
                           for name, times in results.items()}}
    path.write_text(json.dumps(data, indent=2) + "\n")


def lab_arguments(description: str, runs: int) -> argparse.ArgumentParser:
    """Return the options every lab benchmark takes: --runs, --keep (leave the lab up) and --reuse (use a kept one)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--keep", action="store_true", help="leave the lab up")
    parser.add_argument("--reuse", action="store_true", help="use the lab a --keep run left up")
    return parser


class Lab:
    """A benchmark's own lab (tools/lab) on subnets 10.213.<first_index + n - 1>.0/24, and its scene's port."""

    def __init__(self, name: str, first_index: int, port: int = 8000) -> None:
        """Name the lab, its first subnet index and the scene port its probes ask."""
        self.name, self.first_index, self.port = name, first_index, port
        self.env = {**os.environ, "VFL_LAB": name, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
                    "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory", "ANSIBLE_VAULT_IDENTITY_LIST": lab_vault.IDENTITY}

    def tool(self, command: str, *args: str) -> list[str]:
        """Return the argv of a `tools/lab` command on this lab."""
        return [str(REPO / "tools" / "lab"), command, "--lab", self.name, *args]

    def playbook(self, playbook_path: str, limit: str = "gpu_hosts", *extra: str) -> list[str]:
        """Return the argv of an ansible-playbook run on this lab."""
        return [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "inventory/lab", "-l", limit, playbook_path, *extra]

    def converge(self, *extra: str) -> None:
        """Converge the whole lab with site.yml, its verification skipped; raise BenchError on failure."""
        done = subprocess.run(self.playbook("site.yml", "all", "--skip-tags", "verify", *extra), cwd=REPO, env=self.env,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BenchError(f"converge failed:\n{done.stdout[-3000:]}")

    def address(self, n: int) -> str:
        """Return the address of host n."""
        return f"10.213.{self.first_index + n - 1}.2"

    def on_host_argv(self, n: int, command: str) -> list[str]:
        """Return the argv that runs a shell command on host n as root over SSH."""
        keys = f"/var/lib/vllm-fleet-lab/labs/{self.name}"
        return ["ssh", "-i", f"{keys}/id_ed25519", "-o", f"UserKnownHostsFile={keys}/known_hosts",
                "-o", "StrictHostKeyChecking=yes", f"root@{self.address(n)}", command]

    def on_host(self, n: int, command: str) -> str:
        """Run a shell command on host n as root over SSH and return its output."""
        return subprocess.run(self.on_host_argv(n, command), capture_output=True, text=True, check=True).stdout

    def on_host_stdin(self, n: int, command: str, data: str) -> str:
        """Run a shell command on host n as root over SSH with data on its standard input; return its output."""
        return subprocess.run(self.on_host_argv(n, command), input=data, capture_output=True, text=True,
                              check=True).stdout

    def healthy_after(self, n: int, started: float, timeout: float = 900) -> float:
        """Poll the scene's /health on host n, from the host itself (scenes listen on loopback), until 200; return
        seconds since `started` (time.monotonic)."""
        probe = (f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 2 http://127.0.0.1:{self.port}/health")
        script = (f"for i in $(seq {int(timeout * 5)}); do [ \"$({probe})\" = 200 ] && exit 0; sleep 0.2; done; "
                  "exit 1")
        try:
            self.on_host(n, script)
        except subprocess.CalledProcessError:
            raise BenchError(f"the scene on port {self.port} of host {n} is not healthy within {timeout:.0f}s") from None
        return time.monotonic() - started

    def restart_time(self, n: int, unit: str) -> float:
        """Restart a scene's unit on host n (its compile caches as they are); return seconds until it is healthy."""
        # The unit allows 5 starts in 10 minutes (a crash-loop guard); a benchmark restarting on purpose resets the count.
        self.on_host(n, f"systemctl reset-failed {unit}")
        started = time.monotonic()
        self.on_host(n, f"systemctl restart {unit}")
        return self.healthy_after(n, started)

    def exists(self) -> bool:
        """Return whether this lab has hosts up."""
        return bool(json.loads(subprocess.run(self.tool("status"), capture_output=True, text=True, check=True).stdout))

    def cannot_start(self, script: str) -> str:
        """Return why a benchmark script cannot start its lab (not root, or the lab is up already), or ""."""
        if os.geteuid() != 0:
            return f"{script}: needs root (it starts lab hosts)"
        if self.exists():
            return f"{script}: lab {self.name!r} exists: run `tools/lab down --lab {self.name}` first"
        return ""

    def up(self, script: str, hosts: int, gateways: int, reuse: bool) -> str:
        """Start this lab's hosts and gateways unless reuse finds it up; return why it cannot start, or ""."""
        if reuse and self.exists():
            return ""
        if problem := self.cannot_start(script):
            return problem
        subprocess.run(self.tool("up", "--hosts", str(hosts), "--gateways", str(gateways), "--first-index",
                                 str(self.first_index)), check=True, capture_output=True)
        return ""
