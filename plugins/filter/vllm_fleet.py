"""Ansible filters over vllm-fleet's pure logic (lib/vllm_fleet): scenes, model weights, capacity plans, hardware
rules, verification, rollouts, in-sync checks, wheelhouse locks, compile-cache bundles, the fleet gateway, tuning and
single-line settings."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any, Callable

from ansible.errors import AnsibleFilterError

# The logic is the package lib/vllm_fleet, which the tools and tests import too. From the repo (ansible.cfg's
# filter_plugins, tests/conftest.py) Ansible loads this file by its path, outside any package of the kit, so lib/ goes
# on sys.path. In a collection (tools/sanity.py assembles one for ansible-test) the package is
# plugins/plugin_utils/vllm_fleet, beside this plugin's package: a relative import finds it and sys.path stays as it is.
if __name__.startswith("ansible_collections."):
    from ..plugin_utils.vllm_fleet import (
        FleetError, cards, compile_cache, driver, gateway, hardware, in_sync, local_guard, models, monitoring, pki,
        planner, rollout, scenes, strings, tuning, vault, verify, wheelhouse,
    )
else:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lib"))
    from vllm_fleet import (
        FleetError, cards, compile_cache, driver, gateway, hardware, in_sync, local_guard, models, monitoring, pki,
        planner, rollout, scenes, strings, tuning, vault, verify, wheelhouse,
    )


def kit_digest(kit_root: str) -> str:
    """Return the digest of the kit's files under kit_root (the same for every host of a run)."""
    return in_sync.files_digest(in_sync.kit_files(Path(kit_root)))


def inputs_digest(host_vars: Any, key_b64: str, kit: str, controller_paths: list[str]) -> str:
    """Return the HMAC, keyed by the host's own key (base64), of what a converge of the host deploys: its variables,
    the kit's digest and the controller files it reads."""
    # HostVarsVars keeps the host's untemplated variables; they stand for those that cannot be templated yet.
    return in_sync.inputs_digest(host_vars, kit, in_sync.controller_files(controller_paths),
                                 getattr(host_vars, "_vars", None), base64.b64decode(key_b64))


def host_values(hosts: list[str], hostvars: Any, name: str) -> dict[str, Any]:
    """Return each host's variable by host name, None where the host has none (it failed this run, or the run left
    it out); Jinja's map(attribute=..., default=...) raises instead on hostvars in ansible-core 2.19."""
    return {host: hostvars[host].get(name) if host in hostvars else None for host in hosts}


def presets(custom: dict[str, Any]) -> dict[str, Any]:
    """Return the kit's built-in presets (the hardware registry's) with the user's own merged over them."""
    return {**cards.presets(), **(custom or {})}


def card_matchers(_ignored: Any = None) -> dict[str, Any]:
    """Return the registry's names, PCI ids and compute capability per GPU profile, for vllm_fleet_gpu_facts."""
    return cards.matchers()


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


