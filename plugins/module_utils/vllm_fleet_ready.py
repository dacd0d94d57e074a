"""Pure logic of the vllm.fleet.scene_ready module: judge systemd unit states, pick a crash's reason, run the wait loop.

Ansible ships this file to the managed host with the module, so it is stdlib only and runs on Python 3.8+.
The wait loop takes its clock, sleep and probes as arguments, so every decision here runs without a host.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, TypedDict

# LoadState is asked for too: it is what tells a unit name that systemd does not know from a unit that is stopped.
UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "InvocationID", "NRestarts", "ExecMainStatus")
SUMMARY_PROPERTIES = ("ActiveState", "SubState", "Result", "ExecMainStatus", "NRestarts")
# Lines read from a crashed invocation's journal to find the reason; vLLM prints a second traceback (the API server's
# "Engine core initialization failed") after the root cause, so the last few lines alone can miss it.
REASON_SCAN_LINES = 200

# Prefixes vLLM puts before the message: the process tag ("(APIServer pid=4242) ", "(EngineCore_DP0 pid=4321) ")
# and its log header ("ERROR 05-12 10:11:12 [core.py:700] ").
PROCESS_TAG = re.compile(r"^\([\w.-]+ pid=\d+\) ?")
LOG_HEADER = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?")
# The last line of a Python traceback: "ValueError: ...", "torch.OutOfMemoryError: ...", "KeyboardInterrupt".
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::\s.*|:)?$")
# pydantic wraps a ValueError raised in a config's __post_init__; the readable cause is the detail line below
# "ValidationError: 1 validation error for ModelConfig", and its "[type=..., input_value=...]" tail is noise.
PYDANTIC_DETAIL = re.compile(r"^\s*((?:Value error|Assertion failed), .*?)(?:\s+\[type=.*)?$")
# argparse: "vllm serve: error: argument --max-model-len: invalid ...".
ARGPARSE_ERROR = re.compile(r"^[\w .-]+: error: .+$")
# A wrapper that only points at the real cause printed earlier, such as vLLM's
# "RuntimeError: Engine core initialization failed. See root cause above."
POINTS_ABOVE = re.compile(r"see (?:the )?(?:root cause |error |logs? |stack ?trace )?above", re.IGNORECASE)
ANY_ERROR = re.compile(r"error|exception|fatal|fail(?:ed|ure)", re.IGNORECASE)
TRACEBACK_NOISE = re.compile(r"^(?:Traceback \(most recent call last\)|During handling of the above exception"
                             r"|The above exception was the direct cause)")


class UnitReadError(RuntimeError):
    """`systemctl show` could not report a unit (no systemd on the host, no D-Bus, no permission)."""


class SceneSpec(TypedDict):
    """One scene to wait for: its name, base URL and systemd unit ("" when there is none)."""

    name: str
    url: str
    unit: str


class ReadyScene(TypedDict):
    """A scene that answered GET /health with 200, and how many seconds into the wait it did."""

    name: str
    seconds: float


class Crash(NamedTuple):
    """A scene whose unit crashed: its state, why it counts as crashed, and the invocations whose journal tells why."""

    scene: str
    unit: str
    state: Dict[str, str]
    reason: str
    seconds: float
    invocations: List[str]


class Pending(NamedTuple):
    """A scene not ready when the wait ended, with its last unit state (None without systemd) and health answer."""

    scene: str
    unit: str
    state: Optional[Dict[str, str]]
    health: str


class WaitOutcome(NamedTuple):
    """How the wait ended: ready scenes, plus the crash that stopped it or the scenes still pending at the timeout."""

    ready: List[ReadyScene]
    crash: Optional[Crash]
    pending: List[Pending]
    seconds: float


HealthProbe = Callable[[str], Tuple[bool, str]]
UnitReader = Callable[[str], Dict[str, str]]


@dataclass
class _Watch:
    """What the loop remembers of one scene: the invocations of its unit in the order they were seen."""

    spec: SceneSpec
    invocations: List[str] = field(default_factory=list)
    state: Optional[Dict[str, str]] = None
    health: str = "not asked yet"

    def see(self, state: Dict[str, str]) -> None:
        """Record a `systemctl show` reading."""
        self.state = state
        invocation = state.get("InvocationID", "")
        if invocation and invocation not in self.invocations:
            self.invocations.append(invocation)


def parse_systemctl_show(text: str) -> Dict[str, str]:
    """The properties in `systemctl show -p ...` output (KEY=VALUE lines; values may contain '=')."""
    properties = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            properties[key.strip()] = value.strip()
    return properties


def health_url(base_url: str) -> str:
    """The /health URL of a scene's base URL."""
    return base_url.rstrip("/") + "/health"


