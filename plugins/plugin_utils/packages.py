"""What dpkg says a host has installed and held, read from the lines of the kit's one dpkg-query
(roles/vllm_fleet: _vllm_fleet_dpkg_query, one line per package: "<status abbrev>|<package>|<version>")."""

from __future__ import annotations

# dpkg's abbreviated status: the wanted state ("h" held, "i" install, ...), then the current one ("i" installed).
_INSTALLED = "i"
_HELD = "h"


def _statuses(lines: list[str]) -> list[tuple[str, str]]:
    """Return each well-formed line's status and package."""
    fields = [line.split("|") for line in lines]
    return [(field[0], field[1]) for field in fields if len(field) == 3]


def installed(lines: list[str]) -> list[str]:
    """Return the packages dpkg has installed (held or not)."""
    return [package for status, package in _statuses(lines) if status[1:2] == _INSTALLED]


def held(lines: list[str]) -> list[str]:
    """Return the packages held against upgrades, installed or not."""
    return [package for status, package in _statuses(lines) if status[:1] == _HELD]
