"""Pure logic of the vllm.fleet.gpu_facts module: parse nvidia-smi, /proc/driver/nvidia and lspci, name each GPU's profile.

Ansible ships this file to the managed host with the module, so it is stdlib only and runs on Python 3.8+. It holds no
card fact: the profiles' names, PCI ids and compute capabilities come from the controller's hardware registry
(plugins/plugin_utils/cards.py, through the module's profiles option).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, TypedDict

QUERY_FIELDS = ("index", "name", "uuid", "memory.total", "memory.free", "compute_cap", "driver_version")
NVIDIA_SMI_ARGS = ("--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits")
# A second query, read leniently: older drivers or virtual GPUs may not answer it, and the GPUs are known without it.
LINK_FIELDS = ("index", "pci.device_id", "pcie.link.gen.current", "pcie.link.width.current", "pcie.link.gen.max",
               "pcie.link.width.max")
LINK_ARGS = ("--query-gpu=" + ",".join(LINK_FIELDS), "--format=csv,noheader,nounits")
# The peer-to-peer read capability matrix: OK where one GPU can read another's memory directly.
TOPOLOGY_ARGS = ("topo", "-p2p", "r")
# nvidia-smi underlines the matrix's header with terminal escapes even when writing into a pipe (the kit's GPU host).
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
# nvidia-smi's legend for that matrix.
P2P_CODES = {"X": "self", "OK": "ok", "CNS": "chipset not supported", "GNS": "GPU not supported",
             "TNS": "topology not supported", "NS": "not supported", "DR": "disabled by regkey", "U": "unknown"}
# nvidia-smi exits 6 with this text when the driver works but sees no GPU: an answer, not a failure.
NO_DEVICES = "No devices were found"
EVIDENCE_ORDER = ("nvidia-smi", "proc", "lspci")
# nvidia-smi prints a field it cannot read as "[N/A]", "[Not Supported]", "[Unknown Error]" and the like.
UNREADABLE = re.compile(r"^(\[.*\]|N/A|)$")
MEBIBYTES = re.compile(r"^(\d+)(?:\s*MiB)?$")
COMPUTE_CAPABILITY = re.compile(r"^\d+\.\d+$")
# The open module's line reads "NVIDIA UNIX Open Kernel Module for x86_64  565.57.01 ...", the proprietary one's
# "NVIDIA UNIX x86_64 Kernel Module  580.173.02 ...".
PROC_VERSION = re.compile(r"^NVRM version: NVIDIA UNIX (Open )?.*?Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)",
                          re.MULTILINE)
# `lspci -nn`: "05:00.0 VGA compatible controller [0300]: NVIDIA Corporation <chip> [<name>] [10de:<device>] (rev a1)".
LSPCI_NVIDIA_DISPLAY = re.compile(r"\[03[0-9a-f]{2}\]: .*\[10de:[0-9a-f]{4}\]", re.IGNORECASE)


class GpuParseError(ValueError):
    """Text that should come from nvidia-smi or the NVIDIA driver but does not parse."""


class CommandResult(NamedTuple):
    """Exit status and output of a probe command."""

    rc: int
    stdout: str
    stderr: str


class Gpu(TypedDict):
    """One GPU as the fact reports it."""

    index: int
    name: str
    uuid: Optional[str]
    memory_total_mib: Optional[int]
    memory_free_mib: Optional[int]
    compute_capability: Optional[str]
    profile: str


class Link(TypedDict):
    """A GPU's PCI device id and PCIe link, from the second nvidia-smi query (None where it did not say)."""

    pci_id: Optional[str]
    pcie_gen: Optional[int]
    pcie_width: Optional[int]
    pcie_gen_max: Optional[int]
    pcie_width_max: Optional[int]


class SmiListing(NamedTuple):
    """What one nvidia-smi run told: its GPUs and driver version, or why it gave no answer."""

    gpus: List[Gpu]
    driver_version: Optional[str]
    error: Optional[str]


class ProcDriver(NamedTuple):
    """The loaded kernel module as /proc/driver/nvidia/version describes it."""

    version: Optional[str]
    kernel_module: Optional[str]


class GpuFacts(TypedDict):
    """The vllm_fleet_gpus fact."""

    present: bool
    driver_loaded: bool
    driver_version: Optional[str]
    driver_branch: Optional[int]
    kernel_module: Optional[str]
    detected_by: List[str]
    nvidia_smi_error: Optional[str]
    profile: str
    gpus: List[Gpu]
    p2p: Optional[List[List[str]]]


def _cell(value: str) -> Optional[str]:
    """The stripped value of one CSV cell, None when nvidia-smi could not read it."""
    value = value.strip()
    return None if UNREADABLE.match(value) else value


