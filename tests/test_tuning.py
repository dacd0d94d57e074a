"""SLO-driven tuning's pure logic: the sweep's levels, each step's share within the SLO and goodput, the early stop,
the knee, the winner among candidates (and "no setting meets the SLO"), the report and the vars file."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO, load_as

import yaml

from ansible_collections.vllm.fleet.plugins.plugin_utils import tuning
from yamllint import linter
from yamllint.config import YamlLintConfig

runner = load_as("sweep", REPO / "roles/vllm_tune/files/sweep.py")


def bench(goodput: float, throughput: float = 10.0, output: float = 320.0, failed: int = 0,
          p99_tpot: float = 30.0) -> dict[str, float]:
    """Return a vllm bench serve result with these request goodput, throughputs and p99 TPOT."""
    return {"request_goodput": goodput, "request_throughput": throughput, "output_throughput": output,
            "completed": 64, "failed": failed, "p99_ttft_ms": 200.0, "median_tpot_ms": 20.0, "p99_tpot_ms": p99_tpot}


def sweep(*shares: float) -> list[dict[str, object]]:
    """Return steps at concurrency 1, 2, 4, ... with these shares within the SLO and output rising with it."""
    return [runner.step(bench(10 * share, output=100.0 * 2 ** n), 2 ** n) for n, share in enumerate(shares)]


def test_levels_double_up_to_twice_max_num_seqs() -> None:
    """1, 2, 4, ... and the top itself, even when it is no power of two."""
    assert tuning.levels(16) == [1, 2, 4, 8, 16, 32]
    assert tuning.levels(12) == [1, 2, 4, 8, 16, 24]
    assert tuning.levels(16, ceiling=6) == [1, 2, 4, 6]
    with pytest.raises(tuning.TuningError):
        tuning.levels(0)


def test_goodput_args_hold_requests_to_the_p99_targets() -> None:
    """A request is good within the scene's p99 TTFT and TPOT targets."""
    assert tuning.goodput_args({"p99_ttft_ms": 500, "p99_tpot_ms": 60.5}) == ["--goodput", "ttft:500", "tpot:60.5"]


def test_step_share_and_goodput() -> None:
    """Share = request goodput / request throughput; goodput = output tokens/s of the good share; a result without
    goodput is refused (the load test ran without --goodput)."""
    found = runner.step(bench(9.9, output=1000.0), 16)
    assert found["slo_share"] == pytest.approx(0.99) and found["goodput"] == pytest.approx(990.0)
    assert found["concurrency"] == 16 and found["p99_tpot_ms"] == 30.0
    with pytest.raises(runner.SweepError, match="--goodput"):
        runner.step({"request_throughput": 1.0}, 1)


def test_knee_is_the_highest_concurrency_within_the_slo_and_failures_break_it() -> None:
    """The knee is the last step at or above the share; a step with a failed request never holds the SLO."""
    steps = sweep(1.0, 1.0, 0.995, 0.97, 0.5)
    assert tuning.knee(steps, 0.99)["concurrency"] == 4
    assert tuning.knee(steps, 0.95)["concurrency"] == 8
    assert tuning.knee([runner.step(bench(10, failed=1), 1)], 0.5) is None


def test_the_host_sweep_and_the_verdict_hold_a_step_to_the_same_rule() -> None:
    """The sweep on the host (roles/vllm_tune/files/sweep.py, which imports nothing of the kit) stops on the same
    rule tuning.meets judges the steps by afterwards: no failure and at least the share within the SLO."""
    steps = [runner.step(bench(10 * share, failed=failed), 1) for share in (1.0, 0.99, 0.98, 0.5) for failed in (0, 1)]
    for share in (0.5, 0.98, 0.99, 1.0):
        assert [runner.meets(s, share) for s in steps] == [tuning.meets(s, share) for s in steps], share
    assert any(tuning.meets(s, 0.99) for s in steps) and not all(tuning.meets(s, 0.99) for s in steps)


