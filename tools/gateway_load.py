"""A steady load of short chat completions through a fleet gateway that records every answer: the load of the gateway's
molecule tests (failover, revocation, rollouts) and of its benchmark (a rollout under load)."""

from __future__ import annotations

import json
import ssl
import statistics
import threading
import time
import urllib.error
import urllib.request

Answer = tuple[int, dict[str, str], str]
Outcome = tuple[float, float, int, str]  # start, end (time.monotonic), HTTP status (0: no answer), backend


GATEWAY_SOCKET = "/run/vllm-gateway/admin.sock"


def runtime_api_shell(command: str, socket_path: str = GATEWAY_SOCKET) -> str:
    """Return a shell command that, run on a gateway host, sends one command to HAProxy's runtime API and prints its
    answer (the host has python3 but no socat)."""
    send = (f"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{socket_path}'); "
            f"s.sendall(b'{command}\\n'); print(b''.join(iter(lambda: s.recv(65536), b'')).decode())")
    return f'python3 -c "{send}"'


def https_call(url: str, token: str | None, body: dict[str, object] | str | None, ca_file: str,
               method: str | None = None, timeout: float = 60) -> Answer:
    """Make one HTTPS request trusting ca_file (a body given as text is sent as it is); return status, headers (names
    in lower case) and body."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else (body if isinstance(body, str) else json.dumps(body)).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=ssl.create_default_context(cafile=ca_file)) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read().decode()


class Load:
    """Short chat requests to a gateway (base URL without /v1), one every pace seconds after the last answer."""

    def __init__(self, base_url: str, token: str, ca_file: str, model: str, pace: float) -> None:
        """Prepare the load; entering the context runs it."""
        self.base_url, self.token, self.ca_file, self.model, self.pace = base_url, token, ca_file, model, pace
        self.stop, self.results = threading.Event(), list[Outcome]()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        """Send requests until stopped, recording each."""
        n = 0
        while not self.stop.is_set():
            n += 1
            start = time.monotonic()
            body = {"model": self.model, "max_tokens": 2, "messages": [{"role": "user", "content": f"load request {n}"}]}
            try:
                status, headers, _ = https_call(self.base_url + "/v1/chat/completions", self.token, body, self.ca_file)
            except OSError:
                status, headers = 0, {}
            self.results.append((start, time.monotonic(), status, headers.get("x-vllm-fleet-backend", "")))
            time.sleep(self.pace)

    def __enter__(self) -> Load:
        """Start the load."""
        self.thread.start()
        time.sleep(2)
        return self

    def __exit__(self, *_: object) -> None:
        """Stop the load and wait for the request in flight."""
        self.stop.set()
        self.thread.join(120)

    def failures(self, unless_in_flight_during: tuple[float, float] | None = None) -> list[Outcome]:
        """Return the failed requests, leaving out those in flight at some moment of a given span (a stop)."""
        return [r for r in self.results if r[2] != 200
                and not (unless_in_flight_during is not None
                         and r[0] <= unless_in_flight_during[1] and r[1] >= unless_in_flight_during[0])]

    def figures(self) -> dict[str, object]:
        """Return the load's count, failures, latency p50/p99 and requests per backend (named where the gateway
        sets vllm_gateway_backend_header, else all under "")."""
        latencies = sorted(end - start for start, end, _, _ in self.results) or [0.0]
        backends = sorted({r[3] for r in self.results})
        return {"requests": len(self.results), "failed": len(self.failures()),
                "seconds": round(self.results[-1][1] - self.results[0][0]) if self.results else 0,
                "p50_ms": round(statistics.median(latencies) * 1000),
                "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000),
                "by_backend": {b: sum(1 for r in self.results if r[3] == b) for b in backends}}
