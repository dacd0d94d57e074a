"""NVIDIA driver packages: which source, route and packages install a driver branch on a host.

Pure functions over the host's facts and apt's answers; the nvidia_driver role reads them through the filter
vllm.fleet.driver_plan (docs/driver.md explains the routes).
"""

from __future__ import annotations

import re
from typing import Any

# Branches Debian's own archive ships per release: bookworm, bookworm-security and bookworm-backports all carry 535
# (nvidia-kernel-dkms and nvidia-smi in non-free, nvidia-open-kernel-dkms and nvidia-persistenced in contrib),
# read from the archive's package indexes in Nov 2026.
DEBIAN_BRANCHES: dict[str, list[int]] = {"bookworm": [535]}
# From this branch NVIDIA's CUDA repository drops the branch from Ubuntu's package names: the pinning package alone
# selects the branch.
BRANCHLESS_UBUNTU_CUDA = 590
# Debian's own packages whose names carry no branch (the headers package does not belong to the driver).
DEBIAN_BRANCHLESS = 4


def source(requested: str, distro: str, codename: str, branch: int) -> str:
    """Return where the driver comes from: the requested source, or for auto Canonical's archive on Ubuntu, Debian's
    own archive when it ships the branch, else NVIDIA's CUDA repository."""
    if requested != "auto":
        return requested
    if distro == "Ubuntu":
        return "ubuntu"
    return "debian" if branch in DEBIAN_BRANCHES.get(codename, []) else "cuda"


def kernel_flavour(kernel: str, distribution_version: str, installed: list[str], override: str = "") -> str:
    """Return the kernel flavour whose precompiled modules match: the override, else the HWE meta (generic-hwe-24.04)
    where the host has that kernel installed, else the running kernel's (6.8.0-51-generic -> generic)."""
    if override:
        return override
    match = re.match(r"^[0-9.]+-[0-9]+-([a-z0-9-]+)$", kernel)
    base = match.group(1) if match else ""
    hwe = f"{base}-hwe-{distribution_version}"
    return hwe if f"linux-image-{hwe}" in installed else base


def _names(host: dict[str, Any]) -> dict[str, Any]:
    """Return every route's package names for a host's branch, module flavour and kernel."""
    branch, headers = int(host["branch"]), host["headers_package"]
    opened = "-open" if host["open"] else ""
    ubuntu = f"{branch}{'-server' if host['server'] else ''}{opened}"
    utils = f"nvidia-utils-{branch}{'-server' if host['server'] else ''}"
    kmod = "nvidia-open-kernel-dkms" if host["open"] else "nvidia-kernel-dkms"
    suffix = f"-{branch}" if branch < BRANCHLESS_UBUNTU_CUDA else ""
    cuda = (["nvidia-driver-cuda", "nvidia-kernel-open-dkms" if host["open"] else "nvidia-kernel-dkms"]
            if host["distro"] == "Debian" else
            [f"libnvidia-compute{suffix}", f"nvidia-dkms{suffix}{opened}", f"nvidia-utils{suffix}",
             f"nvidia-compute-utils{suffix}"])
    return {
        "lrm_meta": f"linux-modules-nvidia-{ubuntu}-{host['flavour']}",
        "lrm_kernel": f"linux-modules-nvidia-{ubuntu}-{host['kernel']}",
        "ubuntu_precompiled": [f"linux-modules-nvidia-{ubuntu}-{host['flavour']}", f"nvidia-headless-no-dkms-{ubuntu}",
                               utils],
        "ubuntu_dkms": [f"nvidia-headless-{ubuntu}", utils, headers],
        "ubuntu_utils": utils,
        "debian": [kmod, "nvidia-smi", "libcuda1", "nvidia-persistenced", headers],
        "debian_kmod": kmod,
        "cuda": [f"nvidia-driver-pinning-{branch}", *cuda, headers],
        "cuda_branchless": cuda if host["distro"] == "Debian" or branch >= BRANCHLESS_UBUNTU_CUDA else [],
    }


def probe_packages(host: dict[str, Any]) -> list[str]:
    """Return every package whose apt candidate the role reads before it picks a route (both Ubuntu routes, so it
    can fall back to DKMS), or the user's own list."""
    if host["packages"]:
        return list(host["packages"])
    names = _names(host)
    if host["source"] == "ubuntu":
        return list(dict.fromkeys([*names["ubuntu_precompiled"], names["lrm_kernel"], *names["ubuntu_dkms"]]))
    return list(names["debian"] if host["source"] == "debian" else names["cuda"])


def route(host: dict[str, Any], candidates: dict[str, str]) -> str:
    """Return the route: Canonical's precompiled modules where wanted and apt has them, else DKMS on Ubuntu, else the
    source itself (debian or cuda)."""
    if host["source"] != "ubuntu":
        return str(host["source"])
    precompiled = host["precompiled"] and _names(host)["lrm_meta"] in candidates
    return "ubuntu-precompiled" if precompiled else "ubuntu-dkms"


def plan(host: dict[str, Any], candidates: dict[str, str]) -> dict[str, Any]:
    """Return what the role installs on a host for the candidates apt offers: the route, its packages, the install
    specs (branchless names pinned to <branch>.*), those without a candidate, the package whose version shows the
    branch delivered, and whether the modules are built by DKMS."""
    names = _names(host)
    chosen = route(host, candidates)
    if host["packages"]:
        packages, branchless = list(host["packages"]), []
    else:
        packages = {"ubuntu-precompiled": names["ubuntu_precompiled"]
                    + ([names["lrm_kernel"]] if names["lrm_kernel"] in candidates else []),
                    "ubuntu-dkms": names["ubuntu_dkms"], "debian": names["debian"]}.get(chosen, names["cuda"])
        branchless = (names["debian"][:DEBIAN_BRANCHLESS] if chosen == "debian"
                      else names["cuda_branchless"] if chosen == "cuda" else [])
    specs = [p for p in packages if p not in branchless] + [f"{p}={int(host['branch'])}.*" for p in branchless]
    branch_package = (names["debian_kmod"] if chosen == "debian"
                      else names["ubuntu_utils"] if chosen.startswith("ubuntu") else "")
    return {"source": host["source"], "route": chosen, "packages": packages, "install_specs": specs,
            "no_candidate": [p for p in packages if p not in candidates], "branch_package": branch_package,
            "dkms": chosen != "ubuntu-precompiled", "probe_packages": probe_packages(host)}


def host_plan(inputs: dict[str, Any], candidates: dict[str, str]) -> dict[str, Any]:
    """Return plan() for the role's inputs: its variables and facts, the source and flavour resolved first."""
    branch = int(inputs["branch"])
    host = {**inputs, "branch": branch,
            "source": source(inputs["source"], inputs["distro"], inputs["codename"], branch),
            "flavour": kernel_flavour(inputs["kernel"], inputs["distribution_version"], inputs["installed"],
                                      inputs.get("flavour_override", ""))}
    return {**plan(host, candidates), "flavour": host["flavour"], "lrm_meta": _names(host)["lrm_meta"],
            "debian_branches": DEBIAN_BRANCHES.get(str(inputs["codename"]), [])}
