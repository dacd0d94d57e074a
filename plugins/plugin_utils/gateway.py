"""The fleet gateway's pure logic: user keys and their digests, routes from the fleet's scenes, the documents the
gateway answers itself, and the checks on its TLS material."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import re
from typing import Any

# OpenAI-style bearer tokens; the characters need no quoting in a header, a shell or a YAML scalar.
KEY_PATTERN = re.compile(r"[A-Za-z0-9._~-]+")
KEY_MIN_LENGTH = 32
USER_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# Served names the gateway's config may hold unquoted (no space, quote or backslash; no leading "-", which HAProxy
# reads as a flag of the match).
SERVED_NAME = re.compile(r"[A-Za-z0-9._:/@+][A-Za-z0-9._:/@+-]{0,127}")
# HAProxy's room for a request's headers beside its body, in each buffer (its default tune.bufsize).
HEADER_BYTES = 16384
# What HAProxy holds besides its connections' buffers (its code, TLS contexts, tables), for the unit's memory ceiling.
BASE_MEMORY_MIB = 128
# An ingress admits a source written as an IPv4 or IPv6 address or network, or a host name HAProxy resolves at start.
SOURCE = re.compile(r"[0-9A-Fa-f.:]+(/[0-9]{1,3})?|[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")


def key_digest(key: str, hmac_key_b64: str) -> str:
    """Return the lowercase hex HMAC-SHA256 of a user key under the fleet's digest key (base64), as the gateway
    computes it from the bearer token: a digest that leaks confirms no guessed key without the digest key."""
    return hmac.new(base64.b64decode(hmac_key_b64), key.encode(), hashlib.sha256).hexdigest()


def key_problem(key: Any) -> str | None:
    """Return why a user key is unusable, never quoting it; None when it is good."""
    if not isinstance(key, str) or not key:
        return "is empty or not a string"
    if len(key) < KEY_MIN_LENGTH:
        return f"is {len(key)} characters long, shorter than {KEY_MIN_LENGTH}"
    if not KEY_PATTERN.fullmatch(key):
        return "has characters outside [A-Za-z0-9._~-]"
    return None


def user_problems(users: list[dict[str, Any]], keys: dict[str, Any] | None, served: list[str]) -> list[str]:
    """Return what is wrong with the gateway's users: names, keys (by name, never value; None: a run without the
    Vault, keys not checked), models and limits."""
    problems: list[str] = []
    seen_names: set[str] = set()
    owner_of_key: dict[str, str] = {}
    for index, user in enumerate(users):
        name = user.get("name") if isinstance(user, dict) else None
        where = f"vllm_gateway_users[{name or index}]"
        if not isinstance(name, str) or not USER_NAME.fullmatch(name):
            problems.append(f"{where}: name must be 1-32 of a-z, 0-9, _ and -, starting with a letter")
            continue
        if name in seen_names:
            problems.append(f"{where}: two users are named {name!r}; give each its own name")
        seen_names.add(name)
        unknown = sorted(set(user) - {"name", "key_var", "models", "requests_per_minute", "max_concurrent"})
        if unknown:
            problems.append(f"{where}: unknown field(s) {', '.join(unknown)}; use name, key_var, models, "
                            "requests_per_minute, max_concurrent")
        problem = None if keys is None else key_problem(keys.get(name))
        if problem:
            problems.append(f"{where}: the key in {user.get('key_var') or '(no key_var)'} {problem}: set key_var to a "
                            f"Vault variable holding {KEY_MIN_LENGTH}+ characters of [A-Za-z0-9._~-] "
                            "(e.g. openssl rand -hex 24)")
        elif keys is not None:
            key = str(keys[name])
            if key in owner_of_key:
                problems.append(f"{where}: has the same key as {owner_of_key[key]}; give every user a key of its own")
            owner_of_key.setdefault(key, name)
        models = user.get("models")
        if not isinstance(models, list) or not models:
            problems.append(f"{where}: models must list the served model names the user may call")
        else:
            missing = [m for m in models if m not in served]
            if missing:
                problems.append(f"{where}: models {missing} are served by no scene of the fleet (served: "
                                f"{sorted(served) or 'none'}); remove them or add a scene serving them")
        for field in ("requests_per_minute", "max_concurrent"):
            value = user.get(field, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                problems.append(f"{where}: {field} must be a whole number >= 0 (0: no limit), not {value!r}")
    return problems


def user_keys(users: list[dict[str, Any]], variables: Any) -> dict[str, str | None]:
    """Return each user's key by user name, read from the variable its key_var names (None: not set)."""
    keys: dict[str, str | None] = {}
    for user in users:
        if isinstance(user, dict) and isinstance(user.get("name"), str):
            var = user.get("key_var")
            value = variables.get(var) if isinstance(var, str) and var and var in variables else None
            keys[user["name"]] = None if value is None else str(value)
    return keys


