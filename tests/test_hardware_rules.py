"""Hardware-aware preflight rules: each one with a failing and a passing case, messages naming host, variable and fix."""

from typing import Any, Optional

import pytest

from ansible_collections.vllm.fleet.plugins.plugin_utils import hardware, planner
from ansible_collections.vllm.fleet.plugins.plugin_utils import scenes as scene_model

HOST = "gpu-a"
# The unit settings roles/vllm_scenes passes by default: a cpu scene's KV cache is 1 GiB unless the scene says.
UNIT = {"cache_dir": "/var/lib/vllm/cache", "unit_prefix": "vllm-scene-", "max_sequences": 4, "keep_alive_s": 3600,
        "cpu_kvcache_gib": 1, "env": {}}
MODELS = [{"name": "qwen", "repo": "Qwen/Qwen2.5-7B-Instruct-AWQ"}, {"name": "bf16", "repo": "Qwen/Qwen2.5-7B-Instruct"},
          {"name": "llama", "repo": "meta-llama/Llama-3.1-8B-Instruct"}]


def gpu(index: int = 0, profile: str = "rtx3090", **extra: Any) -> dict[str, Any]:
    """One GPU of the vllm_fleet_gpus fact."""
    cards = {"rtx3090": ("NVIDIA GeForce RTX 3090", 24576, "8.6"), "rtx4090": ("NVIDIA GeForce RTX 4090", 24564, "8.9"),
             "h200": ("NVIDIA H200", 143771, "9.0"), "t4": ("Tesla T4", 15360, "7.5")}
    name, memory, capability = cards[profile]
    return {"index": index, "name": name, "memory_total_mib": memory, "compute_capability": capability,
            "profile": profile if profile.startswith("rtx") else "generic", **extra}


def facts(*gpus: dict[str, Any], branch: Optional[int] = 580) -> dict[str, Any]:
    """A vllm_fleet_gpus fact with the given GPUs and driver branch."""
    return {"present": bool(gpus), "driver_branch": branch, "driver_version": f"{branch}.95.05" if branch else None,
            "gpus": list(gpus), "profile": gpus[0]["profile"] if gpus else "cpu"}


def scene(name: str = "realtime", gpus: Any = None, model: str = "qwen", env: Any = None,
          **engine_args: Any) -> dict[str, Any]:
    """A resolved scene with the realtime preset's engine arguments under the given ones."""
    args = {"gpu-memory-utilization": 0.90, "max-model-len": 4096, "max-num-seqs": 16}
    args.update({key.replace("_", "-"): value for key, value in engine_args.items()})
    return {"name": name, "model": model, "model_path": f"/var/lib/vllm/models/{model}", "gpus": [0] if gpus is None
            else gpus, "engine_args": args, "env": env or {}}


def check(scenes: list[dict[str, Any]], gpus_fact: Optional[dict[str, Any]] = None, flavour: str = "cuda",
          version: str = "0.33.0", target_branch: Optional[int] = None) -> dict[str, list[str]]:
    """Plan the scenes and run every rule, as playbooks/plan.yml does."""
    gpus_fact = facts(gpu()) if gpus_fact is None else gpus_fact
    planned = [{**one, "environment": scene_model.unit_environment(one, flavour, UNIT)} for one in scenes]
    plans = planner.plan_host(planned, HOST, gpus_fact, flavour, version, MODELS, {}, [])
    found = hardware.problems(HOST, scenes, plans, gpus_fact, flavour, version, target_branch)
    # Releases older than the pins have no argument table: the rules under test are the others.
    return {**found, "warnings": [m for m in found["warnings"] if "no argument table" not in m]}


def only(found: list[str], *needles: str) -> str:
    """Return the one message found, after checking it names the host and contains every needle."""
    assert len(found) == 1, found
    assert found[0].startswith(f"{HOST}: ")
    for needle in needles:
        assert needle in found[0], (needle, found[0])
    return found[0]


def test_the_seed_scenario_passes() -> None:
    """realtime on GPU 0 and batch on GPU 1 of a two-3090 host, AWQ, vLLM 0.33 on R580: nothing to say."""
    assert check([scene(), scene("batch", [1], gpu_memory_utilization=0.95, max_num_seqs=64)],
                 facts(gpu(0), gpu(1))) == {"errors": [], "warnings": []}


def test_plan_that_cannot_fit() -> None:
    """One full-length sequence of KV cache more than the budget leaves: refused, with the length that fits."""
    message = only(check([scene(model="llama", max_model_len=131072)])["errors"],
                   "vllm_scenes_list[name=realtime].engine_args.max_model_len", "16.0 GiB of KV cache",
                   "lower max_model_len to 46,816 or less", "raise gpu_memory_utilization (now 0.9)")
    assert "GPU 0 RTX 3090" in message
    assert check([scene(model="llama", max_model_len=32768)])["errors"] == []


