"""Deployed state and rollback: the restore plan, the state record, failure messages, and the module on real files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO, load_as, run_module_main

from ansible_collections.vllm.fleet.plugins.plugin_utils import rollout, scenes

deployment = load_as("ansible.module_utils.vllm_fleet_deployment",
                     REPO / "plugins" / "module_utils" / "vllm_fleet_deployment.py")
deployment_module = load_as("ansible.modules.vllm_fleet_deployment",
                            REPO / "plugins" / "modules" / "deployment.py")
Layout, plan_restore = deployment.Layout, deployment.plan_restore

SCENE_OF = {"/c/realtime.yaml": "realtime", "/c/realtime.env": "realtime", "/u/vllm-scene-realtime.service": "realtime",
            "/c/batch.yaml": "batch", "/c/new.yaml": "new"}


def test_unchanged_host_needs_no_restore() -> None:
    """Recorded and current files and release alike: nothing to write, delete, restart or relink."""
    files = {"/c/realtime.yaml": "a", "/u/vllm-scene-realtime.service": "b"}
    plan = plan_restore(files, dict(files), SCENE_OF, "/r/1", "/r/1")
    assert (plan.write, plan.delete, plan.restart, plan.remove_scenes, plan.relink) == ([], [], [], [], False)
    assert plan.recorded_scenes == ["realtime"]


def test_changed_scene_is_written_back_and_restarted_only() -> None:
    """A scene whose config changed gets it back and a restart; an untouched scene does not."""
    recorded = {"/c/realtime.yaml": "a", "/c/batch.yaml": "b"}
    plan = plan_restore(recorded, {"/c/realtime.yaml": "CHANGED", "/c/batch.yaml": "b"}, SCENE_OF, "/r/1", "/r/1")
    assert plan.write == ["/c/realtime.yaml"] and plan.restart == ["realtime"] and plan.delete == []


def test_scene_added_by_the_rollout_is_removed_not_restarted() -> None:
    """Files of a scene the snapshot does not know are deleted and the scene is stopped, not restarted."""
    plan = plan_restore({"/c/realtime.yaml": "a"}, {"/c/realtime.yaml": "a", "/c/new.yaml": "n"}, SCENE_OF, None, None)
    assert plan.delete == ["/c/new.yaml"] and plan.remove_scenes == ["new"] and plan.restart == []


def test_scene_removed_by_the_rollout_comes_back() -> None:
    """A recorded scene whose files the rollout deleted is written back and (re)started."""
    plan = plan_restore({"/c/batch.yaml": "b"}, {}, SCENE_OF, "/r/1", "/r/2")
    assert plan.write == ["/c/batch.yaml"] and plan.restart == ["batch"] and plan.relink


def test_scene_files_reads_configs_envs_and_units_only(tmp_path: Path) -> None:
    """Configs, secret environments and the prefixed units count; the staging dir and other units do not."""
    (tmp_path / "c" / ".validated").mkdir(parents=True)
    (tmp_path / "u").mkdir()
    for path in ("c/realtime.yaml", "c/realtime.env", "c/.validated/realtime.yaml", "c/notes.txt",
                 "u/vllm-scene-realtime.service", "u/ssh.service"):
        (tmp_path / path).write_text(path)
    layout = Layout(tmp_path / "c", tmp_path / "u", "vllm-scene-", tmp_path / "current")
    expected = ("c/realtime.env", "c/realtime.yaml", "u/vllm-scene-realtime.service")
    assert layout.scene_files() == {str(tmp_path / path): "realtime" for path in expected}


def test_state_record_keeps_definitions_without_secret_values() -> None:
    """The record holds each scene's digests, the digest of the weights it serves and its definition, whose API key
    is a variable name."""
    definition = {"name": "realtime", "host": "0.0.0.0", "port": 8000, "api_key_var": "vault_key", "model": "qwen"}
    models = {"qwen": {"source": "hf", "manifest_sha256": "c" * 64}}
    record = rollout.state_scenes({"realtime": {"config_sha256": "a", "unit_sha256": "b"}}, [definition], models)
    assert record == {"realtime": {"config_sha256": "a", "unit_sha256": "b", "definition": definition,
                                   "weights_sha256": "c" * 64}}
    unknown = rollout.state_scenes({"realtime": {"config_sha256": "a", "unit_sha256": "b"}}, [definition])
    assert unknown["realtime"]["weights_sha256"] is None
    assert rollout.restored_scenes({"scenes": record}, ["realtime", "gone"]) == [definition]
    assert rollout.restored_scenes(None, ["realtime"]) == []


def test_failure_message_names_host_step_reason_and_restore() -> None:
    """The message names host, step and task, why, what was restored and verified, and that the rollout stopped."""
    definition = {"name": "realtime", "host": "127.0.0.1", "port": 8000}
    restore = {"release": "/opt/vllm/releases/cpu-1", "restart": ["realtime"], "removed": [], "recorded": ["realtime"],
               "fact": {"scenes": {"realtime": {"definition": definition}}}}
    result = {"failed": True, "msg": "scene realtime crashed:\nValueError: max_model_len too long"}
    message = rollout.failure_message("lab1", "scenes", "Wait for the scenes", result, restore)
    assert message.startswith("lab1: rollout failed at step scenes (task 'Wait for the scenes'): scene realtime crashed: "
                              "ValueError: max_model_len too long.")
    assert "Restored release /opt/vllm/releases/cpu-1" in message and "verified healthy: realtime." in message
    assert message.endswith("hosts of later batches were not touched.")
    unverified = rollout.failure_message("lab1", "verify", "t", result, {**restore, "fact": None})
    assert "not verified" in unverified
    assert "Nothing was changed or restarted" in rollout.failure_message("lab1", "validate", "t", result, {})
    converge = rollout.failure_message("lab1", "scenes", "Wait for the scenes", result, restore, "converge")
    assert converge.startswith("lab1: converge failed at step scenes (task 'Wait for the scenes'): scene realtime")
    assert "verified healthy: realtime." in converge and converge.endswith("The other hosts go on.")
    ends_in_a_period = rollout.failure_message("lab1", "scenes", "t", {"msg": "quantization (gptq)."}, restore)
    assert "(gptq). Restored release" in ends_in_a_period
    preview = rollout.failure_message("lab1", "scenes", "t", result, None, "converge")
    assert "Nothing was restored: a check-mode run changes nothing." in preview


def test_a_hidden_tasks_output_never_reaches_the_report() -> None:
    """A no_log task's registered result still holds what it hid: the report keeps a note instead; other tasks keep
    their one-line reason only."""
    result = {"failed": True, "stdout": "TOPSECRET", "msg": "non-zero return code TOPSECRET"}
    assert rollout.failed_result(result, {"name": "t", "no_log": True}) == {"msg": "its output is hidden (no_log)"}
    assert rollout.failed_result(result, {"name": "t", "no_log": None}) == {"msg": "non-zero return code TOPSECRET"}


def test_failure_reason_of_a_loop_names_the_failed_item() -> None:
    """A failed loop task gives the first failed item's message."""
    result = {"failed": True, "results": [{"failed": False, "msg": "ok"}, {"failed": True, "stderr": "error: bad value"}]}
    assert rollout.failure_reason(result) == "error: bad value"


