"""The hardware registry: every fact the kit holds about a GPU model, and the scene presets with their SLO gates.

The facts module (through vllm.fleet.cards_matchers), the planner, the hardware rules, verification and the docs read
this file; a test fails if any of them holds a card fact of its own. Adding a card is one Profile here plus its
nvidia-smi capture in tests/data/nvidia. Sources of each figure: docs/hardware.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .errors import FleetError

Gates = dict[str, float]

# What CUDA does not hand out of nvidia-smi's memory.total on a card without a measured figure: roughly 250-900 MiB
# on the cards whose figures are public.
GENERIC_RESERVED_MIB = 512
# vLLM's CUDA wheels by release: from 0.20 on CUDA 13 builds, up to 0.18 CUDA 12 (0.19's build is not on record, so
# it gets the stricter one); the oldest driver branch each CUDA major runs on (NVIDIA's CUDA release notes).
DRIVER_BRANCH_BY_CUDA: dict[int, int] = {12: 525, 13: 580}
FIRST_CUDA13_RELEASE = (0, 19)


def _gates(median_ttft: float, p99_ttft: float, median_tpot: float, p99_tpot: float, throughput: float) -> Gates:
    """Return one preset's SLO gates for the role's default load test (no request may fail)."""
    return {"median_ttft_ms": median_ttft, "p99_ttft_ms": p99_ttft, "median_tpot_ms": median_tpot,
            "p99_tpot_ms": p99_tpot, "max_failed": 0, "min_output_throughput": throughput}


@dataclass(frozen=True)
class Preset:
    """A scene preset: where it listens and the engine arguments it starts from."""

    port: int
    engine_args: dict[str, Any]


# Built-in presets from the field reports (docs/sources.md): realtime favours latency, batch throughput. Their gates
# live in each Profile below, keyed by preset.
PRESETS: dict[str, Preset] = {
    "realtime": Preset(port=8000, engine_args={"gpu_memory_utilization": 0.90, "max_model_len": 4096, "max_num_seqs": 16,
                                               "enable_prefix_caching": True, "enable_chunked_prefill": True}),
    "batch": Preset(port=8001, engine_args={"gpu_memory_utilization": 0.95, "max_model_len": 4096, "max_num_seqs": 64,
                                            "enable_prefix_caching": True, "enable_chunked_prefill": True}),
}


@dataclass(frozen=True)
class Profile:
    """One GPU model: how nvidia-smi names it, what it holds and runs, and the gates its scenes are held to."""

    key: str
    names: tuple[str, ...]  # nvidia-smi's name, lower case, without the "NVIDIA " prefix older drivers omit
    pci_ids: tuple[str, ...]  # PCI vendor:device ids, lower case (pci.ids)
    architecture: str
    compute_capability: int  # 86 for 8.6
    memory_mib: Optional[int]  # nvidia-smi's memory.total
    bandwidth_gbps: float  # peak memory bandwidth, GB/s (1e9 B/s), the vendor's data sheet
    driver_branch: int  # the oldest driver branch that supports the card
    temperature_limit_c: Optional[int]  # the vendor's maximum GPU temperature; None where no figure is published
    p2p: bool  # peer-to-peer over PCIe expected where nvidia-smi's P2P matrix is not known
    consumer: bool = True
    reserved_mib: int = GENERIC_RESERVED_MIB  # what CUDA does not hand out of memory_mib
    gates: dict[str, Gates] = field(default_factory=dict)  # measured gates per preset; empty: derived (gates_for)
    silicon_data: bool = False  # the planner's memory model was checked against a real vLLM run on this card

    @property
    def fp8_kv(self) -> str:
        """Return how the card holds an FP8 KV cache (fp8_kv_mode)."""
        return fp8_kv_mode(self.compute_capability)

    @property
    def flash_attn(self) -> int:
        """Return the newest FlashAttention the card runs (flash_attn_version)."""
        return flash_attn_version(self.compute_capability)

    @property
    def marlin(self) -> bool:
        """Tell whether vLLM's Marlin kernels run on the card (runs_marlin)."""
        return runs_marlin(self.compute_capability)


# What a compute capability runs: FP8 arithmetic from Ada (sm_89; Ampere stores FP8 only), FlashAttention 3 on Hopper
# alone, bfloat16 and vLLM's Marlin kernels from Ampere (sm_80).
FP8_NATIVE_SM = 89
FLASH_ATTN3_SM = 90
AMPERE_SM = 80


def fp8_kv_mode(compute_capability: int) -> str:
    """Return how a card holds an FP8 KV cache: native FP8 arithmetic, or storage only."""
    return "native" if compute_capability >= FP8_NATIVE_SM else "storage"


def flash_attn_version(compute_capability: int) -> int:
    """Return the newest FlashAttention a card runs: 3 on Hopper only, 2 elsewhere."""
    return 3 if compute_capability == FLASH_ATTN3_SM else 2


