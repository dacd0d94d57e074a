"""Unit tests of scene verification: SLO targets, the verdict on a vllm bench result, the decode floor, reports."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from conftest import REPO, fleet_filters

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards, verify

ROLE = REPO / "roles" / "vllm_verify"
FLOOR_3090 = 5.983  # ms: 5.6 GB of Qwen2.5-7B-Instruct-AWQ over a 3090's 936 GB/s


def bench(**changes: Any) -> dict[str, Any]:
    """A `vllm bench serve --save-result` JSON of a healthy RTX 3090 realtime scene (128 in / 32 out, 64 prompts)."""
    result: dict[str, Any] = {
        "date": "20261129-181500", "backend": "openai-chat", "model_id": "qwen2.5-7b",
        "tokenizer_id": "/var/lib/vllm/models/qwen", "num_prompts": 64, "request_rate": "inf", "burstiness": 1.0,
        "max_concurrency": 16, "duration": 4.91, "completed": 64, "failed": 0, "total_input_tokens": 8192,
        "total_output_tokens": 2048, "request_throughput": 13.03, "request_goodput": None,
        "output_throughput": 417.1, "total_token_throughput": 2085.5, "max_output_tokens_per_s": 2160.0,
        "max_concurrent_requests": 16,
        "mean_ttft_ms": 952.4, "median_ttft_ms": 987.3, "std_ttft_ms": 181.2, "p50_ttft_ms": 987.3,
        "p90_ttft_ms": 1011.8, "p99_ttft_ms": 1042.6,
        "mean_tpot_ms": 9.41, "median_tpot_ms": 7.52, "std_tpot_ms": 7.8, "p50_tpot_ms": 7.52,
        "p90_tpot_ms": 7.71, "p99_tpot_ms": 39.8,
        "mean_itl_ms": 9.4, "median_itl_ms": 7.4, "std_itl_ms": 60.1, "p50_itl_ms": 7.4, "p90_itl_ms": 7.7,
        "p99_itl_ms": 8.9,
        "mean_e2el_ms": 1244.0, "median_e2el_ms": 1221.6, "std_e2el_ms": 40.2, "p50_e2el_ms": 1221.6,
        "p90_e2el_ms": 1260.3, "p99_e2el_ms": 1301.7,
    }
    result.update(changes)
    return result


REALTIME_3090 = verify.targets_for("rtx3090", "realtime", {})
SCENE = {"name": "realtime", "preset": "realtime", "port": 8000, "served_model_name": "qwen2.5-7b"}
GOOD_CHECKS = [{"name": "GET /health", "passed": True, "detail": "answered 200"},
               {"name": "GET /v1/models lists qwen2.5-7b", "passed": True, "detail": "listed: qwen2.5-7b"}]


def test_a_healthy_result_passes() -> None:
    """A result inside every target passes with no failures."""
    assert verify.slo_verdict(bench(), REALTIME_3090) == {"passed": True, "failures": []}


def test_an_impossible_target_fails_naming_metric_value_and_target() -> None:
    """median_tpot_ms 0.001 cannot be met: the failure carries the metric, the value and the target."""
    targets = verify.targets_for("rtx3090", "realtime", {"median_tpot_ms": 0.001})
    verdict = verify.slo_verdict(bench(median_tpot_ms=5.1), targets)
    assert verdict["passed"] is False
    assert verdict["failures"] == [{"metric": "median_tpot_ms", "value": 5.1, "target": 0.001,
                                    "message": "median_tpot_ms 5.10 > target 0.001"}]


def test_failed_requests_fail() -> None:
    """One failed request is over max_failed 0."""
    verdict = verify.slo_verdict(bench(completed=63, failed=1), REALTIME_3090)
    assert not verdict["passed"]
    assert [(f["metric"], f["value"], f["target"], f["message"]) for f in verdict["failures"]] == [
        ("failed", 1, 0, "failed 1 > target 0")]


def test_throughput_below_the_minimum_fails() -> None:
    """output_throughput is a minimum: below it fails, at it passes."""
    verdict = verify.slo_verdict(bench(output_throughput=150.25), REALTIME_3090)
    assert [f["message"] for f in verdict["failures"]] == ["output_throughput 150.25 < target 200"]
    assert verify.slo_verdict(bench(output_throughput=200.0), REALTIME_3090)["passed"]


def test_latencies_are_maxima() -> None:
    """Each *_ms target fails when the result is above it and passes when equal."""
    for key, target in REALTIME_3090.items():
        if key.endswith("_ms"):
            assert verify.slo_verdict(bench(**{key: target}), REALTIME_3090)["passed"]
            (failure,) = verify.slo_verdict(bench(**{key: target * 1.5}), REALTIME_3090)["failures"]
            assert failure["metric"] == key


@pytest.mark.parametrize("value", [None, "n/a", math.nan, True])
def test_a_missing_or_non_numeric_metric_fails(value: Any) -> None:
    """A metric absent from the result, or not a number (NaN included), is a failure with value None."""
    result = bench(p99_tpot_ms=value)
    if value is None:
        del result["p99_tpot_ms"]
    (failure,) = verify.slo_verdict(result, REALTIME_3090)["failures"]
    assert (failure["metric"], failure["value"], failure["target"]) == ("p99_tpot_ms", None, 122)
    assert failure["message"].startswith("p99_tpot_ms ") and "target <= 122" in failure["message"]


def test_nothing_completed_fails() -> None:
    """A run where no request completed fails even if the latencies it reports look fine."""
    verdict = verify.slo_verdict(bench(completed=0), REALTIME_3090)
    assert not verdict["passed"]
    assert verdict["failures"][0]["metric"] == "completed"
    assert "no request of the load test completed" in verdict["failures"][0]["message"]


def test_a_preset_without_gates_is_refused_and_overrides_win() -> None:
    """A user preset without gates of its own is refused with the three ways to give it some (never realtime's by
    default); complete overrides are gates enough; overrides replace single targets."""
    with pytest.raises(verify.VerifyError, match=r"no SLO gates for preset 'nightly' .*slo: realtime or slo: batch"):
        verify.targets_for("rtx4090", "nightly", {})
    complete = {key: 1 for key in verify.TARGETS}
    assert verify.targets_for("rtx4090", "nightly", complete) == complete
    targets = verify.targets_for("cpu", "batch", {"median_tpot_ms": 12, "min_output_throughput": 5})
    assert targets == {**verify.DEFAULT_SLO["cpu"]["batch"], "median_tpot_ms": 12, "min_output_throughput": 5}
    assert verify.targets_for("cpu", "batch", None) == verify.DEFAULT_SLO["cpu"]["batch"]


def test_targets_come_from_the_given_profiles() -> None:
    """The role's own profile table replaces the built-in one."""
    own = {"a100": {"realtime": {**verify.DEFAULT_SLO["rtx3090"]["realtime"], "median_tpot_ms": 9}}}
    assert verify.targets_for("a100", "realtime", {}, own)["median_tpot_ms"] == 9
    with pytest.raises(verify.VerifyError, match=r"no SLO gates for preset 'batch' \(the table has \['realtime'\]\)"):
        verify.targets_for("a100", "batch", {}, own)
    with pytest.raises(verify.VerifyError, match=r"targets \['max_failed'\] are missing"):
        verify.targets_for("x", "realtime", {}, {"x": {"realtime": {k: 1 for k in verify.TARGETS if k != "max_failed"}}})


