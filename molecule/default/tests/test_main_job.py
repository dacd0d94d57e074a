"""The main job's real result on each lab host: vLLM scenes as systemd services serving the tiny AWQ model."""

from __future__ import annotations

import datetime
import functools
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import pytest
import testinfra.host

testinfra_hosts = ["ansible://gpu_hosts"]  # mdef4, the gateway, has tests/test_gateway.py

SERVED = {"realtime": "tiny-qwen2", "batch": "tiny-qwen2-batch"}  # host_vars/mdef1.yml names batch's model


def scenes_of(host: testinfra.host.Host) -> dict[str, int]:
    """Return the scenes (name -> port) this host should run."""
    return {"realtime": 8000, "batch": 8001} if host.backend.get_hostname() == "mdef1" else {"realtime": 8000}


def api_key(host: testinfra.host.Host, scene: str) -> str:
    """Read a scene's API key from its root-only environment file."""
    line = host.check_output(f"grep ^VLLM_API_KEY= /etc/vllm/scenes/{scene}.env")
    return line.split("=", 1)[1]


def http(host: testinfra.host.Host, url: str, key: str = "", body: dict[str, object] | None = None) -> tuple[int, str]:
    """Make one HTTP request from the host itself and return (status, body)."""
    cmd = ["curl", "-sS", "-o", "/tmp/body", "-w", "%{http_code}", "--max-time", "60"]
    if key:
        cmd += ["-H", f"Authorization: Bearer {key}"]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    status = host.check_output(" ".join(f"'{part}'" for part in [*cmd, url]))
    return int(status), host.file("/tmp/body").content_string


def test_systemd_is_pid1_and_running(host: testinfra.host.Host) -> None:
    """PID 1 is systemd and the boot finished with no failed unit, vLLM scenes included."""
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"
    assert host.run("systemctl is-system-running").stdout.strip() == "running"


def test_scene_units_active_with_the_kit_settings(host: testinfra.host.Host) -> None:
    """Each scene is an enabled, active unit with Type=exec, Restart=on-failure and its own user."""
    for scene in scenes_of(host):
        unit = f"vllm-scene-{scene}.service"
        assert host.service(unit).is_enabled and host.service(unit).is_running
        props = dict(line.split("=", 1) for line in host.check_output(
            f"systemctl show {unit} -p Type -p Restart -p User -p TimeoutStartUSec -p PrivateDevices").splitlines())
        assert props == {"Type": "exec", "Restart": "on-failure", "User": f"vllm-{scene}", "TimeoutStartUSec": "30min",
                         "PrivateDevices": "no"}


def test_only_listed_scenes_run(host: testinfra.host.Host) -> None:
    """A host runs exactly the scenes its variables list."""
    units = host.check_output("systemctl list-units --plain --no-legend 'vllm-scene-*' | awk '{print $1}'").split()
    assert sorted(units) == sorted(f"vllm-scene-{s}.service" for s in scenes_of(host))


def test_scene_units_are_sandboxed_to_their_own_devices(host: testinfra.host.Host) -> None:
    """Each scene unit scores at most MAX_EXPOSURE in systemd-analyze security, keeps no capability, opens only the
    devices it lists (none on the cpu flavour) and talks to loopback only; the host metrics unit is sandboxed too."""
    for scene in scenes_of(host):
        unit = f"vllm-scene-{scene}.service"
        assert exposure(host, unit) <= MAX_EXPOSURE
        props = dict(line.split("=", 1) for line in host.check_output(
            f"systemctl show {unit} -p DevicePolicy -p CapabilityBoundingSet -p IPAddressDeny -p UMask").splitlines())
        assert set(props.pop("IPAddressDeny").split()) == {"0.0.0.0/0", "::/0"}
        assert props == {"DevicePolicy": "closed", "CapabilityBoundingSet": "", "UMask": "0077"}, props
    assert exposure(host, "prometheus-node-exporter.service") <= MAX_EXPOSURE


def test_models_endpoint_lists_the_served_name(host: testinfra.host.Host) -> None:
    """GET /v1/models with the key lists the scene's served model name."""
    for scene, port in scenes_of(host).items():
        status, body = http(host, f"http://127.0.0.1:{port}/v1/models", api_key(host, scene))
        assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == [SERVED[scene]]


