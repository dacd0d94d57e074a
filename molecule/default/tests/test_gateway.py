"""The fleet gateway (mdef4) from the controller, as a client sees it: keys on every path, TLS, the OpenAI SDK from
the generated client settings, per-key limits, failover and revocation under load, and bad inputs refused in
preflight. Each test runs once, on the gateway's connection; the GPU hosts are reached through lab_host. The
rollouts under load are tests/test_rollout.py's."""

from __future__ import annotations

import hashlib
import json
import ssl
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import testinfra.host
import yaml

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "shared"), str(Path(__file__).resolve().parents[3] / "tools")]

from gateway_client import (BATCH_MODEL, CA_FILE, GATEWAY, GPU_HOSTS, LAB, MODEL, PKI, REPO, SCENARIO,  # noqa: E402
                            SETTINGS, Load, call, chat, client, ingress_status, key, runtime_api, scene_servers,
                            secrets, server_events, server_limits)
from lab_certificates import self_signed_pair  # noqa: E402
from playbooks import lab_host, run_playbook, scene_health  # noqa: E402
from units import MAX_EXPOSURE, exposure  # noqa: E402

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards  # noqa: E402

testinfra_hosts = [f"ansible://{GATEWAY}"]
GATEWAY_CONFIG = "/etc/vllm-gateway/haproxy.cfg"
FAILOVER_HOST = GPU_HOSTS[1]  # realtime alone; mdef1 is the rollouts' canary


def test_ingress_and_gateway_change_nothing_when_run_again(host: testinfra.host.Host) -> None:
    """The ingress and gateway plays on the converged lab change nothing (certificates, configs, units, reloads)."""
    result = run_playbook(SCENARIO, LAB, "all", "../../playbooks/ingress.yml")
    again = run_playbook(SCENARIO, LAB, "all", "../../playbooks/gateway.yml")
    for run in (result, again):
        assert run.returncode == 0, run.stdout[-3000:]
        recap = [line for line in run.stdout.splitlines() if " : ok=" in line]
        assert recap and all("changed=0" in line for line in recap), "\n".join(recap)


def test_sdk_lists_chats_and_streams_with_the_generated_settings(host: testinfra.host.Host) -> None:
    """The OpenAI SDK, set up only from clients/<gateway>/<user>.json, lists the key's models, chats and streams."""
    sdk, settings = client("lab-user")
    assert sorted(m.id for m in sdk.models.list()) == sorted(settings["models"]) == [MODEL, BATCH_MODEL]
    reply = sdk.chat.completions.create(model=settings["model"], messages=[{"role": "user", "content": "Hi"}],
                                        max_tokens=4)
    assert reply.choices[0].message.content and reply.usage.completion_tokens == 4
    chunks = list(sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                              stream=True, stream_options={"include_usage": True}))
    # A token that ends inside a UTF-8 character is held back and sent with the next one, so text chunks may be fewer
    # than tokens (CI saw 2 for 4 from the random checkpoint); the stream is the role, text, then the usage chunk.
    assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
    assert any(c.choices and c.choices[0].delta.content for c in chunks), chunks
    assert chunks[-1].usage and chunks[-1].usage.completion_tokens == 4, chunks[-1]
    batch_only, _ = client("batch-only")
    assert [m.id for m in batch_only.models.list()] == [BATCH_MODEL]


def test_settings_hold_no_secret(host: testinfra.host.Host) -> None:
    """The client settings name the key's variable and environment variable, never the key."""
    for path in SETTINGS.glob("*.json"):
        text = path.read_text()
        assert not any(value in text for value in secrets().values()), path


def test_the_config_holds_keyed_digests_only(host: testinfra.host.Host) -> None:
    """The gateway's config names each user by the HMAC of its key under the fleet's digest key, which only the
    root-only secrets file holds: neither a key nor its plain sha256 is in the config, and a key still works."""
    config = host.file(GATEWAY_CONFIG).content_string
    for name in ("lab-user", "limited", "batch-only"):
        assert key(name) not in config and hashlib.sha256(key(name).encode()).hexdigest() not in config
    assert "hmac(sha256,proc.key_digest_key)" in config
    env = host.file("/etc/vllm-gateway/secrets.env")
    assert (env.user, env.group, env.mode) == ("root", "haproxy", 0o640)
    assert "VLLM_FLEET_KEY_DIGEST_KEY=" in env.content_string
    assert call("/v1/models", key("lab-user"))[0] == 200