def test_a_scene_is_held_to_the_gates_its_own_definition_names() -> None:
    """A scene's targets come from the scene itself (its slo, else its preset) and the overrides of its name: a
    restored scene that the inventory's list no longer has gets its own gates, and overrides of other scenes change
    nothing; overrides that are not a mapping are refused."""
    restored = {"name": "batch", "preset": "batch", "slo": "batch", "port": 8001}
    overrides = {"realtime": {"median_tpot_ms": 12}}
    assert verify.scene_targets(restored, "cpu", overrides) == verify.DEFAULT_SLO["cpu"]["batch"]
    held = {"name": "realtime", "preset": "realtime", "slo": "batch"}
    assert verify.scene_targets(held, "cpu", overrides) == {**verify.DEFAULT_SLO["cpu"]["batch"], "median_tpot_ms": 12}
    recorded_before_slo = {"name": "chat", "preset": "realtime"}
    assert verify.scene_targets(recorded_before_slo, "cpu") == verify.DEFAULT_SLO["cpu"]["realtime"]
    with pytest.raises(verify.VerifyError, match="must map scene names to target overrides"):
        verify.scene_targets(restored, "cpu", ["realtime"])  # type: ignore[arg-type]
    filters = fleet_filters()
    assert filters["vllm.fleet.verify_scene_slo_targets"](restored, "cpu", overrides) == verify.DEFAULT_SLO["cpu"]["batch"]