def _mebibytes(value: Optional[str], where: str) -> Optional[int]:
    """A memory size in MiB (with or without its unit), None when unreadable."""
    if value is None:
        return None
    match = MEBIBYTES.match(value)
    if not match:
        raise GpuParseError(f"{where}: memory size {value!r} is not a number of MiB")
    return int(match.group(1))


def _compute_capability(value: Optional[str], where: str) -> Optional[str]:
    """A compute capability such as "8.9", None when unreadable."""
    if value is not None and not COMPUTE_CAPABILITY.match(value):
        raise GpuParseError(f"{where}: compute capability {value!r} is not MAJOR.MINOR")
    return value


def gpu_profile(name: str, compute_capability: Optional[str], profiles: Optional[Dict[str, Any]] = None,
                pci_id: Optional[str] = None) -> str:
    """The profile of a GPU among the controller's profiles: by PCI id when known, else by exact name (a "Ti" or "D"
    variant is another card); generic when none matches or the silicon disagrees (a renamed or virtual device)."""
    model = " ".join(name.split()).lower()
    if model.startswith("nvidia "):
        model = model[len("nvidia "):]
    for key, profile in (profiles or {}).items():
        if (pci_id and pci_id in profile.get("pci_ids", [])) or (not pci_id and model in profile.get("names", [])):
            return key if compute_capability in (None, profile.get("compute_capability")) else "generic"
    return "generic"


def _smi_row(line: str, number: int, profiles: Optional[Dict[str, Any]]) -> Tuple[Gpu, Optional[str]]:
    """One GPU and its driver version from one line of the nvidia-smi query."""
    where = f"nvidia-smi output line {number}"
    fields = [_cell(field) for field in line.split(",")]
    if len(fields) != len(QUERY_FIELDS):
        raise GpuParseError(f"{where} has {len(fields)} fields, expected {len(QUERY_FIELDS)} "
                            f"({', '.join(QUERY_FIELDS)}): {line.strip()!r}")
    index, name, uuid, total, free, capability, driver = fields
    if index is None or not index.isdigit():
        raise GpuParseError(f"{where}: GPU index {index!r} is not a number: {line.strip()!r}")
    if name is None:
        raise GpuParseError(f"{where}: the GPU has no name: {line.strip()!r}")
    capability = _compute_capability(capability, where)
    gpu = Gpu(index=int(index), name=name, uuid=uuid, memory_total_mib=_mebibytes(total, where),
              memory_free_mib=_mebibytes(free, where), compute_capability=capability,
              profile=gpu_profile(name, capability, profiles))
    return gpu, driver


