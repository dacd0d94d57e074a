"""The restore of a failed rollout (playbooks/tasks/rollout-restore.yml), run on the controller as its own host against
scenes that a local HTTP server stands in for: what the restore put back is verified against its own scenes and SLO
gates, not the new scene list's, and the in-progress mark goes once they pass."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO

from ansible_collections.vllm.fleet.plugins.plugin_utils import verify

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the verification role writes its records as root")

HOST = "gpu1"
# What `vllm bench serve --save-result` writes for a healthy scene: inside the cpu gates of realtime and batch.
BENCH = {"completed": 16, "failed": 0, "median_ttft_ms": 40.0, "p99_ttft_ms": 80.0, "median_tpot_ms": 9.0,
         "p99_tpot_ms": 20.0, "output_throughput": 900.0}
# Stands in for the release's vllm: writes BENCH where --result-dir and --result-filename say.
FAKE_VLLM = f"""#!{sys.executable}
import json, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
with open(args["result-dir"] + "/" + args["result-filename"], "w") as out:
    json.dump({json.dumps(BENCH)}, out)
"""


def definition(name: str, port: int, model_dir: Path, **engine_args: Any) -> dict[str, Any]:
    """Return a resolved scene as the vllm_scenes role publishes it and the deployed-state fact records it."""
    return {"name": name, "preset": name, "slo": name, "host": "127.0.0.1", "port": port, "gpus": [0],
            "model": "tiny", "model_path": str(model_dir / "tiny"), "served_model_name": f"tiny-{name}",
            "api_key_var": "", "engine_args": {"max-num-seqs": 4, **engine_args}, "env": {}, "memory_budget_gib": None}


@contextmanager
def scene_server() -> Iterator[tuple[int, list[str]]]:
    """Serve a scene's API on loopback as vLLM does (health, models, a chat completion, metrics); yield its port and
    the served name it answers with, to be set before the first request."""
    served: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self, body: bytes, kind: str = "application/json") -> None:
            """Answer 200 with body."""
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            """Answer /health, /v1/models and /metrics."""
            if self.path == "/v1/models":
                self.answer(json.dumps({"data": [{"id": served[0]}]}).encode())
            elif self.path == "/metrics":
                self.answer(b"vllm:num_requests_running 0\n", "text/plain")
            else:
                self.answer(b"")

        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            """Answer a chat completion."""
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.answer(json.dumps({"choices": [{"message": {"content": "Hello"}}],
                                    "usage": {"completion_tokens": 2}}).encode())

        def log_message(self, *args: object) -> None:
            """Keep the test's output quiet."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], served
    finally:
        server.shutdown()


PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: Read the fleet context, as every play of the kit does
      ansible.builtin.import_tasks: {context}

    - name: Publish the new scene list, as the vllm_scenes role does
      ansible.builtin.set_fact:
        vllm_scenes_resolved: "{{ new_scenes }}"

    - name: Check the verification's inputs for the new list, as playbooks/preflight.yml does
      ansible.builtin.include_role:
        name: vllm_verify
        tasks_from: preflight

    - name: Let the roles skip the checks this play made
      ansible.builtin.set_fact:
        vllm_fleet_preflight_passed: true

    - name: Record what the host runs now
      ansible.builtin.include_role:
        name: vllm_state
        tasks_from: snapshot
      vars:
        vllm_state_run: rollout

    - name: Deploy the change, which leaves batch out
      ansible.builtin.file:
        path: "{{ vllm_fleet_scene_config_dir }}/{{ item }}"
        state: absent
      loop: [batch.yaml, batch.env]

    - name: Deploy the change, which breaks realtime's start
      ansible.builtin.copy:
        dest: "{{ vllm_fleet_scene_config_dir }}/realtime.yaml"
        content: "quantization: gptq\\n"
        mode: "0644"

    - name: Restore the recorded state and prove it healthy
      ansible.builtin.include_tasks: "{{ restore_tasks }}"
      vars:
        _rollout_undrain_tasks: ""
        _rollout_failed: {step: scenes, task: Wait until every scene answers GET /health, result: {msg: crashed}}
