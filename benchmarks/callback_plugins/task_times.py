"""Ansible callback for the benchmarks: when each task started and ended on each host, written as JSON at the end."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: task_times
type: aggregate
short_description: Write each task's start and end time per host to $VFL_TASK_TIMES (JSON)
description:
  - A list of {task, host, start, end} (seconds since the epoch), in the order tasks ended.
requirements:
  - enabled in callbacks_enabled, with VFL_TASK_TIMES naming the output file
"""


class CallbackModule(CallbackBase):
    """Record task start and end times per host."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        """Start with no tasks seen."""
        super().__init__()
        self._started: dict[str, float] = {}
        self._times: list[dict[str, Any]] = []

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        """Note when a task started."""
        self._started[task._uuid] = time.time()

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        """Note when a handler started."""
        self._started[task._uuid] = time.time()

    def _ended(self, result: Any) -> None:
        """Record a task's end on one host."""
        task = result._task
        self._times.append({"task": task.get_name(), "host": result._host.get_name(),
                            "start": self._started.get(task._uuid, time.time()), "end": time.time()})

    v2_runner_on_ok = v2_runner_on_failed = v2_runner_on_skipped = v2_runner_on_unreachable = _ended

    def v2_playbook_on_stats(self, stats: Any) -> None:
        """Write the times."""
        path = os.environ.get("VFL_TASK_TIMES")
        if path:
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(self._times, handle)
