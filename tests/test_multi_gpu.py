"""Hosts with several cards: one scene per GPU (gpus: all), tensor parallel over PCIe (the split plan, the refusals,
P2P from nvidia-smi's matrix or the registry, NCCL settings, slow links), on GPU facts parsed from real captures."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from conftest import REPO, load_as

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards, hardware, planner, scenes

gpu_utils = load_as("ansible.module_utils.vllm_fleet_gpu", REPO / "plugins" / "module_utils" / "vllm_fleet_gpu.py")
DATA = REPO / "tests" / "data" / "nvidia"
HOST = "gpu-2x3090"
MODELS = [{"name": "qwen32", "repo": "Qwen/Qwen2.5-32B-Instruct-AWQ"},
          {"name": "qwen", "repo": "Qwen/Qwen2.5-7B-Instruct-AWQ"}]
BY_NAME = scenes.models_by_name(MODELS, "/var/lib/vllm/models")
# Two RTX 3090 without P2P, as nvidia-smi topo -p2p r prints it on consumer cards.
NO_P2P = "        GPU0    GPU1\n GPU0   X       NS\n GPU1   NS      X\n"
OK_P2P = NO_P2P.replace("NS", "OK")


def data(name: str) -> str:
    """A capture from tests/data/nvidia."""
    return (DATA / name).read_text()


def host_facts(capture: str = "smi-2x-rtx3090.csv", topology: Optional[str] = NO_P2P,
               links: Optional[str] = None) -> dict[str, Any]:
    """The vllm_fleet_gpus fact the module makes from a real nvidia-smi capture and the given matrix and links."""
    return gpu_utils.gpu_facts(gpu_utils.CommandResult(0, data(capture), ""), None, [], None,
                               cards.matchers(), links, topology)


def resolve(scene_list: list[Any], facts: dict[str, Any]) -> list[dict[str, Any]]:
    """Resolve a host's scenes as the vllm_scenes role does: per-GPU expansion, presets, budgets, GPU settings."""
    return scenes.host_scenes(scene_list, cards.presets(), BY_NAME, facts, f"{HOST}: vllm_scenes_list")


