"""roles/vllm_drift: the verdict and status of a drift check (pure), then the whole check run for real on the controller.

The end-to-end tests run the role's check tool with the controller's own ansible-pull against a git repo in a temp
directory: a playbook that manages files under the same temp directory, checked out at a pinned commit, over the
local connection. No root and no lab needed.
"""

from __future__ import annotations

import base64
import functools
import http.server
import importlib.util
import json
import os
import shutil
import socketserver
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import REPO

ROLE = REPO / "roles" / "vllm_drift"
TOOL = ROLE / "files" / "vllm_drift_check.py"


def _load(path: Path, name: str) -> ModuleType:
    """Import a file of the role the way the host runs it: as a plain file, not a package."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


drift = _load(TOOL, "vllm_drift_check")
# A fleet secret: the check is never given the password of this vault id ("fleet").
VAULTED_TOKEN = """demo_token: !vault |
          $ANSIBLE_VAULT;1.2;AES256;fleet
          38663831323164366361336438343361653939633734363064656234386139653836323535666331
          6463323139616461363930333637323337663437386336310a613737313963333864333361633766
          66306665613834643364376334346439643930623638656366316463623936336533393438366435
          3134306231643666360a396435633838333165343562653761303033336264643561373564656363
          33323630313932323661353236663431616161383634633931383737313263383461
"""


def recap(changed: int = 0, failures: int = 0, unreachable: int = 0, ok: int = 5) -> dict[str, int]:
    """A host's recap as the callback writes it (stats.summarize)."""
    return {"ok": ok, "changed": changed, "failures": failures, "unreachable": unreachable, "skipped": 0,
            "rescued": 0, "ignored": 0}


