"""Make the repo's Python tools importable in tests, and load the kit's filter plugins as Ansible does."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ansible.module_utils.common import warnings as module_warnings
from ansible.module_utils.testing import patch_module_args

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))


def load_as(name: str, path: Path) -> ModuleType:
    """Import a file under the module name Ansible gives it (e.g. ansible.module_utils.<file> on a managed host)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def tracked(*pathspecs: str) -> list[str]:
    """Return the repository's tracked files that match git pathspecs (all of them with none), relative to it."""
    return subprocess.run(["git", "ls-files", *pathspecs], cwd=REPO, text=True, capture_output=True,
                          check=True).stdout.split()


def filter_plugins() -> dict[str, dict[str, Any]]:
    """Return each filter plugin of the collection (by its file's stem) with its filters by name, as Ansible loads it."""
    return {path.stem: importlib.import_module(f"ansible_collections.vllm.fleet.plugins.filter.{path.stem}")
            .FilterModule().filters() for path in sorted((REPO / "plugins" / "filter").glob("*.py"))}


def fleet_filters() -> dict[str, Any]:
    """Return every filter of the collection by its full name (vllm.fleet.<name>)."""
    return {f"vllm.fleet.{name}": function for filters in filter_plugins().values() for name, function in filters.items()}


def run_module_main(module: ModuleType, args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """Run an Ansible module's main() in this process, as Ansible runs it on a host, and return its JSON result."""
    # On a host each module runs in a fresh process: warnings of an earlier run in this one must not carry over.
    module_warnings._global_warnings.clear()
    module_warnings._global_deprecations.clear()
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        module.main()
    result = json.loads(capsys.readouterr().out)
    assert exit_info.value.code == (1 if result.get("failed") else 0)
    result.pop("invocation", None)  # the controller drops it too, unless asked for it
    return result
