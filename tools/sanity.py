#!/usr/bin/env python3
"""Build the collection vllm.fleet from the repository, install the artefact into a temporary tree, and run Ansible's own
sanity tests (`ansible-test sanity`) on what was installed: every default test, no ignore file.

The repository is the collection as it stands (galaxy.yml, meta/runtime.yml, plugins/, roles/, playbooks/ at its root),
so `ansible-galaxy collection build` packs it as a user would get it (build_ignore leaves the development files out),
and `ansible-galaxy collection install` puts it under TREE/ansible_collections/vllm/fleet, where ansible-test runs.

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

import yaml

REPO = Path(__file__).resolve().parents[1]
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


def build_and_install(repo: Path, tree: Path, bin_dir: Path, environ: dict[str, str]) -> Path:
    """Build the collection from repo, install the artefact under tree and return the installed collection's directory."""
    galaxy = yaml.safe_load((repo / "galaxy.yml").read_text())
    artefact = tree / f"{galaxy['namespace']}-{galaxy['name']}-{galaxy['version']}.tar.gz"
    for command in ([str(bin_dir / "ansible-galaxy"), "collection", "build", str(repo), "--output-path", str(tree)],
                    [str(bin_dir / "ansible-galaxy"), "collection", "install", str(artefact), "-p", str(tree), "--force"]):
        subprocess.run(command, cwd=tree, env=environ, check=True, stdout=subprocess.DEVNULL)
    return tree / "ansible_collections" / galaxy["namespace"] / galaxy["name"]


def clean_environment(environ: dict[str, str]) -> dict[str, str]:
    """Return environ without Ansible settings (the Makefile's ANSIBLE_CONFIG would add the repo's plugin paths)."""
    return {key: value for key, value in environ.items() if not key.startswith("ANSIBLE_")}


def main(argv: list[str] | None = None) -> int:
    """Build and install the collection in a temporary tree, run ansible-test sanity on it, return its exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", metavar="DIR", type=Path, help="install under DIR and keep it (for a look after)")
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
            root.mkdir(parents=True, exist_ok=True)
        environ = clean_environment(dict(os.environ))
        collection = build_and_install(REPO, root, bin_dir, environ)
        command = ansible_test_command(bin_dir, python, extra)
        print(f"sanity: {collection}\nsanity: {' '.join(command)}", flush=True)
        started = time.monotonic()
        status = subprocess.run(command, cwd=collection, env=environ, check=False).returncode
        print(f"sanity: ansible-test exited {status} after {time.monotonic() - started:.0f} s", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
