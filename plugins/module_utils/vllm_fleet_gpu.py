"""Pure logic of the vllm_fleet_gpu_facts module: parse nvidia-smi, /proc/driver/nvidia and lspci, map GPUs to kit profiles.

Ansible ships this file to the managed host with the module, so it is stdlib only and runs on Python 3.8+.
"""

from __future__ import annotations

import re
from typing import List, NamedTuple, Optional, Sequence, Tuple, TypedDict

QUERY_FIELDS = ("index", "name", "uuid", "memory.total", "memory.free", "compute_cap", "driver_version")
NVIDIA_SMI_ARGS = ("--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits")
# nvidia-smi exits 6 with this text when the driver works but sees no GPU: an answer, not a failure.
NO_DEVICES = "No devices were found"
# Model name as nvidia-smi reports it (older drivers omit the "NVIDIA " prefix) -> (profile, compute capability).
# Exact names only: an RTX 3090 Ti, 4090 D or 4090 Laptop GPU is another card and gets the generic profile.
KNOWN_MODELS = {"geforce rtx 3090": ("rtx3090", "8.6"), "geforce rtx 4090": ("rtx4090", "8.9")}
EVIDENCE_ORDER = ("nvidia-smi", "proc", "lspci")
# nvidia-smi prints a field it cannot read as "[N/A]", "[Not Supported]", "[Unknown Error]" and the like.
UNREADABLE = re.compile(r"^(\[.*\]|N/A|)$")
MEBIBYTES = re.compile(r"^(\d+)(?:\s*MiB)?$")
COMPUTE_CAPABILITY = re.compile(r"^\d+\.\d+$")
# The open module's line reads "NVIDIA UNIX Open Kernel Module for x86_64  565.57.01 ...", the proprietary one's
# "NVIDIA UNIX x86_64 Kernel Module  580.173.02 ...".
PROC_VERSION = re.compile(r"^NVRM version: NVIDIA UNIX (Open )?.*?Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)",
                          re.MULTILINE)
# `lspci -nn`: "05:00.0 VGA compatible controller [0300]: NVIDIA Corporation GA102 [GeForce RTX 3090] [10de:2204] (rev a1)".
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


def gpu_profile(name: str, compute_capability: Optional[str]) -> str:
    """The kit profile of a GPU: rtx3090 or rtx4090 for those exact cards, generic for any other NVIDIA GPU."""
    model = " ".join(name.split()).lower()
    if model.startswith("nvidia "):
        model = model[len("nvidia "):]
    profile, expected_capability = KNOWN_MODELS.get(model, ("generic", None))
    # A name that disagrees with the silicon (a renamed or virtual device) is not trusted as a known card.
    if compute_capability not in (None, expected_capability):
        return "generic"
    return profile


def _smi_row(line: str, number: int) -> Tuple[Gpu, Optional[str]]:
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
              profile=gpu_profile(name, capability))
    return gpu, driver


def parse_query_gpu(text: str) -> Tuple[List[Gpu], Optional[str]]:
    """The GPUs (by index) and driver version in the output of nvidia-smi with NVIDIA_SMI_ARGS."""
    rows = [_smi_row(line, number) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    drivers = [driver for _, driver in rows if driver]
    return sorted((gpu for gpu, _ in rows), key=lambda gpu: gpu["index"]), (drivers[0] if drivers else None)


def nvidia_smi_listing(result: Optional[CommandResult]) -> SmiListing:
    """What an nvidia-smi run (None: not installed) answered: GPUs and driver, or the error text when it failed."""
    if result is None:
        return SmiListing([], None, None)
    output = "\n".join(part.strip() for part in (result.stdout, result.stderr) if part.strip())
    if output == NO_DEVICES:
        return SmiListing([], None, None)
    if result.rc != 0:
        return SmiListing([], None, output or f"nvidia-smi exited with status {result.rc} and printed nothing")
    try:
        gpus, driver = parse_query_gpu(result.stdout)
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


def parse_proc_gpu_information(text: str, index: int) -> Gpu:
    """A GPU from /proc/driver/nvidia/gpus/<bus>/information, which names the card but not its memory."""
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in text.splitlines())}
    if not fields.get("Model"):
        raise GpuParseError(f"GPU information has no Model line: {text.strip()[:200]!r}")
    return Gpu(index=index, name=fields["Model"], uuid=fields.get("GPU UUID"), memory_total_mib=None,
               memory_free_mib=None, compute_capability=None, profile=gpu_profile(fields["Model"], None))


def lspci_shows_nvidia_gpu(text: str) -> bool:
    """Whether `lspci -nn` lists an NVIDIA display controller (VGA or 3D class)."""
    return any(LSPCI_NVIDIA_DISPLAY.search(line) for line in text.splitlines())


def gpu_facts(nvidia_smi: Optional[CommandResult], proc_version: Optional[str],
              proc_gpu_information: Sequence[str], lspci: Optional[str]) -> GpuFacts:
    """The vllm_fleet_gpus fact from the probes: nvidia-smi run (None: not installed), /proc texts, lspci -nn output."""
    smi = nvidia_smi_listing(nvidia_smi)
    driver = parse_proc_version(proc_version) if proc_version is not None else ProcDriver(None, None)
    driver_loaded = proc_version is not None
    smi_answered = nvidia_smi is not None and smi.error is None
    gpus = smi.gpus
    if not smi_answered:
        # The kernel module still names the cards when nvidia-smi is missing or broken (a driver/library mismatch).
        gpus = [parse_proc_gpu_information(text, index) for index, text in enumerate(proc_gpu_information)]
    # The nvidia module loads only where it finds a GPU, so a loaded driver means a GPU even when nvidia-smi fails.
    present = bool(gpus) or (driver_loaded and not smi_answered)
    evidence = {"nvidia-smi": bool(smi.gpus), "proc": driver_loaded, "lspci": bool(lspci and lspci_shows_nvidia_gpu(lspci))}
    version = driver.version or smi.driver_version
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
    )