def test_ready_targets_probe_on_the_host() -> None:
    """Each scene is waited for on the address the host reaches it at, through its systemd unit."""
    assert scenes.ready_targets([{"name": "batch", "host": "0.0.0.0", "port": 8001}], "vllm-scene-") == [
        {"name": "batch", "url": "http://127.0.0.1:8001", "unit": "vllm-scene-batch.service"}]


def run_module(state: str, root: Path, capsys: pytest.CaptureFixture[str], **extra: Any) -> dict[str, Any]:
    """Run the vllm.fleet.deployment module on files under root (no systemd) and return its result."""
    args = {"state": state, "unit_prefix": "vllm-scene-", "config_dir": str(root / "etc"), "unit_dir": str(root / "units"),
            "release_link": str(root / "current"), "model_dir": str(root / "models"),
            "fact_path": str(root / "facts" / "vllm_fleet.fact"), "snapshot_dir": str(root / "snapshot"), "systemd": False,
            **extra}
    return run_module_main(deployment_module, args, capsys)


@pytest.fixture()
def host_root(tmp_path: Path) -> Path:
    """A host's scene files, two releases (the first current), a model marker and a fact under tmp_path."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "units").mkdir()
    (tmp_path / "facts").mkdir()
    for release in ("r1", "r2"):
        (tmp_path / "releases" / release).mkdir(parents=True)
        (tmp_path / "releases" / release / ".vllm-fleet-release.json").write_text(json.dumps({"name": release}))
    (tmp_path / "current").symlink_to(tmp_path / "releases" / "r1")
    (tmp_path / "etc" / "realtime.yaml").write_text("max-num-seqs: 16\n")
    (tmp_path / "etc" / "realtime.env").write_text("VLLM_API_KEY=secret\n")
    (tmp_path / "etc" / "realtime.env").chmod(0o640)
    (tmp_path / "units" / "vllm-scene-realtime.service").write_text("ExecStart=r1\n")
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "models" / "tiny" / ".vllm-fleet-model.json").write_text(
        json.dumps({"source": "http", "origin": "http://mirror", "files": [{"path": "a", "sha256": "x"}]}))
    (tmp_path / "facts" / "vllm_fleet.fact").write_text(json.dumps({"deployed_at": "then"}))
    return tmp_path


def test_module_inspects_without_secret_digests(host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """inspect reports the release marker, model origin, config and unit digests, and no digest of the secret file."""
    result = run_module("inspect", host_root, capsys)
    assert result["changed"] is False and result["release_marker"] == {"name": "r1"}
    assert result["models"]["tiny"]["origin"] == "http://mirror"
    assert set(result["scenes"]["realtime"]) == {"config_sha256", "unit_sha256"}


def test_module_inspects_the_models_alone_without_a_fact_or_snapshot(host_root: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """vllm_scenes' inspect names no fact or snapshot folder: it gets the models, no fact and no interrupted run;
    a snapshot without them is refused before it touches anything."""
    args = {"unit_prefix": "vllm-scene-", "config_dir": str(host_root / "etc"), "unit_dir": str(host_root / "units"),
            "release_link": str(host_root / "current"), "model_dir": str(host_root / "models"), "systemd": False}
    result = run_module_main(deployment_module, {**args, "state": "inspect"}, capsys)
    assert result["models"]["tiny"]["origin"] == "http://mirror"
    assert (result["fact"], result["interrupted"]) == (None, None)
    refused = run_module_main(deployment_module, {**args, "state": "snapshot"}, capsys)
    assert refused["failed"] is True and "fact_path" in refused["msg"] and not (host_root / "snapshot").exists()


def test_module_snapshot_then_restore_puts_the_host_back(host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A snapshot, then a deploy that changes a config, adds a scene and moves the release, is undone by restore."""
    assert run_module("snapshot", host_root, capsys)["changed"] is True
    assert run_module("snapshot", host_root, capsys)["changed"] is False  # the same state again: nothing to record
    assert oct((host_root / "snapshot").stat().st_mode & 0o777) == "0o700"
    (host_root / "etc" / "realtime.yaml").write_text("max-model-len: 65536\n")
    (host_root / "etc" / "batch.yaml").write_text("new scene\n")
    (host_root / "current").unlink()
    (host_root / "current").symlink_to(host_root / "releases" / "r2")
    (host_root / "facts" / "vllm_fleet.fact").write_text(json.dumps({"deployed_at": "now"}))
    result = run_module("restore", host_root, capsys)
    assert result["changed"] is True and result["restart"] == ["realtime"] and result["removed"] == ["batch"]
    assert (host_root / "etc" / "realtime.yaml").read_text() == "max-num-seqs: 16\n"
    assert not (host_root / "etc" / "batch.yaml").exists()
    assert os.readlink(host_root / "current") == str(host_root / "releases" / "r1")
    assert (host_root / "facts" / "vllm_fleet.fact").read_text() == json.dumps({"deployed_at": "then"})  # byte for byte
    assert oct((host_root / "etc" / "realtime.env").stat().st_mode & 0o777) == "0o640"
    assert run_module("restore", host_root, capsys)["changed"] is False


