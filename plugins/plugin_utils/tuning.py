"""SLO-driven tuning, as pure functions: a scene's concurrency sweep, each step's share of requests within the SLO and
its goodput, the knee, the winning candidate of engine arguments, and the report and vars file a user commits."""

from __future__ import annotations

import json
import math
import re
import textwrap
from typing import Any

import yaml

from .errors import FleetError
from .scenes import dash
from .verify import bench_args, with_scene_key

DEFAULT_SHARE = 0.99
# The candidate that runs the scene as deployed; the user's candidates are compared with it.
DEPLOYED = "deployed"
CANDIDATE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")


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


def meets(sweep_step: dict[str, Any], share: float) -> bool:
    """Return whether a step held the SLO for at least `share` of its requests, none failing (the host's sweep stops
    on the same rule: tests/test_tuning.py holds the two together)."""
    return sweep_step["failed"] == 0 and sweep_step["slo_share"] >= share


def knee(steps: list[dict[str, Any]], share: float) -> dict[str, Any] | None:
    """Return the knee: the step of highest concurrency that meets the SLO (None when none does)."""
    held = [s for s in steps if meets(s, share)]
    return max(held, key=lambda s: s["concurrency"]) if held else None


def closeness(sweep_step: dict[str, Any]) -> tuple[float, float, float, float]:
    """Return how near a step came to the SLO, for ranking: goodput, then share within it, then the lowest p99s."""
    slowest = math.inf
    return (sweep_step["goodput"], sweep_step["slo_share"], -float(sweep_step.get("p99_tpot_ms") or slowest),
            -float(sweep_step.get("p99_ttft_ms") or slowest))


def check_share(share: Any) -> float:
    """Return the SLO share as a float (an extra var's text too), or refuse one outside (0, 1]."""
    try:
        value = float(share) if not isinstance(share, bool) else math.nan
    except (TypeError, ValueError):
        value = math.nan
    if not 0 < value <= 1:
        raise TuningError(f"vllm_tune_slo_share: {share!r} must be a number in (0, 1], e.g. 0.99 (99% of requests "
                          "within the SLO)")
    return value


def first_step_failure(first: dict[str, Any]) -> str:
    """Return why a candidate whose first step broke the SLO is dropped: no answer at all, or answers too slow."""
    if first["failed"] and not first["completed"]:
        return f"no request was answered at concurrency {first['concurrency']} ({first['failed']} failed)"
    return f"breaks the SLO at concurrency {first['concurrency']}"


def verdict(candidates: list[dict[str, Any]], share: float) -> dict[str, Any]:
    """Return the candidates' verdict: each with its knee (or why it was dropped), and the winner, the candidate
    whose knee has the highest goodput; with no knee anywhere, "no setting meets the SLO" and the best step seen."""
    judged, best_step = [], None
    for candidate in candidates:
        steps = candidate.get("steps") or []
        found = None if candidate.get("error") else knee(steps, share)
        dropped = candidate.get("error") or (None if found else "no step met the SLO")
        if steps and not candidate.get("error") and not meets(steps[0], share):
            dropped = first_step_failure(steps[0])
        judged.append({**candidate, "knee": found, "dropped": dropped})
        for seen in steps:
            if best_step is None or closeness(seen) > closeness(best_step):
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


def tested_seqs(result: dict[str, Any], candidate: dict[str, Any]) -> int | None:
    """Return the max_num_seqs a candidate ran with: its own, else the scene's as deployed (None when neither says)."""
    for args in (candidate.get("engine_args") or {}, result.get("engine_args") or {}):
        found = [value for key, value in args.items() if dash(key) == "max-num-seqs"]
        if found:
            return int(found[0])
    return None


def suggested_vars(scenes: list[dict[str, Any]], scene: str, result: dict[str, Any]) -> dict[str, Any] | None:
    """Return the host's vllm_scenes_list with the winner's engine arguments set over the scene's and max_num_seqs at
    its knee, never above what it ran with (a knee beyond it held the SLO with requests queued for a sequence, not
    with more sequences), for the user to commit as the host's vars (None without a winner)."""
    winner = next((c for c in result["candidates"] if c["name"] == result["winner"]), None)
    if winner is None:
        return None
    seqs = winner["knee"]["concurrency"]
    ran = tested_seqs(result, winner)
    settings = {**winner.get("engine_args", {}), "max-num-seqs": min(seqs, ran) if ran else seqs}
    return {"vllm_scenes_list": candidate_scenes(scenes, scene, settings)}


