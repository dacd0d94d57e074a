"""roles/vllm_host_metrics/files/host_metrics.py: the textfile collector each fleet host runs for node_exporter.

Parsing is tested on real nvidia-smi outputs (tests/data/nvidia/README.md says where each comes from), the state
files on documents made by the kit's own writers, and main() end to end with a fake nvidia-smi, real state files, a
real unix-socket HAProxy stand-in and promtool's check of the file it writes.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import socketserver
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import REPO, load_as

from ansible_collections.vllm.fleet.plugins.plugin_utils import verify

SCRIPT = REPO / "roles" / "vllm_host_metrics" / "files" / "host_metrics.py"
# Loaded from its file under its own name, as the host's python3 runs it: an import of the package would fail here.
hm: ModuleType = load_as("host_metrics_under_test", SCRIPT)
drift_check: ModuleType = load_as("vllm_drift_check_for_host_metrics", REPO / "roles" / "vllm_drift" / "files" /
                                  "vllm_drift_check.py")
DATA = REPO / "tests" / "data" / "nvidia"
PROMTOOL = "/usr/bin/promtool"
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"
QUERY = ("--query-gpu=index,name,uuid,pci.bus_id,driver_version,utilization.gpu,utilization.memory,memory.used,"
         "memory.total,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,clocks_throttle_reasons.active,"
         "pcie.link.gen.current,pcie.link.width.current,fan.speed")
PER_GPU = ("vllm_fleet_gpu_info", "vllm_fleet_gpu_utilization_ratio", "vllm_fleet_gpu_memory_utilization_ratio",
           "vllm_fleet_gpu_memory_used_bytes", "vllm_fleet_gpu_memory_total_bytes",
           "vllm_fleet_gpu_temperature_celsius", "vllm_fleet_gpu_power_draw_watts", "vllm_fleet_gpu_power_limit_watts",
           "vllm_fleet_gpu_sm_clock_hertz", "vllm_fleet_gpu_memory_clock_hertz", "vllm_fleet_gpu_throttled",
           "vllm_fleet_gpu_pcie_link_generation", "vllm_fleet_gpu_pcie_link_width", "vllm_fleet_gpu_fan_ratio")
REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
           "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clock_setting")

# HAProxy 2.6's answer to `show table user_limits` for the gateway's table (stick-table type string len 32 size 100k
# store http_req_rate(1m),conn_cur,http_req_cnt,http_err_cnt,http_fail_cnt,gpc0): data columns in HAProxy's own order
# (gpc0, conn_cur, http_req_cnt, http_req_rate, http_err_cnt, http_fail_cnt), a key with a space escaped as dump_text()
# escapes it, and the blank line that ends every CLI answer.
SHOW_TABLE = (
    "# table: user_limits, type: string, size:102400, used:3\n"
    "0x55d0c1a2b3c0: key=lab-user use=0 exp=119000 gpc0=2 conn_cur=0 http_req_cnt=5 http_req_rate(60000)=5 "
    "http_err_cnt=1 http_fail_cnt=0\n"
    "0x55d0c1a2b4e8: key=ci-bot use=3 exp=600000 gpc0=0 conn_cur=3 http_req_cnt=48213 http_req_rate(60000)=212 "
    "http_err_cnt=17 http_fail_cnt=4\n"
    "0x55d0c1a2b610: key=team\\ a\\=b use=0 exp=42 gpc0=11 conn_cur=0 http_req_cnt=90 http_req_rate(60000)=0 "
    "http_err_cnt=11 http_fail_cnt=0\n"
    "\n")


def data(name: str) -> str:
    """Return the text of a file under tests/data/nvidia."""
    return (DATA / name).read_text(encoding="utf-8")


def collected(text: str) -> Any:
    """Return the Metrics of one query output, as nvidia-smi's successful answer."""
    metrics = hm.Metrics()
    hm.nvidia_metrics(hm.SmiResult(0, text, ""), metrics)
    return metrics


def fake_nvidia_smi(directory: Path, stdout: str, rc: int = 0, body: str = "") -> Path:
    """Write an executable nvidia-smi stand-in that logs its arguments, runs body, prints stdout and exits rc."""
    (directory / "smi-output").write_text(stdout, encoding="utf-8")
    script = directory / "nvidia-smi"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> '{directory}/smi-args'\n{body}cat '{directory}/smi-output'\n"
                      f"exit {rc}\n", encoding="utf-8")
    script.chmod(0o755)
    return script


def sample_lines(text: str) -> dict[str, str]:
    """Map each sample line's name and labels to its value (comment lines left out)."""
    samples: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            samples[series] = value
    return samples


def promtool_check(path: Path) -> subprocess.CompletedProcess[str]:
    """Run `promtool check metrics` on a file (stdin, as the tool reads it)."""
    with path.open("rb") as handle:
        return subprocess.run([PROMTOOL, "check", "metrics"], stdin=handle, capture_output=True, text=True,
                              timeout=60, check=False)


# ---- the query ----------------------------------------------------------------------------------------------


