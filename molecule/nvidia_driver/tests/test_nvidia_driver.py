"""Real state of GPU-less lab hosts after the forced install: apt sources on the host's own mirror, nouveau
blacklisted, the driver packages resolvable from those sources, nothing installed, nothing held."""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import testinfra.host

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "shared"))

from playbooks import run_playbook  # noqa: E402

SOURCES = "/etc/apt/sources.list.d/vllm-fleet-nvidia-driver.sources"
BLACKLIST = "/etc/modprobe.d/vllm-fleet-blacklist-nouveau.conf"
# Per host: components the role must add for the release pocket, and packages with their branch and the
# "suite/component" apt must take them from.
EXPECTED = {
    "mdrv1": ("contrib non-free non-free-firmware",
              {"nvidia-open-kernel-dkms": ("535.", "bookworm/contrib"), "nvidia-smi": ("535.", "bookworm/non-free")}),
    "mdrv2": ("contrib non-free non-free-firmware",
              {"nvidia-kernel-dkms": ("535.", "bookworm/non-free"), "nvidia-persistenced": ("535.", "bookworm/contrib")}),
    "mdru1": ("restricted",
              {"nvidia-utils-580-server": ("580.", "noble-updates/restricted"),
               "linux-modules-nvidia-580-server-open-generic": ("6.", "noble-updates/restricted")}),
    "mdru2": ("restricted",
              {"nvidia-dkms-580-open": ("580.", "noble-updates/restricted"),
               "nvidia-utils-580": ("580.", "noble-updates/restricted")}),
}


def name(host: testinfra.host.Host) -> str:
    """Return the inventory name of the host under test."""
    return host.backend.get_hostname()


def stanzas(text: str) -> list[dict[str, str]]:
    """Parse a deb822 sources file into its stanzas."""
    parsed = []
    for block in re.split(r"\n\s*\n", text):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith("#"))
        if fields:
            parsed.append(fields)
    return parsed


def host_mirror(host: testinfra.host.Host) -> str:
    """Return the mirror of the host's own release line in /etc/apt/sources.list (as the lab tool wrote it)."""
    lines = host.file("/etc/apt/sources.list").content_string.splitlines()
    line = next(entry for entry in lines if entry.startswith("deb "))
    return line.split()[1]


def test_sources_add_components_on_the_hosts_own_mirror(host: testinfra.host.Host) -> None:
    """The role's file adds the components the route needs, on the mirror the host already uses, and nothing else."""
    components, _ = EXPECTED[name(host)]
    parsed = stanzas(host.file(SOURCES).content_string)
    codename = host.system_info.codename
    release = next(s for s in parsed if s["Suites"] == codename)
    assert release["Components"] == components
    assert {s["URIs"] for s in parsed} == {host_mirror(host)}
    assert all(s["Types"] == "deb" for s in parsed)
    assert host.file(SOURCES).mode == 0o644 and host.file(SOURCES).user == "root"


def test_apt_configures_nothing_twice(host: testinfra.host.Host) -> None:
    """apt reads the sources without warnings about a target configured more than once."""
    listing = host.run("apt-get indextargets --no-release-info --format '$(RELEASE)/$(COMPONENT)' 'Created-By: Packages'")
    assert listing.rc == 0 and "configured multiple times" not in listing.stderr
    assert "W:" not in host.run("apt-cache policy").stderr


def test_driver_packages_resolve_from_the_configured_sources(host: testinfra.host.Host) -> None:
    """Each key package has a candidate of the expected branch, served by the component the role added."""
    for package, (version, origin) in EXPECTED[name(host)][1].items():
        policy = host.check_output(f"apt-cache policy {package}")
        candidate = re.search(r"Candidate: (\S+)", policy)
        assert candidate and candidate.group(1).startswith(version), policy
        assert f" {origin} " in policy, policy


def test_nouveau_blacklisted(host: testinfra.host.Host) -> None:
    """nouveau is blacklisted (and kept from mode-setting) in modprobe.d."""
    blacklist = host.file(BLACKLIST)
    assert blacklist.exists and blacklist.mode == 0o644
    assert {"blacklist nouveau", "options nouveau modeset=0"} <= set(blacklist.content_string.splitlines())


def test_simulation_installed_and_held_nothing(host: testinfra.host.Host) -> None:
    """A forced install on a GPU-less host installs no driver package, so there is nothing to hold."""
    installed = host.check_output("dpkg-query --show --showformat='${db:Status-Abbrev} ${Package}\\n'")
    driver = [line for line in installed.splitlines()
              if re.match(r"^[ih]i\s+(nvidia-|libnvidia-|libcuda|linux-modules-nvidia-|firmware-nvidia-|dkms$)",
                          line)]
    assert driver == []
    assert host.check_output("apt-mark showhold") == ""


def test_no_nvidia_module_loaded_and_no_reboot(host: testinfra.host.Host) -> None:
    """Nothing tried to load a driver or reboot: systemd has been up since before the role ran."""
    assert not host.file("/proc/driver/nvidia").exists
    assert float(host.file("/proc/uptime").content_string.split()[0]) > 20


@functools.cache
def check_mode_run() -> str:
    """Run the forced install in check mode on every host once; return the output."""
    result = run_playbook(SCENARIO, "mdrv", "gpu_hosts", "converge.yml", "--check")
    assert result.returncode == 0, result.stdout[-4000:]
    return result.stdout


def test_check_mode_on_the_converged_host_changes_nothing(host: testinfra.host.Host) -> None:
    """Check mode of the forced install on a converged host reports no change."""
    recap = re.search(rf"^{name(host)}\s+: ok=\d+\s+changed=(\d+)", check_mode_run(), re.M)
    assert recap and recap.group(1) == "0", check_mode_run()[-4000:]
