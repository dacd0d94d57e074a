"""The capacity planner against hand-computed cases, the field reports and a real H200 run (both in docs/sources.md)."""

import base64
import json
import math
from typing import Any

import pytest

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards, planner

GiB, MiB = planner.GiB, planner.MiB
QWEN_AWQ = "Qwen/Qwen2.5-7B-Instruct-AWQ"
QWEN_BF16 = "Qwen/Qwen2.5-7B-Instruct"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
RTX3090 = {"index": 0, "name": "NVIDIA GeForce RTX 3090", "memory_total_mib": 24576, "compute_capability": "8.6",
           "profile": "rtx3090"}
RTX4090 = {"index": 0, "name": "NVIDIA GeForce RTX 4090", "memory_total_mib": 24564, "compute_capability": "8.9",
           "profile": "rtx4090"}
H200 = {"index": 0, "name": "NVIDIA H200", "memory_total_mib": 143771, "compute_capability": "9.0", "profile": "generic"}
# The lab's tiny model (tools/make_tiny_awq.py), as its config.json says.
TINY = {"num_hidden_layers": 2, "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 4096, "max_position_embeddings": 4096, "tie_word_embeddings": False,
        "torch_dtype": "float16", "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 32}}


def arch(repo: str) -> planner.Architecture:
    """Size a catalog model."""
    return planner.architecture(planner.MODEL_CATALOG[repo], repo)


def scene(name: str = "realtime", gpus: Any = None, **engine_args: Any) -> dict[str, Any]:
    """A resolved scene with the realtime preset's engine arguments under the given ones."""
    args = {"gpu-memory-utilization": 0.90, "max-model-len": 4096, "max-num-seqs": 16}
    args.update({key.replace("_", "-"): value for key, value in engine_args.items()})
    return {"name": name, "model": "qwen", "model_path": "/var/lib/vllm/models/qwen", "gpus": gpus or [0],
            "engine_args": args, "env": {}}


def plan(repo: str, gpu: dict[str, Any], **engine_args: Any) -> dict[str, Any]:
    """Plan one scene of a catalog model on one card with vLLM 0.33."""
    return planner.plan_scene(scene(**engine_args), arch(repo), [planner.card(gpu, "test")], "0.33.0")


def test_kv_bytes_per_token_of_the_known_models() -> None:
    """2 (K and V) x layers x KV heads x head dim x bytes: the figures of vllm-facts.md; fp8 halves them."""
    assert planner.kv_bytes_per_token(arch(QWEN_AWQ), "auto", "float16") == 2 * 28 * 4 * 128 * 2 == 57_344
    assert planner.kv_bytes_per_token(arch(QWEN_AWQ), "fp8", "float16") == 2 * 28 * 4 * 128 * 1 == 28_672
    assert planner.kv_bytes_per_token(arch(LLAMA), "auto", "bfloat16") == 2 * 32 * 8 * 128 * 2 == 131_072
    assert planner.kv_bytes_per_token(arch(QWEN_AWQ), "auto", "float32") == 114_688
    # Tensor parallel 2 puts 4 of Llama's 8 KV heads on each GPU; Qwen's 4 heads over 8 GPUs are replicated, 1 each.
    assert planner.kv_bytes_per_token(arch(LLAMA), "auto", "bfloat16", tensor_parallel=2) == 65_536
    assert planner.kv_bytes_per_token(arch(QWEN_AWQ), "auto", "float16", tensor_parallel=8) == 2 * 28 * 1 * 128 * 2
    with pytest.raises(planner.PlanError, match="kv_cache_dtype 'int8' is not modelled"):
        planner.kv_bytes_per_token(arch(QWEN_AWQ), "int8", "float16")


def test_weight_bytes_from_the_shapes() -> None:
    """Qwen2.5-7B's linear layers, its AWQ packing and its untied 16-bit embeddings, byte by byte."""
    per_layer = 3584 * 3584 * 2 + 3584 * 512 * 2 + 3 * 3584 * 18944  # q and o, k and v, gate/up/down
    assert per_layer == 233_046_016
    linear = 28 * per_layer  # 6,525,288,448 parameters
    embeddings = 2 * 152064 * 3584 * 2  # input table and lm_head, 16 bits each: 2,179,989,504 B
    awq = linear // 2 + linear // 128 * 2 + linear // 128 // 2  # 4-bit weights, one fp16 scale and 4-bit zero per 128
    assert arch(QWEN_AWQ).weight_bytes == awq + embeddings == 5_570_080_768  # 5.19 GiB; ~5.6 GB on disk (docs/sources.md)
    assert arch(QWEN_BF16).weight_bytes == linear * 2 + embeddings == 15_230_566_400  # 14.18 GiB
    # Llama-3.1-8B: 32 layers of 4096x4096 (q, o), 4096x1024 (k, v), 3 x 4096x14336, and 128,256 x 4096 embeddings.
    assert arch(LLAMA).weight_bytes == (32 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336)
                                        + 2 * 128256 * 4096) * 2 == 16_059_990_016