def test_the_query_is_one_call_of_the_documented_fields() -> None:
    """The collector asks nvidia-smi once, for these fields in this order, in the format it parses."""
    assert hm.query_args(hm.QUERY_FIELDS) == [QUERY, "--format=csv,noheader,nounits"]
    renamed = hm.renamed_fields()
    assert [a for a, b in zip(hm.QUERY_FIELDS, renamed, strict=True) if a != b] == ["clocks_throttle_reasons.active"]
    assert renamed[hm.QUERY_FIELDS.index("clocks_throttle_reasons.active")] == "clocks_event_reasons.active"


def test_throttle_bits_are_nvml_h_clocks_event_reasons() -> None:
    """The bits of nvml.h's nvmlClocksEventReason* (NVIDIA/go-nvml pkg/nvml/nvml.h at 2f9e261)."""
    assert dict(hm.THROTTLE_REASONS) == {
        "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
        "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
        "hw_power_brake_slowdown": 0x80, "display_clock_setting": 0x100}


# ---- real captures ------------------------------------------------------------------------------------------

# file -> name, driver, bus id, (util %, mem util %), used MiB, total MiB, temp, power draw, power limit, SM MHz,
# memory MHz, active throttle reasons, PCIe gen, width, fan % (None: [N/A]).
CAPTURES = {
    "metrics-rtx4090.csv": ("NVIDIA GeForce RTX 4090", "535.86.05", "00000000:84:00.0", (0, 0), 2, 24564, 40, 26.84,
                            450.0, 210, 405, {"gpu_idle"}, 1, 16, 0),
    "metrics-rtx4080-super.csv": ("NVIDIA GeForce RTX 4080 SUPER", "595.71.05", "00000000:01:00.0", (0, 23), 596,
                                  16376, 43, 26.2, 320.0, 210, 405, {"gpu_idle"}, 1, 16, 0),
    "metrics-h100-80gb-hbm3.csv": ("NVIDIA H100 80GB HBM3", "590.48.01", "00000000:00:09.0", (100, 11), 19818, 81559,
                                   59, 631.95, 700.0, 1980, 2619, set(), 5, 16, None),
    "metrics-h100-mig.csv": ("NVIDIA H100 80GB HBM3", "590.48.01", "00000000:00:09.0", None, 59, 81559, 42, 71.15,
                             700.0, 345, 2619, {"gpu_idle"}, 5, 16, None),
    "metrics-l40s.csv": ("NVIDIA L40S", "595.80", "00000000:01:00.0", (100, 9), 0, 46068, 63, 144.97, 350.0, 2520,
                         9001, set(), 4, 16, None),
}


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_a_real_capture_gives_its_values_in_base_units(name: str) -> None:
    """Each capture's cells come out as the file has them, in bytes, hertz, ratios; [N/A] cells leave no sample."""
    (card, driver, bus_id, utilization, used, total, temp, draw, limit, sm, mem, throttled, gen, width,
     fan) = CAPTURES[name]
    metrics = collected(data(name))
    assert metrics.get("vllm_fleet_nvidia_smi_up", reason="") == 1
    assert metrics.get("vllm_fleet_gpus") == 1
    uuid = re.search(r"GPU-[0-9a-f-]{36}", data(name))
    assert uuid
    assert metrics.get("vllm_fleet_gpu_info", gpu="0", name=card, uuid=uuid.group(0), pci_bus_id=bus_id,
                       driver_version=driver) == 1
    if utilization is None:  # MIG mode: the whole-GPU utilization is [N/A]
        assert "vllm_fleet_gpu_utilization_ratio" not in metrics.samples
        assert "vllm_fleet_gpu_memory_utilization_ratio" not in metrics.samples
    else:
        assert metrics.get("vllm_fleet_gpu_utilization_ratio", gpu="0") == utilization[0] / 100
        assert metrics.get("vllm_fleet_gpu_memory_utilization_ratio", gpu="0") == utilization[1] / 100
    assert metrics.get("vllm_fleet_gpu_memory_used_bytes", gpu="0") == used * 1048576
    assert metrics.get("vllm_fleet_gpu_memory_total_bytes", gpu="0") == total * 1048576
    assert metrics.get("vllm_fleet_gpu_temperature_celsius", gpu="0") == temp
    assert metrics.get("vllm_fleet_gpu_power_draw_watts", gpu="0") == draw
    assert metrics.get("vllm_fleet_gpu_power_limit_watts", gpu="0") == limit
    assert metrics.get("vllm_fleet_gpu_sm_clock_hertz", gpu="0") == sm * 1_000_000
    assert metrics.get("vllm_fleet_gpu_memory_clock_hertz", gpu="0") == mem * 1_000_000
    assert {reason: metrics.get("vllm_fleet_gpu_throttled", gpu="0", reason=reason) for reason in REASONS} == {
        reason: (1 if reason in throttled else 0) for reason in REASONS}
    assert metrics.get("vllm_fleet_gpu_pcie_link_generation", gpu="0") == gen
    assert metrics.get("vllm_fleet_gpu_pcie_link_width", gpu="0") == width
    if fan is None:
        assert "vllm_fleet_gpu_fan_ratio" not in metrics.samples
        assert "[N/A]" in data(name).split(", ")[-1]
    else:
        assert metrics.get("vllm_fleet_gpu_fan_ratio", gpu="0") == fan / 100


