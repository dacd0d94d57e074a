"""Filters over the single-line settings check (plugin_utils/strings.py)."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import strings


def string_problems(options: dict[str, Any], variables: Any, documents: list[str] | None = None) -> list[str]:
    """Return the settings of options (an argument spec's) whose value in variables (vars) holds a control character."""
    documents = documents or []
    values = {}
    for name in options:
        try:
            values[name] = strings.plain(variables, name, name, documents)
        # Undefined, a template that fails, a Vault value without its secret: what cannot be read cannot be checked.
        except Exception:  # noqa: BLE001 - Ansible raises its own errors and Python's from the templates it runs
            continue
    return strings.control_character_problems(options, values, documents)


class FilterModule:
    """Filters vllm.fleet.strings_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "strings_problems": string_problems,
        }