def test_loaded_weights_measured_or_estimated() -> None:
    """Catalog figures are vLLM's measured loads; the shape estimate plus 0.2 GiB lands within 1% of them."""
    assert arch(QWEN_AWQ).loaded_bytes == int(5.38 * GiB) and arch(QWEN_AWQ).measured
    assert arch(QWEN_BF16).loaded_bytes == int(14.29 * GiB)
    for repo in (QWEN_AWQ, QWEN_BF16):
        shapes = {k: v for k, v in planner.MODEL_CATALOG[repo].items() if k != "loaded_gib"}
        estimate = planner.architecture(shapes, repo)
        assert not estimate.measured
        assert estimate.loaded_bytes == estimate.weight_bytes + int(0.2 * GiB)
        assert estimate.loaded_bytes == pytest.approx(arch(repo).loaded_bytes, rel=0.01)


def test_decode_floor_reads_every_weight_but_the_input_embeddings() -> None:
    """AWQ: (5,570,080,768 - 1,089,994,752) B / 936 GB/s = 4.79 ms on a 3090; the field report measured 6.84 ms."""
    read = 5_570_080_768 - 152064 * 3584 * 2
    assert arch(QWEN_AWQ).read_bytes == read == 4_480_086_016
    assert plan(QWEN_AWQ, RTX3090)["decode_floor_ms"] == round(read / 936e9 * 1000, 2) == 4.79
    assert plan(QWEN_AWQ, RTX4090)["decode_floor_ms"] == round(read / 1008e9 * 1000, 2) == 4.44
    # BF16: 14,140,571,648 B / 936 GB/s = 15.11 ms; the field report measured 19.7 ms.
    assert plan(QWEN_BF16, RTX3090)["decode_floor_ms"] == 15.11
    tied = planner.architecture({**TINY, "tie_word_embeddings": True}, "tiny")
    assert tied.read_bytes == tied.weight_bytes  # a tied table is read whole as the output layer


def test_reserve_of_the_realtime_scene_on_a_24gb_card() -> None:
    """2,048 batched tokens x (3 x 18,944 + 4 x 3,584) x 2 B of activations, 7 graph sizes, 0.13 GiB outside torch."""
    parts = planner.reserve(arch(QWEN_AWQ), tokens=2048, max_num_seqs=16, act_bytes=2)
    assert parts["activation"] == 2048 * (3 * 18944 + 4 * 3584) * 2 == 291_504_128  # 0.27 GiB
    assert 16 * 152064 * 14 < parts["activation"]  # the sampler's 34 MB peak comes after the forward pass's
    assert parts["cuda_graphs"] == 7 * 28 * planner.GRAPH_BYTES_PER_LAYER_SIZE  # 0.08 GiB
    assert parts["non_torch"] == int(0.13 * GiB)
    # 256 sequences at 2,048 tokens: the sampler (256 x 152,064 x 14 B = 0.51 GiB) outgrows the forward pass.
    assert planner.reserve(arch(QWEN_AWQ), 2048, 256, 2)["activation"] == 256 * 152064 * 14
    assert planner.reserve(arch(QWEN_AWQ), 2048, 16, 2, graphs=False)["cuda_graphs"] == 0


@pytest.mark.parametrize(("max_num_seqs", "tokens", "sizes"), [
    (16, 2048, 7),  # 1, 2, 4, 8, 16, 24, 32
    (64, 2048, 19),  # 1, 2, 4, then 8..128 by 8
    (256, 8192, 51),  # 1, 2, 4, 8..248 by 8, 256..512 by 16
    (16, 20, 6),  # 1, 2, 4, 8, 16 and the batch limit 20 itself
])
def test_cuda_graph_capture_sizes(max_num_seqs: int, tokens: int, sizes: int) -> None:
    """vLLM captures batch sizes up to min(2 x max_num_seqs, 512, max_num_batched_tokens)."""
    assert planner.capture_sizes(max_num_seqs, tokens) == sizes


