#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt): modules run inside ansible-core.
"""Ansible module: drain one GPU host's scenes at a fleet gateway, or put them back (logic in module_utils)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gateway_backends
short_description: Drain a GPU host's scenes at a fleet gateway, or put them back in rotation
description:
  - Talks to the gateway's HAProxy runtime API (its stats socket). The servers of host C(H) are those named
    C(H:<scene>) in any backend.
  - O(state=drain) stops new requests to them, those its prefix affinity holds for them included (HAProxy state
    MAINT, so requests in flight go on), and waits up to O(timeout) seconds for those in flight to finish; what is
    still running then is reported in RV(in_flight), not failed.
  - O(state=ready) puts them back and waits up to O(timeout) seconds for their health checks to pass; it fails
    when they are not up by then.
  - In check mode it reports what it would change and changes nothing.
version_added: "0.2.0"
author: vllm-fleet (!UNKNOWN)
options:
  socket:
    description: Path of the gateway's HAProxy stats socket (level admin).
    type: path
    required: true
  host:
    description: The GPU host whose scenes to drain or restore (its inventory name).
    type: str
    required: true
  state:
    description: C(drain) or C(ready).
    type: str
    choices: [drain, ready]
    required: true
  timeout:
    description: Seconds to wait for requests in flight to end (drain) or the scenes to be up (ready).
    type: int
    default: 120
  maxconn:
    description:
      - With O(state=ready), each scene's requests at once (its max_num_seqs) by scene name, beyond which the
        gateway queues its requests and prefix affinity passes them on; set at runtime, as a rollout may have
        changed it since the gateway's config was written. Scenes left out keep theirs.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Drain gpu1's scenes at the gateway before a rollout restarts them
  vllm.fleet.gateway_backends:
    socket: /run/haproxy/admin.sock
    host: gpu1
    state: drain
    timeout: 120
  delegate_to: gateway1

- name: Put them back, each scene taking up to its max_num_seqs requests at once
  vllm.fleet.gateway_backends:
    socket: /run/haproxy/admin.sock
    host: gpu1
    state: ready
    maxconn: {realtime: 16, batch: 64}
  delegate_to: gateway1
"""

RETURN = r"""
servers:
  description: The host's servers, as C(backend/server).
  type: list
  returned: always
routed:
  description: Whether the gateway routed new requests to any of them when the module started (not all in maintenance).
  type: bool
  returned: always
in_flight:
  description: Requests still in flight on them when the module returned.
  type: int
  returned: always
waited:
  description: Seconds spent waiting.
  type: float
  returned: always
"""

import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
# Relative: from the repo it is ansible.module_utils.<file> (ansible.cfg's module_utils), in a collection its own.
from ..module_utils.vllm_fleet_haproxy import (  # noqa: E402
    ask, commands, host_servers, in_flight, maxconn_commands, needs_change, parse_stat, serving,
)


def main() -> None:
    """Apply the state to the host's servers and wait as the state asks."""
    module = AnsibleModule(argument_spec={
        "socket": {"type": "path", "required": True}, "host": {"type": "str", "required": True},
        "state": {"type": "str", "choices": ["drain", "ready"], "required": True},
        "timeout": {"type": "int", "default": 120}, "maxconn": {"type": "dict", "default": {}}},
        supports_check_mode=True)
    sock, state = module.params["socket"], module.params["state"]

    def servers() -> list:
        """Read the host's servers from `show stat`."""
        return host_servers(parse_stat(ask(sock, "show stat")), module.params["host"])

    found = servers()
    names = [f"{s['pxname']}/{s['svname']}" for s in found]
    limits = maxconn_commands(found, module.params["maxconn"]) if state == "ready" else []
    changed = needs_change(found, state) or bool(limits)
    routed = needs_change(found, "drain")
    if module.check_mode or not found:
        module.exit_json(changed=changed, servers=names, routed=routed, in_flight=in_flight(found), waited=0.0)
    for command in limits + commands(found, state):
        answer = ask(sock, command).strip()
        if answer:
            module.fail_json(msg=f"HAProxy refused `{command}`: {answer}", servers=names)
    started = time.monotonic()
    done = (lambda rows: in_flight(rows) == 0) if state == "drain" else serving
    while not done(found) and time.monotonic() - started < module.params["timeout"]:
        time.sleep(0.5)
        found = servers()
    waited = round(time.monotonic() - started, 1)
    if state == "ready" and not serving(found):
        module.fail_json(msg=f"{module.params['host']}'s scenes are not up at the gateway after {waited} s: "
                             + ", ".join(f"{s['svname']} {s.get('status')} ({s.get('check_status')})" for s in found),
                         servers=names, routed=routed, in_flight=in_flight(found), waited=waited)
    module.exit_json(changed=changed, servers=names, routed=routed, in_flight=in_flight(found), waited=waited)


if __name__ == "__main__":
    main()
