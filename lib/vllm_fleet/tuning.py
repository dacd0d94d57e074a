"""SLO-driven tuning, as pure functions: a scene's concurrency sweep, each step's share of requests within the SLO and
its goodput, the knee, the winning candidate of engine arguments, and the report and vars file a user commits."""

from __future__ import annotations

import math
from typing import Any

from . import FleetError

DEFAULT_SHARE = 0.99
# What `vllm bench serve` reports, kept per step: latency percentiles (ms) and throughputs.
STEP_FIGURES = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms",
                "output_throughput", "total_token_throughput", "request_throughput")


class TuningError(FleetError):
    """A tuning input the kit refuses; the message names the variable and the fix."""


def levels(max_num_seqs: int, ceiling: int | None = None) -> list[int]:
    """Return the sweep's concurrencies: 1, 2, 4, ... up to twice max_num_seqs (or ceiling), that last one included."""
    top = ceiling if ceiling is not None else 2 * max_num_seqs
    if top < 1:
        raise TuningError(f"max_num_seqs {max_num_seqs!r}: the sweep needs a concurrency of at least 1")
    found, level = [], 1
    while level < top:
        found.append(level)
        level *= 2
    return [*found, top]


def goodput_args(targets: dict[str, float]) -> list[str]:
    """Return `vllm bench serve`'s --goodput arguments for a scene's p99 SLO targets (a request is good when its TTFT
    and TPOT are within them)."""
    return ["--goodput", f"ttft:{targets['p99_ttft_ms']:g}", f"tpot:{targets['p99_tpot_ms']:g}"]


def step(bench: dict[str, Any], concurrency: int) -> dict[str, Any]:
    """Return one sweep step from a `vllm bench serve --goodput` result: its figures, the share of requests within
    the SLO and the goodput (output tokens/s of those requests)."""
    throughput = float(bench.get("request_throughput") or 0)
    good = bench.get("request_goodput")
    if good is None or not math.isfinite(float(good)):
        raise TuningError("the load test reported no request_goodput: run vllm bench serve with --goodput")
    share = min(1.0, float(good) / throughput) if throughput else 0.0
    figures = {name: bench.get(name) for name in STEP_FIGURES}
    failed = int(bench.get("failed") or 0)
    return {"concurrency": concurrency, **figures, "completed": int(bench.get("completed") or 0), "failed": failed,
            "slo_share": share, "goodput": float(bench.get("output_throughput") or 0) * share}


def meets(sweep_step: dict[str, Any], share: float) -> bool:
    """Return whether a step held the SLO for at least `share` of its requests, none failing."""
    return sweep_step["failed"] == 0 and sweep_step["slo_share"] >= share


def stop_early(steps: list[dict[str, Any]], share: float) -> bool:
    """Return whether the sweep should stop: its last two steps both broke the SLO."""
    return len(steps) >= 2 and not meets(steps[-1], share) and not meets(steps[-2], share)


def knee(steps: list[dict[str, Any]], share: float) -> dict[str, Any] | None:
    """Return the knee: the step of highest concurrency that meets the SLO (None when none does)."""
    held = [s for s in steps if meets(s, share)]
    return max(held, key=lambda s: s["concurrency"]) if held else None


def check_share(share: Any) -> float:
    """Return the SLO share as a float, or refuse one outside (0, 1]."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise TuningError(f"vllm_tune_slo_share: {share!r} must be a number in (0, 1], e.g. 0.99 (99% of requests "
                          "within the SLO)")
    return float(share)


def verdict(candidates: list[dict[str, Any]], share: float) -> dict[str, Any]:
    """Return the candidates' verdict: each with its knee (or why it was dropped), and the winner, the candidate
    whose knee has the highest goodput; with no knee anywhere, "no setting meets the SLO" and the best step seen."""
    judged, best_step = [], None
    for candidate in candidates:
        steps = candidate.get("steps") or []
        found = None if candidate.get("error") else knee(steps, share)
        dropped = candidate.get("error") or (None if found else "no step met the SLO")
        if steps and not candidate.get("error") and not meets(steps[0], share):
            dropped = f"breaks the SLO at concurrency {steps[0]['concurrency']}"
        judged.append({**candidate, "knee": found, "dropped": dropped})
        for seen in steps:
            if best_step is None or seen["goodput"] > best_step["goodput"]:
                best_step = {**seen, "candidate": candidate["name"]}
    kept = [c for c in judged if c["knee"] and not c["dropped"]]
    winner = max(kept, key=lambda c: c["knee"]["goodput"]) if kept else None
    if winner:
        message = (f"{winner['name']}: {winner['knee']['goodput']:.1f} output tok/s within the SLO at concurrency "
                   f"{winner['knee']['concurrency']}")
    else:
        message = "no setting meets the SLO"
        if best_step:
            message += (f"; the best seen: {best_step['goodput']:.1f} tok/s within it ({best_step['slo_share']:.0%} "
                        f"of requests), candidate {best_step['candidate']} at concurrency {best_step['concurrency']}")
    return {"share": share, "candidates": judged, "winner": winner["name"] if winner else None, "message": message,
            "best_seen": best_step}


def suggested_vars(scene: str, result: dict[str, Any]) -> dict[str, Any] | None:
    """Return what a user may merge into the scene's entry of vllm_scenes_list for the winner: its engine arguments
    and max_num_seqs at the knee (None without a winner)."""
    winner = next((c for c in result["candidates"] if c["name"] == result["winner"]), None)
    if winner is None:
        return None
    return {"scene": scene, "engine_args": {**winner.get("engine_args", {}),
                                            "max-num-seqs": winner["knee"]["concurrency"]}}


def markdown(host: str, scene: str, result: dict[str, Any]) -> str:
    """Return the report of one scene's tuning as Markdown: the verdict, then each candidate's sweep."""
    lines = [f"# Tuning of {scene} on {host}", "", f"**{result['message']}** (SLO share {result['share']:.0%}).", ""]
    for candidate in result["candidates"]:
        args = ", ".join(f"{k}={v}" for k, v in sorted((candidate.get("engine_args") or {}).items())) or "as deployed"
        state = f"dropped: {candidate['dropped']}" if candidate["dropped"] else (
            f"knee at concurrency {candidate['knee']['concurrency']}")
        lines += [f"## {candidate['name']} ({args}): {state}", ""]
        if candidate.get("steps"):
            lines += ["| concurrency | within SLO | goodput tok/s | output tok/s | TTFT p99 ms | TPOT p50 / p99 ms |",
                      "|---:|---:|---:|---:|---:|---:|"]
            lines += [f"| {s['concurrency']} | {s['slo_share']:.0%} | {s['goodput']:.1f} | "
                      f"{float(s['output_throughput'] or 0):.1f} | {float(s['p99_ttft_ms'] or 0):.1f} | "
                      f"{float(s['median_tpot_ms'] or 0):.1f} / {float(s['p99_tpot_ms'] or 0):.1f} |"
                      for s in candidate["steps"]]
            lines.append("")
    return "\n".join(lines)
