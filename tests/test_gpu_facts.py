"""GPU facts: the parsers on real nvidia-smi, /proc and lspci outputs, profile mapping, and the module run end to end."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import json

import pytest
import yaml

from conftest import REPO, load_as, run_module_main

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards

DATA = REPO / "tests" / "data" / "nvidia"
NOWHERE = "/nonexistent/vllm-fleet-test"


gpu = load_as("ansible.module_utils.vllm_fleet_gpu", REPO / "plugins" / "module_utils" / "vllm_fleet_gpu.py")
facts_module = load_as("ansible.modules.vllm_fleet_gpu_facts", REPO / "plugins" / "modules" / "gpu_facts.py")
# What the roles pass the module: the hardware registry's names, PCI ids and compute capabilities.
MATCHERS = cards.matchers()


def data(name: str) -> str:
    """A sample from tests/data/nvidia."""
    return (DATA / name).read_text()


# --- nvidia-smi query output ------------------------------------------------------------------------------------------


def test_h200_line_parses_field_by_field() -> None:
    """The H200 line measured on the kit's GPU host gives every field, typed."""
    gpus, driver = gpu.parse_query_gpu(data("smi-h200.csv"), MATCHERS)
    assert gpus == [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-a6ac36d7-55de-0d86-99ca-a6bf1b52c43e",
                     "memory_total_mib": 143771, "memory_free_mib": 143156, "compute_capability": "9.0",
                     "profile": "h200"}]
    assert driver == "580.159.04"


@pytest.mark.parametrize(("sample", "driver", "cards"), [
    ("smi-2x-rtx3090.csv", "610.57.04", [("NVIDIA GeForce RTX 3090", 24576, 2633, "8.6", "rtx3090"),
                                         ("NVIDIA GeForce RTX 3090", 24576, 1743, "8.6", "rtx3090")]),
    ("smi-2x-rtx4090.csv", "550.163.01", [("NVIDIA GeForce RTX 4090", 24564, 24057, "8.9", "rtx4090"),
                                          ("NVIDIA GeForce RTX 4090", 24564, 24105, "8.9", "rtx4090")]),
    ("smi-rtx5090-rtx3090.csv", "580.119.02", [("NVIDIA GeForce RTX 5090", 32607, 32589, "12.0", "rtx5090"),
                                               ("NVIDIA GeForce RTX 3090", 24576, 1224, "8.6", "rtx3090")]),
    ("smi-rtx4080-super.csv", "595.71.05", [("NVIDIA GeForce RTX 4080 SUPER", 16376, 15348, "8.9", "rtx4080super")]),
    ("smi-rtx-a6000.csv", "510.73.05", [("NVIDIA RTX A6000", 49140, 49139, "8.6", "rtxa6000")]),
    ("smi-rtx5090-rtx3090ti.csv", "595.71.05", [("NVIDIA GeForce RTX 5090", 32607, 9865, "12.0", "rtx5090"),
                                                ("NVIDIA GeForce RTX 3090 Ti", 24564, 3082, "8.6", "rtx3090ti")]),
    ("smi-l40s.csv", "595.80", [("NVIDIA L40S", 46068, 45460, "8.9", "l40s")]),
    ("smi-h100-80gb-hbm3.csv", "590.48.01", [("NVIDIA H100 80GB HBM3", 81559, 81081, "9.0", "h100")]),
])
def test_real_outputs_of_several_cards(sample: str, driver: str, cards: list[tuple[str, int, int, str, str]]) -> None:
    """Each real sample yields its cards in index order, with memory, compute capability and profile."""
    gpus, found_driver = gpu.parse_query_gpu(data(sample), MATCHERS)
    assert found_driver == driver
    assert [g["index"] for g in gpus] == list(range(len(cards)))
    assert [(g["name"], g["memory_total_mib"], g["memory_free_mib"], g["compute_capability"], g["profile"])
            for g in gpus] == cards
    assert len({g["uuid"] for g in gpus}) == len(gpus)


def test_spaces_blank_lines_crlf_and_out_of_order_indexes() -> None:
    """Padding, blank lines, Windows line ends and rows out of order do not change the result."""
    tidy, _ = gpu.parse_query_gpu(data("smi-rtx5090-rtx3090.csv"))
    lines = data("smi-rtx5090-rtx3090.csv").splitlines()
    messy = "\r\n\n" + "  ,  ".join(lines[1].split(", ")) + "\r\n   \n" + lines[0].replace(", ", ",") + "\r\n\n"
    assert gpu.parse_query_gpu(messy) == (tidy, "580.119.02")


