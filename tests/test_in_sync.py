"""In-sync skip: the inputs digest, the host fingerprint's verdict, and the module on real files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import REPO, load_as, run_module_main

from ansible_collections.vllm.fleet.plugins.plugin_utils import in_sync

logic = load_as("ansible.module_utils.vllm_fleet_in_sync", REPO / "plugins" / "module_utils" / "vllm_fleet_in_sync.py")
in_sync_module = load_as("ansible.modules.vllm_fleet_in_sync", REPO / "plugins" / "modules" / "in_sync.py")

HOST_VARS = {"vllm_scenes_list": [{"name": "realtime"}], "group_names": ["gpu_hosts"], "inventory_hostname": "lab1",
             "ansible_host": "10.0.0.1", "ansible_facts": {"vllm_fleet_gpus": {"count": 1}},
             "vllm_fleet_gpus": {"count": 1}, "playbook_dir": "/somewhere", "vllm_fleet_skip_in_sync": False}
KIT = in_sync.files_digest([("roles/vllm/tasks/main.yml", b"- name: a\n")])
MANIFEST = [("/models/m/manifest.json", b"{}")]


def test_host_inputs_keep_the_hosts_own_variables_only() -> None:
    """Inventory, group and extra vars count; facts (also as top-level names), connection and run variables do not."""
    assert in_sync.host_inputs(HOST_VARS) == {"group_names": '["gpu_hosts"]', "vllm_scenes_list": '[{"name": "realtime"}]'}


class Undefined(dict):
    """Host variables one of which cannot be templated yet, as Ansible's HostVarsVars raises for it."""

    def __getitem__(self, name: str) -> object:
        """Raise for the variable that names a role default."""
        if name == "release_link":
            raise RuntimeError("'vllm_fleet_install_dir' is undefined")
        return super().__getitem__(name)


def test_a_variable_that_cannot_be_templated_yet_counts_by_its_expression() -> None:
    """Its expression stands for it, so editing the expression still changes the digest."""
    raw = {"release_link": "{{ vllm_fleet_install_dir }}/current"}
    assert in_sync.host_inputs(Undefined({"release_link": None}), raw) == {
        "release_link": '{"untemplated": "{{ vllm_fleet_install_dir }}/current"}'}
    assert in_sync.inputs_digest(Undefined({"release_link": None}), KIT, [], raw) != in_sync.inputs_digest(
        Undefined({"release_link": None}), KIT, [], {"release_link": "{{ vllm_fleet_install_dir }}/now"})


class Undecryptable:
    """A Vault value in a run without the Vault: reading it raises."""

    def __str__(self) -> str:
        """Raise as ansible-core does."""
        raise RuntimeError("Attempting to decrypt but no vault secrets found")


def test_a_vault_value_without_the_vault_counts_as_unreadable() -> None:
    """Neither its value nor its expression can be read: its name stands for it, and the digest is still taken."""
    raw = {"release_link": Undecryptable()}
    assert in_sync.host_inputs(Undefined({"release_link": None}), raw) == {
        "release_link": '{"unreadable": "release_link"}'}


def test_digest_is_an_hmac_under_the_hosts_own_key() -> None:
    """The same inputs under another host's key give another digest; without the key none can be recomputed."""
    keyed = in_sync.inputs_digest(HOST_VARS, KIT, MANIFEST, key=b"k" * 32)
    assert keyed == in_sync.inputs_digest(HOST_VARS, KIT, MANIFEST, key=b"k" * 32)
    assert keyed != in_sync.inputs_digest(HOST_VARS, KIT, MANIFEST, key=b"j" * 32)
    assert keyed != in_sync.inputs_digest(HOST_VARS, KIT, MANIFEST)


