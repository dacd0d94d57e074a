"""Filters over SLO tuning (plugin_utils/tuning.py): plans, sweeps, reports and suggested vars."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import tuning


class FilterModule:
    """Filters vllm.fleet.tuning_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "tuning_plan": tuning.sweep_plan,
            "tuning_candidate_scenes": tuning.candidate_scenes,
            "tuning_routing_problems": tuning.routing_problems,
            "tuning_sweep_request": tuning.sweep_request,
            "tuning_sweep_command": tuning.sweep_command,
            "tuning_sweep_outcome": tuning.sweep_outcome,
            "tuning_report": tuning.report,
            "tuning_markdown": tuning.markdown,
            "tuning_suggested_vars": tuning.suggested_vars,
            "tuning_vars_file": tuning.vars_file,
        }
