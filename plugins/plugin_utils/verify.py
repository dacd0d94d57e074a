"""Verification of served scenes: SLO targets per card, the verdict on a `vllm bench serve` result, reports."""

from __future__ import annotations

import math
import re
from typing import Any

from .errors import FleetError
from . import cards
from .scenes import local_url

# SLO gates per profile and scene preset, for the role's default load test (random 128 in / 32 out, 64 prompts,
# concurrency = the scene's max_num_seqs), from the hardware registry (cards.py). They catch a broken deployment; they
# are not benchmarks. vllm_verify_slo_profiles may replace the whole table.
DEFAULT_SLO: dict[str, dict[str, dict[str, float]]] = cards.slo_table()

# Target key -> (key of the vllm bench JSON it judges, "max" or "min").
TARGETS: dict[str, tuple[str, str]] = {
    "median_ttft_ms": ("median_ttft_ms", "max"),
    "p99_ttft_ms": ("p99_ttft_ms", "max"),
    "median_tpot_ms": ("median_tpot_ms", "max"),
    "p99_tpot_ms": ("p99_tpot_ms", "max"),
    "max_failed": ("failed", "max"),
    "min_output_throughput": ("output_throughput", "min"),
}
MISSING = "–"


class VerifyError(FleetError):
    """SLO targets or a load-test result the kit cannot judge; the message names the variable and the fix."""


def _number(value: Any) -> float | None:
    """Return value as a finite float, or None when it is absent, not a number, NaN or infinite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _show(value: Any) -> str:
    """Format a measured value: integers as they are, others with two decimals, or 3 significant digits below 1."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) >= 1 or value == 0 else f"{value:.3g}"
    return repr(value)


def _show_target(value: float) -> str:
    """Format a target without trailing zeros (15, 0.001, 2126.5)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _check_targets(targets: dict[str, Any], where: str) -> None:
    """Refuse target names the kit does not know and values that are not non-negative numbers."""
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        raise VerifyError(f"{where}: unknown SLO targets {unknown}; valid keys are {list(TARGETS)}")
    bad = {k: v for k, v in targets.items() if _number(v) is None or v < 0}
    if bad:
        raise VerifyError(f"{where}: SLO targets {bad} must be non-negative numbers")


def targets_for(profile: str, preset: str, overrides: dict[str, Any] | None = None,
                profiles: dict[str, dict[str, dict[str, float]]] | None = None) -> dict[str, float]:
    """Return a scene's SLO targets: its profile's preset targets under the overrides (a preset without any is refused)."""
    table = profiles or DEFAULT_SLO
    if profile not in table:
        raise VerifyError(f"vllm_verify_gpu_profile: unknown GPU profile {profile!r}; "
                          f"set it to one of {sorted(table)}")
    if not isinstance(overrides or {}, dict):
        raise VerifyError(f"vllm_verify_slo_overrides: {overrides!r} must map target names to numbers, "
                          "e.g. {median_tpot_ms: 12}")
    presets = table[profile]
    base = presets.get(preset) or {}
    if not isinstance(base, dict) or (not base and not set(TARGETS) <= set(overrides or {})):
        raise VerifyError(f"vllm_verify_slo_profiles[{profile}]: no SLO gates for preset {preset!r} (the table has "
                          f"{sorted(p for p in presets if presets[p])}): give the preset or scene slo: realtime or "
                          f"slo: batch (the gates it is held to), add {profile}.{preset} to vllm_verify_slo_profiles "
                          f"(the whole table, docs/slo.md), or set all of {list(TARGETS)} in the scene's "
                          "vllm_verify_slo_overrides")
    _check_targets(base, f"vllm_verify_slo_profiles[{profile}][{preset}]")
    missing = [k for k in TARGETS if k not in base]
    if base and missing:
        raise VerifyError(f"vllm_verify_slo_profiles[{profile}]: targets {missing} are missing; "
                          f"each preset sets all of {list(TARGETS)}")
    _check_targets(overrides or {}, "vllm_verify_slo_overrides")
    merged = {**base, **(overrides or {})}
    return {k: merged[k] for k in TARGETS}


def scene_targets(scene: dict[str, Any], profile: str, overrides: dict[str, Any] | None = None,
                  profiles: dict[str, dict[str, dict[str, float]]] | None = None) -> dict[str, float]:
    """Return a scene's SLO targets from its own definition (its slo, else its preset) and the overrides of its name."""
    if not isinstance(overrides or {}, dict):
        raise VerifyError(f"vllm_verify_slo_overrides: {overrides!r} must map scene names to target overrides, "
                          "e.g. {realtime: {median_tpot_ms: 12}}")
    return targets_for(profile, scene.get("slo") or scene.get("preset") or scene["name"],
                       (overrides or {}).get(scene["name"]), profiles)


