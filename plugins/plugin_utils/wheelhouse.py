"""Wheelhouse locks (the exact wheels a `pip install --dry-run --report` chose, as a hash-pinned requirements file)
and the plan of which hosts build a release and which unpack one built on a host of the same platform."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse


@dataclass(frozen=True)
class Wheel:
    """One wheel pip chose for the target: its distribution, file name and SHA-256."""

    name: str
    version: str
    filename: str
    sha256: str


def canonical(name: str) -> str:
    """The PEP 503 normalized form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def report_sha256(archive_info: Mapping[str, Any]) -> str:
    """The SHA-256 of a report item's archive, from `hashes` or the legacy `hash` field."""
    hashes = archive_info.get("hashes") or {}
    if "sha256" in hashes:
        return str(hashes["sha256"])
    algorithm, _equals, digest = str(archive_info.get("hash", "")).partition("=")
    if algorithm != "sha256" or not digest:
        raise ValueError(f"no sha256 in {archive_info}")
    return digest


def wheels_from_report(report: Mapping[str, Any]) -> list[Wheel]:
    """The wheels a `pip install --dry-run --report` would install, sorted by name."""
    wheels = []
    for item in report["install"]:
        url = item["download_info"]["url"]
        filename = unquote(urlparse(url).path.rsplit("/", 1)[-1])
        if not filename.endswith(".whl"):
            raise ValueError(f"{filename}: not a wheel")
        sha256 = report_sha256(item["download_info"].get("archive_info", {}))
        wheels.append(Wheel(item["metadata"]["name"], item["metadata"]["version"], filename, sha256))
    return sorted(wheels, key=lambda wheel: canonical(wheel.name))


def lock_text(wheels: Iterable[Wheel]) -> str:
    """A hash-pinned requirements file of the wheels, for `pip download/install --no-deps --require-hashes`."""
    return "".join(f"{w.name}=={w.version} --hash=sha256:{w.sha256}\n" for w in wheels)


def release_lock(report: Mapping[str, Any], leave_out: Iterable[str]) -> str:
    """The lock of a release's resolution without the distributions it leaves out (whatever their spelling)."""
    unwanted = {canonical(name) for name in leave_out}
    return lock_text(wheel for wheel in wheels_from_report(report) if canonical(wheel.name) not in unwanted)


def install_plan(bundles: Mapping[str, str], present: Iterable[str], share: bool) -> dict[str, str]:
    """How each host lacking the release gets it: `unpack` a bundle of its platform that the controller holds or
    that a host before it packs, `pack` (build, then share it), or `build` it alone (hosts without a bundle name)."""
    ready = set(present)
    plan = {}
    for host, bundle in bundles.items():
        if bundle and bundle in ready:
            plan[host] = "unpack"
        elif bundle and share:
            plan[host] = "pack"
            ready.add(bundle)
        else:
            plan[host] = "build"
    return plan