def openapi_paths() -> list[tuple[str, str]]:
    """Return (method, path) of every path a scene's own /openapi.json lists, asked on its host."""
    scene_key = secrets()["vault_lab_realtime_api_key"]
    spec = json.loads(lab_host(GPU_HOSTS[0]).check_output(
        f"curl -sf -H 'Authorization: Bearer {scene_key}' http://127.0.0.1:8000/openapi.json"))
    return sorted((method.upper(), path) for path, item in spec["paths"].items() for method in item)


def test_no_key_or_a_wrong_key_is_401_on_every_path(host: testinfra.host.Host) -> None:
    """Every path the scenes' OpenAPI lists, and the gateway's own, answers 401 without a key or with a wrong one,
    a scene's own key included; only /health answers."""
    paths = [*openapi_paths(), ("GET", "/v1/models"), ("GET", "/metrics"), ("GET", "/stats"), ("POST", "/")]
    assert len(paths) > 20
    scene_key = secrets()["vault_lab_realtime_api_key"]
    wrong = {}
    for method, path in paths:
        if path == "/health":
            continue
        concrete = path.replace("{", "").replace("}", "")
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]} if method == "POST" else None
        for token in (None, "x" * 40, scene_key):
            status, headers, text = call(concrete, token, body, method=method)
            if status != 401 or json.loads(text)["error"]["code"] != "invalid_api_key":
                wrong[(method, path, token is None)] = status
    assert wrong == {}
    assert call("/health")[0] == 200


def test_a_key_without_the_model_is_403_and_an_unknown_model_404(host: testinfra.host.Host) -> None:
    """A good key asking for a model it may not use gets 403; a model no scene serves gets 404."""
    status, _, text = chat(key("batch-only"), MODEL)
    assert (status, json.loads(text)["error"]["code"]) == (403, "model_not_allowed")
    status, _, text = chat(key("lab-user"), "no-such-model")
    assert (status, json.loads(text)["error"]["code"]) == (404, "model_not_found")
    assert chat(key("batch-only"), BATCH_MODEL)[0] == 200


def ingress_answers(address: str, server_name: str, token: str) -> str:
    """Try the ingress as anyone but the gateway would (no client certificate); return what came back."""
    import socket

    context = ssl.create_default_context(cafile=CA_FILE)
    context.check_hostname = False
    request = f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    try:
        with socket.create_connection((address, 9443), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname=server_name) as tls:
            tls.sendall(request)
            return tls.recv(200).decode(errors="replace")
    except (ssl.SSLEOFError, ConnectionResetError) as error:  # the ingress admits the gateways' addresses only
        return f"refused: closed before TLS ({error.__class__.__name__})"
    except ssl.SSLError as error:
        return f"refused: {error.reason}"


def test_nothing_answers_off_host_but_the_gateway(host: testinfra.host.Host) -> None:
    """From the controller, the scenes' ports are closed, and the ingress refuses it (before any TLS: the controller
    is no gateway), even with a scene's own key."""
    scene_key = secrets()["vault_lab_realtime_api_key"]
    for name in GPU_HOSTS:
        address = lab_host(name).ansible.get_variables()["ansible_host"]
        for port in (8000, 8001):
            with pytest.raises(OSError):
                call("/v1/models", scene_key, url=f"http://{address}:{port}", timeout=5)
        answer = ingress_answers(address, f"realtime.{name}", scene_key)
        assert answer.startswith("refused: closed before TLS"), answer


def test_the_ingress_routes_each_request_by_the_gateways_server_header(host: testinfra.host.Host) -> None:
    """With the gateway's client certificate, a request goes to the scene its x-vllm-fleet-server header names
    (written by the gateway for the server each request is sent to), whatever the connection's TLS name; without
    the header (the gateway's health checks), by the TLS name."""
    gpu = GPU_HOSTS[0]
    address = lab_host(gpu).ansible.get_variables()["ansible_host"]

    def served(header: str) -> str:
        """Return the model ids the ingress's answer to GET /v1/models lists, over a connection named realtime."""
        curl = ["curl", "-s", "--cacert", "/etc/vllm-gateway/fleet-ca.pem", "--cert", "/etc/vllm-gateway/client.pem",
                "--resolve", f"realtime.{gpu}:9443:{address}", f"https://realtime.{gpu}:9443/v1/models"]
        answer = host.check_output(" ".join(curl + (["-H", f"'x-vllm-fleet-server: {header}'"] if header else [])))
        return " ".join(sorted(model["id"] for model in json.loads(answer)["data"]))
    assert (served(f"{gpu}:batch"), served(f"{gpu}:realtime"), served("")) == (BATCH_MODEL, MODEL, MODEL)