def test_chat_completion_returns_text_and_usage(host: testinfra.host.Host) -> None:
    """A greedy chat completion returns non-empty text and token usage."""
    for scene, port in scenes_of(host).items():
        status, body = http(host, f"http://127.0.0.1:{port}/v1/chat/completions", api_key(host, scene),
                            {"model": SERVED[scene], "temperature": 0, "max_tokens": 8,
                             "messages": [{"role": "user", "content": "Hello, how are you?"}]})
        answer = json.loads(body)
        assert status == 200 and answer["choices"][0]["message"]["content"].strip()
        assert answer["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("path", ["/v1/models", "/v1/chat/completions"])
def test_request_without_key_is_refused(host: testinfra.host.Host, path: str) -> None:
    """Without the API key vLLM answers 401."""
    for port in scenes_of(host).values():
        status, _ = http(host, f"http://127.0.0.1:{port}{path}", body={} if "chat" in path else None)
        assert status == 401


def test_secrets_stay_out_of_process_list_and_world(host: testinfra.host.Host) -> None:
    """The key is only in a 0600 root:root file (systemd reads it as root), never on a command line."""
    processes = host.check_output("ps -eo args")
    for scene in scenes_of(host):
        env = host.file(f"/etc/vllm/scenes/{scene}.env")
        assert (env.user, env.group, env.mode) == ("root", "root", 0o600)
        assert api_key(host, scene) not in processes


def test_no_host_fetched_a_release_lock_from_the_wheels_server() -> None:
    """The lock's hashes come from the controller (copied to the host), never from the server of the wheels they
    check: in this lab's life the file server was asked for wheels, never for a .lock."""
    lab = Path("/var/lib/vllm-fleet-lab")
    key = lab / "labs" / os.environ.get("VFL_LAB", "mdef") / "id_ed25519"  # made when the lab was
    since = datetime.datetime.fromtimestamp(key.stat().st_mtime)
    asked = []
    for line in (lab / "fileserver.log").read_text(errors="replace").splitlines():
        found = re.search(r'\[(\d+/\w+/\d+ [\d:]+)\] "GET (\S+)', line)
        if found and datetime.datetime.strptime(found.group(1), "%d/%b/%Y %H:%M:%S") >= since:
            asked.append(found.group(2))
    assert asked and not [path for path in asked if path.endswith(".lock")], asked[-20:]


def test_caches_persist_on_disk_owned_by_the_service(host: testinfra.host.Host) -> None:
    """Compile caches live under /var/lib/vllm/cache/<scene>, its own user's alone, and are filled after a start."""
    for scene in scenes_of(host):
        cache = host.file(f"/var/lib/vllm/cache/{scene}")
        assert (cache.user, cache.mode) == (f"vllm-{scene}", 0o700) and cache.is_directory
        assert host.run(f"find /var/lib/vllm/cache/{scene} -type f | head -1").stdout.strip()


def test_the_load_test_ran_as_the_service_user(host: testinfra.host.Host) -> None:
    """vllm bench serve, the release's own code, wrote its results as the service user, never as root, into a
    directory of that user's inside the root-owned verdicts' directory."""
    verdicts = host.file("/var/lib/vllm/verify")
    assert (verdicts.user, verdicts.group, verdicts.mode) == ("root", "vllm", 0o710)
    for scene in scenes_of(host):
        result = host.file(f"/var/lib/vllm/verify/bench/{scene}.json")
        assert result.exists and result.user == "vllm", scene
        assert host.file(f"/var/lib/vllm/verify/{scene}.verdict.json").user == "root"


REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "molecule" / "shared"))

from playbooks import lab_host, run_playbook  # noqa: E402
from units import MAX_EXPOSURE, exposure  # noqa: E402
from rerun_hosts import SITE_REPORTS  # noqa: E402


RERUN_REPORTS = SITE_REPORTS / "reruns"  # the reruns below leave site.yml's own reports as they were


IMPOSSIBLE_HOST, STOPPED_HOST = "mdef2", "mdef1"  # the gates are per scene: one host shows each


def pids(name: str) -> dict[str, str]:
    """Return the MainPID of each scene of host name."""
    host = lab_host(name)
    return {s: host.check_output(f"systemctl show -p MainPID --value vllm-scene-{s}") for s in scenes_of(host)}


@functools.cache
def slo_rerun() -> tuple[int, str, float, dict[str, str], dict[str, str]]:
    """Run playbooks/verify.yml again once on two hosts, reporting under RERUN_REPORTS: on IMPOSSIBLE_HOST with a median
    TPOT target of 0.001 ms (its host vars, from a second inventory source), on STOPPED_HOST with batch stopped (the
    health wait left at its 600 s). Return the exit code, output, seconds, and IMPOSSIBLE_HOST's scene PIDs before
    and after."""
    before = pids(IMPOSSIBLE_HOST)
    stopped = lab_host(STOPPED_HOST)
    stopped.check_output("systemctl stop vllm-scene-batch")
    try:
        with tempfile.TemporaryDirectory() as change:
            (Path(change) / "host_vars").mkdir()
            (Path(change) / "hosts.yml").write_text(json.dumps({"gpu_hosts": {"hosts": {IMPOSSIBLE_HOST: None}}}))
            (Path(change) / "host_vars" / f"{IMPOSSIBLE_HOST}.yml").write_text(
                json.dumps({"vllm_verify_slo_overrides": {"realtime": {"median_tpot_ms": 0.001}}}))
            started = time.monotonic()
            result = run_playbook(REPO / "molecule" / "default", "mdef", f"{IMPOSSIBLE_HOST},{STOPPED_HOST}",
                                  "../../playbooks/verify.yml", "-i", change, "-e",
                                  f"vllm_verify_report_dir={RERUN_REPORTS}")
            elapsed = time.monotonic() - started
    finally:
        stopped.check_output("systemctl start vllm-scene-batch")
    return result.returncode, result.stdout, elapsed, before, pids(IMPOSSIBLE_HOST)


