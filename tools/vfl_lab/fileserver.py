"""The lab's file server: the controller's wheelhouse and models over HTTP, on an address only lab hosts reach."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .plan import FILES_ADDRESS, FILES_PORT, LabError
from .system import process_cmdline, run


def _state(state_dir: Path) -> Path:
    """Return the file recording the server's pid."""
    return state_dir / "fileserver.json"


def _ours(pid: int, root: Path) -> bool:
    """Tell whether pid is the http.server this lab started over root."""
    argv = process_cmdline(pid)
    return "http.server" in argv and str(root) in argv


def ensure(state_dir: Path) -> Path:
    """Serve <state_dir>/www on FILES_ADDRESS:FILES_PORT (an address on lo) unless already served; return the root."""
    root = state_dir / "www"
    root.mkdir(parents=True, exist_ok=True)
    state = _state(state_dir)
    if state.exists() and _ours(json.loads(state.read_text())["pid"], root):
        return root
    if f"inet {FILES_ADDRESS}/32" not in run(["ip", "-o", "addr", "show", "dev", "lo"]).stdout:
        run(["ip", "addr", "add", f"{FILES_ADDRESS}/32", "dev", "lo"])
    log = (state_dir / "fileserver.log").open("ab")
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(FILES_PORT), "--bind", FILES_ADDRESS,
                             "--directory", str(root)], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True, cwd="/")
    state.write_text(json.dumps({"pid": proc.pid}))
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((FILES_ADDRESS, FILES_PORT), timeout=1).close()
            return root
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise LabError(f"the lab file server did not start on {FILES_ADDRESS}:{FILES_PORT}: "
                               f"see {state_dir / 'fileserver.log'}") from None
            time.sleep(0.1)


def stop(state_dir: Path) -> None:
    """Stop the file server this lab started and remove its address."""
    state = _state(state_dir)
    if state.exists():
        pid = json.loads(state.read_text())["pid"]
        if _ours(pid, state_dir / "www"):
            os.kill(pid, signal.SIGTERM)
            while _ours(pid, state_dir / "www"):
                time.sleep(0.05)
        state.unlink()
    run(["ip", "addr", "del", f"{FILES_ADDRESS}/32", "dev", "lo"], check=False)