def test_the_gateway_and_every_ingress_unit_are_hardened(host: testinfra.host.Host) -> None:
    """The HAProxy units the kit installs score at most MAX_EXPOSURE in systemd-analyze security."""
    scores = {GATEWAY: exposure(host, "vllm-gateway.service"),
              **{name: exposure(lab_host(name), "vllm-ingress.service") for name in GPU_HOSTS}}
    assert max(scores.values()) <= MAX_EXPOSURE, scores


def test_health_checks_follow_the_settings(host: testinfra.host.Host) -> None:
    """The lab's health-check timeout and failure count (inventory/lab/group_vars/gateways) reach every server."""
    lab = yaml.safe_load((REPO / "inventory/lab/group_vars/gateways/main.yml").read_text())
    interval = yaml.safe_load((REPO / "roles/vllm_gateway/defaults/main.yml").read_text())[
        "vllm_gateway_health_interval_ms"]
    config = host.file(GATEWAY_CONFIG).content_string
    assert f"timeout check {lab['vllm_gateway_health_timeout_ms']}ms" in config
    servers = [line for line in config.splitlines() if line.strip().startswith("default-server")]
    expected = f" inter {interval} fall {lab['vllm_gateway_health_failures']} rise 2 "
    assert servers and all(expected in line for line in servers), servers


def test_each_scene_takes_its_max_num_seqs_at_once(host: testinfra.host.Host) -> None:
    """Each scene's limit at the gateway is its preset's max_num_seqs: more requests wait there, and prefix affinity
    passes a prefix on when a scene has that many in flight and vllm_gateway_affinity_queue more waiting."""
    limits = server_limits()
    assert limits == {server: str(cards.PRESETS[server.split(":")[1]].engine_args["max_num_seqs"]) for server in limits}
    assert {f"{name}:realtime" for name in GPU_HOSTS} | {f"{GPU_HOSTS[0]}:batch"} == set(limits)
    assert host.backend.get_hostname() == GATEWAY


def test_requests_sharing_a_prefix_reach_the_same_scene(host: testinfra.host.Host) -> None:
    """Prefix affinity: chats that begin with the same long non-ASCII text (sent as parts, with JSON's \\u escapes)
    all reach one scene whatever follows; chats with other beginnings reach the other scenes too."""
    def backend(prefix: str, n: int) -> str:
        body = {"model": MODEL, "max_tokens": 1, "messages": [
            {"role": "user", "content": [{"type": "text", "text": f"{prefix * 120} question {n}"}]}]}
        status, headers, _ = call("/v1/chat/completions", key("lab-user"), body)
        assert status == 200
        return headers["x-vllm-fleet-backend"]
    assert len({backend("系统提示 ", n) for n in range(6)}) == 1
    assert len({backend(f"prompt {n} é ", n) for n in range(12)}) > 1


def test_a_full_scene_passes_its_prefix_on(host: testinfra.host.Host) -> None:
    """Prefix affinity yields to load: once the scene a prefix sticks to has its limit in flight and
    vllm_gateway_affinity_queue (4) requests waiting, the next ones with that prefix go to another scene, and all
    are answered. The sticky scene's limit is lowered to 1 at the runtime API so that 8 requests at once overload it."""
    def chat_from(n: int) -> tuple[int, str]:
        body = {"model": MODEL, "max_tokens": 128, "ignore_eos": True,
                "messages": [{"role": "user", "content": f"{'overload ' * 150} {n}"}]}
        status, headers, _ = call("/v1/chat/completions", key("lab-user"), body)
        return status, headers.get("x-vllm-fleet-backend", "")
    sticky = chat_from(0)[1]
    backend = next(row["pxname"] for row in scene_servers() if row["svname"] == sticky)
    limit = server_limits()[sticky]
    runtime_api(f"set maxconn server {backend}/{sticky} 1")
    try:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(chat_from, range(1, 9)))
    finally:
        runtime_api(f"set maxconn server {backend}/{sticky} {limit}")
    assert {status for status, _ in answers} == {200}, answers
    # At most 1 + 4 wait for the sticky scene; how many of the 8 it gets depends on how fast the first ones end.
    assert sum(name == sticky for _, name in answers) >= 2 and {name for _, name in answers} - {sticky}, answers


