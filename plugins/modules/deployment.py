#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt): modules run inside ansible-core.
"""Ansible module: inspect, snapshot or restore what a vllm-fleet host runs (logic in module_utils/vllm_fleet_deployment)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: deployment
short_description: Inspect, snapshot or restore the scene files and the active vLLM release of a host
description:
  - C(inspect) reports the active release and the sha256 of every scene config and unit; it changes nothing.
  - C(snapshot) copies the scene configs, secret environments and units, the release pointer and the deployed-state
    fact into I(snapshot_dir) (root only), so a rollout can step back, and marks I(run) as in progress beside it. The
    snapshot it replaces is kept as C(<snapshot_dir>.previous). While a run's mark is there (it did not finish, as it
    failed unrestored or was killed), no snapshot is taken and the last good one is kept; C(interrupted) says whose
    run it was.
  - C(restore) puts the snapshot back; scenes the snapshot does not know are stopped, disabled and removed; it
    reloads systemd and returns the scenes whose files it changed (the caller restarts them).
  - C(finish) removes the in-progress mark once the run deployed (or restored) the host and proved it healthy.
  - Every file is synced to disk before the snapshot or the mark that names it is in place.
version_added: "0.1.0"
author: vllm-fleet (!UNKNOWN)
options:
  state:
    description: What to do.
    type: str
    choices: [inspect, snapshot, restore, finish]
    default: inspect
  run:
    description: What marks itself in progress at C(snapshot), e.g. C(rollout) or C(converge).
    type: str
    default: run
  mark:
    description: Whether C(snapshot) marks I(run) in progress (false for a run that will not reach its C(finish)).
    type: bool
    default: true
  config_dir:
    description: The scene configs (C(<scene>.yaml)) and secret environments (C(<scene>.env)); the kit passes its own.
    type: path
    required: true
  unit_dir:
    description: Where the scene units are.
    type: path
    default: /etc/systemd/system
  unit_prefix:
    description: Scene units are named C(<unit_prefix><scene>.service); the kit passes its own prefix.
    type: str
    required: true
  release_link:
    description: The link to the active release.
    type: path
    required: true
  model_dir:
    description: The models, each with its C(.vllm-fleet-model.json) marker.
    type: path
    required: true
  fact_path:
    description:
      - The deployed-state fact, kept with the snapshot.
      - Required with C(snapshot), C(restore) and C(finish); without it C(inspect) returns no fact.
    type: path
  snapshot_dir:
    description:
      - Where the snapshot lives.
      - Required with C(snapshot), C(restore) and C(finish); without it C(inspect) returns no interrupted run.
    type: path
  systemd:
    description: Stop removed scenes and reload systemd (false on hosts without systemd).
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Record what runs before a rollout changes it
  vllm.fleet.deployment:
    state: snapshot
    unit_prefix: app-scene-
    config_dir: /etc/app/scenes
    release_link: /opt/app/current
    model_dir: /var/lib/app/models
    fact_path: /etc/ansible/facts.d/app.fact
    snapshot_dir: /var/lib/app/rollback

- name: Put it back
  vllm.fleet.deployment:
    state: restore
    unit_prefix: app-scene-
    config_dir: /etc/app/scenes
    release_link: /opt/app/current
    model_dir: /var/lib/app/models
    fact_path: /etc/ansible/facts.d/app.fact
    snapshot_dir: /var/lib/app/rollback
  register: restored
"""

RETURN = r"""
release:
  description: Path of the active release (after a restore, the restored one), or null.
  returned: always
  type: str
  sample: /opt/vllm/releases/cpu-0.32.0-1a2b3c4d
release_marker:
  description: The active release's C(.vllm-fleet-release.json) (name, flavour, version, requirements), or null.
  returned: always
  type: dict
models:
  description: Model name -> {source, origin, manifest_sha256} from the model markers.
  returned: always
  type: dict
scenes:
  description: Scene name -> {config_sha256, unit_sha256} of the files on the host (before any restore).
  returned: always
  type: dict
fact:
  description: The deployed-state fact kept in the snapshot (restore) or on the host (inspect, snapshot), or null.
  returned: always
  type: dict
restart:
  description: Scenes whose files the restore changed (restart them).
  returned: state=restore
  type: list
  elements: str
removed:
  description: Scenes the restore stopped and removed (the rollout added them).
  returned: state=restore
  type: list
  elements: str
recorded:
  description: The scenes of the snapshot (all of them run after the restore).
  returned: state=restore
  type: list
  elements: str
interrupted:
  description: The mark ({run, started_at}) of a run that did not finish; null when none.
  returned: always
  type: dict
"""