def test_several_gpus_keep_their_own_index() -> None:
    """Two rows (a 4090 and a 4080 SUPER's, the second renumbered 1) give two GPUs, each labelled by its index."""
    second = "1" + data("metrics-rtx4080-super.csv")[1:]
    metrics = collected(data("metrics-rtx4090.csv") + second)
    assert metrics.get("vllm_fleet_gpus") == 2
    assert metrics.get("vllm_fleet_gpu_memory_total_bytes", gpu="0") == 24564 * 1048576
    assert metrics.get("vllm_fleet_gpu_memory_total_bytes", gpu="1") == 16376 * 1048576
    assert metrics.get("vllm_fleet_gpu_memory_utilization_ratio", gpu="1") == 0.23


@pytest.mark.parametrize("missing", ["[N/A]", "[Not Supported]", "[Unknown Error]", "", "N/A"])
@pytest.mark.parametrize("column", ["temperature.gpu", "power.draw", "clocks.sm", "fan.speed", "memory.used"])
def test_a_cell_without_a_number_leaves_out_only_its_sample(missing: str, column: str) -> None:
    """No 0 and no NaN for a reading nvidia-smi does not have: the sample is absent, the GPU's others stay."""
    cells = data("metrics-rtx4080-super.csv").strip().split(", ")
    cells[hm.QUERY_FIELDS.index(column)] = missing
    family = {"temperature.gpu": "vllm_fleet_gpu_temperature_celsius", "power.draw": "vllm_fleet_gpu_power_draw_watts",
              "clocks.sm": "vllm_fleet_gpu_sm_clock_hertz", "fan.speed": "vllm_fleet_gpu_fan_ratio",
              "memory.used": "vllm_fleet_gpu_memory_used_bytes"}[column]
    metrics = collected(", ".join(cells) + "\n")
    assert family not in metrics.samples
    assert metrics.get("vllm_fleet_gpu_memory_total_bytes", gpu="0") == 16376 * 1048576
    assert metrics.get("vllm_fleet_nvidia_smi_up", reason="") == 1
    assert "NaN" not in hm.render(metrics)


def test_a_percentage_is_written_as_its_decimal_ratio() -> None:
    """57 % is 0.57 in the file, not 0.5700000000000001 (57 * 0.01)."""
    cells = data("metrics-rtx4080-super.csv").strip().split(", ")
    cells[hm.QUERY_FIELDS.index("utilization.gpu")] = "57"
    text = hm.render(collected(", ".join(cells)))
    assert 'vllm_fleet_gpu_utilization_ratio{gpu="0"} 0.57\n' in text
    assert 'vllm_fleet_gpu_memory_utilization_ratio{gpu="0"} 0.23\n' in text


def test_a_throttle_mask_without_a_number_leaves_out_the_throttle_family() -> None:
    """[N/A] for the bitmask: no vllm_fleet_gpu_throttled sample at all, rather than nine zeros."""
    cells = data("metrics-h100-80gb-hbm3.csv").strip().split(", ")
    cells[hm.QUERY_FIELDS.index("clocks_throttle_reasons.active")] = "[N/A]"
    metrics = collected(", ".join(cells))
    assert "vllm_fleet_gpu_throttled" not in metrics.samples
    assert metrics.get("vllm_fleet_gpu_sm_clock_hertz", gpu="0") == 1980e6


# ---- nvidia-smi failing -------------------------------------------------------------------------------------


def test_the_real_driver_library_mismatch_is_a_reason_and_no_gpu() -> None:
    """nvidia-smi's real mismatch output, exit status 18: up 0 with its first line, 0 GPUs, no per-GPU family."""
    metrics = hm.Metrics()
    hm.nvidia_metrics(hm.SmiResult(18, data("smi-driver-library-mismatch.txt"), ""), metrics)
    assert metrics.samples["vllm_fleet_nvidia_smi_up"] == [((("reason", MISMATCH),), 0.0)]
    assert metrics.get("vllm_fleet_gpus") == 0
    assert not set(PER_GPU) & set(metrics.samples)
    assert f'vllm_fleet_nvidia_smi_up{{reason="{MISMATCH}"}} 0\n' in hm.render(metrics)


def test_the_mismatch_through_a_real_process(tmp_path: Path) -> None:
    """The same output from an executable that exits 18, run as the collector runs nvidia-smi."""
    smi = fake_nvidia_smi(tmp_path, data("smi-driver-library-mismatch.txt"), rc=18)
    result = hm.run_nvidia_smi(str(smi))
    assert (result.returncode, result.failure) == (18, None)
    assert hm.failure_reason(result) == MISMATCH
    assert (tmp_path / "smi-args").read_text().split() == [QUERY, "--format=csv,noheader,nounits"]


