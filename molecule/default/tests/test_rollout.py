"""playbooks/rollout.yml on the converged lab, once the other tests are done with it, one change to the realtime
scene after another (each run once, shared by the hosts' tests; rollout/changes), each while a steady load runs
through the gateway (mdef4): a change vLLM's parser rejects restarts nothing; a change that fails at start-up stops
at the canary, which is restored and verified while mdef2 and mdef3 are never touched; a good change reaches every
host, canary first. Each host is drained at the gateway around its change: not one request of the load fails."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import testinfra.host
import yaml

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
sys.path.insert(0, str(REPO / "molecule" / "shared"))

from gateway_client import (GATEWAY, GPU_HOSTS, Load, address, call, chat, key, server_events,  # noqa: E402
                            server_limits)
from playbooks import lab_host, run_playbook, scene_health  # noqa: E402

testinfra_hosts = ["ansible://gpu_hosts"]  # mdef4, the gateway, has tests/test_gateway.py

LAB = os.environ.get("VFL_LAB", "mdef")
HOSTS = GPU_HOSTS
CHANGES = SCENARIO / "rollout"  # the changes, and the extra vars of every rollout here: drain hooks, light load tests
CANARY = HOSTS[0]
UNIT = "vllm-scene-realtime.service"
CONFIG = "/etc/vllm/scenes/realtime.yaml"
STAGED = "/etc/vllm/scenes/.validated/realtime.yaml"
FACT = "/etc/ansible/facts.d/vllm_fleet.fact"
HOOKS_LOG = "/var/log/vllm-fleet-hooks.log"  # the drain hooks (rollout/hooks) log each call there
MARK = "/var/lib/vllm-fleet/rollback.in-progress.json"  # a run's in-progress mark, cleared once it is verified
# The rollouts' own compile-cache store, empty at first: the lab's may hold the good change's bundle already.
STORE = tempfile.mkdtemp(prefix="mdef-rollout-compile-cache-")
REPORTS = REPO / "reports" / "molecule-default"  # the load's figures, for docs/benchmarks.md
# Slower than the gateway tests' load: each rollout's own load tests must keep their share of the 2 cores.
ROLLOUT_PACE_S = 0.5


def scene_state(name: str) -> dict[str, str]:
    """Return what a rollout may change on a host: the scene process's invocation, its files and the fact."""
    host = lab_host(name)
    show = host.check_output(f"systemctl show -p InvocationID -p ActiveState -p MainPID {UNIT}")
    return {**dict(line.split("=", 1) for line in show.splitlines()),
            "config": host.check_output(f"sha256sum {CONFIG}").split()[0],
            # A restore puts back what runs, not what the last validation staged: a scene a failed change left out
            # has no staged file until a change stages it again.
            "staged": (host.run(f"sha256sum {STAGED}").stdout.split() or ["absent"])[0],
            "fact": host.file(FACT).content_string,
            "hooks": host.run(f"cat {HOOKS_LOG}").stdout}


@functools.cache
def rollout_under_load(change: str) -> tuple[dict[str, dict[str, str]], subprocess.CompletedProcess[str],
                                              dict[str, dict[str, str]], Load]:
    """Roll out rollout/changes/<change>.yml to the whole lab once while a load runs through the gateway; return
    every host's state before, the run, every host's state after, and the load."""
    before = {name: scene_state(name) for name in HOSTS}
    extra = [f"@{CHANGES}/hooks.yml", f"@{CHANGES}/verify.yml", f"@{CHANGES}/changes/{change}.yml",
             f"vllm_scenes_compile_cache_store={STORE}"]
    # The good change runs as the GitOps production job runs it: the whole inventory, gateway included.
    with Load(pace=ROLLOUT_PACE_S) as load:
        result = run_playbook(SCENARIO, LAB, "all" if change == "good" else "gpu_hosts", "../../playbooks/rollout.yml",
                              *(arg for value in extra for arg in ("-e", value)))
    return before, result, {name: scene_state(name) for name in HOSTS}, load


def rollout(change: str) -> tuple[dict[str, dict[str, str]], subprocess.CompletedProcess[str], dict[str, dict[str, str]]]:
    """Return a change's rollout: every host's state before, the run, and after."""
    return rollout_under_load(change)[:3]