def report(host: testinfra.host.Host, scene: str, reports: Path = SITE_REPORTS) -> dict[str, object]:
    """Return the controller's report of one scene of this host."""
    return json.loads((reports / host.backend.get_hostname() / f"{scene}.json").read_text())


def test_every_scene_has_a_passing_report_with_real_numbers(host: testinfra.host.Host) -> None:
    """site.yml ended with a passing report per scene, holding vllm bench serve's own figures."""
    for scene in scenes_of(host):
        data = report(host, scene)
        bench = data["bench"]
        assert data["passed"] is True and data["slo"]["passed"] is True
        assert bench["completed"] == 64 and bench["failed"] == 0 and bench["output_throughput"] > 0
        assert all(check["passed"] for check in data["checks"]) and len(data["checks"]) == 5
    summary = (SITE_REPORTS / "summary.md").read_text()
    assert f"| {host.backend.get_hostname()} | realtime | cpu |" in summary


def test_impossible_target_fails_the_scene_and_keeps_it_running(host: testinfra.host.Host) -> None:
    """A median TPOT target of 0.001 ms fails with metric, value and target; no service restarts."""
    if host.backend.get_hostname() != IMPOSSIBLE_HOST:
        pytest.skip(f"the gate is per scene: {IMPOSSIBLE_HOST}'s run shows it")
    code, output, _, before, after = slo_rerun()
    assert code != 0
    assert re.search(rf"{IMPOSSIBLE_HOST}: scene realtime: median_tpot_ms [0-9.]+ > target 0\.001", output), \
        output[-2000:]
    assert report(host, "realtime", RERUN_REPORTS)["passed"] is False
    assert after == before


def test_stopped_scene_is_reported_at_once_and_fails_alone(host: testinfra.host.Host) -> None:
    """With batch's unit stopped, verification reports it at once with the unit's state, not after the 600 s health
    wait; batch fails alone and its report says why."""
    if host.backend.get_hostname() != STOPPED_HOST:
        pytest.skip(f"{STOPPED_HOST} runs two scenes: its run shows it")
    code, output, elapsed, _, _ = slo_rerun()
    assert code != 0 and elapsed < 300
    found = re.search(r"scene batch: GET /health: scene 'batch' \(vllm-scene-batch.service\) crashed (\d+) s into the "
                      r"wait: the unit is not running \(inactive/dead\).*\[ActiveState=inactive", output)
    assert found and int(found[1]) <= 30, output[-3000:]
    assert report(host, "batch", RERUN_REPORTS)["passed"] is False
    assert report(host, "realtime", RERUN_REPORTS)["passed"] is True
    assert "the unit is not running" in report(host, "batch", RERUN_REPORTS)["reasons"][0]


def test_client_settings_reference_the_key_without_holding_it(host: testinfra.host.Host) -> None:
    """Each scene has an OpenAI-compatible settings file on the controller that names its key but does not hold it."""
    name = host.backend.get_hostname()
    for scene, port in scenes_of(host).items():
        settings = json.loads((REPO / "clients" / name / f"{scene}.json").read_text())
        assert settings["base_url"].endswith(f":{port}/v1") and settings["model"] == SERVED[scene]
        assert settings["api_key_vault_var"] == f"vault_lab_{scene}_api_key"
        assert {"max_tokens", "temperature", "timeout"} <= set(settings)
        assert api_key(host, scene) not in json.dumps(settings)


def test_deployed_state_fact_records_what_runs_without_secrets(host: testinfra.host.Host) -> None:
    """The local fact names the active release, the model and each scene's file digests and definition, no secret."""
    fact_file = host.file("/etc/ansible/facts.d/vllm_fleet.fact")
    assert fact_file.user == "root" and fact_file.mode == 0o644
    fact = json.loads(fact_file.content_string)
    assert fact["release"]["path"] == host.check_output("readlink /opt/vllm/current")
    assert fact["release"]["version"].startswith("0.32.0") and fact["release"]["flavour"] == "cpu"
    assert fact["models"]["tiny-qwen2-awq"]["source"] == "http"
    assert set(fact["scenes"]) == set(scenes_of(host))
    for scene, state in fact["scenes"].items():
        assert state["config_sha256"] == host.check_output(f"sha256sum /etc/vllm/scenes/{scene}.yaml").split()[0]
        unit = f"/etc/systemd/system/vllm-scene-{scene}.service"
        assert state["unit_sha256"] == host.check_output(f"sha256sum {unit}").split()[0]
        assert state["definition"]["port"] == scenes_of(host)[scene]
        weights = fact["models"]["tiny-qwen2-awq"]["manifest_sha256"]
        assert state["weights_sha256"] == weights and f"manifest sha256 {weights}." in host.file(unit).content_string
        assert api_key(host, scene) not in fact_file.content_string
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", fact["deployed_at"])
