"""tools/sanity.py: which files the assembled collection holds and where, its metadata, and how ansible-test is run."""

from __future__ import annotations

import os
import re
from pathlib import Path

import ansible_test
import pytest
import sanity
import yaml

REPO = sanity.REPO


def make_repo(root: Path) -> Path:
    """Write a small kit: plugins of each type, lib/vllm_fleet with a subpackage, a role, and files left out."""
    files = ["plugins/modules/m.py", "plugins/module_utils/u.py", "plugins/filter/f.py", "plugins/callback/c.py",
             "plugins/modules/__pycache__/m.cpython-311.pyc", "lib/vllm_fleet/__init__.py",
             "lib/vllm_fleet/arg_tables/t.py", "lib/vllm_fleet/__pycache__/x.cpython-311.pyc", "lib/other/o.py",
             "roles/r/tasks/main.yml", "roles/r/files/tool.py", "roles/r/files/__pycache__/tool.cpython-311.pyc",
             "tests/test_x.py", "tools/t.py", "docs/d.md", "site.yml"]
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    return root


def test_plugins_lib_and_roles_go_where_a_collection_keeps_them(tmp_path: Path) -> None:
    """Plugins keep their directory, lib/vllm_fleet becomes plugins/plugin_utils/vllm_fleet, roles stay roles; no
    bytecode, and nothing else of the repo (tests, tools, docs, playbooks) goes in."""
    files = sanity.collection_files(make_repo(tmp_path))
    assert {name: source.relative_to(tmp_path).as_posix() for name, source in files.items()} == {
        "plugins/modules/m.py": "plugins/modules/m.py",
        "plugins/module_utils/u.py": "plugins/module_utils/u.py",
        "plugins/filter/f.py": "plugins/filter/f.py",
        "plugins/callback/c.py": "plugins/callback/c.py",
        "plugins/plugin_utils/vllm_fleet/__init__.py": "lib/vllm_fleet/__init__.py",
        "plugins/plugin_utils/vllm_fleet/arg_tables/t.py": "lib/vllm_fleet/arg_tables/t.py",
        "roles/r/tasks/main.yml": "roles/r/tasks/main.yml",
        "roles/r/files/tool.py": "roles/r/files/tool.py",
    }


def test_the_kit_assembles_with_every_plugin_and_no_sanity_ignores() -> None:
    """The real kit: every module and the filter are in, and the collection has no tests/ (so no ignore file)."""
    files = sanity.collection_files(REPO)
    modules = {f"plugins/modules/{path.name}" for path in (REPO / "plugins" / "modules").glob("*.py")}
    assert modules and modules <= files.keys()
    assert "plugins/filter/vllm_fleet.py" in files and "plugins/plugin_utils/vllm_fleet/__init__.py" in files
    assert not [name for name in files if name.startswith("tests/") or "ignore-" in name]


def test_the_filter_imports_lib_from_where_the_collection_puts_it() -> None:
    """plugins/filter/vllm_fleet.py's relative import in a collection names the package where lib/vllm_fleet goes."""
    package = sanity.LIB_IN_COLLECTION.removeprefix("plugins/").replace("/", ".")
    assert f"from ..{package} import" in (REPO / "plugins" / "filter" / "vllm_fleet.py").read_text()


def test_metadata_names_the_collection_and_its_ansible_core() -> None:
    """galaxy.yml names vllm.fleet at a version no module's version_added is newer than; runtime.yml the core."""
    files = sanity.metadata_files()
    galaxy = yaml.safe_load(files["galaxy.yml"])
    assert (galaxy["namespace"], galaxy["name"]) == ("vllm", "fleet")
    added = [re.search(r'^version_added: "([0-9.]+)"', path.read_text(), re.M)
             for path in (REPO / "plugins" / "modules").glob("*.py")]
    newest = max(tuple(map(int, match.group(1).split("."))) for match in added if match)
    assert newest <= tuple(map(int, galaxy["version"].split(".")))
    assert yaml.safe_load(files["meta/runtime.yml"]) == {"requires_ansible": ">=2.19.0"}


def test_assemble_writes_the_tree_ansible_test_expects(tmp_path: Path) -> None:
    """The collection is root/ansible_collections/vllm/fleet, files keep their mode (the shebang test reads it)."""
    repo = make_repo(tmp_path / "repo")
    (repo / "plugins" / "modules" / "m.py").chmod(0o755)
    collection = sanity.assemble(repo, tmp_path / "tree")
    assert collection == tmp_path / "tree" / "ansible_collections" / "vllm" / "fleet"
    assert (collection / "plugins" / "plugin_utils" / "vllm_fleet" / "arg_tables" / "t.py").read_text() == \
        "lib/vllm_fleet/arg_tables/t.py"
    assert os.stat(collection / "plugins" / "modules" / "m.py").st_mode & 0o777 == 0o755
    assert (collection / "galaxy.yml").is_file() and (collection / "meta" / "runtime.yml").is_file()


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