def runs_marlin(compute_capability: int) -> bool:
    """Tell whether vLLM's Marlin kernels (awq_marlin, gptq_marlin) run on a card."""
    return compute_capability >= AMPERE_SM


def runs_bfloat16(compute_capability: int) -> bool:
    """Tell whether a card computes in bfloat16."""
    return compute_capability >= AMPERE_SM


# Gates of the two cards with field reports: expected value x 2 (medians), x 3 (p99), throughput at 50% (docs/slo.md).
_RTX3090_GATES = {"realtime": _gates(2100, 3100, 15, 122, 200), "batch": _gates(6200, 12300, 158, 336, 220)}
_RTX4090_GATES = {"realtime": _gates(1000, 1400, 14, 65, 380), "batch": _gates(2800, 5500, 83, 168, 460)}
# The lab (2 cores, tiny model, three scenes on one VM). Its latency swings tenfold with load: batch TTFT p50 was
# 195 ms under `make lab` and 2,099 ms in a CI run (its first wave of 64 pays CPU compilation). These gates catch a
# scene that hangs, fails requests or crawls, not a slow one, with about 3x room over the worst figure measured on an
# AVX2 lab (whose throughput is 3-5x below the AVX-512 lab's); docs/slo.md lists the measured figures.
CPU_GATES: dict[str, Gates] = {"realtime": _gates(2000, 10000, 100, 250, 100), "batch": _gates(10000, 15000, 200, 500, 200)}
CPU_PROFILE = "cpu"
GENERIC = "generic"
# Cards without measured gates are held to this card's, scaled by memory bandwidth when they are slower.
GATES_REFERENCE = "rtx3090"

PROFILES: dict[str, Profile] = {p.key: p for p in (
    Profile("rtx3090", ("geforce rtx 3090",), ("10de:2204",), "Ampere GA102", 86, 24576, 936.0, 455, 93, False,
            reserved_mib=318, gates=_RTX3090_GATES),
    Profile("rtx3090ti", ("geforce rtx 3090 ti",), ("10de:2203",), "Ampere GA102", 86, 24564, 1008.0, 510, 92, False),
    Profile("rtx4090", ("geforce rtx 4090",), ("10de:2684",), "Ada AD102", 89, 24564, 1008.0, 520, 90, False,
            reserved_mib=346, gates=_RTX4090_GATES),
    Profile("rtx4080", ("geforce rtx 4080",), ("10de:2704",), "Ada AD103", 89, 16376, 716.8, 525, 90, False),
    Profile("rtx4080super", ("geforce rtx 4080 super",), ("10de:2702", "10de:2703"), "Ada AD103", 89, 16376, 736.0,
            545, 90, False),
    Profile("rtx4070tisuper", ("geforce rtx 4070 ti super",), ("10de:2705", "10de:2689"), "Ada AD103", 89, 16376,
            672.0, 545, 90, False),
    Profile("rtx5090", ("geforce rtx 5090",), ("10de:2b85",), "Blackwell GB202", 120, 32607, 1792.0, 570, 90, False),
    Profile("rtxa6000", ("rtx a6000",), ("10de:2230",), "Ampere GA102", 86, 49140, 768.0, 455, None, True,
            consumer=False),
    Profile("rtx6000ada", ("rtx 6000 ada generation",), ("10de:26b1",), "Ada AD102", 89, 49140, 960.0, 525, None, True,
            consumer=False),
    # Data-centre cards a host may also have: matched so the planner knows their bandwidth; held to generic gates.
    Profile("h200", ("h200",), ("10de:2335",), "Hopper GH100", 90, 143771, 4800.0, 550, None, True, consumer=False,
            silicon_data=True),
    Profile("h100", ("h100 80gb hbm3",), ("10de:2330",), "Hopper GH100", 90, 81559, 3350.0, 525, None, True,
            consumer=False),
    Profile("h100pcie", ("h100 pcie",), ("10de:2331",), "Hopper GH100", 90, 81559, 2000.0, 525, None, True,
            consumer=False),
    Profile("h100nvl", ("h100 nvl",), ("10de:2321",), "Hopper GH100", 90, 95830, 3900.0, 525, None, True,
            consumer=False),
    Profile("a100", ("a100-sxm4-80gb", "a100 80gb pcie"), ("10de:20b2", "10de:20b5"), "Ampere GA100", 80, 81920,
            2039.0, 450, None, True, consumer=False),
    Profile("a100-40gb", ("a100-sxm4-40gb", "a100-pcie-40gb"), ("10de:20b0", "10de:20f1"), "Ampere GA100", 80, 40960,
            1555.0, 450, None, True, consumer=False),
    Profile("l40s", ("l40s",), ("10de:26b9",), "Ada AD102", 89, 46068, 864.0, 525, None, True, consumer=False),
    Profile("a10", ("a10",), ("10de:2236",), "Ampere GA102", 86, 23028, 600.0, 460, None, True, consumer=False),
    Profile("l4", ("l4",), ("10de:27b8",), "Ada AD104", 89, 23034, 300.0, 525, None, True, consumer=False),
    Profile("t4", ("tesla t4",), ("10de:1eb8",), "Turing TU104", 75, 15360, 320.0, 410, None, True, consumer=False),
)}


