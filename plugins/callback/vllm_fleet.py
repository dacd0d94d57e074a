# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt): plugins run inside ansible-core.
"""Ansible's default screen output, with the kit's refusals printed once, on their own lines."""

from __future__ import annotations

DOCUMENTATION = """
    name: vllm_fleet
    type: stdout
    short_description: Ansible's default output, with each refusal printed once
    description:
      - Ansible's default callback, except for the tasks the kit fails on purpose (assert, fail), whose message is
        shown once, one line per problem after the host's fatal label, without the error block that repeats it
        with its Origin and without the bookkeeping keys of assert. Errors of any other task are shown as Ansible
        shows them.
    extends_documentation_fragment:
      - default_callback
      - result_format_callback
"""

# Ansible's plugin layout puts the documentation block above the imports.
from typing import Any  # noqa: E402

from ansible import constants as C  # noqa: E402
from ansible.plugins.callback.default import CallbackModule as DefaultCallback  # noqa: E402

REFUSALS = {"assert", "fail", "ansible.builtin.assert", "ansible.builtin.fail"}


class CallbackModule(DefaultCallback):
    """The default callback with the kit's refusals reduced to their message, one line per problem."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "vllm_fleet"

    def __init__(self) -> None:
        """Start with no failure seen."""
        super().__init__()
        self._why: dict[str, str] = {}  # each host's last failure: the one that stopped it, unless rescued
        self._item_failed = ""  # the host whose loop item failed last: its loop's failure says no more

    def _note(self, result: Any, kind: str) -> None:
        """Keep one line on why a host failed: the first line of the message, and the task."""
        lines = str(result.result.get("msg") or kind).strip().splitlines() or [kind]
        more = f"; {len(lines) - 1} more problem(s) above" if len(lines) > 1 else ""
        self._why[result._host.get_name()] = f"{lines[0]} (task: {result.task.get_name()}{more})"  # noqa: SLF001

    def v2_runner_item_on_failed(self, result: Any) -> None:
        """Note a failed loop item's own message (the loop's is only "One or more items failed")."""
        self._note(result, "failed")
        self._item_failed = result._host.get_name()  # noqa: SLF001
        super().v2_runner_item_on_failed(result)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        """Note and print an unreachable host as Ansible does."""
        self._note(result, "unreachable")
        super().v2_runner_on_unreachable(result)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        """Print Ansible's recap, then one line per host that failed or was unreachable, saying why."""
        super().v2_playbook_on_stats(stats)
        failed = [host for host in sorted(stats.processed) if stats.summarize(host)["failures"]
                  or stats.summarize(host)["unreachable"]]
        if failed:
            self._display.banner("FAILED HOSTS")
            for host in failed:
                reason = self._why.get(host, "see above")
                self._display.display(f"{host}: {reason.removeprefix(f'{host}: ')}", color=C.COLOR_ERROR)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        """Print a refusal's message once, a line per problem; anything else as Ansible does."""
        if not ignore_errors and not (result.task.loop and self._item_failed == result._host.get_name()):  # noqa: SLF001
            self._note(result, "failed")
        self._item_failed = ""
        message = result.result.get("msg")
        if result.task.action not in REFUSALS or not isinstance(message, str) or result.task.loop:
            super().v2_runner_on_failed(result, ignore_errors)
            return
        if self._last_task_banner != result.task._uuid:  # noqa: SLF001 - the default callback's own bookkeeping
            self._print_task_banner(result.task)
        self._handle_warnings(result.result)
        host = self.host_label(result)
        for line in message.splitlines():
            self._display.display(f"fatal: [{host}]: {line}", color=C.COLOR_ERROR,
                                  stderr=self.get_option("display_failed_stderr"))
        if ignore_errors:
            self._display.display("...ignoring", color=C.COLOR_SKIP)
