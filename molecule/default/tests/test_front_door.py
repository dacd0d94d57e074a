"""The fleet's front door under abuse, tried the way a hostile client would: a keyless request announcing a large body,
a flood of idle connections from one source, a request whose scene crashes under it, a body naming its model twice
or asking for too many sequences, and connections to an ingress from anywhere but a gateway."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import testinfra.host
import yaml

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "shared")]

from gateway_client import (GATEWAY, GPU_HOSTS, MODEL, SCENARIO, address, call, fleet_client_pem,  # noqa: E402
                            ingress_status, key, scene_servers)
from playbooks import lab_host, scene_health  # noqa: E402

testinfra_hosts = [f"ansible://{GATEWAY}"]
GATEWAY_VARS = yaml.safe_load((SCENARIO / f"host_vars/{GATEWAY}/main.yml").read_text())
PER_SOURCE = 100  # vllm_gateway_max_connections_per_source's default
FLOOD, SILENT_S = 2000, GATEWAY_VARS["vllm_gateway_client_timeout"]

# Opens `count` TCP connections to address:port that never send a byte, and reports how many the server still
# holds 2 s later and once the gateway's client timeout has passed. Bounded: 1 s a connect, 40 s in all.
FLOOD_SCRIPT = r"""
import json, resource, socket, sys, time
address, port, count, wait = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 256), hard))
started, held = time.monotonic(), []
for _ in range(count):
    if time.monotonic() - started > 40:
        break
    conn = socket.socket()
    conn.settimeout(1)
    try:
        conn.connect((address, port))
        held.append(conn)
    except OSError:
        conn.close()
def still_open():
    count = 0
    for conn in held:
        conn.setblocking(False)
        try:
            count += conn.recv(1) != b""
        except BlockingIOError:
            count += 1
        except OSError:
            pass
    return count
time.sleep(2)
first = still_open()
time.sleep(wait)
print(json.dumps({"connected": len(held), "held": first, "held_after_timeout": still_open()}))
"""

# Sends a TLS ClientHello to address:port and prints how many bytes came back (0: closed before any TLS).
HELLO_SCRIPT = r"""
import socket, ssl, sys
context = ssl.create_default_context()
context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
tls = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO())
try:
    tls.do_handshake()
except ssl.SSLWantReadError:
    pass
try:  # a reset may come as the hello is sent or as the answer is read
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as conn:
        conn.settimeout(5)
        conn.sendall(outgoing.read())
        print(len(conn.recv(5)))
except (ConnectionResetError, BrokenPipeError, socket.timeout):
    print(0)
"""


def run_python(host: testinfra.host.Host, script: str, *args: object) -> str:
    """Run a Python script on a lab host with arguments; return its output."""
    quoted = " ".join(f"'{arg}'" for arg in args)
    return host.check_output(f"python3 - {quoted} <<'EOF'\n{script}\nEOF")


def test_a_keyless_request_is_refused_before_its_body(host: testinfra.host.Host) -> None:
    """A request without a key announcing a 200 MB body (and sending none of it) gets 401 at once: the key is
    judged before any body is read (an earlier gateway waited for the body, then answered 408 after 30 s)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection((address(GATEWAY), 443), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=address(GATEWAY)) as tls:
        started = time.monotonic()
        tls.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 200000000\r\n\r\n")
        answer = tls.recv(64)
        seconds = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 401"), answer
    assert seconds < 1, seconds


def test_idle_connections_from_one_source_leave_the_gateway_serving(host: testinfra.host.Host) -> None:
    """2,000 TCP connections from one GPU host that never start TLS: the gateway holds at most its per-source limit
    of them, closes those once the client timeout passes, and answers a keyed client meanwhile."""
    flood: dict[str, int] = {}

    def run_flood() -> None:
        """Open the flood from a GPU host and keep its report."""
        flood.update(json.loads(run_python(lab_host(GPU_HOSTS[1]), FLOOD_SCRIPT, address(GATEWAY), 443, FLOOD,
                                           int(SILENT_S.removesuffix("s")) + 3)))
    flooding = threading.Thread(target=run_flood)
    flooding.start()
    time.sleep(8)  # the flood is open by now (its connects are refused or held at once)
    answers = [call("/v1/chat/completions", key("lab-user"),
                    {"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": f"hi {n}"}]},
                    timeout=30)[0] for n in range(3)]
    flooding.join(timeout=120)
    assert answers == [200, 200, 200]
    assert flood["connected"] > PER_SOURCE and flood["held"] <= PER_SOURCE, flood
    assert flood["held_after_timeout"] == 0, flood


def success_count(name: str) -> float:
    """Return a host's realtime scene's finished requests (vllm:request_success_total, all reasons)."""
    text = lab_host(name).check_output(
        "set -a; . /etc/vllm/scenes/realtime.env; curl -s -H \"Authorization: Bearer $VLLM_API_KEY\" "
        "http://127.0.0.1:8000/metrics")
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total"))


