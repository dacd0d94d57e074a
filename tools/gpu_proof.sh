#!/usr/bin/env bash
# The real-GPU proof of the cuda flavour (docs/gpu-proof.md), one step per call on the GPU host, from the repo root:
#   receive DIR   keep one carried chunk-NN of the offline wheelhouse (tools/offline_wheelhouse.py) on the host
#   converge      reassemble the wheelhouse, write the random 7B AWQ model, site.yml, plan, start realtime cold
#   serve         realtime: cold start time, verify at concurrency 16 and 1, site.yml again, a warm restart
#   batch         batch in place of realtime: site.yml, plan, cold start, verify at concurrency 64, a warm restart
# Each step leaves its logs and reports in $OUT/<step>.tar.gz and prints a short summary.
set -uo pipefail

OUT=${OUT:-/root/gpu-proof-out}
STATE=/root/gpu-proof-state
WHEELS=/root/gpu-wheels
MODEL=/root/models/qwen2.5-7b-awq-random
INVENTORY=(-i inventory/gpu-proof)
BATCH=(-e @inventory/extra-vars/gpu-proof-batch.yml)
export LC_ALL=C.UTF-8 ANSIBLE_CACHE_PLUGIN=ansible.builtin.memory ANSIBLE_NOCOLOR=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$STATE"

ansible_tools() {  # ansible-core from the carried wheels (.whl), for this shell
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
}

now() { date +%s.%N; }
since() { python3 -c "import sys; print(round($(now) - float(sys.argv[1]), 1))" "$1"; }

timed() {  # timed NAME COMMAND...: run, log to $STATE/NAME.log, record seconds and the exit code
  local started; started=$(now)
  "${@:2}" >"$STATE/$1.log" 2>&1
  local rc=$?
  echo "$1: rc=$rc $(since "$started") s$(grep -o 'changed=[0-9]*' "$STATE/$1.log" | sort -u | tr '\n' ' ' | sed 's/^/ /')" \
    | tee -a "$STATE/summary.txt"
  return $rc
}

start_scene() {  # start_scene NAME: start it from its rendered unit and note when
  now >"$STATE/$1.started"
  python3 tools/run_scene.py start "$1" --log "$STATE/scene-$1.log"
}

wait_healthy() {  # wait_healthy NAME PORT KIND: wait for /health, record the start time as KIND
  until curl -sf -o /dev/null "http://127.0.0.1:$2/health"; do
    sleep 0.5
    python3 tools/run_scene.py status "$1" >/dev/null || { echo "$1 exited" | tee -a "$STATE/summary.txt"; return 1; }
  done
  echo "$1 $3 start to healthy: $(since "$(cat "$STATE/$1.started")") s" | tee -a "$STATE/summary.txt"
}

engine_lines() {  # engine_lines NAME: vLLM's own memory and compile figures from the scene's log
  grep -E "Model loading took|Available KV cache memory|GPU KV cache size|Maximum concurrency|torch.compile|compile" \
    "$STATE/scene-$1.log" | tail -12 >>"$STATE/summary.txt"
}

verify() {  # verify NAME EXTRA...: plan and verify, reports into $STATE/reports-NAME
  ansible-playbook "${INVENTORY[@]}" playbooks/plan.yml playbooks/verify.yml \
    -e vllm_verify_report_dir="$STATE/reports-$1" "${@:2}"
}

pack() {  # pack STEP: everything so far into $OUT/STEP.tar.gz, and the summary beside it
  cp "$STATE/summary.txt" "$OUT/summary.txt"
  tar -czf "$OUT/$1.tar.gz" -C "$STATE" --exclude='*.started' .
}

case ${1:-} in
  receive)
    mkdir -p "$WHEELS.parts" && cp -r "$2" "$WHEELS.parts/" && du -sh "$WHEELS.parts"
    ;;
  converge)
    ansible_tools
    if [ -d "$WHEELS.parts" ]; then
      sh "$WHEELS.parts/chunk-00/reassemble.sh" "$WHEELS" >"$STATE/reassemble.log" 2>&1 || { tail "$STATE/reassemble.log"; exit 1; }
      rm -rf "$WHEELS.parts"
    fi
    timed model python3 tools/make_random_awq.py --out "$MODEL" --name qwen2.5-7b-awq-random
    timed site-1 ansible-playbook "${INVENTORY[@]}" site.yml --skip-tags host_metrics,verify
    timed plan-realtime ansible-playbook "${INVENTORY[@]}" playbooks/plan.yml
    start_scene realtime
    pack converge
    ;;
  serve)
    ansible_tools
    wait_healthy realtime 8000 cold && engine_lines realtime
    timed verify-c16 verify c16
    timed verify-c1 verify c1 -e vllm_verify_bench_concurrency=1 -e vllm_verify_bench_prompts=32 \
      -e '{"vllm_verify_slo_overrides": {"realtime": {"min_output_throughput": 100}}}'
    timed site-2 ansible-playbook "${INVENTORY[@]}" site.yml --skip-tags host_metrics,verify
    python3 tools/run_scene.py stop realtime && start_scene realtime && wait_healthy realtime 8000 warm
    pack serve
    ;;
  batch)
    ansible_tools
    python3 tools/run_scene.py stop realtime
    timed site-batch ansible-playbook "${INVENTORY[@]}" site.yml --skip-tags host_metrics,verify "${BATCH[@]}"
    timed plan-batch ansible-playbook "${INVENTORY[@]}" playbooks/plan.yml "${BATCH[@]}"
    start_scene batch && wait_healthy batch 8001 cold && engine_lines batch
    timed verify-c64 verify c64 "${BATCH[@]}"
    python3 tools/run_scene.py stop batch && start_scene batch && wait_healthy batch 8001 warm
    pack batch
    ;;
  *)
    sed -n '2,7p' "$0"
    exit 2
    ;;
esac
