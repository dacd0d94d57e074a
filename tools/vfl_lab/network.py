"""Network namespaces, veth pairs and the NAT that lets lab hosts reach the apt mirror."""

from __future__ import annotations

import json
from pathlib import Path

from .plan import LAB_NET_PREFIX, HostPlan, LabError
from .system import run

LAB_RANGE = f"{LAB_NET_PREFIX}.0.0/16"
RULE_COMMENT = "vllm-fleet-lab"
_RULES = [
    ["-t", "nat", "POSTROUTING", "-s", LAB_RANGE, "!", "-d", LAB_RANGE, "-j", "MASQUERADE"],
    ["-t", "filter", "FORWARD", "-s", LAB_RANGE, "-j", "ACCEPT"],
    ["-t", "filter", "FORWARD", "-d", LAB_RANGE, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"],
]
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


def index_in_use(plan: HostPlan) -> bool:
    """Tell whether the netns or host-side link of a lab index already exists."""
    links = run(["ip", "-o", "link", "show"]).stdout
    netns = run(["ip", "netns", "list"]).stdout.split()
    return plan.netns in netns or f" {plan.veth}@" in links or f" {plan.veth}:" in links


def create(plan: HostPlan) -> None:
    """Create the host's netns and a veth pair: gateway on the machine, address inside."""
    run(["ip", "netns", "add", plan.netns])
    run(["ip", "link", "add", plan.veth, "type", "veth", "peer", "name", "eth0", "netns", plan.netns])
    run(["ip", "addr", "add", f"{plan.gateway}/24", "dev", plan.veth])
    run(["ip", "link", "set", plan.veth, "up"])
    for argv in (["addr", "add", f"{plan.address}/24", "dev", "eth0"], ["link", "set", "eth0", "up"],
                 ["link", "set", "lo", "up"], ["route", "add", "default", "via", plan.gateway]):
        run(["ip", "-n", plan.netns, *argv])


def destroy(plan: HostPlan) -> None:
    """Remove the veth pair and the netns of a host, whatever of them exists."""
    run(["ip", "link", "del", plan.veth], check=False)
    run(["ip", "netns", "del", plan.netns], check=False)


def _iptables(action: str, rule: list[str]) -> bool:
    """Apply -A/-C/-D to one lab rule; return whether iptables succeeded."""
    table, chain, *match = rule[1:]
    argv = ["iptables", "-w", "-t", table, action, chain, *match, "-m", "comment", "--comment", RULE_COMMENT]
    return run(argv, check=False).returncode == 0


def enable_nat(state_file: Path) -> None:
    """Turn on forwarding and the lab's NAT rules once, remembering the previous ip_forward."""
    if not state_file.exists():
        state_file.write_text(json.dumps({"ip_forward": IP_FORWARD.read_text().strip()}))
    for rule in _RULES:
        if not _iptables("-C", rule) and not _iptables("-A", rule):
            raise LabError(f"could not add the lab's iptables rule {' '.join(rule)}: is the iptables module loaded?")
    IP_FORWARD.write_text("1\n")


def disable_nat(state_file: Path) -> None:
    """Remove the lab's NAT rules and restore ip_forward as it was before the first lab host."""
    for rule in _RULES:
        while _iptables("-C", rule):
            _iptables("-D", rule)
    if state_file.exists():
        IP_FORWARD.write_text(json.loads(state_file.read_text())["ip_forward"] + "\n")
        state_file.unlink()
