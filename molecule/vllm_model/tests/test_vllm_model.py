"""Real state of a lab host after the vllm_model role, then its repair and failure paths, run for real.

The tests run in file order: the state checks first, then the ones that run ansible-playbook again
(a damaged file is fetched again; a wrong sha256 and a controller copy that differs from its manifest are refused).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import testinfra.host

MODEL_DIR = "/var/lib/vllm/models"
MARKER = ".vllm-fleet-model.json"
SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "shared"))

from playbooks import run_playbook as shared_run_playbook  # noqa: E402
WWW = Path("/var/lib/vllm-fleet-lab/www/molecule-model")  # mmod_www_dir in vars/mmod.yml
WORK = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "vllm-model"  # mmod_work_dir
LAB = "mmod"  # molecule.yml: the lab whose hosts these runs may touch
MODELS = ["tiny-http", "tiny-controller"]
WEIGHTS = "model.safetensors"


def expected(name: str) -> dict[str, str]:
    """Relative path -> sha256 of a model's files, computed on the controller from the manifest or the source."""
    if name == "tiny-http":
        manifest = json.loads((WWW / "manifest.json").read_text())
        return {f["path"]: f["sha256"] for f in manifest["files"]}
    root = WORK / "controller-model"
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file()}


def host_digests(host: testinfra.host.Host, name: str) -> dict[str, str]:
    """Relative path -> sha256 of a model's files, computed on the host with sha256sum (the marker left out)."""
    root = f"{MODEL_DIR}/{name}"
    out = host.check_output(f"cd {root} && find . -type f ! -name {MARKER} -exec sha256sum {{}} +")
    return {line.split(maxsplit=1)[1].removeprefix("./"): line.split()[0] for line in out.splitlines()}


