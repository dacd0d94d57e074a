# Installed on every fleet host as a single file and run by a systemd timer with the host's python3 (3.10+):
# standard library only, and nothing imported from the vllm_fleet package, which is not there.
"""Write this host's GPU, kit-state and gateway metrics for node_exporter's textfile collector.

Usage: host_metrics.py --config /etc/vllm/host-metrics.json --out /var/lib/prometheus/node-exporter/vllm_fleet.prom

One nvidia-smi query per run; a failing nvidia-smi is itself a metric (vllm_fleet_nvidia_smi_up 0 with its message), so
the run still exits 0. A state file that cannot be read sets vllm_fleet_collector_errors{source} and the rest goes on.
Exit status 2: bad arguments or configuration (one line on stderr); 1: the out file could not be written.

The configuration is a JSON object; every key is optional:
  nvidia_smi         the nvidia-smi command or path; null or absent: no GPU to query (vllm_fleet_gpus 0)
  gpus               {"<nvidia-smi index>": {"temperature_limit_celsius": N, "planned_memory_bytes": N}}, from the
                     kit's hardware registry and plan
  drift_status_file  the vllm-drift status JSON
  in_sync_file       the kit's in-sync record (only its mtime is read)
  verify_dir         the directory of <scene>.verdict.json records
  haproxy_socket     the gateway HAProxy's admin socket; absent: no gateway families
  haproxy_table      its per-user stick table (default user_limits)
Each state file or directory that does not exist leaves its families out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

NVIDIA_SMI_TIMEOUT_S = 10.0
HAPROXY_TIMEOUT_S = 5.0
KILL_GRACE_S = 1.0
REASON_MAX = 120
# clocks_throttle_reasons.* is the name every driver knows: R535 renamed the family clocks_event_reasons.* but kept the
# old names as aliases (still listed by --help-query-gpu on 590.48, 595.71, 595.80 and 610.57), and drivers before
# R535 know only the old names. A driver that drops the alias answers 'Field "..." is not a valid field to query.'
# and the query is sent once more with the new name.
THROTTLE_FIELD = "clocks_throttle_reasons.active"
THROTTLE_FIELD_RENAMED = "clocks_event_reasons.active"
QUERY_FIELDS = ("index", "name", "uuid", "pci.bus_id", "driver_version", "utilization.gpu", "utilization.memory",
                "memory.used", "memory.total", "temperature.gpu", "power.draw", "power.limit", "clocks.sm", "clocks.mem",
                THROTTLE_FIELD, "pcie.link.gen.current", "pcie.link.width.current", "fan.speed")
# nvmlClocksEventReason* bits of nvml.h (the clocks_*_reasons.active bitmask).
THROTTLE_REASONS = (("gpu_idle", 0x1), ("applications_clocks_setting", 0x2), ("sw_power_cap", 0x4),
                    ("hw_slowdown", 0x8), ("sync_boost", 0x10), ("sw_thermal_slowdown", 0x20),
                    ("hw_thermal_slowdown", 0x40), ("hw_power_brake_slowdown", 0x80), ("display_clock_setting", 0x100))
MIB = 1048576
MHZ = 1_000_000
DRIFT_VERDICTS = {"in sync": "in_sync", "drift": "drift", "error": "error"}
SLO_TARGETS = ("median_ttft", "p99_ttft", "median_tpot", "p99_tpot")
VERDICT_SUFFIX = ".verdict.json"
# show table column -> family; which columns a row has depends on the table's store line.
GATEWAY_COLUMNS = {"http_req_cnt": "vllm_fleet_gateway_key_requests_total",
                   "http_err_cnt": "vllm_fleet_gateway_key_client_errors_total",
                   "http_fail_cnt": "vllm_fleet_gateway_key_server_errors_total",
                   "gpc0": "vllm_fleet_gateway_key_rate_limited_total",
                   "conn_cur": "vllm_fleet_gateway_key_in_flight"}
# show table's own fields of an entry, before its data columns.
ENTRY_FIELDS = {"use", "exp", "shard"}
CONFIG_KEYS = {"nvidia_smi", "gpus", "drift_status_file", "in_sync_file", "verify_dir", "haproxy_socket",
               "haproxy_table"}
GPU_CONFIG_KEYS = {"temperature_limit_celsius", "planned_memory_bytes"}

# Every family this collector writes, in output order: name -> (type, help).
FAMILIES: dict[str, tuple[str, str]] = {
    "vllm_fleet_nvidia_smi_up": ("gauge", "1 when nvidia-smi answered the GPU query, 0 with its message as reason."),
    "vllm_fleet_gpus": ("gauge", "GPUs nvidia-smi listed (0 when it failed or this host has no GPU to query)."),
    "vllm_fleet_gpu_info": ("gauge", "Identity of each GPU nvidia-smi lists; always 1."),
    "vllm_fleet_gpu_utilization_ratio": ("gauge", "Fraction of the last sample period a kernel ran on the GPU."),
    "vllm_fleet_gpu_memory_utilization_ratio": ("gauge", "Fraction of the last sample period device memory was "
                                                "read or written."),
    "vllm_fleet_gpu_memory_used_bytes": ("gauge", "GPU memory in use."),
    "vllm_fleet_gpu_memory_total_bytes": ("gauge", "GPU memory the driver reports as total."),
    "vllm_fleet_gpu_memory_planned_bytes": ("gauge", "GPU memory the kit's plan gives this GPU's scenes."),
    "vllm_fleet_gpu_temperature_celsius": ("gauge", "GPU core temperature."),
    "vllm_fleet_gpu_temperature_limit_celsius": ("gauge", "Highest GPU temperature the kit's hardware registry "
                                                 "allows this card."),
    "vllm_fleet_gpu_power_draw_watts": ("gauge", "Board power draw."),
    "vllm_fleet_gpu_power_limit_watts": ("gauge", "Software power limit."),
    "vllm_fleet_gpu_sm_clock_hertz": ("gauge", "Current SM clock."),
    "vllm_fleet_gpu_memory_clock_hertz": ("gauge", "Current memory clock."),
    "vllm_fleet_gpu_throttled": ("gauge", "1 when this clock event (throttle) reason is active on the GPU."),
    "vllm_fleet_gpu_pcie_link_generation": ("gauge", "Current PCIe link generation (drops when the GPU idles)."),
    "vllm_fleet_gpu_pcie_link_width": ("gauge", "Current PCIe link width in lanes (drops when the GPU idles)."),
    "vllm_fleet_gpu_fan_ratio": ("gauge", "Intended fan speed as a fraction of its maximum (may exceed 1)."),
    "vllm_fleet_drift_verdict": ("gauge", "Verdict of the last vllm-drift check, one-hot over in_sync, drift, error."),
    "vllm_fleet_drift_checked_timestamp_seconds": ("gauge", "When the last vllm-drift check ran."),
    "vllm_fleet_in_sync_record_timestamp_seconds": ("gauge", "When the kit last recorded this host in sync."),
    "vllm_fleet_verification_passed": ("gauge", "1 when the scene's last verification passed."),
    "vllm_fleet_verification_timestamp_seconds": ("gauge", "When the scene was last verified."),
    "vllm_fleet_scene_slo_seconds": ("gauge", "The scene's SLO latency targets."),
    "vllm_fleet_scene_max_num_seqs": ("gauge", "The scene's max_num_seqs (the concurrency it was verified at)."),
    "vllm_fleet_gateway_key_requests_total": ("counter", "HTTP requests of this API user (stick-table http_req_cnt)."),
    "vllm_fleet_gateway_key_client_errors_total": ("counter", "4xx answers to this API user (http_err_cnt)."),
    "vllm_fleet_gateway_key_server_errors_total": ("counter", "Server failures on this API user's requests "
                                                   "(http_fail_cnt)."),
    "vllm_fleet_gateway_key_rate_limited_total": ("counter", "Requests of this API user refused by its rate limit "
                                                  "(gpc0)."),
    "vllm_fleet_gateway_key_in_flight": ("gauge", "This API user's connections open now (conn_cur)."),
    "vllm_fleet_collector_errors": ("gauge", "1 for each source this run could not read."),
    "vllm_fleet_collector_last_run_timestamp_seconds": ("gauge", "When this collector last ran."),
}


class ConfigError(Exception):
    """A configuration or argument the collector cannot run with; the message is the one line it prints."""


@dataclass(frozen=True)
class Config:
    """The collector's configuration; the module docstring describes each key."""

    nvidia_smi: str | None = None
    gpus: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    drift_status_file: str | None = None
    in_sync_file: str | None = None
    verify_dir: str | None = None
    haproxy_socket: str | None = None
    haproxy_table: str = "user_limits"