def test_batched_tokens_default_by_card() -> None:
    """2,048 below 70 GiB, 8,192 up to 160 GiB, 16,384 above; a scene's own value and chunked prefill off win."""
    assert planner.batched_tokens(scene(), 24 * GiB, 4096, 16) == 2048
    assert planner.batched_tokens(scene(), 140 * GiB, 4096, 16) == 8192
    assert planner.batched_tokens(scene(), 180 * GiB, 4096, 16) == 16384
    assert planner.batched_tokens(scene(max_num_batched_tokens=512), 24 * GiB, 4096, 16) == 512
    assert planner.batched_tokens(scene(enable_chunked_prefill=False), 24 * GiB, 8192, 16) == 8192
    assert planner.batched_tokens(scene(), 24 * GiB, 64, 2) == 128  # never more than max_num_seqs x max_model_len


def test_qwen_awq_realtime_on_a_3090_by_hand() -> None:
    """Budget 0.90 x (24,576 - 318) MiB, less 5.38 GiB of weights and the reserve, in 16-token blocks of 57,344 B."""
    result = plan(QWEN_AWQ, RTX3090)
    budget = math.ceil((24576 - 318) * MiB * 0.90)  # 21.32 GiB
    reserve = 291_504_128 + 7 * 28 * planner.GRAPH_BYTES_PER_LAYER_SIZE + int(0.13 * GiB)  # 0.48 GiB
    kv = budget - int(5.38 * GiB) - reserve
    blocks = kv // (57_344 * 16)
    assert (result["budget_gib"], result["reserve_gib"], result["kv_cache_gib"]) == (21.32, 0.48, 15.46)
    assert result["kv_blocks"] == blocks == 18_091
    assert result["kv_tokens"] == blocks * 16 == 289_456
    assert result["max_concurrency"] == round(289_456 / 4096, 2) == 70.67
    assert result["fits"] and result["kv_needed_gib"] == round(4096 * 57_344 / GiB, 2)
    assert result["max_num_batched_tokens"] == 2048 and result["device"] == "GPU 0 RTX 3090"


@pytest.mark.parametrize(("repo", "utilization", "seqs", "measured"), [
    (QWEN_AWQ, 0.1538, 16, 276_656),  # realtime: "GPU KV cache size: 276,656 tokens"
    (QWEN_AWQ, 0.1538 * 0.95 / 0.90, 64, 299_168),  # batch, the same card's 0.95 share of a 24 GiB budget
    (QWEN_BF16, 0.1538, 16, 109_760),  # the dense BF16 run
])
def test_h200_measurements_within_five_percent(repo: str, utilization: float, seqs: int, measured: int) -> None:
    """The real H200 runs of docs/sources.md with the budgets of a 24 GiB card: the planner lands within 5% (here 1.2%)."""
    result = plan(repo, H200, gpu_memory_utilization=utilization, max_num_seqs=seqs)
    assert result["max_num_batched_tokens"] == 8192  # vLLM's default on a card of 70 GiB and more
    assert result["kv_tokens"] == pytest.approx(measured, rel=0.015)


def test_h200_memory_split_matches_the_log() -> None:
    """Budget 21.5 GiB, weights 5.38, KV 14.78 and a 1.34 GiB reserve were measured; the planner's split is close."""
    result = plan(QWEN_AWQ, H200, gpu_memory_utilization=0.1538)
    assert result["budget_gib"] == pytest.approx(21.5, abs=0.05)
    assert result["reserve_gib"] == pytest.approx(1.34, abs=0.05)
    assert result["activation_gib"] == pytest.approx(1.13, abs=0.05) and result["cuda_graphs_gib"] == 0.08
    assert result["max_concurrency"] == pytest.approx(67.54, rel=0.015)
    assert result["decode_floor_ms"] == round(4_480_086_016 / 4800e9 * 1000, 2)  # 0.93 ms; measured TPOT 3.71 ms