def test_restore_of_a_scene_whose_unit_was_never_written(host_root: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A first deploy that failed before writing a new scene's unit is restored without asking systemd to disable a
    unit it has never seen (which fails: "Unit file ... does not exist")."""
    calls = host_root / "systemctl.calls"
    fake = host_root / "bin" / "systemctl"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n[ "$1" != disable ] || exit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    assert run_module("snapshot", host_root, capsys)["changed"] is True
    (host_root / "etc" / "batch.yaml").write_text("new scene\n")
    result = run_module("restore", host_root, capsys, systemd=True)
    assert not result.get("failed") and result["removed"] == ["batch"], result
    assert not (host_root / "etc" / "batch.yaml").exists()
    assert calls.read_text().split() == ["daemon-reload"]


def kept_texts(snapshot: Path) -> set[str]:
    """Return the contents of the files a snapshot keeps (its manifest left out)."""
    return {path.read_text() for path in snapshot.iterdir() if path.name != "manifest.json"}


def test_an_unfinished_run_keeps_the_last_good_snapshot(host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run that snapshotted and never finished (killed half-way) leaves its mark: the next snapshot keeps what the
    host ran before that run instead of the half-deployed state, and says whose run it was; finish clears the mark,
    and the snapshot then replaced is kept as the previous generation."""
    assert run_module("snapshot", host_root, capsys, run="rollout")["interrupted"] is None
    mark = json.loads((host_root / "snapshot.in-progress.json").read_text())
    assert mark["run"] == "rollout" and mark["started_at"]
    (host_root / "etc" / "realtime.yaml").write_text("half-deployed\n")  # then the controller was killed
    again = run_module("snapshot", host_root, capsys, run="rollout")
    assert again["interrupted"] == mark and again["changed"] is False
    assert "max-num-seqs: 16\n" in kept_texts(host_root / "snapshot")
    assert run_module("finish", host_root, capsys)["changed"] is True
    assert not (host_root / "snapshot.in-progress.json").exists()
    assert run_module("finish", host_root, capsys)["changed"] is False
    assert run_module("snapshot", host_root, capsys, run="converge")["changed"] is True
    assert "max-num-seqs: 16\n" in kept_texts(host_root / "snapshot.previous")
    assert "half-deployed\n" in kept_texts(host_root / "snapshot")


def test_check_mode_marks_nothing(host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A preview takes no snapshot and leaves no mark."""
    run_module("snapshot", host_root, capsys, run="converge", _ansible_check_mode=True)
    assert not (host_root / "snapshot.in-progress.json").exists() and not (host_root / "snapshot").exists()


def test_module_refuses_a_restore_without_snapshot(host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Restore with no snapshot fails and says why."""
    result = run_module("restore", host_root, capsys)
    assert result.get("failed") and "no snapshot" in str(result["msg"])


def test_failed_restore_message_gives_both_reasons() -> None:
    """A host whose restore fails too is reported with the step's reason and the restore's."""
    message = rollout.restore_failure_message("lab1", "scenes", "Wait", {"msg": "ValueError: max_model_len"},
                                              "Restore the snapshot", {"msg": "the recorded release is gone"})
    assert "step scenes (task 'Wait'): ValueError: max_model_len;" in message
    assert "(task 'Restore the snapshot'): the recorded release is gone." in message and "needs a person" in message
    assert message.endswith("hosts of later batches were not touched.")
    converge = rollout.restore_failure_message("lab1", "scenes", "Wait", {"msg": "x"}, "Restore", {"msg": "y"},
                                               "converge")
    assert converge.startswith("lab1: converge failed") and converge.endswith("The other hosts go on.")


@pytest.mark.parametrize(("tasks_file", "marker_task"), [
    ("roles/vllm/tasks/check.yml", "Mark the release complete"),
    ("roles/vllm_model/tasks/fetch.yml", "Write the marker that makes later runs skip the fetch"),
    ("roles/vllm/tasks/share.yml", "Publish the packed release's checksum"),
])
def test_data_reaches_the_disk_before_its_completion_marker(tasks_file: str, marker_task: str) -> None:
    """The task right before each completion marker syncs what it marks complete, so a crash never leaves a marker
    over files that were still in the page cache."""
    def flat(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Return the tasks in order, blocks opened."""
        return [leaf for task in tasks for leaf in ([task] if "block" not in task else flat(task["block"]))]
    tasks = flat(yaml.safe_load((REPO / tasks_file).read_text()))
    names = [task.get("name") for task in tasks]
    before = tasks[names.index(marker_task) - 1]
    assert before["ansible.builtin.command"]["argv"][0] == "sync", before


def test_a_rollout_snapshots_as_a_rollout() -> None:
    """playbooks/rollout.yml's snapshot is taken as a rollout, the one kind of run an unfinished run refuses."""
    plays = yaml.safe_load((REPO / "playbooks" / "rollout.yml").read_text())
    tasks = next(play for play in plays if play.get("serial"))["tasks"]
    snapshot = next(task for task in tasks if task.get("ansible.builtin.include_role", {}).get("tasks_from") == "snapshot")
    assert snapshot["vars"]["vllm_state_run"] == "rollout"