def gateway_users(users: list[dict[str, Any]], keys: dict[str, str], hmac_key_b64: str) -> list[dict[str, Any]]:
    """Return what the gateway's config holds per user: name, key digest, models and limits (never the key)."""
    return [{"name": u["name"], "digest": key_digest(keys[u["name"]], hmac_key_b64), "models": sorted(set(u["models"])),
             "requests_per_minute": int(u.get("requests_per_minute", 0)),
             "max_concurrent": int(u.get("max_concurrent", 0))} for u in users]


def backend_record(scenes_by_host: dict[str, Any], endpoints_by_host: dict[str, Any]) -> dict[str, Any]:
    """Return what the gateway keeps of the hosts it routes to, for a later run that cannot see some of them: each
    scene's name, served name and limit, and the host's ingress endpoint."""
    record = {}
    for host, scenes in sorted(scenes_by_host.items()):
        if scenes is None or endpoints_by_host.get(host) is None:
            continue
        limits = scene_limits(scenes)
        record[host] = {"scenes": [{"name": s["name"], "served_model_name": s["served_model_name"],
                                    "engine_args": {"max-num-seqs": limits[s["name"]]}} for s in scenes],
                        "endpoint": endpoints_by_host[host]}
    return record


def backends(scenes_by_host: dict[str, Any], endpoints_by_host: dict[str, Any], live: list[str] | None,
             record: dict[str, Any] | None) -> dict[str, Any]:
    """Return the scenes and endpoints the gateway routes to: those of the GPU hosts still in this run (all that
    resolved theirs when live is None), the others' as the gateway's last converge recorded them (this run did not
    change them: they failed their checks or start, which restores them, or were left out), and which hosts were
    carried over or are missing."""
    merged: dict[str, Any] = {"scenes": {}, "endpoints": {}, "carried": [], "missing": []}
    for host in sorted(scenes_by_host):
        seen = scenes_by_host[host] is not None and endpoints_by_host.get(host) is not None
        if seen and (live is None or host in live):
            merged["scenes"][host], merged["endpoints"][host] = scenes_by_host[host], endpoints_by_host[host]
        elif host in (record or {}):
            merged["scenes"][host], merged["endpoints"][host] = record[host]["scenes"], record[host]["endpoint"]
            merged["carried"].append(host)
        else:
            merged["missing"].append(host)
    return merged


def backend_notes(merged: dict[str, Any]) -> list[str]:
    """Return one line per GPU host the gateway routes to as last recorded, or cannot route to at all."""
    notes = [f"{host}: routed as the gateway's last converge recorded it (not changed by this run: it failed, or the "
             "run left it out)" for host in merged["carried"]]
    return notes + [f"{host}: not routed: its scenes are unknown to this run and to the gateway's record (it failed "
                    "its checks, or the run left it out); the gateway routes to it once it converges with the gateway"
                    for host in merged["missing"]]


def backend_problems(scenes_by_host: dict[str, Any], endpoints_by_host: dict[str, Any]) -> list[str]:
    """Return why the gateway cannot route: no GPU host known at all, hosts without an ingress, unroutable names."""
    problems = []
    if not scenes_by_host:
        problems.append("no GPU host's scenes are known to this run or recorded by the gateway: run the gateway "
                        "together with its GPU hosts (-l gateways,gpu_hosts, or no limit), and fix those that failed")
    disabled = sorted(h for h, e in endpoints_by_host.items() if e is not None and not e.get("enabled", True))
    if disabled:
        problems.append(f"{', '.join(disabled)} run no ingress (vllm_ingress_enabled false): enable it, or take "
                        "them out of the gateway's backend group")
    for host, scenes in sorted(scenes_by_host.items()):
        for scene in scenes or []:
            if not SERVED_NAME.fullmatch(str(scene.get("served_model_name", ""))):
                problems.append(f"{host}: scene {scene.get('name')!r} serves {scene.get('served_model_name')!r}: "
                                "a name the gateway routes must be 1-128 of A-Z a-z 0-9 . _ : / @ + -, not "
                                "starting with -")
    return problems


