"""The hardware registry (plugins/plugin_utils/cards.py): well-formed profiles, detection, gates, and card facts in
one place."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO, load_as

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards, verify

CONSUMER_CARDS = {"rtx3090", "rtx3090ti", "rtx4090", "rtx4080", "rtx4080super", "rtx4070tisuper", "rtx5090",
                  "rtxa6000", "rtx6000ada"}


def test_every_profile_is_well_formed() -> None:
    """Each profile has its key, names in the registry's spelling, PCI ids, a capability, bandwidth and driver floor."""
    assert CONSUMER_CARDS <= set(cards.PROFILES)
    for key, profile in cards.PROFILES.items():
        assert profile.key == key and re.fullmatch(r"[a-z0-9-]+", key)
        assert profile.names and all(name == " ".join(name.lower().split()) and not name.startswith("nvidia ")
                                     for name in profile.names)
        assert all(re.fullmatch(r"10de:[0-9a-f]{4}", pci) for pci in profile.pci_ids)
        assert 70 <= profile.compute_capability <= 120 and profile.bandwidth_gbps > 0
        assert profile.driver_branch >= 400 and (profile.memory_mib or 0) > 0
        assert profile.temperature_limit_c is None or 80 <= profile.temperature_limit_c <= 100
    names = [name for p in cards.PROFILES.values() for name in p.names]
    pcis = [pci for p in cards.PROFILES.values() for pci in p.pci_ids]
    assert len(names) == len(set(names)) and len(pcis) == len(set(pcis)), "a name or PCI id names two profiles"


def test_the_5090_and_the_48_gb_cards() -> None:
    """The RTX 5090 is Blackwell sm_120 with 32 GB; the A6000 and 6000 Ada hold 48 GB and expect P2P."""
    blackwell = cards.PROFILES["rtx5090"]
    assert (blackwell.compute_capability, blackwell.memory_mib, blackwell.fp8_kv) == (120, 32607, "native")
    assert not blackwell.p2p and blackwell.driver_branch >= 570
    for key in ("rtxa6000", "rtx6000ada"):
        assert cards.PROFILES[key].memory_mib == 49140 and cards.PROFILES[key].p2p
    assert cards.PROFILES["rtx3090"].fp8_kv == "storage" and cards.PROFILES["rtx4090"].fp8_kv == "native"
    assert cards.PROFILES["h200"].flash_attn == 3 and cards.PROFILES["rtx4090"].flash_attn == 2
    assert cards.PROFILES["t4"].marlin is False and cards.PROFILES["rtx3090"].marlin


@pytest.mark.parametrize(("name", "capability", "pci_id", "profile"), [
    ("NVIDIA GeForce RTX 3090", "8.6", None, "rtx3090"),
    ("NVIDIA GeForce RTX 3090 Ti", 86, None, "rtx3090ti"),
    ("NVIDIA GeForce RTX 4070 Ti SUPER", "8.9", "10de:2705", "rtx4070tisuper"),
    ("NVIDIA RTX 6000 Ada Generation", "8.9", None, "rtx6000ada"),
    ("NVIDIA GeForce RTX 5090", "8.9", None, "generic"),  # the silicon disagrees with the name
    ("NVIDIA GeForce RTX 3080", "8.6", None, "generic"),
    ("NVIDIA GeForce RTX 4090", None, "10de:2685", "generic"),  # a 4090 D that calls itself a 4090
])
def test_match_by_pci_id_then_name(name: str, capability: object, pci_id: str | None, profile: str) -> None:
    """The PCI id decides when the fact has one, the exact name otherwise; a disagreeing capability is generic."""
    assert cards.match(name, capability, pci_id) == profile


def test_matchers_are_the_registry() -> None:
    """What the facts module is given is each profile's names, PCI ids and capability as nvidia-smi prints it."""
    given = cards.matchers()
    assert set(given) == set(cards.PROFILES)
    assert given["rtx5090"] == {"names": ["geforce rtx 5090"], "pci_ids": ["10de:2b85"], "compute_capability": "12.0"}


def test_measured_gates_and_gates_derived_by_bandwidth() -> None:
    """The 3090 and 4090 keep their measured gates; a faster card without gates gets the reference card's; a slower
    one has its TPOT gates stretched and its throughput floor lowered by the bandwidth ratio; presets without gates
    have none."""
    reference = cards.gates_for("rtx3090", "realtime")
    assert reference == cards.PROFILES["rtx3090"].gates["realtime"]
    assert cards.gates_for("rtx5090", "realtime") == reference == cards.gates_for("generic", "realtime")
    slower = cards.gates_for("rtx4070tisuper", "realtime")
    ratio = 936.0 / 672.0
    assert slower["median_tpot_ms"] == round(reference["median_tpot_ms"] * ratio)
    assert slower["min_output_throughput"] == round(reference["min_output_throughput"] / ratio)
    assert slower["median_ttft_ms"] == reference["median_ttft_ms"]
    assert cards.gates_for("rtx3090", "nightly") is None and cards.gates_for("cpu", "batch") == cards.CPU_GATES["batch"]
    assert verify.DEFAULT_SLO == cards.slo_table()


