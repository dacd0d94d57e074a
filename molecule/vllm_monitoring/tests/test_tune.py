"""playbooks/tune.yml on the lab, for real: refused while the gateway routes to the host and for inputs it cannot
run; then, drained, a sweep of realtime with a candidate that cannot start, and one under an impossible SLO (the scene
restarted just before, still starting when the tuner comes); the scene is back on its deployed config, serving and
verified, after each. A small sweep (concurrency 1, 2, 4; 64 tokens in, 16 out) keeps the scenario within the suite's
time; benchmarks/tune_bench.py times the full one."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import yaml

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
sys.path.insert(0, str(SCENARIO.parent / "shared"))

from playbooks import lab_host, run_playbook, scene_health  # noqa: E402

LAB, GPU_HOST = "mmon", "mmon1"
REPORTS = REPO / "reports" / "molecule-vllm_monitoring-tune"
SCENE_CONFIG = "/etc/vllm/scenes/realtime.yaml"
SMALL = {"vllm_tune_scenes": ["realtime"], "vllm_tune_max_concurrency": 4, "vllm_tune_rounds": 2,
         "vllm_tune_min_prompts": 4, "vllm_tune_mix": {"input_len": 64, "output_len": 16},
         "vllm_verify_report_dir": str(REPORTS / "verify")}
# vLLM refuses a context longer than the model's at engine start: a candidate that cannot start.
UNSTARTABLE = {"name": "toolong", "engine_args": {"max-model-len": 1048576}}


def playbook(name: str, *extra: Any) -> subprocess.CompletedProcess[str]:
    """Run one of the kit's playbooks on the GPU host with these extra vars (dicts as JSON, key=value strings) and
    options (strings starting with -)."""
    args = [a for value in extra for a in ([value] if str(value).startswith("-") else
                                           ["-e", json.dumps(value) if isinstance(value, dict) else value])]
    return run_playbook(SCENARIO, LAB, GPU_HOST, str(REPO / "playbooks" / name), *args)


def scene_state() -> dict[str, str]:
    """Return what says the scene runs its deployed config: the config file's sha256 and the unit's main PID."""
    host = lab_host(GPU_HOST)
    return {"config": host.file(SCENE_CONFIG).sha256sum,
            "pid": host.check_output("systemctl show -p MainPID --value vllm-scene-realtime.service")}


def report(run: str) -> dict[str, Any]:
    """Return the JSON report a tuning run wrote for realtime."""
    return json.loads((REPORTS / run / GPU_HOST / "realtime.json").read_text())


@functools.cache
def runs() -> dict[str, Any]:
    """Refused in rotation and for bad inputs; drained, tuned with an unstartable candidate, tuned under an
    impossible SLO; back in rotation. Return each run's output and the scene's state before and after."""
    shutil.rmtree(REPORTS, ignore_errors=True)
    found: dict[str, Any] = {"before": scene_state()}
    # One run, every problem in its refusal: the host is in rotation, its budget and its sweep's top are wrong.
    found["refused"] = playbook("tune.yml", SMALL, {"vllm_tune_time_budget": 1, "vllm_tune_max_concurrency": 10**7,
                                                    "vllm_tune_report_dir": str(REPORTS / "refused")})
    found["after_refusals"] = scene_state()
    drained = playbook("rotation.yml", "vllm_gateway_rotation=drain")
    assert drained.returncode == 0, drained.stdout[-3000:]
    try:
        found["check"] = playbook("tune.yml", SMALL, "--check")
        found["after_check"] = scene_state()
        found["tuned"] = playbook("tune.yml", SMALL, {"vllm_tune_candidates": {"realtime": [UNSTARTABLE]},
                                                      "vllm_tune_report_dir": str(REPORTS / "tuned")})
        found["after_tuned"] = scene_state()
        # A scene still starting when the tuner comes: its deployed settings are swept once it answers.
        lab_host(GPU_HOST).run_expect([0], "systemctl restart --no-block vllm-scene-realtime.service")
        found["impossible"] = playbook("tune.yml", SMALL, {"vllm_tune_max_concurrency": 2,
                                                           "vllm_tune_slo_overrides": {"realtime": {"p99_tpot_ms": 0.01}},
                                                           "vllm_tune_report_dir": str(REPORTS / "impossible")})
    finally:
        ready = playbook("rotation.yml", "vllm_gateway_rotation=ready")
    assert ready.returncode == 0, ready.stdout[-3000:]
    found["after"] = scene_state()
    return found


def test_a_host_in_rotation_a_budget_below_one_step_and_a_sweep_beyond_the_kv_cache_are_refused() -> None:
    """One refusal, a line for each problem with host, variable and fix, before the lock: the scene was not touched."""
    found = runs()
    output = found["refused"].stdout
    assert found["refused"].returncode != 0
    assert f"{GPU_HOST}: the gateway mmon2 still routes requests to its scenes" in output, output[-3000:]
    assert f"playbooks/rotation.yml -l {GPU_HOST} -e vllm_gateway_rotation=drain" in output
    assert f"{GPU_HOST}: vllm_tune_time_budget: 1 s is less than one step of the sweep of realtime" in output
    assert f"{GPU_HOST}: vllm_tune_max_concurrency: the sweep's top concurrency {10**7}" in output
    assert "TASK [Take the host's run lock" not in output
    assert found["after_refusals"] == found["before"]
    assert not (REPORTS / "refused").exists()


def test_check_mode_checks_the_inputs_and_stops_before_any_change() -> None:
    """A preview (--check) passes the preflight, says it stops, and neither locks, restarts nor load-tests."""
    check = runs()["check"]
    assert check.returncode == 0, check.stdout[-3000:]
    assert "check mode stops here" in check.stdout
    assert "Load-test the scene" not in check.stdout
    assert runs()["after_check"] == runs()["before"]


def test_the_sweep_finds_a_knee_and_writes_the_report_picture_and_vars() -> None:
    """The deployed settings hold the lab's SLO at some concurrency: a winner, its report, a picture with a point
    per step, and the host's scene list with max-num-seqs at the knee."""
    assert runs()["tuned"].returncode == 0, runs()["tuned"].stdout[-4000:]
    result = report("tuned")
    deployed = next(c for c in result["candidates"] if c["name"] == "deployed")
    assert result["winner"] == "deployed" and deployed["knee"], result["message"]
    assert [s["concurrency"] for s in deployed["steps"]][:2] == [1, 2]
    base = REPORTS / "tuned" / GPU_HOST / "realtime"
    assert base.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = ElementTree.parse(base.with_suffix(".svg"))
    line = next(g for g in svg.iter("{http://www.w3.org/2000/svg}g") if g.get("id") == "goodput-deployed")
    assert len(list(line.iter("{http://www.w3.org/2000/svg}use"))) == len(deployed["steps"])
    assert "# Tuning of realtime on mmon1" in base.with_suffix(".md").read_text()
    # Each candidate's start and sweep are timed, within the scene's time budget (the tuner's default, 900 s).
    assert all(0 < c["seconds"] < 900 for c in result["candidates"]), result["candidates"]
    suggested = yaml.safe_load(Path(f"{base}.vars.yml").read_text())
    (scene,) = [s for s in suggested["vllm_scenes_list"] if s["name"] == "realtime"]
    assert scene["engine_args"]["max-num-seqs"] == deployed["knee"]["concurrency"]


