"""The lab gateway (mdef4) as a client reaches it: its keys from the lab's Vault files, HTTPS requests trusting the
fleet CA, the OpenAI SDK from the generated settings, and a steady load that records every answer."""

from __future__ import annotations

import functools
import json
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai

sys.path[:0] = [str(Path(__file__).resolve().parents[3] / "tools"), str(Path(__file__).resolve().parents[2] / "shared")]

from lab_vault import lab_secrets  # noqa: E402
from playbooks import lab_host  # noqa: E402

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
LAB, GATEWAY, GPU_HOSTS = "mdef", "mdef4", ("mdef1", "mdef2", "mdef3")
CA_FILE = f"/var/lib/vllm-fleet-lab/pki/{LAB}/ca.crt"
SETTINGS = REPO / "clients" / GATEWAY
MODEL, BATCH_MODEL = "tiny-qwen2", "tiny-qwen2-batch"
VAULT_FILES = [REPO / "inventory/lab/group_vars/gateways/vault.yml", SCENARIO / f"host_vars/{GATEWAY}/vault.yml",
               REPO / "inventory/lab/group_vars/gpu_hosts/vault.yml"]
PACE_S = 0.2  # between one load request's answer and the next: the lab's two cores keep room for what runs beside


@functools.cache
def secrets() -> dict[str, str]:
    """Return the lab's Vault variables the gateway tests use (keys of the scenes and of the gateway's users)."""
    return lab_secrets(*VAULT_FILES)


def key(user: str) -> str:
    """Return a gateway user's key by user name."""
    return secrets()[{"lab-user": "vault_lab_gateway_key_lab_user"}.get(user, f"vault_mdef_key_{user.replace('-', '_')}")]


@functools.cache
def gateway_url() -> str:
    """Return the gateway's base URL as the generated client settings give it (without /v1)."""
    return json.loads((SETTINGS / "lab-user.json").read_text())["base_url"].removesuffix("/v1")


def call(path: str, token: str | None = None, body: dict[str, object] | None = None, method: str | None = None,
         url: str | None = None, timeout: float = 60) -> tuple[int, dict[str, str], str]:
    """Make one HTTPS request to the gateway (or url) trusting the fleet CA; return status, headers (names in lower
    case, as HAProxy sends them) and body."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request((url or gateway_url()) + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=ssl.create_default_context(cafile=CA_FILE)) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read().decode()


def chat(token: str, model: str = MODEL, prompt: str = "Hello", tokens: int = 4) -> tuple[int, dict[str, str], str]:
    """Send one short chat completion through the gateway."""
    return call("/v1/chat/completions", token, {"model": model, "max_tokens": tokens,
                                                "messages": [{"role": "user", "content": prompt}]})


def client(user: str) -> tuple[openai.OpenAI, dict[str, object]]:
    """Return the real OpenAI SDK configured from a user's generated client settings, and the settings."""
    settings = json.loads((SETTINGS / f"{user}.json").read_text())
    return openai.OpenAI(base_url=settings["base_url"], api_key=key(user), timeout=settings["timeout"],
                         http_client=openai.DefaultHttpxClient(verify=settings["ca_file"])), settings


def server_events(since: str) -> str:
    """Return what the gateway logged about its servers' state (down, up, drained, none left) since a journalctl
    time: why a load's requests failed."""
    return lab_host(GATEWAY).run(f"journalctl -u vllm-gateway --since '{since}' -o short-precise --no-pager "
                                 "-g 'is (DOWN|UP)|is going DOWN|DRAIN|no server available'").stdout[-4000:]


class Load:
    """A steady load of short chat requests through the gateway, one every pace seconds after the last answer,
    recording each outcome as (start, end, status, backend)."""

    def __init__(self, user: str = "lab-user", pace: float = PACE_S) -> None:
        """Prepare the load for one user's key; entering the context runs it."""
        self.token, self.pace, self.stop, self.results = key(user), pace, threading.Event(), []
        self.since = ""  # the gateway's clock when the load started, for server_events
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        """Send requests until stopped, recording each."""
        n = 0
        while not self.stop.is_set():
            n += 1
            start = time.monotonic()
            try:
                status, headers, _ = chat(self.token, prompt=f"load request {n}", tokens=2)
            except OSError:
                status, headers = 0, {}
            self.results.append((start, time.monotonic(), status, headers.get("x-vllm-fleet-backend", "")))
            time.sleep(self.pace)

    def __enter__(self) -> Load:
        """Start the load."""
        self.since = lab_host(GATEWAY).check_output("date '+%Y-%m-%d %H:%M:%S'")
        self.thread.start()
        time.sleep(2)
        return self

    def __exit__(self, *_: object) -> None:
        """Stop the load and wait for the request in flight."""
        self.stop.set()
        self.thread.join(120)

    def failures(self, unless_in_flight_at: float | None = None) -> list[tuple[float, float, int, str]]:
        """Return the failed requests, leaving out those in flight at a given moment."""
        return [r for r in self.results if r[2] != 200
                and not (unless_in_flight_at is not None and r[0] <= unless_in_flight_at <= r[1])]

    def figures(self) -> dict[str, object]:
        """Return the load's count, failures, latency p50/p99 and requests per backend."""
        latencies = sorted(end - start for start, end, _, _ in self.results) or [0.0]
        backends = sorted({r[3] for r in self.results})
        return {"requests": len(self.results), "failed": len(self.failures()),
                "seconds": round(self.results[-1][1] - self.results[0][0]) if self.results else 0,
                "p50_ms": round(latencies[len(latencies) // 2] * 1000),
                "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000),
                "by_backend": {b: sum(1 for r in self.results if r[3] == b) for b in backends}}
