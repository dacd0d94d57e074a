"""Capacity planner: where a vLLM engine's memory goes for one scene on one card, and what that leaves for the KV cache.

The memory model follows vLLM's own start-up profiling (vllm/v1/worker/gpu_worker.py, determine_available_memory):
budget = CUDA-visible total x gpu_memory_utilization; KV cache = budget - weights - non-KV reserve, where the reserve
is the profile run's activation peak, the CUDA graph estimate and the memory outside torch. docs/planner.md derives
every constant and compares the results with the field reports and a real H200 run.
"""

from __future__ import annotations

import base64
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Optional

from .errors import FleetError
from . import cards
from .scenes import engine_arg

GiB = 1024**3
MiB = 1024**2

# Known models, in config.json's own terms, keyed by Hugging Face repo. loaded_gib is vLLM's "Model loading took"
# where it was measured (docs/planner.md); other models get an estimate from their shapes.
_QWEN25_7B = {"num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
              "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False,
              "max_position_embeddings": 32768}
_QWEN25_32B = {"num_hidden_layers": 64, "hidden_size": 5120, "intermediate_size": 27648, "num_attention_heads": 40,
               "num_key_value_heads": 8, "vocab_size": 152064, "tie_word_embeddings": False,
               "max_position_embeddings": 32768}
