#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt): modules run inside ansible-core.
"""Ansible module: record what a full converge left on a host, or check that the host still is so (logic in
module_utils/vllm_fleet_in_sync)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: in_sync
short_description: Record a host's state after a full converge, or check that it still matches
description:
  - C(record) writes, root only, the digest of what the converge deployed (I(inputs)) and a fingerprint of the host
    (its OS, kernel, CPUs, memory and NVIDIA driver; every path under I(trees) and each of I(paths), by owner, mode,
    size and modification time; the state of the I(units)).
  - C(check) compares the host with that record and changes nothing. C(in_sync) is true only when the inputs are
    the same and nothing in the fingerprint changed; C(reason) says what did.
version_added: "0.1.0"
author: vllm-fleet (!UNKNOWN)
options:
  state:
    description: Record the host, or check it against the record.
    type: str
    choices: [check, record]
    default: check
  path:
    description: The record (JSON, root only).
    type: path
    required: true
  inputs:
    description: Digest of what the run deploys (the kit's files and the host's variables), from the controller.
    type: str
    required: true
  trees:
    description: Directories (or globs) walked in full; every file, link and directory under them counts.
    type: list
    elements: str
    default: []
  paths:
    description: Paths (or globs) that count themselves only; a directory is not walked.
    type: list
    elements: str
    default: []
  units:
    description: systemd unit names (or globs) whose load, active and sub states count.
    type: list
    elements: str
    default: []
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
- name: Compare the host with its last full converge
  vllm.fleet.in_sync:
    path: /var/lib/vllm-fleet/in-sync.json
    inputs: "{{ digest }}"
    trees: [/etc/vllm, /etc/systemd/system]
    units: [vllm-scene-*.service]
  register: in_sync
"""

RETURN = r"""
in_sync:
  description: Whether the host is as the recorded converge left it, for the same inputs (check only).
  returned: state=check
  type: bool
reason:
  description: What differs from the record, or an empty string.
  returned: state=check
  type: str
"""

import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
# Relative: from the repo it is ansible.module_utils.<file> (ansible.cfg's module_utils), in a collection its own.
from ..module_utils.vllm_fleet_in_sync import Fingerprint, difference, path_entry, unit_states_of  # noqa: E402

NVIDIA = Path("/proc/driver/nvidia")


def read_text(path: Path) -> str:
    """Return a file's text, or "" when it is missing."""
    try:
        return path.read_text()
    except OSError:
        return ""


def host_identity() -> dict[str, Any]:
    """Return what the roles' choices depend on that no variable says: OS, kernel, CPUs, memory, NVIDIA driver."""
    memory = [line for line in read_text(Path("/proc/meminfo")).splitlines() if line.startswith("MemTotal:")]
    gpus = sorted(os.listdir(NVIDIA / "gpus")) if (NVIDIA / "gpus").is_dir() else []
    return {"os": read_text(Path("/etc/os-release")), "kernel": os.uname().release, "cpus": os.cpu_count(),
            "memory": memory, "nvidia_driver": read_text(NVIDIA / "version"), "gpus": gpus}


def entry(path: str) -> list[Any]:
    """Return the fingerprint entry of one path."""
    info = os.lstat(path)
    return path_entry(info, os.readlink(path) if os.path.islink(path) else None)


def path_fingerprint(trees: list[str], paths: list[str]) -> dict[str, list[Any]]:
    """Return path -> entry for every path under the trees (links not followed) and each of the paths."""
    found: dict[str, list[Any]] = {}
    for root in sorted({match for pattern in trees for match in glob.glob(pattern)}):
        found[root] = entry(root)
        for directory, subdirs, files in os.walk(root):
            for name in subdirs + files:
                found[os.path.join(directory, name)] = entry(os.path.join(directory, name))
    for path in sorted({match for pattern in paths for match in glob.glob(pattern)}):
        found[path] = entry(path)
    return found


def unit_states(patterns: list[str]) -> dict[str, str]:
    """Return unit -> "load/active" for the loaded units matching the patterns ({} without systemd)."""
    if not patterns or not shutil.which("systemctl"):
        return {}
    listing = subprocess.run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager", *patterns],
                             capture_output=True, text=True, check=False).stdout
    return unit_states_of(listing)


def read_record(path: Path) -> dict[str, Any] | None:
    """Return the recorded converge, or None."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Write the record atomically, readable by root only."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w") as out:
        json.dump(record, out, sort_keys=True)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


def main() -> None:
    """Record the host after a full converge, or check it against the record."""
    module = AnsibleModule(
        argument_spec={"state": {"type": "str", "choices": ["check", "record"], "default": "check"},
                       "path": {"type": "path", "required": True},
                       "inputs": {"type": "str", "required": True},
                       "trees": {"type": "list", "elements": "str", "default": []},
                       "paths": {"type": "list", "elements": "str", "default": []},
                       "units": {"type": "list", "elements": "str", "default": []}},
        supports_check_mode=True,
    )
    params = module.params
    current: Fingerprint = {"host": host_identity(), "unit": unit_states(params["units"]),
                            "path": path_fingerprint(params["trees"], params["paths"])}
    record_path = Path(params["path"])
    if params["state"] == "check":
        reason = difference(read_record(record_path), params["inputs"], current)
        module.exit_json(changed=False, in_sync=not reason, reason=reason)
    record = {"inputs": params["inputs"], "fingerprint": current}
    changed = read_record(record_path) != record
    if changed and not module.check_mode:
        write_record(record_path, record)
    module.exit_json(changed=changed)


if __name__ == "__main__":
    main()