@pytest.mark.parametrize("unreadable", ["[N/A]", "[Not Supported]", "[Unknown Error]", "N/A"])
def test_unreadable_fields_become_null(unreadable: str) -> None:
    """A field nvidia-smi cannot read (a unified-memory GPU's memory, a vGPU's UUID) is null, not an error."""
    line = f"0, NVIDIA GB10, {unreadable}, {unreadable}, {unreadable}, {unreadable}, {unreadable}\n"
    [found], driver = gpu.parse_query_gpu(line)
    assert found == {"index": 0, "name": "NVIDIA GB10", "uuid": None, "memory_total_mib": None,
                     "memory_free_mib": None, "compute_capability": None, "profile": "generic"}
    assert driver is None


def test_memory_with_its_unit_is_read() -> None:
    """Output made without nounits ("24564 MiB") still parses."""
    [found], _ = gpu.parse_query_gpu("0, NVIDIA GeForce RTX 4090, GPU-x, 24564 MiB, 24057 MiB, 8.9, 580.95.05")
    assert (found["memory_total_mib"], found["memory_free_mib"]) == (24564, 24057)


@pytest.mark.parametrize(("text", "message"), [
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", r"line 1 has 1 fields, expected 7"),
    ("0, NVIDIA H200, GPU-a, 143771, 143156, 9.0", r"line 1 has 6 fields"),
    ("0, NVIDIA H200, GPU-a, 1, 1, 9.0, 580.159.04\nx, NVIDIA H200, GPU-b, 1, 1, 9.0, 580", r"line 2: GPU index 'x'"),
    ("0, NVIDIA H200, GPU-a, 140 GiB, 1, 9.0, 580.159.04", r"memory size '140 GiB' is not a number of MiB"),
    ("0, NVIDIA H200, GPU-a, 143771, 143156, sm_90, 580.159.04", r"compute capability 'sm_90' is not MAJOR.MINOR"),
    ("0, [N/A], GPU-a, 143771, 143156, 9.0, 580.159.04", r"the GPU has no name"),
])
def test_garbage_is_a_clear_error(text: str, message: str) -> None:
    """Text that is not the query's output raises GpuParseError naming the line and the problem."""
    with pytest.raises(gpu.GpuParseError, match=message):
        gpu.parse_query_gpu(text)


# --- nvidia-smi runs ---------------------------------------------------------------------------------------------------


def test_listing_of_a_missing_a_gpu_less_and_a_broken_nvidia_smi() -> None:
    """Not installed and "No devices were found" are answers without error; a failure keeps nvidia-smi's own words."""
    assert gpu.nvidia_smi_listing(None) == ([], None, None)
    assert gpu.nvidia_smi_listing(gpu.CommandResult(6, "No devices were found\n", "")) == ([], None, None)
    mismatch = gpu.nvidia_smi_listing(gpu.CommandResult(18, data("smi-driver-library-mismatch.txt"), ""))
    assert mismatch.error == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.178"
    silent = gpu.nvidia_smi_listing(gpu.CommandResult(9, "", ""))
    assert silent.error == "nvidia-smi exited with status 9 and printed nothing"
    garbage = gpu.nvidia_smi_listing(gpu.CommandResult(0, "hello\n", ""))
    assert garbage.gpus == [] and "line 1 has 1 fields" in str(garbage.error)


# --- /proc/driver/nvidia -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("sample", "version", "flavour", "branch"), [
    ("proc-version-open-565.57.01.txt", "565.57.01", "open", 565),
    ("proc-version-open-525.60.11-arch.txt", "525.60.11", "open", 525),
    ("proc-version-open-35.3.1-jetson.txt", "35.3.1", "open", 35),
    ("proc-version-proprietary-580.173.02.txt", "580.173.02", "proprietary", 580),
])
def test_proc_version_gives_driver_and_kernel_module(sample: str, version: str, flavour: str, branch: int) -> None:
    """The version file tells the loaded driver's version and whether its kernel module is the open one."""
    driver = gpu.parse_proc_version(data(sample))
    assert (driver.version, driver.kernel_module, gpu.driver_branch(driver.version)) == (version, flavour, branch)


