"""roles/vllm/tasks/lock.yml on the controller: without a lock of the user's or a wheelhouse, the release is resolved
once from the hosts' package index into a hashed lock, and what the index serves later cannot change it."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO

PIP = [sys.executable, "-m", "pip"]


def wheel(name: str, version: str, requires: list[str], note: str = "") -> bytes:
    """Return a minimal pure-Python wheel of name and version that depends on requires."""
    dist = f"{name}-{version}.dist-info"
    metadata = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                        *(f"Requires-Dist: {r}\n" for r in requires), f"Summary: {note}\n"])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{name}/__init__.py", f"# {note}\n")
        archive.writestr(f"{dist}/METADATA", metadata)
        archive.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{dist}/RECORD", "")
    return buffer.getvalue()


def publish(root: Path, wheels: dict[str, bytes]) -> None:
    """Lay out a PEP 503 simple index of these wheels (file name: content) under root, hashes in the links."""
    for filename, content in wheels.items():
        project = filename.split("-")[0]
        (root / "files").mkdir(parents=True, exist_ok=True)
        (root / "files" / filename).write_bytes(content)
        (root / "simple" / project).mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(content).hexdigest()
        (root / "simple" / project / "index.html").write_text(
            f'<html><body><a href="../../files/{filename}#sha256={digest}">{filename}</a></body></html>\n')


@pytest.fixture
def index(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Serve an index of vllm 0.33.0 and its one dependency on loopback; yield its URL and directory."""
    root = tmp_path / "index"
    publish(root, {"vllm-0.33.0-py3-none-any.whl": wheel("vllm", "0.33.0", ["tinydep==1.0"]),
                   "tinydep-1.0-py3-none-any.whl": wheel("tinydep", "1.0", [])})
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple", root
    server.shutdown()


def resolve(tmp_path: Path, index_url: str) -> subprocess.CompletedProcess[str]:
    """Run the role's lock tasks on the controller for a host that installs vllm from index_url."""
    play = tmp_path / "lock.yml"
    play.write_text("- hosts: all\n  gather_facts: true\n  tasks:\n    - ansible.builtin.include_role:\n"
                    "        name: vllm\n        tasks_from: lock\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory"}
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "gpu1,", "-c", "local", str(play),
            "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"vllm_pip_index_url={index_url}",
            "-e", f"vllm_pip_lock_dir={tmp_path / 'locks'}", "-e", '{"vllm_pip_trusted_hosts": ["127.0.0.1"]}']
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_controller_resolves_a_hashed_lock_once_and_the_index_cannot_change_it(
        index: tuple[str, Path], tmp_path: Path) -> None:
    """The lock lists every wheel with the index's hash; a wheel swapped on the index later neither changes the lock
    nor installs: pip refuses it for its hash."""
    url, root = index
    done = resolve(tmp_path, url)
    assert done.returncode == 0, done.stdout[-3000:]
    locks = list((tmp_path / "locks").glob("cuda-0.33.0-*.lock"))
    assert len(locks) == 1, done.stdout[-2000:]
    served = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in (root / "files").iterdir()}
    assert locks[0].read_text() == (f"tinydep==1.0 --hash=sha256:{served['tinydep-1.0-py3-none-any.whl']}\n"
                                    f"vllm==0.33.0 --hash=sha256:{served['vllm-0.33.0-py3-none-any.whl']}\n")
    assert not list(Path("/tmp").glob("vllm-fleet-lock.*")), "the scratch directory with pip's sources stayed"

    publish(root, {"tinydep-1.0-py3-none-any.whl": wheel("tinydep", "1.0", [], note="rewritten in transit")})
    locked = locks[0].read_text()
    assert resolve(tmp_path, url).returncode == 0 and locks[0].read_text() == locked
    install = subprocess.run([*PIP, "install", "--dry-run", "--no-deps", "--require-hashes", "--only-binary=:all:",
                              "--index-url", url, "--trusted-host", "127.0.0.1", "--target", str(tmp_path / "t"),
                              "--no-cache-dir", "--requirement", str(locks[0])],
                             capture_output=True, text=True, timeout=120, check=False)
    assert install.returncode != 0 and "THESE PACKAGES DO NOT MATCH THE HASHES" in install.stderr, install.stderr
