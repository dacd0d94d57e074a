"""Scene readiness: unit states, crash reasons from real vLLM journals, the wait loop, and the module against real HTTP."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest
from ansible.module_utils.testing import patch_module_args

from conftest import REPO, load_as


ready = load_as("ansible.module_utils.vllm_fleet_ready", REPO / "plugins" / "module_utils" / "vllm_fleet_ready.py")
ready_module = load_as("ansible.modules.vllm_fleet_scene_ready", REPO / "plugins" / "modules" / "scene_ready.py")

UNIT = "vllm-scene-chat.service"
FIRST_RUN = "4f1c0ddc2b6a4f0e9b0a4d7cbe0f7c11"
SECOND_RUN = "9a0e61d5c3a84b3f8e9d2f1a0b7c6d54"

# `systemctl show -p LoadState,ActiveState,SubState,Result,InvocationID,NRestarts,ExecMainStatus` prints the properties
# in systemd's own order, not the order asked for.
SHOW_RUNNING = f"""Result=success
NRestarts=0
ExecMainStatus=0
LoadState=loaded
ActiveState=active
SubState=running
InvocationID={FIRST_RUN}
"""
SHOW_AUTO_RESTART = f"""Result=exit-code
NRestarts=0
ExecMainStatus=1
LoadState=loaded
ActiveState=activating
SubState=auto-restart
InvocationID={FIRST_RUN}
"""
SHOW_RESTARTED = SHOW_RUNNING.replace("NRestarts=0", "NRestarts=1").replace(FIRST_RUN, SECOND_RUN)
SHOW_START_LIMIT = f"""Result=start-limit-hit
NRestarts=4
ExecMainStatus=1
LoadState=loaded
ActiveState=failed
SubState=failed
InvocationID={SECOND_RUN}
"""
SHOW_STOPPING_AFTER_FAILURE = SHOW_AUTO_RESTART.replace("SubState=auto-restart", "SubState=stop-sigterm").replace(
    "ActiveState=activating", "ActiveState=deactivating")
SHOW_NEVER_STARTED = """Result=success
NRestarts=0
ExecMainStatus=0
LoadState=loaded
ActiveState=inactive
SubState=dead
InvocationID=
"""
SHOW_UNKNOWN_UNIT = SHOW_NEVER_STARTED.replace("LoadState=loaded", "LoadState=not-found")

SITE = "/opt/vllm/releases/0.6.3/lib/python3.11/site-packages"
MAX_LEN_ERROR = ("User-specified max_model_len (8192) is greater than the derived max_model_len "
                 "(max_position_embeddings=2048 or model_max_length=None in model's config.json). This may lead to "
                 "incorrect model outputs or CUDA errors. To allow overriding this maximum, set the env var "
                 "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
# journalctl _SYSTEMD_INVOCATION_ID=... -o cat of a vLLM 0.6 scene started with max_model_len above the model's.
JOURNAL_VALUE_ERROR = f"""INFO 05-12 10:11:02 api_server.py:528] vLLM API server version 0.6.3.post1
INFO 05-12 10:11:02 api_server.py:529] args: Namespace(subparser='serve', model_tag=None, config='/etc/vllm-fleet/chat.yaml', host='127.0.0.1', port=8000, model='/var/lib/vllm/models/tiny-llama', max_model_len=8192, gpu_memory_utilization=0.9)
INFO 05-12 10:11:02 api_server.py:166] Multiprocessing frontend to use ipc:///run/vllm-scene-chat/c1d2 for IPC Path.
INFO 05-12 10:11:02 api_server.py:179] Started engine process with PID 4321
Traceback (most recent call last):
  File "/opt/vllm/releases/0.6.3/bin/vllm", line 8, in <module>
    sys.exit(main())
             ^^^^^^
  File "{SITE}/vllm/scripts.py", line 195, in main
    args.dispatch_function(args)
  File "{SITE}/vllm/scripts.py", line 41, in serve
    uvloop.run(run_server(args))
  File "{SITE}/uvloop/__init__.py", line 105, in run
    return runner.run(wrapper())
  File "{SITE}/vllm/entrypoints/openai/api_server.py", line 552, in run_server
    async with build_async_engine_client(args) as engine_client:
  File "{SITE}/vllm/engine/arg_utils.py", line 911, in create_engine_config
    model_config = self.create_model_config()
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/vllm/engine/arg_utils.py", line 846, in create_model_config
    return ModelConfig(
           ^^^^^^^^^^^^
  File "{SITE}/vllm/config.py", line 227, in __init__
    self.max_model_len = _get_and_verify_max_len(
                         ^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/vllm/config.py", line 1870, in _get_and_verify_max_len
    raise ValueError(
ValueError: {MAX_LEN_ERROR}
""".splitlines()  # noqa: E501 (journal lines are as long as vLLM prints them)

# The same mistake on a current vLLM: process tags, and pydantic wrapping the ValueError of ModelConfig.
JOURNAL_PYDANTIC = f"""(APIServer pid=4242) INFO 05-12 10:11:02 [api_server.py:1805] vLLM API server version 0.11.0
(APIServer pid=4242) INFO 05-12 10:11:02 [utils.py:233] non-default args: {{'model': '/var/lib/vllm/models/tiny-llama', 'max_model_len': 8192}}
(APIServer pid=4242) Traceback (most recent call last):
(APIServer pid=4242)   File "/opt/vllm/releases/0.11.0/bin/vllm", line 10, in <module>
(APIServer pid=4242)     sys.exit(main())
(APIServer pid=4242)   File "{SITE}/vllm/engine/arg_utils.py", line 1032, in create_model_config
(APIServer pid=4242)     return ModelConfig(
(APIServer pid=4242)   File "{SITE}/pydantic/_internal/_dataclasses.py", line 123, in __init__
(APIServer pid=4242)     s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)
(APIServer pid=4242) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
(APIServer pid=4242)   Value error, {MAX_LEN_ERROR}. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. [type=value_error, input_value=ArgsKwargs((), {{'model': ...rocessor_plugin': None}}), input_type=ArgsKwargs]
(APIServer pid=4242)     For further information visit https://errors.pydantic.dev/2.11/v/value_error
""".splitlines()  # noqa: E501

KV_ERROR = ("ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is "
            "needed, which is larger than the available KV cache memory (1.53 GiB). Based on the available memory, "
            "the estimated maximum model length is 12512. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine.")
# The engine core dies first; the API server then prints its own traceback that only points back at it.
JOURNAL_ENGINE_CORE = f"""(EngineCore_DP0 pid=4321) ERROR 05-12 10:12:40 [core.py:708] EngineCore failed to start.
(EngineCore_DP0 pid=4321) ERROR 05-12 10:12:40 [core.py:708] Traceback (most recent call last):
(EngineCore_DP0 pid=4321) ERROR 05-12 10:12:40 [core.py:708]   File "{SITE}/vllm/v1/engine/core.py", line 699, in run_engine_core
(EngineCore_DP0 pid=4321) ERROR 05-12 10:12:40 [core.py:708]     raise ValueError(
(EngineCore_DP0 pid=4321) ERROR 05-12 10:12:40 [core.py:708] {KV_ERROR}
(EngineCore_DP0 pid=4321) Process EngineCore_DP0:
(APIServer pid=4242) Traceback (most recent call last):
(APIServer pid=4242)   File "{SITE}/vllm/v1/engine/utils.py", line 878, in wait_for_engine_startup
(APIServer pid=4242)     raise RuntimeError(
(APIServer pid=4242) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{}}
""".splitlines()  # noqa: E501


# --- systemctl show ---------------------------------------------------------------------------------------------------


def test_systemctl_show_parses_to_properties() -> None:
    """Every KEY=VALUE line becomes a property; an empty value stays empty and '=' inside a value is kept."""
    assert ready.parse_systemctl_show(SHOW_AUTO_RESTART) == {
        "Result": "exit-code", "NRestarts": "0", "ExecMainStatus": "1", "LoadState": "loaded",
        "ActiveState": "activating", "SubState": "auto-restart", "InvocationID": FIRST_RUN}
    assert ready.parse_systemctl_show(SHOW_NEVER_STARTED)["InvocationID"] == ""
    assert ready.parse_systemctl_show("\nExecStart={ path=/bin/vllm ; argv[]=/bin/vllm serve }\n\n") == {
        "ExecStart": "{ path=/bin/vllm ; argv[]=/bin/vllm serve }"}


@pytest.mark.parametrize(("show", "baseline", "reason"), [
    (SHOW_RUNNING, FIRST_RUN, None),
    (SHOW_RUNNING, None, None),
    (SHOW_RUNNING.replace("ActiveState=active", "ActiveState=activating").replace("SubState=running", "SubState=start"),
     FIRST_RUN, None),
    (SHOW_AUTO_RESTART, FIRST_RUN, "the main process exited (Result=exit-code) and systemd is waiting to restart it"),
    (SHOW_START_LIMIT, FIRST_RUN, "the unit failed (Result=start-limit-hit)"),
    (SHOW_STOPPING_AFTER_FAILURE, FIRST_RUN,
     "the main process exited (Result=exit-code) and systemd is stopping what is left of the unit"),
    (SHOW_STOPPING_AFTER_FAILURE.replace("Result=exit-code", "Result=success"), FIRST_RUN, None),
    (SHOW_RESTARTED, FIRST_RUN, "the unit restarted during the wait (its InvocationID changed)"),
    (SHOW_NEVER_STARTED, None,
     "the unit is not running (inactive/dead): it was never started, or it stopped or exited"),
    (SHOW_UNKNOWN_UNIT, None, "systemd has no such unit (LoadState=not-found)"),
])
def test_crash_reason_of_each_unit_state(show: str, baseline: Optional[str], reason: Optional[str]) -> None:
    """Running or starting units may still come up; failed, restarting, restarted, stopped or unknown ones crashed."""
    assert ready.crash_reason(ready.parse_systemctl_show(show), baseline) == reason


def test_unit_summary_names_the_telling_properties() -> None:
    """The summary leaves out the invocation and empty values."""
    assert ready.unit_summary(ready.parse_systemctl_show(SHOW_AUTO_RESTART)) == (
        "ActiveState=activating SubState=auto-restart Result=exit-code ExecMainStatus=1 NRestarts=0")


@pytest.mark.parametrize(("show", "seen", "expected"), [
    (SHOW_AUTO_RESTART, [FIRST_RUN], [FIRST_RUN]),
    (SHOW_RESTARTED, [FIRST_RUN, SECOND_RUN], [FIRST_RUN, SECOND_RUN]),
    (SHOW_START_LIMIT, [FIRST_RUN, SECOND_RUN], [SECOND_RUN, FIRST_RUN]),
    (SHOW_NEVER_STARTED, [], []),
])
def test_the_invocation_that_died_is_read_first(show: str, seen: List[str], expected: List[str]) -> None:
    """A restarting or failed unit's current invocation died; after a restart the one before it did."""
    assert ready.crashed_invocations(ready.parse_systemctl_show(show), seen) == expected


# --- the reason in the journal ----------------------------------------------------------------------------------------


def test_value_error_beats_the_traceback_frames() -> None:
    """vLLM 0.6's max_model_len crash: the ValueError line, not `raise ValueError(` or a frame."""
    assert ready.reason_line(JOURNAL_VALUE_ERROR) == f"ValueError: {MAX_LEN_ERROR}"


def test_pydantic_detail_beats_its_validation_error_line() -> None:
    """Current vLLM: pydantic's 'Value error, ...' detail, without the process tag and the [type=...] tail."""
    assert ready.reason_line(JOURNAL_PYDANTIC) == (
        f"Value error, {MAX_LEN_ERROR}. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution.")


def test_root_cause_beats_a_wrapper_that_points_above() -> None:
    """The engine core's ValueError wins over the API server's 'See root cause above' RuntimeError after it."""
    assert ready.reason_line(JOURNAL_ENGINE_CORE) == KV_ERROR
    wrapper_only = JOURNAL_ENGINE_CORE[-4:]
    assert ready.reason_line(wrapper_only) == (
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")


@pytest.mark.parametrize(("lines", "reason"), [
    (["usage: vllm serve [model_tag] [options]",
      "vllm serve: error: argument --max-model-len: invalid human_readable_int value: 'lots'"],
     "vllm serve: error: argument --max-model-len: invalid human_readable_int value: 'lots'"),
    (["(EngineCore_DP0 pid=77) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."],
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
    (["Started vllm-scene-chat.service - vLLM scene chat.",
      "vllm-scene-chat.service: Main process exited, code=exited, status=1/FAILURE",
      "vllm-scene-chat.service: Failed with result 'exit-code'."],
     "vllm-scene-chat.service: Failed with result 'exit-code'."),
    (["INFO 05-12 10:11:02 api_server.py:528] vLLM API server version 0.6.3.post1", "Killed"], None),
    ([], None),
])
def test_reason_line_of_other_endings(lines: List[str], reason: Optional[str]) -> None:
    """argparse errors and CUDA OOM are stated errors; systemd's own lines are a last resort; no error gives None."""
    assert ready.reason_line(lines) == reason


def test_pick_journal_takes_the_first_reading_that_names_an_error() -> None:
    """An empty invocation journal falls through to the next; the reading is cut to its last lines, read lazily."""
    read: List[str] = []

    def readings() -> Iterator[List[str]]:
        """Journal readings that record which were taken."""
        for name, lines in (("first", []), ("second", JOURNAL_VALUE_ERROR), ("unit", ["never read"])):
            read.append(name)
            yield lines

    journal, reason = ready.pick_journal(readings(), 3)
    assert (journal, reason) == (JOURNAL_VALUE_ERROR[-3:], f"ValueError: {MAX_LEN_ERROR}")
    assert read == ["first", "second"]
    assert ready.pick_journal(iter([[], ["Killed", "x"], ["y"]]), 20) == (["Killed", "x"], None)
    assert ready.pick_journal(iter([JOURNAL_VALUE_ERROR]), 0) == ([], f"ValueError: {MAX_LEN_ERROR}")


# --- the wait loop, with a fake clock ---------------------------------------------------------------------------------


class FakeHost:
    """A clock, sleep, health probe and systemctl that play out scripted scene states poll by poll."""

    def __init__(self, health: Dict[str, Sequence[bool]], units: Dict[str, Sequence[str]]) -> None:
        """Per URL the /health answers, per unit the `systemctl show` texts, one per poll (the last repeats)."""
        self.now = 1000.0
        self.health = health
        self.units = units
        self.calls: List[str] = []
        self.slept: List[float] = []
        self.journal_asked: List[List[str]] = []

    def clock(self) -> float:
        """Monotonic seconds."""
        return self.now

    def sleep(self, seconds: float) -> None:
        """Let time pass."""
        self.slept.append(seconds)
        self.now += seconds

    def _next(self, script: Sequence[Any], key: str) -> Any:
        """The scripted answer for this poll of key."""
        polls = self.calls.count(key)
        self.calls.append(key)
        return script[min(polls, len(script) - 1)]

    def probe(self, url: str) -> Tuple[bool, str]:
        """A /health answer; each takes a tenth of a second."""
        self.now += 0.1
        healthy = self._next(self.health[url], url)
        return healthy, "HTTP 200" if healthy else "connection refused"

    def read_unit(self, unit: str) -> Dict[str, str]:
        """A `systemctl show` reading."""
        return ready.parse_systemctl_show(self._next(self.units[unit], unit))

    def read_journal(self, selector: List[str]) -> List[str]:
        """The crashed invocation's journal; other invocations and the unit journal have nothing telling."""
        self.journal_asked.append(selector)
        return JOURNAL_VALUE_ERROR if selector == [f"_SYSTEMD_INVOCATION_ID={FIRST_RUN}"] else ["Started it."]


def scene(name: str, port: int, unit: str = "") -> Dict[str, Any]:
    """A scene argument as the role passes it."""
    return {"name": name, "url": f"http://127.0.0.1:{port}", "unit": unit}


def params(scenes: List[Dict[str, Any]], **overrides: Any) -> Dict[str, Any]:
    """The module's parameters with its defaults."""
    return {"scenes": scenes, "timeout": 900, "interval": 2.0, "systemd": True, "journal_lines": 20, **overrides}


def run_fake(host: FakeHost, **overrides: Any) -> Dict[str, Any]:
    """The module's result for two scenes, chat (port 8000, unit) and embed (port 8001, unit), on the fake host."""
    scenes = [scene("chat", 8000, UNIT), scene("embed", 8001, "vllm-scene-embed.service")]
    return ready_module.run(params(scenes, **overrides), host.probe, host.read_unit, host.read_journal,
                            host.clock, host.sleep)


def test_scenes_are_polled_together_until_all_are_ready() -> None:
    """Both scenes are asked each round; each reports the seconds until its own first 200, the result changes nothing."""
    host = FakeHost({"http://127.0.0.1:8000/health": [False, False, False, True],
                     "http://127.0.0.1:8001/health": [False, True]},
                    {UNIT: [SHOW_RUNNING], "vllm-scene-embed.service": [SHOW_RUNNING.replace(FIRST_RUN, SECOND_RUN)]})
    result = run_fake(host)
    assert [c for c in host.calls if c.endswith("/health")] == [
        "http://127.0.0.1:8000/health", "http://127.0.0.1:8001/health"] * 2 + ["http://127.0.0.1:8000/health"] * 2
    assert result == {"changed": False, "msg": "2 scenes ready in 6.6 s", "seconds": 6.6,
                      "scenes": [{"name": "chat", "seconds": 6.6}, {"name": "embed", "seconds": 2.4}]}
    assert host.slept == [2.0, 2.0, 2.0]


def test_a_crash_fails_at_once_with_the_journal_reason() -> None:
    """chat's vLLM exits at startup: the second poll sees auto-restart and fails 2 s in, not at the 900 s timeout."""
    host = FakeHost({"http://127.0.0.1:8000/health": [False], "http://127.0.0.1:8001/health": [True]},
                    {UNIT: [SHOW_RUNNING, SHOW_AUTO_RESTART], "vllm-scene-embed.service": [SHOW_RUNNING]})
    result = run_fake(host, journal_lines=2)
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"] == (
        f"scene 'chat' ({UNIT}) crashed 2 s into the wait: the main process exited (Result=exit-code) and systemd is "
        "waiting to restart it [ActiveState=activating SubState=auto-restart Result=exit-code ExecMainStatus=1 "
        f"NRestarts=0]; journal: ValueError: {MAX_LEN_ERROR}")
    assert (result["scene"], result["unit"], result["state"]["SubState"]) == ("chat", UNIT, "auto-restart")
    assert result["journal"] == JOURNAL_VALUE_ERROR[-2:]
    assert result["journal_reason"] == f"ValueError: {MAX_LEN_ERROR}"
    assert result["scenes"] == [{"name": "embed", "seconds": 0.2}]
    assert host.slept == [2.0]
    assert host.journal_asked == [[f"_SYSTEMD_INVOCATION_ID={FIRST_RUN}"]]


def test_a_missed_restart_is_caught_by_the_new_invocation() -> None:
    """Polls that miss the auto-restart window still see the new InvocationID; the old invocation's journal is read."""
    host = FakeHost({"http://127.0.0.1:8000/health": [False], "http://127.0.0.1:8001/health": [False]},
                    {UNIT: [SHOW_RUNNING, SHOW_RUNNING, SHOW_RESTARTED], "vllm-scene-embed.service": [SHOW_RUNNING]})
    result = run_fake(host)
    assert result["reason"] == "the unit restarted during the wait (its InvocationID changed)"
    assert result["journal_reason"] == f"ValueError: {MAX_LEN_ERROR}"
    assert host.journal_asked == [[f"_SYSTEMD_INVOCATION_ID={FIRST_RUN}"]]


def test_start_limit_falls_back_to_earlier_invocations_then_the_unit() -> None:
    """A unit that hit its start limit: its own invocation has no output, so the earlier one is read."""
    host = FakeHost({"http://127.0.0.1:8000/health": [False], "http://127.0.0.1:8001/health": [False]},
                    {UNIT: [SHOW_RUNNING, SHOW_START_LIMIT], "vllm-scene-embed.service": [SHOW_RUNNING]})
    result = run_fake(host)
    assert result["reason"] == "the unit failed (Result=start-limit-hit)"
    assert host.journal_asked == [[f"_SYSTEMD_INVOCATION_ID={SECOND_RUN}"], [f"_SYSTEMD_INVOCATION_ID={FIRST_RUN}"]]


def test_a_scene_never_started_fails_on_the_first_poll() -> None:
    """An inactive unit is not waited for; with no invocation at all, the unit's journal is what is left."""
    host = FakeHost({"http://127.0.0.1:8000/health": [False], "http://127.0.0.1:8001/health": [False]},
                    {UNIT: [SHOW_NEVER_STARTED], "vllm-scene-embed.service": [SHOW_RUNNING]})
    result = run_fake(host)
    assert result["failed"] and result["seconds"] == 0.0 and host.slept == []
    assert host.journal_asked == [["-u", UNIT]]
    assert result["journal"] == ["Started it."] and result["journal_reason"] is None
    assert result["msg"].endswith("; the journal names no error; see `journal`")


def test_timeout_names_the_scenes_not_ready_and_their_state() -> None:
    """Nothing crashed but chat never answered: the wait ends at the timeout, the last sleep cut to what is left."""
    host = FakeHost({"http://127.0.0.1:8000/health": [False], "http://127.0.0.1:8001/health": [True]},
                    {UNIT: [SHOW_RUNNING], "vllm-scene-embed.service": [SHOW_RUNNING]})
    result = run_fake(host, timeout=5)
    assert result["msg"] == (f"1 of 2 scenes not ready after 5 s: 'chat' ({UNIT} ActiveState=active SubState=running "
                             "Result=success ExecMainStatus=0 NRestarts=0; GET /health: connection refused)")
    assert result["pending"] == [{"name": "chat", "unit": UNIT, "state": ready.parse_systemctl_show(SHOW_RUNNING),
                                  "health": "connection refused"}]
    assert result["scenes"] == [{"name": "embed", "seconds": 0.2}]
    # The last sleep ends at the deadline, and one more poll gives chat its last chance before the failure.
    assert host.slept == pytest.approx([2.0, 2.0, 0.6])
    assert host.calls.count("http://127.0.0.1:8000/health") == 4


def test_without_systemd_units_are_never_read() -> None:
    """systemd false: a unit named anyway is ignored, only /health counts."""
    host = FakeHost({"http://127.0.0.1:8000/health": [False, True], "http://127.0.0.1:8001/health": [True]}, {})
    assert run_fake(host, systemd=False)["scenes"] == [{"name": "chat", "seconds": 2.3}, {"name": "embed", "seconds": 0.2}]
    assert all(c.endswith("/health") for c in host.calls)


def test_a_host_whose_systemctl_cannot_answer_fails_with_a_hint() -> None:
    """systemctl failing (no systemd as PID 1) is a failure that says how to wait without it."""
    def broken(unit: str) -> Dict[str, str]:
        """systemctl on a container without systemd."""
        raise ready.UnitReadError(f"systemctl show {unit} exited 1: System has not been booted with systemd")

    result = ready_module.run(params([scene("chat", 8000, UNIT)]), lambda url: (False, "x"), broken, lambda s: [])
    assert result["failed"] and result["msg"].endswith("set systemd: false on a host without systemd")


@pytest.mark.parametrize(("scenes", "overrides", "problem"), [
    ([scene("a", 1), scene("a", 2)], {}, "scene names must be unique; repeated: a"),
    ([{"name": "a", "url": "127.0.0.1:8000", "unit": ""}], {}, "scene url must be an http:// or https:// base URL"),
    ([scene("a", 1)], {"interval": 0}, "timeout and journal_lines must be >= 0 and interval > 0"),
])
def test_bad_arguments_fail_before_waiting(scenes: List[Dict[str, Any]], overrides: Dict[str, Any], problem: str) -> None:
    """Duplicate names, a URL without scheme and a zero interval are refused."""
    result = ready_module.run(params(scenes, **overrides), lambda url: (True, ""), None, lambda s: [])
    assert result["failed"] and result["msg"].startswith(problem)


# --- the module against a real HTTP server ----------------------------------------------------------------------------


class Health(http.server.BaseHTTPRequestHandler):
    """/health answers 503 for the first `starting` requests (vLLM loading), then 200; other paths 404."""

    starting = 0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        """Answer one request."""
        if self.path != "/health":
            self.send_response(404)
        elif Health.starting > 0:
            Health.starting -= 1
            self.send_response(503)
        else:
            self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        """Keep the test output quiet."""


@pytest.fixture
def server() -> Iterator[int]:
    """A /health server on a free port of 127.0.0.1, in a thread; yields the port."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def free_port() -> int:
    """A port on 127.0.0.1 where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_main(capsys: pytest.CaptureFixture[str], **args: Any) -> Dict[str, Any]:
    """Run the module's main() as Ansible would and return its JSON result."""
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        ready_module.main()
    result = json.loads(capsys.readouterr().out)
    assert exit_info.value.code == (1 if result.get("failed") else 0)
    return result


def test_real_server_ready_after_it_stops_answering_503(server: int, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two 503s while loading, then 200: ready, through a proxy setting that must not be used for the local scene."""
    Health.starting = 2
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{free_port()}")
    result = run_main(capsys, scenes=[scene("chat", server)], systemd=False, interval=0.05, timeout=30)
    assert result["changed"] is False and "failed" not in result
    assert [s["name"] for s in result["scenes"]] == ["chat"] and 0.1 <= result["scenes"][0]["seconds"] < 10
    assert Health.starting == 0


def test_real_server_timeout_names_refused_and_unready_scenes(server: int, capsys: pytest.CaptureFixture[str]) -> None:
    """One scene keeps answering 503, one port refuses: the short timeout fails naming both, the ready one is kept."""
    Health.starting = 10**6
    refused = free_port()
    result = run_main(capsys, scenes=[scene("loading", server), scene("down", refused)], systemd=False,
                      interval=0.1, timeout=1)
    Health.starting = 0
    assert result["failed"] is True and 1 <= result["seconds"] < 10
    assert result["msg"].startswith("2 of 2 scenes not ready after 1 s: 'loading' (GET /health: HTTP 503), 'down' (GET ")
    assert "refused" in result["pending"][1]["health"].lower()
    assert [p["state"] for p in result["pending"]] == [None, None]


def test_check_mode_waits_for_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """Check mode started nothing, so it returns at once, skipped and unchanged, without asking any scene."""
    result = run_main(capsys, scenes=[scene("chat", free_port(), UNIT)], _ansible_check_mode=True)
    assert result["skipped"] is True and result["changed"] is False and result["scenes"] == []
