"""The vllm_scenes role's units for a host of several cards, rendered by Ansible on the controller from GPU facts given
as variables (parsed from real captures): one unit per card with gpus: all, each opening only its own /dev/nvidiaN on
its own port, a tensor-parallel unit opening both with NCCL's P2P off; systemd-analyze verifies and scores each."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, load_as

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards

gpu_utils = load_as("ansible.module_utils.vllm_fleet_gpu", REPO / "plugins" / "module_utils" / "vllm_fleet_gpu.py")
PLAYBOOK = REPO / "tests" / "data" / "playbooks" / "render-scene-units.yml"
NO_P2P = " \tGPU0\tGPU1\n GPU0\tX\tNS\n GPU1\tNS\tX\n"
MAX_EXPOSURE = 2.5  # the kit's bar for every unit it installs


def two_3090s() -> dict[str, Any]:
    """The vllm_fleet_gpus fact of a 2x RTX 3090 host without P2P, as the module makes it from real captures."""
    smi = (REPO / "tests" / "data" / "nvidia" / "smi-2x-rtx3090.csv").read_text()
    return gpu_utils.gpu_facts(gpu_utils.CommandResult(0, smi, ""), None, [], None, cards.matchers(), None, NO_P2P)


def render(tmp_path: Path, scenes: list[dict[str, Any]]) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Render the units of the scenes on the 2x3090 host; return them by scene and the resolved scenes."""
    release = tmp_path / "release"
    (release / "bin").mkdir(parents=True)
    (release / "bin" / "vllm").write_text("#!/bin/sh\n")
    (release / "bin" / "vllm").chmod(0o755)
    out = tmp_path / "units"
    out.mkdir()
    extra = {"render_dir": str(out), "ansible_python_interpreter": str(REPO / ".venv" / "bin" / "python"),
             "vllm_fleet_flavour": "cuda", "vllm_fleet_gpus": two_3090s(),
             "vllm_scenes_list": scenes, "_vllm_scenes_release": {"name": "r1", "path": str(release)},
             "_vllm_scenes_installed": {"models": {}},
             "vllm_model_list": [{"name": "qwen", "source": "hf", "repo": "Qwen/Qwen2.5-7B-Instruct-AWQ"}]}
    (tmp_path / "extra.json").write_text(json.dumps(extra))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp")}
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(PLAYBOOK),
            "-e", "render_hosts=localhost", "-e", f"@{tmp_path / 'extra.json'}"]
    run = subprocess.run(argv, cwd=REPO, env=env, text=True, capture_output=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    units = {p.name.removeprefix("vllm-scene-").removesuffix(".service"): p.read_text() for p in out.glob("*.service")}
    return units, json.loads((out / "scenes.json").read_text())


def guard_rules(tmp_path: Path) -> list[str]:
    """Return the rule lines of the rendered loopback guard."""
    return [line.strip() for line in (tmp_path / "units" / "loopback-guard.nft").read_text().splitlines()
            if "skuid" in line]


def devices(unit: str) -> list[str]:
    """Return the DeviceAllow lines of a unit."""
    return re.findall(r"^DeviceAllow=(.*)$", unit, re.M)


def environment(unit: str) -> dict[str, str]:
    """Return a unit's Environment= pairs."""
    return dict(pair.split("=", 1) for pair in re.findall(r'^Environment="(.*)"$', unit, re.M))


def test_gpus_all_renders_one_unit_per_card(tmp_path: Path) -> None:
    """realtime with gpus: all on two cards: realtime-gpu0 on 8000 opens /dev/nvidia0 only, realtime-gpu1 on 8001
    /dev/nvidia1 only; CUDA counts the cards in nvidia-smi's (PCI) order; each unit passes systemd-analyze verify and
    scores at most 2.5."""
    units, resolved = render(tmp_path, [{"name": "realtime", "gpus": "all", "api_key_var": "vault_realtime_key"}])
    assert [(s["name"], s["port"], s["gpus"]) for s in resolved] == [("realtime-gpu0", 8000, [0]),
                                                                     ("realtime-gpu1", 8001, [1])]
    for index in (0, 1):
        unit = units[f"realtime-gpu{index}"]
        assert devices(unit) == ["/dev/nvidiactl rw", f"/dev/nvidia{index} rw", "char-nvidia-uvm rw",
                                 "char-nvidia-caps r"]
        env = environment(unit)
        assert (env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"]) == (str(index), "PCI_BUS_ID")
        assert not set(env) & {"NCCL_P2P_DISABLE", "NCCL_SOCKET_IFNAME"} and "DevicePolicy=closed" in unit
        # vLLM's own bound on the sequences one request may ask for (n, best_of): the kit's, not 16,384.
        assert env["VLLM_MAX_N_SEQUENCES"] == "4"
        # The ingress, never the scene, closes an idle connection: the scene keeps one far longer than vLLM's 5 s.
        assert int(env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]) >= 600
        # Its own user, and the guard loaded before it starts.
        assert f"User=vllm-realtime-gpu{index}\n" in unit and "Wants=vllm-fleet-scenes-guard.service" in unit
    assert guard_rules(tmp_path) == [
        f'meta skuid "vllm-realtime-gpu{index}" meta l4proto {{ tcp, udp }} th dport != {8000 + index} '
        "th dport < 32768 reject" for index in (0, 1)]
    verify(tmp_path)


def test_tensor_parallel_unit_opens_both_cards_without_p2p(tmp_path: Path) -> None:
    """A scene over both cards opens both, NCCL copies through the host (no P2P on GeForce cards), and NCCL and Gloo
    bootstrap on loopback, the only addresses the unit may reach."""
    units, resolved = render(tmp_path, [{"name": "realtime", "gpus": [0, 1]}])
    assert resolved[0]["engine_args"]["tensor-parallel-size"] == 2
    assert resolved[0]["engine_args"]["disable-custom-all-reduce"] is True
    unit = units["realtime"]
    assert [d for d in devices(unit) if d.startswith("/dev/nvidia")] == ["/dev/nvidiactl rw", "/dev/nvidia0 rw",
                                                                          "/dev/nvidia1 rw"]
    assert environment(unit)["NCCL_P2P_DISABLE"] == "1" and environment(unit)["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert (environment(unit)["NCCL_SOCKET_IFNAME"], environment(unit)["GLOO_SOCKET_IFNAME"]) == ("lo", "lo")
    assert "IPAddressAllow=localhost\nIPAddressDeny=any" in unit
    verify(tmp_path)


def verify(tmp_path: Path) -> None:
    """Run systemd-analyze verify and security on every rendered unit."""
    if not Path("/usr/bin/systemd-analyze").exists():
        pytest.fail("systemd-analyze is missing: tools/install-host-packages installs systemd")
    for path in sorted((tmp_path / "units").glob("*.service")):
        checked = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)], text=True, capture_output=True,
                                 check=False)
        problems = [line for line in checked.stderr.splitlines() if "nobody" not in line]
        assert checked.returncode == 0 and not problems, (path.name, checked.stderr)
        scored = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(path)], text=True,
                                capture_output=True, check=False)
        level = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", scored.stdout)
        assert level and float(level.group(1)) <= MAX_EXPOSURE, (path.name, scored.stdout[-500:])
