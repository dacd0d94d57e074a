"""What dpkg says a host has installed and held, read from the lines of the kit's one dpkg-query
(roles/vllm_fleet: _vllm_fleet_dpkg_query, one line per package: "<status abbrev>|<package>|<version>")."""

from __future__ import annotations

# dpkg's abbreviated status: the wanted state ("h" held, "i" install, ...), then the current one ("i" installed).
_INSTALLED = "i"


def _fields(lines: list[str]) -> list[tuple[str, str, str]]:
    """Return each well-formed line as its status, package and version."""
    fields = [line.split("|") for line in lines]
    return [(status, package, version) for status, package, version in (f for f in fields if len(f) == 3)]


def installed(lines: list[str]) -> list[str]:
    """Return the packages dpkg has installed (held or not)."""
    return [package for status, package, _ in _fields(lines) if status[1:2] == _INSTALLED]


def held(lines: list[str]) -> list[str]:
    """Return the packages held against upgrades, installed or not."""
    return [package for status, package, _ in _fields(lines) if status[:1] == "h"]
