"""Filters about the inventory as a whole: each host's value of a variable."""

from __future__ import annotations

from typing import Any, Callable


def host_values(hosts: list[str], hostvars: Any, name: str) -> dict[str, Any]:
    """Return each host's variable by host name, None where the host has none (it failed this run, or the run left
    it out); Jinja's map(attribute=..., default=...) raises instead on hostvars in ansible-core 2.19."""
    return {host: hostvars[host].get(name) if host in hostvars else None for host in hosts}


class FilterModule:
    """Filters vllm.fleet.fleet_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "fleet_host_values": host_values,
        }