MODEL_CATALOG: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-7B-Instruct": {**_QWEN25_7B, "torch_dtype": "bfloat16", "loaded_gib": 14.29},
    "Qwen/Qwen2.5-7B-Instruct-AWQ": {**_QWEN25_7B, "torch_dtype": "float16", "loaded_gib": 5.38,
                                     "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}},
    "Qwen/Qwen2.5-32B-Instruct-AWQ": {**_QWEN25_32B, "torch_dtype": "float16",
                                      "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}},
    "meta-llama/Llama-3.1-8B-Instruct": {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
                                         "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                                         "tie_word_embeddings": False, "max_position_embeddings": 131072,
                                         "torch_dtype": "bfloat16"},
}

# What vLLM allocates with the weights beyond their shapes (rotary caches, kernel workspaces): the measured Qwen2.5-7B
# loads exceed the shapes by 0.10 GiB (BF16) and 0.19 GiB (AWQ); estimates add the larger.
LOAD_EXTRA_BYTES = int(0.2 * GiB)
# Profile-run activations per batched token, in elements: the MLP's fused gate/up output (2 x intermediate) and its
# activation output (1 x intermediate) are alive together with four hidden-size buffers (residual, norm output,
# attention output, MLP output). 1.09 GiB for Qwen2.5-7B at 8,192 tokens; the H200 measured 1.13 GiB.
ACTIVATION_INTERMEDIATES = 3
ACTIVATION_HIDDENS = 4
# The dummy sampler run holds, per logit: the logits in model dtype, their fp32 copy, softmax probabilities and the
# exponential noise of random sampling (2 + 4 + 4 + 4 bytes).
SAMPLER_BYTES_PER_LOGIT = 14
# CUDA graph memory per capture size and decoder layer: the H200 run's 0.08 GiB for 7 sizes of a 28-layer model.
GRAPH_BYTES_PER_LAYER_SIZE = int(0.08 * GiB / (7 * 28))
# Memory outside torch's activations (cuBLAS and attention workspaces, the runner's persistent buffers): the H200
# run's 1.34 GiB reserve less its 1.13 GiB activation peak and 0.08 GiB of CUDA graphs.
NON_TORCH_BYTES = int(0.13 * GiB)

# vLLM's API-server default of max_num_batched_tokens by card memory (engine/arg_utils.py, get_batch_defaults).
BATCHED_TOKENS_BY_MEMORY: list[tuple[int, int]] = [(160 * GiB, 16384), (70 * GiB, 8192), (0, 2048)]
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_CPU_MAX_NUM_SEQS = 128
DEFAULT_BLOCK_SIZE = 16
DEFAULT_CPU_BLOCK_SIZE = 128
KV_DTYPE_BYTES = {"float16": 2.0, "bfloat16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0,
                  "fp8_inc": 1.0, "fp8_per_token_head": 1.0, "int8_per_token_head": 1.0, "int4_per_token_head": 0.5}
FLOAT32_NAMES = {"float32", "float"}

Plan = dict[str, Any]


class PlanError(FleetError):
    """A scene the planner cannot plan; the message names the variable and the fix."""


@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer's shapes and the bytes vLLM loads for it."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_position: int  # the longest max_model_len vLLM accepts: max_position_embeddings with its rope scaling
    weight_bytes: int  # the checkpoint's tensors, from the shapes
    read_bytes: int  # weights read per decoded token: all but the input embedding table when it is not tied
    loaded_bytes: int  # what vLLM holds after loading: measured, or weight_bytes + LOAD_EXTRA_BYTES
    measured: bool


@dataclass(frozen=True)
class Card:
    """One GPU as the planner sees it."""

    index: int
    name: str
    profile: str
    total_bytes: int  # CUDA-visible total, what gpu_memory_utilization multiplies
    bandwidth_gbps: Optional[float]


def _int(config: dict[str, Any], key: str, where: str) -> int:
    """Return a positive integer field of a config.json mapping, or explain which is missing."""
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise PlanError(f"{where}: config field {key} is {value!r}, not a positive integer")
    return value


def _linear_bytes(params: int, quantization: Optional[dict[str, Any]], dtype_bytes: int, where: str) -> int:
    """Return the bytes of the linear layers' weights: plain, or packed AWQ/GPTQ with per-group scales and zeros."""
    if not quantization:
        return params * dtype_bytes
    method = str(quantization.get("quant_method", "")).lower()
    if method in ("awq", "gptq"):
        bits, group = quantization.get("bits"), quantization.get("group_size")
        if not isinstance(bits, int) or not isinstance(group, int) or bits <= 0:
            raise PlanError(f"{where}: quantization_config needs integer bits and group_size, got {quantization!r}")
        groups = params / group if group > 0 else 0  # group_size -1 (one group per column) adds next to nothing
        return int(params * bits / 8 + groups * (2 + bits / 8))  # an fp16 scale and a packed zero per group
    if method == "fp8":
        return params
    raise PlanError(f"{where}: quantization {method!r} is not modelled (awq, gptq and fp8 are); "
                    "give the model's loaded size in vllm_fleet_planner_models with loaded_gib")


def derived_max_len(config: dict[str, Any], where: str) -> int:
    """Return the longest max_model_len vLLM derives from a config.json: max_position_embeddings, times the rope
    scaling factor (of original_max_position_embeddings for yarn) except for the llama3/longrope kinds, as vLLM's
    ModelConfig does before it refuses a longer one."""
    length = _int(config, "max_position_embeddings", where)
    scaling = config.get("rope_scaling") if isinstance(config.get("rope_scaling"), dict) else {}
    kind = str(scaling.get("rope_type") or scaling.get("type") or "")
    factor = scaling.get("factor")
    if kind in ("su", "longrope", "llama3") or not isinstance(factor, (int, float)) or isinstance(factor, bool):
        return length
    if kind == "yarn" and isinstance(scaling.get("original_max_position_embeddings"), int):
        length = scaling["original_max_position_embeddings"]
    return int(length * factor)


def architecture(config: dict[str, Any], where: str) -> Architecture:
    """Read a model's shapes from its config.json mapping (or a catalog entry) and size its weights."""
    if "text_config" in config or any(k in config for k in ("num_experts", "num_local_experts", "n_routed_experts")):
        raise PlanError(f"{where}: multimodal and mixture-of-experts models are not modelled; "
                        "plan this scene by hand or use a dense text model")
    layers, hidden = _int(config, "num_hidden_layers", where), _int(config, "hidden_size", where)
    intermediate, heads = _int(config, "intermediate_size", where), _int(config, "num_attention_heads", where)
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    vocab = _int(config, "vocab_size", where)
    dtype_bytes = 4 if config.get("torch_dtype") in FLOAT32_NAMES else 2
    # Biases and norms are left out: under 0.01 % of a 7B model.
    linear = layers * (hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2 + 3 * hidden * intermediate)
    embedding = vocab * hidden * dtype_bytes  # quantized checkpoints keep embeddings and lm_head in 16 bits
    tied = bool(config.get("tie_word_embeddings", False))
    weights = _linear_bytes(linear, config.get("quantization_config"), dtype_bytes, where) + embedding * (1 if tied else 2)
    loaded = config.get("loaded_gib")
    return Architecture(
        layers=layers, hidden=hidden, intermediate=intermediate, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        vocab=vocab, max_position=derived_max_len(config, where), weight_bytes=weights,
        read_bytes=weights - (0 if tied else embedding),
        loaded_bytes=int(loaded * GiB) if isinstance(loaded, (int, float)) else weights + LOAD_EXTRA_BYTES,
        measured=isinstance(loaded, (int, float)))


def _catalog_entry(model: dict[str, Any], user_models: dict[str, dict[str, Any]]) -> Optional[dict[str, Any]]:
    """Find a model's shapes: the inventory's vllm_fleet_planner_models by the model's name or repo, else the catalog
    by its Hugging Face repo alone (case-insensitive), never by a kit-local name, which may name another repo."""
    names = {str(model[key]).lower() for key in ("name", "repo") if model.get(key)}
    found = next((entry for key, entry in (user_models or {}).items() if key.lower() in names), None)
    repo = str(model.get("repo") or "").lower()
    return found or next((entry for key, entry in MODEL_CATALOG.items() if repo and key.lower() == repo), None)


def _model_entry(scene: dict[str, Any], model_list: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the vllm_model_list entry a scene serves (just its name when the list lacks it)."""
    return next((m for m in model_list or [] if isinstance(m, dict) and m.get("name") == scene["model"]),
                {"name": scene["model"]})


def _unknown_models(scenes: list[dict[str, Any]], model_list: list[dict[str, Any]],
                    user_models: dict[str, dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Return (scene, model entry) for each scene whose model neither the catalog nor the inventory describes."""
    pairs = [(s, _model_entry(s, model_list)) for s in scenes]
    return [(s, m) for s, m in pairs if _catalog_entry(m, user_models) is None]


def hub_config_urls(scenes: list[dict[str, Any]], model_list: list[dict[str, Any]],
                    user_models: dict[str, dict[str, Any]], endpoint: str) -> list[dict[str, str]]:
    """Return {model, url} of the hub's config.json at the pinned revision for each unknown model from the hub."""
    urls = {m["name"]: f"{endpoint.rstrip('/')}/{m['repo']}/resolve/{m.get('revision') or 'main'}/config.json"
            for _scene, m in _unknown_models(scenes, model_list, user_models)
            if m.get("source") == "hf" and m.get("repo")}
    return [{"model": name, "url": url} for name, url in urls.items()]


def hub_configs(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Map each model the controller asked the hub about to its config.json, or to why the hub did not give it."""
    found: dict[str, Any] = {}
    for result in results:
        item = result.get("item") or {}
        if "model" not in item:
            continue
        data = result.get("json")
        if result.get("status") == 200 and isinstance(data, dict):
            found[item["model"]] = data
        else:
            why = f"HTTP {result['status']}" if result.get("status", -1) > 0 else result.get("msg") or "no answer"
            found[item["model"]] = f"{item['url']} gave no config.json ({' '.join(str(why).split())[:200]})"
    return found


def config_paths(scenes: list[dict[str, Any]], model_list: list[dict[str, Any]],
                 user_models: dict[str, dict[str, Any]], fetched: Optional[dict[str, Any]] = None) -> list[str]:
    """Return the config.json paths on the host of the scenes' models that neither catalog, inventory nor the hub
    (fetched: hub_configs) describes."""
    paths = [f"{s['model_path']}/config.json" for s, _model in _unknown_models(scenes, model_list, user_models)
             if not isinstance((fetched or {}).get(s["model"]), dict)]
    return list(dict.fromkeys(paths))


def read_configs(slurped: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Map each config.json path slurped from the host to its parsed content; unreadable ones are left out."""
    configs = {}
    for result in slurped:
        if result.get("failed") or "content" not in result:
            continue
        try:
            data = json.loads(base64.b64decode(result["content"]).decode("utf-8"))
        except ValueError:
            continue
        if isinstance(data, dict):
            configs[str(result.get("item") or result.get("source"))] = data
    return configs


def _model_config(scene: dict[str, Any], model_list: list[dict[str, Any]], user_models: dict[str, dict[str, Any]],
                  host_configs: dict[str, dict[str, Any]], fetched: dict[str, Any]) -> dict[str, Any]:
    """Return a scene model's config: the inventory's or the catalog's entry, else the hub's config.json at the
    pinned revision, else the config.json on the host."""
    entry = _catalog_entry(_model_entry(scene, model_list), user_models)
    hub = fetched.get(scene["model"])
    if entry is None and isinstance(hub, dict):
        entry = hub
    if entry is None:
        entry = host_configs.get(f"{scene['model_path']}/config.json")
    if entry is None:
        hub_said = f"{hub}, " if isinstance(hub, str) else ""
        raise PlanError(f"model {scene['model']!r} is not in the planner's catalog, {hub_said}and "
                        f"{scene['model_path']}/config.json is not on the host yet: set vllm_fleet_planner_models"
                        f"[{scene['model']}] to its config.json (e.g. \"{{{{ lookup('file', 'config.json') | from_json "
                        "}}\"), or plan again after the vllm_model role has downloaded it")
    return entry


def version_tuple(text: str) -> tuple[int, int]:
    """Return the (major, minor) of a vLLM version such as 0.33.0 or 0.32.0+cpu."""
    match = re.match(r"^(\d+)\.(\d+)", str(text))
    if not match:
        raise PlanError(f"vllm_version {text!r} is not a version such as 0.33.0")
    return int(match.group(1)), int(match.group(2))


def decode_floor_ms(read_bytes: int, bandwidth_gbps: Optional[float]) -> Optional[float]:
    """Return the batch-1 TPOT lower bound in ms: weight bytes read per token / memory bandwidth (None if unknown)."""
    if not bandwidth_gbps or bandwidth_gbps <= 0 or read_bytes <= 0:
        return None
    return read_bytes / (bandwidth_gbps * 1e9) * 1000


def default_utilization(vllm_version: str) -> float:
    """Return vLLM's default gpu_memory_utilization for a release: 0.92 since 0.20, 0.90 before."""
    return 0.92 if version_tuple(vllm_version) >= (0, 20) else 0.90


def card(gpu: dict[str, Any], where: str) -> Card:
    """Turn one GPU of the vllm_fleet_gpus fact into what the planner needs of it."""
    known = cards.profile_of(gpu)
    memory_mib = gpu.get("memory_total_mib") or (known.memory_mib if known else None)
    if not memory_mib:
        raise PlanError(f"{where}: GPU {gpu.get('index')} reports no memory size (nvidia-smi failed?); "
                        "fix the driver so nvidia-smi answers, or give memory_total_mib in vllm_fleet_gpus")
    profile = known.key if known else cards.GENERIC
    reserved = known.reserved_mib if known else cards.GENERIC_RESERVED_MIB
    return Card(index=int(gpu.get("index", 0)), name=str(gpu.get("name") or profile), profile=profile,
                total_bytes=(int(memory_mib) - reserved) * MiB, bandwidth_gbps=known.bandwidth_gbps if known else None)


def kv_bytes_per_token(arch: Architecture, kv_cache_dtype: str, model_dtype: str, tensor_parallel: int = 1) -> float:
    """Return the KV cache bytes one token takes on one GPU: 2 (K and V) x layers x KV heads x head dim x element."""
    if kv_cache_dtype == "auto":
        element = 4.0 if model_dtype in FLOAT32_NAMES else 2.0
    elif kv_cache_dtype in KV_DTYPE_BYTES:
        element = KV_DTYPE_BYTES[kv_cache_dtype]
    else:
        raise PlanError(f"kv_cache_dtype {kv_cache_dtype!r} is not modelled; use one of auto, "
                        f"{', '.join(sorted(KV_DTYPE_BYTES))}")
    heads = max(1, arch.kv_heads // tensor_parallel)  # vLLM replicates KV heads when there are fewer than GPUs
    return 2 * arch.layers * heads * arch.head_dim * element


def batched_tokens(scene: dict[str, Any], total_bytes: int, max_model_len: int, max_num_seqs: int) -> int:
    """Return max_num_batched_tokens as vLLM sets it: the scene's, else the API server's default for the card."""
    given = engine_arg(scene, "max_num_batched_tokens")
    if given:
        return int(given)
    tokens = next(tokens for floor, tokens in BATCHED_TOKENS_BY_MEMORY if total_bytes >= floor)
    if engine_arg(scene, "enable_chunked_prefill", True) is False:
        tokens = max(tokens, max_model_len)
    return min(tokens, max_num_seqs * max_model_len)


def capture_sizes(max_num_seqs: int, max_batched_tokens: int) -> int:
    """Return how many CUDA graph batch sizes vLLM captures by default (config/vllm.py, _set_cudagraph_sizes)."""
    largest = min(max_num_seqs * 2, 512, max_batched_tokens)
    sizes = {s for s in (1, 2, 4) if s <= largest}
    sizes |= set(range(8, min(largest + 1, 256), 8)) | set(range(256, largest + 1, 16))
    if max_num_seqs <= largest:
        sizes.add(max_num_seqs)
    if max_batched_tokens <= largest:
        sizes.add(max_batched_tokens)
    return len(sizes)


def reserve(arch: Architecture, tokens: int, max_num_seqs: int, act_bytes: int, tensor_parallel: int = 1,
            graphs: bool = True) -> dict[str, int]:
    """Return the non-KV reserve of a GPU engine in bytes: activation peak, CUDA graphs and memory outside torch."""
    forward = tokens * (ACTIVATION_INTERMEDIATES * arch.intermediate // tensor_parallel
                        + ACTIVATION_HIDDENS * arch.hidden) * act_bytes
    # The sampler runs after the forward pass has freed its intermediates, so the peak is the larger of the two.
    sampler = min(max_num_seqs, tokens) * arch.vocab * SAMPLER_BYTES_PER_LOGIT
    cuda_graphs = capture_sizes(max_num_seqs, tokens) * arch.layers * GRAPH_BYTES_PER_LAYER_SIZE if graphs else 0
    return {"activation": max(forward, sampler), "cuda_graphs": cuda_graphs, "non_torch": NON_TORCH_BYTES}


def _gib(value: Optional[float]) -> Optional[float]:
    """Return bytes as GiB rounded to two decimals (None stays None)."""
    return None if value is None else round(value / GiB, 2)


def plan_scene(scene: dict[str, Any], arch: Architecture, cards: Optional[list[Card]], vllm_version: str,
               cpu_kv_gib: Optional[float] = None, model_dtype: str = "auto") -> Plan:
    """Plan one scene: on its GPUs (the smallest one decides), or in CPU memory when cards is None."""
    max_model_len = int(engine_arg(scene, "max_model_len", arch.max_position))
    on_cpu = cards is None
    max_num_seqs = int(engine_arg(scene, "max_num_seqs", DEFAULT_CPU_MAX_NUM_SEQS if on_cpu else DEFAULT_MAX_NUM_SEQS))
    block_size = int(engine_arg(scene, "block_size", DEFAULT_CPU_BLOCK_SIZE if on_cpu else DEFAULT_BLOCK_SIZE))
    tensor_parallel = int(engine_arg(scene, "tensor_parallel_size", 1))
    dtype = str(engine_arg(scene, "dtype", "auto"))
    dtype = model_dtype if dtype == "auto" else dtype
    kv_dtype = str(engine_arg(scene, "kv_cache_dtype", "auto"))
    per_token = kv_bytes_per_token(arch, kv_dtype, dtype, tensor_parallel)
    # vLLM's load figures and extras are GPU measurements; in CPU memory the tensors are what the shapes say.
    weights = (arch.weight_bytes if on_cpu else arch.loaded_bytes) // tensor_parallel
    plan: Plan = {"scene": scene["name"], "model": scene["model"], "gpus": scene["gpus"], "max_model_len": max_model_len,
                  "max_num_seqs": max_num_seqs, "kv_cache_dtype": kv_dtype, "block_size": block_size,
                  "tensor_parallel_size": tensor_parallel, "attention_heads": arch.heads, "kv_heads": arch.kv_heads,
                  "model_max_len": arch.max_position, "weights_gib": _gib(weights),
                  "weights_measured": arch.measured, "kv_bytes_per_token": int(per_token),
                  "p2p": None if tensor_parallel < 2 else scene.get("env", {}).get("NCCL_P2P_DISABLE") != "1",
                  "custom_all_reduce": not engine_arg(scene, "disable_custom_all_reduce", False)}
    if on_cpu:
        kv = int((cpu_kv_gib or 0) * GiB)
        plan.update({"device": "cpu", "profile": "cpu", "utilization": None, "budget_gib": None,
                     "max_num_batched_tokens": None, "reserve_gib": None, "activation_gib": None,
                     "cuda_graphs_gib": None, "non_torch_gib": None, "decode_floor_ms": None})
    else:
        smallest = min(cards, key=lambda c: c.total_bytes)
        utilization = float(engine_arg(scene, "gpu_memory_utilization", default_utilization(vllm_version)))
        budget = math.ceil(smallest.total_bytes * utilization)
        tokens = batched_tokens(scene, smallest.total_bytes, max_model_len, max_num_seqs)
        act_bytes = 4 if dtype in FLOAT32_NAMES else 2
        parts = reserve(arch, tokens, max_num_seqs, act_bytes, tensor_parallel,
                        graphs=not engine_arg(scene, "enforce_eager", False))
        kv = max(0, budget - weights - sum(parts.values()))
        floor = decode_floor_ms(arch.read_bytes // tensor_parallel, smallest.bandwidth_gbps)
        names = [c.name.removeprefix("NVIDIA ").removeprefix("GeForce ") for c in cards]
        plan.update({"device": ", ".join(f"GPU {c.index} {n}" for c, n in zip(cards, names)), "profile": smallest.profile,
                     "utilization": utilization, "budget_gib": _gib(budget), "max_num_batched_tokens": tokens,
                     "reserve_gib": _gib(sum(parts.values())), "activation_gib": _gib(parts["activation"]),
                     "cuda_graphs_gib": _gib(parts["cuda_graphs"]), "non_torch_gib": _gib(parts["non_torch"]),
                     "decode_floor_ms": None if floor is None else round(floor, 2)})
    blocks = int(kv // (per_token * block_size))
    kv_tokens = blocks * block_size
    plan.update({"kv_cache_gib": _gib(kv), "kv_blocks": blocks, "kv_tokens": kv_tokens,
                 "max_concurrency": round(kv_tokens / max_model_len, 2),
                 "kv_needed_gib": _gib(per_token * max_model_len), "fits": kv_tokens >= max_model_len,
                 "problem": None})
    return plan


def _cards_for(scene: dict[str, Any], gpus_fact: dict[str, Any], where: str) -> list[Card]:
    """Return the cards a scene runs on, from the vllm_fleet_gpus fact."""
    by_index = {g.get("index"): g for g in gpus_fact.get("gpus") or []}
    missing = [g for g in scene["gpus"] if g not in by_index]
    if missing:
        raise PlanError(f"{where}: the host has no GPU {missing}")
    return [card(by_index[g], where) for g in scene["gpus"]]


def plan_host(scenes: list[dict[str, Any]], host: str, gpus_fact: Optional[dict[str, Any]], flavour: str,
              vllm_version: str, model_list: list[dict[str, Any]],
              user_models: Optional[dict[str, dict[str, Any]]] = None, slurped: Optional[list[dict[str, Any]]] = None,
              fetched: Optional[dict[str, Any]] = None) -> list[Plan]:
    """Plan every resolved scene of a host (fetched: hub_configs); a scene that cannot be planned carries the reason
    in its problem key. A cpu scene's KV cache is its environment's VLLM_CPU_KVCACHE_SPACE, as its unit sets it."""
    host_configs = read_configs(slurped or [])
    out = []
    for scene in scenes:
        where = f"{host}: vllm_scenes_list[name={scene['name']}]"
        try:
            config = _model_config(scene, model_list or [], user_models or {}, host_configs, fetched or {})
            arch = architecture(config, f"{where} model {scene['model']}")
            dtype = str(config.get("torch_dtype") or "auto")
            if flavour == "cpu":
                kv_gib = float(scene.get("environment", {}).get("VLLM_CPU_KVCACHE_SPACE") or 0)
                plan = plan_scene(scene, arch, None, vllm_version, kv_gib, dtype)
            elif not (gpus_fact or {}).get("gpus"):
                raise PlanError("no NVIDIA GPU is visible on the host yet (vllm_fleet_gpus lists none)")
            else:
                plan = plan_scene(scene, arch, _cards_for(scene, gpus_fact or {}, where), vllm_version, model_dtype=dtype)
        except PlanError as error:
            plan = {"scene": scene["name"], "model": scene["model"], "gpus": scene["gpus"], "fits": None,
                    "problem": str(error).removeprefix(f"{where}: ")}
        except (TypeError, ValueError) as error:  # an engine argument of the wrong kind: its own check names it
            plan = {"scene": scene["name"], "model": scene["model"], "gpus": scene["gpus"], "fits": None,
                    "problem": f"an engine argument has the wrong kind ({error})"}
        out.append({"host": host, **plan})
    return out


def _cell(value: Any) -> str:
    """Format one table cell: numbers with thousands separators, missing values as a dash."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


TABLE_COLUMNS = [("scene", "scene"), ("device", "GPUs"), ("utilization", "util"), ("budget_gib", "budget"),
                 ("weights_gib", "weights"), ("reserve_gib", "reserve"), ("kv_cache_gib", "KV"),
                 ("kv_tokens", "KV tokens"), ("max_model_len", "max len"), ("max_concurrency", "conc"),
                 ("decode_floor_ms", "floor"), ("fits", "fits")]
TABLE_LEGEND = ("GiB: budget = the card's memory x util; reserve = activations, CUDA graphs, workspaces; KV = KV cache.\n"
                "conc: sequences of max len the KV cache holds at once; fits: one max-len sequence fits.\n"
                "floor: the decode ms per token the card's memory bandwidth allows at best.")


def _split_note(plan: Plan) -> str:
    """Say how a tensor-parallel plan splits over its cards and how they talk ("" for one card)."""
    ranks = plan.get("tensor_parallel_size") or 1
    if ranks < 2 or plan.get("problem"):
        return ""
    talk = ("P2P between the cards" if plan.get("p2p") else "no P2P between the cards: NCCL_P2P_DISABLE=1")
    talk += ", custom all-reduce on" if plan.get("custom_all_reduce") else ", custom all-reduce off"
    return (f"; split over {ranks} cards: {_cell(plan.get('weights_gib'))} GiB of weights and "
            f"{_cell(plan.get('kv_cache_gib'))} GiB of KV cache on each; {talk}")


def plan_table(plans: list[Plan]) -> str:
    """Render one host's plans as an aligned Markdown table within 120 columns, each scene's model and KV shape
    below it, and a legend."""
    header = [title for _key, title in TABLE_COLUMNS]
    # The column says GPUs, so a device "GPU 0 <name>" is "0 <name>" in it.
    rows = [[plan["scene"], f"no plan: {plan['problem']}"] if plan.get("problem")
            else [_cell(plan.get(key)).replace("GPU ", "") for key, _title in TABLE_COLUMNS] for plan in plans]
    # A scene without a plan has its reason in the GPUs column; it does not widen the columns of the others.
    widths = [max(len(row[i]) for row in [header] + rows if len(row) == len(header)) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        """Join one row's cells, padded to the column widths."""
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    shapes = [f"{plan['scene']}: model {plan['model']}" + (
        "" if plan.get("problem") else
        f", {_cell(plan.get('kv_bytes_per_token'))} B of KV per token, {_cell(plan.get('kv_blocks'))} blocks"
        + _split_note(plan)) for plan in plans]
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows]
                     + shapes + [TABLE_LEGEND])