def report(hosts: dict[str, dict[str, int]], changed: list[dict[str, Any]] | None = None,
           failed: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A callback report."""
    return {"hosts": hosts, "changed": changed or [], "failed": failed or [], "unreachable": []}


def test_in_sync() -> None:
    """No change, no failure, rc 0: in sync, exit 0."""
    result = drift.evaluate(report({"gpu-a": recap()}), 0)
    assert (result["verdict"], result["changed"], result["changed_tasks"], result["message"]) == (
        "in sync", 0, [], "no change")
    assert drift.EXIT_CODES[result["verdict"]] == 0


def test_drift_names_the_changed_tasks_once_each() -> None:
    """Changes: drift with the task names in run order, a handler marked, a task looped twice named once."""
    changed = [{"host": "gpu-a", "task": "vllm_scenes : Install each validated scene config", "handler": False},
               {"host": "gpu-a", "task": "vllm_scenes : Install each validated scene config", "handler": False},
               {"host": "gpu-a", "task": "vllm_scenes : Restart changed scenes", "handler": True}]
    result = drift.evaluate(report({"gpu-a": recap(changed=2)}, changed), 0)
    assert result["verdict"] == "drift"
    assert result["changed_tasks"] == ["vllm_scenes : Install each validated scene config",
                                       "vllm_scenes : Restart changed scenes (handler)"]
    assert result["message"] == ("2 changes: vllm_scenes : Install each validated scene config; "
                                 "vllm_scenes : Restart changed scenes (handler)")
    assert drift.EXIT_CODES["drift"] == 3


def test_drift_with_several_hosts_names_the_host() -> None:
    """A limit that covers two hosts sums their recaps and prefixes each task with its host."""
    changed = [{"host": "b", "task": "Write x"}]
    result = drift.evaluate(report({"a": recap(), "b": recap(changed=1)}, changed), 0)
    assert (result["verdict"], result["changed"], result["changed_tasks"], result["hosts"]) == (
        "drift", 1, ["b: Write x"], ["a", "b"])
    assert result["message"] == "1 change: b: Write x"


def test_long_drift_lists_ten_tasks_in_the_message() -> None:
    """The journal line names ten tasks and counts the rest; the status keeps them all."""
    changed = [{"host": "a", "task": f"task {n}"} for n in range(13)]
    result = drift.evaluate(report({"a": recap(changed=13)}, changed), 0)
    assert len(result["changed_tasks"]) == 13
    assert result["message"].endswith("task 9; and 3 more")


@pytest.mark.parametrize(("hosts", "failed", "rc", "expected"), [
    ({"a": recap(changed=1, failures=1)}, [{"host": "a", "task": "Install", "msg": "boom"}], 2,
     "the check failed: 1 failed, 0 unreachable: Install: boom"),
    ({"a": recap(unreachable=1)}, [], 4, "the check failed: 0 failed, 1 unreachable"),
    ({}, [], 0, "no host matched the limit in the inventory: nothing was checked"),
    ({"a": recap()}, [], 1, "ansible-pull exited 1; see the log"),
])
def test_errors(hosts: dict[str, dict[str, int]], failed: list[dict[str, Any]], rc: int, expected: str) -> None:
    """A failure, an unreachable host, no host matched or a failing ansible-pull is an error, whatever changed."""
    result = drift.evaluate(report(hosts, failed=failed), rc)
    assert (result["verdict"], result["message"]) == ("error", expected)
    assert drift.EXIT_CODES["error"] == 2


@pytest.mark.parametrize(("rc", "expected"), [(1, "ansible-pull exited 1 before the playbook reported"),
                                              (0, "the playbook wrote no report")])
def test_no_report_is_an_error(rc: int, expected: str) -> None:
    """Without a callback report (checkout failed, playbook missing) the verdict is error."""
    result = drift.evaluate(None, rc)
    assert result["verdict"] == "error" and result["message"].startswith(expected)


def test_status_document_and_summary_line() -> None:
    """The status has every field a reader needs; the journal line carries verdict, message, ref and commit."""
    result = drift.evaluate(report({"a": recap(changed=1)}, [{"host": "a", "task": "Write x"}]), 0)
    status = drift.build_status(result, checked_at="2026-11-30T10:00:00+00:00", repo="https://git/fleet.git",
                                ref="v1.2", commit="0123456789abcdef" * 2 + "01234567",
                                limit="a", duration_s=12.34, log="/var/lib/vllm-fleet/drift/last-run.log")
    assert status == {
        "checked_at": "2026-11-30T10:00:00+00:00", "repo": "https://git/fleet.git", "ref": "v1.2",
        "commit": "0123456789abcdef" * 2 + "01234567", "limit": "a", "hosts": ["a"],
        "verdict": "drift", "changed": 1, "changed_tasks": ["Write x"], "failed": 0, "unreachable": 0,
        "failed_tasks": [], "message": "1 change: Write x", "duration_s": 12.3,
        "log": "/var/lib/vllm-fleet/drift/last-run.log", "exit_code": 3}
    assert json.loads(json.dumps(status)) == status
    assert drift.summary_line(status) == "vllm-drift: drift: 1 change: Write x (ref v1.2, commit 0123456789ab)"


def test_a_task_reading_a_vault_value_is_told_how_to_fix_it() -> None:
    """The check holds no secret: a failure to decrypt says which switch the task must honour."""
    failed = [{"host": "a", "task": "Write the token",
               "msg": "Attempt to use undecryptable variable: Attempting to decrypt but no vault secrets found."}]
    status = drift.build_status(drift.evaluate(report({"a": recap(failures=1)}, failed=failed), 2), checked_at="t",
                                repo="r", ref="0" * 40, commit=None, limit="a", duration_s=0, log="l")
    assert status["verdict"] == "error"
    assert status["message"].endswith("have that task compare only the file's owner and mode when "
                                      "vllm_fleet_without_secrets is true)")


def test_pull_argv() -> None:
    """ansible-pull runs in check mode with diff, a full clean clone at the commit, locally, without secrets; the
    signature is verified when keys are trusted; extras passed."""
    config = {"venv_dir": "/opt/d", "repo_url": "http://h/f.git", "ref": "abc", "checkout_dir": "/c",
              "inventory": "inventory/production", "limit": "gpu-a", "playbook": "site.yml",
              "gnupg_home": "/etc/d/gnupg", "extra_args": ["--skip-tags=x"]}
    assert drift.pull_argv(config) == [
        "/opt/d/bin/ansible-pull", "--check", "--diff", "--full", "--clean", "--url", "http://h/f.git", "--checkout",
        "abc", "--directory", "/c", "--inventory", "inventory/production", "--limit", "gpu-a", "--extra-vars",
        "ansible_connection=local", "--extra-vars",
        '{"ansible_become": false, "vllm_fleet_skip_in_sync": false, "vllm_fleet_without_secrets": true}',
        "--verify-commit", "--skip-tags=x", "site.yml"]
    assert "--verify-commit" not in drift.pull_argv({**config, "gnupg_home": None})
    assert not [arg for arg in drift.pull_argv(config) if "vault" in arg]


@pytest.mark.parametrize(("url", "plain"), [
    ("https://git.example.com/ops/fleet.git", "https://git.example.com/ops/fleet.git"),
    ("https://ci:t0ken@git.example.com:8443/ops/fleet.git", "https://git.example.com:8443/ops/fleet.git"),
    ("http://t0ken@[2001:db8::1]/fleet.git", "http://[2001:db8::1]/fleet.git"),
])
def test_credentials_leave_the_url_for_gits_environment(url: str, plain: str) -> None:
    """The URL on the command line and in the status has no user or password; git's askpass program answers them."""
    found, user, password = drift.split_credentials(url)
    assert found == plain and "t0ken" not in found
    assert "t0ken" in (user + password) if url != plain else (user, password) == ("", "")
    assert "t0ken" not in " ".join(drift.pull_argv({"venv_dir": "/v", "repo_url": url, "ref": "r", "checkout_dir": "/c",
                                                    "inventory": "i", "limit": "h", "playbook": "p"}))


def test_askpass_answers_each_prompt(tmp_path: Path) -> None:
    """The askpass program prints the user for git's user prompt and the password for any other, quotes and all."""
    script = tmp_path / "askpass"
    script.write_text(drift.askpass_script("ci", "p'a$s w"))
    script.chmod(0o700)
    ask = [subprocess.run([str(script), prompt], capture_output=True, text=True, check=True).stdout
           for prompt in ("Username for 'https://git.example.com': ", "Password for 'https://ci@git.example.com': ")]
    assert ask == ["ci\n", "p'a$s w\n"]


def test_write_atomically_replaces_the_file(tmp_path: Path) -> None:
    """The status file is replaced whole, with the mode asked for, and no temp file is left."""
    path = tmp_path / "drift" / "status.json"
    drift.write_atomically(path, "old\n")
    drift.write_atomically(path, "new\n", 0o640)
    assert path.read_text() == "new\n"
    assert path.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in path.parent.iterdir()] == ["status.json"]


