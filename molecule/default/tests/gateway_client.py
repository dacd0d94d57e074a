"""The lab gateway (mdef4) as a client reaches it: its keys from the lab's Vault files, HTTPS requests trusting the
fleet CA, the OpenAI SDK from the generated settings, and a steady load that records every answer."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import openai

sys.path[:0] = [str(Path(__file__).resolve().parents[3] / "tools"), str(Path(__file__).resolve().parents[2] / "shared"),
                str(Path(__file__).resolve().parents[3] / "plugins" / "module_utils")]

import gateway_load  # noqa: E402
from gateway_load import https_call  # noqa: E402
from lab_vault import lab_secrets  # noqa: E402
from playbooks import lab_host  # noqa: E402
from vllm_fleet_haproxy import parse_stat  # noqa: E402

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
LAB, GATEWAY, GPU_HOSTS = "mdef", "mdef4", ("mdef1", "mdef2", "mdef3")
CA_FILE = f"/var/lib/vllm-fleet-lab/pki/{LAB}/ca.crt"
SETTINGS = REPO / "clients" / GATEWAY
MODEL, BATCH_MODEL = "tiny-qwen2", "tiny-qwen2-batch"
VAULT_FILES = [REPO / "inventory/lab/group_vars/gateways/vault.yml", SCENARIO / f"host_vars/{GATEWAY}/vault.yml",
               REPO / "inventory/lab/group_vars/gpu_hosts/vault.yml"]
PKI = Path(f"/var/lib/vllm-fleet-lab/pki/{LAB}")
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


def call(path: str, token: str | None = None, body: dict[str, object] | str | None = None, method: str | None = None,
         url: str | None = None, timeout: float = 60) -> tuple[int, dict[str, str], str]:
    """Make one HTTPS request to the gateway (or url) trusting the fleet CA (a body given as text is sent as it is);
    return status, headers (names in lower case, as HAProxy sends them) and body."""
    return https_call((url or gateway_url()) + path, token, body, CA_FILE, method, timeout)


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


def runtime_api(command: str) -> str:
    """Send one command to the gateway's HAProxy runtime API; return its answer."""
    return lab_host(GATEWAY).check_output(gateway_load.runtime_api_shell(command))


def scene_servers() -> list[dict[str, str]]:
    """Return the gateway's `show stat` rows of its scene servers (named host:scene, in backends named model_N)."""
    return [row for row in parse_stat(runtime_api("show stat")) if ":" in row["svname"]]


def server_limits() -> dict[str, str]:
    """Return each scene server's limit at the gateway (maxconn, "" for none) by its name."""
    return {row["svname"]: row["slim"] for row in scene_servers()}


class Load(gateway_load.Load):
    """The lab gateway's steady load for one user's key, noting the gateway's clock when it starts (server_events)."""

    def __init__(self, user: str = "lab-user", pace: float = PACE_S) -> None:
        """Prepare the load for one user's key; entering the context runs it."""
        super().__init__(gateway_url(), key(user), CA_FILE, MODEL, pace)
        self.since = ""

    def __enter__(self) -> Load:
        """Note the gateway's clock, then start the load."""
        self.since = lab_host(GATEWAY).check_output("date '+%Y-%m-%d %H:%M:%S'")
        super().__enter__()
        return self


def address(name: str) -> str:
    """Return a lab host's address."""
    return lab_host(name).ansible.get_variables()["ansible_host"]



def fleet_client_pem(tmp_path: Path, common_name: str) -> str:
    """Return a client certificate and key the lab's fleet CA signs for common_name, as PEM: what anyone holding the
    CA key, or a leaked earlier certificate, could present."""
    key, cert = tmp_path / "client.key", tmp_path / "client.crt"
    subprocess.run(["openssl", "req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-noenc", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={common_name}",
                    "-CA", str(PKI / "ca.crt"), "-CAkey", str(PKI / "ca.key"),
                    "-addext", "extendedKeyUsage=clientAuth"], check=True, capture_output=True)
    return cert.read_text() + key.read_text()


def ingress_status(pem: str, gpu_host: str) -> str:
    """Return the HTTP status an ingress answers GET /health of its realtime scene with, from the gateway's host (an
    address the ingress admits) presenting the given client certificate."""
    gateway = lab_host(GATEWAY)
    gateway.check_output(f"umask 077; printf '%s' '{pem}' > /root/probe.pem")
    try:
        return gateway.check_output(
            f"curl -s -o /dev/null -w '%{{http_code}}' --cacert /etc/vllm-gateway/fleet-ca.pem --cert /root/probe.pem "
            f"--resolve realtime.{gpu_host}:9443:{address(gpu_host)} https://realtime.{gpu_host}:9443/health")
    finally:
        gateway.check_output("rm -f /root/probe.pem")