def test_nvidia_smi_not_found(tmp_path: Path) -> None:
    """A command that does not exist: the fixed reason, not an exception."""
    metrics = hm.Metrics()
    hm.nvidia_metrics(hm.run_nvidia_smi(str(tmp_path / "nvidia-smi")), metrics)
    assert metrics.get("vllm_fleet_nvidia_smi_up", reason="nvidia-smi not found") == 0
    assert metrics.get("vllm_fleet_gpus") == 0


@pytest.mark.parametrize("body", ["sleep 30 &\nwait\n", "setsid sleep 6 &\nwait\n"])
def test_a_hung_nvidia_smi_is_killed_with_what_it_started(tmp_path: Path, body: str) -> None:
    """A timeout ends the run on time even when a child holds the output open, in the session or (setsid) out of it."""
    smi = fake_nvidia_smi(tmp_path, data("metrics-l40s.csv"), body=body)
    started = time.monotonic()
    result = hm.run_nvidia_smi(str(smi), timeout_s=0.5)
    assert time.monotonic() - started < 5
    assert hm.failure_reason(result) == "timed out after 0.5 s"
    assert hm.run_nvidia_smi.__defaults__ == (10.0,)  # "timed out after 10 s" on a host


def test_a_driver_without_the_old_throttle_name_is_asked_again_with_the_new_one(tmp_path: Path) -> None:
    """nvidia-smi's answer to an unknown field (exit 2) for clocks_throttle_reasons.active: one more call, then up 1."""
    body = ('case "$1" in *clocks_throttle_reasons.active*) '
            'echo \'Field "clocks_throttle_reasons.active" is not a valid field to query.\'; echo; exit 2;; esac\n')
    smi = fake_nvidia_smi(tmp_path, data("metrics-h100-mig.csv"), body=body)
    metrics = hm.Metrics()
    hm.nvidia_metrics(hm.run_nvidia_smi(str(smi)), metrics)
    calls = (tmp_path / "smi-args").read_text().splitlines()
    assert [call.split()[0] for call in calls] == [QUERY, QUERY.replace("clocks_throttle_reasons.active",
                                                                        "clocks_event_reasons.active")]
    assert metrics.get("vllm_fleet_nvidia_smi_up", reason="") == 1
    assert metrics.get("vllm_fleet_gpu_throttled", gpu="0", reason="gpu_idle") == 1


def test_another_rejected_field_is_not_retried(tmp_path: Path) -> None:
    """Only the renamed throttle field has a second name: any other unknown field is the failure it is."""
    smi = fake_nvidia_smi(tmp_path, 'Field "fan.speed" is not a valid field to query.\n\n', rc=2)
    metrics = hm.Metrics()
    hm.nvidia_metrics(hm.run_nvidia_smi(str(smi)), metrics)
    assert len((tmp_path / "smi-args").read_text().splitlines()) == 1
    assert metrics.get("vllm_fleet_nvidia_smi_up", reason='Field "fan.speed" is not a valid field to query.') == 0


@pytest.mark.parametrize("output", ["No devices were found\n", "0, NVIDIA L40S, GPU-0\n",
                                    "x" + data("metrics-l40s.csv")])
def test_output_the_collector_cannot_read_is_a_failure(output: str) -> None:
    """Exit 0 but not the query's rows: up 0 with the output's first line, and no GPU."""
    metrics = collected(output)
    assert metrics.samples["vllm_fleet_nvidia_smi_up"] == [((("reason", output.strip()[:120]),), 0.0)]
    assert metrics.get("vllm_fleet_gpus") == 0


def test_a_reason_is_cut_at_120_characters_and_escaped() -> None:
    """The first non-empty line, 120 characters at most, with backslash and double quote escaped in the label."""
    line = 'Unable to open "C:\\nvml.dll"' + "." * 200
    metrics = hm.Metrics()
    hm.nvidia_metrics(hm.SmiResult(9, "\n  \n" + line + "\nsecond line\n", ""), metrics)
    assert metrics.samples["vllm_fleet_nvidia_smi_up"][0][0] == (("reason", line[:120]),)
    assert 'vllm_fleet_nvidia_smi_up{reason="Unable to open \\"C:\\\\nvml.dll\\"' in hm.render(metrics)
    assert hm.escape_label_value('a\\b"c\nd') == 'a\\\\b\\"c\\nd'


# ---- kit state ----------------------------------------------------------------------------------------------


def drift_status(verdict: str, checked_at: str) -> dict[str, Any]:
    """Return a status document made by the vllm_drift role's own check tool for this verdict."""
    hosts = {"gpu-1": {"changed": 1 if verdict == "drift" else 0, "failures": 1 if verdict == "error" else 0}}
    report = {"hosts": hosts, "changed": [{"host": "gpu-1", "task": "Write the unit"}] if verdict == "drift" else [],
              "failed": [{"host": "gpu-1", "task": "Pull", "msg": "boom"}] if verdict == "error" else []}
    result = drift_check.evaluate(report, 0)
    status: dict[str, Any] = drift_check.build_status(result, checked_at=checked_at, repo="https://git.example/fleet",
                                                      ref="v1", commit="0123abcd", limit="gpu-1", duration_s=3.2,
                                                      log="/var/log/vllm-drift.log")
    assert status["verdict"] == verdict
    return status