def test_seeds_table_and_its_gap() -> None:
    """The seeds' blocks imply a 2.4-2.5 GiB reserve; the planner comes closest at vLLM's offline defaults."""
    seeds = {QWEN_AWQ: 15_839, QWEN_BF16: 5_306}
    for repo, blocks in seeds.items():
        implied_reserve = math.ceil((24576 - 318) * MiB * 0.90) - arch(repo).loaded_bytes - blocks * 16 * 57_344
        assert implied_reserve / GiB == pytest.approx(2.45, abs=0.06)  # 2.41 (AWQ) and 2.50 (BF16)
    realtime = {repo: plan(repo, RTX3090)["kv_blocks"] for repo in seeds}
    offline = {repo: plan(repo, RTX3090, max_num_seqs=256, max_num_batched_tokens=8192)["kv_blocks"] for repo in seeds}
    assert realtime == {QWEN_AWQ: 18_091, QWEN_BF16: 7_664}  # +14% and +44%
    assert offline[QWEN_AWQ] / seeds[QWEN_AWQ] == pytest.approx(1.045, abs=0.01)
    assert offline[QWEN_BF16] / seeds[QWEN_BF16] == pytest.approx(1.154, abs=0.01)
    # The seeds' "critical concurrency" (88 and 265) is KV tokens over ~960 tokens per request, not over max_model_len.
    assert (round(5_306 * 16 / 960), round(15_839 * 16 / 960)) == (88, 264)


def test_fp8_kv_cache_doubles_the_tokens() -> None:
    """Half the bytes per token: twice the blocks from the same KV memory."""
    auto, fp8 = plan(QWEN_BF16, RTX4090), plan(QWEN_BF16, RTX4090, kv_cache_dtype="fp8")
    assert fp8["kv_bytes_per_token"] == 28_672
    assert fp8["kv_blocks"] in (2 * auto["kv_blocks"], 2 * auto["kv_blocks"] + 1)


def test_impossible_plans_do_not_fit() -> None:
    """Llama-3.1-8B BF16 at its full 131,072 tokens needs 16 GiB of KV; BF16 Qwen at 0.60 leaves none."""
    long = plan(LLAMA, RTX3090, max_model_len=131072)
    assert long["kv_needed_gib"] == 16.0 and not long["fits"] and 0 < long["kv_tokens"] < 131072
    starved = plan(QWEN_BF16, RTX3090, gpu_memory_utilization=0.60)
    assert starved["kv_tokens"] == 0 and not starved["fits"]
    assert plan(QWEN_BF16, RTX3090, max_model_len=32768)["fits"]  # GQA keeps 32K of BF16 Qwen within a 3090


def test_tensor_parallel_splits_weights_and_kv_heads() -> None:
    """Two 3090s with tensor parallel 2: half the weights and half the KV bytes per token on each."""
    one = plan(LLAMA, RTX3090)
    two = planner.plan_scene(scene(gpus=[0, 1], tensor_parallel_size=2), arch(LLAMA),
                             [planner.card(RTX3090, "t"), planner.card({**RTX3090, "index": 1}, "t")], "0.33.0")
    assert two["weights_gib"] == pytest.approx(one["weights_gib"] / 2, abs=0.01)
    assert two["kv_bytes_per_token"] == 65_536 and two["kv_tokens"] > 2 * one["kv_tokens"]
    assert two["device"] == "GPU 0 RTX 3090, GPU 1 RTX 3090"


def test_cpu_plan_matches_the_lab() -> None:
    """The lab's tiny model: 2 x 2 layers x 2 heads x 32 x 2 B = 512 B/token, 1 GiB -> 2,097,152 tokens (vLLM's log)."""
    tiny = planner.architecture(TINY, "tiny")
    result = planner.plan_scene(scene(), tiny, None, "0.32.0", cpu_kv_gib=1, model_dtype="bfloat16")
    assert result["kv_bytes_per_token"] == 512
    assert (result["kv_tokens"], result["kv_blocks"], result["max_concurrency"]) == (2_097_152, 16_384, 512.0)
    assert result["budget_gib"] is None and result["decode_floor_ms"] is None and result["device"] == "cpu"
    assert result["weights_gib"] == round(tiny.weight_bytes / GiB, 2)  # no GPU load extras in CPU memory