class _ListIndentingDumper(yaml.SafeDumper):
    """PyYAML's safe dumper, indenting a list under its key as yamllint's default indentation rule wants."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        """Indent every block list, a mapping's value too."""
        super().increase_indent(flow, False)


def vars_file(suggested: dict[str, Any], host: str, scene: str, message: str) -> str:
    """Return the suggested vars file a user commits: why and how as comments, then the variables, yamllint clean."""
    notes = [f"Suggested by playbooks/tune.yml for {host}'s {scene}: {message}.",
             f"Commit it as host_vars/{host}/tuned.yml (it sets the host's vllm_scenes_list) and roll it out."]
    comments = [f"# {line}" for note in notes for line in textwrap.wrap(note, 76, break_on_hyphens=False)]
    # JSON first: Ansible hands the filter its own str and dict subclasses, which the safe dumper refuses.
    body = yaml.dump(json.loads(json.dumps(suggested)), Dumper=_ListIndentingDumper, sort_keys=False, width=76)
    return "\n".join(["---", *comments, body])


def markdown(host: str, scene: str, result: dict[str, Any]) -> str:
    """Return the report of one scene's tuning as Markdown: the verdict, then each candidate's sweep."""
    lines = [f"# Tuning of {scene} on {host}", "", f"**{result['message']}** (SLO share {result['share']:.0%}).", ""]
    for candidate in result["candidates"]:
        args = ", ".join(f"{k}={v}" for k, v in sorted((candidate.get("engine_args") or {}).items())) or "as deployed"
        state = f"dropped: {candidate['dropped']}" if candidate["dropped"] else (
            f"knee at concurrency {candidate['knee']['concurrency']}")
        state += f"; the sweep stopped: {candidate['stopped']}" if candidate.get("stopped") else ""
        state += f"; {candidate['seconds']:.0f} s with its start" if candidate.get("seconds") is not None else ""
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


def bench_lengths(mix: Any, where: str) -> dict[str, int]:
    """Return `vllm bench serve`'s random lengths for a prompt mix: input_len tokens, prefix_share of them a prefix
    every request shares, and output_len; refuse a mix that is not one."""
    if not isinstance(mix, dict) or set(mix) - {"input_len", "output_len", "prefix_share"}:
        raise TuningError(f"{where}: {mix!r} must be a mapping of input_len, output_len and optionally prefix_share, "
                          "e.g. {input_len: 512, output_len: 128, prefix_share: 0.5}")
    sizes = [mix.get("input_len"), mix.get("output_len")]
    share = mix.get("prefix_share", 0)
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes) or isinstance(share, bool) \
            or not isinstance(share, (int, float)) or not 0 <= share < 1:
        raise TuningError(f"{where}: input_len and output_len must be whole numbers of tokens >= 1 and prefix_share a "
                          f"number in [0, 1), not {mix!r}")
    prefix = round(sizes[0] * share)
    return {"input_len": sizes[0] - prefix, "prefix_len": prefix, "output_len": sizes[1]}


def check_candidates(scene: str, listed: Any) -> list[dict[str, Any]]:
    """Return a scene's candidates, the deployed settings first, each user candidate checked: a unique name and the
    engine arguments it sets over the scene's."""
    where = f"vllm_tune_candidates.{scene}"
    if not isinstance(listed, list):
        raise TuningError(f"{where}: {listed!r} must be a list of {{name, engine_args}}, e.g. "
                          "[{name: seqs32, engine_args: {max-num-seqs: 32}}]")
    found = [{"name": DEPLOYED, "engine_args": {}}]
    for index, candidate in enumerate(listed):
        name = candidate.get("name") if isinstance(candidate, dict) else None
        args = candidate.get("engine_args") if isinstance(candidate, dict) else None
        if not isinstance(name, str) or not CANDIDATE_NAME.match(name) or name in [c["name"] for c in found]:
            raise TuningError(f"{where}[{index}].name: {name!r} must be a new name of lowercase letters, digits, _ and "
                              f"- (not {DEPLOYED!r}, which the scene as deployed takes)")
        if not isinstance(args, dict) or not args or set(candidate) - {"name", "engine_args"}:
            raise TuningError(f"{where}[{index}]: give engine_args, the vLLM engine arguments it sets over the "
                              "scene's, e.g. {max-num-batched-tokens: 1024}, and nothing else")
        found.append({"name": name, "engine_args": dict(args)})
    return found