@pytest.mark.parametrize(("call", "message"), [
    (lambda: verify.targets_for("rtx3080", "realtime", {}),
     r"unknown GPU profile 'rtx3080'.*\['a10', 'a100', .*'cpu', 'generic', .*'rtx3090', .*'rtx5090', .*\]"),
    (lambda: verify.targets_for("cpu", "realtime", {"median_tpot": 12}),
     r"unknown SLO targets \['median_tpot'\]; valid keys are \['median_ttft_ms', .*'min_output_throughput'\]"),
    (lambda: verify.targets_for("cpu", "realtime", {"median_tpot_ms": "fast"}), "must be non-negative numbers"),
    (lambda: verify.targets_for("cpu", "realtime", {"median_tpot_ms": -1}), "must be non-negative numbers"),
    (lambda: verify.slo_verdict(bench(), {"mean_tpot_ms": 5}), r"unknown SLO targets \['mean_tpot_ms'\]"),
])
def test_bad_targets_name_the_valid_choices(call: Any, message: str) -> None:
    """Unknown profiles, unknown target keys and non-numbers are refused with the valid choices."""
    with pytest.raises(verify.VerifyError, match=message):
        call()


def test_floor_percent_rates_tpot_against_the_floor() -> None:
    """The field report's 6.84 ms on a 3090 is ~114% of its 5.98 ms floor; missing figures give no rating."""
    assert verify.floor_percent(6.84, 5.983) == pytest.approx(114.3, abs=0.1)
    assert verify.floor_percent(5.983, 5.983) == pytest.approx(100)
    assert verify.floor_percent(None, 5.983) is None and verify.floor_percent(6.84, None) is None


def test_default_gates_cover_every_profile() -> None:
    """Each profile of the hardware registry, generic and the lab have realtime and batch gates; a card without
    measured gates gets the 3090's (scaled when it is slower, tests/test_cards.py)."""
    assert set(verify.DEFAULT_SLO) == {*cards.PROFILES, "generic", "cpu"}
    assert verify.DEFAULT_SLO["generic"] == verify.DEFAULT_SLO["rtx3090"] == verify.DEFAULT_SLO["rtx5090"]
    for presets in verify.DEFAULT_SLO.values():
        assert set(presets) == {"realtime", "batch"}
        for targets in presets.values():
            assert list(targets) == list(verify.TARGETS) and targets["max_failed"] == 0


# What docs/slo.md expects of a healthy card on the role's default load test; the defaults must let it pass.
EXPECTED = {
    ("rtx3090", "realtime"): (1024, 1024, 7.39, 40.42, 408.6), ("rtx3090", "batch"): (3072, 4096, 78.84, 111.88, 455.9),
    ("rtx4090", "realtime"): (455, 455, 6.86, 21.54, 766.7), ("rtx4090", "batch"): (1365, 1820, 41.23, 55.91, 935.9),
}


