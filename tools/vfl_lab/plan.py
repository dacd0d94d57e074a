"""Pure planning for the lab: distro recipes, apt mirror discovery, host names and addresses."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

# Bump when the way a root is built changes in a way the recipe fields below do not capture.
RECIPE_VERSION = 1
ROOT_PACKAGES = (
    "ca-certificates", "curl", "dbus", "iproute2", "nftables", "openssh-server", "python3", "sudo", "systemd",
    "systemd-sysv",
)
LAB_NET_PREFIX = "10.213"
# Index 0 is never a host: its .1 carries the controller's file server for the lab (wheelhouse, models).
FILES_ADDRESS = f"{LAB_NET_PREFIX}.0.1"
FILES_PORT = 8213
MAX_INDEX = 254


class LabError(Exception):
    """A problem the user can fix; its message says how."""


@dataclass(frozen=True)
class Distro:
    """How to debootstrap one distribution release."""

    name: str
    suite: str
    archive: str
    script: str | None = None
    keyring: str | None = None  # path inside the pinned keyring package; None: the machine's Debian keyring


DISTROS: dict[str, Distro] = {
    "debian12": Distro("debian12", "bookworm", "debian"),
    "ubuntu22.04": Distro("ubuntu22.04", "jammy", "ubuntu", "gutsy", "usr/share/keyrings/ubuntu-archive-keyring.gpg"),
    "ubuntu24.04": Distro("ubuntu24.04", "noble", "ubuntu", "gutsy", "usr/share/keyrings/ubuntu-archive-keyring.gpg"),
}
# Debian ships no Ubuntu keyring: take Ubuntu's own package from the mirror, trusted by this pinned digest.
UBUNTU_KEYRING_DEB = "pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb"
UBUNTU_KEYRING_SHA256 = "36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8"


@dataclass(frozen=True)
class HostPlan:
    """Names and addresses of one lab host."""

    lab: str
    name: str
    index: int
    netns: str
    veth: str
    gateway: str
    address: str
    role: str = "gpu"  # "gpu": in group gpu_hosts; "gateway": in group gateways


def distro_for(name: str) -> Distro:
    """Return the recipe of a distro name, or explain which names exist."""
    try:
        return DISTROS[name]
    except KeyError:
        raise LabError(f"unknown distro {name!r}: use one of {', '.join(sorted(DISTROS))}") from None


def recipe_digest(distro: Distro) -> str:
    """Return a short digest of everything that shapes a root filesystem."""
    recipe = {"version": RECIPE_VERSION, "distro": asdict(distro), "packages": sorted(ROOT_PACKAGES)}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def _one_line_sources(text: str) -> list[tuple[str, list[str]]]:
    """Return (uri, suites) of each `deb` line of a sources.list file."""
    entries = []
    for line in text.splitlines():
        line = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(line) >= 3 and line[0] == "deb":
            entries.append((line[1], [line[2]]))
    return entries


def _deb822_sources(text: str) -> list[tuple[str, list[str]]]:
    """Return (uri, suites) of each enabled `Types: deb` stanza of a .sources file."""
    entries = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[0].isspace():
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes").lower() != "no":
            suites = fields.get("suites", "").split()
            entries.extend((uri, suites) for uri in fields.get("uris", "").split())
    return entries


def debian_mirror(sources: dict[str, str]) -> str:
    """Return the first Debian archive URI of the machine's apt sources (file name -> text)."""
    for file_name, text in sorted(sources.items()):
        entries = _deb822_sources(text) if file_name.endswith(".sources") else _one_line_sources(text)
        for uri, suites in entries:
            if uri.startswith(("http://", "https://")) and not any(s.endswith("-security") for s in suites):
                return uri.rstrip("/")
    raise LabError("no Debian mirror in /etc/apt/sources.list or /etc/apt/sources.list.d: add one, or pass --mirror URL")


def mirror_for(distro: Distro, debian_uri: str) -> str:
    """Return the archive URI for a distro: Ubuntu lives under /ubuntu on the same mirror host."""
    if distro.archive == "debian":
        return debian_uri
    parts = urlsplit(debian_uri)
    return f"{parts.scheme}://{parts.netloc}/{distro.archive}"


def host_plan(lab: str, first_index: int, count: int, gateways: int = 0) -> list[HostPlan]:
    """Return the plan of `count` GPU-role hosts and then `gateways` gateway hosts of a lab, from index first_index."""
    if not re.fullmatch(r"[a-z][a-z0-9]{0,11}", lab):
        raise LabError(f"lab name {lab!r} is invalid: use 1-12 lowercase letters or digits, starting with a letter")
    last = first_index + count + gateways - 1
    if count < 1 or gateways < 0 or first_index < 1 or last > MAX_INDEX:
        raise LabError(f"lab indexes {first_index}..{last} are out of range: use 1..{MAX_INDEX}, and at least 1 host")
    return [
        HostPlan(
            lab=lab,
            name=f"{lab}{n}",
            index=index,
            netns=f"vfl{index}",
            veth=f"vfl{index}",
            gateway=f"{LAB_NET_PREFIX}.{index}.1",
            address=f"{LAB_NET_PREFIX}.{index}.2",
            role="gpu" if n <= count else "gateway",
        )
        for n, index in enumerate(range(first_index, last + 1), start=1)
    ]


def ansible_inventory(hosts: list[HostPlan], key_file: str, known_hosts: str, monitoring: bool = False) -> dict[str, object]:
    """Return Ansible's JSON inventory for running lab hosts: group `lab`, and `gpu_hosts` or `gateways` by role; with
    monitoring, the gateways are the fleet's monitoring hosts too (group `monitoring`)."""
    names = [h.name for h in hosts]
    ssh_args = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
    hostvars = {
        h.name: {
            "ansible_host": h.address,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": key_file,
            "ansible_ssh_common_args": ssh_args,
            "lab_index": h.index,
            "lab_files_url": f"http://{FILES_ADDRESS}:{FILES_PORT}",
        }
        for h in hosts
    }
    return {"lab": {"hosts": names}, "gpu_hosts": {"hosts": [h.name for h in hosts if h.role == "gpu"]},
            "gateways": {"hosts": [h.name for h in hosts if h.role == "gateway"]},
            "monitoring": {"hosts": [h.name for h in hosts if h.role == "gateway" and monitoring]},
            "_meta": {"hostvars": hostvars}}