def most_seqs(scene: dict[str, Any], candidates: list[dict[str, Any]]) -> int:
    """Return the largest max_num_seqs of the scene and its candidates: every candidate is swept as far (twice it)."""
    found = [scene["engine_args"].get("max-num-seqs", 16)]
    found += [v for c in candidates for k, v in c["engine_args"].items() if dash(k) == "max-num-seqs"]
    if any(isinstance(n, bool) or not isinstance(n, int) for n in found):
        raise TuningError(f"vllm_tune_candidates.{scene['name']}: max-num-seqs {found!r} must be whole numbers")
    return max(found)


def step_seconds(targets: dict[str, float], lengths: dict[str, int], prompts: int) -> float:
    """Return how long the sweep's first step (concurrency 1) takes when each request just meets the SLO."""
    return prompts * (targets["p99_ttft_ms"] + lengths["output_len"] * targets["p99_tpot_ms"]) / 1000


def sweep_plan(host: str, scene: dict[str, Any], settings: dict[str, Any], targets: dict[str, float],
               kv_tokens: int | None) -> dict[str, Any]:
    """Return one scene's tuning plan: its levels, bench lengths, prompts per level, --goodput arguments, candidates
    and budget, with `problems`, each naming host, variable and fix (the plan is not run while there are any)."""
    name, problems = scene["name"], []
    plan: dict[str, Any] = {"scene": name, "targets": targets, "budget": int(settings["budget"]), "levels": [],
                            "sweep": [], "candidates": [], "goodput_args": goodput_args(targets),
                            "engine_args": dict(scene.get("engine_args") or {})}
    try:
        plan["share"] = check_share(settings["share"])
        plan["lengths"] = bench_lengths(settings["mix"], f"vllm_tune_mixes.{name}")
        plan["candidates"] = check_candidates(name, settings["candidates"])
        ceiling = int(settings["max_concurrency"]) or None
        plan["levels"] = levels(most_seqs(scene, plan["candidates"]), ceiling)
    except TuningError as error:
        return {**plan, "problems": [f"{host}: {error}"]}
    if len(plan["candidates"]) > 1 and not settings.get("restarts", True):
        problems.append(f"{host}: vllm_tune_candidates: the host's scenes do not run under systemd "
                        "(vllm_fleet_service_manager none), so the tuner cannot start a candidate: leave "
                        f"vllm_tune_candidates.{name} empty to tune the deployed settings, and start each candidate "
                        "yourself")
    plan["sweep"] = [{"concurrency": level, "prompts": max(int(settings["min_prompts"]), level * int(settings["rounds"]))}
                     for level in plan["levels"]]
    per_request = sum(plan["lengths"].values())
    if kv_tokens and plan["levels"][-1] * per_request > kv_tokens:
        problems.append(f"{host}: vllm_tune_max_concurrency: the sweep's top concurrency {plan['levels'][-1]} x "
                        f"{per_request} tokens a request holds needs {plan['levels'][-1] * per_request} KV tokens, but "
                        f"the plan gives {name} {kv_tokens}: set vllm_tune_max_concurrency to at most "
                        f"{kv_tokens // per_request}, or shorten vllm_tune_mixes.{name}")
    first = step_seconds(targets, plan["lengths"], plan["sweep"][0]["prompts"])
    if plan["budget"] < first:
        problems.append(f"{host}: vllm_tune_time_budget: {plan['budget']} s is less than one step of the sweep of "
                        f"{name} ({plan['sweep'][0]['prompts']} requests at concurrency 1 take up to "
                        f"{first:.0f} s within its SLO): give it at least {math.ceil(first)} s")
    return {**plan, "problems": problems}