@pytest.mark.parametrize(("profile", "preset"), sorted(EXPECTED))
def test_gpu_defaults_are_the_expected_figures_with_the_stated_margins(profile: str, preset: str) -> None:
    """Each GPU target is 2x the expected median, 3x the expected p99, 50% of the expected throughput, rounded."""
    ttft50, ttft99, tpot50, tpot99, throughput = EXPECTED[(profile, preset)]
    targets = verify.DEFAULT_SLO[profile][preset]
    assert targets["median_ttft_ms"] == math.ceil(2 * ttft50 / 100) * 100
    assert targets["p99_ttft_ms"] == math.ceil(3 * ttft99 / 100) * 100
    assert targets["median_tpot_ms"] == math.ceil(2 * tpot50)
    assert targets["p99_tpot_ms"] == math.ceil(3 * tpot99)
    assert targets["min_output_throughput"] == math.floor(throughput / 2 / 10) * 10
    healthy = bench(median_ttft_ms=ttft50, p99_ttft_ms=ttft99, median_tpot_ms=tpot50, p99_tpot_ms=tpot99,
                    output_throughput=throughput)
    assert verify.slo_verdict(healthy, targets)["passed"]


# The worst of each figure over the AVX2 lab's load tests (docs/slo.md, 2026-12-01): TTFT p50/p99, TPOT p50/p99, tok/s.
WORST_LAB = {"realtime": (721, 2516, 28.3, 71.2, 316), "batch": (1141, 1403, 54.1, 57.3, 730)}


@pytest.mark.parametrize("preset", sorted(WORST_LAB))
def test_cpu_gates_leave_room_over_the_worst_lab_run(preset: str) -> None:
    """The lab's gates pass its worst measured run made 2.5x slower: they catch a crawling scene, not a noisy one."""
    ttft50, ttft99, tpot50, tpot99, throughput = WORST_LAB[preset]
    slower = bench(median_ttft_ms=2.5 * ttft50, p99_ttft_ms=2.5 * ttft99, median_tpot_ms=2.5 * tpot50,
                   p99_tpot_ms=2.5 * tpot99, output_throughput=throughput / 2.5)
    assert verify.slo_verdict(slower, verify.DEFAULT_SLO["cpu"][preset])["passed"]


def test_scene_report_of_a_scene_that_never_got_healthy() -> None:
    """A failed health check and no load test: the report fails, names the check first, and keeps bench null."""
    checks = [{"name": "GET /health", "passed": False, "detail": "no 200 within 600 s (last: 503 )"}]
    report = verify.scene_report("gpu1", SCENE, "rtx3090", checks, None, REALTIME_3090, FLOOR_3090)
    assert report["passed"] is False and report["bench"] is None
    assert (report["host"], report["scene"], report["served_model_name"], report["port"], report["gpu_profile"]) == (
        "gpu1", "realtime", "qwen2.5-7b", 8000, "rtx3090")
    assert report["slo"]["passed"] is False and report["slo"]["targets"] == REALTIME_3090
    assert report["reasons"] == ["GET /health: no 200 within 600 s (last: 503 )", "no load test: GET /health failed"]
    assert report["decode_floor_ms"] == FLOOR_3090
    assert report["tpot_percent_of_floor"] is None


def test_scene_report_of_a_healthy_scene_keeps_the_whole_bench() -> None:
    """All checks pass and the SLO holds: the report passes, keeps the bench JSON untouched, and rates the TPOT."""
    result = bench()
    report = verify.scene_report("gpu1", SCENE, "rtx3090", GOOD_CHECKS, result, REALTIME_3090, FLOOR_3090)
    assert report["passed"] is True and report["reasons"] == []
    assert report["bench"] == bench()
    assert report["checks"] == GOOD_CHECKS
    assert report["tpot_percent_of_floor"] == pytest.approx(7.52 / FLOOR_3090 * 100, rel=1e-3)


def test_scene_report_fails_on_the_slo_alone() -> None:
    """Checks pass but the load test misses a target: the report fails with the SLO message as its reason."""
    report = verify.scene_report("lab1", SCENE, "cpu", GOOD_CHECKS, bench(median_ttft_ms=4000.0),
                                 verify.targets_for("cpu", "realtime", {}), None)
    assert report["passed"] is False
    assert report["reasons"] == ["median_ttft_ms 4000.00 > target 2000"]
    assert report["decode_floor_ms"] is None and report["tpot_percent_of_floor"] is None


