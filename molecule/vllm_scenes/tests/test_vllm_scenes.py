"""Real scenes on a lab host, then the changes a user makes, run for real (tests run in file order)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import testinfra.host
import yaml

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "shared"))

from playbooks import run_playbook  # noqa: E402

PORTS = {"realtime": 8000, "nightly": 8100}
LAB_MODEL = Path("/var/lib/vllm-fleet-lab/www/models/tiny-qwen2-awq")  # the lab's tiny model (make lab-model)


def main_pid(host: testinfra.host.Host, scene: str) -> int:
    """Return the main PID of a scene's service (0 when stopped)."""
    return int(host.check_output(f"systemctl show -p MainPID --value vllm-scene-{scene}.service"))


def config(host: testinfra.host.Host, scene: str) -> dict[str, object]:
    """Return the --config mapping the scene runs with."""
    return yaml.safe_load(host.file(f"/etc/vllm/scenes/{scene}.yaml").content_string)


def converge(host: testinfra.host.Host, *extra: str) -> tuple[int, str]:
    """Run this scenario's scenes play again with extra arguments; return (exit code, output)."""
    result = run_playbook(SCENARIO, "mvs", host.backend.get_hostname(), "scenes.yml", *extra)
    return result.returncode, result.stdout


def state(host: testinfra.host.Host) -> tuple[dict[str, int], str]:
    """Return the PIDs of both scenes and a digest of every file the role manages."""
    digest = host.check_output("sha256sum /etc/vllm/scenes/* /etc/systemd/system/vllm-scene-*.service | sha256sum")
    return {scene: main_pid(host, scene) for scene in PORTS}, digest


def test_configs_carry_preset_and_overrides(host: testinfra.host.Host) -> None:
    """realtime has the seed figures; the user's nightly scene its own preset with the host override on top."""
    realtime, nightly = config(host, "realtime"), config(host, "nightly")
    assert {k: realtime[k] for k in ("gpu-memory-utilization", "max-model-len", "max-num-seqs", "port", "host")} == {
        "gpu-memory-utilization": 0.90, "max-model-len": 4096, "max-num-seqs": 16, "port": 8000, "host": "127.0.0.1"}
    assert realtime["enable-prefix-caching"] is True and realtime["enable-chunked-prefill"] is True
    assert (nightly["max-model-len"], nightly["max-num-seqs"], nightly["port"]) == (2048, 32, 8100)
    assert realtime["model"] == nightly["model"] == "/var/lib/vllm/models/tiny-qwen2-awq"