def test_the_sweep_stops_after_two_breaking_steps_in_a_row() -> None:
    """One breaking step is noise; two in a row end the sweep."""
    assert not runner.stop_early(sweep(1.0, 0.9), 0.99)
    assert not runner.stop_early(sweep(0.9, 1.0), 0.99)
    assert runner.stop_early(sweep(1.0, 0.9, 0.8), 0.99)


@pytest.mark.parametrize("share", [0, -0.5, 1.01, "1.5", "most", True, None, float("nan")])
def test_a_share_outside_zero_to_one_is_refused(share: object) -> None:
    """The share must be a number in (0, 1], named with the variable and an example."""
    with pytest.raises(tuning.TuningError, match=r"vllm_tune_slo_share: .* \(0, 1\]"):
        tuning.check_share(share)


def test_a_share_given_as_an_extra_var_is_read_as_a_number() -> None:
    """-e vllm_tune_slo_share=0.95 arrives as text."""
    assert tuning.check_share("0.95") == 0.95
    assert tuning.check_share(1) == 1.0


def test_the_winner_has_the_highest_goodput_at_its_knee_and_the_rest_say_why_not() -> None:
    """A candidate that cannot start, or breaks the SLO at concurrency 1, is dropped with its reason."""
    result = tuning.verdict([
        {"name": "deployed", "engine_args": {}, "steps": sweep(1.0, 1.0, 0.9, 0.8)},
        {"name": "batched-1024", "engine_args": {"max-num-batched-tokens": 1024}, "steps": sweep(1.0, 1.0, 1.0, 0.5)},
        {"name": "fp8", "engine_args": {"kv-cache-dtype": "fp8"}, "error": "did not start: unsupported on this card"},
        {"name": "slow", "engine_args": {"max-num-seqs": 64}, "steps": sweep(0.5, 1.0, 1.0)}], 0.99)
    assert result["winner"] == "batched-1024"
    assert result["message"].startswith("batched-1024: 400.0 output tok/s within the SLO at concurrency 4")
    dropped = {c["name"]: c["dropped"] for c in result["candidates"]}
    assert dropped == {"deployed": None, "batched-1024": None, "fp8": "did not start: unsupported on this card",
                       "slow": "breaks the SLO at concurrency 1"}
    deployed = [{"name": "realtime", "api_key_var": "k", "engine_args": {"max-num-seqs": 16}}, {"name": "batch"}]
    assert tuning.suggested_vars(deployed, "realtime", result) == {"vllm_scenes_list": [
        {"name": "realtime", "api_key_var": "k", "engine_args": {"max-num-batched-tokens": 1024, "max-num-seqs": 4}},
        {"name": "batch"}]}


def test_the_suggested_max_num_seqs_is_the_knee_but_never_more_than_the_winner_ran_with() -> None:
    """On an H100 the preset (16 sequences) held the SLO up to 64 requests in flight, 48 of them queued: the vars keep
    16, not 64, as no sweep ran 64 sequences; a candidate's own max-num-seqs counts before the scene's."""
    preset = {"name": "deployed", "engine_args": {}, "steps": sweep(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5)}
    result = {**tuning.verdict([preset], 0.99), "engine_args": {"max_num_seqs": 16, "dtype": "float16"}}
    assert result["winner"] == "deployed" and result["candidates"][0]["knee"]["concurrency"] == 64
    (realtime,) = tuning.suggested_vars([{"name": "realtime"}], "realtime", result)["vllm_scenes_list"]
    assert realtime["engine_args"] == {"max-num-seqs": 16}
    seqs64 = {**preset, "name": "seqs64", "engine_args": {"max-num-seqs": 64}}
    result = {**tuning.verdict([seqs64], 0.99), "engine_args": {"max-num-seqs": 16}}
    (realtime,) = tuning.suggested_vars([{"name": "realtime"}], "realtime", result)["vllm_scenes_list"]
    assert realtime["engine_args"] == {"max-num-seqs": 64}
    narrow = {**preset, "steps": sweep(1.0, 1.0, 1.0, 0.5, 0.5)}
    result = {**tuning.verdict([narrow], 0.99), "engine_args": {"max-num-seqs": 16}}
    (realtime,) = tuning.suggested_vars([{"name": "realtime"}], "realtime", result)["vllm_scenes_list"]
    assert realtime["engine_args"] == {"max-num-seqs": 4}