def test_a_candidate_that_cannot_start_is_dropped_with_the_reason_and_the_run_goes_on() -> None:
    """Its record says it did not start; it has no steps; the report still has the deployed sweep."""
    toolong = next(c for c in report("tuned")["candidates"] if c["name"] == "toolong")
    assert toolong["dropped"].startswith("it did not start"), toolong
    assert toolong["steps"] == []


def test_an_impossible_slo_says_no_setting_meets_it_with_the_best_seen() -> None:
    """Not a crash: the run succeeds, the sweep stops after two breaking steps, and no vars are suggested; the scene,
    restarted just before, was waited for, so its first step's requests were answered (slowly, not refused)."""
    assert runs()["impossible"].returncode == 0, runs()["impossible"].stdout[-4000:]
    result = report("impossible")
    assert result["winner"] is None
    assert result["message"].startswith("no setting meets the SLO; the best seen: "), result["message"]
    assert result["candidates"][0]["stopped"] == "two steps in a row broke the SLO"
    first = result["candidates"][0]["steps"][0]  # the scene, restarted just before, answered every request
    assert (first["concurrency"], first["failed"]) == (1, 0) and first["completed"] > 0, first
    assert not (REPORTS / "impossible" / GPU_HOST / "realtime.vars.yml").exists()


def test_the_scene_is_back_on_its_deployed_config_serving_and_verified() -> None:
    """Same config digest as before the tuning; /health answers; the tuner's own verification of it passed."""
    found = runs()
    assert found["after_tuned"]["config"] == found["before"]["config"]
    assert found["after"]["config"] == found["before"]["config"]
    assert found["after_tuned"]["pid"] != found["before"]["pid"]  # the candidate's start restarted it
    assert scene_health(GPU_HOST) == 200
    verified = json.loads((REPORTS / "verify" / GPU_HOST / "realtime.json").read_text())
    assert verified["passed"], verified
    assert "TASK [Verify the tuned scenes on their deployed config]" in found["tuned"].stdout
