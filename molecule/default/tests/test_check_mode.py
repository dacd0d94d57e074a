"""Check mode as the PR preview of the main job (docs/check-mode.md): `site.yml --check --diff` on the converged lab,
without the Vault (-e vllm_fleet_without_secrets=true and no password, as examples/gitops runs it).

One run on mdef1 and mdef2 (tests/rerun_hosts.py), with one host var changed (the batch scene's max_num_seqs on the
host that runs batch, from a second inventory source as a pull request would change it): the other host reports no
change; the changed one reports exactly the staged and the live config of that scene, each with a one-line diff, and
the restart it would make, and is left as it was; every host still asks systemd about every scene, and no load test
runs.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import tempfile
from pathlib import Path

import testinfra.host
import yaml

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
sys.path[:0] = [str(REPO / "molecule" / "shared")]

from playbooks import lab_host, run_playbook  # noqa: E402

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards  # noqa: E402
from rerun_hosts import LIMIT, rerun_host  # noqa: E402

testinfra_hosts = ["ansible://gpu_hosts"]  # mdef4, the gateway, has tests/test_gateway.py

LAB = os.environ.get("VFL_LAB", "mdef")  # molecule.yml's provisioner env names the scenario's lab
CONFIG_DIR = "/etc/vllm/scenes"
SCENE = "batch"
PRESET_SEQS = cards.PRESETS["batch"].engine_args["max_num_seqs"]
NEW_SEQS = PRESET_SEQS // 2
# Everything the one change may report, as (task, item): the validated copy, the live config, the restart.
EXPECTED_CHANGES = {
    ("vllm_scenes : Validate each scene's config with the release's own vLLM parser", SCENE),
    ("vllm_scenes : Install each validated scene config", SCENE),
    ("vllm_scenes : Restart changed scenes", SCENE),
}
EXPECTED_DIFFS = {path: [f"-max-num-seqs: {PRESET_SEQS}", f"+max-num-seqs: {NEW_SEQS}"]
                  for path in (f"{CONFIG_DIR}/.validated/{SCENE}.yaml", f"{CONFIG_DIR}/{SCENE}.yaml")}


def name(host: testinfra.host.Host) -> str:
    """Return the inventory name of the host under test (a test of a host the check leaves out is skipped)."""
    return rerun_host(host)


def host_vars_dir() -> Path:
    """Return the host_vars directory of molecule's inventory (the scenario's own, linked there)."""
    return Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent / "host_vars"


def changed_host() -> tuple[str, list[dict[str, object]]]:
    """Return the host whose host vars list the batch scene, and its scene list (mdef1 in this scenario)."""
    for path in sorted(host_vars_dir().glob("*.yml")):
        scenes = (yaml.safe_load(path.read_text()) or {}).get("vllm_scenes_list", [])
        if any(scene["name"] == SCENE for scene in scenes):
            return path.stem, scenes
    raise AssertionError(f"no host in {host_vars_dir()} runs the {SCENE} scene")


def changes(output: str, host: str) -> set[tuple[str, str]]:
    """Return (task, item) of every result the run reported as changed for host, handlers and controller tasks too."""
    found, task = set(), ""
    for line in output.splitlines():
        header = re.match(r"^(?:TASK|RUNNING HANDLER) \[(.*)\] \*+$", line)
        task = header.group(1) if header else task
        result = re.match(rf"^changed: \[{re.escape(host)}(?: -> [^]]+)?\](?: => \(item=(.*)\))?", line)
        if result:
            found.add((task, result.group(1) or ""))
    return found


def diffs(output: str) -> dict[str, list[str]]:
    """Return the changed lines of every --diff block by the path it was taken of ("--- before: PATH")."""
    found: dict[str, list[str]] = {}
    current = None
    for line in output.splitlines():
        if line.startswith("--- before"):
            current = line.split(": ", 1)[1] if ": " in line else line
            found[current] = []
        elif current and re.match(r"^(ok|changed|skipping|fatal|failed): |^(TASK|RUNNING HANDLER|PLAY) ", line):
            current = None
        elif current and line[:1] in ("+", "-") and not line.startswith(("+++ ", "--- ")):
            found[current].append(line)
    return found


def recap(output: str, host: str) -> dict[str, int]:
    """Return the PLAY RECAP counters of host."""
    line = re.search(rf"^{re.escape(host)}\s+:(.*)$", output, re.M)
    assert line, output[-3000:]
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", line.group(1))}


def scene_state(name: str) -> tuple[str, str]:
    """Return the live batch config and the MainPID of its service on host name, to prove check mode changed neither."""
    host = lab_host(name)
    return (host.file(f"{CONFIG_DIR}/{SCENE}.yaml").content_string,
            host.check_output(f"systemctl show -p MainPID --value vllm-scene-{SCENE}"))


@functools.cache
def one_change_check() -> tuple[str, tuple[str, str], tuple[str, str]]:
    """Run site.yml in check mode with diffs on the converged rerun hosts once, the batch scene's max_num_seqs changed on
    the one host that runs it; return the output and that scene's state before and after."""
    host, scenes = changed_host()
    scenes = [{**scene, "engine_args": {**scene.get("engine_args", {}), "max_num_seqs": NEW_SEQS}}
              if scene["name"] == SCENE else scene for scene in scenes]
    before = scene_state(host)
    with tempfile.TemporaryDirectory() as change:
        # A second inventory source: its host_vars are read after the scenario's and win, as a changed file would.
        (Path(change) / "host_vars").mkdir()
        (Path(change) / "hosts.yml").write_text(yaml.safe_dump({"gpu_hosts": {"hosts": {host: None}}}))
        (Path(change) / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump({"vllm_scenes_list": scenes}))
        result = run_playbook(SCENARIO, LAB, LIMIT, "converge.yml", "--check", "--diff", "-i", change,
                              "-e", "vllm_fleet_without_secrets=true", vault=False)
    assert result.returncode == 0, result.stdout[-4000:]
    return result.stdout, before, scene_state(host)


