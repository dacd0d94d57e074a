"""Each scene its own identity, tried the way an attacker who runs code in one scene would: from inside the realtime
scene's mount namespace, as its user, read the batch scene's key and caches and call its keyless paths."""

from __future__ import annotations

import sys
from pathlib import Path

import testinfra.host

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "shared")]

from units import MAX_EXPOSURE, exposure  # noqa: E402

testinfra_hosts = ["ansible://mdef1"]
ATTACKER, VICTIM = ("realtime", 8000), ("batch", 8001)
GUARD = "vllm-fleet-scenes-guard.service"


def main_pid(host: testinfra.host.Host, scene: str) -> int:
    """Return the main process of a scene's unit."""
    return int(host.check_output(f"systemctl show -p MainPID --value vllm-scene-{scene}.service"))


def as_scene(host: testinfra.host.Host, scene: str, command: str) -> testinfra.host.CommandResult:
    """Run a command in a scene's mount namespace (its /proc, its read-only system) as the scene's user."""
    user = f"vllm-{scene}"
    return host.run(f"nsenter -t {main_pid(host, scene)} -m -- setpriv --reuid {user} --regid vllm --clear-groups "
                    f"-- {command}")


def http_status(host: testinfra.host.Host, scene: str | None, url: str) -> str:
    """Return the HTTP status of a GET as the scene's user (root when scene is None), 000 when refused."""
    command = f"curl -s -m 5 -o /dev/null -w %{{http_code}} {url}"
    return (as_scene(host, scene, command) if scene else host.run(command)).stdout.strip()


def test_each_scene_runs_as_its_own_user(host: testinfra.host.Host) -> None:
    """The two scenes' engines run as two users, neither the shared service user."""
    users = {host.check_output(f"ps -o user= -p {main_pid(host, scene)}") for scene in (ATTACKER[0], VICTIM[0])}
    assert users == {"vllm-realtime", "vllm-batch"}


def test_a_scene_cannot_read_another_scenes_key_or_caches(host: testinfra.host.Host) -> None:
    """Neither the other engine's environment (its API key) nor its cache directory can be read from a scene."""
    victim_pid = main_pid(host, VICTIM[0])
    key = host.check_output(f"grep ^VLLM_API_KEY= /etc/vllm/scenes/{VICTIM[0]}.env").split("=", 1)[1]
    assert key in host.check_output(f"tr '\\0' '\\n' < /proc/{victim_pid}/environ")  # root sees it: the probe works
    stolen = as_scene(host, ATTACKER[0], f"cat /proc/{victim_pid}/environ")
    assert stolen.rc != 0 and key not in stolen.stdout
    assert as_scene(host, ATTACKER[0], f"ls /var/lib/vllm/cache/{VICTIM[0]}").rc != 0
    assert as_scene(host, ATTACKER[0], f"ls /var/lib/vllm/cache/{ATTACKER[0]}").rc == 0


def test_a_scene_reaches_no_local_port_but_its_own(host: testinfra.host.Host) -> None:
    """The other scene's keyless /metrics and the node exporter answer root, not a scene; its own port answers it."""
    for url in (f"http://127.0.0.1:{VICTIM[1]}/metrics", "http://127.0.0.1:9100/metrics"):
        assert http_status(host, None, url) == "200"
        assert http_status(host, ATTACKER[0], url) == "000", url
    assert http_status(host, ATTACKER[0], f"http://127.0.0.1:{ATTACKER[1]}/health") == "200"
    assert http_status(host, VICTIM[0], f"http://127.0.0.1:{VICTIM[1]}/health") == "200"


def test_the_guard_unit_is_sandboxed(host: testinfra.host.Host) -> None:
    """The guard's oneshot unit is active and scores at most MAX_EXPOSURE in systemd-analyze security."""
    assert host.service(GUARD).is_enabled and host.check_output(f"systemctl is-active {GUARD}") == "active"
    assert exposure(host, GUARD) <= MAX_EXPOSURE