def test_the_vars_file_is_the_suggestion_with_its_reason_and_passes_yamllint_defaults() -> None:
    """The file a user commits loads back to the suggested vars, and yamllint's default rules (80 columns, lists
    indented under their key) find nothing in it, however long the verdict."""
    suggested = {"vllm_scenes_list": [{"name": "realtime", "api_key_var": "vault_lab_realtime_api_key",
                                       "engine_args": {"max-num-seqs": 32, "max-num-batched-tokens": 2048}},
                                      {"name": "batch", "gpus": [0, 1]}]}
    message = ("deployed: 5263.5 output tok/s within the SLO at concurrency 32 (the sweep's top: it may hold more; "
               "raise vllm_tune_max_concurrency to look further)")
    text = tuning.vars_file(suggested, "mtnb1", "realtime", message)
    assert yaml.safe_load(text) == suggested
    assert " ".join(line[2:] for line in text.splitlines() if line.startswith("# ")).startswith(
        f"Suggested by playbooks/tune.yml for mtnb1's realtime: {message}. Commit it as host_vars/mtnb1/tuned.yml")
    assert [problem.desc for problem in linter.run(text, YamlLintConfig("extends: default"))] == []


def test_an_impossible_slo_names_the_best_step_seen_instead_of_failing() -> None:
    """With no knee anywhere the verdict says so, with the best goodput seen; there are no vars to suggest."""
    result = tuning.verdict([{"name": "deployed", "engine_args": {}, "steps": sweep(0.5, 0.6)}], 0.99)
    assert result["winner"] is None
    assert result["message"] == ("no setting meets the SLO; the best seen: 120.0 tok/s within it (60% of requests), "
                                 "candidate deployed at concurrency 2")
    assert tuning.suggested_vars([{"name": "realtime"}], "realtime", result) is None
    assert "no setting meets the SLO" in tuning.markdown("h1", "realtime", result)


def test_with_no_goodput_anywhere_the_best_seen_is_the_step_of_lowest_latency() -> None:
    """When every step has no request within the SLO, the best seen is the one that came nearest: lowest p99 TPOT."""
    steps = [runner.step(bench(0, output=100.0, p99_tpot=tpot), level)
             for level, tpot in ((1, 30.0), (2, 12.0), (4, 50.0))]
    result = tuning.verdict([{"name": "deployed", "engine_args": {}, "steps": steps}], 0.99)
    assert result["best_seen"]["concurrency"] == 2
    assert result["message"].endswith("candidate deployed at concurrency 2")


def test_markdown_lists_every_step() -> None:
    """The report has the verdict and one row per step of each candidate."""
    result = tuning.verdict([{"name": "deployed", "engine_args": {}, "steps": sweep(1.0, 1.0, 0.5)}], 0.99)
    text = tuning.markdown("h1", "realtime", result)
    assert text.startswith("# Tuning of realtime on h1\n\n**deployed: 200.0 output tok/s")
    assert [line.split(" | ")[0] for line in text.splitlines() if line[:3] in ("| 1", "| 2", "| 4")] == ["| 1", "| 2", "| 4"]
    assert "| 4 | 50% | 200.0 | 400.0 |" in text