def new_hook_calls(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Return the drain/undrain calls a rollout logged on a host, in order."""
    return [line.split()[0] for line in after["hooks"][len(before["hooks"]):].splitlines()]


def changed_hosts(output: str, task: str) -> set[str]:
    """Return the hosts an Ansible task reported as changed, over every run of it in a play's output."""
    hosts: set[str] = set()
    inside = False
    for line in output.splitlines():
        if line.startswith("TASK ["):
            inside = task in line
        elif inside and line.startswith("changed: ["):
            hosts.add(line.split("[", 1)[1].split("]", 1)[0])
    return hosts


def test_change_rejected_by_validation_restarts_nothing(host: testinfra.host.Host) -> None:
    """A setting vLLM's parser refuses (an unknown field of the compilation config, which the controller's argument
    table cannot see into) stops the rollout at the canary's validation, with vLLM's message; nothing restarts."""
    before, result, after = rollout("invalid")
    name = host.backend.get_hostname()
    assert result.returncode != 0, result.stdout[-3000:]
    assert f"{CANARY}: rollout failed at step validate" in result.stdout, result.stdout[-3000:]
    assert "no_such_setting" in result.stdout
    assert "Nothing was changed or restarted" in result.stdout
    assert after[name] == before[name]


def test_failure_at_start_up_restores_the_canary_and_spares_the_rest(host: testinfra.host.Host) -> None:
    """A change that leaves the canary's realtime out of its list and gives its batch a quantization that contradicts
    the checkpoint's fails the canary at start: it gets both scenes back, verifies each against its own gates,
    clears its in-progress mark (the next rollout, the good one below, may start), and the rest is untouched. (An
    earlier restore judged the restored scenes by the new list's SLO table, crashed on the scene it lacked, and left
    the mark.)"""
    before, result, after = rollout("drops-a-scene")
    name = host.backend.get_hostname()
    assert result.returncode != 0, result.stdout[-3000:]
    message = f"{CANARY}: rollout failed at step scenes"
    assert message in result.stdout, result.stdout[-4000:]
    reason = result.stdout.split(message, 1)[1][:3000]
    assert "quantization" in reason and "needs a person" not in reason, reason
    for scene in ("realtime", "batch"):
        assert re.search(rf"verified healthy: [\w, ]*\b{scene}\b", reason), reason
    assert "later batches were not touched" in reason
    if name == CANARY:
        assert after[name]["InvocationID"] != before[name]["InvocationID"]  # stopped with the change, then restored
        assert {key: after[name][key] for key in ("config", "fact", "ActiveState")} == {
            key: before[name][key] for key in ("config", "fact", "ActiveState")}
        assert scene_health(name) == 200 and host.service("vllm-scene-batch.service").is_running
        assert not host.file(MARK).exists
        assert new_hook_calls(before[name], after[name]) == ["drain", "undrain"]  # back in service once verified
    else:
        assert after[name] == before[name]  # the same process, files and fact: never touched


def test_good_change_reaches_every_host_canary_first(host: testinfra.host.Host) -> None:
    """A good change is deployed, restarted and verified everywhere; the canary's deploy is recorded before the others'."""
    before, result, after = rollout("good")
    name = host.backend.get_hostname()
    assert result.returncode == 0, result.stdout[-4000:]
    assert "max-num-seqs: 8" in lab_host(name).file(CONFIG).content_string
    assert after[name]["InvocationID"] != before[name]["InvocationID"] and after[name]["ActiveState"] == "active"
    fact = json.loads(after[name]["fact"])
    assert fact["scenes"]["realtime"]["config_sha256"] == after[name]["config"]
    assert fact["scenes"]["realtime"]["definition"]["engine_args"]["max-num-seqs"] == 8
    assert fact["deployed_at"] != json.loads(before[name]["fact"])["deployed_at"]
    assert new_hook_calls(before[name], after[name]) == ["drain", "undrain"]
    assert server_limits()[f"{name}:realtime"] == "8"  # prefix affinity's overload limit at the gateway follows it
    deployed = {other: json.loads(state["fact"])["deployed_at"] for other, state in after.items()}
    assert all(deployed[CANARY] < deployed[other] for other in HOSTS[1:]), deployed


def test_a_key_change_in_git_reaches_every_component(host: testinfra.host.Host) -> None:
    """The good change also rotates every realtime scene's key and removes the gateway user `revoked`: afterwards the
    revoked key gets 401 at the gateway, the lab user's chats are answered, each host's ingress sends its realtime
    scene the new key (the key-guarded /v1/models answers through it), and the scene's key file holds the new key."""
    _, result, _ = rollout("good")
    assert result.returncode == 0, result.stdout[-4000:]
    assert call("/v1/models", key("revoked"))[0] == 401
    answers = [chat(key("lab-user"), prompt=f"after the rotation {n}") for n in range(6)]
    assert {status for status, _, _ in answers} == {200}, [body for status, _, body in answers if status != 200][:3]
    name = host.backend.get_hostname()
    # The key-guarded path of this host's realtime, through its ingress as the gateway reaches it: 200 only when the
    # ingress sends the scene's new key.
    assert lab_host(GATEWAY).check_output(
        "curl -s -o /dev/null -w '%{http_code}' --cacert /etc/vllm-gateway/fleet-ca.pem "
        f"--cert /etc/vllm-gateway/client.pem --resolve realtime.{name}:9443:{address(name)} "
        f"https://realtime.{name}:9443/v1/models") == "200"
    rotated = yaml.safe_load((CHANGES / "changes" / "good.yml").read_text())["vault_lab_realtime_api_key"]
    assert lab_host(name).check_output("grep ^VLLM_API_KEY= /etc/vllm/scenes/realtime.env").endswith(rotated)


def test_batches_after_the_canary_start_from_its_compile_cache(host: testinfra.host.Host) -> None:
    """The good change's new engine argument needs new compiled graphs: the canary compiles and publishes them, the
    hosts after it unpack that bundle instead of compiling them again (docs/compile-cache.md)."""
    _, result, _ = rollout("good")
    assert host.backend.get_hostname() in HOSTS
    assert changed_hosts(result.stdout, "Pack each scene's compiled artefacts") == {CANARY}, result.stdout[-4000:]
    assert changed_hosts(result.stdout, "Unpack each bundle into its scene's cache") == set(HOSTS[1:]), \
        result.stdout[-4000:]


def test_no_rollout_drops_a_request_through_the_gateway(host: testinfra.host.Host) -> None:
    """Through each rollout, the rejected, the failed and restored, and the good one, a load through the gateway
    sees no failed request; during the good one every host's realtime served part of it."""
    loads = {change: rollout_under_load(change)[3] for change in ("invalid", "drops-a-scene", "good")}
    failed = {change: failures for change, load in loads.items() if (failures := load.failures())}
    assert not failed, (failed, {change: server_events(loads[change].since) for change in failed})
    assert all(len(load.results) > 5 for load in loads.values()), {c: len(load.results) for c, load in loads.items()}
    figures = loads["good"].figures()
    assert set(figures["by_backend"]) == {f"{name}:realtime" for name in HOSTS}, figures
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / "rollout-under-load.json").write_text(json.dumps(figures, indent=2) + "\n")
    assert host.backend.get_hostname() in HOSTS