@dataclass(frozen=True)
class SmiResult:
    """What one nvidia-smi run gave: its exit status (None: it did not run) and output, or why it did not run."""

    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    failure: str | None = None


class Metrics:
    """Samples per family, in the order they were added."""

    def __init__(self) -> None:
        """Start with no sample."""
        self.samples: dict[str, list[tuple[tuple[tuple[str, str], ...], float]]] = {}

    # Positional-only family: "name" is also a label (vllm_fleet_gpu_info's).
    def add(self, family: str, value: float, /, **labels: str) -> None:
        """Add one sample; the family must be one of FAMILIES."""
        if family not in FAMILIES:
            raise KeyError(f"unknown metric family {family}")
        self.samples.setdefault(family, []).append((tuple(labels.items()), float(value)))

    def get(self, family: str, /, **labels: str) -> float | None:
        """Return the value of the sample with exactly these labels, or None."""
        for sample_labels, value in self.samples.get(family, []):
            if dict(sample_labels) == labels:
                return value
        return None


# ---- rendering ------------------------------------------------------------------------------------------------


def escape_label_value(value: str) -> str:
    """Escape a label value for the Prometheus text format (backslash, double quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_value(value: float) -> str:
    """Format a sample value: whole numbers without a fraction, others as Python's shortest repr."""
    if math.isfinite(value) and value.is_integer() and abs(value) < 2**63:
        return str(int(value))
    return repr(value)


