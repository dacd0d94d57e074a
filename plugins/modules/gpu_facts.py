#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt): modules run inside ansible-core.
"""Ansible module: report the NVIDIA GPUs of a host as the vllm_fleet_gpus fact (logic in module_utils/vllm_fleet_gpu)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_facts
short_description: Report the NVIDIA GPUs of a host and its vllm-fleet GPU profile
description:
  - Sets the C(vllm_fleet_gpus) fact from C(nvidia-smi), C(/proc/driver/nvidia) and, when installed, C(lspci).
  - Detection does not rest on lspci alone; some real GPU hosts list nothing there.
  - A host without an NVIDIA GPU is reported (C(present=false), profile C(cpu)), never failed on.
  - When the driver is loaded but nvidia-smi fails (for example C(Driver/library version mismatch)), the host is reported
    as present with the error text in C(nvidia_smi_error) and the cards named by the kernel module.
  - Also reads each GPU's PCI id and PCIe link, and the peer-to-peer read matrix (C(nvidia-smi topo -p2p r)) that
    decides how tensor-parallel scenes talk between cards.
  - Reads only; never changes the host.
version_added: "0.1.0"
author: vllm-fleet (!UNKNOWN)
options:
  nvidia_smi_path:
    description:
      - Path of nvidia-smi. Default is the first nvidia-smi on PATH, in /usr/bin or in /usr/local/bin.
      - A path that is not an executable file counts as nvidia-smi not installed.
    type: path
  proc_dir:
    description: The NVIDIA driver's /proc directory.
    type: path
    default: /proc/driver/nvidia
  lspci_path:
    description:
      - Path of lspci. Default is the first lspci on PATH or in the sbin directories; none is fine.
    type: path
  timeout:
    description: Seconds nvidia-smi and lspci may run; a GPU that fell off the bus can hang nvidia-smi.
    type: int
    default: 30
  profiles:
    description:
      - The GPU profiles to name the cards by, as the filter C(vllm.fleet.cards_matchers) gives them from the kit's
        hardware registry; per profile its C(names) (nvidia-smi's, lower case, without C(NVIDIA )), C(pci_ids)
        (C(10de:2204)) and C(compute_capability) (C(8.6)).
      - A card no profile matches, or whose compute capability disagrees with its profile's, is C(generic).
    type: dict
    default: {}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
"""

EXAMPLES = r"""
- name: Gather GPU facts, naming the cards by the kit's hardware registry
  vllm.fleet.gpu_facts:
    profiles: "{{ {} | vllm.fleet.cards_matchers }}"

- name: Fail where a GPU host has no usable GPU
  ansible.builtin.assert:
    that: ansible_facts.vllm_fleet_gpus.present and ansible_facts.vllm_fleet_gpus.nvidia_smi_error is none
    fail_msg: "{{ ansible_facts.vllm_fleet_gpus.nvidia_smi_error | default('no NVIDIA GPU', true) }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts set by the module.
  returned: always
  type: dict
  contains:
    vllm_fleet_gpus:
      description: The host's NVIDIA GPUs and driver.
      returned: always
      type: dict
      contains:
        present:
          description: An NVIDIA GPU is there (nvidia-smi listed one, or the driver is loaded while nvidia-smi fails).
          type: bool
        driver_loaded:
          description: /proc/driver/nvidia/version exists.
          type: bool
        driver_version:
          description: Version of the loaded driver (from /proc, else nvidia-smi), or null.
          type: str
          sample: "580.159.04"
        driver_branch:
          description: Major version of the driver, or null.
          type: int
          sample: 580
        kernel_module:
          description: C(open), C(proprietary), or null when no driver is loaded.
          type: str
          sample: open
        detected_by:
          description: Evidence of an NVIDIA GPU, in the order nvidia-smi, proc, lspci.
          type: list
          elements: str
          sample: [nvidia-smi, proc]
        nvidia_smi_error:
          description: What nvidia-smi printed when it exists but failed, else null.
          type: str
          sample: "Failed to initialize NVML: Driver/library version mismatch"
        profile:
          description: The host's GPU profile, that of GPU 0 (one of the profiles given, or generic), or cpu without GPU.
          type: str
          sample: rtx4090
        gpus:
          description:
            - The GPUs by index; memory and compute capability are null when only the kernel module named them.
            - C(pci_id) and the C(pcie_*) link figures are there when nvidia-smi answered the link query.
          type: list
          elements: dict
          sample:
            - index: 0
              name: NVIDIA GeForce RTX 4090
              uuid: GPU-00000000-0000-0000-0000-000000000000
              memory_total_mib: 24564
              memory_free_mib: 24057
              compute_capability: "8.9"
              profile: rtx4090
              pci_id: "10de:2684"
              pcie_gen: 4
              pcie_width: 16
              pcie_gen_max: 4
              pcie_width_max: 16
        p2p:
          description:
            - The peer-to-peer read matrix by GPU index (C(OK), C(NS), C(CNS), C(GNS), C(TNS), C(U), C(X) on the
              diagonal), null when nvidia-smi did not give one.
          type: list
          elements: list
          sample: [[X, NS], [NS, X]]
"""