@pytest.mark.parametrize("verdict", ["in sync", "drift", "error"])
def test_the_drift_verdict_is_one_hot(verdict: str) -> None:
    """The drift tool's verdict ('in sync', 'drift', 'error') as in_sync/drift/error, and its check time."""
    now = datetime.datetime(2026, 12, 4, 10, 30, 5, tzinfo=datetime.timezone.utc)
    metrics = hm.Metrics()
    hm.drift_metrics(drift_status(verdict, now.isoformat(timespec="seconds")), metrics)
    assert {label: metrics.get("vllm_fleet_drift_verdict", verdict=label) for label in ("in_sync", "drift", "error")} \
        == {label: (1 if label == verdict.replace(" ", "_") else 0) for label in ("in_sync", "drift", "error")}
    assert metrics.get("vllm_fleet_drift_checked_timestamp_seconds") == now.timestamp()


@pytest.mark.parametrize("checked_at", ["2026-12-04T11:30:05+01:00", "2026-12-04T10:30:05Z"])
def test_the_check_time_honours_its_offset(checked_at: str) -> None:
    """Any offset, and Z, which Python 3.10's fromisoformat does not read by itself."""
    metrics = hm.Metrics()
    hm.drift_metrics({"verdict": "drift", "checked_at": checked_at}, metrics)
    assert metrics.get("vllm_fleet_drift_checked_timestamp_seconds") == 1796380205


@pytest.mark.parametrize("status", [[], {"verdict": "in_sync", "checked_at": "2026-12-04T10:30:05+00:00"},
                                    {"verdict": "drift"}, {"verdict": "drift", "checked_at": "2026-12-04T10:30:05"}])
def test_a_drift_status_the_collector_cannot_read_adds_nothing(status: Any) -> None:
    """Not an object, an unknown verdict, no check time, a time without offset: ValueError and no sample."""
    metrics = hm.Metrics()
    with pytest.raises(ValueError):
        hm.drift_metrics(status, metrics)
    assert not metrics.samples


def verdict_record(scene: str, passed: bool, targets: dict[str, float], max_num_seqs: int | None) -> dict[str, Any]:
    """Return the record the vllm_verify role writes (verify.verdict_record) for a scene's report."""
    report = {"scene": scene, "passed": passed, "slo": {"targets": targets}}
    return verify.verdict_record(report, {"engine_args": {"max-num-seqs": max_num_seqs}}, 1733300000.5)


def test_a_verdict_record_gives_pass_time_targets_in_seconds_and_concurrency() -> None:
    """Targets in ms become seconds; the two that are not latencies are left out, as is a missing one."""
    record = verdict_record("realtime", True, {"median_ttft_ms": 250, "p99_ttft_ms": 500, "median_tpot_ms": 30,
                                              "max_failed": 0, "min_output_throughput": 100}, 16)
    metrics = hm.Metrics()
    hm.verdict_metrics("realtime", json.loads(json.dumps(record)), metrics)
    assert metrics.get("vllm_fleet_verification_passed", scene="realtime") == 1
    assert metrics.get("vllm_fleet_verification_timestamp_seconds", scene="realtime") == 1733300000.5
    assert {dict(labels)["target"]: value for labels, value in metrics.samples["vllm_fleet_scene_slo_seconds"]} == {
        "median_ttft": 0.25, "p99_ttft": 0.5, "median_tpot": 0.03}
    assert metrics.get("vllm_fleet_scene_max_num_seqs", scene="realtime") == 16


def test_a_failed_verdict_without_max_num_seqs() -> None:
    """passed false is 0; a scene with no max-num-seqs engine argument has no concurrency sample."""
    metrics = hm.Metrics()
    hm.verdict_metrics("batch", verdict_record("batch", False, {}, None), metrics)
    assert metrics.get("vllm_fleet_verification_passed", scene="batch") == 0
    assert "vllm_fleet_scene_max_num_seqs" not in metrics.samples
    assert "vllm_fleet_scene_slo_seconds" not in metrics.samples


@pytest.mark.parametrize("record", [None, {"scene": "x"}, {"passed": "yes"}, {"passed": True, "targets": [1]}])
def test_a_verdict_record_the_collector_cannot_read_adds_nothing(record: Any) -> None:
    """A record without a boolean passed, or with targets that are not an object: ValueError and no sample."""
    metrics = hm.Metrics()
    with pytest.raises(ValueError):
        hm.verdict_metrics("x", record, metrics)
    assert not metrics.samples


# ---- HAProxy ------------------------------------------------------------------------------------------------