# The whole check, run for real with the controller's ansible-pull.

PLAYBOOK = """---
- name: A tiny fleet
  hosts: all
  gather_facts: false
  tasks:
    - name: Write the demo config
      ansible.builtin.copy:
        content: "{{ demo_content }}\\n"
        dest: "{{ target }}/demo.conf"
        mode: "0644"
    - name: Keep the marker directory
      ansible.builtin.file:
        path: "{{ target }}/marker"
        state: directory
        mode: "0755"
    - name: Write the token
      ansible.builtin.copy:
        content: "{{ demo_token }}\\n"
        dest: "{{ target }}/token"
        mode: "0600"
      no_log: true
      when: not (vllm_fleet_without_secrets | default(false))
    - name: Keep the token's owner and mode (its value is not the check's to see)
      ansible.builtin.file:
        path: "{{ target }}/token"
        state: file
        mode: "0600"
      when: vllm_fleet_without_secrets | default(false)
"""


def _git(cwd: Path, *args: str) -> str:
    """Run git in cwd; return its stdout."""
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def fleet(tmp_path: Path) -> dict[str, Any]:
    """A fleet repo with one commit, a target directory in sync with it, and the check's config."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo, target, state = tmp_path / "fleet", tmp_path / "target", tmp_path / "state"
    (repo / "inventory" / "host_vars").mkdir(parents=True)
    (repo / "site.yml").write_text(PLAYBOOK)
    (repo / "inventory" / "hosts.yml").write_text("all:\n  hosts:\n    drifthost:\n")
    (repo / "inventory" / "host_vars" / "drifthost.yml").write_text(
        f"target: {target}\ndemo_content: hello\nansible_python_interpreter: {sys.executable}\n" + VAULTED_TOKEN)
    _git(tmp_path, "init", "-q", "-b", "main", str(repo))
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "fleet")
    (target / "marker").mkdir(parents=True)
    (target / "demo.conf").write_text("hello\n")
    (target / "demo.conf").chmod(0o644)
    (target / "token").write_text("drift-test-token\n")
    (target / "token").chmod(0o600)
    commit = _git(repo, "rev-parse", "HEAD")
    config = {"repo_url": f"file://{repo}", "ref": commit, "playbook": "site.yml",
              "inventory": "inventory/hosts.yml", "limit": "drifthost", "state_dir": str(state),
              "checkout_dir": str(state / "checkout"), "status_file": str(state / "status.json"),
              "venv_dir": str(Path(sys.executable).parent.parent), "callback_dir": str(ROLE / "files" / "callback_plugins"),
              "gnupg_home": None, "extra_args": []}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return {"config": tmp_path / "config.json", "target": target, "state": state, "commit": commit, "repo": repo}


def _check(fleet: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
           ) -> tuple[int, dict[str, Any], str]:
    """Run the check tool once; return its exit code, the status file and what it printed."""
    for name in [name for name in os.environ if name.startswith("ANSIBLE_")]:
        monkeypatch.delenv(name)
    code = drift.main(["vllm_drift_check.py", str(fleet["config"])])
    status = json.loads((fleet["state"] / "status.json").read_text())
    return code, status, capsys.readouterr().out


def test_real_check_in_sync_then_drift_then_error(fleet: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """In sync at the pinned commit; a file edited by hand is drift naming its task and stays edited; a bad ref errs."""
    code, status, out = _check(fleet, monkeypatch, capsys)
    assert (code, status["verdict"], status["commit"], status["changed"]) == (0, "in sync", fleet["commit"], 0), out
    assert out.startswith(f"vllm-drift: in sync: no change (ref {fleet['commit']}, commit {fleet['commit'][:12]})")

    (fleet["target"] / "demo.conf").write_text("edited by hand\n")
    code, status, out = _check(fleet, monkeypatch, capsys)
    assert (code, status["verdict"], status["changed_tasks"]) == (3, "drift", ["Write the demo config"]), out
    assert out.startswith("vllm-drift: drift: 1 change: Write the demo config")
    assert (fleet["target"] / "demo.conf").read_text() == "edited by hand\n"  # check mode repaired nothing
    assert "-hello" not in out  # the diff is in the log, not in the journal line
    assert "+hello" in (fleet["state"] / "last-run.log").read_text()
    assert (fleet["state"] / "last-run.log").stat().st_mode & 0o777 == 0o600

    config = json.loads(fleet["config"].read_text())
    fleet["config"].write_text(json.dumps({**config, "ref": "0" * 40}))
    code, status, out = _check(fleet, monkeypatch, capsys)
    assert (code, status["verdict"], status["exit_code"]) == (2, "error", 2), out
    assert "vllm-drift: log: " in out


def test_real_check_unknown_limit_is_an_error(fleet: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A limit that matches no host is an error, not 'in sync'."""
    config = json.loads(fleet["config"].read_text())
    fleet["config"].write_text(json.dumps({**config, "limit": "nosuchhost"}))
    code, status, out = _check(fleet, monkeypatch, capsys)
    assert (code, status["verdict"]) == (2, "error"), out