def test_markdown_gives_each_candidates_time_where_the_run_measured_it() -> None:
    """A candidate's heading says how long its start and sweep took; a report without the figure (one merged from
    runs before it was kept) says nothing of it."""
    timed = {"name": "deployed", "engine_args": {}, "steps": sweep(1.0), "seconds": 83.46}
    assert "## deployed (as deployed): knee at concurrency 1; 83 s with its start" in tuning.markdown(
        "h1", "realtime", tuning.verdict([timed], 0.99))
    untimed = {k: v for k, v in timed.items() if k != "seconds"}
    assert " s with its start" not in tuning.markdown("h1", "realtime", tuning.verdict([untimed], 0.99))


@pytest.mark.parametrize("suffix", ["svg", "png"])
def test_the_picture_has_a_point_per_step_and_the_slo_line(tmp_path: object, suffix: str) -> None:
    """The SVG holds one marker per step on each candidate's goodput and TPOT lines, a ring at each knee and the SLO
    line; the PNG is a PNG."""
    import xml.etree.ElementTree as ElementTree
    from pathlib import Path

    from ansible_collections.vllm.fleet.plugins.plugin_utils import tuning_plot
    result = tuning.verdict([{"name": "deployed", "engine_args": {}, "steps": sweep(1.0, 1.0, 0.5)},
                             {"name": "other", "engine_args": {"max-num-seqs": 8}, "steps": sweep(1.0, 0.5, 0.5)}], 0.99)
    path = Path(str(tmp_path)) / f"realtime.{suffix}"
    tuning_plot.plot("h1", "realtime", result, 30.0, path)
    if suffix == "png":
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        return
    groups = {g.get("id"): g for g in ElementTree.parse(path).iter("{http://www.w3.org/2000/svg}g") if g.get("id")}
    markers = {gid: len(list(groups[gid].iter("{http://www.w3.org/2000/svg}use")))
               for gid in ("goodput-deployed", "tpot-deployed", "goodput-other", "tpot-other")}
    assert markers == {"goodput-deployed": 3, "tpot-deployed": 3, "goodput-other": 3, "tpot-other": 3}
    assert {"knee-deployed", "knee-other", "slo"} <= set(groups)


SETTINGS = {"share": 0.99, "mix": {"input_len": 512, "output_len": 128}, "candidates": [], "max_concurrency": 0,
            "budget": 900, "rounds": 4, "min_prompts": 8}
TARGETS = {"p99_ttft_ms": 1000.0, "p99_tpot_ms": 50.0}
REALTIME = {"name": "realtime", "engine_args": {"max-num-seqs": 16}}


def plan(kv_tokens: int | None = 100_000, **settings: object) -> dict[str, object]:
    """Return the realtime scene's sweep plan on h1 with these settings over SETTINGS."""
    return tuning.sweep_plan("h1", REALTIME, {**SETTINGS, **settings}, TARGETS, kv_tokens)


def test_a_plan_sweeps_up_to_twice_max_num_seqs_with_enough_requests_per_step() -> None:
    """Levels 1..32, rounds requests per request in flight (at least min_prompts), the deployed settings first."""
    found = plan()
    assert found["problems"] == []
    assert [(s["concurrency"], s["prompts"]) for s in found["sweep"]] == [(1, 8), (2, 8), (4, 16), (8, 32), (16, 64),
                                                                          (32, 128)]
    assert found["candidates"] == [{"name": "deployed", "engine_args": {}}]
    assert found["lengths"] == {"input_len": 512, "prefix_len": 0, "output_len": 128}
    assert found["goodput_args"] == ["--goodput", "ttft:1000", "tpot:50"]


def test_a_shared_prefix_is_part_of_the_input() -> None:
    """prefix_share 0.25 of 512 tokens in: 128 shared, 384 random."""
    assert tuning.bench_lengths({"input_len": 512, "output_len": 64, "prefix_share": 0.25}, "m") == {
        "input_len": 384, "prefix_len": 128, "output_len": 64}


@pytest.mark.parametrize("mix", [{"input_len": 0, "output_len": 8}, {"input_len": 8}, {"input_len": 8, "output_len": 8,
                                 "prefix_share": 1}, {"input_len": 8, "output_len": 8, "shared": 0.5}, "long"])
