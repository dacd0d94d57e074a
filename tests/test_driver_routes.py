"""The NVIDIA driver's package routing (plugins/plugin_utils/driver.py): every route on Debian and Ubuntu, as the
nvidia_driver role installs it."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.vllm.fleet.plugins.plugin_utils import driver

NOBLE = {"distro": "Ubuntu", "codename": "noble", "distribution_version": "24.04", "branch": 580, "source": "auto",
         "open": True, "server": True, "kernel": "6.8.0-51-generic", "installed": [], "packages": [],
         "headers_package": "linux-headers-generic", "precompiled": True}
BOOKWORM = {**NOBLE, "distro": "Debian", "codename": "bookworm", "distribution_version": "12", "branch": 535,
            "kernel": "6.1.0-28-amd64", "headers_package": "linux-headers-amd64", "server": False}


def host(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A host's inputs with some changed."""
    return {**base, **changes}


def test_ubuntu_takes_canonicals_precompiled_modules_where_apt_has_them() -> None:
    """Noble, R580 server, open: the flavour's module meta, the headless set without DKMS and the running kernel's
    modules when apt offers them; nvidia-utils shows the branch delivered."""
    candidates = {"linux-modules-nvidia-580-server-open-generic": "580.95", "nvidia-headless-no-dkms-580-server-open":
                  "580.95", "nvidia-utils-580-server": "580.95",
                  "linux-modules-nvidia-580-server-open-6.8.0-51-generic": "580.95"}
    plan = driver.host_plan(NOBLE, candidates)
    assert (plan["source"], plan["route"], plan["dkms"], plan["flavour"]) == ("ubuntu", "ubuntu-precompiled", False,
                                                                               "generic")
    assert plan["packages"] == plan["install_specs"] == [
        "linux-modules-nvidia-580-server-open-generic", "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server", "linux-modules-nvidia-580-server-open-6.8.0-51-generic"]
    assert plan["no_candidate"] == [] and plan["branch_package"] == "nvidia-utils-580-server"
    assert plan["probe_packages"] == [*plan["packages"][:3], plan["packages"][3], "nvidia-headless-580-server-open",
                                      "linux-headers-generic"]


def test_ubuntu_falls_back_to_dkms() -> None:
    """Without the precompiled meta (or with them turned off) the DKMS set, desktop stream when not server."""
    plan = driver.host_plan(host(NOBLE, server=False), {"nvidia-headless-580-open": "580.95"})
    assert (plan["route"], plan["dkms"]) == ("ubuntu-dkms", True)
    assert plan["packages"] == ["nvidia-headless-580-open", "nvidia-utils-580", "linux-headers-generic"]
    assert plan["no_candidate"] == ["nvidia-utils-580", "linux-headers-generic"]
    off = driver.host_plan(host(NOBLE, precompiled=False), {"linux-modules-nvidia-580-server-open-generic": "1"})
    assert off["route"] == "ubuntu-dkms"


def test_debian_archive_for_its_own_branch_pinned_by_version() -> None:
    """Bookworm ships 535: Debian's own packages, the four driver ones pinned to 535.* (their names carry no branch)."""
    plan = driver.host_plan(BOOKWORM, {})
    assert (plan["source"], plan["route"], plan["branch_package"]) == ("debian", "debian", "nvidia-open-kernel-dkms")
    assert plan["install_specs"] == ["linux-headers-amd64", "nvidia-open-kernel-dkms=535.*", "nvidia-smi=535.*",
                                     "libcuda1=535.*", "nvidia-persistenced=535.*"]
    proprietary = driver.host_plan(host(BOOKWORM, open=False), {})
    assert proprietary["packages"][0] == "nvidia-kernel-dkms"


@pytest.mark.parametrize(("base", "branch", "specs"), [
    (BOOKWORM, 580, ["nvidia-driver-pinning-580", "linux-headers-amd64", "nvidia-driver-cuda=580.*",
                     "nvidia-kernel-open-dkms=580.*"]),
    (NOBLE, 580, ["nvidia-driver-pinning-580", "libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-utils-580",
                  "nvidia-compute-utils-580", "linux-headers-generic"]),
    (NOBLE, 590, ["nvidia-driver-pinning-590", "linux-headers-generic", "libnvidia-compute=590.*",
                  "nvidia-dkms-open=590.*", "nvidia-utils=590.*", "nvidia-compute-utils=590.*"]),
])
def test_nvidias_cuda_repository(base: dict[str, Any], branch: int, specs: list[str]) -> None:
    """A branch Debian does not ship (auto), or source cuda on Ubuntu: the pinning package and the compute set; names
    without a branch (Debian's, Ubuntu's from 590) pinned to <branch>.*."""
    plan = driver.host_plan(host(base, branch=branch, source="auto" if base is BOOKWORM else "cuda"), {})
    assert (plan["source"], plan["route"], plan["branch_package"], plan["dkms"]) == ("cuda", "cuda", "", True)
    assert plan["install_specs"] == specs


def test_the_users_own_packages_win() -> None:
    """nvidia_driver_packages replaces the route's list, installed as given."""
    plan = driver.host_plan(host(NOBLE, packages=["nvidia-headless-580-server-open"]), {})
    assert plan["packages"] == plan["install_specs"] == plan["probe_packages"] == ["nvidia-headless-580-server-open"]


def test_kernel_flavour() -> None:
    """The running kernel's flavour, the HWE meta where it is installed, the override above both."""
    assert driver.kernel_flavour("6.8.0-51-generic", "24.04", []) == "generic"
    assert driver.kernel_flavour("6.8.0-51-generic", "24.04", ["linux-image-generic-hwe-24.04"]) == "generic-hwe-24.04"
    assert driver.kernel_flavour("6.8.0-1015-aws", "24.04", [], "aws") == "aws"
    assert driver.kernel_flavour("weird", "24.04", []) == ""
    assert driver.source("debian", "Ubuntu", "noble", 580) == "debian"