def test_a_request_whose_scene_crashes_reaches_no_other_scene(host: testinfra.host.Host) -> None:
    """The scene running a long request is killed (an engine crash): the client gets 502, and no other scene
    receives that request (an earlier gateway and ingress sent it on to every other scene, and over HTTP/2 up to
    18 times). The killed scene is back within the test."""
    before = {name: success_count(name) for name in GPU_HOSTS}
    reply: list[int] = []
    body = {"model": MODEL, "max_tokens": 3000, "ignore_eos": True,
            "messages": [{"role": "user", "content": f"crash {time.time()}"}]}
    asking = threading.Thread(target=lambda: reply.append(call("/v1/chat/completions", key("lab-user"), body,
                                                                timeout=300)[0]))
    asking.start()
    deadline, victim = time.monotonic() + 20, ""
    while not victim and time.monotonic() < deadline:
        busy = [row["svname"] for row in scene_servers() if row["svname"].endswith(":realtime") and row["scur"] != "0"]
        victim = busy[0].split(":")[0] if busy else ""
        time.sleep(0.2)
    assert victim, "the long request was not seen in flight on any scene"
    killed_at = time.monotonic()
    # The server process dies at once, as in a crash (systemctl kill fails on the lab's auxiliary processes).
    lab_host(victim).check_output("kill -KILL \"$(systemctl show -p MainPID --value vllm-scene-realtime)\"")
    asking.join(timeout=300)
    time.sleep(3)  # a request sent on would be running or done by now
    others = {name: success_count(name) - before[name] for name in GPU_HOSTS if name != victim}
    deadline = time.monotonic() + 600
    while scene_health(victim, timeout=5) != 200 and time.monotonic() < deadline:
        time.sleep(1)
    assert reply == [502], reply
    assert all(count == 0 for count in others.values()), others
    assert scene_health(victim, timeout=5) == 200, f"{victim} not back {time.monotonic() - killed_at:.0f}s after"


def test_a_body_that_could_reach_another_model_or_too_many_sequences_is_refused(host: testinfra.host.Host) -> None:
    """A body naming its model twice (the gateway checked the first, vLLM serves the last) or with an escaped name
    is 400; so are more sequences than the bound, however the number is written; n within it is answered. A scene
    asked directly holds the same bound (VLLM_MAX_N_SEQUENCES)."""
    user = key("batch-only")
    def status(raw: str) -> tuple[int, str]:
        """Send a raw JSON body through the gateway; return the status and the error code, if any."""
        code, _, text = call("/v1/chat/completions", user, raw)
        return code, (json.loads(text).get("error") or {}).get("code", "") if code != 200 else ""
    chat = '"max_tokens":1,"messages":[{"role":"user","content":"x"}]'
    assert status(f'{{"model":"tiny-qwen2-batch",{chat},"model":"{MODEL}"}}') == (400, "repeated_field")
    assert status(f'{{"mod\\u0065l":"{MODEL}","model":"tiny-qwen2-batch",{chat}}}') == (400, "repeated_field")
    for n in ("5", "1e9", "5.0", '"5"'):
        assert status(f'{{"model":"tiny-qwen2-batch",{chat},"n":{n},"temperature":1}}') == (
            400, "too_many_sequences"), n
    assert status(f'{{"model":"tiny-qwen2-batch",{chat},"n":2,"temperature":1}}') == (200, "")
    direct = lab_host(GPU_HOSTS[0]).run(
        "set -a; . /etc/vllm/scenes/batch.env; curl -s -H \"Authorization: Bearer $VLLM_API_KEY\" "
        "-H 'Content-Type: application/json' -d '{\"model\":\"tiny-qwen2-batch\",\"max_tokens\":1,\"n\":5,"
        "\"temperature\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}' http://127.0.0.1:8001/v1/chat/completions")
    assert "at most 4" in direct.stdout, direct.stdout


def tls_bytes(source: testinfra.host.Host | None, target: str) -> int:
    """Return how many bytes an ingress answers a TLS ClientHello with, from a lab host (None: the controller)."""
    if source is None:
        return int(subprocess.run([sys.executable, "-", target, "9443"], input=HELLO_SCRIPT, text=True,
                                  capture_output=True, check=True).stdout)
    return int(run_python(source, HELLO_SCRIPT, target, 9443))


def test_an_ingress_speaks_tls_only_to_the_gateway(host: testinfra.host.Host) -> None:
    """Every ingress closes a connection from the controller or another GPU host before any TLS; the gateway's own
    address gets a TLS answer (an earlier ingress answered anyone's ClientHello, then asked for a certificate)."""
    for name in GPU_HOSTS:
        assert tls_bytes(None, address(name)) == 0, name
        assert tls_bytes(host, address(name)) > 0, name
    assert tls_bytes(lab_host(GPU_HOSTS[1]), address(GPU_HOSTS[0])) == 0


def test_the_gateway_unit_has_a_memory_ceiling(host: testinfra.host.Host) -> None:
    """The gateway's unit is capped at its computed MemoryMax (1,000 connections of 272 KiB buffers: 660 MiB)."""
    assert host.check_output("systemctl show -p MemoryMax --value vllm-gateway") == str(660 * 2**20)


def test_an_ingress_admits_only_the_current_gateway_certificates(host: testinfra.host.Host, tmp_path: Path) -> None:
    """A certificate of the fleet CA named as the gateway's, but not the one the gateway runs, is refused by every
    ingress (403); the gateway's own is admitted (an earlier ingress admitted any fleet certificate with that name)."""
    stranger = fleet_client_pem(tmp_path, "vllm-fleet-gateway")
    for name in GPU_HOSTS:
        assert ingress_status(stranger, name) == "403", name
        assert host.check_output(
            f"curl -s -o /dev/null -w '%{{http_code}}' --cacert /etc/vllm-gateway/fleet-ca.pem --cert "
            f"/etc/vllm-gateway/client.pem --resolve realtime.{name}:9443:{address(name)} "
            f"https://realtime.{name}:9443/health") == "200", name
