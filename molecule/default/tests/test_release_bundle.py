"""The release two hosts of one platform share: one host built and packed it, the other unpacked the controller's copy
(or both did, when an earlier play had packed it). Either way each holds the same, complete, pre-compiled release."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import testinfra.host

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from releases import CURRENT, WHEELHOUSE, installed_pins, locked_pins  # noqa: E402

testinfra_hosts = ["ansible://gpu_hosts"]  # mdef4, the gateway, has tests/test_gateway.py

BUNDLES = WHEELHOUSE / "releases"


def marker(host: testinfra.host.Host) -> dict[str, object]:
    """Return the completion marker of the host's current release."""
    return json.loads(host.file(f"{host.file(CURRENT).linked_to}/.vllm-fleet-release.json").content_string)


def test_second_host_unpacked_the_release_the_controller_serves(host: testinfra.host.Host) -> None:
    """mdef2 never ran pip: its release came from a bundle on the controller whose published SHA-256 is its own, and
    which leaves the completion marker to the host that checks the unpacked release."""
    origin = str(marker(host)["installed_from"])
    if origin == "pip":
        assert host.backend.get_hostname() == "mdef1"
        return
    bundle = BUNDLES / origin
    assert bundle.name.startswith(f"{marker(host)['name']}-") and bundle.name.endswith(".tar.zst")
    with bundle.open("rb") as stream:
        assert (BUNDLES / f"{bundle.name}.sha256").read_text(encoding="utf-8").strip() == hashlib.file_digest(
            stream, "sha256").hexdigest()
    members = subprocess.run(["tar", "--list", "--zstd", "--file", str(bundle)], capture_output=True, text=True, check=True)
    assert "./bin/vllm" in members.stdout.split() and ".vllm-fleet-release.json" not in members.stdout
    assert not host.file(f"/var/lib/vllm-fleet/release-bundles/{bundle.name}").exists
    assert not host.file(f"/var/tmp/vllm-fleet-{bundle.name}").exists  # never in a world-writable directory


def test_unpacked_release_runs_from_its_byte_code(host: testinfra.host.Host) -> None:
    """Importing vLLM writes no byte code: the release arrived compiled, with the sources' times that keep it valid."""
    release = host.file(CURRENT).linked_to
    host.check_output(f"{CURRENT}/bin/python -c 'import vllm.entrypoints.openai.api_server' 2>/dev/null")
    stale = host.check_output(f"find {release} -name '*.pyc' -newer {release}/.vllm-fleet-release.json | head -5")
    assert stale == ""


def test_each_host_holds_exactly_the_lock(host: testinfra.host.Host) -> None:
    """Built or unpacked, the release holds exactly the distributions of the lock the wheelhouse build wrote."""
    assert installed_pins(host) == locked_pins(Path(host.file(CURRENT).linked_to).name)
