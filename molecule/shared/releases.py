"""What testinfra tests compare a host's vLLM release with: the lock the controller's wheelhouse build wrote."""

from __future__ import annotations

import re
from pathlib import Path

import testinfra.host

CURRENT = "/opt/vllm/current"
WHEELHOUSE = Path("/var/lib/vllm-fleet-lab/www/wheels")


def pins(lines: str) -> dict[str, str]:
    """Return the `name==version` pins of a freeze or lock, by PEP 503 name, without pip's own tools."""
    found = (re.match(r"([A-Za-z0-9._-]+)==(\S+)", line) for line in lines.splitlines())
    named = {re.sub(r"[-_.]+", "-", m[1]).lower(): m[2] for m in found if m}
    return {name: version for name, version in named.items() if name not in ("pip", "setuptools", "wheel")}


def locked_pins(release: str) -> dict[str, str]:
    """Return the pins of the lock of the named release."""
    return pins((WHEELHOUSE / f"{release}.lock").read_text(encoding="utf-8"))


def installed_pins(host: testinfra.host.Host) -> dict[str, str]:
    """Return the pins of what the host's current release holds (its pip freeze)."""
    return pins(host.check_output(f"{CURRENT}/bin/pip freeze 2>/dev/null"))