@pytest.mark.parametrize("scene", sorted(PORTS))
def test_scene_serves_its_port(host: testinfra.host.Host, scene: str) -> None:
    """Each scene's unit is active and its port answers /health, /v1/models and /metrics with vllm:* series."""
    assert host.service(f"vllm-scene-{scene}.service").is_running
    port = PORTS[scene]
    assert host.check_output(f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/health") == "200"
    assert "vllm:num_requests_running" in host.check_output(f"curl -s http://127.0.0.1:{port}/metrics")


def test_unit_sandbox_and_caches(host: testinfra.host.Host) -> None:
    """The unit hides nothing in /dev, protects the system, and points every cache at persistent disk."""
    show = host.check_output("systemctl show vllm-scene-realtime -p ProtectSystem -p PrivateDevices -p Environment")
    assert "ProtectSystem=strict" in show and "PrivateDevices=no" in show
    for variable in ("HF_HOME", "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        assert f"{variable}=/var/lib/vllm/cache/realtime/" in show
    assert "TMPDIR=/run/vllm-scene-realtime" in show and "CUDA_VISIBLE_DEVICES=0" in show


def test_changed_scene_restarts_alone(host: testinfra.host.Host) -> None:
    """Changing nightly's max_num_seqs restarts nightly only; realtime keeps its process."""
    before = {scene: main_pid(host, scene) for scene in PORTS}
    code, output = converge(host, "-e", "mvs_nightly_max_num_seqs=24")
    assert code == 0, output[-3000:]
    assert config(host, "nightly")["max-num-seqs"] == 24
    assert main_pid(host, "realtime") == before["realtime"]
    assert main_pid(host, "nightly") not in (0, before["nightly"])


def test_restart_reuses_the_compile_cache(host: testinfra.host.Host) -> None:
    """nightly's restart above loaded the compile cache and Inductor's precompiled header of its first start instead
    of building them again."""
    started = host.check_output("systemctl show -p ExecMainStartTimestamp --value vllm-scene-nightly")
    log = host.check_output(f"journalctl -u vllm-scene-nightly -o cat --no-pager --since '{started}'")
    assert "Warming up done" in log and "Compiling model again" not in log
    headers = host.check_output("stat -c %Y /var/lib/vllm/cache/nightly/precompiled_headers/*.gch").split()
    assert headers and max(map(int, headers)) < int(host.check_output(f"date -d '{started}' +%s"))


def test_scene_vllm_rejects_leaves_everything_running(host: testinfra.host.Host) -> None:
    """An unknown engine argument fails with vLLM's own message; no file changes and no scene restarts."""
    before = state(host)
    code, output = converge(host, "-e", json.dumps({"mvs_realtime_engine_args": {"enable_flash_attn_3": True}}))
    assert code != 0
    assert "vllm_scenes_list[name=realtime]: vllm serve: error: unrecognized arguments: --enable-flash-attn-3" in output
    assert state(host) == before


@pytest.mark.parametrize(("scenes", "message"), [
    ([{"name": "fast"}], "vllm_scenes_list[name=fast]: no preset 'fast'"),
    ([{"name": "realtime"}, {"name": "batch", "port": 8000}], "scenes 'realtime' and 'batch' share port 8000"),
    ([{"name": "realtime", "gpus": [1]}], "scene 'realtime' asks for GPU [1] but the host has [0]"),
    ([{"name": "realtime", "api_key_var": "vault_missing_key"}], "names vault_missing_key, which is not set"),
    ([{"name": "realtime", "host": "0.0.0.0", "api_key_var": "vault_lab_realtime_api_key"}],
     "listens on 0.0.0.0, reachable off the host"),
])
def test_bad_input_fails_preflight_and_changes_nothing(host: testinfra.host.Host, scenes: list[dict[str, object]],
                                                       message: str) -> None:
    """Bad scene input is refused before any change, naming the host and what to fix."""
    before = state(host)
    code, output = converge(host, "-e", json.dumps({"vllm_scenes_list": scenes}))
    assert code != 0
    assert message in output and "mvs1" in output
    assert state(host) == before


def test_scene_no_longer_listed_is_removed(host: testinfra.host.Host) -> None:
    """Dropping nightly from the list stops it and removes its unit and files; realtime keeps running."""
    realtime = main_pid(host, "realtime")
    code, output = converge(host, "-e", "mvs_with_nightly=false")
    assert code == 0, output[-3000:]
    assert not host.file("/etc/systemd/system/vllm-scene-nightly.service").exists
    assert not host.file("/etc/vllm/scenes/nightly.yaml").exists
    assert host.run("systemctl is-active vllm-scene-nightly").stdout.strip() != "active"
    assert main_pid(host, "realtime") == realtime


def test_new_weights_in_place_restart_their_scene(host: testinfra.host.Host, tmp_path: Path) -> None:
    """The model replaced under the same name (a copy on the controller with one file changed): the vllm_model role
    swaps it in, and the scene serving it restarts on the new weights, whose digest its unit names; a run again
    changes nothing."""
    model = tmp_path / "tiny-qwen2-awq"
    shutil.copytree(LAB_MODEL, model, ignore=shutil.ignore_patterns("manifest.json"))
    generation = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**generation, "temperature": 0.5}))
    models = {"vllm_model_list": [{"name": "tiny-qwen2-awq", "source": "controller", "controller_dir": str(model),
                                   "served_model_name": "tiny-qwen2", "engine_args": {"quantization": "awq"}}],
              "mvs_with_nightly": False}  # removed by the test before
    unit = "/etc/systemd/system/vllm-scene-realtime.service"
    before, unit_before = main_pid(host, "realtime"), host.file(unit).content_string
    result = run_playbook(SCENARIO, "mvs", host.backend.get_hostname(), "converge.yml", "-e", json.dumps(models))
    assert result.returncode == 0, result.stdout[-3000:]
    marker = json.loads(host.file("/var/lib/vllm/models/tiny-qwen2-awq/.vllm-fleet-model.json").content_string)
    assert marker["source"] == "controller"
    after = main_pid(host, "realtime")
    assert after not in (0, before) and host.file(unit).content_string != unit_before
    assert host.check_output("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/health") == "200"
    again = run_playbook(SCENARIO, "mvs", host.backend.get_hostname(), "converge.yml", "-e", json.dumps(models))
    assert again.returncode == 0 and main_pid(host, "realtime") == after, again.stdout[-3000:]
