"""What systemd says of a unit the kit installed on a lab host."""

from __future__ import annotations

import re

import testinfra.host

MAX_EXPOSURE = 2.5  # the kit's bar for every unit it installs (systemd-analyze security, 0 safest .. 10)


def exposure(host: testinfra.host.Host, unit: str) -> float:
    """Return the overall exposure level systemd-analyze security gives a unit on the host."""
    output = host.check_output(f"systemd-analyze security --no-pager {unit}")
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", output)
    assert found, output[-2000:]
    return float(found.group(1))
