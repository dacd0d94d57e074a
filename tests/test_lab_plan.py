"""Unit tests of the lab's pure planning: mirrors, recipes, names and addresses, inventory."""

import pytest

from vfl_lab import plan

DEB822 = """Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_deb822_mirror_skips_security_archive() -> None:
    """The main archive of a deb822 file is the mirror; the security one is not."""
    assert plan.debian_mirror({"debian.sources": DEB822}) == "http://mirror.example/debian"


def test_one_line_mirror_with_options_and_comments() -> None:
    """One-line sources: options in brackets, comments and deb-src lines are understood."""
    text = ("# deb http://old.example/debian bookworm main\n"
            "deb-src http://src.example/debian bookworm main\n"
            "deb http://sec.example/debian-security bookworm-security main\n"
            "deb [arch=amd64 signed-by=/k.gpg] http://one.example/debian/ bookworm main\n")
    assert plan.debian_mirror({"sources.list": text}) == "http://one.example/debian"


def test_disabled_deb822_stanza_is_ignored() -> None:
    """A stanza with Enabled: no is not a mirror."""
    text = "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n"
    with pytest.raises(plan.LabError, match="--mirror"):
        plan.debian_mirror({"off.sources": text})


def test_missing_mirror_says_what_to_do() -> None:
    """No mirror at all is a one-line error naming the fix."""
    with pytest.raises(plan.LabError, match="add one, or pass --mirror URL"):
        plan.debian_mirror({})


def test_ubuntu_archive_lives_beside_debian_on_the_mirror() -> None:
    """Ubuntu roots come from /ubuntu on the Debian mirror's host."""
    ubuntu = plan.distro_for("ubuntu24.04")
    assert plan.mirror_for(ubuntu, "http://mirror.example/debian") == "http://mirror.example/ubuntu"
    assert plan.mirror_for(plan.distro_for("debian12"), "http://m.example/debian") == "http://m.example/debian"


def test_unknown_distro_lists_known_ones() -> None:
    """An unknown distro names the valid choices."""
    with pytest.raises(plan.LabError, match="debian12, ubuntu22.04, ubuntu24.04"):
        plan.distro_for("fedora40")


def test_recipe_digest_is_stable_and_distinct() -> None:
    """The cache key is the same for the same recipe and differs between distros and package sets."""
    debian = plan.distro_for("debian12")
    assert plan.recipe_digest(debian) == plan.recipe_digest(plan.Distro("debian12", "bookworm", "debian"))
    assert plan.recipe_digest(debian) != plan.recipe_digest(plan.distro_for("ubuntu22.04"))
    assert plan.recipe_digest(debian) != plan.recipe_digest(plan.Distro("debian12", "trixie", "debian"))


def test_host_plan_names_and_addresses() -> None:
    """Host n of a lab takes index first+n-1, its own netns and a /24 of 10.213."""
    hosts = plan.host_plan("lab", 3, 2)
    assert [(h.name, h.index, h.netns, h.gateway, h.address) for h in hosts] == [
        ("lab1", 3, "vfl3", "10.213.3.1", "10.213.3.2"),
        ("lab2", 4, "vfl4", "10.213.4.1", "10.213.4.2"),
    ]
    assert all(len(h.veth) <= 15 for h in plan.host_plan("abcdefghijkl", 250, 5))


@pytest.mark.parametrize(("lab", "first", "count"), [("Lab", 1, 1), ("1lab", 1, 1), ("lab", 0, 1), ("lab", 254, 2),
                                                     ("lab", 1, 0), ("averyverylongname", 1, 1)])
def test_host_plan_rejects_bad_input(lab: str, first: int, count: int) -> None:
    """Bad lab names and out-of-range indexes are refused with a LabError."""
    with pytest.raises(plan.LabError):
        plan.host_plan(lab, first, count)


def test_gateway_hosts_follow_the_gpu_hosts() -> None:
    """Gateways take the next names and indexes after the GPU-role hosts, and count against the index range."""
    hosts = plan.host_plan("lab", 3, 2, gateways=1)
    assert [(h.name, h.index, h.role) for h in hosts] == [("lab1", 3, "gpu"), ("lab2", 4, "gpu"),
                                                           ("lab3", 5, "gateway")]
    with pytest.raises(plan.LabError):
        plan.host_plan("lab", 253, 1, gateways=2)


def test_inventory_groups_and_strict_host_keys() -> None:
    """The inventory puts GPU-role hosts in gpu_hosts, gateways in gateways, and checks host keys."""
    inventory = plan.ansible_inventory(plan.host_plan("lab", 1, 2, gateways=1), "/s/id", "/s/known_hosts")
    assert inventory["gpu_hosts"] == {"hosts": ["lab1", "lab2"]}
    assert inventory["gateways"] == {"hosts": ["lab3"]}
    assert inventory["lab"] == {"hosts": ["lab1", "lab2", "lab3"]}
    lab2 = inventory["_meta"]["hostvars"]["lab2"]  # type: ignore[index]
    assert lab2["ansible_host"] == "10.213.2.2"
    assert lab2["ansible_ssh_private_key_file"] == "/s/id"
    assert "StrictHostKeyChecking=yes" in lab2["ansible_ssh_common_args"]
    assert inventory["monitoring"] == {"hosts": []}


def test_the_gateways_monitor_the_lab_when_asked() -> None:
    """With monitoring, the gateway hosts are in group monitoring too, and no GPU host is."""
    inventory = plan.ansible_inventory(plan.host_plan("lab", 1, 2, gateways=1), "/s/id", "/s/known_hosts", True)
    assert inventory["monitoring"] == {"hosts": ["lab3"]}
