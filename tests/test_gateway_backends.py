"""Draining a GPU host at the gateway: `show stat` as HAProxy 2.6 prints it, and the module against a fake socket."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest
from ansible.module_utils.testing import patch_module_args

from conftest import REPO, load_as

haproxy = load_as("ansible.module_utils.vllm_fleet_haproxy", REPO / "plugins" / "module_utils" / "vllm_fleet_haproxy.py")
backends_module = load_as("ansible.modules.vllm_fleet_gateway_backends",
                          REPO / "plugins" / "modules" / "gateway_backends.py")
DATA = REPO / "tests" / "data" / "haproxy"
# Captured from HAProxy 2.6.12 (Debian 12) with servers gpu1:realtime, gpu2:realtime (down) and gpu1:batch, before
# and after `set server model_0/gpu1:realtime state drain`.
UP = (DATA / "show-stat-up.csv").read_text()
DRAINED = (DATA / "show-stat-drain.csv").read_text()


def test_host_servers_are_its_scenes_in_every_backend() -> None:
    """gpu1's servers are gpu1:<scene> in any backend; frontends, backends and other hosts are not."""
    rows = haproxy.parse_stat(UP)
    assert [(r["pxname"], r["svname"]) for r in haproxy.host_servers(rows, "gpu1")] == [
        ("model_0", "gpu1:realtime"), ("model_1", "gpu1:batch")]
    assert haproxy.host_servers(rows, "gpu") == []
    assert haproxy.commands(haproxy.host_servers(rows, "gpu1"), "drain") == [
        "set server model_0/gpu1:realtime state maint", "set server model_1/gpu1:batch state maint"]
    assert haproxy.commands(haproxy.host_servers(rows, "gpu1"), "ready")[0] == "set server model_0/gpu1:realtime state ready"


def test_states_and_requests_in_flight() -> None:
    """A partly drained host still needs draining, a drained one needs to be made ready; sessions are counted."""
    up, drained = (haproxy.host_servers(haproxy.parse_stat(text), "gpu1") for text in (UP, DRAINED))
    assert haproxy.needs_change(up, "drain") and not haproxy.needs_change(up, "ready")
    assert haproxy.needs_change(drained, "drain") and haproxy.needs_change(drained, "ready")
    assert haproxy.serving(up) and not haproxy.serving(drained)
    assert haproxy.in_flight([{"scur": "3"}, {"scur": ""}, {"scur": "2"}]) == 5
    with pytest.raises(ValueError):
        haproxy.parse_stat("No such command.\n")
    with pytest.raises(ValueError):
        haproxy.commands(up, "maint")


class FakeHAProxy:
    """A stats socket answering `show stat` from a capture and recording the commands it gets."""

    def __init__(self, path: Path, stat: str) -> None:
        """Listen on path; answer show stat with stat until a drain command, then with the drained capture."""
        self.path, self.stat, self.commands = path, stat, list[str]()
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(path))
        self.listener.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        """Answer one command per connection, as HAProxy's non-interactive mode does."""
        while True:
            connection, _ = self.listener.accept()
            with connection:
                command = connection.recv(4096).decode().strip()
                if command == "show stat":
                    connection.sendall(self.stat.encode())
                else:
                    self.commands.append(command)
                    self.stat = DRAINED if command.endswith("maint") else UP
                    connection.sendall(b"\n")


@pytest.fixture()
def fake(tmp_path: Path) -> Iterator[FakeHAProxy]:
    """A fake stats socket starting from the capture with every server up."""
    yield FakeHAProxy(tmp_path / "admin.sock", UP)


def run_main(capsys: pytest.CaptureFixture[str], **args: Any) -> Dict[str, Any]:
    """Run the module's main() with these arguments and return its JSON result."""
    with patch_module_args(args), pytest.raises(SystemExit):
        backends_module.main()
    return json.loads(capsys.readouterr().out)


def test_drain_sends_one_command_per_server(fake: FakeHAProxy, capsys: pytest.CaptureFixture[str]) -> None:
    """Draining gpu1 drains each of its servers, reports a change and nothing in flight."""
    result = run_main(capsys, socket=str(fake.path), host="gpu1", state="drain", timeout=5)
    assert fake.commands == ["set server model_0/gpu1:realtime state maint", "set server model_1/gpu1:batch state maint"]
    assert (result["changed"], result["servers"], result["in_flight"]) == (
        True, ["model_0/gpu1:realtime", "model_1/gpu1:batch"], 0)


def test_check_mode_sends_nothing(fake: FakeHAProxy, capsys: pytest.CaptureFixture[str]) -> None:
    """In check mode the module reports the change it would make and sends no command."""
    result = run_main(capsys, socket=str(fake.path), host="gpu1", state="drain", _ansible_check_mode=True)
    assert result["changed"] is True and fake.commands == []


def test_routed_says_whether_the_gateway_still_sends_the_host_new_requests(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """playbooks/tune.yml asks in check mode: a host with any server up is routed; a drained one is not."""
    up = run_main(capsys, socket=str(FakeHAProxy(tmp_path / "up.sock", UP).path), host="gpu1", state="drain",
                  _ansible_check_mode=True)
    maint = "\n".join(line.replace(",UP,", ",MAINT,") if ",gpu1:" in line else line for line in UP.splitlines())
    drained = run_main(capsys, socket=str(FakeHAProxy(tmp_path / "d.sock", maint).path), host="gpu1", state="drain",
                       _ansible_check_mode=True)
    assert (up["routed"], drained["routed"], drained["changed"]) == (True, False, False)


def test_ready_fails_when_a_scene_stays_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Putting back a host whose scene never passes its health check fails, naming the server and its state."""
    down = FakeHAProxy(tmp_path / "down.sock", UP)
    result = run_main(capsys, socket=str(down.path), host="gpu2", state="ready", timeout=1)
    assert result["failed"] is True
    assert "gpu2's scenes are not up at the gateway" in result["msg"] and "gpu2:realtime DOWN" in result["msg"]
    assert down.commands == ["set server model_0/gpu2:realtime state ready"]


def test_maxconn_is_set_where_a_scene_runs_another_number() -> None:
    """Ready sets each server's maxconn from its scene's max_num_seqs where show stat's slim differs; scenes without
    a number, or already at it, get no command."""
    servers = [{"pxname": "model_0", "svname": "gpu1:realtime", "slim": "16"},
               {"pxname": "model_1", "svname": "gpu1:batch", "slim": ""},
               {"pxname": "model_2", "svname": "gpu1:embed", "slim": ""}]
    assert haproxy.maxconn_commands(servers, {"realtime": 16, "batch": 64}) == ["set maxconn server model_1/gpu1:batch 64"]
    assert haproxy.maxconn_commands(servers, {}) == []


def test_ready_sets_maxconn_before_the_state(fake: FakeHAProxy, capsys: pytest.CaptureFixture[str]) -> None:
    """A host put back with its scenes' max_num_seqs gets them as maxconn, then its state."""
    result = run_main(capsys, socket=str(fake.path), host="gpu1", state="ready", timeout=5, maxconn={"realtime": 24})
    assert fake.commands == ["set maxconn server model_0/gpu1:realtime 24", "set server model_0/gpu1:realtime state ready",
                             "set server model_1/gpu1:batch state ready"]
    assert result["changed"] is True
