"""The units of a host with two cards (GPU facts given as variables: a real 2x RTX 3090 capture), rendered by the role's
own template on the lab host, pass that host's systemd-analyze verify: one unit per card with gpus: all, each opening
only its own /dev/nvidiaN, and a tensor-parallel unit opening both."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import testinfra.host

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
sys.path[:0] = [str(SCENARIO.parent / "shared")]

from playbooks import run_playbook  # noqa: E402

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards  # noqa: E402

UNITS = "/tmp/vfl-per-gpu-units"
PLAYBOOK = REPO / "tests" / "data" / "playbooks" / "render-scene-units.yml"


def two_3090s() -> dict[str, object]:
    """The vllm_fleet_gpus fact the facts module makes from a real 2x RTX 3090 capture, without P2P between them."""
    spec = importlib.util.spec_from_file_location("vllm_fleet_gpu", REPO / "plugins" / "module_utils" / "vllm_fleet_gpu.py")
    assert spec and spec.loader
    gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu)
    smi = (REPO / "tests" / "data" / "nvidia" / "smi-2x-rtx3090.csv").read_text()
    return gpu.gpu_facts(gpu.CommandResult(0, smi, ""), None, [], None, cards.matchers(), None,
                         " \tGPU0\tGPU1\n GPU0\tX\tNS\n GPU1\tNS\tX\n")


def test_per_card_and_tensor_parallel_units_pass_systemd_analyze_verify(host: testinfra.host.Host,
                                                                         tmp_path: Path) -> None:
    """gpus: all gives realtime-gpu0 and -gpu1, each with its own card only; the TP scene opens both; every rendered
    unit passes systemd-analyze verify on the lab host (the release's vllm is its ExecStart)."""
    name = host.backend.get_hostname()
    extra = {"render_hosts": name, "render_dir": UNITS, "vllm_fleet_flavour": "cuda", "vllm_fleet_gpus": two_3090s(),
             "vllm_scenes_list": [{"name": "realtime", "gpus": "all"}, {"name": "pair", "preset": "batch",
                                                                          "gpus": [0, 1], "port": 8200}],
             "_vllm_scenes_release": {"name": "current", "path": "/opt/vllm/current"},
             "_vllm_scenes_installed": {"models": {}}}
    (tmp_path / "extra.json").write_text(json.dumps(extra))
    host.run(f"rm -rf {UNITS} && mkdir -p {UNITS}")
    result = run_playbook(PLAYBOOK.parent, "mvs", name, PLAYBOOK.name, "-e", f"@{tmp_path / 'extra.json'}")
    assert result.returncode == 0, result.stdout[-3000:]
    devices = {}
    for scene in ("realtime-gpu0", "realtime-gpu1", "pair"):
        unit = host.file(f"{UNITS}/vllm-scene-{scene}.service").content_string
        devices[scene] = re.findall(r"^DeviceAllow=/dev/(nvidia\d+) rw$", unit, re.M)
    assert devices == {"realtime-gpu0": ["nvidia0"], "realtime-gpu1": ["nvidia1"], "pair": ["nvidia0", "nvidia1"]}
    verified = host.run(f"systemd-analyze verify --man=no {UNITS}/*.service")
    assert verified.rc == 0, verified.stderr
    host.run(f"rm -rf {UNITS}")