def test_presets_and_driver_floors() -> None:
    """The built-in presets come whole from the registry; CUDA 13 builds need R580, CUDA 12 R525."""
    assert cards.presets()["realtime"] == {"port": 8000, "engine_args": cards.PRESETS["realtime"].engine_args}
    assert cards.presets()["batch"]["engine_args"]["max_num_seqs"] == 64
    assert (cards.cuda_major((0, 33)), cards.cuda_major((0, 18))) == (13, 12)
    assert (cards.driver_branch_for_cuda("13.0"), cards.driver_branch_for_cuda(12)) == (580, 525)


# Where a card fact must not be written: the kit's code, roles, playbooks and templates (docs, tests and inventories
# hold examples and data). The module's DOCUMENTATION and RETURN samples are documentation too.
CODE_DIRS = ("plugins", "roles", "playbooks", "templates", "tools", "benchmarks")
REGISTRY = REPO / "plugins" / "plugin_utils" / "cards.py"
DOC_BLOCK = re.compile(r'^(DOCUMENTATION|EXAMPLES|RETURN) = r?""".*?^"""', re.S | re.M)


def _card_facts() -> list[re.Pattern[str]]:
    """Return patterns of the registry's facts as another file would write them: names, profile keys, PCI ids,
    compute capabilities as sm_NN, bandwidths and driver floors written as R5xx."""
    facts = [re.compile(r"\bsm_?\d{2,3}\b")]
    for profile in cards.PROFILES.values():
        facts += [re.compile(re.escape(pci), re.I) for pci in profile.pci_ids]
        if not profile.consumer:  # data-centre names (l4, a10) and round bandwidths (600) are common words and numbers
            continue
        facts.append(re.compile(rf"\b{re.escape(profile.key)}\b"))
        facts += [re.compile(rf"\b{re.escape(name.removeprefix('geforce '))}\b", re.I) for name in profile.names]
        facts.append(re.compile(rf"\b{profile.bandwidth_gbps:g}\b(?!\.\d)"))
    facts += [re.compile(rf"\bR{branch}\b") for branch in cards.DRIVER_BRANCH_BY_CUDA.values()]
    return facts


def _code_files() -> list[Path]:
    """Return the kit's code files, the registry excepted."""
    found = [REPO / "site.yml"]
    for top in CODE_DIRS:
        found += [p for p in (REPO / top).rglob("*") if p.suffix in (".py", ".yml", ".yaml", ".j2") and p.is_file()]
    return [p for p in found if p != REGISTRY and "tests" not in p.relative_to(REPO).parts]


def test_card_facts_live_in_the_registry_only() -> None:
    """No file of the kit but cards.py writes a card's name, profile key, PCI id, sm_NN, bandwidth or driver floor."""
    facts = _card_facts()
    offenders = []
    for path in _code_files():
        text = DOC_BLOCK.sub("", path.read_text(errors="replace"))
        for number, line in enumerate(text.splitlines(), 1):
            hits = [m.group(0) for fact in facts for m in [fact.search(line)] if m]
            if hits:
                offenders.append(f"{path.relative_to(REPO)}:{number}: {hits} in {line.strip()[:100]!r}")
    assert not offenders, "card facts outside plugins/plugin_utils/cards.py:\n" + "\n".join(offenders)


def test_the_one_place_test_sees_a_restated_fact(tmp_path: Path) -> None:
    """The patterns find a card fact written the way the code used to write it."""
    facts = _card_facts()
    for line in ('{"rtx3090": {"compute_capability": 86, "bandwidth_gbps": 936.0}}', "FP8_NATIVE_SM = 89  # sm_89",
                 'KNOWN = {"geforce rtx 4090": "8.9"}', "return 580  # R580", "PCI 10de:2204"):
        assert any(fact.search(line) for fact in facts), line


def test_the_docs_tables_are_the_registry() -> None:
    """docs/hardware.md and docs/slo.md hold the registry's tables as tools/cards_table.py writes them, and a changed
    registry would make them differ."""
    table = load_as("cards_table", REPO / "tools" / "cards_table.py")
    for doc in table.DOCS:
        assert table.rendered(doc.read_text()) == doc.read_text(), f"run tools/cards_table.py --write ({doc.name})"
    changed = {**cards.PROFILES["rtx3090"].gates["realtime"], "median_tpot_ms": 99}
    assert "| rtx3090 | realtime | 2100 / 3100 | 99 / 122 |" not in table.gates_table()
    original = cards.PROFILES["rtx3090"].gates["realtime"]
    cards.PROFILES["rtx3090"].gates["realtime"] = changed
    try:
        assert "| rtx3090 | realtime | 2100 / 3100 | 99 / 122 |" in table.gates_table()
    finally:
        cards.PROFILES["rtx3090"].gates["realtime"] = original