def _guarded(function: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the kit's errors into Ansible filter errors carrying the same message."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except FleetError as error:
            raise AnsibleFilterError(str(error)) from None
    wrapper.__doc__ = function.__doc__
    return wrapper


class FilterModule:
    """vllm-fleet filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Return the filters by name."""
        return {
            "vllm_fleet_host_values": host_values,
            "vllm_fleet_presets": presets,
            "vllm_fleet_card_matchers": card_matchers,
            "vllm_fleet_driver_floor": _guarded(cards.driver_branch_for_cuda),
            "vllm_fleet_driver_plan": driver.host_plan,
            "vllm_fleet_resolve_scenes": _guarded(scenes.resolve_scenes),
            "vllm_fleet_scenes_problem": scenes.resolve_problem,
            "vllm_fleet_apply_memory_budgets": _guarded(scenes.apply_memory_budgets),
            "vllm_fleet_per_gpu_scenes": scenes.per_gpu_scenes,
            "vllm_fleet_apply_gpu_settings": scenes.apply_gpu_settings,
            "vllm_fleet_scene_config": _guarded(scenes.config_file),
            "vllm_fleet_exposure_problems": _guarded(scenes.exposure_problems),
            "vllm_fleet_gpu_problems": _guarded(scenes.gpu_problems),
            "vllm_fleet_models_by_name": _guarded(scenes.models_by_name),
            "vllm_fleet_is_ip": scenes.is_ip_literal,
            "vllm_fleet_is_loopback": scenes.is_loopback,
            "vllm_fleet_env_problem": scenes.env_problem,
            "vllm_fleet_string_problems": string_problems,
            "vllm_fleet_key_problem": gateway.key_problem,
            "vllm_fleet_reach_address": scenes.reach_address,
            "vllm_fleet_local_url": scenes.local_url,
            "vllm_fleet_ready_targets": scenes.ready_targets,
            "vllm_fleet_scene_users": _guarded(scenes.scene_users),
            "vllm_fleet_scene_guard_rules": _guarded(local_guard.scene_rules),
            "vllm_fleet_owner_guard_rules": _guarded(local_guard.owner_rules),
            "vllm_fleet_model_manifest_paths": models.manifest_paths,
            "vllm_fleet_model_controller_dirs": models.controller_dirs,
            "vllm_fleet_model_listings": models.listings,
            "vllm_fleet_model_problems": models.problems,
            "vllm_fleet_model_wanted": models.wanted,
            "vllm_fleet_model_marker_paths": models.marker_paths,
            "vllm_fleet_model_plan": models.plan,
            "vllm_fleet_model_subdirs": models.subdirs,
            "vllm_fleet_model_space_problem": models.space_problem,
            "vllm_fleet_model_verify": models.verify,
            "vllm_fleet_model_marker": models.marker,
            "vllm_fleet_model_failure": models.failure,
            "vllm_fleet_model_published": models.published,
            "vllm_fleet_plan_config_paths": _guarded(planner.config_paths),
            "vllm_fleet_plan_hub_config_urls": planner.hub_config_urls,
            "vllm_fleet_plan_hub_configs": planner.hub_configs,
            "vllm_fleet_plan": _guarded(planner.plan_host),
            "vllm_fleet_plan_table": planner.plan_table,
            "vllm_fleet_hardware_problems": _guarded(hardware.problems),
            "vllm_fleet_slo_targets": _guarded(verify.targets_for),
            "vllm_fleet_scene_slo_targets": _guarded(verify.scene_targets),
            "vllm_fleet_scene_report": _guarded(verify.scene_report),
            "vllm_fleet_verdict_record": _guarded(verify.verdict_record),
            "vllm_fleet_bench_command": verify.bench_command,
            "vllm_fleet_env_file_key": verify.env_file_key,
            "vllm_fleet_gpu_limits": monitoring.gpu_limits,
            "vllm_fleet_scrape_targets": monitoring.scrape_targets,
            "vllm_fleet_metrics_paths": monitoring.metrics_paths,
            "vllm_fleet_prometheus_config": monitoring.prometheus_config,
            "vllm_fleet_prometheus_web_config": monitoring.web_config,
            "vllm_fleet_host_port": monitoring.host_port,
            "vllm_fleet_alert_rules": _guarded(monitoring.alert_rules),
            "vllm_fleet_alertmanager_config": _guarded(monitoring.alertmanager_config),
            "vllm_fleet_monitoring_problems": monitoring.input_problems,
            "vllm_fleet_scene_checks": _guarded(verify.scene_checks),
            "vllm_fleet_verify_summary": _guarded(verify.summary_markdown),
            "vllm_fleet_state_scenes": rollout.state_scenes,
            "vllm_fleet_restored_scenes": rollout.restored_scenes,
            "vllm_fleet_rollout_failure": rollout.failure_message,
            "vllm_fleet_failed_result": rollout.failed_result,
            "vllm_fleet_rollout_restore_failure": rollout.restore_failure_message,
            "vllm_fleet_kit_digest": kit_digest,
            "vllm_fleet_inputs_digest": inputs_digest,
            "vllm_fleet_release_lock": wheelhouse.release_lock,
            "vllm_fleet_release_install_plan": wheelhouse.install_plan,
            "vllm_fleet_compile_cache_parts": compile_cache.cache_parts,
            "vllm_fleet_compile_cache_bundles": compile_cache.scene_bundles,
            "vllm_fleet_compile_cache_seedable": compile_cache.seedable,
            "vllm_fleet_compile_cache_unpublished": compile_cache.unpublished,
            "vllm_fleet_compile_cache_index": compile_cache.index_entries,
            "vllm_fleet_compile_cache_packers": compile_cache.packers,
            "vllm_fleet_gateway_user_problems": gateway.user_problems,
            "vllm_fleet_gateway_users": gateway.gateway_users,
            "vllm_fleet_gateway_user_keys": gateway.user_keys,
            "vllm_fleet_gateway_backend_problems": gateway.backend_problems,
            "vllm_fleet_gateway_backend_record": gateway.backend_record,
            "vllm_fleet_gateway_backends": gateway.backends,
            "vllm_fleet_gateway_backend_notes": gateway.backend_notes,
            "vllm_fleet_gateway_routes": gateway.routes,
            "vllm_fleet_gateway_scene_limits": gateway.scene_limits,
            "vllm_fleet_gateway_scene_tls_name": gateway.scene_tls_name,
            "vllm_fleet_gateway_server_name": gateway.server_name,
            "vllm_fleet_gateway_scene_tls_names": gateway.scene_tls_names,
            "vllm_fleet_gateway_models_document": gateway.models_document,
            "vllm_fleet_gateway_first_user": gateway.first_user,
            "vllm_fleet_gateway_error": gateway.error_document,
            "vllm_fleet_gateway_tls_problems": gateway.tls_problems,
            "vllm_fleet_gateway_buffer_bytes": gateway.buffer_bytes,
            "vllm_fleet_gateway_memory_ceiling": gateway.memory_ceiling,
            "vllm_fleet_gateway_source_problems": gateway.source_problems,
            "vllm_fleet_host_addresses": gateway.host_addresses,
            "vllm_fleet_pki_client_cert_name": pki.client_cert_name,
            "vllm_fleet_pki_client_cert_files": pki.client_cert_files,
            "vllm_fleet_pki_fingerprints": pki.fingerprints,
            "vllm_fleet_lab_secret_problem": vault.lab_secret_problem,
            "vllm_fleet_tune_plan": tuning.sweep_plan,
            "vllm_fleet_tune_candidate_scenes": tuning.candidate_scenes,
            "vllm_fleet_tune_routing_problems": tuning.routing_problems,
            "vllm_fleet_tune_sweep_request": tuning.sweep_request,
            "vllm_fleet_tune_sweep_command": tuning.sweep_command,
            "vllm_fleet_tune_sweep_outcome": tuning.sweep_outcome,
            "vllm_fleet_tune_report": tuning.report,
            "vllm_fleet_tune_markdown": tuning.markdown,
            "vllm_fleet_tune_suggested_vars": tuning.suggested_vars,
            "vllm_fleet_tune_vars_file": tuning.vars_file,
        }
