"""tools/sanity.py: the collection built from the repository and installed, its metadata, and how ansible-test runs."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import ansible_test
import pytest
import sanity
import yaml
from ansible_collections.vllm.fleet.plugins.plugin_utils import vault

REPO = sanity.REPO


def test_galaxy_names_the_collection_and_its_ansible_core() -> None:
    """galaxy.yml names vllm.fleet at a version no module's version_added is newer than; runtime.yml the core."""
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"]) == ("vllm", "fleet")
    added = [re.search(r'^version_added: "([0-9.]+)"', path.read_text(), re.M)
             for path in (REPO / "plugins" / "modules").glob("*.py")]
    newest = max(tuple(map(int, match.group(1).split("."))) for match in added if match)
    assert newest <= tuple(map(int, galaxy["version"].split(".")))
    assert yaml.safe_load((REPO / "meta" / "runtime.yml").read_text()) == {"requires_ansible": ">=2.19.0"}


def test_the_built_collection_holds_the_kit_and_not_its_workshop(tmp_path: Path) -> None:
    """The artefact a user installs has every module, filter, role and playbook; no tests, lab inventory, tools, venv
    or the checkout's link to itself, and no sanity ignore file."""
    collection = sanity.build_and_install(REPO, tmp_path, Path(sys.executable).parent,
                                          sanity.clean_environment(dict(os.environ)))
    assert collection == tmp_path / "ansible_collections" / "vllm" / "fleet"
    files = {path.relative_to(collection).as_posix() for path in collection.rglob("*") if path.is_file()}
    for folder in ("plugins/modules", "plugins/filter", "plugins/plugin_utils", "plugins/module_utils", "playbooks"):
        assert {f"{folder}/{p.name}" for p in (REPO / folder).iterdir() if p.is_file()} <= files, folder
    assert {"site.yml", "meta/runtime.yml", "MANIFEST.json", "FILES.json"} <= files
    assert {f"roles/{role.name}/meta/argument_specs.yml" for role in (REPO / "roles").iterdir()} <= files
    # What the kit reads at run time beside its code: the lab's password, which the preflight's guard tries.
    assert vault.LAB_PASSWORD_FILE.relative_to(REPO).as_posix() in files
    left_out = ("tests/", "molecule/", "tools/", "inventory/", ".venv/", ".ansible/", "results/", "benchmarks/")
    assert not [name for name in files if name.startswith(left_out) or "ignore-" in name or "__pycache__" in name]
    assert not [path for path in collection.rglob("*") if path.is_symlink()]


def test_pip_version_is_read_from_ansible_test() -> None:
    """The pip version ansible-test bootstraps comes from its own source, the installed one included."""
    assert sanity.pip_version("    default_packages = dict(\n        pip='24.2',\n    )\n") == "24.2"
    source = Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
    assert re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)?", sanity.pip_version(source.read_text()))
    with pytest.raises(SystemExit):
        sanity.pip_version("no pip here")


def test_pip_bootstrap_writes_the_stand_in_but_keeps_a_real_get_pip(tmp_path: Path) -> None:
    """The stand-in is written where ansible-test looks, rewritten when it is the tool's own, never over get-pip.py."""
    path = sanity.pip_bootstrap(tmp_path, "24.2")
    assert path == tmp_path / "get_pip_24_2.py" and path.read_text() == sanity.STAND_IN
    compile(sanity.STAND_IN, str(path), "exec")
    path.write_text(sanity.STAND_IN_MARKER + "\nan older stand-in\n")
    assert sanity.pip_bootstrap(tmp_path, "24.2").read_text() == sanity.STAND_IN
    path.write_text("# the real get-pip.py\n")
    assert sanity.pip_bootstrap(tmp_path, "24.2").read_text() == "# the real get-pip.py\n"


def test_ansible_test_runs_locally_on_the_python_asked_for() -> None:
    """Every default test, on this machine (no Docker), with the extra arguments passed on."""
    command = sanity.ansible_test_command(Path("/venv/bin"), "3.11", ["--test", "pylint"])
    assert command == ["/venv/bin/ansible-test", "sanity", "--local", "--python", "3.11", "--color", "no",
                       "--test", "pylint"]


def test_the_makefiles_ansible_settings_do_not_reach_ansible_test() -> None:
    """ANSIBLE_CONFIG (the repo's plugin paths) and the lab's vault identity are dropped; the rest is kept."""
    environ = {"ANSIBLE_CONFIG": "/repo/ansible.cfg", "ANSIBLE_VAULT_IDENTITY_LIST": "lab@x", "PATH": "/bin",
               "HOME": "/root"}
    assert sanity.clean_environment(environ) == {"PATH": "/bin", "HOME": "/root"}
