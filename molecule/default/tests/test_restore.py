"""site.yml on the converged lab with two bad hosts (before tests/test_rollout.py, which rolls changes out after it):
mdef3's scene has a misspelt engine argument, which its checks refuse; mdef2's has a quantization that passes every
check and fails at start-up. mdef3 fails alone and untouched, mdef2 gets its previous config back, serving; mdef1
goes on and verifies, and the gateway (mdef4) keeps routing to both bad hosts as it recorded them."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import testinfra.host

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
sys.path.insert(0, str(REPO / "molecule" / "shared"))

from playbooks import lab_host, run_playbook, scene_health  # noqa: E402

testinfra_hosts = ["ansible://gpu_hosts"]
GOOD, FAILS_AT_START, REFUSED, GATEWAY = "mdef1", "mdef2", "mdef3", "mdef4"
# Each bad host's own change, from a second inventory source: mdef_realtime_engine_args feeds realtime's engine_args.
CHANGES = {FAILS_AT_START: {"quantization": "gptq"}, REFUSED: {"max_num_seq": 8}}
UNIT = "vllm-scene-realtime.service"
REPORTS = Path(tempfile.mkdtemp(prefix="mdef-restore-reports-"))
GATEWAY_CONFIG = "/etc/vllm-gateway/haproxy.cfg"
GATEWAY_RECORD = "/etc/vllm-gateway/backends.json"


def realtime_state(name: str) -> dict[str, str]:
    """Return the realtime scene's process invocation and state, its config's digest and the deployed-state fact."""
    host = lab_host(name)
    show = host.check_output(f"systemctl show -p InvocationID -p ActiveState {UNIT}")
    return {**dict(line.split("=", 1) for line in show.splitlines()),
            "config": host.check_output("sha256sum /etc/vllm/scenes/realtime.yaml").split()[0],
            "fact": host.file("/etc/ansible/facts.d/vllm_fleet.fact").content_string}


def gateway_config() -> str:
    """Return the digest of the gateway's HAProxy config."""
    return lab_host(GATEWAY).check_output(f"sha256sum {GATEWAY_CONFIG}").split()[0]


@functools.cache
def site_run() -> tuple[dict[str, dict[str, str]], subprocess.CompletedProcess[str], dict[str, dict[str, str]],
                        tuple[str, str]]:
    """Run site.yml once on the whole lab with the two bad changes, light load tests (rollout/verify.yml) and reports
    of its own; return every GPU host's realtime state before, the run, the state after, and the gateway config's
    digest before and after."""
    hosts = [GOOD, FAILS_AT_START, REFUSED]
    before, config_before = {name: realtime_state(name) for name in hosts}, gateway_config()
    with tempfile.TemporaryDirectory() as change:
        (Path(change) / "host_vars").mkdir()
        (Path(change) / "hosts.yml").write_text(json.dumps({"gpu_hosts": {"hosts": dict.fromkeys(CHANGES)}}))
        for name, engine_args in CHANGES.items():
            (Path(change) / "host_vars" / f"{name}.yml").write_text(
                json.dumps({"mdef_realtime_engine_args": engine_args}))
        result = run_playbook(SCENARIO, "mdef", "all", "../../site.yml", "-i", change,
                              "-e", f"@{SCENARIO}/rollout/verify.yml", "-e", f"vllm_verify_report_dir={REPORTS}",
                              kit_output=True)
    (REPORTS / "site.log").write_text(result.stdout)  # the whole run, for a failed assertion's reader
    return before, result, {name: realtime_state(name) for name in hosts}, (config_before, gateway_config())


def failed_hosts(output: str) -> dict[str, str]:
    """Return the kit's FAILED HOSTS summary: host -> its one line."""
    lines = output.split("FAILED HOSTS", 1)[1].strip().splitlines()[1:] if "FAILED HOSTS" in output else []
    return dict(line.split(": ", 1) for line in lines if ": " in line)