def routes(scenes_by_host: dict[str, Any], endpoints_by_host: dict[str, Any]) -> list[dict[str, Any]]:
    """Return, per served model name, its gateway backend and the scenes serving it (via their hosts' ingress), each
    with the requests it runs at once (max_num_seqs; 0 when vLLM's default applies)."""
    by_model: dict[str, list[dict[str, Any]]] = {}
    for host, scenes in sorted(scenes_by_host.items()):
        endpoint, limits = endpoints_by_host.get(host) or {}, scene_limits(scenes or [])
        for scene in sorted(scenes or [], key=lambda s: s["name"]):
            by_model.setdefault(scene["served_model_name"], []).append(
                {"host": host, "scene": scene["name"], "server": server_name(host, scene["name"]),
                 "sni": scene_tls_name(host, scene["name"]),
                 "address": endpoint.get("address", host), "port": int(endpoint.get("port", 0)),
                 "max_num_seqs": limits[scene["name"]]})
    return [{"model": model, "backend": f"model_{index}", "servers": servers}
            for index, (model, servers) in enumerate(sorted(by_model.items()))]


def scene_limits(scenes: list[dict[str, Any]]) -> dict[str, int]:
    """Return each resolved scene's requests at once (its max_num_seqs; 0 when vLLM's default applies) by name."""
    return {scene["name"]: int(scene.get("engine_args", {}).get("max-num-seqs") or 0) for scene in scenes}


def scene_tls_name(host: str, scene: str) -> str:
    """Return the TLS server name the gateway asks a host's ingress for to reach one of its scenes."""
    return f"{scene}.{host}"


def scene_tls_names(host: str, scenes: list[str]) -> list[str]:
    """Return the TLS server names of a host's scenes, which its ingress certificate must hold."""
    return [scene_tls_name(host, scene) for scene in scenes]


def server_name(host: str, scene: str) -> str:
    """Return the gateway's name for one scene, as its runtime API and metrics show it."""
    return f"{host}:{scene}"


def first_user(model: str, users: list[dict[str, Any]]) -> dict[str, str] | None:
    """Return {model, user} for the first user allowed to call a model, or None when no user may."""
    for user in users:
        if model in (user.get("models") or []):
            return {"model": model, "user": user["name"]}
    return None


def models_document(models: list[str]) -> str:
    """Return the OpenAI `GET /v1/models` body listing exactly these served names."""
    data = [{"id": m, "object": "model", "owned_by": "vllm-fleet"} for m in sorted(set(models))]
    return json.dumps({"object": "list", "data": data}, separators=(",", ":"))


def error_document(message: str, kind: str, code: str) -> str:
    """Return an OpenAI-shaped error body (no single quote: the gateway's config holds it in one)."""
    return json.dumps({"error": {"message": message.replace("'", "`"), "type": kind, "param": None, "code": code}},
                      separators=(",", ":"))


def tls_problems(cert_pem: str, key_pem: str, now: datetime.datetime | None = None) -> list[str]:
    """Return why a PEM certificate (chain first) and private key cannot serve: unreadable, not a pair, or expired."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificates(cert_pem.encode())[0]
    except ValueError:
        return ["the certificate is not PEM (-----BEGIN CERTIFICATE-----)"]
    try:
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except (ValueError, TypeError):
        return ["the key is not an unencrypted PEM private key"]
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    problems = []
    if key.public_key().public_bytes(serialization.Encoding.PEM, public) != cert.public_key().public_bytes(
            serialization.Encoding.PEM, public):
        problems.append("the certificate does not match the key (their public keys differ)")
    moment = now or datetime.datetime.now(datetime.timezone.utc)
    if cert.not_valid_after_utc <= moment:
        problems.append(f"the certificate expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
    elif cert.not_valid_before_utc > moment:
        problems.append(f"the certificate is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")
    return problems


def buffer_bytes(max_body_kib: int) -> int:
    """Return HAProxy's buffer size for a gateway that reads whole bodies of up to max_body_kib to route them."""
    return int(max_body_kib) * 1024 + HEADER_BYTES


def memory_ceiling(max_connections: int, max_body_kib: int) -> str:
    """Return the gateway unit's MemoryMax: two full buffers (request and answer) per connection, and HAProxy's base."""
    per_connection = 2 * buffer_bytes(max_body_kib)
    return f"{BASE_MEMORY_MIB + -(-int(max_connections) * per_connection // 2**20)}M"


def host_addresses(hosts: list[str], hostvars: Any) -> list[str]:
    """Return the addresses of these inventory hosts (ansible_host, else the name), each once, in order."""
    addresses = [str(hostvars[host].get("ansible_host", host)) for host in hosts]
    return list(dict.fromkeys(addresses))


def source_problems(sources: Any) -> list[str]:
    """Return why an ingress's list of admitted sources is unusable: not a list, empty, or an entry that is no
    address, network or host name."""
    if not isinstance(sources, list) or not sources:
        return ["must list the addresses (or networks) the gateways and monitoring hosts connect from"]
    return [f"{source!r} is not an IP address, a network (address/prefix) or a host name"
            for source in sources if not isinstance(source, str) or not SOURCE.fullmatch(source)]