def check(resolved: list[dict[str, Any]], facts: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Plan the scenes and run every hardware rule, as playbooks/plan.yml does."""
    plans = planner.plan_host(resolved, HOST, facts, "cuda", "0.33.0", MODELS)
    return plans, hardware.problems(HOST, resolved, plans, facts, "cuda", "0.33.0")


def big(gpus: list[int], **engine_args: Any) -> dict[str, Any]:
    """Qwen2.5-32B-Instruct-AWQ at 0.90 and max_model_len 32,768 on the given GPUs."""
    args = {"gpu_memory_utilization": 0.90, "max_model_len": 32768, **engine_args}
    return {"name": "realtime", "model": "qwen32", "gpus": gpus, "engine_args": args}


def test_32b_awq_splits_over_two_3090s() -> None:
    """TP=2 on two 3090s: half the weights and a KV cache on each card that holds more than two full sequences; the
    plan says how the cards talk."""
    facts = host_facts()
    resolved = resolve([big([0, 1])], facts)
    plans, found = check(resolved, facts)
    plan = plans[0]
    assert found["errors"] == [] and plan["fits"] and plan["tensor_parallel_size"] == 2
    assert plan["weights_gib"] == pytest.approx(9.1, abs=0.05)  # 18.2 GiB split in two
    assert plan["kv_tokens"] >= 2 * 32768 and plan["kv_bytes_per_token"] == 2 * 64 * 4 * 128 * 2
    table = planner.plan_table(plans)
    assert "split over 2 cards: 9.10 GiB of weights and" in table
    assert "no P2P between the cards: NCCL_P2P_DISABLE=1, custom all-reduce off" in table


def test_32b_awq_on_one_3090_is_refused_with_the_fix() -> None:
    """On one card 18.2 GiB of weights leave too little KV cache for one 32,768-token sequence: refused, naming the
    host, the variable and the fixes."""
    facts = host_facts()
    _, found = check(resolve([big([0])], facts), facts)
    [error] = found["errors"]
    assert error.startswith(f"{HOST}: vllm_scenes_list[name=realtime].engine_args.max_model_len: one 32,768-token")
    assert "18.2 GiB of weights" in error and "lower max_model_len to" in error


@pytest.mark.parametrize(("scene", "capture", "needles"), [
    (big([0, 1], tensor_parallel_size=3), "smi-2x-rtx3090.csv",
     ("tensor_parallel_size 3 but the scene lists 2 GPUs", "does not divide model qwen32's 40 attention heads")),
    (big([0], tensor_parallel_size=2), "smi-2x-rtx3090.csv", ("tensor_parallel_size 2 but the scene lists 1 GPU",)),
    (big([0, 1]), "smi-rtx5090-rtx3090.csv", ("GPU 0 (NVIDIA GeForce RTX 5090) and GPU 1 (NVIDIA GeForce RTX 3090) "
                                              "differ",)),
    (big([0, 2]), "smi-2x-rtx3090.csv", ("asks for GPU [2] but the host has [0, 1]",)),
])
def test_tensor_parallel_refusals(scene: dict[str, Any], capture: str, needles: tuple[str, ...]) -> None:
    """TP above the GPU count, heads it cannot split, TP with one GPU listed, mixed cards, a GPU the host lacks: each
    refused with host, variable and fix."""
    facts = host_facts(capture)
    _, found = check(resolve([scene], facts), facts)
    for needle in needles:
        assert any(needle in error and error.startswith(f"{HOST}: ") for error in found["errors"]), (needle, found)


def test_p2p_from_the_matrix_then_the_registry() -> None:
    """nvidia-smi's matrix decides; without one the registry's expectation does (GeForce cards: none; workstation and
    data-centre cards: P2P); an unknown card counts as unknown."""
    assert scenes.peer_to_peer(host_facts(topology=NO_P2P), [0, 1]) is False
    assert scenes.peer_to_peer(host_facts(topology=OK_P2P), [0, 1]) is True
    assert scenes.peer_to_peer(host_facts(topology=None), [0, 1]) is False  # two 3090s
    a6000 = {"gpus": [{"index": i, "name": "NVIDIA RTX A6000", "compute_capability": "8.6"} for i in (0, 1)]}
    assert scenes.peer_to_peer(a6000, [0, 1]) is True
    unknown = {"gpus": [{"index": i, "name": "NVIDIA GeForce RTX 3080", "compute_capability": "8.6"} for i in (0, 1)]}
    assert scenes.peer_to_peer(unknown, [0, 1]) is None


def test_nccl_settings_only_where_p2p_is_absent_and_the_users_win() -> None:
    """Without P2P a TP scene gets NCCL_P2P_DISABLE=1 and custom all-reduce off; GeForce cards whose P2P a patched
    driver turned on (a real matrix) keep NCCL's P2P but not custom all-reduce; workstation cards with P2P keep both;
    every TP scene bootstraps NCCL and Gloo on loopback; one card gets nothing; a value the scene sets itself wins."""
    loopback = {"NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}
    [no_p2p] = resolve([big([0, 1])], host_facts(topology=NO_P2P))
    assert no_p2p["env"] == {**loopback, "NCCL_P2P_DISABLE": "1"}
    assert no_p2p["engine_args"]["disable-custom-all-reduce"] is True
    patched = host_facts(topology=data("topo-p2p-rw-2x-rtx3090-patched-ok.txt"))
    assert patched["p2p"] == [["X", "OK"], ["OK", "X"]]
    [geforce] = resolve([big([0, 1])], patched)
    assert "NCCL_P2P_DISABLE" not in geforce["env"] and geforce["engine_args"]["disable-custom-all-reduce"] is True
    a6000 = host_facts("smi-rtx-a6000.csv", topology=None)
    a6000["gpus"].append({**a6000["gpus"][0], "index": 1})
    [workstation] = resolve([big([0, 1])], a6000)
    assert workstation["env"] == loopback
    assert "disable-custom-all-reduce" not in workstation["engine_args"]
    [one] = resolve([big([0])], host_facts())
    assert not set(one["env"]) & {"NCCL_P2P_DISABLE", *loopback}
    assert "disable-custom-all-reduce" not in one["engine_args"]
    own_env = {"NCCL_P2P_DISABLE": "0", "NCCL_SOCKET_IFNAME": "=ib0"}
    own = {**big([0, 1], disable_custom_all_reduce=False), "env": own_env}
    [kept] = resolve([own], host_facts(topology=NO_P2P))
    assert kept["env"] == {**loopback, **own_env}
    assert kept["engine_args"]["disable-custom-all-reduce"] is False


@pytest.mark.parametrize(("capture", "p2p"), [("topo-p2p-r-8x-h100-ok.txt", True), ("topo-p2p-r-2x-l4-cns.txt", False),
                                              ("topo-p2p-rw-2x-rtx5090-gns.txt", False),
                                              ("topo-p2p-rw-2x-rtx3090-patched-ok.txt", True)])
def test_p2p_from_real_matrices(capture: str, p2p: bool) -> None:
    """Real matrices (published with spaces for tabs, or tabs; with and without the DR legend line): OK everywhere
    is P2P; CNS or GNS between two cards is none."""
    matrix = gpu_utils.parse_p2p_matrix(data(capture))
    assert matrix is not None and all(row[i] == "X" for i, row in enumerate(matrix))
    assert scenes.peer_to_peer({"p2p": matrix, "gpus": []}, [0, 1]) is p2p


def test_a_5090_and_a_3090_ti_are_named_and_refused_together() -> None:
    """The real 5090 + 3090 Ti host: each card its own profile, and tensor parallel over both refused as mixed."""
    facts = host_facts("smi-rtx5090-rtx3090ti.csv", topology=None)
    assert [g["profile"] for g in facts["gpus"]] == ["rtx5090", "rtx3090ti"]
    _, found = check(resolve([big([0, 1])], facts), facts)
    assert any("differ: tensor parallel runs every rank" in error for error in found["errors"])


def test_a_slow_link_under_tensor_parallel_is_a_warning() -> None:
    """A card whose slot gives less than Gen3 x8 warns a TP scene (judged by the link's maximum, not its idle speed);
    one-card scenes are not warned."""
    links = "0, 0x220410DE, 1, 16, 4, 16\n1, 0x220410DE, 1, 4, 3, 4\n"
    facts = host_facts(links=links)
    assert [g["pci_id"] for g in facts["gpus"]] == ["10de:2204", "10de:2204"]
    _, found = check(resolve([big([0, 1])], facts), facts)
    [warning] = [w for w in found["warnings"] if "PCIe" in w]
    assert "GPU 1 (NVIDIA GeForce RTX 3090) is on a PCIe Gen3 x4 link, below Gen3 x8" in warning
    _, alone = check(resolve([{"name": "batch", "model": "qwen", "gpus": [1]}], facts), facts)
    assert not [w for w in alone["warnings"] if "PCIe" in w]


def test_gpus_all_is_one_scene_per_card_on_free_ports() -> None:
    """gpus: all on two cards makes realtime-gpu0 and realtime-gpu1, each on its own card and port, skipping the port
    another scene of the host claims; each is planned on its own card."""
    facts = host_facts()
    resolved = resolve([{"name": "realtime", "gpus": "all", "model": "qwen"}, {"name": "batch", "model": "qwen",
                                                                               "gpus": [1]}], facts)
    assert [(s["name"], s["gpus"], s["port"], s["preset"]) for s in resolved] == [
        ("realtime-gpu0", [0], 8000, "realtime"), ("realtime-gpu1", [1], 8002, "realtime"), ("batch", [1], 8001, "batch")]
    plans, found = check(resolved[:2], facts)
    assert found["errors"] == [] and [p["device"] for p in plans] == ["GPU 0 RTX 3090", "GPU 1 RTX 3090"]


def test_gpus_all_on_a_mixed_host_plans_each_card_by_its_profile() -> None:
    """A 5090 and a 3090: each per-GPU scene is planned on its own card's memory and bandwidth."""
    facts = host_facts("smi-rtx5090-rtx3090.csv")
    plans, found = check(resolve([{"name": "realtime", "gpus": "all", "model": "qwen"}], facts), facts)
    assert [p["profile"] for p in plans] == ["rtx5090", "rtx3090"]
    assert plans[0]["budget_gib"] > plans[1]["budget_gib"] and plans[0]["decode_floor_ms"] < plans[1]["decode_floor_ms"]


def test_gpus_all_without_gpu_facts_is_refused() -> None:
    """Without GPU facts (the lab, or no preflight) gpus: all cannot be expanded: one line naming the variable and fix."""
    with pytest.raises(scenes.SceneError, match=r"gpus: all needs the host's GPU facts .*list the GPU indexes"):
        resolve([{"name": "realtime", "gpus": "all", "model": "qwen"}], {"gpus": []})