def test_summary_table_rows_are_sorted_and_counted() -> None:
    """One row per scene sorted by host then scene, dashes for missing numbers, then the pass count."""
    good = verify.scene_report("gpu2", SCENE, "rtx3090", GOOD_CHECKS, bench(), REALTIME_3090, FLOOR_3090)
    slow = verify.scene_report("gpu1", {**SCENE, "name": "batch", "port": 8001}, "rtx3090", GOOD_CHECKS,
                               bench(output_throughput=100.0), verify.targets_for("rtx3090", "batch", {}), FLOOR_3090)
    down = verify.scene_report("gpu1", SCENE, "rtx3090", [{"name": "GET /health", "passed": False, "detail": "a|b"}],
                               None, REALTIME_3090, FLOOR_3090)
    lines = verify.summary_markdown([good, down, slow]).splitlines()
    assert lines[0].startswith("| host | scene | GPU profile | TTFT p50/p99 ms | TPOT p50/p99 ms | tok/s |")
    rows = [line for line in lines[2:] if line.startswith("|")]
    assert [re.split(r" (?<!\\)\| ", row)[:2] for row in rows] == [["| gpu1", "batch"], ["| gpu1", "realtime"],
                                                                     ["| gpu2", "realtime"]]
    assert rows[0].endswith("| FAIL: output_throughput 100.00 < target 220 |")
    assert rows[1] == "| gpu1 | realtime | rtx3090 | – / – | – / – | – | – | FAIL: GET /health: a\\|b |"
    assert rows[2] == "| gpu2 | realtime | rtx3090 | 987 / 1043 | 7.52 / 39.80 | 417 | 126 | pass |"
    assert lines[-1] == "1 of 3 scenes passed"
    assert verify.summary_markdown([]).splitlines()[-1] == "0 of 0 scenes passed"


def test_adapter_turns_kit_errors_into_filter_errors() -> None:
    """The filters exist under their names and a VerifyError reaches Ansible as AnsibleFilterError."""
    from ansible.errors import AnsibleFilterError

    filters = fleet_filters()
    assert filters["vllm.fleet.verify_slo_targets"]("cpu", "batch", {}) == verify.DEFAULT_SLO["cpu"]["batch"]
    with pytest.raises(AnsibleFilterError, match="unknown GPU profile 'h300'"):
        filters["vllm.fleet.verify_slo_targets"]("h300", "realtime", {})


KEYED_SCENE = {"name": "realtime", "served_model_name": "qwen2.5-7b", "api_key_var": "vault_key"}
HEALTHY = {"changed": False, "msg": "1 scene ready in 0.01 s", "scenes": [{"name": "realtime", "seconds": 0.01}]}


def test_scene_checks_all_pass_on_a_good_scene() -> None:
    """A scene that lists its model, answers with text and usage, refuses a keyless call and exports metrics passes."""
    checks = verify.scene_checks(
        KEYED_SCENE, HEALTHY, {"json": {"data": [{"id": "qwen2.5-7b"}]}},
        {"status": 200, "json": {"choices": [{"message": {"content": "Hello"}}], "usage": {"completion_tokens": 2}}},
        {"status": 401}, {"content": "vllm:num_requests_running 0\\nvllm:kv_cache_usage_perc 0\\n"})
    assert [c["passed"] for c in checks] == [True] * 5


def test_scene_checks_name_each_failure() -> None:
    """Wrong model, empty answer, open endpoint and missing metrics each fail with what was seen."""
    checks = verify.scene_checks(KEYED_SCENE, HEALTHY, {"json": {"data": [{"id": "other"}]}},
                                 {"status": 200, "json": {"choices": [{"message": {"content": " "}}]}},
                                 {"status": 200}, {"content": "# no vllm series"})
    assert [c["passed"] for c in checks] == [True, False, False, False, False]
    assert checks[1]["detail"] == "listed: other" and checks[3]["detail"] == "status 200"