# Ansible's module layout puts the documentation blocks above the imports.
import glob  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
from typing import List, Optional, Sequence  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
# Relative: from the repo it is ansible.module_utils.<file> (ansible.cfg's module_utils), in a collection its own.
from ..module_utils.vllm_fleet_gpu import (  # noqa: E402
    LINK_ARGS, NVIDIA_SMI_ARGS, TOPOLOGY_ARGS, CommandResult, GpuParseError, gpu_facts,
)

# NVIDIA's .run installer puts nvidia-smi in /usr/bin or /usr/local/bin, which a non-login PATH may lack.
NVIDIA_SMI_DIRS = ["/usr/bin", "/usr/local/bin"]


def _executable(module: AnsibleModule, requested: Optional[str], name: str, extra_dirs: List[str]) -> Optional[str]:
    """The requested path when it is executable, else the first `name` found; None when there is none."""
    if requested is not None:
        return requested if os.path.isfile(requested) and os.access(requested, os.X_OK) else None
    return module.get_bin_path(name, opt_dirs=extra_dirs)


def _run(path: str, args: Sequence[str], timeout: int) -> CommandResult:
    """Run a probe; a hang or an exec failure becomes a failed result, never an exception."""
    # subprocess rather than module.run_command: run_command has no timeout, and a hung nvidia-smi must not hang the play.
    try:
        done = subprocess.run([path, *args], capture_output=True, text=True, errors="replace", timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return CommandResult(-1, "", f"{path} did not answer within {timeout} s")
    except OSError as error:
        return CommandResult(-1, "", f"{path} could not run: {error}")
    return CommandResult(done.returncode, done.stdout, done.stderr)


def _read(path: str) -> Optional[str]:
    """A file's text, None when it does not exist or cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _lspci(path: Optional[str], timeout: int) -> Optional[str]:
    """`lspci -nn` output, None when lspci is missing or fails (containers often have no PCI view)."""
    if path is None:
        return None
    result = _run(path, ["-nn"], timeout)
    return result.stdout if result.rc == 0 else None


def _answer(path: Optional[str], args: Sequence[str], timeout: int) -> Optional[str]:
    """What nvidia-smi printed for an extra query, None when it is missing or failed."""
    if path is None:
        return None
    result = _run(path, args, timeout)
    return result.stdout if result.rc == 0 else None


def main() -> None:
    """Probe the host and return the vllm_fleet_gpus fact."""
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi_path": {"type": "path"},
            "proc_dir": {"type": "path", "default": "/proc/driver/nvidia"},
            "lspci_path": {"type": "path"},
            "timeout": {"type": "int", "default": 30},
            "profiles": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    params = module.params
    nvidia_smi = _executable(module, params["nvidia_smi_path"], "nvidia-smi", NVIDIA_SMI_DIRS)
    information = sorted(glob.glob(os.path.join(params["proc_dir"], "gpus", "*", "information")))
    try:
        facts = gpu_facts(
            nvidia_smi=_run(nvidia_smi, NVIDIA_SMI_ARGS, params["timeout"]) if nvidia_smi else None,
            proc_version=_read(os.path.join(params["proc_dir"], "version")),
            # Sorted by PCI address, the order in which nvidia-smi numbers the GPUs.
            proc_gpu_information=[text for text in map(_read, information) if text is not None],
            lspci=_lspci(_executable(module, params["lspci_path"], "lspci", []), params["timeout"]),
            profiles=params["profiles"],
            links=_answer(nvidia_smi, LINK_ARGS, params["timeout"]),
            topology=_answer(nvidia_smi, TOPOLOGY_ARGS, params["timeout"]),
        )
    except GpuParseError as error:
        module.fail_json(msg=f"unreadable NVIDIA driver information: {error}")
    module.exit_json(changed=False, ansible_facts={"vllm_fleet_gpus": facts})


if __name__ == "__main__":
    main()