import datetime  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
# Relative: from the repo it is ansible.module_utils.<file> (ansible.cfg's module_utils), in a collection its own.
from ..module_utils.vllm_fleet_deployment import Layout, digests, plan_restore, snapshot_name  # noqa: E402

MODEL_MARKER = ".vllm-fleet-model.json"
RELEASE_MARKER = ".vllm-fleet-release.json"
FACT_COPY = "deployed-state.fact"  # the fact as it was, byte for byte


def read_link(link: Path) -> str | None:
    """Return the target of the release link, or None when there is none."""
    return os.readlink(link) if link.is_symlink() else None


def read_json(path: Path) -> dict[str, Any] | None:
    """Return a JSON file's content, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def scene_digests(files: dict[str, str], sums: dict[str, str]) -> dict[str, dict[str, str]]:
    """Return scene -> digests of its config and unit (never of its secret environment)."""
    scenes: dict[str, dict[str, str]] = {}
    for path, scene in files.items():
        kind = "unit_sha256" if path.endswith(".service") else "config_sha256" if path.endswith(".yaml") else None
        if kind:
            scenes.setdefault(scene, {})[kind] = sums[path]
    return scenes


def model_markers(model_dir: Path) -> dict[str, dict[str, Any]]:
    """Return model name -> where it came from and a digest of the manifest it was verified against."""
    models: dict[str, dict[str, Any]] = {}
    for marker_path in sorted(model_dir.glob(f"*/{MODEL_MARKER}")):
        marker = read_json(marker_path)
        if marker is not None:
            manifest = json.dumps(marker.get("files"), sort_keys=True).encode()
            models[marker_path.parent.name] = {"source": marker.get("source"), "origin": marker.get("origin"),
                                               "manifest_sha256": hashlib.sha256(manifest).hexdigest()}
    return models


def fsync_path(path: Path) -> None:
    """Flush a file's or a directory's entries to disk."""
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def copy_with_owner(source: Path, dest: Path) -> None:
    """Copy a file atomically and durably, keeping the source's owner, group and mode."""
    info = source.stat()
    handle, temporary = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
    os.close(handle)
    shutil.copyfile(source, temporary)
    os.chown(temporary, info.st_uid, info.st_gid)
    os.chmod(temporary, info.st_mode & 0o7777)
    fsync_path(Path(temporary))
    os.replace(temporary, dest)
    fsync_path(dest.parent)


def in_progress_path(where: Path) -> Path:
    """Return where a run marks itself in progress: beside the snapshot, which a new snapshot replaces whole."""
    return where.with_name(f"{where.name}.in-progress.json")


def mark_in_progress(where: Path, run: str) -> None:
    """Mark run as in progress, durably, once its snapshot is on disk."""
    mark = in_progress_path(where)
    temporary = mark.with_name(f".{mark.name}.new")
    temporary.write_text(json.dumps({"run": run, "started_at": datetime.datetime.now(datetime.timezone.utc)
                                     .isoformat(timespec="seconds")}))
    fsync_path(temporary)
    os.replace(temporary, mark)
    fsync_path(mark.parent)


def relink(link: Path, target: str) -> None:
    """Point the release link at target atomically."""
    temporary = link.with_name(f".{link.name}.restore")
    if temporary.is_symlink():
        temporary.unlink()
    os.symlink(target, temporary)
    os.replace(temporary, link)


def snapshot_manifest(release: str | None, fact: dict[str, Any] | None, files: dict[str, str],
                      sums: dict[str, str]) -> dict[str, Any]:
    """Return the manifest of a snapshot of the host as it is now."""
    return {"release": release, "fact": fact,
            "files": {path: {"scene": scene, "sha256": sums[path]} for path, scene in files.items()}}


