"""The gateway load (tools/gateway_load.py) against a loopback HTTPS server: every answer recorded, failures found."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import ssl
import threading
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway_load import Load, https_call, runtime_api_shell
from lab_certificates import self_signed_pair


class Scene(http.server.BaseHTTPRequestHandler):
    """Answers chats as scene a, with 503 for every third request, and records the bodies it gets."""

    bodies: list[dict[str, object]] = []

    def do_POST(self) -> None:  # noqa: N802 (the name http.server calls)
        """Answer one chat request."""
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.headers["Authorization"] == "Bearer user-key"
        Scene.bodies.append(body)
        status = 503 if len(Scene.bodies) % 3 == 0 else 200
        self.send_response(status)
        self.send_header("X-Vllm-Fleet-Backend", "gpu1:realtime")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_: object) -> None:
        """Keep the test's output quiet."""


@pytest.fixture()
def gateway(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Serve Scene over TLS on a loopback port; yield its base URL and the CA file that trusts it."""
    cert, key = self_signed_pair("localhost", 1)
    (tmp_path / "cert.pem").write_text(cert + key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scene)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Scene.bodies = []
    (tmp_path / "ca.pem").write_text(cert)
    yield f"https://localhost:{server.server_address[1]}", str(tmp_path / "ca.pem")
    server.shutdown()


def test_load_records_every_answer_and_its_failures(gateway: tuple[str, str]) -> None:
    """Each request is a distinct chat of the model; 503s are failures, except those in flight during a given span."""
    url, ca_file = gateway
    with Load(url, "user-key", ca_file, "tiny", pace=0.01) as load:
        time.sleep(0.5)
    assert len(load.results) == len(Scene.bodies) >= 6
    assert {b["model"] for b in Scene.bodies} == {"tiny"}
    assert len({json.dumps(b) for b in Scene.bodies}) == len(Scene.bodies)
    failed = load.failures()
    assert [r[2] for r in failed] == [503] * (len(Scene.bodies) // 3)
    assert load.failures(unless_in_flight_during=(failed[0][0], failed[0][0])) == failed[1:]
    assert load.failures(unless_in_flight_during=(failed[0][0], failed[1][0])) == failed[2:]
    figures = load.figures()
    assert (figures["requests"], figures["failed"]) == (len(load.results), len(failed))
    assert figures["by_backend"] == {"gpu1:realtime": len(load.results)}
    assert 0 <= figures["p50_ms"] <= figures["p99_ms"]


def test_https_call_refuses_a_server_its_ca_does_not_sign(gateway: tuple[str, str], tmp_path: Path) -> None:
    """The client trusts only the CA file it is given."""
    url, _ = gateway
    other, _ = self_signed_pair("localhost", 1)
    (tmp_path / "other.pem").write_text(other)
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        https_call(url + "/v1/chat/completions", "user-key", {}, str(tmp_path / "other.pem"))


def test_runtime_api_shell_sends_one_command_and_prints_the_answer(tmp_path: Path) -> None:
    """The shell command sends the command with its newline to the socket and prints all HAProxy answers."""
    path, got = tmp_path / "admin.sock", list[bytes]()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()

    def answer() -> None:
        connection, _ = listener.accept()
        with connection:
            got.append(connection.recv(4096))
            connection.sendall(b"# pxname,svname\n" + b"y" * 70000)
    threading.Thread(target=answer, daemon=True).start()
    shown = subprocess.run(["sh", "-c", runtime_api_shell("show stat", str(path))], capture_output=True, text=True,
                           check=True, timeout=10).stdout
    assert got == [b"show stat\n"] and shown.startswith("# pxname,svname\n") and shown.count("y") == 70000
