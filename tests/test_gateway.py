"""The gateway's pure logic: user keys and their checks, routes from the fleet's scenes, its own answers, TLS."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from lab_certificates import self_signed_pair

from ansible_collections.vllm.fleet.plugins.plugin_utils import gateway

GOOD_KEY = "k" * 40
USER = {"name": "alice", "key_var": "vault_alice", "models": ["qwen"], "requests_per_minute": 60, "max_concurrent": 4}


@pytest.mark.parametrize(("key", "expected"), [
    ("a" * 31, "is 31 characters long, shorter than 32"),
    ("a" * 40 + " b", "has characters outside [A-Za-z0-9._~-]"),
    ("a" * 40 + "'", "has characters outside [A-Za-z0-9._~-]"),
    ("", "is empty or not a string"),
    (None, "is empty or not a string"),
    ("aZ09._~-" * 4, None),
])
def test_key_problem_names_the_rule_never_the_key(key: object, expected: str | None) -> None:
    """A short key, one with other characters, or none is refused; the message never quotes the key."""
    problem = gateway.key_problem(key)
    assert problem == expected
    assert not problem or not key or str(key) not in problem


def test_good_users_have_no_problems() -> None:
    """A user with a good key, served models and whole-number limits passes."""
    assert gateway.user_problems([USER], {"alice": GOOD_KEY}, ["qwen"]) == []
    assert gateway.user_problems([USER], None, ["qwen"]) == []  # without the Vault the keys are not checked
    assert gateway.user_problems([{**USER, "models": ["other"]}], None, ["qwen"]) != []


@pytest.mark.parametrize(("users", "keys", "expected"), [
    ([USER, {**USER, "name": "bob"}], {"alice": GOOD_KEY, "bob": GOOD_KEY}, "[bob]: has the same key as alice"),
    ([USER, USER], {"alice": GOOD_KEY}, "two users are named 'alice'"),
    ([{**USER, "models": ["llama"]}], {"alice": GOOD_KEY}, "models ['llama'] are served by no scene"),
    ([{**USER, "models": []}], {"alice": GOOD_KEY}, "models must list the served model names"),
    ([{**USER, "modles": ["qwen"]}], {"alice": GOOD_KEY}, "unknown field(s) modles"),
    ([{**USER, "requests_per_minute": "10"}], {"alice": GOOD_KEY}, "requests_per_minute must be a whole number"),
    ([{**USER, "max_concurrent": -1}], {"alice": GOOD_KEY}, "max_concurrent must be a whole number"),
    ([{**USER, "name": "Alice!"}], {"Alice!": GOOD_KEY}, "name must be 1-32 of a-z"),
    ([USER], {"alice": None}, "the key in vault_alice is empty or not a string"),
    ([USER], {"alice": "short"}, "the key in vault_alice is 5 characters long"),
])
def test_user_problems(users: list[dict[str, object]], keys: dict[str, object], expected: str) -> None:
    """Each bad user input gets a problem naming the user and the variable to fix."""
    problems = gateway.user_problems(users, keys, ["qwen"])
    assert any(expected in p for p in problems), problems
    assert all(GOOD_KEY not in p for p in problems)


def test_user_keys_reads_each_users_variable() -> None:
    """Keys come from the variables the users name; an unset one is None."""
    users = [USER, {**USER, "name": "bob", "key_var": "vault_bob"}, {**USER, "name": "eve", "key_var": ""}]
    assert gateway.user_keys(users, {"vault_alice": GOOD_KEY}) == {"alice": GOOD_KEY, "bob": None, "eve": None}


def test_gateway_users_hold_keyed_digests_not_keys() -> None:
    """The config's user entries carry the key's HMAC-SHA256 under the fleet's digest key, as HAProxy's hmac
    converter computes it, never the key nor its plain sha256; another digest key gives another digest."""
    digest_key = base64.b64encode(b"k" * 32).decode()
    (entry,) = gateway.gateway_users([USER], {"alice": GOOD_KEY}, digest_key)
    assert entry == {"name": "alice", "digest": hmac.new(b"k" * 32, GOOD_KEY.encode(), hashlib.sha256).hexdigest(),
                     "models": ["qwen"], "requests_per_minute": 60, "max_concurrent": 4}
    assert GOOD_KEY not in json.dumps(entry) and hashlib.sha256(GOOD_KEY.encode()).hexdigest() not in json.dumps(entry)
    other = gateway.gateway_users([USER], {"alice": GOOD_KEY}, base64.b64encode(b"j" * 32).decode())
    assert other[0]["digest"] != entry["digest"]


SCENES = {
    "gpu2": [{"name": "realtime", "served_model_name": "qwen", "engine_args": {"max-num-seqs": 16}}],
    "gpu1": [{"name": "realtime", "served_model_name": "qwen"}, {"name": "batch", "served_model_name": "llama"}],
}
ENDPOINTS = {"gpu1": {"address": "10.0.0.1", "port": 9443}, "gpu2": {"address": "10.0.0.2", "port": 9443}}


def test_routes_group_scenes_by_served_name_in_a_stable_order() -> None:
    """Each served name gets one backend with every scene serving it, reached by its host's ingress, with the
    requests it runs at once (0: vLLM's default, unknown to the gateway)."""
    routes = gateway.routes(SCENES, ENDPOINTS)
    assert [r["model"] for r in routes] == ["llama", "qwen"]
    assert [r["backend"] for r in routes] == ["model_0", "model_1"]
    assert routes[1]["servers"] == [
        {"host": "gpu1", "scene": "realtime", "server": "gpu1:realtime", "sni": "realtime.gpu1",
         "address": "10.0.0.1", "port": 9443, "max_num_seqs": 0},
        {"host": "gpu2", "scene": "realtime", "server": "gpu2:realtime", "sni": "realtime.gpu2",
         "address": "10.0.0.2", "port": 9443, "max_num_seqs": 16},
    ]


def test_scene_limits_are_each_scenes_max_num_seqs() -> None:
    """A scene's limit is its max_num_seqs; a scene without one (vLLM's default) has 0, which sets no limit."""
    assert gateway.scene_limits(SCENES["gpu1"]) == {"realtime": 0, "batch": 0}
    assert gateway.scene_limits(SCENES["gpu2"]) == {"realtime": 16}


def test_backend_problems() -> None:
    """No host known at all, hosts without an ingress, or scenes serving unroutable names are named."""
    assert gateway.backend_problems(SCENES, ENDPOINTS) == []
    assert "no GPU host's scenes are known" in gateway.backend_problems({}, {})[0]
    disabled = gateway.backend_problems(SCENES, {**ENDPOINTS, "gpu2": {"enabled": False}})
    assert "gpu2 run no ingress" in disabled[0]
    spaced = gateway.backend_problems({"gpu1": [{"name": "x", "served_model_name": "my model"}]}, ENDPOINTS)
    assert "serves 'my model'" in spaced[0]


def test_first_user_allowed_a_model() -> None:
    """Verification calls each model with the first user allowed it; a model nobody may call is left out."""
    users = [{"name": "a", "models": ["x"]}, {"name": "b", "models": ["x", "y"]}]
    assert [gateway.first_user(m, users) for m in ("x", "y", "z")] == [{"model": "x", "user": "a"},
                                                                       {"model": "y", "user": "b"}, None]


def test_models_document_is_openai_shaped() -> None:
    """GET /v1/models lists exactly the given names, once each, sorted."""
    document = json.loads(gateway.models_document(["qwen", "llama", "qwen"]))
    assert document["object"] == "list"
    assert [m["id"] for m in document["data"]] == ["llama", "qwen"]
    assert {m["object"] for m in document["data"]} == {"model"}


def test_error_document_has_no_single_quote() -> None:
    """Error bodies are OpenAI-shaped and safe inside the config's single quotes."""
    body = gateway.error_document("your key's limit", "rate_limit_error", "rate_limit_exceeded")
    assert "'" not in body
    assert json.loads(body)["error"] == {"message": "your key`s limit", "type": "rate_limit_error", "param": None,
                                         "code": "rate_limit_exceeded"}


def test_tls_problems() -> None:
    """A good pair passes; another key, an expired or future certificate, or no PEM at all is refused."""
    cert, key = self_signed_pair("gw", 30)
    _, other_key = self_signed_pair("gw", 30)
    expired, expired_key = self_signed_pair("gw", -1, start_days=-10)
    future, future_key = self_signed_pair("gw", 30, start_days=5)
    assert gateway.tls_problems(cert, key) == []
    assert gateway.tls_problems(cert, other_key) == ["the certificate does not match the key (their public keys differ)"]
    assert "the certificate expired on" in gateway.tls_problems(expired, expired_key)[0]
    assert "is not valid before" in gateway.tls_problems(future, future_key)[0]
    assert gateway.tls_problems("junk", key) == ["the certificate is not PEM (-----BEGIN CERTIFICATE-----)"]
    assert gateway.tls_problems(cert, "junk") == ["the key is not an unencrypted PEM private key"]


RECORD = gateway.backend_record(SCENES, ENDPOINTS)


def test_backend_record_keeps_what_routes_need_and_nothing_else() -> None:
    """The record holds each scene's name, served name and limit and the host's endpoint: routes from it are the
    routes from the scenes themselves."""
    assert RECORD["gpu2"] == {"scenes": [{"name": "realtime", "served_model_name": "qwen",
                                          "engine_args": {"max-num-seqs": 16}}], "endpoint": ENDPOINTS["gpu2"]}
    assert gateway.routes({h: r["scenes"] for h, r in RECORD.items()},
                          {h: r["endpoint"] for h, r in RECORD.items()}) == gateway.routes(SCENES, ENDPOINTS)
    assert "gpu3" not in gateway.backend_record({**SCENES, "gpu3": None}, ENDPOINTS)


def test_hosts_out_of_the_run_keep_their_recorded_routes() -> None:
    """A host that failed after resolving its scenes, or never resolved them, is routed as recorded; a host neither
    live nor recorded is missing and named, and the others are routed as they are now."""
    changed = {**SCENES, "gpu2": [{"name": "realtime", "served_model_name": "new", "engine_args": {}}]}
    merged = gateway.backends({**changed, "gpu3": None}, ENDPOINTS, ["gpu1"], RECORD)
    assert merged["scenes"] == {"gpu1": SCENES["gpu1"], "gpu2": RECORD["gpu2"]["scenes"]}
    assert merged["carried"] == ["gpu2"] and merged["missing"] == ["gpu3"]
    notes = gateway.backend_notes(merged)
    assert notes[0].startswith("gpu2: routed as the gateway's last converge recorded it")
    assert notes[1].startswith("gpu3: not routed")
    assert gateway.backends(SCENES, ENDPOINTS, None, {})["scenes"] == SCENES
    assert gateway.backends(SCENES, ENDPOINTS, [], None)["missing"] == ["gpu1", "gpu2"]


def test_a_served_name_may_not_start_with_a_dash() -> None:
    """HAProxy reads a match pattern starting with "-" as a flag: such a served name is refused, inner dashes are not."""
    assert gateway.SERVED_NAME.fullmatch("qwen-2.5-7b")
    assert not gateway.SERVED_NAME.fullmatch("-m")
    problems = gateway.backend_problems({"gpu1": [{"name": "realtime", "served_model_name": "-i"}]},
                                        {"gpu1": {"address": "10.0.0.1", "port": 9443}})
    assert problems and "not starting with -" in problems[0]


def test_the_memory_ceiling_holds_two_full_buffers_per_connection() -> None:
    """The gateway's MemoryMax: HAProxy's base and, per connection, a request and an answer buffer of the body size
    plus headers."""
    assert gateway.buffer_bytes(256) == 256 * 1024 + 16384
    assert gateway.memory_ceiling(1000, 256) == f"{128 + -(-1000 * 2 * (256 * 1024 + 16384) // 2**20)}M"
    assert gateway.memory_ceiling(1, 1) == "129M"


def test_ingress_sources_default_to_the_gateway_and_monitoring_addresses() -> None:
    """Each host's address is its ansible_host, else its name, each once."""
    hostvars = {"gw": {"ansible_host": "10.0.0.5"}, "mon": {}, "both": {"ansible_host": "10.0.0.5"}}
    assert gateway.host_addresses(["gw", "mon", "both"], hostvars) == ["10.0.0.5", "mon"]


@pytest.mark.parametrize(("sources", "expected"), [
    (["10.0.0.5", "10.1.0.0/16", "fd00::1", "fd00::/64", "gw.example.org"], []),
    ([], ["must list the addresses"]),
    ("10.0.0.5", ["must list the addresses"]),
    (["10.0.0.5 }", "a b", ""], ["'10.0.0.5 }' is not", "'a b' is not", "'' is not"]),
    (["10.0.0.5\n    log 10.9.9.9"], ["is not an IP address"]),
])
def test_ingress_source_problems(sources: object, expected: list[str]) -> None:
    """Sources are addresses, networks or host names; anything HAProxy would read as more (a brace, a space, a line)
    is refused, and so is an empty list, which would admit nobody."""
    problems = gateway.source_problems(sources)
    assert len(problems) == len(expected) and all(want in got for want, got in zip(expected, problems)), problems
