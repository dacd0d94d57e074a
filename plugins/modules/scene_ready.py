#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt): modules run inside ansible-core.
"""Ansible module: wait until vLLM scenes answer /health, failing at once when one crashes (logic in module_utils)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: scene_ready
short_description: Wait until vLLM scenes are ready, and fail fast when one crashes
description:
  - Polls every scene in one loop, not one after the other, until each answers C(GET <url>/health) with 200.
    Connection refused, a request timeout or any other status counts as not ready yet.
  - With O(systemd), reads C(systemctl show) of each scene's unit at every poll and fails at once when the unit
    crashed, instead of waiting out O(timeout). A unit counts as crashed when it is C(failed), in C(auto-restart),
    stopping after its main process failed, not running (C(inactive), never started), unknown to systemd, or when
    its C(InvocationID) differs from the first one seen (it restarted during the wait).
  - On a crash the failure names the scene, the unit's state and the most telling line of the crashed invocation's
    journal (C(journalctl _SYSTEMD_INVOCATION_ID=...), else the unit's journal), such as the ValueError vLLM raises
    for a max_model_len above the model's, and returns the journal's last lines.
  - In check mode nothing was started or restarted, so the module waits for nothing and reports itself skipped.
  - Reads only; never changes the host.
version_added: "0.1.0"
author: vllm-fleet (!UNKNOWN)
options:
  scenes:
    description: The scenes to wait for.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The scene's name, unique in the list.
        type: str
        required: true
      url:
        description: The scene's base URL, for example C(http://127.0.0.1:8000); the module asks C(<url>/health).
        type: str
        required: true
      unit:
        description:
          - The scene's systemd unit.
          - Empty or omitted where there is no unit; the scene is then polled on /health only.
        type: str
        default: ""
  timeout:
    description: Seconds to wait for all scenes together.
    type: int
    default: 900
  interval:
    description: Seconds between two polls of the scenes.
    type: float
    default: 2
  systemd:
    description: Read the units' state to catch crashes. False on hosts without systemd, where only /health is polled.
    type: bool
    default: true
  journal_lines:
    description: How many of the crashed invocation's last journal lines to return in C(journal).
    type: int
    default: 20
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
- name: Wait until every scene answers GET /health
  vllm.fleet.scene_ready:
    scenes:
      - name: chat
        url: http://127.0.0.1:8000
        unit: vllm-scene-chat.service
      - name: embed
        url: http://127.0.0.1:8001
        unit: vllm-scene-embed.service
    timeout: 900

- name: Wait on a host without systemd
  vllm.fleet.scene_ready:
    scenes: [{name: chat, url: "http://127.0.0.1:8000"}]
    systemd: false
"""

RETURN = r"""
scenes:
  description: The scenes that became ready, in the order given, and the seconds into the wait each first answered 200.
    On a failure, those that were ready before it.
  returned: always
  type: list
  elements: dict
  sample: [{name: chat, seconds: 41.2}, {name: embed, seconds: 12.0}]
seconds:
  description: Seconds the wait took.
  returned: unless skipped in check mode
  type: float
  sample: 41.2
scene:
  description: The crashed scene.
  returned: on a crash
  type: str
  sample: chat
unit:
  description: The crashed scene's unit.
  returned: on a crash
  type: str
  sample: vllm-scene-chat.service
state:
  description: The crashed unit's last C(systemctl show) properties.
  returned: on a crash
  type: dict
  sample: {LoadState: loaded, ActiveState: activating, SubState: auto-restart, Result: exit-code,
           InvocationID: 4f1c0ddc2b6a4f0e9b0a4d7cbe0f7c11, NRestarts: "1", ExecMainStatus: "1"}
reason:
  description: Why the unit counts as crashed.
  returned: on a crash
  type: str
  sample: the main process exited (Result=exit-code) and systemd is waiting to restart it
journal_reason:
  description: The most telling line of the crashed invocation's journal, null when none names an error.
  returned: on a crash
  type: str
  sample: "ValueError: User-specified max_model_len (8192) is greater than the derived max_model_len ..."
journal:
  description: The last O(journal_lines) lines of the crashed invocation's journal.
  returned: on a crash
  type: list
  elements: str
pending:
  description:
    - The scenes not ready at the timeout, with their unit's last state (null without systemd) and last health answer.
  returned: on a timeout
  type: list
  elements: dict
  sample:
    - {name: chat, unit: vllm-scene-chat.service, state: {ActiveState: active, SubState: running}, health: HTTP 503}
"""

# Ansible's module layout puts the documentation blocks above the imports.
import http.client  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from typing import Any, Callable, Dict, List, Optional, Tuple  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
# Relative: from the repo it is ansible.module_utils.<file> (ansible.cfg's module_utils), in a collection its own.
from ..module_utils.vllm_fleet_ready import (  # noqa: E402
    REASON_SCAN_LINES, UNIT_PROPERTIES, HealthProbe, SceneSpec, UnitReader, UnitReadError, WaitOutcome,
    crash_message, journal_selectors, param_problem, parse_systemctl_show, pick_journal, timeout_message,
    wait_for_scenes)

# Short, so that one hung scene cannot stall the polls of the others for long.
HTTP_TIMEOUT = 5
COMMAND_TIMEOUT = 30
# A proxy from the environment (http_proxy) must not carry a request meant for the host's own scene.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

JournalReader = Callable[[List[str]], List[str]]