def test_digest_follows_variables_and_kit_files_only() -> None:
    """A changed variable or kit file gives a new digest; facts and the skip switch itself do not."""
    base = in_sync.inputs_digest(HOST_VARS, KIT, MANIFEST)
    facts = {"vllm_fleet_gpus": {"count": 1}, "uptime_seconds": 2}
    assert base == in_sync.inputs_digest({**HOST_VARS, "ansible_facts": facts, "vllm_fleet_skip_in_sync": True}, KIT,
                                         MANIFEST)
    assert base != in_sync.inputs_digest({**HOST_VARS, "vllm_scenes_list": [{"name": "batch"}]}, KIT, MANIFEST)
    assert base != in_sync.inputs_digest(
        HOST_VARS, in_sync.files_digest([("roles/vllm/tasks/main.yml", b"- name: b\n")]), MANIFEST)
    assert base != in_sync.inputs_digest(
        HOST_VARS, in_sync.files_digest([("roles/vllm/tasks/other.yml", b"- name: a\n")]), MANIFEST)
    assert base != in_sync.inputs_digest(HOST_VARS, KIT, [("/models/m/manifest.json", b"{ }")])


def test_kit_files_are_the_parts_a_converge_runs(tmp_path: Path) -> None:
    """site.yml, roles, playbooks and plugins count; docs, tests and bytecode do not."""
    for name in ("site.yml", "roles/r/tasks/main.yml", "plugins/filter/f.py", "plugins/filter/__pycache__/f.pyc",
                 "docs/x.md", "tests/test_x.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    assert [path for path, _ in in_sync.kit_files(tmp_path)] == [
        "site.yml", "roles/r/tasks/main.yml", "plugins/filter/f.py"]


def test_controller_files_hash_small_files_and_stat_big_ones(tmp_path: Path) -> None:
    """A manifest counts by content, a weights file over the limit by size and modification time."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "manifest.json").write_text("{}")
    (tmp_path / "model" / "weights.bin").write_bytes(b"x" * 64)
    found = dict(in_sync.controller_files([str(tmp_path / "model")], whole_up_to=8))
    assert found[str(tmp_path / "model" / "manifest.json")] == b"{}"
    info = (tmp_path / "model" / "weights.bin").stat()
    assert found[str(tmp_path / "model" / "weights.bin")] == f"64:{info.st_mtime_ns}".encode()


def stat_of(mode: int, size: int = 0, mtime_ns: int = 0) -> SimpleNamespace:
    """Return a stand-in for os.lstat's result."""
    return SimpleNamespace(st_mode=mode, st_uid=0, st_gid=0, st_size=size, st_mtime_ns=mtime_ns)


def test_path_entries_by_kind() -> None:
    """A link is its target; a directory its owner and mode; a file adds its size and modification time."""
    assert logic.path_entry(stat_of(0o120777), "/opt/vllm/releases/a") == ["link", "/opt/vllm/releases/a"]
    assert logic.path_entry(stat_of(0o040755, 4096, 5), None) == ["dir", 0, 0, 0o755]
    assert logic.path_entry(stat_of(0o100640, 12, 7), None) == ["file", 0, 0, 0o640, 12, 7]


def test_a_timer_is_in_the_same_state_while_its_service_runs() -> None:
    """A timer's sub-state flips from waiting to running each time its service runs (every 15 s for the host's
    metrics): only the load and active states count, which a crashed or stopped unit changes."""
    waiting = "vllm-fleet-host-metrics.timer loaded active waiting vllm-fleet host metrics every 15s\n"
    running = "vllm-fleet-host-metrics.timer loaded active running vllm-fleet host metrics every 15s\n"
    assert logic.unit_states_of(waiting) == logic.unit_states_of(running) == {
        "vllm-fleet-host-metrics.timer": "loaded/active"}
    failed = "vllm-scene-realtime.service loaded failed failed vLLM scene realtime\n"
    assert logic.unit_states_of(failed) == {"vllm-scene-realtime.service": "loaded/failed"}
    assert logic.unit_states_of("\n") == {}


FINGERPRINT = {"host": {"kernel": "6.1"}, "unit": {"vllm-scene-realtime.service": "loaded/active"},
               "path": {"/etc/vllm/scenes/realtime.yaml": ["file", 0, 0, 0o644, 10, 1]}}