def test_show_table_is_parsed_per_user() -> None:
    """Every entry's key (unescaped) with its data columns; a rate column loses its period."""
    entries = hm.parse_show_table(SHOW_TABLE)
    assert entries == {
        "lab-user": {"gpc0": 2, "conn_cur": 0, "http_req_cnt": 5, "http_req_rate": 5, "http_err_cnt": 1,
                     "http_fail_cnt": 0},
        "ci-bot": {"gpc0": 0, "conn_cur": 3, "http_req_cnt": 48213, "http_req_rate": 212, "http_err_cnt": 17,
                   "http_fail_cnt": 4},
        "team a=b": {"gpc0": 11, "conn_cur": 0, "http_req_cnt": 90, "http_req_rate": 0, "http_err_cnt": 11,
                     "http_fail_cnt": 0}}
    metrics = hm.Metrics()
    hm.gateway_metrics(entries, metrics)
    assert metrics.get("vllm_fleet_gateway_key_requests_total", user="ci-bot") == 48213
    assert metrics.get("vllm_fleet_gateway_key_client_errors_total", user="ci-bot") == 17
    assert metrics.get("vllm_fleet_gateway_key_server_errors_total", user="ci-bot") == 4
    assert metrics.get("vllm_fleet_gateway_key_rate_limited_total", user="team a=b") == 11
    assert metrics.get("vllm_fleet_gateway_key_in_flight", user="ci-bot") == 3


def test_show_table_of_a_newer_haproxy_and_of_a_smaller_store_line() -> None:
    """HAProxy 2.9+ adds shard=; a table storing only http_req_rate and conn_cur gives only the in-flight gauge."""
    text = ("# table: user_limits, type: string, size:102400, used:1\n"
            "0x7f3a2c01e0a8: key=lab-user use=0 exp=118512 shard=0 http_req_rate(60000)=3 conn_cur=1\n\n")
    entries = hm.parse_show_table(text)
    assert entries == {"lab-user": {"http_req_rate": 3, "conn_cur": 1}}
    metrics = hm.Metrics()
    hm.gateway_metrics(entries, metrics)
    assert set(metrics.samples) == {"vllm_fleet_gateway_key_in_flight"}
    assert hm.unescape_key("a\\x09b\\\\c\\ d") == "a\tb\\c d"


@pytest.mark.parametrize("answer", ["No such table\n\n", "Unknown command: 'show'\n", "",
                                    "# table: user_limits, type: string, size:102400, used:1\n"
                                    "# contents not dumped due to insufficient privileges\n\n",
                                    "# table: user_limits, type: string, size:102400, used:1\ngarbage\n"])
def test_an_answer_that_is_not_a_table_dump_is_an_error(answer: str) -> None:
    """HAProxy's error answers (unknown table, too low a socket level) are failures, not an empty table."""
    with pytest.raises(ValueError):
        hm.parse_show_table(answer)


class _HAProxyStandIn(socketserver.BaseRequestHandler):
    """Answers one CLI command with SHOW_TABLE and closes, as HAProxy's admin socket does without 'prompt'."""

    commands: list[bytes] = []

    def handle(self) -> None:
        """Read the command line, record it, answer, close."""
        command = b""
        while not command.endswith(b"\n"):
            chunk = self.request.recv(1024)
            if not chunk:
                break
            command += chunk
        type(self).commands.append(command)
        self.request.sendall(SHOW_TABLE.encode())


@pytest.fixture
def haproxy_socket() -> Iterator[Path]:
    """A unix stream socket served by the HAProxy stand-in, in a short path (sun_path holds 108 bytes)."""
    _HAProxyStandIn.commands = []
    with tempfile.TemporaryDirectory(prefix="hm-") as directory:
        path = Path(directory) / "admin.sock"
        server = socketserver.UnixStreamServer(str(path), _HAProxyStandIn)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield path
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)


# ---- main end to end --------------------------------------------------------------------------------------


def write_state(root: Path) -> dict[str, Any]:
    """Write the kit's state files as its roles do, and return the configuration that points at them."""
    (root / "drift").mkdir()
    (root / "drift" / "status.json").write_text(json.dumps(drift_status("drift", "2026-12-04T10:30:05+00:00")))
    (root / "in-sync.json").write_text("{}")
    os.utime(root / "in-sync.json", (1796380000, 1796380000))
    verify_dir = root / "verify"
    verify_dir.mkdir()
    targets = {"median_ttft_ms": 250, "p99_ttft_ms": 500, "median_tpot_ms": 30, "p99_tpot_ms": 60, "max_failed": 0,
               "min_output_throughput": 100}
    (verify_dir / "realtime.verdict.json").write_text(json.dumps(verdict_record("realtime", True, targets, 16)))
    (verify_dir / "batch.verdict.json").write_text(json.dumps(verdict_record("batch", False, {"p99_tpot_ms": 120},
                                                                             64)))
    (verify_dir / "chat.verdict.json").write_text('{"scene": "chat", "passed": tru')  # cut off mid-write
    (verify_dir / "notes.txt").write_text("not a verdict")
    return {"drift_status_file": str(root / "drift" / "status.json"), "in_sync_file": str(root / "in-sync.json"),
            "verify_dir": str(verify_dir)}


def run_main(tmp_path: Path, config: dict[str, Any]) -> tuple[int, Path]:
    """Write the configuration, run main() on it, and return its exit status and the out file."""
    (tmp_path / "config.json").write_text(json.dumps(config))
    out_dir = tmp_path / "textfile"
    out_dir.mkdir(exist_ok=True)
    out = out_dir / "vllm_fleet.prom"
    return hm.main(["--config", str(tmp_path / "config.json"), "--out", str(out)]), out