def test_proc_version_garbage_is_a_clear_error() -> None:
    """A version file without an NVRM line raises, quoting what it read."""
    with pytest.raises(gpu.GpuParseError, match=r"no NVRM version line: 'nouveau'"):
        gpu.parse_proc_version("nouveau\n")


def test_driver_branch() -> None:
    """The branch is the major version; unknown stays unknown."""
    assert [gpu.driver_branch(v) for v in ("580.159.04", "595.80", "610", None, "")] == [580, 595, 610, None, None]


def test_proc_gpu_information_names_the_card() -> None:
    """A GPU's information file gives its name and UUID; memory and compute capability stay unknown."""
    assert gpu.parse_proc_gpu_information(data("proc-gpu-information-gtx650.txt"), 0) == {
        "index": 0, "name": "GeForce GTX 650", "uuid": "GPU-e3f822b9-8c5f-95a5-b379-8dfdeefd7758",
        "memory_total_mib": None, "memory_free_mib": None, "compute_capability": None, "profile": "generic"}
    with pytest.raises(gpu.GpuParseError, match="no Model line"):
        gpu.parse_proc_gpu_information("IRQ: 44\n", 0)


# --- lspci and profiles ------------------------------------------------------------------------------------------------


def test_lspci_sees_nvidia_display_controllers_only() -> None:
    """VGA and 3D controllers of vendor 10de count; NVIDIA audio functions and other vendors do not."""
    lines = data("lspci-nnk-2x-rtx3090.txt").splitlines()
    assert gpu.lspci_shows_nvidia_gpu("\n".join(lines))
    assert not gpu.lspci_shows_nvidia_gpu("\n".join(line for line in lines if "[0300]" not in line))
    assert gpu.lspci_shows_nvidia_gpu("19:00.0 3D controller [0302]: NVIDIA Corporation GH100 [10de:2335] (rev a1)")
    assert not gpu.lspci_shows_nvidia_gpu("00:02.0 VGA compatible controller [0300]: Device [1234:1111] (rev 02)")
    assert not gpu.lspci_shows_nvidia_gpu("")


@pytest.mark.parametrize(("name", "capability", "pci_id", "profile"), [
    ("NVIDIA GeForce RTX 3090", "8.6", None, "rtx3090"),
    ("NVIDIA GeForce RTX 4090", "8.9", None, "rtx4090"),
    ("GeForce RTX 3090", None, None, "rtx3090"),  # drivers before R470 print no "NVIDIA " prefix
    ("NVIDIA  GeForce RTX 4090 ", None, None, "rtx4090"),
    ("NVIDIA GeForce RTX 3090 Ti", "8.6", None, "rtx3090ti"),  # names seen in nvidia-docker#1711, SpatialLM#28
    ("NVIDIA GeForce RTX 4090 D", "8.9", None, "generic"),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", "8.9", None, "generic"),
    ("NVIDIA GeForce RTX 4080 SUPER", "8.9", None, "rtx4080super"),
    ("NVIDIA GeForce RTX 4090", "8.6", None, "generic"),  # the name disagrees with the silicon
    ("NVIDIA H200", "9.0", None, "h200"),
    ("NVIDIA RTX A6000", "8.6", None, "rtxa6000"),
    ("NVIDIA Graphics Device", "12.0", "10de:2b85", "rtx5090"),  # the PCI id decides over the name
    ("NVIDIA GeForce RTX 4090", "8.9", "10de:2685", "generic"),  # a 4090 D named like a 4090
])
def test_profile_mapping(name: str, capability: str | None, pci_id: str | None, profile: str) -> None:
    """Each card of the registry gets its profile by PCI id, else by its exact name; other cards, and names whose
    silicon disagrees, are generic; without the registry's matchers every card is generic."""
    assert gpu.gpu_profile(name, capability, MATCHERS, pci_id) == profile
    assert gpu.gpu_profile(name, capability, None, pci_id) == "generic"
    assert cards.match(name, capability, pci_id) == profile  # the controller's own matching agrees


# --- the combined fact -------------------------------------------------------------------------------------------------


def test_fact_of_a_host_without_nvidia_gpu() -> None:
    """No nvidia-smi, no driver, nothing in lspci: present false, profile cpu, no evidence."""
    assert gpu.gpu_facts(None, None, [], "00:02.0 VGA compatible controller [0300]: Device [1234:1111]\n") == {
        "present": False, "driver_loaded": False, "driver_version": None, "driver_branch": None, "kernel_module": None,
        "detected_by": [], "nvidia_smi_error": None, "profile": "cpu", "gpus": [], "p2p": None}