def unit_summary(state: Dict[str, str]) -> str:
    """The unit's state in one line, the properties that tell a crash, e.g. 'ActiveState=failed SubState=failed ...'."""
    return " ".join(f"{key}={state[key]}" for key in SUMMARY_PROPERTIES if state.get(key, "") != "")


def crash_reason(state: Dict[str, str], baseline: Optional[str]) -> Optional[str]:
    """Why the unit counts as crashed, None while it may still come up; baseline is the first InvocationID seen."""
    active, sub, result = state.get("ActiveState", ""), state.get("SubState", ""), state.get("Result", "")
    if state.get("LoadState") == "not-found":
        return "systemd has no such unit (LoadState=not-found)"
    if active == "failed":
        return f"the unit failed (Result={result or 'unknown'})"
    if sub == "auto-restart":
        return f"the main process exited (Result={result or 'unknown'}) and systemd is waiting to restart it"
    # Result is reset at each start, so a failure result while stopping is this run's main process dying.
    if active == "deactivating" and result not in ("", "success"):
        return f"the main process exited (Result={result}) and systemd is stopping what is left of the unit"
    invocation = state.get("InvocationID", "")
    if baseline and invocation and invocation != baseline:
        return "the unit restarted during the wait (its InvocationID changed)"
    if active == "inactive":
        return f"the unit is not running ({active}/{sub or 'dead'}): it was never started, or it stopped or exited"
    return None


def crashed_invocations(state: Dict[str, str], seen: Sequence[str]) -> List[str]:
    """The invocations whose journal may hold the crash, likeliest first: the current one when it is the one that died."""
    current = state.get("InvocationID", "")
    earlier = [invocation for invocation in reversed(seen) if invocation != current]
    # While failed, restarting or stopping, the current invocation is the dead one; after a restart it is a fresh run.
    current_died = (state.get("ActiveState") in ("failed", "deactivating", "inactive")
                    or state.get("SubState") == "auto-restart")
    if not current:
        return earlier
    return [current, *earlier] if current_died else [*earlier, current]


def _message(line: str) -> str:
    """A journal line without vLLM's process tag and log header."""
    return LOG_HEADER.sub("", PROCESS_TAG.sub("", line.rstrip()), count=1)


def _strong(message: str) -> Optional[str]:
    """The line as a reason when it states an error itself: an exception line, pydantic's detail, an argparse error."""
    detail = PYDANTIC_DETAIL.match(message)
    if detail:
        return detail.group(1)
    stripped = message.strip()
    if message == stripped and (EXCEPTION_LINE.match(stripped) or ARGPARSE_ERROR.match(stripped)):
        return stripped
    return None


def reason_line(lines: Sequence[str]) -> Optional[str]:
    """The most telling line of a crash's journal: the last error stated outright, else a pointer to it, else any error."""
    strong: Optional[str] = None
    pointer: Optional[str] = None
    weak: Optional[str] = None
    for line in lines:
        message = _message(line)
        candidate = _strong(message)
        if candidate is not None:
            if POINTS_ABOVE.search(candidate):
                pointer = candidate
            else:
                strong = candidate
        # Indented lines are traceback frames and source lines; they quote code, not what went wrong.
        elif message.strip() and message == message.lstrip() and ANY_ERROR.search(message) \
                and not TRACEBACK_NOISE.match(message):
            weak = message.strip()
    return strong or pointer or weak


def pick_journal(readings: Iterable[List[str]], lines: int) -> Tuple[List[str], Optional[str]]:
    """From journal readings tried in order, the last `lines` lines and reason of the first that tells a reason."""
    fallback: List[str] = []
    for reading in readings:
        reason = reason_line(reading)
        if reason is not None:
            return (reading[-lines:] if lines else []), reason
        if not fallback:
            fallback = reading
    return (fallback[-lines:] if lines else []), None