def test_rate_limit_is_per_key(host: testinfra.host.Host) -> None:
    """A key limited to 5 requests a minute gets 429 with Retry-After on the 6th; another key is unaffected."""
    limited = key("limited")
    statuses = [call("/v1/models", limited)[0] for _ in range(5)]
    status, headers, text = call("/v1/models", limited)
    assert statuses == [200] * 5
    assert (status, headers.get("retry-after"), json.loads(text)["error"]["code"]) == (429, "60", "rate_limit_exceeded")
    assert call("/v1/models", key("lab-user"))[0] == 200


def test_failover_loses_nothing_but_what_was_in_flight(host: testinfra.host.Host) -> None:
    """Under load, stopping one host's scene fails only requests in flight on it; it is back in rotation within 5 s
    of its /health turning 200."""
    victim = lab_host(FAILOVER_HOST)
    every_scene = {f"{h}:realtime" for h in GPU_HOSTS}
    with Load() as load:
        deadline = time.monotonic() + 60
        while not every_scene <= {r[3] for r in load.results} and time.monotonic() < deadline:
            time.sleep(0.5)
        stopped_at = time.monotonic()
        victim.check_output("systemctl stop vllm-scene-realtime")
        stop_returned = time.monotonic()  # a request that reached the scene while it stopped was in flight on it
        time.sleep(5)
        victim.check_output("systemctl start --no-block vllm-scene-realtime")
        deadline = time.monotonic() + 600
        while scene_health(FAILOVER_HOST, timeout=5) != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        healthy_at = time.monotonic()
        while time.monotonic() < healthy_at + 10 and not any(
                r[0] > healthy_at and r[3] == f"{FAILOVER_HOST}:realtime" for r in load.results):
            time.sleep(0.2)
    back = [r[0] for r in load.results if r[0] > healthy_at and r[3] == f"{FAILOVER_HOST}:realtime"]
    assert load.failures(unless_in_flight_during=(stopped_at, stop_returned)) == [], server_events(load.since)
    assert back and back[0] - healthy_at <= 5, f"first request to {FAILOVER_HOST} {back[:1]} after health {healthy_at}"
    assert {r[3] for r in load.results if r[0] < stopped_at} == every_scene


def gateway_run(*extra: str) -> tuple[int, str]:
    """Run playbooks/gateway.yml alone on the lab with extra arguments; return its exit status and output."""
    result = run_playbook(SCENARIO, LAB, "all", "../../playbooks/gateway.yml", *extra)
    return result.returncode, result.stdout


BAD_USERS = [
    {"name": "short", "key_var": "vault_short", "models": [MODEL]},
    {"name": "odd", "key_var": "vault_odd", "models": [MODEL]},
    {"name": "twin", "key_var": "vault_lab_gateway_key_lab_user", "models": [MODEL]},
    {"name": "ghost", "key_var": "vault_mdef_key_revoked", "models": ["no-such-model"]},
]


@pytest.mark.parametrize(("extra", "messages"), [
    ({"vllm_gateway_users": [{"name": "lab-user", "key_var": "vault_lab_gateway_key_lab_user", "models": [MODEL]},
                             *BAD_USERS],
      "vault_short": "s" * 31, "vault_odd": "o" * 39 + "!"},
     ["vllm_gateway_users[short]: the key in vault_short is 31 characters long",
      "vllm_gateway_users[odd]: the key in vault_odd has characters outside",
      "vllm_gateway_users[twin]: has the same key as lab-user",
      "vllm_gateway_users[ghost]: models ['no-such-model'] are served by no scene"]),
    ({"vllm_gateway_tls_cert_var": "vault_cert", "vllm_gateway_tls_key_var": "vault_key", "mismatched": True},
     ["the certificate does not match the key"]),
    ({"vllm_gateway_tls_cert_var": "vault_cert", "vllm_gateway_tls_key_var": "vault_key", "expired": True},
     ["the certificate expired on"]),
], ids=["users", "mismatched-certificate", "expired-certificate"])
def test_bad_gateway_input_is_refused_and_changes_nothing(host: testinfra.host.Host, tmp_path: Path,
                                                          extra: dict[str, object], messages: list[str]) -> None:
    """Bad keys, twin keys, unserved models and bad certificates fail the gateway's preflight, naming the gateway,
    the variable and the fix, and never printing a key; the running config stays."""
    if "vllm_gateway_tls_cert_var" in extra:
        extra = {**extra, **certificate_pair(mismatched=bool(extra.pop("mismatched", False)),
                                             expired=bool(extra.pop("expired", False)))}
    before = host.check_output(f"sha256sum {GATEWAY_CONFIG}")
    (tmp_path / "extra.yml").write_text(json.dumps(extra))
    status, output = gateway_run("-e", f"@{tmp_path / 'extra.yml'}")
    assert status != 0
    for message in messages:
        assert f"{GATEWAY}: " in output and message in output, output[-3000:]
    assert not any(value in output for value in secrets().values())
    assert host.check_output(f"sha256sum {GATEWAY_CONFIG}") == before