def test_fact_of_the_h200_host_that_lspci_does_not_show() -> None:
    """nvidia-smi and /proc find the GPU although lspci is absent; the driver version comes from /proc."""
    facts = gpu.gpu_facts(gpu.CommandResult(0, data("smi-h200.csv"), ""),
                          "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n", [], None,
                          MATCHERS)
    assert {k: v for k, v in facts.items() if k != "gpus"} == {
        "present": True, "driver_loaded": True, "driver_version": "580.159.04", "driver_branch": 580,
        "kernel_module": "open", "detected_by": ["nvidia-smi", "proc"], "nvidia_smi_error": None, "profile": "h200",
        "p2p": None}


def test_fact_of_a_card_without_driver_is_seen_only_by_lspci() -> None:
    """A fresh host with a card and no driver: not present (not usable yet), but lspci is named as evidence."""
    facts = gpu.gpu_facts(None, None, [], data("lspci-nnk-2x-rtx3090.txt"))
    assert (facts["present"], facts["profile"], facts["detected_by"]) == (False, "cpu", ["lspci"])


def test_fact_of_a_loaded_driver_without_gpu_details() -> None:
    """Driver loaded, nvidia-smi broken and no GPU information files: present with profile generic, no GPU list."""
    facts = gpu.gpu_facts(gpu.CommandResult(9, "NVIDIA-SMI has failed", ""),
                          data("proc-version-open-565.57.01.txt"), [], None)
    assert (facts["present"], facts["profile"], facts["gpus"], facts["nvidia_smi_error"]) == (
        True, "generic", [], "NVIDIA-SMI has failed")


def test_fact_where_the_driver_sees_no_device() -> None:
    """nvidia-smi's "No devices were found" is believed even with the module loaded: no GPU, profile cpu."""
    facts = gpu.gpu_facts(gpu.CommandResult(6, "No devices were found", ""),
                          data("proc-version-proprietary-580.173.02.txt"), [], None)
    assert (facts["present"], facts["profile"], facts["detected_by"], facts["nvidia_smi_error"]) == (
        False, "cpu", ["proc"], None)


# --- the module, end to end --------------------------------------------------------------------------------------------


def fake_nvidia_smi(directory: Path, stdout: str, rc: int = 0, delay: int = 0, links: str | None = None,
                    topology: str | None = None) -> Path:
    """An executable nvidia-smi that records its arguments, optionally waits, prints `stdout` and exits with `rc`; the
    link query and the P2P matrix print `links` and `topology`, or fail as an older driver would when not given."""
    (directory / "smi-output").write_text(stdout)
    script = directory / "nvidia-smi"
    extra = ""
    for probe, text in (("pci.device_id", links), ("topo", topology)):
        answer = f"cat '{directory}/{probe}'; exit 0" if text is not None else "exit 2"
        if text is not None:
            (directory / probe).write_text(text)
        extra += f"case \"$*\" in *{probe}*) {answer};; esac\n"
    # exec, so that the timeout's kill hits the sleeping process itself, as it would a hung nvidia-smi.
    script.write_text(f"#!/bin/sh\necho \"$@\" >> '{directory}/smi-args'\n[ {delay} -eq 0 ] || exec sleep {delay}\n"
                      f"{extra}cat '{directory}/smi-output'\nexit {rc}\n")
    script.chmod(0o755)
    return script


def fake_lspci(directory: Path, stdout: str) -> Path:
    """An executable lspci that prints `stdout`."""
    (directory / "lspci-output").write_text(stdout)
    script = directory / "lspci"
    script.write_text(f"#!/bin/sh\n[ \"$1\" = -nn ] || exit 1\ncat '{directory}/lspci-output'\n")
    script.chmod(0o755)
    return script


def fake_proc(directory: Path, version: str | None, information: dict[str, str]) -> Path:
    """A /proc/driver/nvidia tree: the version file (when the driver is loaded) and one information file per bus id."""
    proc = directory / "proc-driver-nvidia"
    proc.mkdir()
    if version is not None:
        (proc / "version").write_text(version)
    for bus, text in information.items():
        (proc / "gpus" / bus).mkdir(parents=True)
        (proc / "gpus" / bus / "information").write_text(text)
    return proc


