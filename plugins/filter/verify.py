"""Filters over verification (plugin_utils/verify.py): SLO targets, checks, reports and verdicts."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import verify
from ansible_collections.vllm.fleet.plugins.plugin_utils.filters import guarded


class FilterModule:
    """Filters vllm.fleet.verify_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "verify_slo_targets": guarded(verify.targets_for),
            "verify_scene_slo_targets": guarded(verify.scene_targets),
            "verify_scene_report": guarded(verify.scene_report),
            "verify_verdict_record": guarded(verify.verdict_record),
            "verify_bench_command": verify.bench_command,
            "verify_env_file_key": verify.env_file_key,
            "verify_scene_checks": guarded(verify.scene_checks),
            "verify_proof_request": verify.proof_request,
            "verify_summary": guarded(verify.summary_markdown),
        }