def test_a_mix_that_is_not_one_is_refused_with_host_and_variable(mix: object) -> None:
    """The problem names the host, vllm_tune_mixes.<scene> and the form it takes."""
    (problem,) = plan(mix=mix)["problems"]
    assert problem.startswith("h1: vllm_tune_mixes.realtime: ")


def test_a_sweep_beyond_the_planned_kv_cache_is_refused_with_the_concurrency_that_fits() -> None:
    """32 requests x 640 tokens need 20,480 KV tokens; a plan of 4,000 fits 6."""
    (problem,) = plan(kv_tokens=4000)["problems"]
    assert problem.startswith("h1: vllm_tune_max_concurrency: ")
    assert "needs 20480 KV tokens, but the plan gives realtime 4000" in problem
    assert "at most 6" in problem
    assert plan(kv_tokens=4000, max_concurrency=6)["problems"] == []
    assert plan(kv_tokens=None)["problems"] == []  # a scene the planner could not plan is not held to a guess


def test_a_budget_below_one_step_is_refused_with_the_least_that_is_enough() -> None:
    """8 requests at concurrency 1, each up to 1 s + 128 x 50 ms within the SLO: 59.2 s."""
    (problem,) = plan(budget=30)["problems"]
    assert problem.startswith("h1: vllm_tune_time_budget: 30 s is less than one step")
    assert "at least 60 s" in problem
    assert plan(budget="60")["problems"] == []


@pytest.mark.parametrize("share", [0, 1.5, "x"])
def test_a_bad_share_is_a_problem_of_the_host(share: object) -> None:
    """The plan carries the refusal instead of raising, so the preflight names the host."""
    (problem,) = plan(share=share)["problems"]
    assert problem.startswith("h1: vllm_tune_slo_share: ")


@pytest.mark.parametrize("listed", [{"name": "a"}, [{"name": "deployed", "engine_args": {"x": 1}}],
                                    [{"name": "Big One", "engine_args": {"x": 1}}], [{"name": "a", "engine_args": {}}],
                                    [{"name": "a", "engine_args": {"x": 1}}, {"name": "a", "engine_args": {"y": 1}}],
                                    [{"name": "a", "engine_args": {"x": 1}, "env": {}}]])
def test_bad_candidates_are_refused(listed: object) -> None:
    """A list of uniquely named candidates that each set engine arguments, and nothing else."""
    (problem,) = plan(candidates=listed)["problems"]
    assert problem.startswith("h1: vllm_tune_candidates.realtime")


def test_a_sweep_cut_off_or_failed_keeps_its_steps_and_names_the_concurrency_it_stopped_at() -> None:
    """timeout's 124 is the budget; another exit code names the runner's last error line; exit 0 keeps its reason."""
    done = {"steps": sweep(1.0, 1.0), "stopped": None}
    assert tuning.sweep_outcome(done, 124, "", [1, 2, 4]) == {
        "steps": done["steps"], "stopped": "the time budget ran out during concurrency 4"}
    assert tuning.sweep_outcome(None, 1, "ModuleNotFoundError: No module named 'vllm'", [1, 2])["stopped"] == (
        "the load test failed at concurrency 1: ModuleNotFoundError: No module named 'vllm'")
    assert tuning.sweep_outcome(None, 137, "", [1])["stopped"] == "the load test failed at concurrency 1: exit code 137"
    stopped = {**done, "stopped": "two steps in a row broke the SLO"}
    assert tuning.sweep_outcome(stopped, 0, "", [1, 2, 4])["stopped"] == "two steps in a row broke the SLO"


