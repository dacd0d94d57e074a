#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt): modules run inside ansible-core.
"""Ansible module: take or release a host's run lock, so two runs never change one host at once (logic in
module_utils/vllm_fleet_run_lock)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: run_lock
short_description: Serialize the kit's runs on one host
description:
  - C(inspect) returns who holds the lock. C(acquire) takes it for I(owner) when it is free, already this run's,
    past its expiry, held by a run that has ended (I(holder_ended), judged on the controller against what
    C(inspect) returned) or I(force) is set; otherwise it waits up to I(wait) seconds for the holder to release
    it, then returns I(taken) false and a I(msg) naming the holder. C(release) removes it if this run holds it.
  - The lock is the run's bookkeeping, not the host's state; taking or releasing it reports no change, so a
    converge that changes nothing says so.
version_added: "0.1.0"
author: vllm-fleet (!UNKNOWN)
options:
  state:
    description: What to do with the lock.
    type: str
    choices: [inspect, acquire, release]
    default: inspect
  path:
    description: The lock file (root only; under /run, so a reboot, which ends every run, frees it).
    type: path
    required: true
  owner:
    description: This run (controller, pid, started, playbook).
    type: dict
    default: {}
  holder_ended:
    description: The holder C(inspect) returned is a run that has ended.
    type: bool
    default: false
  seen:
    description: The holder C(inspect) returned; I(holder_ended) applies only while it still holds the lock.
    type: dict
  expiry:
    description: Seconds after which a lock counts as abandoned.
    type: int
    default: 14400
  wait:
    description: Seconds to wait for another run's lock.
    type: int
    default: 900
  force:
    description: Take the lock whoever holds it.
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  platform:
    platforms: posix
  check_mode:
    support: none
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Take the host's run lock
  vllm.fleet.run_lock:
    state: acquire
    path: /run/vllm-fleet/run.lock
    owner: {controller: ctl, pid: 4242, started: "Thu Dec  3 21:00:00 2026", playbook: site.yml}
"""

RETURN = r"""
taken:
  description: Whether this run holds the lock now (acquire).
  returned: state=acquire
  type: bool
released:
  description: Whether this run held the lock and removed it (release).
  returned: state=release
  type: bool
msg:
  description: Who holds the lock, when this run could not take it.
  returned: when not taken
  type: str
holder:
  description: Who holds the lock (inspect), or who held it before this run took it (acquire); null when free.
  returned: always
  type: dict
"""

import fcntl  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
# Relative: from the repo it is ansible.module_utils.<file> (ansible.cfg's module_utils), in a collection its own.
from ..module_utils.vllm_fleet_run_lock import describe, same_run, verdict  # noqa: E402


def read_lock(path: Path) -> dict[str, Any] | None:
    """Return the lock's holder, or None when there is no lock (an unreadable lock counts as abandoned)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"until": 0}


def write_lock(path: Path, owner: dict[str, Any]) -> None:
    """Write the lock atomically, root only."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(owner, sort_keys=True))
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


def try_acquire(path: Path, params: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
    """Take the lock if this run may; return whether it did and who held it."""
    with os.fdopen(os.open(path.with_name(f".{path.name}.guard"), os.O_WRONLY | os.O_CREAT, 0o600), "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # read, decide and write as one step against another acquirer
        held = read_lock(path)
        ended = params["holder_ended"] and held is not None and held == params["seen"]
        if verdict(held, params["owner"], time.time(), ended, params["force"]) != "take":
            return False, held
        if held is None or not same_run(held, params["owner"]):
            write_lock(path, {**params["owner"], "since": time.time(), "until": time.time() + params["expiry"]})
        return True, held


def main() -> None:
    """Inspect, take or release the host's run lock."""
    module = AnsibleModule(
        argument_spec={"state": {"type": "str", "choices": ["inspect", "acquire", "release"], "default": "inspect"},
                       "path": {"type": "path", "required": True},
                       "owner": {"type": "dict", "default": {}},
                       "holder_ended": {"type": "bool", "default": False},
                       "seen": {"type": "dict"},
                       "expiry": {"type": "int", "default": 14400},
                       "wait": {"type": "int", "default": 900},
                       "force": {"type": "bool", "default": False}},
        supports_check_mode=False,
    )
    params, path = module.params, Path(module.params["path"])
    if params["state"] == "inspect":
        module.exit_json(changed=False, holder=read_lock(path))
    if params["state"] == "release":
        held = read_lock(path)
        mine = held is not None and same_run(held, params["owner"])
        if mine:
            path.unlink()
        module.exit_json(changed=False, released=mine, holder=held)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    deadline = time.monotonic() + params["wait"]
    while True:
        taken, held = try_acquire(path, params)
        if taken:
            module.exit_json(changed=False, taken=True, holder=held)
        if time.monotonic() >= deadline:
            module.exit_json(changed=False, taken=False, holder=held, msg=f"{describe(held or {})} holds {path}")
        time.sleep(min(5.0, max(0.1, deadline - time.monotonic())))


if __name__ == "__main__":
    main()