def routing_problems(host: str, gateways: list[str]) -> list[str]:
    """Return the refusal of a host that these gateways still route requests to (none when the list is empty)."""
    if not gateways:
        return []
    return [f"{host}: the gateway {', '.join(gateways)} still routes requests to its scenes, whose load would share the "
            f"card with the sweep and skew every figure: drain the host first with ansible-playbook "
            f"playbooks/rotation.yml -l {host} -e vllm_gateway_rotation=drain, and put it back with "
            "-e vllm_gateway_rotation=ready once the tuning is done"]


def sweep_request(scene: dict[str, Any], host: str, result_dir: str, plan: dict[str, Any], candidate: str,
                  budget: int) -> dict[str, Any]:
    """Return what a host's sweep runner (roles/vllm_tune/files/sweep.py) runs for a candidate: the SLO share, the seconds
    left and each step's `vllm bench serve` arguments, its result saved as <scene>-<candidate>-<concurrency>.json."""
    steps = [{"concurrency": s["concurrency"],
              "args": bench_args(scene, host, result_dir, f"{plan['scene']}-{candidate}-{s['concurrency']}.json",
                                 {**plan["lengths"], "prompts": s["prompts"], "concurrency": s["concurrency"],
                                  "extra": plan["goodput_args"]})} for s in plan["sweep"]]
    return {"share": plan["share"], "budget": budget, "steps": steps}


def sweep_command(scene: dict[str, Any], release_link: str, config_dir: str, runner: str, request: str,
                  out: str, run_as: list[str] | None = None) -> list[str]:
    """Return the argv of the sweep runner on the host's own release's Python, with the scene's key, run_as (a
    command prefix: the service user) once the key is read as root."""
    return with_scene_key(scene, config_dir, [*(run_as or []), f"{release_link}/bin/python", runner, request, out])


def sweep_outcome(swept: dict[str, Any] | None, rc: int, error: str, levels: list[int]) -> dict[str, Any]:
    """Return a candidate's steps and why its sweep stopped (or None), from the runner's record and exit status
    (124: cut off by the time budget; error: the last line it wrote to stderr)."""
    swept = swept or {}
    steps = list(swept.get("steps") or [])
    pending = levels[min(len(steps), len(levels) - 1)]
    if rc == 124:
        return {"steps": steps, "stopped": f"the time budget ran out during concurrency {pending}"}
    if rc != 0:
        return {"steps": steps, "stopped": f"the load test failed at concurrency {pending}: {error or f'exit code {rc}'}"}
    return {"steps": steps, "stopped": swept.get("stopped")}


def candidate_scenes(scenes: list[dict[str, Any]], scene: str, engine_args: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the scene list with one scene's engine arguments set over its own (a candidate's settings), an argument
    the scene spells the other way (max_num_seqs, max-num-seqs) replaced, not doubled."""
    def merged(own: dict[str, Any]) -> dict[str, Any]:
        """Return own engine arguments with the candidate's over them."""
        replaced = {dash(key) for key in engine_args}
        return {**{k: v for k, v in own.items() if dash(k) not in replaced}, **engine_args}
    return [{**s, "engine_args": merged(s.get("engine_args") or {})} if s.get("name") == scene else s for s in scenes]


def report(host: str, plan: dict[str, Any], candidates: list[dict[str, Any]]) -> dict[str, Any]:
    """Return a scene's tuning report: what was swept and how, and the verdict on its candidates."""
    judged = verdict(candidates, plan["share"])
    winner = next((c for c in judged["candidates"] if c["name"] == judged["winner"]), None)
    if winner and winner["knee"]["concurrency"] == plan["levels"][-1]:
        judged["message"] += " (the sweep's top: it may hold more; raise vllm_tune_max_concurrency to look further)"
    return {"host": host, "scene": plan["scene"], "slo": plan["targets"], "lengths": plan["lengths"],
            "levels": plan["levels"], "engine_args": plan["engine_args"], **judged}


def merge(named: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Return one report judging together the deployed settings of separate tuning runs of a scene (a host without
    systemd, each candidate started by hand), each named, its engine arguments those differing from the first's."""
    base = named[0][1]
    candidates = [{**report["candidates"][0], "name": name,
                   "engine_args": {k: v for k, v in report["engine_args"].items() if base["engine_args"].get(k) != v}}
                  for name, report in named]
    kept = {key: base[key] for key in ("host", "scene", "slo", "lengths", "levels", "engine_args")}
    return {**kept, **verdict(candidates, base["share"])}