def test_main_end_to_end_passes_promtool(tmp_path: Path, haproxy_socket: Path) -> None:
    """A GPU host with every source: the file holds each family, and `promtool check metrics` finds nothing to say."""
    smi_dir = tmp_path / "bin"
    smi_dir.mkdir()
    smi = fake_nvidia_smi(smi_dir, data("metrics-rtx4080-super.csv"))
    config = {"nvidia_smi": str(smi), "gpus": {"0": {"temperature_limit_celsius": 83,
                                                     "planned_memory_bytes": 15032385536}},
              "haproxy_socket": str(haproxy_socket), "haproxy_table": "user_limits", **write_state(tmp_path)}
    before = time.time()
    rc, out = run_main(tmp_path, config)
    assert rc == 0
    text = out.read_text()
    samples = sample_lines(text)
    assert samples['vllm_fleet_nvidia_smi_up{reason=""}'] == "1"
    assert samples["vllm_fleet_gpus"] == "1"
    assert samples['vllm_fleet_gpu_memory_used_bytes{gpu="0"}'] == str(596 * 1048576)
    assert samples['vllm_fleet_gpu_memory_planned_bytes{gpu="0"}'] == "15032385536"
    assert samples['vllm_fleet_gpu_temperature_limit_celsius{gpu="0"}'] == "83"
    assert samples['vllm_fleet_gpu_power_draw_watts{gpu="0"}'] == "26.2"
    assert samples['vllm_fleet_gpu_throttled{gpu="0",reason="gpu_idle"}'] == "1"
    assert samples['vllm_fleet_drift_verdict{verdict="drift"}'] == "1"
    assert samples['vllm_fleet_drift_verdict{verdict="in_sync"}'] == "0"
    assert samples["vllm_fleet_drift_checked_timestamp_seconds"] == "1796380205"
    assert samples["vllm_fleet_in_sync_record_timestamp_seconds"] == "1796380000"
    assert samples['vllm_fleet_verification_passed{scene="realtime"}'] == "1"
    assert samples['vllm_fleet_verification_passed{scene="batch"}'] == "0"
    assert samples['vllm_fleet_scene_slo_seconds{scene="realtime",target="p99_tpot"}'] == "0.06"
    assert samples['vllm_fleet_scene_slo_seconds{scene="batch",target="p99_tpot"}'] == "0.12"
    assert samples['vllm_fleet_scene_max_num_seqs{scene="batch"}'] == "64"
    assert not any('scene="chat"' in series for series in samples)
    assert samples['vllm_fleet_collector_errors{source="verify:chat.verdict.json"}'] == "1"
    assert samples['vllm_fleet_gateway_key_requests_total{user="lab-user"}'] == "5"
    assert samples['vllm_fleet_gateway_key_rate_limited_total{user="team a=b"}'] == "11"
    assert samples['vllm_fleet_gateway_key_server_errors_total{user="ci-bot"}'] == "4"
    assert samples['vllm_fleet_gateway_key_in_flight{user="ci-bot"}'] == "3"
    assert [line for line in samples if line.startswith("vllm_fleet_collector_errors")] == [
        'vllm_fleet_collector_errors{source="verify:chat.verdict.json"}']
    assert before <= float(samples["vllm_fleet_collector_last_run_timestamp_seconds"]) <= time.time()
    assert _HAProxyStandIn.commands == [b"show table user_limits\n"]
    for name, (kind, _) in hm.FAMILIES.items():
        if any(series.split("{")[0] == name for series in samples):
            assert f"# HELP {name} " in text and f"# TYPE {name} {kind}\n" in text
    check = promtool_check(out)
    assert (check.returncode, check.stdout, check.stderr) == (0, "", "")


def test_main_when_nvidia_smi_fails_still_exits_0_and_passes_promtool(tmp_path: Path) -> None:
    """The real mismatch output with exit status 18: the metric says so, the run does not fail, the file is valid."""
    smi = fake_nvidia_smi(tmp_path, data("smi-driver-library-mismatch.txt"), rc=18)
    rc, out = run_main(tmp_path, {"nvidia_smi": str(smi), "gpus": {"0": {"temperature_limit_celsius": 83}}})
    assert rc == 0
    samples = sample_lines(out.read_text())
    assert samples[f'vllm_fleet_nvidia_smi_up{{reason="{MISMATCH}"}}'] == "0"
    assert samples["vllm_fleet_gpus"] == "0"
    assert not any(series.split("{")[0] in PER_GPU for series in samples)
    assert samples['vllm_fleet_gpu_temperature_limit_celsius{gpu="0"}'] == "83"  # the plan still stands
    check = promtool_check(out)
    assert (check.returncode, check.stdout, check.stderr) == (0, "", "")


def test_main_on_a_host_without_gpu_or_state(tmp_path: Path) -> None:
    """No nvidia_smi configured: vllm_fleet_gpus 0 and no up metric; absent state files leave their families out."""
    rc, out = run_main(tmp_path, {"nvidia_smi": None, "drift_status_file": str(tmp_path / "none.json"),
                                  "in_sync_file": str(tmp_path / "none"), "verify_dir": str(tmp_path / "none")})
    assert rc == 0
    samples = sample_lines(out.read_text())
    assert set(samples) == {"vllm_fleet_gpus", "vllm_fleet_collector_last_run_timestamp_seconds"}
    assert samples["vllm_fleet_gpus"] == "0"