def run_module(capsys: pytest.CaptureFixture[str], **args: Any) -> dict[str, Any]:
    """Run the module's main() as Ansible would and return its JSON result."""
    return run_module_main(facts_module, args, capsys)


def test_module_on_a_host_without_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No nvidia-smi, no driver, no lspci: reported, not failed, and nothing changed."""
    result = run_module(capsys, nvidia_smi_path=NOWHERE, proc_dir=str(tmp_path / "absent"), lspci_path=NOWHERE)
    assert result["changed"] is False and "failed" not in result
    assert result["ansible_facts"]["vllm_fleet_gpus"] == gpu.gpu_facts(None, None, [], None)


def test_module_with_driver_loaded_and_nvidia_smi_failing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A driver/library mismatch: present, driver from /proc, nvidia-smi's words, cards named by the kernel module."""
    information = data("proc-gpu-information-gtx650.txt")
    proc = fake_proc(tmp_path, data("proc-version-proprietary-580.173.02.txt"), {
        "0000:0a:00.0": information.replace("GeForce GTX 650", "NVIDIA GeForce RTX 4090"),
        "0000:04:00.0": information.replace("GeForce GTX 650", "NVIDIA GeForce RTX 3090")})
    smi = fake_nvidia_smi(tmp_path, data("smi-driver-library-mismatch.txt"), rc=18)
    facts = run_module(capsys, nvidia_smi_path=str(smi), proc_dir=str(proc), lspci_path=NOWHERE,
                       profiles=MATCHERS)["ansible_facts"]
    assert {k: v for k, v in facts["vllm_fleet_gpus"].items() if k != "gpus"} == {
        "present": True, "driver_loaded": True, "driver_version": "580.173.02", "driver_branch": 580,
        "kernel_module": "proprietary", "detected_by": ["proc"], "profile": "rtx3090", "p2p": None,
        "nvidia_smi_error": "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.178"}
    assert [(g["index"], g["name"], g["profile"], g["memory_total_mib"]) for g in facts["vllm_fleet_gpus"]["gpus"]] == [
        (0, "NVIDIA GeForce RTX 3090", "rtx3090", None), (1, "NVIDIA GeForce RTX 4090", "rtx4090", None)]


def test_module_on_a_mixed_multi_gpu_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """RTX 5090 + RTX 3090: every GPU listed with its own profile, the host takes GPU 0's, all three probes count."""
    proc = fake_proc(tmp_path, data("proc-version-open-565.57.01.txt"), {})
    smi = fake_nvidia_smi(tmp_path, data("smi-rtx5090-rtx3090.csv"))
    lspci = fake_lspci(tmp_path, data("lspci-nnk-2x-rtx3090.txt"))
    facts = run_module(capsys, nvidia_smi_path=str(smi), proc_dir=str(proc), lspci_path=str(lspci),
                       _ansible_check_mode=True, profiles=MATCHERS)["ansible_facts"]["vllm_fleet_gpus"]
    assert (tmp_path / "smi-args").read_text().splitlines() == [
        " ".join(args) for args in (gpu.NVIDIA_SMI_ARGS, gpu.LINK_ARGS, gpu.TOPOLOGY_ARGS)]
    assert facts["detected_by"] == ["nvidia-smi", "proc", "lspci"]
    assert (facts["present"], facts["profile"], facts["driver_version"], facts["kernel_module"]) == (
        True, "rtx5090", "565.57.01", "open")
    assert facts["gpus"] == gpu.parse_query_gpu(data("smi-rtx5090-rtx3090.csv"), MATCHERS)[0]
    assert [g["profile"] for g in facts["gpus"]] == ["rtx5090", "rtx3090"]
    assert facts["p2p"] is None  # this nvidia-smi answers neither the link query nor the matrix


def test_module_when_nvidia_smi_hangs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hung nvidia-smi is cut at the timeout and reported as its error; the driver still counts as present."""
    proc = fake_proc(tmp_path, data("proc-version-open-565.57.01.txt"), {})
    smi = fake_nvidia_smi(tmp_path, data("smi-h200.csv"), delay=10)
    facts = run_module(capsys, nvidia_smi_path=str(smi), proc_dir=str(proc), lspci_path=NOWHERE,
                       timeout=1)["ansible_facts"]["vllm_fleet_gpus"]
    assert facts["nvidia_smi_error"] == f"{smi} did not answer within 1 s"
    assert (facts["present"], facts["profile"], facts["detected_by"]) == (True, "generic", ["proc"])


def test_module_fails_clearly_on_an_unreadable_driver_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A /proc version file that is not NVIDIA's is a failure with the text quoted, not a traceback."""
    proc = fake_proc(tmp_path, "garbage\n", {})
    result = run_module(capsys, nvidia_smi_path=NOWHERE, proc_dir=str(proc), lspci_path=NOWHERE)
    assert result["failed"] is True
    assert result["msg"] == ("unreadable NVIDIA driver information: "
                             "/proc/driver/nvidia/version has no NVRM version line: 'garbage'")


