"""Fleet compile cache: what decides whether one host's compiled artefacts are valid on another, and who shares them."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Optional

# 2: bundles carry vllm/modelinfos and exact file times; a store's format-1 bundles (without them) are never used.
KEY_FORMAT = 2
# The parts of a scene's cache directory that hold compiled artefacts: the unit points vLLM (VLLM_CACHE_ROOT),
# Inductor, Triton, FlashInfer (FLASHINFER_WORKSPACE_BASE) and humming-kernels (HUMMING_CACHE_DIR) there, and keeps
# Inductor's precompiled header there through its link. vLLM's modelinfos (its model-class inspection, keyed by a
# hash of the model's code) spares a subprocess at start: 26 s of a seeded start on the H200 proof. The hub cache
# (huggingface) and the rest stay with the host.
CACHE_PARTS = ("vllm/torch_compile_cache", "vllm/modelinfos", "inductor", "triton", "flashinfer", "humming/cache",
               "precompiled_headers")
CUDA_ONLY_PARTS = ("triton", "flashinfer", "humming/cache")
# Engine arguments that change no compiled graph or kernel: where a scene listens, how it logs, how much memory it takes.
COMPILE_IRRELEVANT_ARGS = frozenset({
    "host", "port", "api-key", "served-model-name", "uvicorn-log-level", "disable-uvicorn-access-log",
    "enable-log-requests", "max-log-len", "disable-log-stats", "allowed-origins", "allowed-methods", "allowed-headers",
    "ssl-keyfile", "ssl-certfile", "ssl-ca-certs", "root-path", "middleware", "enable-server-load-tracking",
    "gpu-memory-utilization", "kv-cache-memory-bytes", "hf-token",
})
# Environment that places a scene on this host's cores and cards or sizes its memory, and changes no compiled code.
HOST_LOCAL_ENV = frozenset({"VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE", "CUDA_VISIBLE_DEVICES"})
# CPU flags that decide which vector code Inductor and vLLM's CPU kernels emit; the rest (hypervisor bits, mitigations)
# differs between machines that run the same code.
CPU_ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                 "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve")


def cache_parts(flavour: str) -> list[str]:
    """Return the parts of a scene's cache a bundle carries (the cpu flavour has no Triton, FlashInfer or humming)."""
    return list(CACHE_PARTS) if flavour == "cuda" else [p for p in CACHE_PARTS if p not in CUDA_ONLY_PARTS]


def cpu_isa(flags_line: str) -> list[str]:
    """Return the ISA flags that matter for compiled code, from /proc/cpuinfo's flags (or Features) line."""
    present = set(flags_line.split(":", 1)[-1].split())
    return [flag for flag in CPU_ISA_FLAGS if flag in present]


def platform(flavour: str, gpus_fact: Optional[dict[str, Any]], scene_gpus: list[int], cpu_flags: str,
             os_release: str) -> Optional[dict[str, Any]]:
    """Return what a host's compiled artefacts depend on: the OS, the CPU's ISA, and on cuda the scene's cards and
    the driver branch; None on cuda while the GPU facts do not name every card (no bundle is then safe to use)."""
    common = {"flavour": flavour, "os": os_release, "cpu_isa": cpu_isa(cpu_flags)}
    if flavour != "cuda":
        return common
    cards = {gpu.get("index"): gpu for gpu in (gpus_fact or {}).get("gpus", [])}
    used = [cards.get(i, {}) for i in scene_gpus]
    branch = (gpus_fact or {}).get("driver_branch")
    if not branch or not used or not all(card.get("name") and card.get("compute_capability") for card in used):
        return None
    return {**common, "driver_branch": branch,
            "gpus": [{"name": card["name"], "profile": card.get("profile"),
                      "compute_capability": str(card["compute_capability"])} for card in used]}