def test_the_runner_gets_each_steps_load_test_and_runs_on_the_hosts_release_with_the_scene_key() -> None:
    """One `vllm bench serve` argument list per level, its prompts and concurrency, a result file per candidate and
    level, the SLO's --goodput last; the runner's argv sources the key from the env file, never holds it."""
    scene = {**REALTIME, "host": "0.0.0.0", "port": 8000, "served_model_name": "m", "model_path": "/srv/m"}
    request = tuning.sweep_request(scene, "h1", "/var/lib/t", plan(), "seqs32", 600)
    assert request["share"] == 0.99 and request["budget"] == 600
    assert [s["concurrency"] for s in request["steps"]] == [1, 2, 4, 8, 16, 32]
    top = request["steps"][-1]["args"]
    assert {"--num-prompts=128", "--max-concurrency=32", "--result-filename=realtime-seqs32-32.json",
            "--base-url=http://127.0.0.1:8000"} <= set(top)
    assert top[-3:] == ["--goodput", "ttft:1000", "tpot:50"]
    argv = tuning.sweep_command(scene, "/opt/vllm/current", "/etc/vllm", "/var/lib/t/sweep.py", "p.json", "s.json")
    assert argv[3:] == ["/etc/vllm/realtime.env", "/opt/vllm/current/bin/python", "/var/lib/t/sweep.py", "p.json",
                        "s.json"]
    assert argv[:2] == ["sh", "-c"] and "VLLM_API_KEY" in argv[2]
    as_user = tuning.sweep_command(scene, "/o", "/e", "/r/sweep.py", "p.json", "s.json", ["setpriv", "--reuid=vllm", "--"])
    assert as_user[4:8] == ["setpriv", "--reuid=vllm", "--", "/o/bin/python"]  # the key read as root, the sweep not


def test_a_candidate_sets_its_engine_arguments_over_its_scene_only() -> None:
    """The other scenes and the scene's other keys stay as deployed."""
    scenes = [{"name": "realtime", "port": 8000, "engine_args": {"max-num-seqs": 16}}, {"name": "batch"}]
    assert tuning.candidate_scenes(scenes, "realtime", {"max-num-batched-tokens": 1024}) == [
        {"name": "realtime", "port": 8000, "engine_args": {"max-num-seqs": 16, "max-num-batched-tokens": 1024}},
        {"name": "batch"}]
    spelled = [{"name": "realtime", "engine_args": {"max_num_seqs": 16, "dtype": "half"}}]
    assert tuning.candidate_scenes(spelled, "realtime", {"max-num-seqs": 8}) == [
        {"name": "realtime", "engine_args": {"dtype": "half", "max-num-seqs": 8}}]


def test_the_report_holds_what_was_swept_and_the_verdict() -> None:
    """Host, scene, SLO, lengths and levels beside the winner and its message."""
    found = plan()
    result = tuning.report("h1", found, [{"name": "deployed", "engine_args": {}, "steps": sweep(1.0, 1.0)}])
    assert (result["host"], result["scene"], result["slo"], result["levels"]) == ("h1", "realtime", TARGETS,
                                                                                  [1, 2, 4, 8, 16, 32])
    assert result["winner"] == "deployed" and "sweep's top" not in result["message"]
    steps = [{"name": "deployed", "engine_args": {}, "steps": sweep(1.0, 1.0)}]
    at_top = tuning.report("h1", plan(max_concurrency=2), steps)
    assert at_top["message"].endswith("(the sweep's top: it may hold more; raise vllm_tune_max_concurrency to look further)")


