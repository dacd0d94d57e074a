#!/usr/bin/env python3
"""Run Ansible's own sanity tests (`ansible-test sanity`) on the kit, assembled as a collection in a temporary tree.

ansible-test only tests collections: a tree ansible_collections/<namespace>/<name>/ with plugins/ and roles/ in it. The
kit keeps its own top-level layout (ansible.cfg points Ansible at plugins/ and roles/), so this copies what a
collection holds into a temporary tree and runs ansible-test there; nothing is written into the repo, and no sanity
test is ignored (the collection has no tests/sanity/ignore-*.txt).

What goes where (collection_files):
  plugins/{modules,module_utils,filter,callback}/*.py  ->  plugins/<same>/
  lib/vllm_fleet/ (the pure logic the filter plugin calls)  ->  plugins/plugin_utils/vllm_fleet/
  roles/  ->  roles/
and a galaxy.yml and meta/runtime.yml that name the collection and the ansible-core it needs.

ansible-test runs with --local on this controller's Python; each sanity test gets a virtual environment that
ansible-test makes itself under ~/.ansible/test/venv (its pinned requirements, from the package index pip is
configured with), so the kit's .venv is not changed. To put pip into an empty environment ansible-test downloads pip's
get-pip.py from Ansible's CI file host, not from the package index, and a machine that reaches PyPI may not reach that
host; pip_bootstrap() writes a stand-in to the cache file ansible-test reads first (ensurepip, then the pip version
ansible-test asks for, from the package index).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAMESPACE, NAME = "vllm", "fleet"
VERSION = "0.2.0"  # ansible-test wants one; the kit has none of its own, so the newest version_added of its modules
REQUIRES_ANSIBLE = ">=2.19.0"
PLUGIN_TYPES = ("modules", "module_utils", "filter", "callback")
LIB = "lib/vllm_fleet"
LIB_IN_COLLECTION = "plugins/plugin_utils/vllm_fleet"  # where plugins/filter/vllm_fleet.py looks in a collection
SKIPPED_PARTS = {"__pycache__"}
SKIPPED_SUFFIXES = {".pyc", ".pyo"}
# ansible-test's cache of pip's bootstrap script, and the marker that tells this tool's stand-in from the real one.
PIP_BOOTSTRAP_CACHE = Path("~/.ansible/test/cache")
STAND_IN_MARKER = "# vllm-fleet tools/sanity.py stand-in for get-pip.py"
STAND_IN = f'''{STAND_IN_MARKER}
"""Install pip with Python's own ensurepip, then the packages ansible-test asks for from the configured index."""
import subprocess
import sys

# In a child process: ensurepip turns pip's configuration off in its own process environment.
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "--upgrade", "--force-reinstall", *args]))
'''


def kept(relative: Path) -> bool:
    """Tell whether a file (its path in the repo) belongs in the collection: no bytecode, nothing in __pycache__."""
    return relative.suffix not in SKIPPED_SUFFIXES and not SKIPPED_PARTS & set(relative.parts)


def collection_files(repo: Path) -> dict[str, Path]:
    """Return the collection's files: path inside the collection -> file in the repo."""
    files: dict[str, Path] = {}
    for plugin_type in PLUGIN_TYPES:
        for source in sorted((repo / "plugins" / plugin_type).glob("*.py")):
            files[f"plugins/{plugin_type}/{source.name}"] = source
    for tree, target in ((LIB, LIB_IN_COLLECTION), ("roles", "roles")):
        for source in sorted((repo / tree).rglob("*")):
            if source.is_file() and kept(source.relative_to(repo)):
                files[f"{target}/{source.relative_to(repo / tree).as_posix()}"] = source
    return files


def metadata_files() -> dict[str, str]:
    """Return the collection's metadata files and their text: its name and version, and the ansible-core it needs."""
    return {
        "galaxy.yml": f"---\nnamespace: {NAMESPACE}\nname: {NAME}\nversion: {VERSION}\nreadme: README.md\n"
                      "authors:\n  - vllm-fleet\n",
        "meta/runtime.yml": f"---\nrequires_ansible: \"{REQUIRES_ANSIBLE}\"\n",
        "README.md": "# vllm.fleet\n\nThe vllm-fleet kit, assembled by tools/sanity.py for `ansible-test sanity`.\n",
    }


def assemble(repo: Path, root: Path) -> Path:
    """Write the collection under root (root/ansible_collections/<namespace>/<name>) and return its directory."""
    collection = root / "ansible_collections" / NAMESPACE / NAME
    for relative, source in collection_files(repo).items():
        target = collection / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)  # keeps the mode: ansible-test's shebang test checks execute bits
    for relative, text in metadata_files().items():
        target = collection / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return collection


def pip_version(ansible_test_source: str) -> str:
    """Return the pip version ansible-test bootstraps into its environments, from its python_requirements.py."""
    match = re.search(r"default_packages = dict\(\s*pip='([0-9.]+)'", ansible_test_source)
    if not match:
        raise SystemExit("tools/sanity.py: cannot find the pip version in ansible-test's python_requirements.py")
    return match.group(1)


def pip_bootstrap(cache_dir: Path, version: str) -> Path:
    """Write the get-pip.py stand-in where ansible-test looks first, unless a real get-pip.py is cached there."""
    path = cache_dir / f"get_pip_{version.replace('.', '_')}.py"
    if not path.exists() or path.read_text().startswith(STAND_IN_MARKER):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(STAND_IN)
    return path


def ansible_test_command(bin_dir: Path, python: str, extra: list[str]) -> list[str]:
    """Return the ansible-test command that runs every default sanity test on this Python, here, without Docker."""
    return [str(bin_dir / "ansible-test"), "sanity", "--local", "--python", python, "--color", "no", *extra]


def clean_environment(environ: dict[str, str]) -> dict[str, str]:
    """Return environ without Ansible settings (the Makefile's ANSIBLE_CONFIG would add the repo's plugin paths)."""
    return {key: value for key, value in environ.items() if not key.startswith("ANSIBLE_")}


def main(argv: list[str] | None = None) -> int:
    """Assemble the collection in a temporary tree, run ansible-test sanity on it and return its exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", metavar="DIR", type=Path, help="assemble under DIR and keep it (for a look after)")
    args, extra = parser.parse_known_args(argv)  # the rest goes to ansible-test, e.g. --test pylint -v
    bin_dir = Path(sys.executable).parent  # the venv's: its ansible-test belongs to the ansible-core it runs
    spec = importlib.util.find_spec("ansible_test")
    if spec is None or spec.origin is None:
        raise SystemExit("tools/sanity.py: no ansible_test package in this Python (ansible-core installs it)")
    pip_bootstrap(PIP_BOOTSTRAP_CACHE.expanduser(),
                  pip_version((Path(spec.origin).parent / "_internal" / "python_requirements.py").read_text()))
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-sanity-") as temporary:
        root = args.keep.resolve() if args.keep else Path(temporary)
        if args.keep:
            shutil.rmtree(root / "ansible_collections", ignore_errors=True)
        collection = assemble(REPO, root)
        command = ansible_test_command(bin_dir, python, extra)
        print(f"sanity: {len(collection_files(REPO))} files in {collection}\nsanity: {' '.join(command)}", flush=True)
        started = time.monotonic()
        status = subprocess.run(command, cwd=collection, env=clean_environment(dict(os.environ)), check=False).returncode
        print(f"sanity: ansible-test exited {status} after {time.monotonic() - started:.0f} s", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
