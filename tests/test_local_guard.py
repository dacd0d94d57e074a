"""The kit's local guards: the rules its filters write, and nft's own check of them in a table as the template makes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

from ansible_collections.vllm.fleet.plugins.plugin_utils import local_guard

from ansible_collections.vllm.fleet.plugins.plugin_utils.errors import FleetError

TEMPLATE = REPO / "roles/vllm_fleet/templates/local-guard.nft.j2"


def nft_check(tmp_path: Path, rules: list[str]) -> subprocess.CompletedProcess[str]:
    """Run nft --check on a table holding the rules, written as local-guard.nft.j2 writes it."""
    if shutil.which("nft") is None:
        pytest.fail("nft is missing: tools/install-host-packages installs nftables")
    body = "\n".join(f"\t\t{rule}" for rule in rules)
    text = ("table inet vllm_fleet_test\ndelete table inet vllm_fleet_test\ntable inet vllm_fleet_test {\n"
            "\tchain output {\n\t\ttype filter hook output priority filter; policy accept;\n"
            f"{body}\n\t}}\n}}\n")
    (tmp_path / "guard.nft").write_text(text)
    return subprocess.run(["nft", "--check", "--file", str(tmp_path / "guard.nft")], text=True, capture_output=True,
                          check=False)


def test_the_template_writes_the_table_the_test_checks() -> None:
    """The test's table has the template's shape: replaced in one transaction, rules in an output chain."""
    template = TEMPLATE.read_text()
    assert "delete table inet {{ _vllm_fleet_local_guard.table }}" in template
    assert "type filter hook output priority filter; policy accept;" in template
    assert "{% for rule in vllm_fleet_local_guard_rules %}" in template


def test_each_scene_user_reaches_only_its_own_port_below_the_ephemeral_range(tmp_path: Path) -> None:
    """One rule per scene, its port the only one below the ephemeral range it may reach; nft accepts them."""
    scenes = [{"name": "realtime", "port": 8000}, {"name": "batch", "port": 8001}]
    rules = local_guard.scene_rules(scenes, {"realtime": "root", "batch": "nobody"}, 32768)
    assert rules == ['meta skuid "root" meta l4proto { tcp, udp } th dport != 8000 th dport < 32768 reject',
                     'meta skuid "nobody" meta l4proto { tcp, udp } th dport != 8001 th dport < 32768 reject']
    checked = nft_check(tmp_path, rules)
    assert checked.returncode == 0, checked.stderr


def test_only_the_listed_users_reach_the_ports(tmp_path: Path) -> None:
    """Local TCP connections to the ports from any other user are reset; nft accepts the rule."""
    rules = local_guard.owner_rules([9093, 9090, 9090], ["root", "nobody", "root"])
    assert rules == ['oifname "lo" tcp dport { 9090, 9093 } meta skuid != { "nobody", "root" } reject with tcp reset']
    checked = nft_check(tmp_path, rules)
    assert checked.returncode == 0, checked.stderr


def test_a_user_the_host_does_not_have_is_refused_by_nft(tmp_path: Path) -> None:
    """nft resolves names as it loads: an unknown one fails its check (the roles' preflights refuse it before)."""
    checked = nft_check(tmp_path, local_guard.owner_rules([9090], ["no-such-user-here"]))
    assert checked.returncode != 0


@pytest.mark.parametrize(("ports", "users"), [([], ["root"]), ([9090], [])])
def test_a_guard_without_ports_or_users_is_refused(ports: list[int], users: list[str]) -> None:
    """A guard that would let no one through, or guard nothing, is an error, not an empty rule."""
    with pytest.raises(FleetError):
        local_guard.owner_rules(ports, users)


@pytest.mark.parametrize("start", [0, 1024, 70000])
def test_an_ephemeral_range_out_of_bounds_is_refused(start: int) -> None:
    """The host's ephemeral range must begin above the privileged ports and within the port space."""
    with pytest.raises(FleetError):
        local_guard.scene_rules([{"name": "a", "port": 8000}], {"a": "vllm-a"}, start)


@pytest.mark.parametrize("user", ["Root", "a b", "x\nreject", "-flag", "a" * 33])
def test_a_name_that_is_no_user_name_never_reaches_a_rule(user: str) -> None:
    """The rules quote user names: anything but a user name is refused before it is written."""
    with pytest.raises(FleetError, match="not user names"):
        local_guard.owner_rules([9090], [user])
    with pytest.raises(FleetError, match="not user names"):
        local_guard.scene_rules([{"name": "a", "port": 8000}], {"a": user}, 32768)