def test_a_corrupt_drift_status_and_a_dead_haproxy_socket_are_collector_errors(tmp_path: Path) -> None:
    """Each source that cannot be read sets its error sample; the others still come out."""
    (tmp_path / "status.json").write_text("{not json")
    config = {"drift_status_file": str(tmp_path / "status.json"), "haproxy_socket": str(tmp_path / "no.sock"),
              "in_sync_file": str(tmp_path / "in-sync.json")}
    (tmp_path / "in-sync.json").write_text("{}")
    rc, out = run_main(tmp_path, config)
    assert rc == 0
    samples = sample_lines(out.read_text())
    assert samples['vllm_fleet_collector_errors{source="drift"}'] == "1"
    assert samples['vllm_fleet_collector_errors{source="haproxy"}'] == "1"
    assert "vllm_fleet_in_sync_record_timestamp_seconds" in samples
    assert not any(series.startswith("vllm_fleet_drift_") for series in samples)


def test_the_out_file_is_replaced_whole_with_mode_0644(tmp_path: Path) -> None:
    """A new inode by rename (a reader holding the old one reads it whole), 0644 under umask 077, no temp left."""
    rc, out = run_main(tmp_path, {})
    assert rc == 0
    old_inode = out.stat().st_ino
    old = os.umask(0o077)
    try:
        rc, out = run_main(tmp_path, {})
    finally:
        os.umask(old)
    assert rc == 0
    assert out.stat().st_ino != old_inode
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert sorted(p.name for p in out.parent.iterdir()) == ["vllm_fleet.prom"]


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If the rename fails, the previous file stays as it was and the temporary file is removed."""
    rc, out = run_main(tmp_path, {})
    previous = out.read_text()

    def refuse(src: str, dst: str) -> None:
        """Fail as a full or read-only file system would."""
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hm.os, "replace", refuse)
    rc, out = run_main(tmp_path, {})
    assert rc == 1
    assert out.read_text() == previous
    assert sorted(p.name for p in out.parent.iterdir()) == ["vllm_fleet.prom"]


@pytest.mark.parametrize(("config", "message"), [
    ("{", "is not JSON"),
    ("[]", "must be a JSON object"),
    ('{"nvidia-smi": "nvidia-smi"}', "unknown configuration keys ['nvidia-smi']"),
    ('{"nvidia_smi": 1}', "nvidia_smi must be a non-empty string or null"),
    ('{"gpus": {"first": {}}}', "must be an nvidia-smi index"),
    ('{"gpus": {"0": {"planned_memory_bytes": "21 GiB"}}}', "['planned_memory_bytes'] must be non-negative numbers"),
    ('{"gpus": {"0": {"temp_limit": 83}}}', "unknown keys ['temp_limit']"),
    ('{"haproxy_table": "user_limits\\nshow info"}', "is not a table name"),
])
def test_a_bad_configuration_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str,
                                                   message: str) -> None:
    """Exit status 2 and one stderr line naming the fault; nothing written."""
    (tmp_path / "config.json").write_text(config)
    rc = hm.main(["--config", str(tmp_path / "config.json"), "--out", str(tmp_path / "out.prom")])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "out.prom").exists()


@pytest.mark.parametrize("argv", [[], ["--out", "x.prom"], ["--config", "c.json", "--out", "x.prom", "--verbose"]])
def test_bad_arguments_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """argparse's multi-line usage is replaced by one line."""
    with pytest.raises(SystemExit) as exit_info:
        hm.main(argv)
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_a_missing_configuration_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A configuration that is not there is a bad configuration."""
    assert hm.main(["--config", str(tmp_path / "none.json"), "--out", str(tmp_path / "out.prom")]) == 2
    assert "cannot read the configuration" in capsys.readouterr().err


def test_the_script_runs_as_a_single_file_with_only_the_standard_library(tmp_path: Path) -> None:
    """Copied alone and run by python3 -I, as the host's timer runs it: no import of the kit, exit 0."""
    copy = tmp_path / "host_metrics.py"
    copy.write_text(SCRIPT.read_text())
    (tmp_path / "config.json").write_text("{}")
    run = subprocess.run([sys.executable, "-I", str(copy), "--config", str(tmp_path / "config.json"), "--out",
                          str(tmp_path / "out.prom")], capture_output=True, text=True, timeout=60, check=False)
    assert (run.returncode, run.stderr) == (0, "")
    assert "vllm_fleet_gpus 0\n" in (tmp_path / "out.prom").read_text()
    source = SCRIPT.read_text()
    assert not [m for m in re.findall(r"^\s*(?:from|import)\s+(\S+)", source, flags=re.M) if "vllm_fleet" in m]
    assert not re.search(r"^\s*from\s+\.", source, flags=re.M)
    assert "from __future__ import annotations" in source