def render(metrics: Metrics) -> str:
    """Return the text exposition of every family that has samples, each with its HELP and TYPE lines."""
    lines: list[str] = []
    for name, (kind, help_text) in FAMILIES.items():
        samples = metrics.samples.get(name)
        if not samples:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for labels, value in samples:
            label_text = ",".join(f'{key}="{escape_label_value(val)}"' for key, val in labels)
            lines.append(f"{name}{{{label_text}}} {format_value(value)}" if labels else
                         f"{name} {format_value(value)}")
    return "\n".join(lines) + "\n"


# ---- nvidia-smi ---------------------------------------------------------------------------------------------


def query_args(fields: Sequence[str]) -> list[str]:
    """Return nvidia-smi's arguments for one query of these fields."""
    return [f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


def renamed_fields() -> tuple[str, ...]:
    """Return QUERY_FIELDS with the throttle bitmask under its R535 name."""
    return tuple(THROTTLE_FIELD_RENAMED if f == THROTTLE_FIELD else f for f in QUERY_FIELDS)


def rejects_field(result: SmiResult, name: str) -> bool:
    """Tell whether nvidia-smi refused the query because it does not know this field."""
    return bool(result.returncode) and f'"{name}" is not a valid field to query' in result.stdout + result.stderr


def first_line(text: str) -> str:
    """Return the first non-empty line of text, stripped ('' when none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def failure_reason(result: SmiResult) -> str:
    """Return why an nvidia-smi run failed, in at most REASON_MAX characters."""
    reason = (result.failure or first_line(result.stdout) or first_line(result.stderr)
              or f"nvidia-smi exited {result.returncode} without a message")
    return reason[:REASON_MAX]


def parse_query_gpu(text: str) -> list[dict[str, str]]:
    """Parse `--query-gpu=QUERY_FIELDS --format=csv,noheader,nounits` output: one field -> raw cell map per GPU.

    Raises ValueError for a line without one cell per field or without a numeric index.
    """
    rows: list[dict[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        # Only the name could hold ", " and no NVIDIA product name does; nvidia-smi does not quote cells.
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(QUERY_FIELDS):
            raise ValueError(f"{len(cells)} cells instead of {len(QUERY_FIELDS)}: {line.strip()}")
        if not cells[0].isdigit():
            raise ValueError(f"no GPU index: {line.strip()}")
        rows.append(dict(zip(QUERY_FIELDS, cells, strict=True)))
    return rows


def number(raw: str) -> float | None:
    """Return a cell as a number, or None for what nvidia-smi prints when it has none ([N/A], [Not Supported], ...)."""
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def gpu_metrics(rows: Iterable[Mapping[str, str]], metrics: Metrics) -> None:
    """Add the per-GPU families of parsed query rows; a cell without a number leaves its sample out."""
    # column, family, then multiplier and divisor: dividing percentages by 100 gives 0.57 where * 0.01 gives
    # 0.5700000000000001.
    scaled = (("utilization.gpu", "vllm_fleet_gpu_utilization_ratio", 1, 100),
              ("utilization.memory", "vllm_fleet_gpu_memory_utilization_ratio", 1, 100),
              ("memory.used", "vllm_fleet_gpu_memory_used_bytes", MIB, 1),
              ("memory.total", "vllm_fleet_gpu_memory_total_bytes", MIB, 1),
              ("temperature.gpu", "vllm_fleet_gpu_temperature_celsius", 1, 1),
              ("power.draw", "vllm_fleet_gpu_power_draw_watts", 1, 1),
              ("power.limit", "vllm_fleet_gpu_power_limit_watts", 1, 1),
              ("clocks.sm", "vllm_fleet_gpu_sm_clock_hertz", MHZ, 1),
              ("clocks.mem", "vllm_fleet_gpu_memory_clock_hertz", MHZ, 1),
              ("pcie.link.gen.current", "vllm_fleet_gpu_pcie_link_generation", 1, 1),
              ("pcie.link.width.current", "vllm_fleet_gpu_pcie_link_width", 1, 1),
              ("fan.speed", "vllm_fleet_gpu_fan_ratio", 1, 100))
    for row in rows:
        gpu = row["index"]
        metrics.add("vllm_fleet_gpu_info", 1, gpu=gpu, name=row["name"], uuid=row["uuid"],
                    pci_bus_id=row["pci.bus_id"], driver_version=row["driver_version"])
        for column, name, multiplier, divisor in scaled:
            value = number(row[column])
            if value is not None:
                metrics.add(name, value * multiplier / divisor, gpu=gpu)
        try:
            mask = int(row[THROTTLE_FIELD], 16)
        except ValueError:
            continue
        for reason, bit in THROTTLE_REASONS:
            metrics.add("vllm_fleet_gpu_throttled", 1 if mask & bit else 0, gpu=gpu, reason=reason)


def nvidia_metrics(result: SmiResult, metrics: Metrics) -> None:
    """Add vllm_fleet_nvidia_smi_up, vllm_fleet_gpus and, when the query worked, the per-GPU families."""
    rows: list[dict[str, str]] = []
    reason = ""
    if result.failure is not None or result.returncode != 0:
        reason = failure_reason(result)
    else:
        try:
            rows = parse_query_gpu(result.stdout)
        except ValueError:
            reason = failure_reason(result)
    metrics.add("vllm_fleet_nvidia_smi_up", 0 if reason else 1, reason=reason)
    metrics.add("vllm_fleet_gpus", len(rows))
    gpu_metrics(rows, metrics)


def planned_gpu_metrics(gpus: Mapping[str, Mapping[str, float]], metrics: Metrics) -> None:
    """Add the configured temperature limit and planned memory of each GPU index."""
    for gpu, values in sorted(gpus.items(), key=lambda item: int(item[0])):
        if "temperature_limit_celsius" in values:
            metrics.add("vllm_fleet_gpu_temperature_limit_celsius", values["temperature_limit_celsius"], gpu=gpu)
        if "planned_memory_bytes" in values:
            metrics.add("vllm_fleet_gpu_memory_planned_bytes", values["planned_memory_bytes"], gpu=gpu)


def _kill_group(process: subprocess.Popen[str]) -> None:
    """Kill a process and everything it started in its session."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_command(argv: Sequence[str], timeout_s: float) -> SmiResult:
    """Run a command once, capturing its output; a missing command or a timeout is a failure, not an exception."""
    try:
        # Its own session so a timeout kills whatever it started too: a child left holding the pipes would keep
        # communicate() waiting past the timeout.
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, errors="replace", start_new_session=True)
    except FileNotFoundError:
        return SmiResult(None, failure="nvidia-smi not found")
    except PermissionError:
        return SmiResult(None, failure="nvidia-smi is not executable")
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        try:
            process.communicate(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            # Still not gone: nvidia-smi stuck in the kernel (a GPU fallen off the bus) outlives SIGKILL, or something
            # outside its session holds the pipes. The run reports the timeout rather than wait with it.
            pass
        return SmiResult(None, failure=f"timed out after {timeout_s:g} s")
    return SmiResult(process.returncode, stdout, stderr)


def run_nvidia_smi(command: str, timeout_s: float = NVIDIA_SMI_TIMEOUT_S) -> SmiResult:
    """Query every GPU once; ask again with the renamed throttle field only if nvidia-smi rejects the old name."""
    result = run_command([command, *query_args(QUERY_FIELDS)], timeout_s)
    if not rejects_field(result, THROTTLE_FIELD):
        return result
    # Rows are read by position, so the renamed column still lands under THROTTLE_FIELD.
    return run_command([command, *query_args(renamed_fields())], timeout_s)


# ---- kit state ---------------------------------------------------------------------------------------------


def iso_timestamp(text: Any) -> float:
    """Return the POSIX time of an ISO 8601 date-time with an offset ('Z' allowed); ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"not a date-time: {text!r}")
    # fromisoformat reads 'Z' only from Python 3.11 on; the hosts may run 3.10.
    moment = datetime.datetime.fromisoformat(re.sub(r"[zZ]$", "+00:00", text.strip()))
    if moment.tzinfo is None:
        raise ValueError(f"no UTC offset, so no instant: {text!r}")
    return moment.timestamp()


def finite(value: Any) -> float | None:
    """Return a JSON number as a finite float, or None (booleans are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def drift_metrics(status: Any, metrics: Metrics) -> None:
    """Add the drift verdict and check time of a vllm-drift status document; ValueError for one it cannot read."""
    if not isinstance(status, dict) or status.get("verdict") not in DRIFT_VERDICTS:
        raise ValueError("not a vllm-drift status: no verdict of 'in sync', 'drift' or 'error'")
    checked_at = iso_timestamp(status.get("checked_at"))
    for verdict, label in DRIFT_VERDICTS.items():
        metrics.add("vllm_fleet_drift_verdict", 1 if status["verdict"] == verdict else 0, verdict=label)
    metrics.add("vllm_fleet_drift_checked_timestamp_seconds", checked_at)


def verdict_metrics(scene: str, record: Any, metrics: Metrics) -> None:
    """Add one scene's verification families from its verdict record; ValueError (nothing added) for a bad record."""
    if not isinstance(record, dict) or not isinstance(record.get("passed"), bool):
        raise ValueError("not a verdict record: no boolean 'passed'")
    checked_at = finite(record.get("checked_at"))
    targets = record.get("targets") or {}
    if not isinstance(targets, dict):
        raise ValueError("'targets' is not an object")
    slo = {target: finite(targets.get(f"{target}_ms")) for target in SLO_TARGETS}
    max_num_seqs = finite(record.get("max_num_seqs"))
    metrics.add("vllm_fleet_verification_passed", 1 if record["passed"] else 0, scene=scene)
    if checked_at is not None:
        metrics.add("vllm_fleet_verification_timestamp_seconds", checked_at, scene=scene)
    for target, milliseconds in slo.items():
        if milliseconds is not None:
            metrics.add("vllm_fleet_scene_slo_seconds", milliseconds / 1000, scene=scene, target=target)
    if max_num_seqs is not None:
        metrics.add("vllm_fleet_scene_max_num_seqs", max_num_seqs, scene=scene)


def read_json(path: Path) -> Any:
    """Read a JSON file (OSError, ValueError)."""
    return json.loads(path.read_text(encoding="utf-8"))


def state_metrics(config: Config, metrics: Metrics, errors: list[str]) -> None:
    """Add the drift, in-sync and verification families from the state files that exist; note each unreadable one."""
    if config.drift_status_file:
        path = Path(config.drift_status_file)
        if path.exists():
            try:
                drift_metrics(read_json(path), metrics)
            except (OSError, ValueError):
                errors.append("drift")
    if config.in_sync_file:
        try:
            metrics.add("vllm_fleet_in_sync_record_timestamp_seconds", os.stat(config.in_sync_file).st_mtime)
        except FileNotFoundError:
            pass
        except OSError:
            errors.append("in_sync")
    if config.verify_dir:
        try:
            paths = sorted(Path(config.verify_dir).glob(f"*{VERDICT_SUFFIX}"))
        except OSError:
            paths = []
            errors.append("verify")
        for path in paths:
            # The file name, not the record's 'scene', names the scene: the role writes <scene name>.verdict.json, and
            # a name is unique in its directory, so two records can never produce the same series.
            scene = path.name[:-len(VERDICT_SUFFIX)]
            try:
                verdict_metrics(scene, read_json(path), metrics)
            except (OSError, ValueError):
                errors.append(f"verify:{path.name}")


# ---- HAProxy ------------------------------------------------------------------------------------------------


_HAPROXY_ESCAPES = {" ": " ", "=": "=", "\\": "\\", "t": "\t", "n": "\n", "r": "\r", "e": "\x1b"}


def split_escaped(line: str) -> list[str]:
    """Split a show table entry line on spaces that HAProxy did not escape; escapes stay in the words."""
    words: list[str] = []
    current = ""
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\" and index + 1 < len(line):
            current += line[index:index + 2]
            index += 2
            continue
        if char == " ":
            if current:
                words.append(current)
            current = ""
        else:
            current += char
        index += 1
    if current:
        words.append(current)
    return words


def unescape_key(text: str) -> str:
    """Undo HAProxy's dump_text() escaping of a string key (backslash escapes and \\xNN)."""
    out = ""
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            nxt = text[index + 1]
            if nxt == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", text[index + 2:index + 4]):
                out += chr(int(text[index + 2:index + 4], 16))
                index += 4
                continue
            out += _HAPROXY_ESCAPES.get(nxt, nxt)
            index += 2
            continue
        out += char
        index += 1
    return out


def parse_show_table(text: str) -> dict[str, dict[str, int]]:
    """Parse HAProxy's `show table <name>` answer: key -> {data column: value}; rate columns lose their period.

    The entry's own fields (use, exp, and shard from HAProxy 2.9 on) are not data columns and are left out.

    Raises ValueError when the answer is not a table dump (no such table, insufficient privileges, another error).
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# table:"):
        raise ValueError(first_line(text) or "empty answer")
    if any(line.startswith("# contents not dumped") for line in lines[1:]):
        raise ValueError(lines[1])
    entries: dict[str, dict[str, int]] = {}
    for line in lines[1:]:
        if line.startswith("#"):
            continue
        words = split_escaped(line.strip())
        if not words or not words[0].endswith(":") or len(words) < 2 or not words[1].startswith("key="):
            raise ValueError(f"not a table entry: {line.strip()}")
        columns: dict[str, int] = {}
        for word in words[2:]:
            name, sep, value = word.partition("=")
            if sep and name not in ENTRY_FIELDS and re.fullmatch(r"-?\d+", value):
                columns[re.sub(r"\(\d+\)$", "", name)] = int(value)
        entries[unescape_key(words[1][len("key="):])] = columns
    return entries


def gateway_metrics(entries: Mapping[str, Mapping[str, int]], metrics: Metrics) -> None:
    """Add the per-user gateway families for the columns each stick-table row has."""
    for column, family in GATEWAY_COLUMNS.items():
        for user in sorted(entries):
            if column in entries[user]:
                metrics.add(family, entries[user][column], user=user)


def show_table(socket_path: str, table: str, timeout_s: float = HAPROXY_TIMEOUT_S) -> str:
    """Send `show table <table>` to an HAProxy admin socket and return its whole answer (OSError on failure)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(socket_path)
        sock.sendall(f"show table {table}\n".encode())
        chunks: list[bytes] = []
        # Without "prompt" HAProxy closes the connection after one answer, so the answer ends at EOF.
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


# ---- configuration, collection, output ----------------------------------------------------------------------


def _optional_str(raw: Mapping[str, Any], key: str) -> str | None:
    """Return a config key that is a non-empty string or null/absent (None); ConfigError otherwise."""
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key} must be a non-empty string or null, not {value!r}")
    return value


def parse_config(raw: Any) -> Config:
    """Check a parsed configuration document and return it as a Config; ConfigError names the first fault."""
    if not isinstance(raw, dict):
        raise ConfigError("the configuration must be a JSON object")
    unknown = sorted(set(raw) - CONFIG_KEYS)
    if unknown:
        raise ConfigError(f"unknown configuration keys {unknown}; known: {sorted(CONFIG_KEYS)}")
    gpus_raw = raw.get("gpus") or {}
    if not isinstance(gpus_raw, dict):
        raise ConfigError("gpus must be an object of nvidia-smi index -> {temperature_limit_celsius, "
                          "planned_memory_bytes}")
    gpus: dict[str, dict[str, float]] = {}
    for index, values in gpus_raw.items():
        if not (isinstance(index, str) and index.isdigit()) or not isinstance(values, dict):
            raise ConfigError(f"gpus[{index!r}] must be an nvidia-smi index with an object of values")
        extra = sorted(set(values) - GPU_CONFIG_KEYS)
        if extra:
            raise ConfigError(f"gpus[{index!r}]: unknown keys {extra}; known: {sorted(GPU_CONFIG_KEYS)}")
        numbers = {key: finite(value) for key, value in values.items() if value is not None}
        bad = sorted(key for key, value in numbers.items() if value is None or value < 0)
        if bad:
            raise ConfigError(f"gpus[{index!r}]: {bad} must be non-negative numbers")
        gpus[str(int(index))] = {key: value for key, value in numbers.items() if value is not None}
    table = _optional_str(raw, "haproxy_table") or "user_limits"
    if not re.fullmatch(r"[A-Za-z0-9_.:-]+", table):
        raise ConfigError(f"haproxy_table {table!r} is not a table name")
    return Config(nvidia_smi=_optional_str(raw, "nvidia_smi"), gpus=gpus,
                  drift_status_file=_optional_str(raw, "drift_status_file"),
                  in_sync_file=_optional_str(raw, "in_sync_file"), verify_dir=_optional_str(raw, "verify_dir"),
                  haproxy_socket=_optional_str(raw, "haproxy_socket"), haproxy_table=table)


def load_config(path: str) -> Config:
    """Read and check the configuration file; ConfigError when it cannot be read or is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration {path}: {exc.strerror or exc}") from exc
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"the configuration {path} is not JSON: {exc}") from exc
    return parse_config(raw)


def collect(config: Config, now: float) -> Metrics:
    """Gather every family for one run (runs nvidia-smi, reads the state files, asks HAProxy)."""
    metrics = Metrics()
    errors: list[str] = []
    if config.nvidia_smi:
        nvidia_metrics(run_nvidia_smi(config.nvidia_smi), metrics)
    else:
        metrics.add("vllm_fleet_gpus", 0)
    planned_gpu_metrics(config.gpus, metrics)
    state_metrics(config, metrics, errors)
    if config.haproxy_socket:
        try:
            gateway_metrics(parse_show_table(show_table(config.haproxy_socket, config.haproxy_table)), metrics)
        except (OSError, ValueError):
            errors.append("haproxy")
    for source in errors:
        metrics.add("vllm_fleet_collector_errors", 1, source=source)
    metrics.add("vllm_fleet_collector_last_run_timestamp_seconds", now)
    return metrics


def write_atomically(path: Path, text: str) -> None:
    """Replace path with text in one rename, mode 0644, so a reader sees the old file or the new one, never half."""
    # The temporary name must not end in .prom: node_exporter reads every *.prom file in the directory.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class _Parser(argparse.ArgumentParser):
    """An argument parser that reports a bad command line in one line, as the collector reports a bad config."""

    def error(self, message: str) -> NoReturn:
        """Print one line and exit 2."""
        print(f"host_metrics: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv: Sequence[str] | None = None) -> int:
    """Collect once and write the out file; return the exit status."""
    parser = _Parser(prog="host_metrics", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", required=True, help="JSON configuration file")
    parser.add_argument("--out", required=True, help="the .prom file to replace")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"host_metrics: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        write_atomically(out, render(collect(config, time.time())))
    except OSError as exc:
        print(f"host_metrics: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