def known(profile: str) -> Optional[Profile]:
    """Return a profile of the registry by key (None for generic, cpu and anything unknown)."""
    return PROFILES.get(str(profile))


def _model_name(name: str) -> str:
    """Return an nvidia-smi name as the registry spells it: lower case, single spaces, no "NVIDIA " prefix."""
    model = " ".join(str(name).split()).lower()
    return model.removeprefix("nvidia ")


def capability_number(text: Any) -> Optional[int]:
    """Return a compute capability such as "8.6" (or 86) as one number, None when it is not one."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    match = re.fullmatch(r"(\d+)\.(\d+)", str(text or ""))
    return int(match.group(1)) * 10 + int(match.group(2)) if match else None


def capability_text(number: int) -> str:
    """Return a compute capability number as nvidia-smi prints it (86 -> "8.6", 120 -> "12.0")."""
    return f"{number // 10}.{number % 10}"


def match(name: str, compute_capability: Any = None, pci_id: Optional[str] = None) -> str:
    """Return the profile of a GPU: by PCI id, else by exact name; a card whose silicon disagrees (a renamed or
    virtual device), or any other card, is generic."""
    capability = capability_number(compute_capability)
    pci = str(pci_id or "").lower()
    for profile in PROFILES.values():
        if (pci and pci in profile.pci_ids) or (not pci and _model_name(name) in profile.names):
            return profile.key if capability in (None, profile.compute_capability) else GENERIC
    return GENERIC


def profile_of(gpu: dict[str, Any]) -> Optional[Profile]:
    """Return the profile of one GPU of the vllm_fleet_gpus fact: the one it names, else the one its name, PCI id and
    compute capability match (None for a card the registry does not know)."""
    return known(gpu.get("profile")) or known(match(str(gpu.get("name") or ""), gpu.get("compute_capability"),
                                                    gpu.get("pci_id")))


def compute_capability(gpu: dict[str, Any]) -> Optional[int]:
    """Return a GPU's compute capability as one number (8.6 -> 86): its profile's, else the fact's, else None."""
    known = profile_of(gpu)
    return known.compute_capability if known else capability_number(gpu.get("compute_capability"))


def matchers() -> dict[str, dict[str, Any]]:
    """Return what the facts module needs to name a host's cards: per profile its names, PCI ids and capability."""
    return {p.key: {"names": list(p.names), "pci_ids": list(p.pci_ids),
                    "compute_capability": capability_text(p.compute_capability)} for p in PROFILES.values()}


def gates_for(profile: str, preset: str) -> Optional[Gates]:
    """Return a profile's SLO gates for a preset: measured where the registry has them, else the reference card's with
    TPOT and throughput scaled by bandwidth for a slower card; None for a preset without gates."""
    if profile == CPU_PROFILE:
        return CPU_GATES.get(preset)
    card = known(profile)
    reference = PROFILES[GATES_REFERENCE]
    if card and card.gates:
        return dict(card.gates[preset]) if preset in card.gates else None
    base = reference.gates.get(preset)
    if base is None or card is None or card.bandwidth_gbps >= reference.bandwidth_gbps:
        return None if base is None else dict(base)
    slower = reference.bandwidth_gbps / card.bandwidth_gbps
    scaled = {key: round(value * slower) for key, value in base.items() if "tpot" in key}
    return {**base, **scaled, "min_output_throughput": round(base["min_output_throughput"] / slower)}


def slo_table() -> dict[str, dict[str, Gates]]:
    """Return the kit's SLO table: profile -> preset -> gates, for every profile, generic and the lab's cpu."""
    profiles = [*PROFILES, GENERIC, CPU_PROFILE]
    return {key: {preset: gates_for(key, preset) or {} for preset in PRESETS} for key in profiles}


def presets() -> dict[str, dict[str, Any]]:
    """Return the built-in presets in the shape of vllm_scenes_custom_presets."""
    return {name: {"port": p.port, "engine_args": dict(p.engine_args)} for name, p in PRESETS.items()}


def cuda_major(vllm_version: tuple[int, int]) -> int:
    """Return the CUDA major version of a vLLM release's CUDA wheels."""
    return 13 if vllm_version >= FIRST_CUDA13_RELEASE else 12


def driver_branch_for_cuda(cuda: Any) -> int:
    """Return the oldest driver branch a CUDA release (its major, or MAJOR.MINOR) runs on."""
    major = str(cuda).partition(".")[0]
    if not major.isdigit() or int(major) not in DRIVER_BRANCH_BY_CUDA:
        raise FleetError(f"CUDA {cuda!r}: the kit knows the driver branch of CUDA "
                         f"{' and '.join(map(str, DRIVER_BRANCH_BY_CUDA))} only; set a CUDA release MAJOR.MINOR of those")
    return DRIVER_BRANCH_BY_CUDA[int(major)]