def crash_message(crash: Crash, reason: Optional[str]) -> str:
    """The failure message for a crashed scene: scene, unit state and the journal's reason line."""
    told = f"journal: {reason}" if reason else "the journal names no error; see `journal`"
    return (f"scene {crash.scene!r} ({crash.unit}) crashed {crash.seconds:.0f} s into the wait: {crash.reason} "
            f"[{unit_summary(crash.state)}]; {told}")


def timeout_message(pending: Sequence[Pending], total: int, timeout: float) -> str:
    """The failure message for a timeout: the scenes not ready and their last state."""
    parts = []
    for scene in pending:
        state = f"{scene.unit} {unit_summary(scene.state)}; " if scene.state else ""
        parts.append(f"{scene.scene!r} ({state}GET /health: {scene.health})")
    return f"{len(pending)} of {total} scenes not ready after {timeout:g} s: " + ", ".join(parts)


def _poll(watch: _Watch, probe: HealthProbe, read_unit: Optional[UnitReader]) -> Tuple[bool, Optional[str]]:
    """Read one scene's unit and health once: (ready, crash reason or None)."""
    if read_unit is not None and watch.spec["unit"]:
        state = read_unit(watch.spec["unit"])
        watch.see(state)
        reason = crash_reason(state, watch.invocations[0] if watch.invocations else None)
        if reason is not None:
            return False, reason
    healthy, watch.health = probe(health_url(watch.spec["url"]))
    return healthy, None


def wait_for_scenes(scenes: Sequence[SceneSpec], timeout: float, interval: float, probe: HealthProbe,
                    read_unit: Optional[UnitReader], clock: Callable[[], float],
                    sleep: Callable[[float], None]) -> WaitOutcome:
    """Poll all scenes in one loop until every one is ready, one crashes (read_unit None: health only) or time runs out."""
    start = clock()
    pending = [_Watch(scene) for scene in scenes]
    ready_at: Dict[str, float] = {}
    while True:
        for watch in list(pending):
            healthy, reason = _poll(watch, probe, read_unit)
            elapsed = round(clock() - start, 1)
            if reason is not None:
                state = watch.state or {}
                crash = Crash(watch.spec["name"], watch.spec["unit"], state, reason, elapsed,
                              crashed_invocations(state, watch.invocations))
                return WaitOutcome(_in_order(scenes, ready_at), crash, [], elapsed)
            if healthy:
                ready_at[watch.spec["name"]] = elapsed
                pending.remove(watch)
        now = clock()
        if not pending or now - start >= timeout:
            left = [Pending(w.spec["name"], w.spec["unit"], w.state, w.health) for w in pending]
            return WaitOutcome(_in_order(scenes, ready_at), None, left, round(now - start, 1))
        sleep(max(0.0, min(interval, start + timeout - now)))


def _in_order(scenes: Sequence[SceneSpec], ready_at: Dict[str, float]) -> List[ReadyScene]:
    """The ready scenes in the order they were given."""
    return [ReadyScene(name=s["name"], seconds=ready_at[s["name"]]) for s in scenes if s["name"] in ready_at]


def journal_selectors(crash: Crash) -> List[List[str]]:
    """journalctl match arguments to try in order: each crashed invocation, then the unit's whole journal."""
    return [[f"_SYSTEMD_INVOCATION_ID={invocation}"] for invocation in crash.invocations] + [["-u", crash.unit]]


def param_problem(scenes: Sequence[SceneSpec], timeout: float, interval: float, journal_lines: int) -> Optional[str]:
    """What is wrong with the module's arguments, None when nothing is."""
    names = [scene["name"] for scene in scenes]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    bad_urls = [scene["url"] for scene in scenes if not re.match(r"^https?://[^/]", scene["url"])]
    if duplicates:
        return f"scene names must be unique; repeated: {', '.join(duplicates)}"
    if bad_urls:
        return f"scene url must be an http:// or https:// base URL: {', '.join(map(repr, bad_urls))}"
    if timeout < 0 or interval <= 0 or journal_lines < 0:
        return "timeout and journal_lines must be >= 0 and interval > 0"
    return None