@pytest.mark.parametrize(("record", "inputs", "current", "reason"), [
    (None, "d", FINGERPRINT, "no full converge is recorded"),
    ({"inputs": "d", "fingerprint": FINGERPRINT}, "e", FINGERPRINT, "what this run deploys changed"),
    ({"inputs": "d", "fingerprint": FINGERPRINT}, "d", {**FINGERPRINT, "host": {"kernel": "6.2"}},
     "host kernel changed (6.1 -> 6.2)"),
    ({"inputs": "d", "fingerprint": FINGERPRINT}, "d",
     {**FINGERPRINT, "unit": {"vllm-scene-realtime.service": "loaded/failed"}},
     "unit vllm-scene-realtime.service changed (loaded/active -> loaded/failed)"),
    ({"inputs": "d", "fingerprint": FINGERPRINT}, "d", {**FINGERPRINT, "unit": {}},
     "unit vllm-scene-realtime.service is gone"),
    ({"inputs": "d", "fingerprint": FINGERPRINT}, "d",
     {**FINGERPRINT, "path": {"/etc/vllm/scenes/realtime.yaml": ["file", 0, 0, 0o644, 11, 2]}},
     "path /etc/vllm/scenes/realtime.yaml changed"),
    ({"inputs": "d", "fingerprint": FINGERPRINT}, "d",
     {**FINGERPRINT, "path": {**FINGERPRINT["path"], "/etc/vllm/scenes/x.yaml": ["file", 0, 0, 0o644, 1, 1]}},
     "path /etc/vllm/scenes/x.yaml is new"),
    ({"inputs": "d", "fingerprint": FINGERPRINT}, "d", FINGERPRINT, ""),
])
def test_difference_names_the_first_change(record: dict | None, inputs: str, current: dict, reason: str) -> None:
    """Inputs first, then the host, the units and the paths; nothing changed: in sync."""
    assert logic.difference(record, inputs, current).startswith(reason)
    assert bool(reason) == bool(logic.difference(record, inputs, current))


def module_on(root: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., dict[str, Any]]:
    """Return a runner of the vllm.fleet.in_sync module on a tree under root (no units): run(state, inputs)."""
    def run(state: str, inputs: str = "digest") -> dict[str, Any]:
        args = {"state": state, "path": str(root / "state" / "in-sync.json"), "inputs": inputs,
                "trees": [str(root / "etc")], "paths": [str(root / "current"), str(root / "cache" / "*")]}
        return run_module_main(in_sync_module, args, capsys)
    return run


def test_module_records_then_finds_every_kind_of_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """After a record the host is in sync; an edited file, a new file, a moved link, other inputs are not."""
    run_module = module_on(tmp_path, capsys)
    (tmp_path / "etc" / "scenes").mkdir(parents=True)
    (tmp_path / "etc" / "scenes" / "realtime.yaml").write_text("max-num-seqs: 16\n")
    (tmp_path / "cache" / "realtime").mkdir(parents=True)
    (tmp_path / "releases" / "a").mkdir(parents=True)
    (tmp_path / "current").symlink_to(tmp_path / "releases" / "a")
    assert run_module("check") == {"changed": False, "in_sync": False, "reason": "no full converge is recorded"}
    assert run_module("record")["changed"] is True
    assert run_module("record")["changed"] is False  # the same host again: the record stays
    assert oct((tmp_path / "state" / "in-sync.json").stat().st_mode & 0o777) == "0o600"
    assert run_module("check")["in_sync"] is True
    assert run_module("check", inputs="other")["in_sync"] is False
    (tmp_path / "cache" / "realtime" / "compiled").write_text("runtime files do not count")
    assert run_module("check")["in_sync"] is True
    (tmp_path / "etc" / "scenes" / "realtime.yaml").write_text("max-num-seqs: 32\n")
    assert run_module("check")["reason"] == f"path {tmp_path}/etc/scenes/realtime.yaml changed"
    run_module("record")
    (tmp_path / "cache" / "realtime").chmod(0o777)
    assert run_module("check")["reason"] == f"path {tmp_path}/cache/realtime changed"
    (tmp_path / "cache" / "realtime").chmod(0o755)
    (tmp_path / "current").unlink()
    (tmp_path / "current").symlink_to(tmp_path / "releases" / "b")
    assert run_module("check")["reason"] == f"path {tmp_path}/current changed"