def test_ansible_finds_and_runs_the_module_with_the_repo_config(tmp_path: Path) -> None:
    """`ansible -m vllm.fleet.gpu_facts` with the repo's ansible.cfg resolves the module and its module_utils."""
    smi = fake_nvidia_smi(tmp_path, data("smi-2x-rtx4090.csv"))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp")}
    args = {"nvidia_smi_path": str(smi), "proc_dir": f"{tmp_path}/absent", "lspci_path": NOWHERE, "profiles": MATCHERS}
    run = subprocess.run([str(REPO / ".venv/bin/ansible"), "localhost", "-c", "local", "-m", "vllm.fleet.gpu_facts",
                          "-a", json.dumps(args)],
                         cwd=REPO, env=env, text=True, capture_output=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("localhost | SUCCESS =>"), run.stdout
    facts = yaml.safe_load(run.stdout.split("=>", 1)[1])["ansible_facts"]["vllm_fleet_gpus"]
    assert (facts["profile"], facts["detected_by"], facts["driver_version"]) == ("rtx4090", ["nvidia-smi"], "550.163.01")


# --- PCI ids, PCIe links and the P2P matrix ----------------------------------------------------------------------------


def test_link_query_and_p2p_matrix_of_the_real_h200() -> None:
    """The H200's link query gives its PCI id (vendor:device) and Gen5 x16 link; its P2P matrix, with the terminal
    escapes nvidia-smi writes even into a pipe, is the one-GPU matrix [[X]]; the fact names the card h200 by its PCI id."""
    assert gpu.parse_links(data("smi-links-h200.csv")) == {0: {
        "pci_id": "10de:2335", "pcie_gen": 5, "pcie_width": 16, "pcie_gen_max": 5, "pcie_width_max": 16}}
    assert "\x1b[" in data("topo-p2p-r-h200.txt")
    assert gpu.parse_p2p_matrix(data("topo-p2p-r-h200.txt")) == [["X"]]
    facts = gpu.gpu_facts(gpu.CommandResult(0, data("smi-h200.csv").replace("NVIDIA H200", "NVIDIA Graphics Device"), ""),
                          None, [], None, MATCHERS, data("smi-links-h200.csv"), data("topo-p2p-r-h200.txt"))
    assert (facts["profile"], facts["p2p"], facts["gpus"][0]["pcie_width_max"]) == ("h200", [["X"]], 16)


@pytest.mark.parametrize("text", ["", "garbage", " \tGPU0\tGPU1\n GPU0\tX\tNS\n",
                                  " \tGPU0\tGPU1\n GPU0\tX\tZZ\n GPU1\tZZ\tX\n", data("topo-m-h200.txt")])
def test_what_is_not_a_p2p_matrix_is_none(text: str) -> None:
    """A missing row, an unknown code or another table (topo -m) is no matrix, rather than a wrong one."""
    assert gpu.parse_p2p_matrix(text) is None


def test_a_two_gpu_matrix_and_a_mismatched_one() -> None:
    """Two GeForce cards without P2P read as NS both ways; a matrix whose size differs from the GPU list is dropped."""
    matrix = " \t\x1b[4mGPU0\tGPU1\t\x1b[0m\n GPU0\tX\tNS\t\n GPU1\tNS\tX\t\n\nLegend:\n\n  X    = Self\n"
    assert gpu.parse_p2p_matrix(matrix) == [["X", "NS"], ["NS", "X"]]
    two = gpu.gpu_facts(gpu.CommandResult(0, data("smi-2x-rtx3090.csv"), ""), None, [], None, MATCHERS, None, matrix)
    one = gpu.gpu_facts(gpu.CommandResult(0, data("smi-h200.csv"), ""), None, [], None, MATCHERS, None, matrix)
    assert (two["p2p"], one["p2p"]) == ([["X", "NS"], ["NS", "X"]], None)