def test_one_request_proves_a_model_answers_at_its_scene_and_at_the_gateway() -> None:
    """The scene's check and the gateway's call send what proof_request returns (a greedy chat completion of the
    model, bounded), and neither task writes a path or a body of its own."""
    proof = verify.proof_request("qwen2.5-7b", 4)
    assert proof["path"] == "/v1/chat/completions"
    assert proof["body"]["model"] == "qwen2.5-7b" and proof["body"]["max_tokens"] == 4
    assert proof["body"]["temperature"] == 0 and proof["body"]["messages"][0]["role"] == "user"
    assert verify.proof_request("m")["body"]["max_tokens"] == 8
    assert fleet_filters()["vllm.fleet.verify_proof_request"] is verify.proof_request
    for tasks in ("roles/vllm_verify/tasks/scene.yml", "roles/vllm_gateway/tasks/verify.yml"):
        text = (REPO / tasks).read_text()
        assert "_proof.path" in text and "_proof.body" in text and "/v1/chat/completions" not in text, tasks
    assert "vllm.fleet.verify_proof_request" in (REPO / "roles/vllm_verify/vars/main.yml").read_text()
    assert "vllm.fleet.verify_proof_request" in (REPO / "roles/vllm_gateway/tasks/verify.yml").read_text()


def test_scene_checks_stop_at_a_dead_scene() -> None:
    """A scene whose unit is down, or that never answered /health, has one failed check with the wait's reason."""
    down = {"failed": True, "scenes": [], "msg": "scene 'realtime' (vllm-scene-realtime.service) crashed 0 s into the "
            "wait: the unit is not running (inactive/dead) [ActiveState=inactive SubState=dead]; journal: boom"}
    checks = verify.scene_checks(KEYED_SCENE, down, {}, {}, {}, {})
    assert checks == [{"name": "GET /health", "passed": False, "detail": down["msg"]}]
    assert verify.scene_checks(KEYED_SCENE, {}, {}, {}, {}, {})[0]["detail"] == "not waited for"


def test_the_load_test_reads_the_key_from_the_scene_env_file_never_from_its_command_line() -> None:
    """The argv starts with the wrapper that sources the root-only env file; no key, the host's own release's vllm,
    the scene's loopback URL for a wildcard listener, and a shared prefix only where one is asked for."""
    scene = {"name": "realtime", "host": "0.0.0.0", "port": 8000, "served_model_name": "m", "model_path": "/srv/m"}
    load = {"input_len": 128, "output_len": 32, "prompts": 64, "concurrency": 16, "warmups": 2}
    argv = verify.bench_command(scene, "/opt/vllm/current", "/etc/vllm", "h1", "/var/lib/v", "realtime.json", load)
    assert argv[:4] == ["sh", "-c", 'set -a; . "$0"; OPENAI_API_KEY="${VLLM_API_KEY-}"; exec "$@"',
                        "/etc/vllm/realtime.env"]
    assert argv[4:7] == ["/opt/vllm/current/bin/vllm", "bench", "serve"]
    assert "--base-url=http://127.0.0.1:8000" in argv and "--max-concurrency=16" in argv
    assert not any(a.startswith("--random-prefix-len") for a in argv)
    as_user = verify.bench_command(scene, "/o", "/e", "h1", "/r", "f.json", load, ["setpriv", "--reuid=vllm", "--"])
    assert as_user[4:8] == ["setpriv", "--reuid=vllm", "--", "/o/bin/vllm"]  # the key read as root, the bench not
    with_prefix = verify.bench_command(scene, "/o", "/e", "h1", "/r", "f.json",
                                       {**load, "prefix_len": 64, "extra": ["--goodput", "ttft:9", "tpot:2"]})
    assert "--random-prefix-len=64" in with_prefix and with_prefix[-3:] == ["--goodput", "ttft:9", "tpot:2"]


def test_the_checks_use_the_key_the_scene_runs_with() -> None:
    """The key comes from the scene's environment file as written (a restored scene's may be older than the
    inventory's); a file without one gives none."""
    text = "# Ansible managed\nVLLM_API_KEY=restored-key-0123456789abcdef0123456789\n"
    assert verify.env_file_key(text) == "restored-key-0123456789abcdef0123456789"
    assert verify.env_file_key("# Ansible managed\n") == ""