def parse_query_gpu(text: str, profiles: Optional[Dict[str, Any]] = None) -> Tuple[List[Gpu], Optional[str]]:
    """The GPUs (by index) and driver version in the output of nvidia-smi with NVIDIA_SMI_ARGS."""
    rows = [_smi_row(line, number, profiles) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    drivers = [driver for _gpu, driver in rows if driver]
    return sorted((gpu for gpu, _driver in rows), key=lambda gpu: gpu["index"]), (drivers[0] if drivers else None)


def nvidia_smi_listing(result: Optional[CommandResult], profiles: Optional[Dict[str, Any]] = None) -> SmiListing:
    """What an nvidia-smi run (None: not installed) answered: GPUs and driver, or the error text when it failed."""
    if result is None:
        return SmiListing([], None, None)
    output = "\n".join(part.strip() for part in (result.stdout, result.stderr) if part.strip())
    if output == NO_DEVICES:
        return SmiListing([], None, None)
    if result.rc != 0:
        return SmiListing([], None, output or f"nvidia-smi exited with status {result.rc} and printed nothing")
    try:
        gpus, driver = parse_query_gpu(result.stdout, profiles)
    except GpuParseError as error:
        return SmiListing([], None, str(error))
    return SmiListing(gpus, driver, None)


def parse_proc_version(text: str) -> ProcDriver:
    """Driver version and kernel module flavour (open or proprietary) from /proc/driver/nvidia/version."""
    match = PROC_VERSION.search(text)
    if not match:
        raise GpuParseError(f"/proc/driver/nvidia/version has no NVRM version line: {text.strip()[:200]!r}")
    return ProcDriver(match.group(2), "open" if match.group(1) else "proprietary")


def driver_branch(version: Optional[str]) -> Optional[int]:
    """The driver branch (major version, 580 for 580.159.04), None when unknown."""
    match = re.match(r"^(\d+)", version or "")
    return int(match.group(1)) if match else None


def parse_proc_gpu_information(text: str, index: int, profiles: Optional[Dict[str, Any]] = None) -> Gpu:
    """A GPU from /proc/driver/nvidia/gpus/<bus>/information, which names the card but not its memory."""
    fields = {key.strip(): value.strip() for key, _colon, value in (line.partition(":") for line in text.splitlines())}
    if not fields.get("Model"):
        raise GpuParseError(f"GPU information has no Model line: {text.strip()[:200]!r}")
    return Gpu(index=index, name=fields["Model"], uuid=fields.get("GPU UUID"), memory_total_mib=None,
               memory_free_mib=None, compute_capability=None, profile=gpu_profile(fields["Model"], None, profiles))


def lspci_shows_nvidia_gpu(text: str) -> bool:
    """Whether `lspci -nn` lists an NVIDIA display controller (VGA or 3D class)."""
    return any(LSPCI_NVIDIA_DISPLAY.search(line) for line in text.splitlines())


def _small_int(value: str) -> Optional[int]:
    """A small integer cell of the link query, None when unreadable."""
    value = value.strip()
    return int(value) if value.isdigit() else None


def parse_links(text: str) -> Dict[int, Link]:
    """Each GPU's PCI id (vendor:device, lower case) and PCIe link by index, from nvidia-smi with LINK_ARGS; rows it
    cannot read are left out."""
    links: Dict[int, Link] = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(LINK_FIELDS) or not cells[0].isdigit():
            continue
        device = re.fullmatch(r"0x([0-9a-fA-F]{4})([0-9a-fA-F]{4})", cells[1])
        links[int(cells[0])] = Link(
            pci_id=f"{device.group(2)}:{device.group(1)}".lower() if device else None,
            pcie_gen=_small_int(cells[2]), pcie_width=_small_int(cells[3]), pcie_gen_max=_small_int(cells[4]),
            pcie_width_max=_small_int(cells[5]))
    return links


def parse_p2p_matrix(text: str) -> Optional[List[List[str]]]:
    """The P2P read matrix of `nvidia-smi topo -p2p r` as codes by GPU index (X on the diagonal), None when it is not
    one."""
    rows: Dict[int, List[str]] = {}
    header: List[int] = []
    for line in ANSI_ESCAPE.sub("", text).splitlines():
        cells = line.split()
        if cells and all(re.fullmatch(r"GPU\d+", cell) for cell in cells):
            header = [int(cell[3:]) for cell in cells]
        elif header and cells and re.fullmatch(r"GPU\d+", cells[0]) and len(cells) == len(header) + 1:
            rows[int(cells[0][3:])] = cells[1:]
    if not header or sorted(rows) != header or not all(code in P2P_CODES for row in rows.values() for code in row):
        return None
    return [rows[index] for index in sorted(rows)]


def gpu_facts(nvidia_smi: Optional[CommandResult], proc_version: Optional[str],
              proc_gpu_information: Sequence[str], lspci: Optional[str], profiles: Optional[Dict[str, Any]] = None,
              links: Optional[str] = None, topology: Optional[str] = None) -> GpuFacts:
    """The vllm_fleet_gpus fact from the probes: nvidia-smi run (None: not installed), /proc texts, lspci -nn output,
    the controller's profiles, and the link query's and P2P matrix's output when nvidia-smi gave them."""
    smi = nvidia_smi_listing(nvidia_smi, profiles)
    driver = parse_proc_version(proc_version) if proc_version is not None else ProcDriver(None, None)
    driver_loaded = proc_version is not None
    smi_answered = nvidia_smi is not None and smi.error is None
    gpus = smi.gpus
    if not smi_answered:
        # The kernel module still names the cards when nvidia-smi is missing or broken (a driver/library mismatch).
        gpus = [parse_proc_gpu_information(text, index, profiles) for index, text in enumerate(proc_gpu_information)]
    by_index = parse_links(links or "")
    for gpu in gpus:
        link = by_index.get(gpu["index"])
        gpu.update(link or {})  # type: ignore[typeddict-item]
        if link and link["pci_id"]:
            gpu["profile"] = gpu_profile(gpu["name"], gpu["compute_capability"], profiles, link["pci_id"])
    # The nvidia module loads only where it finds a GPU, so a loaded driver means a GPU even when nvidia-smi fails.
    present = bool(gpus) or (driver_loaded and not smi_answered)
    evidence = {"nvidia-smi": bool(smi.gpus), "proc": driver_loaded, "lspci": bool(lspci and lspci_shows_nvidia_gpu(lspci))}
    version = driver.version or smi.driver_version
    matrix = parse_p2p_matrix(topology or "")
    return GpuFacts(
        present=present,
        driver_loaded=driver_loaded,
        driver_version=version,
        driver_branch=driver_branch(version),
        kernel_module=driver.kernel_module,
        detected_by=[source for source in EVIDENCE_ORDER if evidence[source]],
        nvidia_smi_error=smi.error,
        profile=gpus[0]["profile"] if gpus else ("generic" if present else "cpu"),
        gpus=gpus,
        p2p=matrix if matrix is not None and len(matrix) == len(gpus) else None,
    )