def test_cards_from_the_facts() -> None:
    """Known profiles bring their bandwidth and CUDA total; generic cards are matched by name, unknown ones get none."""
    assert planner.card(RTX3090, "t").total_bytes == (24576 - 318) * MiB  # PyTorch: 23.69 GiB total capacity
    assert planner.card(RTX4090, "t").total_bytes / GiB == pytest.approx(23.65, abs=0.01)
    h200 = planner.card(H200, "t")
    assert (h200.bandwidth_gbps, h200.total_bytes) == (4800.0, (143771 - 512) * MiB)
    assert cards.compute_capability(H200) == 90 and cards.compute_capability(RTX3090) == 86
    for name, capability, gbps in (("NVIDIA A10", "8.6", 600.0), ("NVIDIA A100-SXM4-80GB", "8.0", 2039.0),
                                   ("NVIDIA A100-PCIE-40GB", "8.0", 1555.0), ("NVIDIA L4", "8.9", 300.0),
                                   ("NVIDIA L40S", "8.9", 864.0), ("NVIDIA H100 PCIe", "9.0", 2000.0),
                                   ("NVIDIA H100 80GB HBM3", "9.0", 3350.0), ("NVIDIA GeForce RTX 4080 SUPER", "8.9", 736.0),
                                   ("NVIDIA GeForce RTX 5090", "12.0", 1792.0), ("NVIDIA GeForce RTX 3080", "8.6", None),
                                   ("NVIDIA A10", "9.0", None)):
        gpu = {**H200, "name": name, "compute_capability": capability, "profile": "generic"}
        assert planner.card(gpu, "t").bandwidth_gbps == gbps, name
    assert cards.compute_capability({"profile": "generic", "compute_capability": "12.0"}) == 120
    assert planner.card({"index": 1, "profile": "rtx3090", "memory_total_mib": None}, "t").total_bytes > 0
    with pytest.raises(planner.PlanError, match="GPU 0 reports no memory size"):
        planner.card({"index": 0, "profile": "generic", "memory_total_mib": None}, "t")


def test_decode_floor_needs_a_bandwidth_and_bytes() -> None:
    """No bandwidth or no bytes read gives no floor rather than a made-up one."""
    assert planner.decode_floor_ms(5_600_000_000, 936.0) == 5_600_000_000 / 936e9 * 1000
    assert planner.decode_floor_ms(5_600_000_000, None) is None and planner.decode_floor_ms(0, 936.0) is None


def test_model_lookup_catalog_inventory_and_config_json() -> None:
    """The catalog is found by repo only, never by a kit-local name (which may name another repo); the inventory's
    entry wins by name or repo; otherwise config.json is read from the host."""
    models = [{"name": "qwen2.5-7b-instruct-awq", "source": "hf", "repo": "someone/Other-Model"},
              {"name": "mine", "source": "hf", "repo": "qwen/qwen2.5-7b-instruct-awq"},
              {"name": "tiny-qwen2-awq", "source": "http"}]
    scenes = [{**scene(), "model": m["name"], "model_path": f"/m/{m['name']}"} for m in models]
    assert planner.config_paths(scenes, models, {}) == ["/m/qwen2.5-7b-instruct-awq/config.json",
                                                          "/m/tiny-qwen2-awq/config.json"]
    assert planner.config_paths(scenes, models, {"tiny-qwen2-awq": TINY, "someone/other-model": TINY}) == []
    content = base64.b64encode(json.dumps(TINY).encode()).decode()
    slurped = [{"item": f"/m/{name}/config.json", "content": content} for name in ("tiny-qwen2-awq",
                                                                                    "qwen2.5-7b-instruct-awq")]
    slurped.append({"item": "/m/gone/config.json", "failed": True})
    assert planner.read_configs(slurped)["/m/tiny-qwen2-awq/config.json"] == TINY
    cpu_scenes = [{**one, "environment": {"VLLM_CPU_KVCACHE_SPACE": "1"}} for one in scenes]
    result = planner.plan_host(cpu_scenes, "lab1", None, "cpu", "0.32.0", models, {}, slurped)
    assert [p["weights_gib"] for p in result] == [0.0, 5.19, 0.0]
    assert [p["host"] for p in result] == ["lab1"] * 3 and all(p["problem"] is None for p in result)