def http_probe(url: str) -> Tuple[bool, str]:
    """Whether GET url answers 200, and what it answered; refusals, timeouts and errors mean not ready yet."""
    try:
        with _OPENER.open(url, timeout=HTTP_TIMEOUT) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        return False, f"HTTP {error.code}"
    except urllib.error.URLError as error:
        return False, str(error.reason)
    except (OSError, http.client.HTTPException) as error:
        return False, str(error) or type(error).__name__
    return status == 200, f"HTTP {status}"


def systemctl_reader(systemctl: str) -> UnitReader:
    """A reader of a unit's crash-telling properties through `systemctl show`."""
    def read(unit: str) -> Dict[str, str]:
        """The unit's properties; UnitReadError when systemctl cannot answer."""
        try:
            done = subprocess.run([systemctl, "show", "-p", ",".join(UNIT_PROPERTIES), "--", unit], capture_output=True,
                                  text=True, errors="replace", timeout=COMMAND_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise UnitReadError(f"systemctl show {unit}: {error}") from error
        if done.returncode != 0:
            said = done.stderr.strip() or done.stdout.strip()
            raise UnitReadError(f"systemctl show {unit} exited {done.returncode}: {said}")
        return parse_systemctl_show(done.stdout)
    return read


def journal_reader(journalctl: Optional[str]) -> JournalReader:
    """A reader of the last REASON_SCAN_LINES journal lines that match; no lines when journalctl fails or is missing."""
    def read(selector: List[str]) -> List[str]:
        """The matching lines, messages only."""
        if journalctl is None:
            return []
        try:
            done = subprocess.run([journalctl, *selector, "-o", "cat", "--no-pager", "-q", "-n", str(REASON_SCAN_LINES)],
                                  capture_output=True, text=True, errors="replace", timeout=COMMAND_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return []
        return done.stdout.splitlines() if done.returncode == 0 else []
    return read


def _crash_result(outcome: WaitOutcome, read_journal: JournalReader, journal_lines: int) -> Dict[str, Any]:
    """The failure of a crashed scene, with the journal of the invocation that died."""
    crash = outcome.crash
    if crash is None:  # callers pass only a crashed outcome; not an assert, which python -O drops
        raise AssertionError("no crash to report")
    # A generator: the unit's whole journal is read only when no crashed invocation's own journal names the error.
    journal, reason = pick_journal((read_journal(selector) for selector in journal_selectors(crash)), journal_lines)
    return {"failed": True, "changed": False, "msg": crash_message(crash, reason), "scene": crash.scene,
            "unit": crash.unit, "state": crash.state, "reason": crash.reason, "journal_reason": reason,
            "journal": journal, "scenes": outcome.ready, "seconds": outcome.seconds}


def run(params: Dict[str, Any], probe: HealthProbe, read_unit: Optional[UnitReader], read_journal: JournalReader,
        clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Dict[str, Any]:
    """The module's result for its parameters, with the probes, clock and sleep passed in (read_unit None: no systemd)."""
    scenes = [SceneSpec(name=s["name"], url=s["url"], unit=s.get("unit") or "") for s in params["scenes"]]
    problem = param_problem(scenes, params["timeout"], params["interval"], params["journal_lines"])
    if problem is not None:
        return {"failed": True, "changed": False, "msg": problem, "scenes": []}
    try:
        outcome = wait_for_scenes(scenes, params["timeout"], params["interval"], probe,
                                  read_unit if params["systemd"] else None, clock, sleep)
    except UnitReadError as error:
        return {"failed": True, "changed": False, "scenes": [],
                "msg": f"cannot read the scenes' unit state ({error}); set systemd: false on a host without systemd"}
    if outcome.crash is not None:
        return _crash_result(outcome, read_journal, params["journal_lines"])
    if outcome.pending:
        pending = [{"name": p.scene, "unit": p.unit, "state": p.state, "health": p.health} for p in outcome.pending]
        return {"failed": True, "changed": False, "msg": timeout_message(outcome.pending, len(scenes), params["timeout"]),
                "pending": pending, "scenes": outcome.ready, "seconds": outcome.seconds}
    plural = "" if len(scenes) == 1 else "s"
    return {"changed": False, "msg": f"{len(scenes)} scene{plural} ready in {outcome.seconds:g} s",
            "scenes": outcome.ready, "seconds": outcome.seconds}


def main() -> None:
    """Wait for the scenes and report them ready, crashed or timed out."""
    module = AnsibleModule(
        argument_spec={
            "scenes": {"type": "list", "elements": "dict", "required": True, "options": {
                "name": {"type": "str", "required": True},
                "url": {"type": "str", "required": True},
                "unit": {"type": "str", "default": ""},
            }},
            "timeout": {"type": "int", "default": 900},
            "interval": {"type": "float", "default": 2},
            "systemd": {"type": "bool", "default": True},
            "journal_lines": {"type": "int", "default": 20},
        },
        supports_check_mode=True,
    )
    params = module.params
    if module.check_mode:
        # Check mode starts and restarts nothing, so there is nothing to wait for.
        module.exit_json(changed=False, skipped=True, msg="check mode: no scene was started, nothing to wait for",
                         scenes=[])
    read_unit = None
    if params["systemd"] and any(scene.get("unit") for scene in params["scenes"]):
        systemctl = module.get_bin_path("systemctl")
        if systemctl is None:
            module.fail_json(msg="systemctl not found; set systemd: false on a host without systemd", scenes=[])
        read_unit = systemctl_reader(systemctl)
    result = run(params, http_probe, read_unit, journal_reader(module.get_bin_path("journalctl")))
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