def test_real_check_holds_no_secret_and_sees_a_secret_file_lose_its_mode(
        fleet: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The check runs without the Vault: the vaulted token's file is checked by its mode, never by its value."""
    (fleet["target"] / "token").chmod(0o644)
    code, status, out = _check(fleet, monkeypatch, capsys)
    assert (code, status["changed_tasks"]) == (3, ["Keep the token's owner and mode (its value is not the check's to "
                                                   "see)"]), out
    assert "drift-test-token" not in (fleet["state"] / "last-run.log").read_text()


def _signing_key(home: Path) -> str:
    """Make a passphrase-less signing key in a GnuPG home of its own; return its fingerprint."""
    home.mkdir(mode=0o700)
    subprocess.run(["gpg", "--batch", "--homedir", str(home), "--passphrase", "", "--quick-gen-key",
                    "fleet-ci <ci@example.com>", "ed25519", "sign", "never"], check=True, capture_output=True)
    listing = subprocess.run(["gpg", "--homedir", str(home), "--with-colons", "--list-secret-keys"],
                             check=True, capture_output=True, text=True).stdout
    return next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))


def test_real_check_verifies_the_commit_signature(fleet: dict[str, Any], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """With trusted keys an unsigned commit is an error; the same tree signed by a trusted key is in sync."""
    if shutil.which("gpg") is None:
        pytest.skip("gpg is not installed")
    signer, trusted = tmp_path / "signer", tmp_path / "trusted"
    fingerprint = _signing_key(signer)
    public = subprocess.run(["gpg", "--homedir", str(signer), "--armor", "--export", fingerprint],
                            check=True, capture_output=True).stdout
    trusted.mkdir(mode=0o700)
    subprocess.run(["gpg", "--batch", "--homedir", str(trusted), "--import"], input=public, check=True,
                   capture_output=True)
    config = {**json.loads(fleet["config"].read_text()), "gnupg_home": str(trusted)}
    fleet["config"].write_text(json.dumps(config))
    code, status, out = _check(fleet, monkeypatch, capsys)
    assert (code, status["verdict"]) == (2, "error"), out

    monkeypatch.setenv("GNUPGHOME", str(signer))
    _git(fleet["repo"], "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", f"user.signingkey={fingerprint}",
         "commit", "-q", "--allow-empty", "-S", "-m", "signed")
    monkeypatch.delenv("GNUPGHOME")
    fleet["config"].write_text(json.dumps({**config, "ref": _git(fleet["repo"], "rev-parse", "HEAD")}))
    code, status, out = _check(fleet, monkeypatch, capsys)
    assert (code, status["verdict"]) == (0, "in sync"), out


class _AuthGitServer(http.server.SimpleHTTPRequestHandler):
    """git's dumb HTTP protocol from a directory, behind basic auth (user ci, password s3cret-t0ken)."""

    def do_GET(self) -> None:
        """Serve the file to a request with the right credentials, 401 to any other."""
        if self.headers.get("Authorization") != "Basic " + base64.b64encode(b"ci:s3cret-t0ken").decode():
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="fleet"')
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, *_: object) -> None:
        """Keep the test's output quiet."""


def test_real_check_with_a_token_in_the_url_never_shows_it(fleet: dict[str, Any], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A repository behind basic auth: the check clones it, and the token is in no status, log or journal line."""
    bare = tmp_path / "www" / "fleet.git"
    bare.parent.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(fleet["repo"]), str(bare)], check=True)
    _git(bare, "update-server-info")
    handler = functools.partial(_AuthGitServer, directory=str(bare.parent))
    with socketserver.TCPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://ci:s3cret-t0ken@127.0.0.1:{server.server_address[1]}/fleet.git"
        fleet["config"].write_text(json.dumps({**json.loads(fleet["config"].read_text()), "repo_url": url}))
        try:
            code, status, out = _check(fleet, monkeypatch, capsys)
        finally:
            server.shutdown()
    assert (code, status["verdict"]) == (0, "in sync"), out
    seen = out + json.dumps(status) + (fleet["state"] / "last-run.log").read_text()
    assert "s3cret-t0ken" not in seen and status["repo"] == url.replace("ci:s3cret-t0ken@", "")
    assert not (fleet["state"] / "ansible" / "askpass").exists()  # the secret lived only for the check
