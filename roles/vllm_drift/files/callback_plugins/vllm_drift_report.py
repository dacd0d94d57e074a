# Installed by the vllm_drift role; read by vllm_drift_check.py. ansible-core 2.19 or later.
"""Ansible callback: write what a check-mode run would change, per host and task, to a JSON file."""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.playbook.handler import Handler
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: vllm_drift_report
    type: aggregate
    short_description: write the tasks that changed or failed, and the recap, to a JSON file
    description:
      - Used by the vllm_drift role's check. Writes C(hosts) (the recap per host), C(changed), C(failed) and
        C(unreachable) (one entry per host and task) to the file named by E(VLLM_DRIFT_REPORT).
      - Never records a task's result or diff, only its name, so no secret can reach the report.
    requirements:
      - enable it in callbacks_enabled and set VLLM_DRIFT_REPORT
"""


class CallbackModule(CallbackBase):
    """Collect changed, failed and unreachable tasks per host and write them with the recap at the end."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "vllm_drift_report"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        """Start with empty lists."""
        super().__init__()
        self._events: dict[str, list[dict[str, Any]]] = {"changed": [], "failed": [], "unreachable": []}

    def _record(self, kind: str, result: Any) -> None:
        """Record one task of one host under kind (its name, and the message of a failure unless no_log)."""
        entry: dict[str, Any] = {"host": result.host.get_name(), "task": result.task.get_name(),
                                 "handler": isinstance(result.task, Handler)}
        if kind != "changed":
            message = "" if result.result.get("_ansible_no_log") else str(result.result.get("msg", ""))
            entry["msg"] = message[:500]
        self._events[kind].append(entry)

    def v2_runner_on_ok(self, result: Any) -> None:
        """A task that reports changed is a change check mode found."""
        if result.result.get("changed", False):
            self._record("changed", result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        """A failure that is not ignored is an error of the check."""
        if not ignore_errors:
            self._record("failed", result)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        """An unreachable host is an error of the check."""
        self._record("unreachable", result)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        """Write the report: the recap per host and the recorded tasks."""
        hosts = {host: stats.summarize(host) for host in sorted(stats.processed)}
        report = {"hosts": hosts, **self._events}
        path = os.environ.get("VLLM_DRIFT_REPORT")
        if not path:
            self._display.warning("vllm_drift_report: VLLM_DRIFT_REPORT is not set; no report written")
            return
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2, sort_keys=True)