def model_digest(marker: Optional[dict[str, Any]]) -> str:
    """Return the digest of an installed model's verified files (its marker's manifest), or '' when unknown."""
    files = (marker or {}).get("files")
    if not files:
        return ""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def scene_key(scene: dict[str, Any], release: str, host_platform: Optional[dict[str, Any]], model: str,
              cache_dir: str, env: dict[str, Any]) -> dict[str, Any]:
    """Return a scene's bundle key: release, platform, model digest, compile-relevant engine args, environment (as a
    digest: it may hold secrets) and cache path."""
    engine_args = {k: v for k, v in scene["engine_args"].items() if k not in COMPILE_IRRELEVANT_ARGS}
    compile_env = {k: str(v) for k, v in {**env, **scene.get("env", {})}.items() if k not in HOST_LOCAL_ENV}
    return {
        "format": KEY_FORMAT,
        "scene": scene["name"],
        "release": release,
        "platform": host_platform,
        "model": model,
        "model_path": scene["model_path"],
        "engine_args": dict(sorted(engine_args.items())),
        "env": hashlib.sha256(json.dumps(compile_env, sort_keys=True).encode()).hexdigest(),
        # Compiled artefacts hold absolute paths of the scene's cache directory.
        "cache_dir": f"{cache_dir.rstrip('/')}/{scene['name']}",
    }


def bundle_name(key: dict[str, Any]) -> str:
    """Return the content-addressed name of a key's bundle: the scene's name and a digest of the whole key."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return f"{key['scene']}-{digest}"


def scene_bundles(scenes: list[dict[str, Any]], release: str, flavour: str, gpus_fact: Optional[dict[str, Any]],
                  probe: dict[str, Any], os_release: str, cache_dir: str,
                  env: dict[str, Any]) -> list[dict[str, Any]]:
    """Return per scene its key, bundle name ('' while its model is not installed) and whether its cache holds it.

    probe is what the vllm.fleet.compile_cache module's probe found on the host: cpu_flags, the models' markers by
    path, the bundle name each scene's cache records and whether its compile cache holds anything."""
    out = []
    for scene in scenes:
        model = model_digest((probe.get("models") or {}).get(scene["model_path"]))
        key = scene_key(scene, release, platform(flavour, gpus_fact, scene["gpus"], probe.get("cpu_flags", ""),
                                                 os_release), model, cache_dir, env)
        name = bundle_name(key) if model and key["platform"] else ""
        out.append({"scene": scene["name"], "name": name, "key": key,
                    "present": bool(name) and (probe.get("recorded") or {}).get(scene["name"]) == name
                    and bool((probe.get("compiled") or {}).get(scene["name"]))})
    return out


def seedable(bundles: list[dict[str, Any]], published: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the scenes whose cache lacks its bundle while the store has it, each with the store's index entry."""
    out = []
    for bundle in bundles:
        entry = published.get(bundle["name"]) if bundle["name"] and not bundle["present"] else None
        if isinstance(entry, dict) and entry.get("name") == bundle["name"]:
            out.append({**bundle, "published": entry})
    return out


def unpublished(bundles: list[dict[str, Any]], published: dict[str, Any], refused: list[str]) -> list[str]:
    """Return the bundle names this host compiled (its cache did not hold them before) that the store lacks, or holds
    only in a copy the host refused; a cache that already held its bundle packs nothing (pruned ones stay pruned)."""
    return [b["name"] for b in bundles if b["name"] and (b["name"] in refused or (
        not b["present"] and not isinstance(published.get(b["name"]), dict)))]


def packers(wanted: dict[str, list[str]]) -> dict[str, list[str]]:
    """Return, per host, the bundles it packs: each bundle wanted by several hosts is packed by the first of them."""
    taken: set[str] = set()
    plan: dict[str, list[str]] = {}
    for host, names in wanted.items():
        plan[host] = [name for name in dict.fromkeys(names) if name not in taken]
        taken.update(plan[host])
    return plan


def index_entries(texts: list[str]) -> dict[str, Any]:
    """Return the store's index entries by bundle name, from the texts of its NAME.json files (broken ones left out)."""
    entries: dict[str, Any] = {}
    for text in texts:
        try:
            entry = json.loads(text)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            entries[entry["name"]] = entry
    return entries