def take_snapshot(files: dict[str, str], manifest: dict[str, Any], where: Path, fact_path: Path) -> None:
    """Write the snapshot: the scene files and the fact as they are (owners and modes too), and its manifest."""
    staging = where.with_name(f".{where.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o700, parents=True)
    for path in files:
        copy_with_owner(Path(path), staging / snapshot_name(path))
    if fact_path.is_file():
        copy_with_owner(fact_path, staging / FACT_COPY)
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    fsync_path(staging / "manifest.json")
    fsync_path(staging)
    previous = where.with_name(f"{where.name}.previous")
    if where.is_dir():
        shutil.rmtree(previous, ignore_errors=True)
        os.replace(where, previous)
    os.replace(staging, where)
    fsync_path(where.parent)


def restore(module: AnsibleModule, layout: Layout, files: dict[str, str], sums: dict[str, str],
            current_release: str | None, where: Path, fact_path: Path) -> dict[str, Any]:
    """Put the snapshot back and return what changed."""
    manifest = read_json(where / "manifest.json")
    if manifest is None:
        module.fail_json(msg=f"no snapshot at {where}: nothing to restore (the rollout records one before it deploys)")
    recorded = {path: entry["sha256"] for path, entry in manifest["files"].items()}
    scene_of = {**files, **{path: entry["scene"] for path, entry in manifest["files"].items()}}
    plan = plan_restore(recorded, sums, scene_of, manifest["release"], current_release)
    if manifest["release"] and not Path(manifest["release"]).is_dir():
        module.fail_json(msg=f"the recorded release {manifest['release']} is gone from the host; install it again "
                             "(vllm_version) or raise vllm_releases_keep")
    fact_copy = where / FACT_COPY
    fact_back = fact_copy.is_file() and (not fact_path.is_file() or fact_copy.read_bytes() != fact_path.read_bytes())
    changed = bool(plan.write or plan.delete or plan.relink or fact_back)
    if changed and not module.check_mode:
        if module.params["systemd"]:
            # A scene whose unit the failed deploy never wrote has only files to remove.
            for scene in plan.remove_scenes:
                if (layout.unit_dir / layout.unit_of(scene)).exists():
                    module.run_command(["systemctl", "disable", "--now", layout.unit_of(scene)], check_rc=True)
        for path in plan.delete:
            Path(path).unlink()
        for path in plan.write:
            copy_with_owner(where / snapshot_name(path), Path(path))
        if plan.relink:
            relink(layout.release_link, manifest["release"])
        if fact_back:
            copy_with_owner(fact_copy, fact_path)
        if module.params["systemd"]:
            module.run_command(["systemctl", "daemon-reload"], check_rc=True)
    return {"changed": changed, "release": manifest["release"], "restart": plan.restart, "removed": plan.remove_scenes,
            "recorded": plan.recorded_scenes, "fact": manifest.get("fact")}


def main() -> None:
    """Run the module."""
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["inspect", "snapshot", "restore", "finish"], "default": "inspect"},
            "run": {"type": "str", "default": "run"}, "mark": {"type": "bool", "default": True},
            "config_dir": {"type": "path", "required": True},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "unit_prefix": {"type": "str", "required": True},
            "release_link": {"type": "path", "required": True},
            "model_dir": {"type": "path", "required": True},
            "fact_path": {"type": "path"},
            "snapshot_dir": {"type": "path"},
            "systemd": {"type": "bool", "default": True},
        },
        required_if=[("state", state, ["fact_path", "snapshot_dir"]) for state in ("snapshot", "restore", "finish")],
        supports_check_mode=True,
    )
    params = module.params
    layout = Layout(Path(params["config_dir"]), Path(params["unit_dir"]), params["unit_prefix"],
                    Path(params["release_link"]))
    files = layout.scene_files()
    sums = digests(files)
    # An inspect for the models alone (roles/vllm_scenes) names no fact or snapshot: it gets neither back.
    fact_path = Path(params["fact_path"]) if params["fact_path"] else None
    where = Path(params["snapshot_dir"]) if params["snapshot_dir"] else None
    result: dict[str, Any] = {"changed": False, "release": read_link(layout.release_link),
                              "release_marker": read_json(layout.release_link / RELEASE_MARKER),
                              "models": model_markers(Path(params["model_dir"])),
                              "scenes": scene_digests(files, sums), "fact": read_json(fact_path) if fact_path else None}
    mark = in_progress_path(where) if where else None
    result["interrupted"] = read_json(mark) if mark else None
    if params["state"] == "snapshot":
        manifest = snapshot_manifest(result["release"], result["fact"], files, sums)
        result["changed"] = result["interrupted"] is None and read_json(where / "manifest.json") != manifest
        if result["interrupted"] is None and not module.check_mode:
            if result["changed"]:
                take_snapshot(files, manifest, where, fact_path)
            if params["mark"]:
                mark_in_progress(where, params["run"])
    elif params["state"] == "finish":
        result["changed"] = mark.exists()
        if result["changed"] and not module.check_mode:
            mark.unlink()
            fsync_path(mark.parent)
    elif params["state"] == "restore":
        result.update(restore(module, layout, files, sums, result["release"], where, fact_path))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