def slo_verdict(bench: dict[str, Any], targets: dict[str, float]) -> dict[str, Any]:
    """Judge a `vllm bench serve --save-result` JSON against SLO targets; list every target it misses."""
    _check_targets(targets, "SLO targets")
    failures: list[dict[str, Any]] = []
    completed = bench.get("completed")
    if _number(completed) is None or completed < 1:
        shown = "missing from the load-test result" if completed is None else _show(completed)
        failures.append({"metric": "completed", "value": completed, "target": 1,
                         "message": f"completed {shown} < target 1: no request of the load test completed"})
    for key in TARGETS:
        if key not in targets:
            continue
        metric, direction = TARGETS[key]
        target = targets[key]
        raw = bench.get(metric)
        value = _number(raw)
        sign = "<=" if direction == "max" else ">="
        if value is None:
            what = "missing from the load-test result" if raw is None else f"is {raw!r}, not a number"
            failures.append({"metric": metric, "value": None, "target": target,
                             "message": f"{metric} {what} (target {sign} {_show_target(target)})"})
        elif (direction == "max" and value > target) or (direction == "min" and value < target):
            failures.append({"metric": metric, "value": raw, "target": target,
                             "message": f"{metric} {_show(raw)} {'>' if direction == 'max' else '<'} "
                                        f"target {_show_target(target)}"})
    return {"passed": not failures, "failures": failures}


def floor_percent(median_tpot_ms: float | None, floor_ms: float | None) -> float | None:
    """Return measured median TPOT as a percentage of the decode floor (100 = at the hardware limit)."""
    tpot, floor = _number(median_tpot_ms), _number(floor_ms)
    if tpot is None or floor is None or floor <= 0:
        return None
    return tpot / floor * 100


def _check(name: str, passed: bool, detail: str) -> dict[str, Any]:
    """Return one check result."""
    return {"name": name, "passed": passed, "detail": detail}


def proof_request(model: str, max_tokens: int = 8) -> dict[str, Any]:
    """Return the request that proves a served model answers, as the scene's own check and the gateway's send it: its
    path and JSON body (a greedy chat completion; scene_checks judges its answer)."""
    return {"path": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "temperature": 0,
                     "max_tokens": max_tokens}}