def run_playbook(host: testinfra.host.Host, playbook: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run a playbook of this scenario as molecule would (its inventory, its lab only, this host only)."""
    return shared_run_playbook(SCENARIO, LAB, host.backend.get_hostname(), playbook, *extra)


@pytest.mark.parametrize("name", MODELS)
def test_model_files_have_the_exact_sha256(host: testinfra.host.Host, name: str) -> None:
    """Every file of the model is on the host with the sha256 of the manifest (http) or the controller's copy."""
    assert host_digests(host, name) == expected(name)


@pytest.mark.parametrize("name", MODELS)
def test_marker_records_the_verified_manifest(host: testinfra.host.Host, name: str) -> None:
    """The marker names the model and lists every file with its size and sha256."""
    marker = json.loads(host.file(f"{MODEL_DIR}/{name}/{MARKER}").content_string)
    assert marker["name"] == name
    assert marker["source"] == ("http" if name == "tiny-http" else "controller")
    assert {f["path"]: f["sha256"] for f in marker["files"]} == expected(name)


@pytest.mark.parametrize("name", MODELS)
def test_model_is_owned_by_root_and_readable_by_the_vllm_group(host: testinfra.host.Host, name: str) -> None:
    """Directories are root:vllm 0750 and files root:vllm 0640, marker included."""
    listing = host.check_output(f"find {MODEL_DIR}/{name} -printf '%y %u:%g %m %P\\n'").splitlines()
    assert listing
    for line in listing:
        kind, owner, mode, _ = (line.split(" ", 3) + [""])[:4]
        assert owner == "root:vllm", line
        assert mode == ("750" if kind == "d" else "640"), line
    top = host.file(MODEL_DIR)
    assert (top.user, top.group, top.mode) == ("root", "vllm", 0o750)


def test_service_user_reads_the_weights_but_cannot_change_them(host: testinfra.host.Host) -> None:
    """The vllm user can read the weights, cannot write or add files; other users cannot read them."""
    weights = f"{MODEL_DIR}/tiny-http/{WEIGHTS}"
    assert host.run(f"runuser -u vllm -- sha256sum {weights}").rc == 0
    assert host.run(f"runuser -u vllm -- sh -c 'echo x >> {weights}'").rc != 0
    assert host.run(f"runuser -u vllm -- touch {MODEL_DIR}/tiny-http/new").rc != 0
    assert host.run(f"runuser -u nobody -- cat {weights}").rc != 0


def test_only_the_models_are_left(host: testinfra.host.Host) -> None:
    """No .partial-* or .previous-* directory is left next to the models."""
    assert sorted(host.check_output(f"ls -A {MODEL_DIR}").split()) == sorted(MODELS)


def test_check_mode_reports_a_new_model_without_fetching_it(host: testinfra.host.Host) -> None:
    """--check with one more model passes, reports a change and leaves the host as it was (no partial directory)."""
    before = host.check_output(f"find {MODEL_DIR} -printf '%i %s %T@ %p\\n' | sort")
    extra = [{"name": "tiny-new", "source": "http", "base_url": "{{ lab_files_url }}/molecule-model",
              "manifest": str(WWW / "manifest.json")}]
    result = run_playbook(host, "converge.yml", "--check", "-e", json.dumps({"mmod_extra_models": extra}))
    assert result.returncode == 0, result.stdout[-3000:]
    assert "failed=0" in result.stdout and "changed=0" not in result.stdout, result.stdout[-3000:]
    assert "model tiny-new (http): not installed" in result.stdout
    assert host.check_output(f"find {MODEL_DIR} -printf '%i %s %T@ %p\\n' | sort") == before


def test_damaged_file_is_fetched_again(host: testinfra.host.Host) -> None:
    """A truncated weights file no longer matches the marker's size: the next run fetches the model again."""
    weights = f"{MODEL_DIR}/tiny-http/{WEIGHTS}"
    host.check_output(f"truncate -s 100 {weights}")
    result = run_playbook(host, "converge.yml")
    assert result.returncode == 0, result.stdout[-3000:]
    assert f"model tiny-http (http): file {WEIGHTS} has 100 bytes instead of" in result.stdout
    assert host_digests(host, "tiny-http") == expected("tiny-http")
    assert sorted(host.check_output(f"ls -A {MODEL_DIR}").split()) == sorted(MODELS)


def test_wrong_sha256_fails_and_keeps_the_installed_models(host: testinfra.host.Host) -> None:
    """A new model whose manifest has a wrong sha256 fails naming host, model, file, expected and actual sha256.

    No partial directory remains and the installed models are the very same directories with the same bytes.
    """
    before = host.check_output(f"stat -c '%i %n' {MODEL_DIR}/tiny-http {MODEL_DIR}/tiny-controller")
    result = run_playbook(host, "failure.yml", "-e", "mmod_case=checksum")
    assert result.returncode == 2, result.stdout[-3000:]
    bad = {f["path"]: f["sha256"] for f in json.loads((WORK / "bad-http-manifest.json").read_text())["files"]}
    hostname = host.backend.get_hostname()
    assert (f"{hostname}: model tiny-bad was not installed: file {WEIGHTS}: expected sha256 {bad[WEIGHTS]}, "
            f"actual sha256 {expected('tiny-http')[WEIGHTS]}. Fix: fix the file on the mirror") in result.stdout
    assert f"Removed the partial download {MODEL_DIR}/.partial-tiny-bad" in result.stdout
    assert sorted(host.check_output(f"ls -A {MODEL_DIR}").split()) == sorted(MODELS)
    assert host.check_output(f"stat -c '%i %n' {MODEL_DIR}/tiny-http {MODEL_DIR}/tiny-controller") == before
    for name in MODELS:
        assert host_digests(host, name) == expected(name)


def test_controller_copy_that_differs_from_its_manifest_fails_in_preflight(host: testinfra.host.Host) -> None:
    """A controller model whose files do not match its manifest fails in preflight: nothing on the host changes."""
    before = host.check_output(f"find {MODEL_DIR} -printf '%i %s %T@ %p\\n' | sort")
    result = run_playbook(host, "failure.yml", "-e", "mmod_case=preflight")
    assert result.returncode == 2, result.stdout[-3000:]
    bad = {f["path"]: f["sha256"] for f in json.loads((WORK / "bad-controller-manifest.json").read_text())["files"]}
    assert (f"vllm_model_list[name=tiny-bad-controller].controller_dir: file {WEIGHTS}: "
            f"expected sha256 {bad[WEIGHTS]}, actual sha256 {expected('tiny-controller')[WEIGHTS]}") in result.stdout
    assert "changed=0" in result.stdout
    assert host.check_output(f"find {MODEL_DIR} -printf '%i %s %T@ %p\\n' | sort") == before


# A stand-in for the release's hf CLI (the lab reaches no Hub): it writes, into --local-dir, the account it ran as and
# hf's own metadata directory; for the repo lab/planted it also plants a link to a root-only file, and it always leaves
# a process behind, as a malicious release's hf could.
HF_STAND_IN = "/usr/local/lib/hf-stand-in"
HF_SCRIPT = """#!/bin/sh
set -eu
repo=$2
while [ "$1" != --local-dir ]; do shift; done
mkdir -p "$2/.cache/huggingface"
id -un > "$2/identity.txt"
if [ "$repo" = lab/planted ]; then ln -s /etc/shadow "$2/planted"; fi
setsid sleep 3600 </dev/null >/dev/null 2>&1 &
"""


def hf_model(name: str, repo: str) -> str:
    """Extra vars for converge.yml: one more model, from Hugging Face by the stand-in hf."""
    model = {"name": name, "source": "hf", "repo": repo, "revision": "0" * 40}
    return json.dumps({"mmod_extra_models": [model], "vllm_model_hf_cli": HF_STAND_IN})


@pytest.fixture()
def hf_stand_in(host: testinfra.host.Host) -> None:
    """Install the stand-in hf on the host."""
    encoded = base64.b64encode(HF_SCRIPT.encode()).decode()
    host.check_output(f"echo {encoded} | base64 -d > {HF_STAND_IN} && chmod 0755 {HF_STAND_IN}")


@pytest.mark.usefixtures("hf_stand_in")
def test_hf_download_runs_as_the_service_user_and_root_owns_the_result(host: testinfra.host.Host) -> None:
    """hf is the release's code: it runs as vllm, leaves no process behind, and the installed model is root's,
    without hf's metadata."""
    result = run_playbook(host, "converge.yml", "-e", hf_model("tiny-hf", "lab/tiny"))
    try:
        assert result.returncode == 0, result.stdout[-3000:]
        assert host.file(f"{MODEL_DIR}/tiny-hf/identity.txt").content_string.strip() == "vllm"
        assert host.check_output(f"stat -c '%U:%G %a' {MODEL_DIR}/tiny-hf/identity.txt") == "root:vllm 640"
        assert not host.file(f"{MODEL_DIR}/tiny-hf/.cache").exists
        # The process hf left behind did not outlive it (it could have changed the files after their check).
        assert host.run("pgrep -u vllm -f 'sleep 3600'").rc == 1
    finally:
        host.check_output(f"rm -rf {MODEL_DIR}/tiny-hf")


@pytest.mark.usefixtures("hf_stand_in")
def test_a_link_hf_plants_is_refused_and_never_followed(host: testinfra.host.Host) -> None:
    """A download holding a link to a root-only file fails naming it; the file it points at keeps its owner and mode."""
    shadow = host.check_output("stat -c '%U:%G %a' /etc/shadow")
    result = run_playbook(host, "converge.yml", "-e", hf_model("tiny-planted", "lab/planted"))
    assert result.returncode == 2, result.stdout[-3000:]
    hostname = host.backend.get_hostname()
    assert f"{hostname}: model tiny-planted: hf download left links or special files (planted)" in result.stdout
    assert host.check_output("stat -c '%U:%G %a' /etc/shadow") == shadow
    assert sorted(host.check_output(f"ls -A {MODEL_DIR}").split()) == sorted(MODELS)
