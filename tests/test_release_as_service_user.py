"""A release's own code never runs as root in the kit's tasks: a release may be unpacked from a bundle another host
packed, so importing it, its scene-config parser, `vllm bench serve` and the tuner's sweep run as the service user
(roles/vllm_fleet/vars/main.yml: _vllm_fleet_as_service_user). A task added later that runs the release as root
fails here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from conftest import REPO

ROLES = REPO / "roles"
AS_USER = "_vllm_fleet_as_service_user"
# Where a release is, and what runs its code, as the tasks write them.
RELEASE = ("_vllm_release_dir", "release_link", "release.path", "vllm_model_hf_cli", "_vllm_verify_bench_command",
           "_vllm_tune_sweep_command")
RELEASE_CODE = ("bin/python", "bin/vllm", "vllm_model_hf_cli", "_vllm_verify_bench_command", "_vllm_tune_sweep_command")
# Tasks that may still run it as root, and why.
AS_ROOT = {
    ("vllm/tasks/build.yml", "Find the release's site-packages"):
        "a fresh venv's interpreter is the system's own, and sysconfig is the standard library's",
}
INTERNALS = {name: value for path in ROLES.glob("*/vars/main.yml")
             for name, value in (yaml.safe_load(path.read_text()) or {}).items()}


def tasks(items: Any) -> Iterator[dict[str, Any]]:
    """Yield every task of a task list, inside blocks, rescues and always too."""
    for task in items or []:
        if isinstance(task, dict):
            yield task
            for part in ("block", "rescue", "always"):
                yield from tasks(task.get(part))


def release_commands() -> Iterator[tuple[str, str, str]]:
    """Yield (file, task name, the command as written) of each command task that runs a release's code."""
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in tasks(yaml.safe_load(path.read_text())):
            command = task.get("ansible.builtin.command")
            written = str(command.get("argv", command.get("cmd", "")) if isinstance(command, dict) else command or "")
            written += "".join(f" {INTERNALS[name]}" for name in INTERNALS if name in written)  # what it is made of
            if any(mark in written for mark in RELEASE) and any(mark in written for mark in RELEASE_CODE):
                yield str(path.relative_to(ROLES)), task.get("name", ""), written


def drops_to_the_service_user(written: str) -> bool:
    """Whether a command, or an internal it is made of, runs behind the service-user prefix."""
    return AS_USER in written


def test_every_task_running_a_release_runs_it_as_the_service_user() -> None:
    """Each command task that runs the release's python, vllm or hf does so through the service-user prefix, or is
    one of the listed exceptions."""
    found = list(release_commands())
    assert set(AS_ROOT) <= {(where, name) for where, name, _ in found}, found  # no exception outlives its task
    assert len(found) >= 5, found  # the import check, hf, the load test, the sweep, the exception
    as_root = [(where, name) for where, name, written in found
               if not drops_to_the_service_user(written) and (where, name) not in AS_ROOT]
    assert not as_root, f"run a release's code as root: {as_root}; prefix it with {AS_USER}"


def test_the_scene_validator_parses_as_the_service_user() -> None:
    """Ansible's validate starts the validator with the system's python3 (root reads the file), and the validator
    runs the release's parser behind the service-user prefix."""
    validate = next(task for task in tasks(yaml.safe_load((ROLES / "vllm_scenes/tasks/validate.yml").read_text()))
                    if "validate" in (task.get("ansible.builtin.template") or {}))
    assert validate["ansible.builtin.template"]["validate"].startswith("/usr/bin/python3 ")
    template = (ROLES / "vllm_scenes/templates/validate-scene.py.j2").read_text()
    assert f"AS_SERVICE_USER = {{{{ {AS_USER} | to_json }}}}" in template and "[*AS_SERVICE_USER, python" in template


def test_the_prefix_drops_every_identity_of_root() -> None:
    """setpriv to the service user and group, with that user's groups only, and a home of its own."""
    prefix = yaml.safe_load((ROLES / "vllm_fleet/vars/main.yml").read_text())[AS_USER]
    assert prefix[:5] == ["setpriv", "--reuid={{ vllm_fleet_user }}", "--regid={{ vllm_fleet_group }}", "--init-groups",
                          "--"]
    assert prefix[5:] == ["env", "HOME={{ vllm_fleet_data_dir }}"]
