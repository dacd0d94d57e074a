"""tools/run_scene.py: a scene's unit read as systemd reads it, and its process started and stopped for real."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import run_scene

UNIT = """# Ansible managed
[Unit]
Description=vLLM scene realtime
StartLimitBurst=5

[Service]
Type=exec
User=nobody
Group=nogroup
EnvironmentFile={env_file}
Environment="CUDA_VISIBLE_DEVICES=0"
Environment="HF_HOME=/var/lib/vllm/cache/realtime/huggingface"
RuntimeDirectory={runtime}
WorkingDirectory={workdir}
ExecStartPre=/bin/ln -sfn {workdir} /run/{runtime}/torchinductor_nobody
ExecStart={exec_start}
TimeoutStopSec=5

[Install]
WantedBy=multi-user.target
"""


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> bool:
    """Wait until condition() holds or timeout s have passed, and return it: a loaded machine may take seconds."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def unit_text(tmp_path: Path, exec_start: str, user: str = "nobody") -> str:
    """Return a scene unit shaped like roles/vllm_scenes/templates/vllm-scene.service.j2 renders it."""
    (tmp_path / "scene.env").write_text("# secret\nVLLM_API_KEY='s3cret key'\n\n", encoding="utf-8")
    return UNIT.format(env_file=tmp_path / "scene.env", runtime="vllm-scene-test-run-scene", workdir=tmp_path,
                       exec_start=exec_start).replace("User=nobody", f"User={user}")


def test_unit_is_read_as_systemd_reads_it(tmp_path: Path) -> None:
    """ExecStart, user, directories and both kinds of environment come from the [Service] section only."""
    unit = run_scene.parse_unit(unit_text(tmp_path, "/opt/vllm/releases/r/bin/vllm serve --config /etc/vllm/s.yaml"))
    assert unit.exec_start == ["/opt/vllm/releases/r/bin/vllm", "serve", "--config", "/etc/vllm/s.yaml"]
    assert unit.exec_start_pre == [["/bin/ln", "-sfn", str(tmp_path), "/run/vllm-scene-test-run-scene/torchinductor_nobody"]]
    assert (unit.user, unit.group, unit.runtime_directory, unit.timeout_stop_sec) == (
        "nobody", "nogroup", "vllm-scene-test-run-scene", 5)
    assert unit.environment == {"CUDA_VISIBLE_DEVICES": "0", "HF_HOME": "/var/lib/vllm/cache/realtime/huggingface"}
    env = run_scene.service_environment(unit, {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "3"})
    assert env == {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0", "VLLM_API_KEY": "s3cret key",
                   "HF_HOME": "/var/lib/vllm/cache/realtime/huggingface"}
    with pytest.raises(ValueError, match="no ExecStart"):
        run_scene.parse_unit("[Service]\nUser=vllm\n")


def test_only_host_variables_that_match_are_kept() -> None:
    """PATH, the driver's library path and the shared-GPU variables pass; everything else of the caller stays out."""
    kept = run_scene.kept_environment({"PATH": "/bin", "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64", "HOME": "/root",
                                       "NCCL_NVLS_ENABLE": "0", "OPENAI_API_KEY": "x"}, run_scene.DEFAULT_KEEP)
    assert kept == {"PATH": "/bin", "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64", "NCCL_NVLS_ENABLE": "0"}


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process as another user needs root")
def test_start_runs_the_unit_as_its_user_and_stop_ends_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """ExecStartPre and the process run as the unit's user with its environment, the process in its own session; stop
    ends the whole group."""
    # pytest's tmp_path sits below a 0700 directory the unit's user cannot enter.
    tmp_path = Path(tempfile.mkdtemp(prefix="run-scene-"))
    tmp_path.chmod(0o777)
    monkeypatch.setattr(run_scene, "STATE_DIR", tmp_path / "state")
    out = tmp_path / "seen"
    script = f"/bin/sh -c 'id -un > {out}; echo $VLLM_API_KEY $CUDA_VISIBLE_DEVICES >> {out}; sleep 60 & wait'"
    (tmp_path / "units").mkdir()
    (tmp_path / "units" / "vllm-scene-t.service").write_text(unit_text(tmp_path, script), encoding="utf-8")
    pid = run_scene.start("t", tmp_path / "units", tmp_path / "t.log", run_scene.DEFAULT_KEEP)
    wait_for(lambda: out.exists() and len(out.read_text(encoding="utf-8").splitlines()) == 2)
    assert out.read_text(encoding="utf-8").splitlines() == ["nobody", "s3cret key 0"]
    assert os.getpgid(pid) == pid and Path("/run/vllm-scene-test-run-scene").is_dir()
    link = Path("/run/vllm-scene-test-run-scene/torchinductor_nobody")
    assert link.readlink() == tmp_path and link.lstat().st_uid == pwd.getpwnam("nobody").pw_uid
    assert run_scene.main(["status", "t"]) == 0
    assert wait_for(lambda: len(run_scene.group_members(pid)) == 2)  # sh and its sleep
    assert run_scene.stop("t", tmp_path / "units") is True
    assert not run_scene.alive(pid) and run_scene.group_members(pid) == []
    assert run_scene.stop("t", tmp_path / "units") is False
    assert run_scene.main(["status", "t"]) == 1
    link.unlink()
    os.rmdir("/run/vllm-scene-test-run-scene")
    shutil.rmtree(tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a scene's process needs root")
def test_a_scene_deaf_to_sigterm_is_killed_and_gone_when_stop_returns(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """A group that ignores SIGTERM gets SIGKILL after TimeoutStopSec; stop returns once none of it runs."""
    monkeypatch.setattr(run_scene, "STATE_DIR", tmp_path / "state")
    (tmp_path / "units").mkdir()
    unit = unit_text(tmp_path, "/bin/sh -c 'trap \"\" TERM; sleep 60 & wait'", user="root")
    (tmp_path / "units" / "vllm-scene-t.service").write_text(unit.replace("TimeoutStopSec=5", "TimeoutStopSec=1"),
                                                             encoding="utf-8")
    pid = run_scene.start("t", tmp_path / "units", tmp_path / "t.log", run_scene.DEFAULT_KEEP)
    assert wait_for(lambda: len(run_scene.group_members(pid)) == 2)  # the trap is set once sh has started its sleep
    started = time.monotonic()
    assert run_scene.stop("t", tmp_path / "units") is True
    assert not run_scene.alive(pid) and run_scene.group_members(pid) == []
    assert time.monotonic() - started >= 1  # it waited TimeoutStopSec for the SIGTERM that changed nothing
    Path("/run/vllm-scene-test-run-scene/torchinductor_nobody").unlink()
    os.rmdir("/run/vllm-scene-test-run-scene")
