"""The repository is the collection vllm.fleet: its metadata, the checkout's link to itself, shared code imported by
its collection name (never through sys.path), and programs for hosts that import nothing of the kit."""

from __future__ import annotations

import os
import re

import yaml
from conftest import REPO, tracked

LINK = REPO / ".ansible" / "collections" / "ansible_collections" / "vllm" / "fleet"


def test_the_checkout_is_the_collection_through_one_tracked_link() -> None:
    """The link is tracked, relative, and names the checkout; ansible.cfg searches the folder it is in."""
    assert LINK.is_symlink() and os.readlink(LINK) == "../../../.."
    assert LINK.resolve() == REPO.resolve()
    assert ".ansible/collections/ansible_collections/vllm/fleet" in tracked(".ansible")
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"]) == ("vllm", "fleet")
    assert re.search(r"^collections_path = \.ansible/collections$", (REPO / "ansible.cfg").read_text(), re.M)


def test_no_plugin_edits_the_import_path() -> None:
    """Plugins, tools and tests import the shared code by its collection name: no sys.path edit in plugins/ or
    tools/, and none that puts the shared code on it anywhere."""
    offenders = [name for name in tracked("plugins/**.py", "tools/**.py") if "sys.path" in (REPO / name).read_text()]
    assert not offenders, offenders
    shared = re.compile(r"sys\.path.*(plugin_utils|\"lib\")")
    offenders = [name for name in tracked("*.py") if shared.search((REPO / name).read_text())]
    assert not offenders, offenders


def test_ansible_cfg_sets_no_plugin_path() -> None:
    """Filters and modules are found as the collection's, so ansible.cfg names no filter, module or module_utils path
    (which would make a second, unqualified copy of each)."""
    config = (REPO / "ansible.cfg").read_text()
    assert not re.search(r"^(filter_plugins|library|module_utils)\s*=", config, re.M)


def test_programs_for_hosts_import_nothing_of_the_kit() -> None:
    """A role's files/*.py runs on a host, where the collection is not: it imports only the standard library and
    what the host has (vLLM), never the kit's shared code."""
    kit = re.compile(r"^\s*(from|import)\s+(ansible_collections|vllm_fleet)\b", re.M)
    programs = tracked("roles/*/files/*.py")
    assert programs
    assert not [name for name in programs if kit.search((REPO / name).read_text())]


def test_modules_are_called_by_their_collection_names() -> None:
    """Every task that runs one of the kit's modules names it vllm.fleet.<module>."""
    modules = "|".join(p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))
    bare = re.compile(rf"^\s*(- )?(vllm_fleet_)?({modules}):", re.M)
    tasks = tracked("roles/*/tasks/*.yml", "roles/*/handlers/*.yml", "playbooks/*.yml", "playbooks/**/*.yml",
                    "molecule/*/*.yml")
    assert tasks
    offenders = [name for name in tasks if bare.search((REPO / name).read_text())]
    assert not offenders, offenders