def certificate_pair(mismatched: bool, expired: bool) -> dict[str, str]:
    """Return vault_cert and vault_key: a self-signed pair for the gateway, with another key or already expired."""
    cert, key = self_signed_pair(GATEWAY, -30, start_days=-60) if expired else self_signed_pair(GATEWAY, 30)
    return {"vault_cert": cert, "vault_key": self_signed_pair(GATEWAY, 30)[1] if mismatched else key}


def test_a_config_haproxy_rejects_leaves_the_running_one_serving(host: testinfra.host.Host, tmp_path: Path) -> None:
    """A setting that passes preflight but not `haproxy -c` fails the run; the old config stays and serves."""
    before = host.check_output(f"sha256sum {GATEWAY_CONFIG}")
    status, output = gateway_run("-e", "vllm_gateway_timeout=soon")
    assert status != 0 and "failed to validate" in output, output[-3000:]
    assert host.check_output(f"sha256sum {GATEWAY_CONFIG}") == before
    assert chat(key("lab-user"))[0] == 200


def test_revocation_under_load_drops_nothing(host: testinfra.host.Host, tmp_path: Path) -> None:
    """Removing a user and renewing the gateway's client certificate in one converge: that key gets 401, every
    ingress refuses the replaced certificate and admits the new one, and a steady load on another key sees no failed
    request meanwhile (the ingresses admit the new certificate before the gateway presents it, and drop the old one
    after)."""
    assert call("/v1/models", key("revoked"))[0] == 200
    users = yaml.safe_load((SCENARIO / f"host_vars/{GATEWAY}/main.yml").read_text())["vllm_gateway_users"]
    (tmp_path / "users.yml").write_text(json.dumps({"vllm_gateway_users": [u for u in users if u["name"] != "revoked"]}))
    stem = PKI / f"gateway-client-{GATEWAY}"
    replaced = stem.with_suffix(".crt").read_text() + stem.with_suffix(".key").read_text()
    stem.with_suffix(".request.json").unlink()  # what the certificate must say is unknown: it is issued again
    with Load() as load:
        status, output = gateway_run("-e", f"@{tmp_path / 'users.yml'}")
        time.sleep(2)
    assert status == 0, output[-3000:]
    assert "TASK [vllm_haproxy : Reload the instance on a changed config or file]" in output, output[-3000:]
    assert call("/v1/models", key("revoked"))[0] == 401
    assert len(load.results) > 20 and load.failures() == [], server_events(load.since)
    assert stem.with_suffix(".crt").read_text() not in replaced and not Path(f"{stem}.previous.crt").exists()
    assert {name: ingress_status(replaced, name) for name in GPU_HOSTS} == dict.fromkeys(GPU_HOSTS, "403")
    assert gateway_run()[0] == 0  # the scenario's own users again
    assert call("/v1/models", key("revoked"))[0] == 200


def test_a_controller_without_the_fleet_ca_mints_none_for_a_fleet_that_trusts_one(host: testinfra.host.Host,
                                                                                   tmp_path: Path) -> None:
    """A controller that lost its state (a CI runner that kept no vllm_fleet_state_dir) would mint a new CA and issue
    every certificate again: outside the lab it is refused, naming the CA the gateway trusts and the fix, and nothing
    is made on the controller."""
    empty = tmp_path / "pki"
    result = run_playbook(SCENARIO, LAB, "gateways", "../../playbooks/client-certificates.yml",
                          "-e", "vllm_fleet_lab=false", "-e", f"vllm_pki_dir={empty}", kit_output=True)
    assert result.returncode != 0
    assert f"{GATEWAY}: trusts a fleet CA (" in result.stdout and "/etc/vllm-gateway/fleet-ca.pem" in result.stdout
    assert "set vllm_pki_new_ca: true" in result.stdout, result.stdout[-2000:]
    assert not empty.exists()
    assert host.file("/etc/vllm-gateway/fleet-ca.pem").exists
