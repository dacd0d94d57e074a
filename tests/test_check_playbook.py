"""playbooks/check.yml on copies of the example fleet, whose hosts' addresses (192.0.2.0/24) reach nothing: every
controller-side check, no host contacted."""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from conftest import REPO
from example_fleet import PINNED, example_fleet

# A model the planner's catalog does not know, served by the loopback "hub" below with a Qwen2.5-7B-shaped config.
NEW_REPO = "someorg/New-7B-AWQ"
NEW_CONFIG = {"num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
              "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False,
              "max_position_embeddings": 32768, "torch_dtype": "float16",
              "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}


def check(inventory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run check.yml against an inventory, with extra ansible-playbook arguments; return the finished process."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory",
           "ANSIBLE_NOCOLOR": "1"}
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "playbooks/check.yml", "-i", str(inventory), *extra]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_every_check_runs_without_contacting_a_host(tmp_path: Path) -> None:
    """Three GPU hosts and a gateway at addresses that reach nothing: all checks pass, no host unreachable (its speed
    is benchmarks/check_bench.py's)."""
    done = check(example_fleet(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "unreachable=1" not in done.stdout
    assert "Check the gateway's users" in done.stdout and "Refuse plans and options" in done.stdout


def test_bad_hosts_fail_alone_with_one_line_each(tmp_path: Path) -> None:
    """A misspelt engine argument on one host and no GPU facts on another: each fails alone, in one line; the gateway
    passes, saying it cannot route to the failed hosts (with no SSH it cannot read its record of their routes)."""
    inventory = example_fleet(tmp_path)
    host_vars = inventory / "host_vars"
    (host_vars / "gpu-4090-a.yml").write_text((host_vars / "gpu-4090-a.yml").read_text() + (
        "\nvllm_scenes_list:\n  - name: realtime\n    api_key_var: vault_realtime_api_key\n"
        "    engine_args: {max_num_seq: 32}\n"))
    b = yaml.safe_load((host_vars / "gpu-3090-b.yml").read_text())
    b.pop("vllm_fleet_gpus")
    (host_vars / "gpu-3090-b.yml").write_text(yaml.safe_dump(b))
    done = check(inventory)
    summary = done.stdout.split("FAILED HOSTS")[1].strip().splitlines()[1:]
    assert [line.split(":")[0] for line in summary] == ["gpu-3090-b", "gpu-4090-a"], done.stdout[-3000:]
    assert "vllm_fleet_gpus is not set, so checking this host would mean asking it" in summary[0]
    assert "engine_args.max_num_seq: vllm 0.33.0 has no such argument; did you mean max_num_seqs?" in summary[1]
    for host in ("gpu-3090-b", "gpu-4090-a"):
        assert f"{host}: not routed: its scenes are unknown to this run" in done.stdout
    assert "gpu-3090-a                 : ok=" in done.stdout and "unreachable=1" not in done.stdout


@contextmanager
def hub(configs: dict[str, dict[str, object]]) -> Iterator[tuple[str, list[str]]]:
    """Serve config.json files on loopback as the hub's API does (path -> content); yield its URL and the paths asked."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            """Answer a config.json the hub has, 404 otherwise."""
            asked.append(self.path)
            body = json.dumps(configs[self.path]).encode() if self.path in configs else b"{}"
            self.send_response(200 if self.path in configs else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            """Keep the test's output quiet."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()


def fleet_with_new_model(tmp_path: Path, endpoint: str) -> Path:
    """The example fleet serving NEW_REPO at its pinned revision, with the hub at endpoint."""
    inventory = example_fleet(tmp_path)
    group_vars = inventory / "group_vars" / "gpu_hosts" / "main.yml"
    text = group_vars.read_text().replace("Qwen/Qwen2.5-7B-Instruct-AWQ", NEW_REPO)
    group_vars.write_text(text + f"\nvllm_model_hf_endpoint: {endpoint}\n")
    return inventory


def test_a_model_the_planner_does_not_know_is_planned_from_the_hub(tmp_path: Path) -> None:
    """The controller asks the hub for the model's config.json at the pinned revision and plans from it (weights of
    a 7B AWQ model and its KV cache), contacting no host."""
    with hub({f"/{NEW_REPO}/resolve/{PINNED}/config.json": NEW_CONFIG}) as (endpoint, asked):
        done = check(fleet_with_new_model(tmp_path, endpoint))
    assert done.returncode == 0, done.stdout[-3000:]
    assert asked and set(asked) == {f"/{NEW_REPO}/resolve/{PINNED}/config.json"}
    assert "unreachable=1" not in done.stdout and "no plan" not in done.stdout
    # Sized from the hub's shapes: the weights' estimate (the catalog's measured load is 5.38) and the KV per token.
    assert "| 5.39 " in done.stdout and "57,344 B of KV per token" in done.stdout


def test_a_model_the_hub_does_not_have_gets_no_plan_and_says_why(tmp_path: Path) -> None:
    """A hub without the model: each scene of it gets no plan, naming the URL and the fix; nothing else fails."""
    with hub({}) as (endpoint, _):
        done = check(fleet_with_new_model(tmp_path, endpoint))
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"{NEW_REPO}/resolve/{PINNED}/config.json gave no config.json (HTTP 404)" in done.stdout
    assert "vllm_fleet_planner_models" in done.stdout and "unreachable=1" not in done.stdout


def test_a_scene_key_that_would_break_its_env_file_is_refused_without_showing_it(tmp_path: Path) -> None:
    """A scene key with a newline (it would add a line to the scene's env file) fails its host in one line that
    names the variable and the rule, never the key."""
    inventory = example_fleet(tmp_path)
    bad = "k" * 40 + "\nLD_PRELOAD=/tmp/evil.so"
    (inventory / "host_vars" / "gpu-4090-a.yml").write_text(
        (inventory / "host_vars" / "gpu-4090-a.yml").read_text() + f"\nvault_realtime_api_key: {json.dumps(bad)}\n")
    done = check(inventory)
    summary = done.stdout.split("FAILED HOSTS")[1].strip().splitlines()[1:]
    assert len(summary) == 1 and summary[0].startswith(
        "gpu-4090-a: vllm_scenes_list[name=realtime].api_key_var names vault_realtime_api_key, whose value has "
        "characters outside [A-Za-z0-9._~-]"), done.stdout[-3000:]
    assert "evil" not in done.stdout


def test_a_model_given_as_a_config_file_is_planned_without_the_hub(tmp_path: Path) -> None:
    """vllm_fleet_planner_models given the model's config.json as a file on the controller (the lookup docs/planner.md
    shows): the planner uses it and never asks the hub."""
    config = tmp_path / "new-7b-config.json"
    config.write_text(json.dumps(NEW_CONFIG))
    with hub({}) as (endpoint, asked):
        inventory = fleet_with_new_model(tmp_path, endpoint)
        group_vars = inventory / "group_vars" / "gpu_hosts" / "main.yml"
        group_vars.write_text(group_vars.read_text() + (
            f"vllm_fleet_planner_models:\n  {NEW_REPO}: \"{{{{ lookup('file', '{config}') | from_json }}}}\"\n"))
        done = check(inventory)
    assert done.returncode == 0, done.stdout[-3000:]
    assert asked == [] and "no plan" not in done.stdout and "57,344 B of KV per token" in done.stdout


# check.yml's roles, each with the host its settings are broken on: a GPU host stops at the first role whose preflight
# fails (vllm_model, vllm_scenes, vllm_ingress, in that order), and a play whose hosts all fail ends the run, so
# gpu-3090-a stays clean for the plays after it. vllm_fleet's settings are checked by the first role of a host.
# vllm_verify is left out: its preflight does not run the shared check yet.
BROKEN_ON = {"gpu-3090-b": ["vllm_fleet", "vllm_model"], "gpu-4090-a": ["vllm_scenes"], "gpu-4090-b": ["vllm_ingress"],
             "gateway-a": ["vllm_gateway"]}
INJECTED = "INJECTED"


def broken_settings(role: str) -> dict[str, Any]:
    """A line break in each of the role's str, path and list-of-str settings. Left out: a required one (none of these
    roles has one), and vllm_fleet's with choices (vllm_fleet_flavour, vllm_fleet_service_manager): its argument spec
    is validated as each role's dependency, before any preflight, and refuses a value outside them first."""
    options = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    broken: dict[str, Any] = {}
    for name, spec in options["argument_specs"]["main"]["options"].items():
        if spec.get("required") or (role == "vllm_fleet" and spec.get("choices")):
            continue
        if spec.get("type", "str") in ("str", "path"):
            broken[name] = f"x\n{INJECTED}"
        elif spec.get("type") == "list" and spec.get("elements") == "str":
            broken[name] = [f"x\n{INJECTED}"]
    return broken


def test_a_line_break_in_any_setting_fails_its_host_naming_the_setting_never_the_value(tmp_path: Path) -> None:
    """A line break in every string setting of check.yml's roles, the two known injections among them (a root
    ExecStartPre= line in a scene's unit, a log directive in the gateway's HAProxy config): each host fails in its
    first role's preflight, naming every setting of it and of the kit's shared ones and the character, no value;
    nothing changes."""
    inventory = example_fleet(tmp_path)
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    hosts["gpu_hosts"]["hosts"]["gpu-4090-b"] = {"ansible_host": "192.0.2.22"}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (inventory / "host_vars" / "gpu-4090-b.yml").write_text((inventory / "host_vars" / "gpu-4090-a.yml").read_text())
    expected: list[str] = []
    for host, roles in BROKEN_ON.items():
        broken = {name: value for role in roles for name, value in broken_settings(role).items()}
        expected += [name + ("[0]" if isinstance(value, list) else "") for name, value in broken.items()]
        if host == "gpu-3090-b":
            broken["vllm_fleet_scene_cache_dir"] = f"/var/lib/vllm/cache\nExecStartPre=/bin/sh -c 'id > /tmp/{INJECTED}'"
        if host == "gateway-a":
            broken["vllm_gateway_timeout"] = f"30m\n    log 192.0.2.66:514 local0 {INJECTED}"
            broken["vllm_gateway_users"] = yaml.safe_load(
                (inventory / "group_vars" / "gateways" / "main.yml").read_text())["vllm_gateway_users"]
            broken["vllm_gateway_users"][1]["name"] = f"ci-bots\n{INJECTED}"
            expected.append("vllm_gateway_users[1].name")
        path = inventory / "host_vars" / f"{host}.yml"
        own = yaml.safe_load(path.read_text()) if path.exists() else {}
        path.write_text(yaml.safe_dump({**own, **broken}))
    assert "vllm_fleet_scene_cache_dir" in expected and "vllm_gateway_timeout" in expected
    done = check(inventory)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    missing = [label for label in expected
               if f"{label}: holds a line break or control character ('\\n'); use a single line" not in done.stdout]
    assert missing == [], output[-3000:]
    assert INJECTED not in output and "ExecStartPre" not in output
    assert set(re.findall(r"\bchanged=(\d+)", done.stdout)) == {"0"}, done.stdout[-2000:]
    summary = done.stdout.split("FAILED HOSTS")[1].strip().splitlines()[1:]
    assert sorted(line.split(":")[0] for line in summary) == sorted(set(BROKEN_ON)), done.stdout[-3000:]
