"""Rules of the kit's local guards: nftables tables that keep some of a host's own users off some of its ports. The
output hook sees only sockets of the host's own processes, and a connection to any of the host's addresses leaves
through the loopback interface."""

from __future__ import annotations

import re
from typing import Any

from .errors import FleetError

# What useradd takes as a user name: the rules quote it, and nothing else may reach a line of them.
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}\Z")


def _checked_users(users: list[str]) -> list[str]:
    """Return the user names, sorted and once each; refuse one that is no user name."""
    wrong = [user for user in users if not isinstance(user, str) or not USER_NAME.match(user)]
    if wrong:
        raise FleetError(f"{wrong} are not user names (lower-case letters, digits, _ and -, 32 at most)")
    return sorted(set(users))


def scene_rules(scenes: list[dict[str, Any]], users: dict[str, str], ephemeral_start: int) -> list[str]:
    """Return one rule per scene: its user reaches no port below the ephemeral range but its own scene's."""
    _checked_users(list(users.values()))
    if not 1024 < int(ephemeral_start) <= 65535:
        raise FleetError(f"the host's ephemeral ports begin at {ephemeral_start}, not between 1025 and 65535")
    return [f'meta skuid "{users[scene["name"]]}" meta l4proto {{ tcp, udp }} th dport != {int(scene["port"])} '
            f"th dport < {int(ephemeral_start)} reject" for scene in scenes]


def owner_rules(ports: list[int], users: list[str]) -> list[str]:
    """Return the rule that lets only the given users open a local TCP connection to the given ports."""
    if not ports or not users:
        raise FleetError(f"a guard needs ports and users to let through, not {ports} and {users}")
    port_set = ", ".join(str(int(port)) for port in sorted(set(ports)))
    user_set = ", ".join(f'"{user}"' for user in _checked_users(users))
    return [f'oifname "lo" tcp dport {{ {port_set} }} meta skuid != {{ {user_set} }} reject with tcp reset']