def test_weights_alone_exceed_the_budget() -> None:
    """BF16 weights and the reserve above 0.60 of a 24 GB card leave no KV cache at all."""
    only(check([scene(model="bf16", gpu_memory_utilization=0.60)])["errors"],
         "engine_args.gpu_memory_utilization", "model bf16 does not fit", "serve a quantized (AWQ) model")
    assert check([scene(model="bf16", gpu_memory_utilization=0.90)])["errors"] == []


def test_cpu_kv_cache_too_small_for_one_sequence() -> None:
    """On the lab the KV cache is VLLM_CPU_KVCACHE_SPACE; a sequence longer than it holds is refused."""
    too_long = scene(model="qwen", max_model_len=32768, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    only(check([too_long], facts(), "cpu", "0.32.0")["errors"], "CPU KV cache", "raise vllm_scenes_cpu_kvcache_gib",
         "lower max_model_len to 18,688 or less")
    none = scene(env={"VLLM_CPU_KVCACHE_SPACE": "0"})
    assert "lower max_model_len" not in only(check([none], facts(), "cpu", "0.32.0")["errors"], "is 0.0 GiB")
    assert check([scene(max_model_len=16384)], facts(), "cpu", "0.32.0")["errors"] == []  # 1 GiB: 146 blocks of 128


def test_unplannable_scene_is_a_warning() -> None:
    """A model the planner cannot size skips the memory checks with a warning, not an error."""
    result = check([scene(model="unknown")])
    assert result["errors"] == []
    only(result["warnings"], "vllm_scenes_list[name=realtime]: no capacity plan", "vllm_fleet_planner_models")


def test_scenes_sharing_a_gpu() -> None:
    """0.90 + 0.95 of one card cannot both be free when the second engine starts; two cards or smaller shares can."""
    both = [scene(), scene("batch", [0], gpu_memory_utilization=0.95)]
    only(check(both)["errors"], "GPU 0 (NVIDIA GeForce RTX 3090, 23.69 GiB usable)", "realtime (0.9), batch (0.95)",
         "give each scene its own GPU", "add up to at most 0.95")
    assert check([scene(gpu_memory_utilization=0.45), scene("batch", [0], gpu_memory_utilization=0.45,
                                                            max_num_seqs=64)])["errors"] == []


def test_one_engine_asking_for_nearly_all_the_card() -> None:
    """0.99 of a 3090 plus the engine's CUDA context is more than the card: lower it to 0.97."""
    only(check([scene(gpu_memory_utilization=0.99)])["errors"],
         "lower vllm_scenes_list[name=realtime].engine_args.gpu_memory_utilization to at most 0.97")
    assert check([scene(gpu_memory_utilization=0.95)])["errors"] == []


def test_fp8_kv_cache_with_triton_attention_before_ada() -> None:
    """TRITON_ATTN refuses an FP8 KV cache below sm_89; the 4090 runs it."""
    fp8 = {"kv_cache_dtype": "fp8", "attention_backend": "TRITON_ATTN"}
    only(check([scene(**fp8)])["errors"], "engine_args.attention_backend", "sm_86", "drop attention_backend")
    assert check([scene(**fp8)], facts(gpu(profile="rtx4090"))) == {"errors": [], "warnings": []}


def test_fp8_kv_cache_on_ampere_is_storage_only() -> None:
    """Without a forced backend, FP8 KV on a 3090 runs from vLLM 0.12 (a warning) and fails before it (an error)."""
    result = check([scene(kv_cache_dtype="fp8")])
    assert result["errors"] == []
    only(result["warnings"], "engine_args.kv_cache_dtype", "storage-only with scale 1.0")
    only(check([scene(kv_cache_dtype="fp8")], version="0.10.2")["errors"], "vLLM 0.10.2 cannot run an FP8 KV cache",
         "pin vllm_version 0.12 or newer")


@pytest.mark.parametrize("attention_config", [{"flash_attn_version": 3}, '{"flash_attn_version": 3}'])
def test_flash_attention_3_only_on_hopper(attention_config: Any) -> None:
    """FA3 forced on an Ada card is refused; on an H200 (sm_90) it is fine."""
    only(check([scene(attention_config=attention_config)], facts(gpu(profile="rtx4090")))["errors"],
         "engine_args.attention_config", "FlashAttention 3 runs only on Hopper", "sm_89")
    assert check([scene(attention_config=attention_config)], facts(gpu(profile="h200")))["errors"] == []


def test_options_no_release_has() -> None:
    """The field report's --enable-flash-attn-3 and --dtype float8 do not exist in vLLM."""
    only(check([scene(enable_flash_attn_3=True)])["errors"], "engine_args.enable_flash_attn_3", "remove it")
    only(check([scene(dtype="float8")])["errors"], "engine_args.dtype", "float8 is not a dtype vLLM accepts")
    assert check([scene(dtype="float16")])["errors"] == []


@pytest.mark.parametrize(("option", "removed", "before"), [("swap_space", "0.18", "0.17.1"),
                                                           ("disable_log_requests", "0.17", "0.16.0")])
def test_options_the_pinned_release_removed(option: str, removed: str, before: str) -> None:
    """--swap-space (gone in 0.18) and --disable-log-requests (0.17) stop vLLM from starting on newer releases."""
    only(check([scene(**{option: 4})])["errors"], f"engine_args.{option}", f"removed in {removed}", "remove it")
    assert check([scene(**{option: 4})], version=before)["errors"] == []


def test_attention_backend_environment_variable_is_ignored() -> None:
    """VLLM_ATTENTION_BACKEND is gone since 0.15: a warning pointing at engine_args.attention_backend."""
    env = {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}
    only(check([scene(env=env)])["warnings"], "vllm_scenes_list[name=realtime].env.VLLM_ATTENTION_BACKEND",
         "set engine_args.attention_backend instead")
    assert check([scene(env=env)], version="0.14.1")["warnings"] == []


def test_disable_log_stats_removes_the_metrics() -> None:
    """Verification reads vllm:* metrics, which --disable-log-stats turns off."""
    only(check([scene(disable_log_stats=True)])["warnings"], "engine_args.disable_log_stats", "metrics")
    assert check([scene(disable_log_stats=False)])["warnings"] == []


def test_bfloat16_before_ampere() -> None:
    """A T4 (sm_75) has no bfloat16; a 3090 has."""
    only(check([scene(dtype="bfloat16")], facts(gpu(profile="t4")))["errors"], "engine_args.dtype",
         "bfloat16 needs sm_80", "set it to float16")
    assert check([scene(dtype="bfloat16")])["errors"] == []


def test_int8_kv_cache_warning() -> None:
    """INT8 KV cache collapsed accuracy in the field report (HellaSwag 80.5% -> 65.5%)."""
    only(check([scene(kv_cache_dtype="int8_per_token_head")])["warnings"], "engine_args.kv_cache_dtype",
         "HellaSwag 80.5% -> 65.5%")
    assert check([scene(kv_cache_dtype="auto")])["warnings"] == []


def test_speculative_decoding_on_one_24gb_card() -> None:
    """A draft model on one 24 GB card made things worse in the field report; on an H200 it is not flagged."""
    spec = {"speculative_config": {"model": "Qwen/Qwen2.5-0.5B-Instruct", "num_speculative_tokens": 4}}
    only(check([scene(**spec)])["warnings"], "engine_args.speculative_config", "acceptance 0.20", "TTFT p99 x25")
    assert check([scene(**spec)], facts(gpu(profile="h200")))["warnings"] == []


def test_awq_kernel_before_marlin_default() -> None:
    """Up to vLLM 0.22 quantization awq picked the slow kernel; from 0.24 it picks Marlin."""
    only(check([scene(quantization="awq")], version="0.22.0")["warnings"], "engine_args.quantization", "awq_marlin")
    assert check([scene(quantization="awq")], version="0.24.0")["warnings"] == []


@pytest.mark.parametrize(("version", "branch", "refused"), [
    ("0.33.0", 550, True), ("0.33.0", 580, False), ("0.20.0", 575, True),
    ("0.18.0", 550, False), ("0.18.0", 520, True), ("0.33.0", None, False),
])
def test_driver_branch_for_the_vllm_release(version: str, branch: Optional[int], refused: bool) -> None:
    """vLLM >= 0.20 wheels need R580, <= 0.18 R525; no driver loaded yet is the driver role's job, not an error."""
    errors = check([scene()], facts(gpu(), branch=branch), version=version)["errors"]
    if refused:
        message = only(errors, f"vllm_version {version} needs NVIDIA driver R", f"(R{branch})", "upgrade the driver")
        assert ("pin vllm_version 0.18 or older" in message) == (version != "0.18.0" and (branch or 0) >= 525)
    else:
        assert errors == []


def test_driver_role_branch_decides_when_it_runs() -> None:
    """An old loaded driver is fine when the driver role installs R580 this run; a role branch too old is refused."""
    assert check([scene()], facts(gpu(), branch=550), target_branch=580)["errors"] == []
    only(check([scene()], facts(gpu(), branch=None), target_branch=550)["errors"],
         "vllm_version 0.33.0 needs NVIDIA driver R580", "nvidia_driver_branch is 550", "set nvidia_driver_branch to 580")
    assert check([scene()], facts(gpu(), branch=550), version="0.18.0", target_branch=550)["errors"] == []


def test_gpu_index_the_host_lacks_reuses_the_scene_rule() -> None:
    """A scene on GPU 1 of a one-GPU host: the scenes module's message, under the host's name."""
    only(check([scene(gpus=[1])])["errors"], "vllm_scenes_list: scene 'realtime' asks for GPU [1] but the host has [0]")


def test_lab_hosts_skip_the_gpu_rules() -> None:
    """On the cpu flavour only the planner's and the release's checks run: shared GPU 0 and fp8 are no GPU matters."""
    lab = [scene(kv_cache_dtype="fp8", attention_backend="TRITON_ATTN"), scene("batch", [0], gpu_memory_utilization=0.95)]
    assert check(lab, facts(), "cpu", "0.32.0") == {"errors": [], "warnings": []}
    only(check([scene(swap_space=4)], facts(), "cpu", "0.32.0")["errors"], "engine_args.swap_space")


def test_cuda_host_without_a_visible_gpu_warns() -> None:
    """Before the driver is installed nothing can be planned: a warning per scene, no error."""
    result = check([scene()], facts(branch=None))
    assert result["errors"] == []
    only(result["warnings"], "no NVIDIA GPU is visible")


def test_a_version_that_is_not_one() -> None:
    """A malformed vllm_version is an error naming the variable."""
    assert hardware.problems(HOST, [], [], None, "cuda", "latest") == {
        "errors": [f"{HOST}: vllm_version 'latest' is not a version such as 0.33.0"], "warnings": []}


def test_max_model_len_above_the_models_own_limit() -> None:
    """Qwen2.5-7B takes 32,768 tokens: 65,536 is refused before vLLM would stop at start, naming the limit."""
    only(check([scene(max_model_len=65536)], facts(gpu(profile="h200")))["errors"],
         "vllm_scenes_list[name=realtime].engine_args.max_model_len", "65,536",
         "32,768 (max_position_embeddings", "lower max_model_len to 32,768 or less")
    assert check([scene(max_model_len=32768)], facts(gpu(profile="h200")))["errors"] == []


def test_rope_scaling_raises_the_models_limit() -> None:
    """A yarn factor of 4 on 32,768 original positions takes 131,072 tokens, as vLLM derives it; llama3's does not."""
    assert planner.derived_max_len({"max_position_embeddings": 32768, "rope_scaling": {
        "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}, "x") == 131072
    assert planner.derived_max_len({"max_position_embeddings": 131072, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0}}, "x") == 131072
    assert planner.derived_max_len({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2}},
                                   "x") == 8192


@pytest.mark.parametrize(("gpus", "size", "needles"), [
    ([0], 2, ("tensor_parallel_size 2", "lists 1 GPU ([0])", "set tensor_parallel_size to 1 or list 2 GPUs")),
    ([0, 1, 2], 3, ("28 attention heads", "does not divide", "tensor_parallel_size of 1, 2, 4 or 28")),
])
def test_tensor_parallel_size_must_match_the_gpus_and_the_heads(gpus: list[int], size: int,
                                                                needles: tuple[str, ...]) -> None:
    """TP=2 on one GPU, or a TP that does not divide the model's heads, is refused with the fix."""
    host = facts(*(gpu(i) for i in range(3)))
    only(check([scene(gpus=gpus, tensor_parallel_size=size)], host)["errors"],
         "vllm_scenes_list[name=realtime].engine_args.tensor_parallel_size", *needles)
    assert check([scene(gpus=[0, 1], tensor_parallel_size=2)], host)["errors"] == []


def test_tensor_parallel_across_different_cards() -> None:
    """A 3090 and a 4090 in one scene: refused, since each rank runs at the slower card's pace and smaller memory."""
    only(check([scene(gpus=[0, 1], tensor_parallel_size=2)], facts(gpu(0), gpu(1, "rtx4090")))["errors"],
         "vllm_scenes_list[name=realtime].gpus", "GPU 0 (NVIDIA GeForce RTX 3090)", "GPU 1 (NVIDIA GeForce RTX 4090)",
         "cards of one model")


def test_engine_arguments_are_checked_against_the_pinned_releases_table() -> None:
    """A misspelt argument is refused with the closest valid name; a release without a table says so once."""
    only(check([scene(max_num_seq=32)])["errors"], "engine_args.max_num_seq: vllm 0.33.0 has no such argument; "
         "did you mean max_num_seqs?")
    only(check([scene(enable_prefix_caching="yes")], facts(), "cpu", "0.32.0")["errors"],
         "engine_args.enable_prefix_caching: 'yes' is not true or false, which vllm-cpu 0.32.0 takes here")
    scenes, plans = [scene()], planner.plan_host([scene()], HOST, facts(gpu()), "cuda", "0.30.0", MODELS)
    only(hardware.problems(HOST, scenes, plans, facts(gpu()), "cuda", "0.30.0")["warnings"],
         "no argument table of vllm 0.30.0", "run tools/engine_arg_table.py")