def scene_checks(scene: dict[str, Any], ready: dict[str, Any], models: dict[str, Any], chat: dict[str, Any],
                 no_key: dict[str, Any], metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """Judge a scene's API from vllm.fleet.scene_ready's result and the uri results of /v1/models, the proof request
    (proof_request), a keyless call and /metrics."""
    if ready.get("failed") or not ready.get("scenes"):
        # The module's one line: a unit down or crashed (its state and the journal's error), or the wait's timeout.
        return [_check("GET /health", False, str(ready.get("msg") or "not waited for"))]
    served = [m.get("id") for m in (models.get("json") or {}).get("data", [])]
    answer = chat.get("json") or {}
    text = ((answer.get("choices") or [{}])[0].get("message") or {}).get("content") or ""
    tokens = (answer.get("usage") or {}).get("completion_tokens") or 0
    series = sorted(set(re.findall(r"(?m)^vllm:[a-z_]+", metrics.get("content") or "")))
    checks = [
        _check("GET /health", True, "answered 200"),
        _check(f"GET /v1/models lists {scene['served_model_name']}", scene["served_model_name"] in served,
               f"listed: {', '.join(map(str, served)) or 'nothing'}"),
        _check("chat completion returns text and usage", bool(text.strip()) and tokens > 0,
               f"status {chat.get('status')}, {tokens} tokens: {text[:60]!r}"),
    ]
    if scene.get("api_key_var"):
        checks.append(_check("request without the API key gets 401", no_key.get("status") == 401,
                             f"status {no_key.get('status')}"))
    checks.append(_check("GET /metrics exposes vllm:* series", bool(series), f"{len(series)} vllm:* series"))
    return checks


def _check_reason(check: dict[str, Any]) -> str:
    """Return the human-readable reason of a failed check."""
    return f"{check['name']}: {check['detail']}" if check["detail"] else str(check["name"])


def scene_report(host: str, scene: dict[str, Any], profile: str, checks: list[dict[str, Any]],
                 bench: dict[str, Any] | None, targets: dict[str, float], floor: float | None) -> dict[str, Any]:
    """Build one scene's report: its checks, the SLO verdict on its load test, its planned decode floor, why it failed."""
    listed = []
    for check in checks:
        if not isinstance(check, dict) or "name" not in check:
            raise VerifyError(f"{host} scene {scene.get('name')!r}: check {check!r} needs a name and passed")
        listed.append({"name": check["name"], "passed": check.get("passed") is True,
                       "detail": str(check.get("detail") or "")})
    failed = [c for c in listed if not c["passed"]]
    if bench is None:
        cause = f"{failed[0]['name']} failed" if failed else "it did not run or left no result"
        slo = {"targets": targets, "passed": False,
               "failures": [{"metric": "load test", "value": None, "target": None,
                             "message": f"no load test: {cause}"}]}
    else:
        slo = {"targets": targets, **slo_verdict(bench, targets)}
    return {
        "host": host,
        "scene": scene.get("name"),
        "served_model_name": scene.get("served_model_name"),
        "port": scene.get("port"),
        "gpu_profile": profile,
        "checks": listed,
        "slo": slo,
        "bench": bench,
        "decode_floor_ms": floor,
        "tpot_percent_of_floor": floor_percent((bench or {}).get("median_tpot_ms"), floor),
        "passed": not failed and slo["passed"],
        "reasons": [_check_reason(c) for c in failed] + [f["message"] for f in slo["failures"]],
    }


def verdict_record(report: dict[str, Any], scene: dict[str, Any], checked_at: float) -> dict[str, Any]:
    """Return what a host keeps of a scene's verification for its metrics: verdict, time, SLO targets, max_num_seqs."""
    return {"scene": report.get("scene"), "passed": report.get("passed") is True, "checked_at": float(checked_at),
            "targets": dict((report.get("slo") or {}).get("targets") or {}),
            "max_num_seqs": (scene.get("engine_args") or {}).get("max-num-seqs")}


def _cell(text: Any) -> str:
    """Make text safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _pair(bench: dict[str, Any], first: str, second: str, digits: int) -> str:
    """Format two bench figures as 'a / b', with a dash for each one missing."""
    return " / ".join(MISSING if (v := _number(bench.get(k))) is None else f"{v:.{digits}f}" for k in (first, second))


def summary_markdown(reports: list[dict[str, Any]]) -> str:
    """Render scene reports as a Markdown table sorted by host and scene, then how many scenes passed."""
    lines = ["| host | scene | GPU profile | TTFT p50/p99 ms | TPOT p50/p99 ms | tok/s | % of decode floor | verdict |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    ordered = sorted(reports, key=lambda r: (str(r.get("host")), str(r.get("scene"))))
    for report in ordered:
        bench = report.get("bench") or {}
        throughput = _number(bench.get("output_throughput"))
        percent = _number(report.get("tpot_percent_of_floor"))
        reasons = report.get("reasons") or []
        verdict = "pass" if report.get("passed") else ("FAIL: " + reasons[0] if reasons else "FAIL")
        lines.append("| " + " | ".join(_cell(c) for c in (
            report.get("host"), report.get("scene"), report.get("gpu_profile"),
            _pair(bench, "median_ttft_ms", "p99_ttft_ms", 0), _pair(bench, "median_tpot_ms", "p99_tpot_ms", 2),
            MISSING if throughput is None else f"{throughput:.0f}", MISSING if percent is None else f"{percent:.0f}",
            verdict)) + " |")
    passed = sum(1 for r in reports if r.get("passed"))
    return "\n".join(lines) + f"\n\n{passed} of {len(reports)} scenes passed\n"


# Loads the scene's key from its root-only env file into the benchmark's environment: never on a command line.
_WITH_SCENE_KEY = 'set -a; . "$0"; OPENAI_API_KEY="${VLLM_API_KEY-}"; exec "$@"'


def env_file_key(text: str) -> str:
    """Return the VLLM_API_KEY a scene's environment file gives it ("" when none): the key the scene runs with."""
    for line in text.splitlines():
        if line.startswith("VLLM_API_KEY="):
            return line.split("=", 1)[1].strip()
    return ""


def bench_args(scene: dict[str, Any], host: str, result_dir: str, result_file: str, load: dict[str, Any]) -> list[str]:
    """Return the arguments of `vllm bench serve` against a scene: random prompts of load's lengths (input_len,
    output_len, optional prefix_len shared by all) at its concurrency, saved as JSON, then load's extra ones."""
    args = ["--backend=openai-chat", "--endpoint=/v1/chat/completions",
            f"--base-url={local_url(scene['host'], scene['port'])}", f"--model={scene['served_model_name']}",
            f"--tokenizer={scene['model_path']}", "--dataset-name=random",
            f"--random-input-len={load['input_len']}", f"--random-output-len={load['output_len']}",
            f"--num-prompts={load['prompts']}", f"--max-concurrency={load['concurrency']}", "--request-rate=inf",
            f"--num-warmups={load.get('warmups', 0)}", "--ignore-eos", "--percentile-metrics=ttft,tpot,itl,e2el",
            "--metric-percentiles=50,90,99", "--save-result", f"--result-dir={result_dir}",
            f"--result-filename={result_file}", f"--metadata=host={host}", f"--metadata=scene={scene['name']}"]
    if load.get("prefix_len"):
        args.append(f"--random-prefix-len={load['prefix_len']}")
    return [*args, *load.get("extra", [])]


def with_scene_key(scene: dict[str, Any], config_dir: str, argv: list[str]) -> list[str]:
    """Return argv run with the scene's key in its environment, read from the scene's root-only env file."""
    return ["sh", "-c", _WITH_SCENE_KEY, f"{config_dir}/{scene['name']}.env", *argv]


def bench_command(scene: dict[str, Any], release_link: str, config_dir: str, host: str, result_dir: str,
                  result_file: str, load: dict[str, Any], run_as: list[str] | None = None) -> list[str]:
    """Return the argv of a `vllm bench serve` run of the host's own release against a scene (bench_args), run_as
    (a command prefix: the service user) once the key is read as root."""
    return with_scene_key(scene, config_dir, [*(run_as or []), f"{release_link}/bin/vllm", "bench", "serve",
                                              *bench_args(scene, host, result_dir, result_file, load)])