def test_each_bad_host_fails_alone_with_one_line(host: testinfra.host.Host) -> None:
    """The recap fails exactly the two bad hosts; the summary gives each one line: the refused argument with its fix,
    and the start error with the restore."""
    if host.backend.get_hostname() != GOOD:
        pytest.skip(f"one run of the whole lab: {GOOD}'s test shows it")
    _, result, _, _ = site_run()
    assert result.returncode != 0
    summary = failed_hosts(result.stdout)
    assert sorted(summary) == [FAILS_AT_START, REFUSED], result.stdout[-4000:]
    assert re.search(r"engine_args\.max_num_seq: vllm(-cpu)? \S+ has no such argument; did you mean max_num_seqs\?",
                     summary[REFUSED]), summary[REFUSED]
    assert summary[FAILS_AT_START].startswith("converge failed at step scenes"), summary[FAILS_AT_START]
    assert re.search(r"(?i)quantiz", summary[FAILS_AT_START]), summary[FAILS_AT_START]
    assert "verified healthy: realtime." in summary[FAILS_AT_START]
    assert summary[FAILS_AT_START].endswith("The other hosts go on. (task: Fail the host with what failed and what "
                                            "was restored)")
    for name, failed in ((GOOD, 0), (GATEWAY, 0), (FAILS_AT_START, 1), (REFUSED, 1)):
        assert re.search(rf"^{name}\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed={failed}\s", result.stdout,
                         re.MULTILINE), result.stdout[-3000:]


def test_the_good_host_verifies(host: testinfra.host.Host) -> None:
    """mdef1's scenes pass verification in the same run; so does mdef2's restored scene (by its restore), and the
    refused host gets no report."""
    if host.backend.get_hostname() != GOOD:
        pytest.skip(f"one run of the whole lab: {GOOD}'s test shows it")
    site_run()
    for scene in ("realtime", "batch"):
        assert json.loads((REPORTS / GOOD / f"{scene}.json").read_text())["passed"] is True
    assert json.loads((REPORTS / FAILS_AT_START / "realtime.json").read_text())["passed"] is True
    assert not (REPORTS / REFUSED).exists()


def test_scene_failing_at_start_is_back_on_its_config_and_serving(host: testinfra.host.Host) -> None:
    """mdef2 tried the change (its scene restarted) and runs its previous config again, answering /health, with its
    deployed-state fact as before."""
    if host.backend.get_hostname() != FAILS_AT_START:
        pytest.skip(f"{FAILS_AT_START}'s own change")
    before, _, after, _ = site_run()
    mine, now = before[FAILS_AT_START], after[FAILS_AT_START]
    assert now["InvocationID"] != mine["InvocationID"] and now["ActiveState"] == "active"
    assert (now["config"], now["fact"]) == (mine["config"], mine["fact"])
    assert host.service(UNIT).is_running and scene_health(FAILS_AT_START) == 200


def test_refused_host_is_untouched(host: testinfra.host.Host) -> None:
    """mdef3, refused by its checks, runs the same process on the same config."""
    if host.backend.get_hostname() != REFUSED:
        pytest.skip(f"{REFUSED}'s own change")
    before, _, after, _ = site_run()
    assert after[REFUSED] == before[REFUSED]
    assert scene_health(REFUSED) == 200


def test_gateway_keeps_routing_to_the_bad_hosts_as_recorded(host: testinfra.host.Host) -> None:
    """The gateway converged and verified without the bad hosts' new scenes: its config is the same, its record
    still routes both, and the run said so."""
    if host.backend.get_hostname() != GOOD:
        pytest.skip(f"one run of the whole lab: {GOOD}'s test shows it")
    _, result, _, (config_before, config_after) = site_run()
    assert config_after == config_before
    record = json.loads(lab_host(GATEWAY).file(GATEWAY_RECORD).content_string)
    assert sorted(record) == [GOOD, FAILS_AT_START, REFUSED]
    assert [s["name"] for s in record[FAILS_AT_START]["scenes"]] == ["realtime"]
    for name in (FAILS_AT_START, REFUSED):
        assert f"{name}: routed as the gateway's last converge recorded it" in result.stdout