def test_unchanged_host_reports_no_change_and_nothing_fails(host: testinfra.host.Host) -> None:
    """In one check of the whole converged lab, the host without the change reports no change; no host fails."""
    output, _, _ = one_change_check()
    if name(host) != changed_host()[0]:
        assert recap(output, name(host))["changed"] == 0 and changes(output, name(host)) == set(), output[-4000:]
    assert recap(output, name(host))["failed"] == 0


def test_check_mode_still_asks_systemd_about_every_scene(host: testinfra.host.Host) -> None:
    """The start/enable task runs in check mode too, so a stopped or disabled scene would show as a change."""
    output, _, _ = one_change_check()
    task = output.split("TASK [vllm_scenes : Start and enable every scene]", 1)[1].split("\nTASK ", 1)[0]
    checked = re.findall(rf"^ok: \[{re.escape(name(host))}\] => \(item=(\S+)\)", task, re.M)
    units = host.check_output("ls /etc/systemd/system").split()
    installed = {unit[len("vllm-scene-"):-len(".service")] for unit in units
                 if unit.startswith("vllm-scene-") and unit.endswith(".service")}
    assert installed and sorted(checked) == sorted(installed), task


def test_check_mode_skips_the_load_test(host: testinfra.host.Host) -> None:
    """Verification says it is skipped in check mode and runs no load test against the running scenes."""
    output, _, _ = one_change_check()
    assert f"{name(host)}: verification skipped in check mode" in output
    assert "vllm bench serve the scene" not in output


def test_one_host_var_change_reports_exactly_that_scene(host: testinfra.host.Host) -> None:
    """After one host var change the preview reports the scene's staged and live config, each with a one-line diff,
    and its restart: nothing else on that host, nothing on the other, and the host is left as it was."""
    output, before, after = one_change_check()
    target, _ = changed_host()
    assert changes(output, name(host)) == (EXPECTED_CHANGES if name(host) == target else set()), output[-4000:]
    assert recap(output, name(host))["changed"] == (len(EXPECTED_CHANGES) if name(host) == target else 0)
    assert diffs(output) == EXPECTED_DIFFS, diffs(output)
    assert after == before  # check mode wrote nothing and restarted nothing


def test_preview_reads_no_secret(host: testinfra.host.Host) -> None:
    """Without the Vault the preview compares each scene's key file by owner and mode and never renders it; the
    ingress's and the CA's secrets are not read either (the run above would have failed on a Vault value)."""
    output, _, _ = one_change_check()
    header = "TASK [vllm_scenes : Keep each scene's secret environment root's alone]"
    task = output.split(header, 1)[1].split("\nTASK ", 1)[0]
    assert re.search(rf"^ok: \[{re.escape(name(host))}\] => \(item=", task, re.M), task
    assert "Attempting to decrypt" not in output
