"""Filters over monitoring (plugin_utils/monitoring.py): Prometheus, Alertmanager, rules and targets."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.vllm.fleet.plugins.plugin_utils import monitoring
from ansible_collections.vllm.fleet.plugins.plugin_utils.filters import guarded


class FilterModule:
    """Filters vllm.fleet.monitoring_*."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "monitoring_gpu_limits": monitoring.gpu_limits,
            "monitoring_scrape_targets": monitoring.scrape_targets,
            "monitoring_metrics_paths": monitoring.metrics_paths,
            "monitoring_prometheus_config": monitoring.prometheus_config,
            "monitoring_web_config": monitoring.web_config,
            "monitoring_host_port": monitoring.host_port,
            "monitoring_alert_rules": guarded(monitoring.alert_rules),
            "monitoring_alertmanager_config": guarded(monitoring.alertmanager_config),
            "monitoring_problems": monitoring.input_problems,
        }