def test_the_plot_tool_draws_a_report_file(tmp_path: object) -> None:
    """plugins/plugin_utils/tuning_plot.py REPORT PICTURES... (what playbooks/tune.yml runs) writes each picture."""
    import json
    from pathlib import Path

    from ansible_collections.vllm.fleet.plugins.plugin_utils import tuning_plot
    directory = Path(str(tmp_path))
    result = tuning.report("h1", plan(), [{"name": "deployed", "engine_args": {}, "steps": sweep(1.0, 0.5, 0.5)}])
    (directory / "r.json").write_text(json.dumps(result))
    tuning_plot.main([str(directory / "r.json"), str(directory / "r.png"), str(directory / "r.svg")])
    assert (directory / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 'id="goodput-deployed"' in (directory / "r.svg").read_text()


def test_candidates_are_refused_where_the_tuner_cannot_restart_the_scene() -> None:
    """Without systemd the tuner can sweep the deployed settings only."""
    listed = [{"name": "a", "engine_args": {"max-num-seqs": 8}}]
    (problem,) = plan(candidates=listed, restarts=False)["problems"]
    assert problem.startswith("h1: vllm_tune_candidates: the host's scenes do not run under systemd")
    assert plan(restarts=False)["problems"] == []


def test_a_candidate_with_more_sequences_is_swept_to_twice_its_own() -> None:
    """The levels reach twice the largest max_num_seqs among the deployed settings and the candidates."""
    listed = [{"name": "seqs64", "engine_args": {"max_num_seqs": 64}}]
    assert plan(candidates=listed)["levels"] == [1, 2, 4, 8, 16, 32, 64, 128]
    (problem,) = plan(candidates=[{"name": "x", "engine_args": {"max-num-seqs": "many"}}])["problems"]
    assert problem.startswith("h1: vllm_tune_candidates.realtime: max-num-seqs")


def test_separate_runs_are_judged_together_named_and_with_the_arguments_that_differ(tmp_path: object) -> None:
    """tools/tune_merge.py: each run's deployed sweep becomes a named candidate; its engine arguments are those that
    differ from the first run's; the best knee wins; the report, its table and its pictures are written."""
    import json
    import subprocess
    from pathlib import Path

    directory = Path(str(tmp_path))
    runs = {"preset": ({"max-num-seqs": 16, "dtype": "half"}, sweep(1.0, 1.0, 0.5)),
            "seqs64": ({"max-num-seqs": 64, "dtype": "half"}, sweep(1.0, 1.0, 1.0))}
    for name, (args, steps) in runs.items():
        found = tuning.sweep_plan("h1", {"name": "realtime", "engine_args": args}, SETTINGS, TARGETS, None)
        result = tuning.report("h1", found, [{"name": "deployed", "engine_args": {}, "steps": steps}])
        (directory / f"{name}.json").write_text(json.dumps(result))
    merged = tuning.merge([(n, json.loads((directory / f"{n}.json").read_text())) for n in runs])
    assert [(c["name"], c["engine_args"]) for c in merged["candidates"]] == [("preset", {}),
                                                                             ("seqs64", {"max-num-seqs": 64})]
    assert merged["winner"] == "seqs64" and merged["candidates"][1]["knee"]["concurrency"] == 4
    done = subprocess.run([sys.executable, str(REPO / "tools" / "tune_merge.py"), "--out", str(directory / "all"),
                           f"preset={directory / 'preset.json'}", f"seqs64={directory / 'seqs64.json'}"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("seqs64: ")
    assert (directory / "all.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## seqs64 (max-num-seqs=64): knee at concurrency 4" in (directory / "all.md").read_text()


def test_a_host_the_gateways_route_to_is_refused_with_the_drain_command() -> None:
    """The refusal names host, gateways and the commands that take it out of rotation and back."""
    (problem,) = tuning.routing_problems("gpu1", ["gw1", "gw2"])
    assert problem.startswith("gpu1: the gateway gw1, gw2 still routes requests to its scenes")
    assert "ansible-playbook playbooks/rotation.yml -l gpu1 -e vllm_gateway_rotation=drain" in problem
    assert tuning.routing_problems("gpu1", []) == []


def test_a_first_step_nobody_answered_is_told_apart_from_a_slow_one() -> None:
    """All requests failed (a scene not serving yet): the reason says so, not that the SLO broke."""
    silent = {**bench(0, throughput=0, output=0), "completed": 0, "failed": 8}
    unanswered = [runner.step(silent, 1)] + sweep(1.0, 1.0)[1:]
    result = tuning.verdict([{"name": "deployed", "engine_args": {}, "steps": unanswered}], 0.99)
    assert result["candidates"][0]["dropped"] == "no request was answered at concurrency 1 (8 failed)"
