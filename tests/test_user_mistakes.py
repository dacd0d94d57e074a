"""Realistic mistakes of a new user with RTX 3090/4090 boxes, each refused on the controller in one line that names
the host, the variable and the fix: the checks playbooks/plan.yml (and so site.yml's preflight) makes before any host
changes, run here as the play runs them (scene resolution, exposure, capacity plan, hardware and argument rules)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from conftest import REPO

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards, hardware, planner, scenes

HOST = "gpu-3090-a"
EXAMPLE = yaml.safe_load((REPO / "inventory/example/group_vars/gpu_hosts/main.yml").read_text())
PRESETS = cards.presets()
CARDS = {"3090": ("NVIDIA GeForce RTX 3090", 24576, "8.6", "rtx3090"), "4090": ("NVIDIA GeForce RTX 4090", 24564, "8.9",
                                                                                   "rtx4090"),
         "t4": ("Tesla T4", 15360, "7.5", "generic")}


def gpus(*kinds: str) -> dict[str, Any]:
    """The vllm_fleet_gpus fact of a host with these cards, on driver R580."""
    cards = [{"index": i, "name": CARDS[k][0], "memory_total_mib": CARDS[k][1], "compute_capability": CARDS[k][2],
              "profile": CARDS[k][3]} for i, k in enumerate(kinds)]
    return {"present": True, "driver_branch": 580, "driver_version": "580.95.05", "gpus": cards,
            "profile": cards[0]["profile"]}


def refusals(scene_list: list[Any], custom: dict[str, Any] | None = None, facts: dict[str, Any] | None = None,
             model_list: list[dict[str, Any]] | None = None) -> list[str]:
    """Return the errors plan.yml would stop this host with, in the order it finds them."""
    models = scenes.models_by_name(model_list or EXAMPLE["vllm_model_list"], "/var/lib/vllm/models")
    presets, facts, var = {**PRESETS, **(custom or {})}, facts or gpus("3090", "3090"), f"{HOST}: vllm_scenes_list"
    problem = scenes.resolve_problem(scene_list, presets, models, facts, var)
    if problem:
        return [problem]
    resolved = scenes.host_scenes(scene_list, presets, models, facts, var)
    exposure = [f"{var}: {message}" for scene in resolved for message in scenes.exposure_problems(scene)]
    plans = planner.plan_host(resolved, HOST, facts, "cuda", "0.33.0", model_list or EXAMPLE["vllm_model_list"])
    return exposure + hardware.problems(HOST, resolved, plans, facts, "cuda", "0.33.0", 580)["errors"]


def realtime(**engine_args: Any) -> dict[str, Any]:
    """The realtime scene on GPU 0 with these engine arguments."""
    return {"name": "realtime", "gpus": [0], "engine_args": engine_args}


BF16_LLAMA = [{"name": "llama", "source": "hf", "repo": "meta-llama/Llama-3.1-8B-Instruct", "revision": "a" * 40}]
MISTAKES: list[tuple[str, list[Any], dict[str, Any], tuple[str, ...]]] = [
    # id, scene list, extra arguments of refusals(), what the one line must say
    ("max_num_seq", [realtime(max_num_seq=32)], {}, (".engine_args.max_num_seq:", "did you mean max_num_seqs?")),
    ("max_num_batch_tokens", [realtime(max_num_batch_tokens=2048)], {},
     (".engine_args.max_num_batch_tokens:", "did you mean max_num_batched_tokens?")),
    ("gpu_memory_utilizaton", [realtime(gpu_memory_utilizaton=0.9)], {},
     ("did you mean gpu_memory_utilization?",)),
    ("enable_prefix_cache", [realtime(enable_prefix_cache=True)], {}, ("did you mean enable_prefix_caching?",)),
    ("max_model_length", [realtime(max_model_length=4096)], {}, ("did you mean max_model_len?",)),
    ("kv_cache_type", [realtime(kv_cache_type="fp8")], {}, ("did you mean kv_cache_dtype?",)),
    ("tensor_parallel", [realtime(tensor_parallel=2)], {}, (".engine_args.tensor_parallel:", "has no such argument")),
    ("prefix caching as yes", [realtime(enable_prefix_caching="yes")], {},
     (".engine_args.enable_prefix_caching: 'yes' is not true or false",)),
    ("enforce_eager as a string", [realtime(enforce_eager="true")], {}, ("'true' is not true or false",)),
    ("utilization as a percentage", [realtime(gpu_memory_utilization="90%")], {},
     (".engine_args.gpu_memory_utilization: '90%' is not a number such as 0.9",)),
    ("utilization as 90", [realtime(gpu_memory_utilization=90)], {}, ("90 is not a fraction of the card",)),
    ("utilization 0", [realtime(gpu_memory_utilization=0)], {}, ("0 is not a fraction of the card",)),
    ("max_num_seqs as a string", [realtime(max_num_seqs="16")], {}, (".engine_args.max_num_seqs: '16' is not an integer",)),
    ("max_num_seqs as a fraction", [realtime(max_num_seqs=16.5)], {}, ("16.5 is not an integer",)),
    ("max_model_len as words", [realtime(max_model_len="four thousand")], {}, ("is not an integer (or such as 32k)",)),
    ("block_size as a word", [realtime(block_size="big")], {}, (".engine_args.block_size: 'big' is not an integer",)),
    ("dtype half-float", [realtime(dtype="half-float")], {}, ("'half-float' is not one of vllm 0.33.0's choices",)),
    ("dtype float8", [realtime(dtype="float8")], {}, (".engine_args.dtype", "float8 is not a dtype vLLM accepts")),
    ("enable_flash_attn_3", [realtime(enable_flash_attn_3=True)], {}, (".engine_args.enable_flash_attn_3", "remove it")),
    ("swap_space", [realtime(swap_space=4)], {}, (".engine_args.swap_space", "removed in 0.18", "remove it")),
    ("disable_log_requests", [realtime(disable_log_requests=True)], {}, ("removed in 0.17", "remove it")),
    ("compilation_config not JSON", [realtime(compilation_config="{level: 3")], {}, ("is not a mapping",)),
    ("max_model_len above the model's", [realtime(max_model_len=65536)], {"facts": gpus("4090")},
     (".engine_args.max_model_len: 65,536 is above model", "lower max_model_len to 32,768 or less")),
    ("max_model_len beyond the KV cache", [realtime(max_model_len=131072)], {"model_list": BF16_LLAMA},
     (".engine_args.max_model_len", "lower max_model_len to")),
    ("tensor parallel 2 on one GPU", [realtime(tensor_parallel_size=2)], {},
     (".engine_args.tensor_parallel_size: tensor_parallel_size 2 but the scene lists 1 GPU", "set tensor_parallel_size")),
    ("tensor parallel 3", [{"name": "realtime", "gpus": [0, 1, 2], "engine_args": {"tensor_parallel_size": 3}}],
     {"facts": gpus("3090", "3090", "3090")}, ("does not divide model", "use a tensor_parallel_size of 1, 2, 4 or 28")),
    ("tensor parallel over a 3090 and a 4090", [{"name": "realtime", "gpus": [0, 1]}], {"facts": gpus("3090", "4090")},
     (".gpus: GPU 0 (NVIDIA GeForce RTX 3090) and GPU 1 (NVIDIA GeForce RTX 4090) differ", "cards of one model")),
    ("two engines on GPU 0", [realtime(), {"name": "batch", "gpus": [0]}], {},
     ("GPU 0 (NVIDIA GeForce RTX 3090", "give each scene its own GPU")),
    ("a GPU the host lacks", [{"name": "realtime", "gpus": [2]}], {}, ("asks for GPU [2] but the host has [0, 1]",)),
    ("fp8 KV with Triton on a 3090", [realtime(kv_cache_dtype="fp8", attention_backend="TRITON_ATTN")], {},
     (".engine_args.attention_backend", "drop attention_backend")),
    ("bfloat16 on a T4", [realtime(dtype="bfloat16")], {"facts": gpus("t4")}, ("bfloat16 needs sm_80", "float16")),
    ("engine_arg instead of engine_args", [{"name": "realtime", "engine_arg": {"max_num_seqs": 8}}], {},
     ("vllm_scenes_list[name=realtime]: unknown key 'engine_arg'; did you mean engine_args?",)),
    ("an engine argument at the scene's top", [{"name": "realtime", "max_num_seqs": 8}], {},
     ("unknown key 'max_num_seqs'; engine arguments go under engine_args",)),
    ("engine_args as a list", [{"name": "realtime", "engine_args": ["max_num_seqs=8"]}], {}, ("must be a mapping",)),
    ("a custom preset's typo", [{"name": "nightly", "preset": "night", "port": 8100}],
     {"custom": {"night": {"engine_arg": {"max_num_seqs": 8}}}},
     ("vllm_scenes_custom_presets.night", "unknown key 'engine_arg'; did you mean engine_args?")),
    ("a custom preset's misspelt engine argument", [{"name": "nightly", "preset": "night", "port": 8100}],
     {"custom": {"night": {"engine_args": {"gpu_memory_utilizaton": 0.5}}}}, ("did you mean gpu_memory_utilization?",)),
    ("an unknown preset", [{"name": "fast"}], {}, ("no preset 'fast'", "or add it to vllm_scenes_custom_presets")),
    ("a model the host lacks", [{"name": "realtime", "model": "llama"}], {}, ("model 'llama' is not among",)),
    ("port as a string", [{"name": "realtime", "port": "8000"}], {}, ("port '8000' must be an integer 1..65535",)),
    ("port out of range", [{"name": "realtime", "port": 70000}], {}, ("port 70000 must be an integer 1..65535",)),
    ("gpus as a string", [{"name": "realtime", "gpus": "0"}], {}, ("gpus '0' must be a list",)),
    ("a name with a space", [{"name": "Real Time"}], {}, ("scene name 'Real Time' must match",)),
    ("two scenes on one port", [{"name": "realtime"}, {"name": "batch", "port": 8000, "gpus": [1]}], {},
     ("share port 8000", "give each scene its own port")),
    ("the port set in engine_args", [realtime(port=9000)], {}, ("engine_args must not set ['port']",)),
    ("the api key set in engine_args", [realtime(api_key="secret")], {}, ("engine_args must not set ['api-key']",)),
    ("a memory budget as a string", [{"name": "realtime", "memory_budget_gib": "21.6"}], {},
     ("memory_budget_gib '21.6' must be a positive number",)),
    ("a scene on all interfaces", [{"name": "realtime", "host": "0.0.0.0"}], {}, ("0.0.0.0", "127.0.0.1")),
    # Strings that would break the unit, the env file or the config they land in.
    ("a served name with a space", [{"name": "realtime", "served_model_name": "qwen 7b"}], {},
     ("served_model_name 'qwen 7b' must be 1-128 of",)),
    ("a listen address that is a host name", [{"name": "realtime", "host": "127.0.0.1.example.net"}], {},
     ("[name=realtime]: host '127.0.0.1.example.net' must be an IP address",)),
    ("a newline in an env value", [{"name": "realtime", "env": {"OMP_NUM_THREADS": "8\nLD_PRELOAD=/tmp/x.so"}}], {},
     (".env.OMP_NUM_THREADS must be a string or number", "without control characters")),
    ("a % in an env value", [{"name": "realtime", "env": {"HF_HOME": "/data/%h"}}], {},
     (".env.HF_HOME must be", "or % (systemd")),
    ("a quote in an env value", [{"name": "realtime", "env": {"X": 'a" ExecStartPre=/bin/sh'}}], {},
     (".env.X must be",)),
    ("an env name with =", [{"name": "realtime", "env": {"A=B": "1"}}], {}, (".env: 'A=B' must be letters, digits",)),
    ("a bool as an env value", [{"name": "realtime", "env": {"VLLM_USE_V1": True}}], {}, (".env.VLLM_USE_V1 must be",)),
    ("an api_key_var that is no variable name", [{"name": "realtime", "api_key_var": "vault-key"}], {},
     ("api_key_var 'vault-key' must name a variable",)),
]


@pytest.mark.parametrize(("scene_list", "extra", "needles"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_each_mistake_is_one_line_naming_host_variable_and_fix(scene_list: list[Any], extra: dict[str, Any],
                                                               needles: tuple[str, ...]) -> None:
    """The mistake is refused with exactly one line that starts with the host and says what to change."""
    found = refusals(copy.deepcopy(scene_list), **extra)
    assert len(found) == 1, found
    assert found[0].startswith(f"{HOST}: ") and "\n" not in found[0], found
    for needle in needles:
        assert needle in found[0], (needle, found[0])


def test_there_are_at_least_forty_mistakes_and_the_example_passes() -> None:
    """The table covers at least 40 mistakes, and the example inventory's own scenes raise nothing."""
    assert len(MISTAKES) >= 40
    assert refusals([{"name": "realtime", "gpus": [0]}, {"name": "batch", "gpus": [1]}]) == []