"""


def test_a_restore_verifies_the_scenes_it_put_back_and_clears_the_mark(tmp_path: Path) -> None:
    """A rollout left batch out of the host's list and broke realtime's start: its restore brings both back and
    verifies each against the gates its recorded definition names (batch is no scene of the new list, whose SLO
    targets the preflight resolved), keeps both verdicts on the host, and removes the in-progress mark."""
    config_dir, verify_dir, reports = tmp_path / "etc", tmp_path / "verify", tmp_path / "reports"
    install_dir, fact_path, snapshot_dir = tmp_path / "opt", tmp_path / "facts" / "vllm_fleet.fact", tmp_path / "rollback"
    for directory in (config_dir, tmp_path / "units", fact_path.parent, tmp_path / "models" / "tiny",
                      install_dir / "releases" / "r1" / "bin"):
        directory.mkdir(parents=True)
    vllm = install_dir / "releases" / "r1" / "bin" / "vllm"
    vllm.write_text(FAKE_VLLM)
    vllm.chmod(0o755)
    (install_dir / "current").symlink_to(install_dir / "releases" / "r1")
    with scene_server() as (realtime_port, realtime_served), scene_server() as (batch_port, batch_served):
        recorded = [definition("realtime", realtime_port, tmp_path / "models"),
                    definition("batch", batch_port, tmp_path / "models")]
        realtime_served.append("tiny-realtime")
        batch_served.append("tiny-batch")
        for scene in recorded:
            (config_dir / f"{scene['name']}.yaml").write_text("max-num-seqs: 4\n")
            (config_dir / f"{scene['name']}.env").write_text("VLLM_API_KEY=\n")
        fact_path.write_text(json.dumps({"scenes": {s["name"]: {"definition": s} for s in recorded}}))
        settings = {
            "new_scenes": [definition("realtime", realtime_port, tmp_path / "models", quantization="gptq")],
            "restore_tasks": str(REPO / "playbooks" / "tasks" / "rollout-restore.yml"),
            "ansible_python_interpreter": sys.executable, "vllm_fleet_flavour": "cpu",
            "vllm_fleet_service_manager": "none", "vllm_fleet_install_dir": str(install_dir),
            "vllm_fleet_scene_config_dir": str(config_dir), "vllm_fleet_model_dir": str(tmp_path / "models"),
            "vllm_fleet_verify_dir": str(verify_dir), "vllm_verify_report_dir": str(reports),
            "vllm_state_fact_path": str(fact_path), "vllm_state_snapshot_dir": str(snapshot_dir),
            "vllm_verify_health_timeout": 30, "vllm_scenes_ready_timeout": 30,
            # The controller has no service user: the load test drops to root's own identity instead.
            "vllm_fleet_user": "root", "vllm_fleet_group": "root", "vllm_fleet_data_dir": str(tmp_path),
            # The state module's paths, its scene units included, all under tmp_path.
            "_vllm_state_module_args": {"unit_prefix": "vllm-scene-", "config_dir": str(config_dir),
                                        "unit_dir": str(tmp_path / "units"),
                                        "release_link": str(install_dir / "current"),
                                        "model_dir": str(tmp_path / "models"), "fact_path": str(fact_path),
                                        "snapshot_dir": str(snapshot_dir), "systemd": False},
        }
        (tmp_path / "settings.json").write_text(json.dumps(settings))
        context = REPO / "playbooks" / "tasks" / "fleet-context.yml"
        (tmp_path / "play.yml").write_text(PLAY.replace("{context}", str(context)))
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory"}
        argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", f"{HOST},", "-c", "local",
                str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'settings.json'}"]
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert not (tmp_path / "rollback.in-progress.json").exists()
    assert (config_dir / "batch.yaml").read_text() == (config_dir / "realtime.yaml").read_text() == "max-num-seqs: 4\n"
    for name in ("realtime", "batch"):
        report = json.loads((reports / HOST / f"{name}.json").read_text())
        assert report["passed"] is True, report["reasons"]
        assert report["slo"]["targets"] == verify.DEFAULT_SLO["cpu"][name]
        assert json.loads((verify_dir / f"{name}.verdict.json").read_text())["passed"] is True