def test_unknown_hub_models_are_asked_of_the_hub_at_their_revision() -> None:
    """A hub model the planner does not know is fetched from the hub's API at its pinned revision (main without one)
    and planned from it, before the host is asked; a hub that did not give it is named in the no-plan reason."""
    models = [{"name": "new", "source": "hf", "repo": "org/New-7B", "revision": "a" * 40},
              {"name": "head", "source": "hf", "repo": "org/Head"},
              {"name": "known", "source": "hf", "repo": QWEN_AWQ}, {"name": "mirror", "source": "http"}]
    scenes = [{**scene(), "model": m["name"], "model_path": f"/m/{m['name']}"} for m in models]
    urls = planner.hub_config_urls(scenes, models, {}, "http://hub.test/")
    assert urls == [{"model": "new", "url": f"http://hub.test/org/New-7B/resolve/{'a' * 40}/config.json"},
                    {"model": "head", "url": "http://hub.test/org/Head/resolve/main/config.json"}]
    fetched = planner.hub_configs([{"item": urls[0], "status": 200, "json": TINY},
                                   {"item": urls[1], "status": -1, "msg": "Request failed: <urlopen error timed out>"}])
    assert fetched["new"] == TINY and fetched["head"].endswith("gave no config.json (Request failed: <urlopen error "
                                                               "timed out>)")
    assert planner.config_paths(scenes, models, {}, fetched) == ["/m/head/config.json", "/m/mirror/config.json"]
    cpu_scenes = [{**one, "environment": {"VLLM_CPU_KVCACHE_SPACE": "1"}} for one in scenes]
    plans = planner.plan_host(cpu_scenes, "h", None, "cpu", "0.32.0", models, {}, [], fetched)
    assert plans[0]["problem"] is None and plans[0]["weights_gib"] == 0.0
    assert "org/Head/resolve/main/config.json gave no config.json" in plans[1]["problem"]
    assert "lookup('file', 'config.json') | from_json" in plans[1]["problem"]


def test_scenes_without_a_plan_say_why() -> None:
    """Unknown models, hosts without GPUs and missing GPU indexes give a reason instead of a plan."""
    unknown = planner.plan_host([{**scene(), "model": "x"}], "h", None, "cpu", "0.32.0", [], {}, [])
    assert "not in the planner's catalog" in unknown[0]["problem"] and "vllm_fleet_planner_models" in unknown[0]["problem"]
    models = [{"name": "qwen", "repo": QWEN_AWQ}]
    no_gpu = planner.plan_host([scene()], "h", {"present": False, "gpus": []}, "cuda", "0.33.0", models)
    assert "no NVIDIA GPU is visible" in no_gpu[0]["problem"] and no_gpu[0]["fits"] is None
    missing = planner.plan_host([scene(gpus=[1])], "h", {"gpus": [RTX3090]}, "cuda", "0.33.0", models)
    assert missing[0]["problem"] == "the host has no GPU [1]"


@pytest.mark.parametrize(("config", "message"), [
    ({**TINY, "num_experts": 8}, "mixture-of-experts models are not modelled"),
    ({**TINY, "quantization_config": {"quant_method": "bitsandbytes"}}, "quantization 'bitsandbytes' is not modelled"),
    ({**TINY, "quantization_config": {"quant_method": "awq", "bits": "4"}}, "needs integer bits and group_size"),
    ({**TINY, "hidden_size": None}, "config field hidden_size is None"),
])
def test_configs_the_planner_refuses(config: dict[str, Any], message: str) -> None:
    """What the planner cannot size is refused with the reason."""
    with pytest.raises(planner.PlanError, match=message):
        planner.architecture(config, "tiny")


def test_plan_table() -> None:
    """One host's table: an aligned Markdown row per scene within 120 columns, a scene without a plan with its
    reason, each scene's model and KV shape, and a legend."""
    good = {"host": "h", **plan(QWEN_AWQ, RTX3090)}
    table = planner.plan_table([good, {"host": "h", "scene": "batch", "model": "m",
                                       "problem": "no NVIDIA GPU is visible"}]).splitlines()
    assert table[0].startswith("| scene    | GPUs       | util |") and set(table[1]) == {"|", "-"}
    assert table[2].startswith("| realtime | 0 RTX 3090 | 0.90 |") and "| 289,456 " in table[2]
    assert table[2].endswith("| yes  |") and table[3].startswith("| batch    | no plan: no NVIDIA GPU is visible ")
    assert len({len(line) for line in table[:3]}) == 1 and max(len(line) for line in table) <= 120, table
    assert table[4].startswith("realtime: model qwen") and "18,091 blocks" in table[4] and table[5] == "batch: model m"
    assert table[6].startswith("GiB: budget = ")
