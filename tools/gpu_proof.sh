#!/usr/bin/env bash
# The real-GPU proof of the cuda flavour (docs/gpu-proof.md), one step per call on the GPU host, from the repo root:
#   facts                     the GPU facts module on this host, named by the hardware registry, and the raw
#                             nvidia-smi link query, P2P matrix and topology it reads (test data for tests/data/nvidia)
#   metrics                   the kit's textfile collector (roles/vllm_host_metrics/files/host_metrics.py) on this host's real cards,
#                             with their registry temperature limit and a 0.90 plan: its output (promtool checks it on
#                             the controller), the raw query it makes (test data), and its run time over 5 runs
#   per-gpu                   as converge, with one scene per card (gpus: all, inventory/extra-vars/gpu-proof-per-gpu.yml):
#                             site.yml renders realtime-gpu0's unit (DeviceAllow of its own card), which starts cold
#   per-gpu-serve             realtime-gpu0: wait for it, its unit and vLLM's lines, plan and verify at 16
#   receive DIR               keep one carried chunk-NN of the offline wheelhouse (tools/offline_wheelhouse.py) on the host
#   converge [EXTRA...]       reassemble the wheelhouse, write the random 7B AWQ model, site.yml, plan, start realtime
#                             cold (EXTRA: ansible-playbook arguments, e.g. -e @inventory/extra-vars/FILE.yml)
#   serve                     realtime: cold start time, verify at concurrency 16 and 1, site.yml again, a warm restart
#   batch                     batch in place of realtime: site.yml, plan, cold start, verify at 64, a warm restart
#   compile-cache [EXTRA...]  the fleet compile cache, after converge with the same EXTRA: realtime's cold start is
#                             host A; site.yml packs and publishes its bundle; the cache moved aside is host B, which
#                             site.yml seeds from the bundle; host B's first start, timed against A's; with
#                             GPU_PROOF_EXTRAS=1 also a warm restart and host B's cache without flashinfer
#                             (GPU_PROOF_DEADLINE: seconds into the step after which it stops waiting, 575)
#   tune-start NAME PORT...   start each scene in turn, the next once the one before has sized its KV cache and
#                             captured its CUDA graphs (vLLM sizes its KV cache from the memory it measures while
#                             profiling: another scene's allocations must not come and go meanwhile), then wait for all
#   tune NAME...              playbooks/tune.yml over these scenes (-e @inventory/extra-vars/gpu-proof-tune.yml), its
#                             reports and Ansible's time-stamped log straight into $OUT/tune (what a cut-off call
#                             wrote still comes back; TUNE_EXTRA: more ansible-playbook arguments, e.g. a lower
#                             ceiling where the device time left is short: "-e vllm_tune_max_concurrency=64")
#   gateway-pack GPU GW [GPU2]  ON THE CONTROLLER, with `make lab` up: the kit's HAProxy configs as the lab rendered
#                             them (GPU: the lab GPU host's address, GW: the gateway's), moved to this one host's loopback,
#                             into .gpu-gateway/, and the controller's haproxy binary and its libraries into .gpu-tools/;
#                             GPU2, a second lab GPU host's address: its ingress too (moved to 127.0.0.4), and a gateway
#                             config with both hosts' realtime servers (pair-gateway-haproxy.cfg), for tp2-versus
#   gateway                   after converge: the gateway and the ingress (those configs) in front of realtime; vllm
#                             bench serve directly and through the gateway's TLS port, alternately, GATEWAY_RUNS times
# Tensor parallel on a host of two cards (inventory/extra-vars/gpu-proof-tp2.yml: realtime-tp2 over GPUs 0 and 1,
# realtime-gpu0 and realtime-gpu1 one per card; NVLink multicast off in what these steps start, see multicast_off):
#   tp2                       after receive: both cards' facts (the facts module; nvidia-smi's link query, P2P matrix,
#                             topology and NVLink status), the wheelhouse, the model, site.yml and plan.yml (the split
#                             plan) with those extra vars; start realtime-tp2 cold with NCCL_DEBUG=INFO and wait for it
#   tp2-serve                 realtime-tp2: wait for it; its unit's and its processes' NCCL settings, vLLM's and NCCL's
#                             own lines, the planner's KV tokens against vLLM's; plan and verify at concurrency 16 and 64
#   tp2-versus-start          realtime-tp2 loaded at 16 and 64 (vllm bench serve, directly and, with gateway-pack's
#                             configs, through the gateway); stop it; start realtime-gpu0, then realtime-gpu1 once the
#                             first has settled, and wait for both
#   tp2-versus                realtime-gpu0 and realtime-gpu1 loaded at 16 and 64: through the gateway (both behind it,
#                             with gateway-pack's GPU2) and directly, the load split in half; both layouts' output
#                             tokens/s, TPOT and TTFT p50/p99 into $OUT/tp2-versus.json and $OUT/tp2-versus.md
#                             (VERSUS_WAVES: prompts per request in flight, 20; GPU_PROOF_DEADLINE as for compile-cache)
# Each step leaves its logs and reports in $OUT/<step>.tar.gz and prints a short summary.
set -uo pipefail

OUT=${OUT:-/root/gpu-proof-out}
STATE=/root/gpu-proof-state
WHEELS=/root/gpu-wheels
MODEL=/root/models/qwen2.5-7b-awq-random
INVENTORY=(-i inventory/gpu-proof)
BATCH=(-e @inventory/extra-vars/gpu-proof-batch.yml)
PER_GPU=(-e @inventory/extra-vars/gpu-proof-per-gpu.yml)
export LC_ALL=C.UTF-8 ANSIBLE_CACHE_PLUGIN=ansible.builtin.memory ANSIBLE_NOCOLOR=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$STATE"

ansible_tools() {  # ansible-core from the carried wheels (.whl), for this shell
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
}

reassemble_wheels() {  # the carried chunks into the wheelhouse, once, checked by sha256
  [ -d "$WHEELS.parts" ] || return 0
  sh "$WHEELS.parts/chunk-00/reassemble.sh" "$WHEELS" >"$STATE/reassemble.log" 2>&1 || { tail "$STATE/reassemble.log"; return 1; }
  rm -rf "$WHEELS.parts"
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

start_scene() {  # start_scene NAME [PHASE]: start it from its rendered unit and note when (log scene-NAME[-PHASE].log)
  now >"$STATE/$1.started"
  python3 tools/run_scene.py start "$1" --log "$STATE/scene-$1${2:+-$2}.log"
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

# The fleet compile cache (compile-cache step).
CACHE=/var/lib/vllm/cache/realtime
STORE=${VLLM_FLEET_STATE_DIR:-${HOME:-}/.local/share/vllm-fleet}/compile-cache  # the role's default store: the controller is this host
ASIDE=/var/lib/vllm-host-a

healthy() {  # healthy NAME PORT LABEL: wait for /health until GPU_PROOF_DEADLINE (575) s into this step; seconds into $STATE/LABEL.seconds
  local looks=0
  until curl -sf -o /dev/null "http://127.0.0.1:$2/health"; do
    sleep 0.5; looks=$((looks + 1))
    python3 tools/run_scene.py status "$1" >/dev/null || { echo "$1 exited ($3)" | tee -a "$STATE/summary.txt"; return 1; }
    (( SECONDS < ${GPU_PROOF_DEADLINE:-575} )) || { echo "$1 gave up waiting ($3)" | tee -a "$STATE/summary.txt"; return 1; }
  done
  since "$(cat "$STATE/$1.started")" >"$STATE/$3.seconds"
  echo "$1 $3 start to healthy: $(cat "$STATE/$3.seconds") s$( ((looks)) || echo ' (healthy at the first look: at most)')" \
    | tee -a "$STATE/summary.txt"
}

settled() {  # settled NAME PORT: wait until its GPU memory settles (CUDA graphs captured) or it answers, by the deadline
  until grep -q "Graph capturing finished" "$STATE/scene-$1.log" 2>/dev/null \
      || curl -sf -o /dev/null "http://127.0.0.1:$2/health"; do
    sleep 1
    python3 tools/run_scene.py status "$1" >/dev/null || { echo "$1 exited (settling)" | tee -a "$STATE/summary.txt"; return 1; }
    (( SECONDS < ${GPU_PROOF_DEADLINE:-575} )) || { echo "$1 gave up settling" | tee -a "$STATE/summary.txt"; return 1; }
  done
  echo "$1 settled (KV cache sized, graphs captured): $(since "$(cat "$STATE/$1.started")") s" | tee -a "$STATE/summary.txt"
}

compile_lines() {  # compile_lines LOG LABEL: vLLM's compile and cache lines of one start, verbatim (cut at 400 chars)
  echo "-- $2: vLLM's compile and cache lines" >>"$STATE/summary.txt"
  grep -E "non-default args|Resolved architecture|modelinfos|inspect|torch.compile|Compiling a graph|Directly load|saved AOT|Cache the graph|Dynamo bytecode|Using cache directory|init engine|[Ff]lash[Ii]nfer|JIT|jit|Graph capturing|Model loading took|Starting vLLM server" \
    "$STATE/$1.log" | grep -v "Initializing a V1 LLM engine" | cut -c1-400 | head -60 >>"$STATE/summary.txt"
}

tasks_said() {  # tasks_said LOG REGEX: the matching vllm_scenes tasks of an ansible-playbook log and their results
  echo "-- $1: what the compile-cache tasks printed" >>"$STATE/summary.txt"
  awk -v re="$2" '/^TASK \[/ { on = ($0 ~ ("^TASK \\[vllm_scenes : (" re ")")) } on && NF' "$STATE/$1.log" \
    | cut -c1-900 >>"$STATE/summary.txt"
}

store_listing() {  # store_listing: the controller's bundle store, each index entry and each bundle's parts
  echo "-- the store $STORE" >>"$STATE/summary.txt"
  ls -la "$STORE" >>"$STATE/summary.txt" 2>&1
  for entry in "$STORE"/*.json; do
    [ -f "$entry" ] || continue
    python3 -c 'import json, sys; e = json.load(open(sys.argv[1])); k = e.pop("key")
print(json.dumps(e, sort_keys=True)); print("key:", json.dumps(k, sort_keys=True))' "$entry" >>"$STATE/summary.txt"
    zstd -dc "$STORE/$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["archive"])' "$entry")" \
      | tar --warning=no-unknown-keyword -tvf - | awk '{ n = split($6, p, "/"); k = (p[1] == "vllm" && n > 2 ? p[1] "/" p[2] : p[1]); if ($1 !~ /^d/) { s[k] += $3; f[k]++ } }
          END { for (k in s) printf "  %10.1f MiB %6d files  %s\n", s[k] / 1048576, f[k], k }' | sort -k4 >>"$STATE/summary.txt"
  done
}

outside_cache() {  # outside_cache: files written since realtime's start outside its cache (where a 2nd host has none)
  find /var/lib/vllm /run /tmp /root -xdev -newer "$STATE/realtime.started" -type f 2>/dev/null \
    | grep -v -e "^$CACHE/" -e '^/tmp/site/' -e "^$STATE/" -e '^/root/gpu-wheels' \
    | awk -F/ '{ print "/" $2 "/" $3 "/" $4 "/" $5 "/" $6 }' | sort | uniq -c | sort -rn | head -40
}

stop_scene() {  # stop_scene NAME: stop it; its runtime directory goes, as systemd removes it at every stop
  python3 tools/run_scene.py stop "$1" && rm -rf "/run/vllm-scene-$1"
}

jit_caches() {  # jit_caches LABEL: the JIT caches vLLM's kernels leave: FlashInfer's and humming's in the scene's cache
  # (the unit's FLASHINFER_WORKSPACE_BASE, HUMMING_CACHE_DIR, HUMMING_TMP_DIR), vLLM's model-class inspection
  # (vllm/modelinfos, bundled since 33f2c43), and whatever still lands in the home
  { echo "-- $1: JIT cache files (mtime, bytes, path)"; du -sh "$CACHE"/* "$CACHE"/vllm/* /var/lib/vllm/.[!.]* 2>/dev/null
    find "$CACHE/flashinfer" "$CACHE/humming" "$CACHE/vllm/modelinfos" /var/lib/vllm/.humming /var/lib/vllm/.cache -type f \
      -printf '%TY-%Tm-%Td %TT %10s %p\n' 2>/dev/null | sort -k4 | head -60; } >>"$STATE/summary.txt"
}

checkpoint() { cp "$STATE/summary.txt" "$OUT/summary.txt"; cp "$STATE"/scene-*.log "$OUT/" 2>/dev/null || true; }

pack() {  # pack STEP: everything so far into $OUT/STEP.tar.gz, and the summary beside it
  cp "$STATE/summary.txt" "$OUT/summary.txt"
  tar -czf "$OUT/$1.tar.gz" -C "$STATE" --exclude='*.started' .
}

# The gateway's overhead (gateway-pack, gateway).
LAB_KEYS=/var/lib/vllm-fleet-lab/labs/lab
GW_RUN=$STATE/haproxy  # the HAProxy configs and keys while a gateway runs (gateway, tp2-versus*)
lab_file() {  # lab_file ADDRESS PATH: a file of a lab host, as root over SSH
  ssh -i "$LAB_KEYS/id_ed25519" -o UserKnownHostsFile="$LAB_KEYS/known_hosts" -o StrictHostKeyChecking=yes "root@$1" cat "$2"
}
gateway_configs() {  # gateway_configs: gateway-pack's HAProxy configs and keys into $GW_RUN, root-only, with its paths
  rm -rf "$GW_RUN" && mkdir -p "$GW_RUN" && cp .gpu-gateway/* "$GW_RUN/" && chmod 600 "$GW_RUN"/*
  sed -i -e "s#@DIR@#$GW_RUN#g" -e "s#@RUN@#$GW_RUN#g" "$GW_RUN"/*haproxy.cfg
}
gateway_hostname() {  # gateway_hostname: the name the gateway's certificate gives it, resolved to its loopback address
  # (127.0.0.3): the client reaches the lab gateway by that name, here on one host
  local name
  name=$(openssl x509 -noout -ext subjectAltName -in "$GW_RUN/gateway-tls.pem" | grep -o 'DNS:[^,]*' | head -1 | cut -c5-)
  grep -q " $name\$" /etc/hosts || echo "127.0.0.3 $name" >>/etc/hosts
  echo "$name"
}
GATEWAY_LOAD=(--backend=openai-chat --endpoint=/v1/chat/completions --dataset-name=random --random-input-len=512
  --random-output-len=128 --num-prompts=480 --max-concurrency=16 --ignore-eos --request-rate=inf
  --percentile-metrics=ttft,tpot,e2el --metric-percentiles=50,99)

bench_gateway() {  # bench_gateway NAME URL KEY SEED: vllm bench serve against URL, its JSON into $STATE/bench-NAME.json
  OPENAI_API_KEY=$3 SSL_CERT_FILE=$PWD/.gpu-gateway/client-ca.pem HF_HUB_OFFLINE=1 /opt/vllm/current/bin/vllm bench serve \
    "${GATEWAY_LOAD[@]}" --base-url="$2" --model=qwen2.5-7b-random --tokenizer="$MODEL" --seed="$4" --save-result \
    --result-dir="$STATE" --result-filename="bench-$1.json" >"$STATE/bench-$1.log" 2>&1
}

# Tensor parallel on two cards (tp2, tp2-serve, tp2-versus-start, tp2-versus).
TP2=(-e @inventory/extra-vars/gpu-proof-tp2.yml)
# verify.yml verifies every scene the host resolves; during tp2-serve only realtime-tp2 runs.
TP2_ONLY=(-e '{"vllm_verify_scenes": "{{ vllm_scenes_resolved | selectattr(\"name\", \"equalto\", \"realtime-tp2\") | list }}"}')
PAIR=(realtime-gpu0 realtime-gpu1)
# docs/sources.md's shape, as the gateway step's load; bench_versus adds each run's concurrency, prompts and seed.
VERSUS_LOAD=(--backend=openai-chat --endpoint=/v1/chat/completions --dataset-name=random --random-input-len=512
  --random-output-len=128 --ignore-eos --request-rate=inf --percentile-metrics=ttft,tpot,e2el --metric-percentiles=50,99)
TP2_VLLM_LINES="world_size=|nccl==|NCCL|[Cc]ustom [Aa]ll.?[Rr]educe|custom_all_reduce|P2P|p2p|SymmMem|[Ss]ymmetric memory"
TP2_VLLM_LINES+="|[Aa]ll.?[Rr]educe|[Mm]ulticast|Model loading took|Available KV cache memory|GPU KV cache size"
TP2_VLLM_LINES+="|Maximum concurrency|Graph capturing finished|init engine|Starting vLLM server"
TP2_NCCL_LINES="NCCL version|NCCL_[A-Z_]+ set|Bootstrap|NVLS|nvls|[Mm]ulticast|Channel 00/|via |CUMEM|cuMem|Init COMPLETE|WARN"

multicast_off() {  # multicast_off: NVLink multicast off in NCCL, PyTorch and NVSHMEM for every program this shell starts
  # The device's two-card kinds set these for every program (KINDS.md: a program using multicast can put the host's
  # shared GPUs out of service) and tools/run_scene.py passes NCCL_*, NVSHMEM_* and TORCH_SYMM_MEM_* on to a scene;
  # set here too in case a shell lacks them. The kit sets none of them; gpu-proof-tp2.yml puts them in realtime-tp2's unit.
  echo "-- multicast settings of the step's shell before it set them: $(env | grep -E \
    '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' | sort | tr '\n' ' ')" >>"$STATE/summary.txt"
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
}

gpu_captures() {  # gpu_captures: nvidia-smi's link query, P2P matrix and topology, as the facts module reads them
  nvidia-smi "--query-gpu=index,pci.device_id,pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max" \
    --format=csv,noheader,nounits >"$STATE/smi-links.csv" 2>&1
  nvidia-smi topo -p2p r >"$STATE/topo-p2p-r.txt" 2>&1
  nvidia-smi topo -m >"$STATE/topo-m.txt" 2>&1
}

scene_setting() {  # scene_setting NAME KEY: one top-level setting of the scene's rendered vLLM config (port, max-num-seqs)
  sed -n "s/^$2: //p" "/etc/vllm/scenes/$1.yaml"
}

scene_key() {  # scene_key NAME: the scene's API key from its root-only env file ('' for a scene without one)
  sed -n 's/^VLLM_API_KEY=//p' "/etc/vllm/scenes/$1.env" 2>/dev/null
}

scene_environ() {  # scene_environ NAME: each process of the scene (its process group) and its NCCL, PyTorch, NVSHMEM,
  # all-reduce and device variables, from /proc/PID/environ (what it started with; vLLM's workers start after vLLM's
  # own settings, so theirs show them too)
  python3 - "$(cat "/run/vllm-fleet-scenes/$1.pid")" <<'PY'
import sys
from pathlib import Path
group = int(sys.argv[1])
keys = ("NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_", "VLLM_ALLREDUCE", "VLLM_FLASHINFER_ALLREDUCE", "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER")
for stat in sorted(Path("/proc").glob("[0-9]*/stat"), key=lambda path: int(path.parent.name)):
    try:
        if int(stat.read_text().rsplit(") ", 1)[1].split()[2]) != group:
            continue
        comm = (stat.parent / "comm").read_text().strip()
        env = [item.decode(errors="replace") for item in (stat.parent / "environ").read_bytes().split(b"\0")]
    except (OSError, IndexError, ValueError):
        continue
    chosen = sorted(item for item in env if item.startswith(keys))
    print(f"pid {stat.parent.name} ({comm}): {' '.join(chosen) or 'none of them'}")
PY
}

kv_check() {  # kv_check NAME PLAN: the planner's KV tokens for NAME (the table of $STATE/PLAN.log) against vLLM's
  # "GPU KV cache size" of its start (+: the planner says more)
  python3 - "$1" "$STATE/$2.log" "$STATE/scene-$1.log" <<'PY' | tee -a "$STATE/summary.txt"
import re
import sys
name, plan_log, scene_log = sys.argv[1:]
planned = None
for line in open(plan_log, encoding="utf-8", errors="replace"):
    cells = [cell.strip() for cell in line.split("|")]
    if len(cells) > 9 and cells[1] == name and cells[8].replace(",", "").isdigit():
        planned = int(cells[8].replace(",", ""))
        break
found = re.search(r"GPU KV cache size: ([\d,]+) tokens", open(scene_log, encoding="utf-8", errors="replace").read())
measured = int(found.group(1).replace(",", "")) if found else None
if planned is None or measured is None:
    print(f"{name}: KV check impossible: planner {planned}, vLLM {measured}")
else:
    diff = (planned - measured) / measured * 100
    print(f"{name}: planner {planned:,} KV tokens, vLLM {measured:,}: {diff:+.2f}% "
          f"({'within' if abs(diff) <= 5 else 'OUTSIDE'} 5%)")
PY
}

tp2_settings() {  # tp2_settings: what the kit rendered for realtime-tp2: its unit's environment and devices, its config
  cp /etc/systemd/system/vllm-scene-realtime-tp2.service /etc/vllm/scenes/realtime-tp2.yaml "$STATE/" 2>>"$STATE/summary.txt"
  { echo "-- realtime-tp2's unit (the kit's NCCL choice: NCCL_P2P_DISABLE=1 only where the cards have no P2P)"
    grep -E '^(Environment=|DevicePolicy=|DeviceAllow=)' /etc/systemd/system/vllm-scene-realtime-tp2.service
    echo "-- realtime-tp2's vLLM config"
    grep -E '^(tensor-parallel-size|disable-custom-all-reduce|gpu-memory-utilization|max-num-seqs|max-model-len|port):' \
      /etc/vllm/scenes/realtime-tp2.yaml; } >>"$STATE/summary.txt" 2>&1
}

tp2_report() {  # tp2_report: once realtime-tp2 answers (once a state): what its processes run with, vLLM's and NCCL's
  # own lines, the cards' memory, the planner's KV tokens against vLLM's
  [ -f "$STATE/tp2-report.done" ] && return 0
  local log=$STATE/scene-realtime-tp2.log
  { echo "-- realtime-tp2's processes: NCCL, PyTorch, NVSHMEM, all-reduce and device variables (/proc/PID/environ)"
    scene_environ realtime-tp2
    echo "-- realtime-tp2: vLLM's own lines"
    grep -o -E "'(tensor_parallel_size|disable_custom_all_reduce|gpu_memory_utilization|max_num_seqs)': [^,}]*" "$log" | sort -u
    grep -o -E "tensor_parallel_size=[0-9]+" "$log" | sort -u
    grep -v -e "NCCL INFO" -e "NCCL WARN" -e "Initializing a V1 LLM engine" -e "non-default args" "$log" \
      | grep -E "$TP2_VLLM_LINES" | cut -c1-400 | head -80
    echo "-- realtime-tp2: NCCL's own lines (NCCL_DEBUG=INFO, set by the tp2 step for this start only)"
    grep -E "NCCL (INFO|WARN)" "$log" | grep -E "$TP2_NCCL_LINES" | cut -c1-300 | head -60
    echo "-- the cards' memory with realtime-tp2 idle"
    nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader; } >>"$STATE/summary.txt" 2>&1
  kv_check realtime-tp2 plan-tp2
  touch "$STATE/tp2-report.done"
}

pair_up() {  # pair_up: realtime-gpu0, then realtime-gpu1 once the first has settled (KV cache sized, graphs captured:
  # a start's memory profile must not see another's allocations come and go), then both answering, by the deadline
  local name
  for name in "${PAIR[@]}"; do
    python3 tools/run_scene.py status "$name" >/dev/null 2>&1 || start_scene "$name"
    settled "$name" "$(scene_setting "$name" port)" || return 1
  done
  for name in "${PAIR[@]}"; do
    [ -f "$STATE/cold-$name.seconds" ] && continue
    healthy "$name" "$(scene_setting "$name" port)" "cold-$name" || return 1
    engine_lines "$name"
    kv_check "$name" plan-tp2
  done
}

served() {  # served NAME: the requests the scene has finished (vLLM's own counter, all reasons)
  curl -s "http://127.0.0.1:$(scene_setting "$1" port)/metrics" | awk '/^vllm:request_success_total/ { s += $NF } END { print s + 0 }'
}

bench_versus() {  # bench_versus NAME URL KEY CONCURRENCY SEED PROMPTS [ARG...]: vllm bench serve, with as many warmups
  # as requests in flight, its JSON into $STATE/versus-NAME.json and one line into the summary
  local tls=()
  [ "${2#https:}" = "$2" ] || tls=(SSL_CERT_FILE="$PWD/.gpu-gateway/client-ca.pem")
  env OPENAI_API_KEY="$3" HF_HUB_OFFLINE=1 "${tls[@]}" /opt/vllm/current/bin/vllm bench serve "${VERSUS_LOAD[@]}" \
    --base-url="$2" --model=qwen2.5-7b-random --tokenizer="$MODEL" --max-concurrency="$4" --num-warmups="$4" \
    --seed="$5" --num-prompts="$6" --save-result --result-dir="$STATE" --result-filename="versus-$1.json" "${@:7}" \
    >"$STATE/versus-$1.log" 2>&1 \
    || { echo "versus-$1 failed: $(tail -3 "$STATE/versus-$1.log" | tr '\n' ' ' | cut -c1-300)" | tee -a "$STATE/summary.txt"
         return 1; }
  python3 - "$1" "$STATE/versus-$1.json" <<'PY' | tee -a "$STATE/summary.txt"
import json
import sys
r = json.load(open(sys.argv[2]))
print(f"versus-{sys.argv[1]}: {r['output_throughput']:.1f} output tok/s, TPOT p50/p99 {r['median_tpot_ms']:.2f}/"
      f"{r['p99_tpot_ms']:.2f} ms, TTFT p50/p99 {r['median_ttft_ms']:.1f}/{r['p99_ttft_ms']:.1f} ms, "
      f"{r['completed']} of {r.get('num_prompts', '?')} completed in {r['duration']:.1f} s")
PY
}

GW_NAME=""
gateway_up() {  # gateway_up GATEWAY_CFG INGRESS_CFG=ADDRESS=SCENE...: gateway-pack's HAProxy configs on this host's
  # loopback: each ingress bound to its own ADDRESS (the lab renders 0.0.0.0; HAProxy binds with SO_REUSEPORT, so two on
  # one port would share its connections) and sending its realtime server to SCENE's port; the gateway's servers
  # taking as many requests at once as the scenes run (their max-num-seqs, as the kit renders it), and its per-user
  # limit on requests at once lifted (a load of 64 would meet the lab user's 64 whenever a finished request's stream
  # outlives the client's next request by a moment; the proof measures the layouts, not that limit)
  local spec cfg address scene seqs part
  gateway_configs
  export LD_LIBRARY_PATH=$PWD/.gpu-tools/haproxy/lib
  for spec in "${@:2}"; do
    IFS='=' read -r cfg address scene <<<"$spec"
    seqs=$(scene_setting "$scene" max-num-seqs)
    part=up-${cfg%-haproxy.cfg}
    sed -e "s/^\( *bind \)[^ ]*:9443/\1$address:9443/" \
      -e "s/^\( *server realtime \)[^ ]*/\1127.0.0.1:$(scene_setting "$scene" port)/" "$GW_RUN/$cfg" >"$GW_RUN/$part.cfg"
    .gpu-tools/haproxy/haproxy -c -f "$GW_RUN/$part.cfg" >>"$STATE/haproxy-check.log" 2>&1 \
      || { echo "$part: haproxy -c failed" | tee -a "$STATE/summary.txt"; unset LD_LIBRARY_PATH; return 1; }
    SCENE_KEY_REALTIME=$(scene_key "$scene") .gpu-tools/haproxy/haproxy -f "$GW_RUN/$part.cfg" >"$STATE/haproxy-$part.log" 2>&1 &
    echo $! >"$STATE/haproxy-$part.pid"
  done
  sed -e "s/^\( *server [^ ]*:realtime .* maxconn \)[0-9]*/\1$seqs/" -e 's/sc_conn_cur(0) gt [0-9]*/sc_conn_cur(0) gt 1024/' \
    "$GW_RUN/$1" >"$GW_RUN/up-gateway.cfg"
  .gpu-tools/haproxy/haproxy -c -f "$GW_RUN/up-gateway.cfg" >>"$STATE/haproxy-check.log" 2>&1 \
    || { echo "up-gateway: haproxy -c failed" | tee -a "$STATE/summary.txt"; unset LD_LIBRARY_PATH; return 1; }
  VLLM_FLEET_KEY_DIGEST_KEY=$(cat "$GW_RUN/gateway-digest.key") .gpu-tools/haproxy/haproxy -f "$GW_RUN/up-gateway.cfg" \
    >"$STATE/haproxy-up-gateway.log" 2>&1 &
  echo $! >"$STATE/haproxy-up-gateway.pid"
  unset LD_LIBRARY_PATH
  GW_NAME=$(gateway_hostname)
  local states="" tries
  for tries in $(seq 1 30); do  # the health checks (rise 2, every second) put each scene in rotation
    states=$(gateway_servers)
    [ "$(grep -o '=UP\b' <<<"$states" | wc -l)" -ge $(( $# - 1 )) ] && break
    sleep 1
  done
  { echo "-- gateway up after ${tries} s: $states ($(grep -E '^ *server ' "$GW_RUN/up-gateway.cfg" | sed 's/ ssl .*maxconn/ ... maxconn/' | tr -s ' ' | tr '\n' ';'))"
    echo "GET /v1/models through the gateway: $(curl -s -o /dev/null -w '%{http_code}' --cacert "$GW_RUN/client-ca.pem" \
      -H "Authorization: Bearer $(cat "$GW_RUN/user.key")" "https://$GW_NAME/v1/models")"; } | tee -a "$STATE/summary.txt"
}

gateway_servers() {  # gateway_servers: each scene server of the gateway and its state (HAProxy's show stat, admin socket)
  python3 - "$GW_RUN/gateway-admin.sock" <<'PY' 2>/dev/null
import socket
import sys
with socket.socket(socket.AF_UNIX) as admin:
    admin.connect(sys.argv[1])
    admin.sendall(b"show stat\n")
    data = b""
    while chunk := admin.recv(65536):
        data += chunk
rows = [line.split(",") for line in data.decode().splitlines() if line and not line.startswith("#")]
print(" ".join(f"{r[1]}={r[17].replace(' ', '_')}" for r in rows
               if len(r) > 17 and r[0].startswith("model_") and r[1] not in ("FRONTEND", "BACKEND")))
PY
}

gateway_down() {  # gateway_down: stop the HAProxy processes gateway_up started; keep their configs, not the keys
  local pid
  for pid in "$STATE"/haproxy-up-*.pid; do
    [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null
    rm -f "$pid"
  done
  cp "$GW_RUN"/up-*.cfg "$STATE/" 2>/dev/null
  rm -rf "$GW_RUN"
}

case ${1:-} in
  tune-start)
    shift
    scenes=("$@")
    while (( $# >= 2 )); do
      python3 tools/run_scene.py status "$1" >/dev/null 2>&1 || start_scene "$1"
      settled "$1" "$2" || { pack tune-start; exit 1; }
      shift 2
    done
    set -- "${scenes[@]}"
    while (( $# >= 2 )); do
      healthy "$1" "$2" "start-$1" || { pack tune-start; exit 1; }
      grep -E "GPU KV cache size|Maximum concurrency|non-default args|Graph capturing finished" "$STATE/scene-$1.log" \
        | cut -c1-400 >>"$STATE/summary.txt"
      shift 2
    done
    pack tune-start
    ;;
  tune)
    ansible_tools
    scenes=$(python3 -c 'import json, sys; print(json.dumps({"vllm_tune_scenes": sys.argv[1:]}))' "${@:2}")
    # Ansible's log file stamps each task with the time (the reports time each candidate; the log also the restore
    # and verification). It goes straight into $OUT, as the reports do, so a cut-off call still brings it back.
    mkdir -p "$OUT/tune"
    read -ra tune_extra <<<"${TUNE_EXTRA:-}"
    ANSIBLE_LOG_PATH="$OUT/tune/tune-$2.stamped.log" timed "tune-$2" ansible-playbook "${INVENTORY[@]}" playbooks/tune.yml \
      -e @inventory/extra-vars/gpu-proof-tune.yml -e "$scenes" -e vllm_tune_report_dir="$OUT/tune" \
      -e vllm_verify_report_dir="$STATE/tune-verify-$2" "${tune_extra[@]}"
    cp -r /var/lib/vllm/verify/tune "$STATE/tune-results-$2" 2>/dev/null  # each step's vllm bench serve result
    grep -E "msg: .*(within the SLO|no setting)" "$STATE/tune-$2.log" | cut -c1-400 >>"$STATE/summary.txt"
    echo "-- step took ${SECONDS} s" >>"$STATE/summary.txt"
    pack "tune-$2"
    ;;
  gateway-pack)
    rm -rf .gpu-gateway .gpu-tools/haproxy && mkdir -p .gpu-gateway .gpu-tools/haproxy/lib
    cp /usr/sbin/haproxy .gpu-tools/haproxy/
    # Every library but the C runtime's, which the GPU host's newer glibc and libstdc++ provide.
    ldd /usr/sbin/haproxy | awk '$3 ~ /^\// { print $3 }' | grep -v -e '/libc\.so' -e '/libm\.so' -e '/libstdc++' -e '/libgcc_s' \
      | xargs -I{} cp -L {} .gpu-tools/haproxy/lib/
    for file in haproxy.cfg server.pem fleet-ca.pem; do lab_file "$2" "/etc/vllm-ingress/$file" >".gpu-gateway/ingress-$file"; done
    for file in haproxy.cfg tls.pem fleet-ca.pem client.pem repeated_field.lua; do
      lab_file "$3" "/etc/vllm-gateway/$file" >".gpu-gateway/gateway-$file"
    done
    # The key of the users' key digests, which the gateway's unit reads from its secrets file.
    lab_file "$3" /etc/vllm-gateway/secrets.env | sed -n 's/^VLLM_FLEET_KEY_DIGEST_KEY=//p' >.gpu-gateway/gateway-digest.key
    moves=(-e "s/$2/127.0.0.2/g" -e "s/$3/127.0.0.3/g")
    if [ -n "${4:-}" ]; then  # a second GPU host's ingress (tp2-versus: two scenes behind the gateway), at 127.0.0.4
      for file in haproxy.cfg server.pem fleet-ca.pem; do lab_file "$4" "/etc/vllm-ingress/$file" >".gpu-gateway/ingress2-$file"; done
      sed -i -e 's#/etc/vllm-ingress/#@DIR@/ingress2-#g' -e 's#/run/vllm-ingress/#@RUN@/ingress2-#g' .gpu-gateway/ingress2-haproxy.cfg
      moves+=(-e "s/${4//./\\.}/127.0.0.4/g")
    fi
    cp /var/lib/vllm-fleet-lab/pki/lab/ca.crt .gpu-gateway/client-ca.pem
    .venv/bin/python -c 'import sys; from pathlib import Path; sys.path.insert(0, "tools"); from lab_vault import lab_secrets
print(lab_secrets(Path("inventory/lab/group_vars/gateways/vault.yml"))["vault_lab_gateway_key_lab_user"])' >.gpu-gateway/user.key
    # One GPU host on loopback: its ingress at 127.0.0.2, the gateway at 127.0.0.3, the proof's model and realtime's
    # max_num_seqs (16 in the cuda preset); the other lab hosts' servers and batch go. On loopback the gateway reaches
    # an ingress from 127.0.0.1, not its own address, so the ingresses admit loopback sources.
    sed -i "${moves[@]}" -e 's#/etc/vllm-ingress/#@DIR@/ingress-#g' \
      -e 's#/etc/vllm-gateway/#@DIR@/gateway-#g' -e 's#/run/vllm-\(ingress\|gateway\)/#@RUN@/\1-#g' \
      -e 's/tiny-qwen2/qwen2.5-7b-random/g' -e '/^ *server /s/maxconn [0-9]*/maxconn 16/' \
      -e 's/reject unless { src [^}]*}/reject unless { src 127.0.0.0\/8 }/' .gpu-gateway/*haproxy.cfg
    # tp2-versus: both GPU hosts' realtime servers (tp2-versus sets their maxconn from its scenes when it starts it).
    [ -z "${4:-}" ] || sed -e '/^ *server /{/127\.0\.0\.[24]:.*realtime/!d}' .gpu-gateway/gateway-haproxy.cfg \
      >.gpu-gateway/pair-gateway-haproxy.cfg
    sed -i -e '/^ *server /{/127\.0\.0\.2:.*realtime/!d}' .gpu-gateway/gateway-haproxy.cfg
    grep -n "bind\|server \|nbthread\|maxconn" .gpu-gateway/*haproxy.cfg
    ;;
  gateway)
    wait_healthy realtime 8000 cold && engine_lines realtime
    gateway_configs && run_dir=$GW_RUN
    scene_key=$(scene_key realtime)
    user_key=$(cat "$run_dir/user.key")
    gateway_name=$(gateway_hostname)
    export LD_LIBRARY_PATH=$PWD/.gpu-tools/haproxy/lib
    for part in ingress gateway; do
      .gpu-tools/haproxy/haproxy -c -f "$run_dir/$part-haproxy.cfg" >>"$STATE/haproxy-check.log" 2>&1 || { cat "$STATE/haproxy-check.log"; exit 1; }
      SCENE_KEY_REALTIME=$scene_key VLLM_FLEET_KEY_DIGEST_KEY=$(cat "$run_dir/gateway-digest.key") \
        .gpu-tools/haproxy/haproxy -f "$run_dir/$part-haproxy.cfg" >"$STATE/haproxy-$part.log" 2>&1 &
      echo $! >"$STATE/haproxy-$part.pid"
    done
    unset LD_LIBRARY_PATH
    sleep 3
    for key in "$user_key" wrong-key-0123456789abcdef0123456789ab; do
      echo "GET /v1/models through the gateway: $(curl -s -o /dev/null -w '%{http_code}' --cacert "$run_dir/client-ca.pem" \
        -H "Authorization: Bearer $key" "https://$gateway_name/v1/models")" | tee -a "$STATE/summary.txt"
    done
    # Each run's prompts are new to the scene: a gateway run on its direct run's seed would find them in the prefix cache.
    for run in $(seq 1 "${GATEWAY_RUNS:-5}"); do
      bench_gateway "direct-$run" http://127.0.0.1:8000 "$scene_key" "$run" || echo "direct run $run failed" | tee -a "$STATE/summary.txt"
      bench_gateway "gateway-$run" "https://$gateway_name" "$user_key" "$((1000 + run))" || echo "gateway run $run failed" | tee -a "$STATE/summary.txt"
      (( SECONDS < ${GPU_PROOF_DEADLINE:-540} )) || break
    done
    python3 - "$STATE" <<'PY' | tee -a "$STATE/summary.txt"
import json, statistics, sys
from pathlib import Path
runs = {path.stem.removeprefix("bench-"): json.loads(path.read_text()) for path in sorted(Path(sys.argv[1]).glob("bench-*-*.json"))}
for path in ("direct", "gateway"):
    mine = [result for name, result in runs.items() if name.startswith(path + "-")]
    for metric in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "output_throughput", "completed"):
        values = [result[metric] for result in mine]
        print(f"{path} {metric}: median {statistics.median(values):.2f} of {[round(v, 2) for v in values]}")
PY
    for part in gateway ingress; do kill "$(cat "$STATE/haproxy-$part.pid")" 2>/dev/null; done
    cp "$run_dir"/*haproxy.cfg "$STATE/" && rm -rf "$run_dir"
    pack gateway
    ;;
  tp2)
    ansible_tools
    multicast_off
    reassemble_wheels || exit 1
    # Both cards as the facts module reads them, and nvidia-smi's raw answers (test data for tests/data/nvidia).
    gpu_captures
    nvidia-smi nvlink --status >"$STATE/nvlink-status.txt" 2>&1
    nvidia-smi --query-gpu=index,name,pci.bus_id,pci.device_id,memory.total,compute_cap,driver_version \
      --format=csv,noheader >"$STATE/gpus.csv" 2>&1
    timed facts-tp2 ansible "${INVENTORY[@]}" gpu_hosts -m vllm.fleet.gpu_facts -a 'profiles={{ {} | vllm.fleet.cards_matchers }}'
    for file in gpus.csv smi-links.csv topo-p2p-r.txt topo-m.txt nvlink-status.txt facts-tp2.log; do
      { echo "-- $file"; cat "$STATE/$file"; } >>"$STATE/summary.txt"
      cp "$STATE/$file" "$OUT/tp2-$file"
    done
    [ -d "$MODEL" ] || timed model python3 tools/make_random_awq.py --out "$MODEL" --name qwen2.5-7b-awq-random
    timed site-tp2 ansible-playbook "${INVENTORY[@]}" site.yml --skip-tags host_metrics,verify "${TP2[@]}" \
      || { tail -40 "$STATE/site-tp2.log" >>"$STATE/summary.txt"; pack tp2; exit 1; }
    timed plan-tp2 ansible-playbook "${INVENTORY[@]}" playbooks/plan.yml "${TP2[@]}"
    { echo "-- the plan (plan.yml with gpu-proof-tp2.yml)"
      grep -E '\| (scene|realtime-)|: model |split over|GiB: budget|conc: |floor: |problem|refuse' "$STATE/plan-tp2.log" | cut -c1-300
    } >>"$STATE/summary.txt"
    tp2_settings
    # NCCL says which transport, channels and NVLS setting it chose only at INFO: for this start, not in the kit's unit.
    python3 tools/run_scene.py status realtime-tp2 >/dev/null 2>&1 || ( export NCCL_DEBUG=INFO; start_scene realtime-tp2 )
    checkpoint
    healthy realtime-tp2 "$(scene_setting realtime-tp2 port)" cold-tp2 && tp2_report
    echo "-- step took ${SECONDS} s" >>"$STATE/summary.txt"
    pack tp2
    ;;
  tp2-serve)
    ansible_tools
    multicast_off
    port=$(scene_setting realtime-tp2 port)
    [ -f "$STATE/cold-tp2.seconds" ] || healthy realtime-tp2 "$port" cold-tp2 || { pack tp2-serve; exit 1; }
    tp2_report
    for concurrency in 16 64; do
      timed "verify-tp2-c$concurrency" verify "tp2-c$concurrency" "${TP2[@]}" "${TP2_ONLY[@]}" \
        -e "vllm_verify_bench_concurrency=$concurrency"
      cat "$STATE/reports-tp2-c$concurrency/summary.md" >>"$STATE/summary.txt" 2>&1
    done
    echo "-- step took ${SECONDS} s" >>"$STATE/summary.txt"
    pack tp2-serve
    ;;
  tp2-versus-start)
    multicast_off
    port=$(scene_setting realtime-tp2 port)
    [ -f "$STATE/cold-tp2.seconds" ] || healthy realtime-tp2 "$port" cold-tp2 || { pack tp2-versus-start; exit 1; }
    tp2_report
    # realtime-tp2 alone on the two cards; each run's prompts are new to the scene (prefix caching is on): directly
    # seed = concurrency, through the gateway 1000 + concurrency.
    if [ -f .gpu-gateway/gateway-haproxy.cfg ]; then
      gateway_up gateway-haproxy.cfg "ingress-haproxy.cfg=127.0.0.2=realtime-tp2" || GW_NAME=""
    else
      echo "no .gpu-gateway (gateway-pack): realtime-tp2 is loaded directly only" | tee -a "$STATE/summary.txt"
    fi
    for concurrency in 16 64; do
      bench_versus "tp2-direct-c$concurrency" "http://127.0.0.1:$port" "$(scene_key realtime-tp2)" "$concurrency" \
        "$concurrency" $(( ${VERSUS_WAVES:-20} * concurrency ))
      [ -z "$GW_NAME" ] || bench_versus "tp2-gateway-c$concurrency" "https://$GW_NAME" "$(cat .gpu-gateway/user.key)" \
        "$concurrency" $(( 1000 + concurrency )) $(( ${VERSUS_WAVES:-20} * concurrency ))
    done
    gateway_down
    # realtime-tp2 stops before the one-GPU scenes start cold: its workers spin on their queues while idle (vLLM's
    # default) and would take CPU from the other layout's API servers and client.
    stop_scene realtime-tp2
    checkpoint
    pair_up || { pack tp2-versus-start; exit 1; }
    echo "-- step took ${SECONDS} s" >>"$STATE/summary.txt"
    pack tp2-versus-start
    ;;
  tp2-versus)
    multicast_off
    pair_up || { pack tp2-versus; exit 1; }
    port0=$(scene_setting realtime-gpu0 port) && port1=$(scene_setting realtime-gpu1 port)
    # Both scenes behind the gateway, each on an ingress of its own as on two hosts: one client, the gateway's
    # least-connections balance (with prefix affinity: random prompts share no prefix).
    if [ -f .gpu-gateway/pair-gateway-haproxy.cfg ]; then
      if gateway_up pair-gateway-haproxy.cfg "ingress-haproxy.cfg=127.0.0.2=realtime-gpu0" \
          "ingress2-haproxy.cfg=127.0.0.4=realtime-gpu1"; then
        for concurrency in 16 64; do
          before0=$(served realtime-gpu0) && before1=$(served realtime-gpu1)
          bench_versus "pair-gateway-c$concurrency" "https://$GW_NAME" "$(cat .gpu-gateway/user.key)" "$concurrency" \
            $(( 1000 + concurrency )) $(( ${VERSUS_WAVES:-20} * concurrency ))
          echo "pair-gateway-c$concurrency: realtime-gpu0 finished $(( $(served realtime-gpu0) - before0 )) requests," \
            "realtime-gpu1 $(( $(served realtime-gpu1) - before1 )) (warmups included)" | tee -a "$STATE/summary.txt"
        done
      fi
      gateway_down
    else
      echo "no .gpu-gateway/pair-gateway-haproxy.cfg (gateway-pack with a second GPU host's address): no gateway arm" \
        | tee -a "$STATE/summary.txt"
    fi
    # The same load split in half over the two scenes at once, a client each, the requests pooled for the percentiles.
    for concurrency in 16 64; do
      bench_versus "pair-split-c$concurrency-gpu0" "http://127.0.0.1:$port0" "$(scene_key realtime-gpu0)" \
        $(( concurrency / 2 )) "$concurrency" $(( ${VERSUS_WAVES:-20} * concurrency / 2 )) --save-detailed &
      half0=$!
      bench_versus "pair-split-c$concurrency-gpu1" "http://127.0.0.1:$port1" "$(scene_key realtime-gpu1)" \
        $(( concurrency / 2 )) "$concurrency" $(( ${VERSUS_WAVES:-20} * concurrency / 2 )) --save-detailed &
      wait "$half0" $!
    done
    python3 - "$STATE" "${VERSUS_WAVES:-20}" <<'PY' | tee -a "$STATE/summary.txt"
import json
import sys
import time
from pathlib import Path

state, waves = Path(sys.argv[1]), int(sys.argv[2])
LAYOUTS = {"tp2": "one TP=2 scene (realtime-tp2, GPUs 0 and 1)",
           "pair": "two one-GPU scenes (realtime-gpu0, realtime-gpu1)"}
PATHS = {"gateway": "through the gateway", "direct": "direct"}


def percentile(values, q):
    """numpy's default (linear) percentile, as vllm bench serve computes its own."""
    values = sorted(values)
    if not values:
        return None
    k = (len(values) - 1) * q / 100
    low = int(k)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (k - low)


def load(name):
    path = state / f"versus-{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def single(r):
    prompts = r.get("num_prompts") or r["completed"]
    return {"output_tok_s": r["output_throughput"], "tpot_p50_ms": r["median_tpot_ms"], "tpot_p99_ms": r["p99_tpot_ms"],
            "ttft_p50_ms": r["median_ttft_ms"], "ttft_p99_ms": r["p99_ttft_ms"], "completed": r["completed"],
            "failed": r.get("failed", prompts - r["completed"]), "clients": 1}


def pooled(parts):
    """Two clients at once: tokens over the longer run; TPOT per request as vllm bench serve takes it (the time after
    the first token over the tokens after it), TTFT per request, both pooled over the two clients' requests."""
    tpots, ttfts, failed = [], [], 0
    for r in parts:
        for tokens, ttft, itl, error in zip(r["output_lens"], r["ttfts"], r["itls"], r["errors"]):
            if error or not tokens:
                failed += 1
                continue
            ttfts.append(ttft * 1000)
            if tokens > 1:
                tpots.append(sum(itl) / (tokens - 1) * 1000)
    return {"output_tok_s": sum(r["total_output_tokens"] for r in parts) / max(r["duration"] for r in parts),
            "tpot_p50_ms": percentile(tpots, 50), "tpot_p99_ms": percentile(tpots, 99),
            "ttft_p50_ms": percentile(ttfts, 50), "ttft_p99_ms": percentile(ttfts, 99),
            "completed": len(ttfts), "failed": failed, "clients": len(parts)}


rows = []
for concurrency in (16, 64):
    for path in PATHS:
        for layout in LAYOUTS:
            if layout == "pair" and path == "direct":
                names = [f"pair-split-c{concurrency}-gpu0", f"pair-split-c{concurrency}-gpu1"]
            else:
                names = [f"{layout}-{path}-c{concurrency}"]
            results = [load(name) for name in names]
            row = {"concurrency": concurrency, "layout": layout, "path": path, "runs": names}
            if all(results):
                row.update(single(results[0]) if len(results) == 1 else pooled(results))
            rows.append(row)


def cell(value, digits):
    return "-" if value is None else f"{value:,.{digits}f}"


lines = ["| concurrency | layout | path | output tok/s | TPOT p50 / p99 ms | TTFT p50 / p99 ms | completed / failed |",
         "|---:|---|---|---:|---|---|---|"]
for row in rows:
    path = PATHS[row["path"]] + (", the load split in half, a client each" if row.get("clients") == 2 else "")
    if "output_tok_s" not in row:
        lines.append(f"| {row['concurrency']} | {LAYOUTS[row['layout']]} | {path} | not run | | | |")
        continue
    lines.append(f"| {row['concurrency']} | {LAYOUTS[row['layout']]} | {path} | {cell(row['output_tok_s'], 0)} | "
                 f"{cell(row['tpot_p50_ms'], 2)} / {cell(row['tpot_p99_ms'], 2)} | "
                 f"{cell(row['ttft_p50_ms'], 1)} / {cell(row['ttft_p99_ms'], 1)} | {row['completed']} / {row['failed']} |")
ratios = []
for concurrency in (16, 64):
    for path in PATHS:
        tp2, pair = (next(r for r in rows if (r["concurrency"], r["path"], r["layout"]) == (concurrency, path, layout))
                     for layout in ("tp2", "pair"))
        if "output_tok_s" in tp2 and "output_tok_s" in pair:
            ratio = {"concurrency": concurrency, "path": path,
                     **{key: pair[key] / tp2[key] for key in ("output_tok_s", "tpot_p50_ms", "tpot_p99_ms")
                        if pair.get(key) and tp2.get(key)}}
            ratios.append(ratio)
            lines.append(f"\nconcurrency {concurrency}, {PATHS[path]}: two one-GPU scenes / one TP=2 scene = "
                         f"{ratio.get('output_tok_s', 0):.2f}x the output tokens/s, "
                         f"{ratio.get('tpot_p50_ms', 0):.2f}x the TPOT p50, {ratio.get('tpot_p99_ms', 0):.2f}x the TPOT p99")
gpus = (state / "gpus.csv").read_text().strip().splitlines() if (state / "gpus.csv").exists() else []
report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "gpus": gpus,
          "load": {"input_len": 512, "output_len": 128, "dataset": "random", "ignore_eos": True,
                   "prompts": f"{waves} x concurrency", "warmups": "concurrency"},
          "rows": rows, "ratios": ratios}
(state / "tp2-versus.json").write_text(json.dumps(report, indent=2) + "\n")
(state / "tp2-versus.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
    cp "$STATE/tp2-versus.json" "$STATE/tp2-versus.md" "$OUT/" 2>>"$STATE/summary.txt"
    echo "-- step took ${SECONDS} s" >>"$STATE/summary.txt"
    pack tp2-versus
    ;;
  facts)
    ansible_tools
    gpu_captures
    timed facts ansible "${INVENTORY[@]}" gpu_hosts -m vllm.fleet.gpu_facts -a 'profiles={{ {} | vllm.fleet.cards_matchers }}'
    timed plan-facts ansible-playbook "${INVENTORY[@]}" playbooks/plan.yml "${PER_GPU[@]}"
    cat "$STATE/smi-links.csv" "$STATE/topo-p2p-r.txt" "$STATE/topo-m.txt" "$STATE/facts.log"
    pack facts
    ;;
  metrics)
    PYTHONPATH=.ansible/collections python3 - "$STATE/host-metrics.json" <<'PY'
import json, subprocess, sys
from ansible_collections.vllm.fleet.plugins.plugin_utils import monitoring
rows = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total,compute_cap,pci.device_id",
                       "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True).stdout
gpus = [{"index": int(i), "name": n.strip(), "memory_total_mib": int(m), "compute_capability": c.strip(),
         "pci_id": p.strip().lower()} for i, n, m, c, p in (r.split(",") for r in rows.strip().splitlines())]
limits = monitoring.gpu_limits({"gpus": gpus}, [{"gpus": [g["index"] for g in gpus], "engine_args": {}}])
json.dump({"nvidia_smi": "nvidia-smi", "gpus": limits}, open(sys.argv[1], "w"), indent=2)
PY
    cat "$STATE/host-metrics.json"
    nvidia-smi "--query-gpu=$(PYTHONPATH=roles/vllm_host_metrics/files python3 -c 'import host_metrics; print(",".join(host_metrics.QUERY_FIELDS))')" \
      --format=csv,noheader,nounits >"$STATE/metrics-query.csv" 2>&1
    for run in 1 2 3 4 5; do
      start=$(now)
      python3 -I roles/vllm_host_metrics/files/host_metrics.py --config "$STATE/host-metrics.json" --out "$STATE/vllm_fleet.prom"
      echo "run $run: rc $? in $(since "$start") s" | tee -a "$STATE/summary.txt"
    done
    cp "$STATE/vllm_fleet.prom" "$STATE/metrics-query.csv" "$STATE/host-metrics.json" "$OUT/"
    cat "$STATE/metrics-query.csv" "$STATE/vllm_fleet.prom"
    pack metrics
    ;;
  per-gpu)
    ansible_tools
    reassemble_wheels || exit 1
    [ -d "$MODEL" ] || timed model python3 tools/make_random_awq.py --out "$MODEL" --name qwen2.5-7b-awq-random
    timed site-per-gpu ansible-playbook "${INVENTORY[@]}" site.yml --skip-tags host_metrics,verify "${PER_GPU[@]}"
    cp /etc/systemd/system/vllm-scene-realtime-gpu0.service "$STATE/" 2>>"$STATE/summary.txt"
    start_scene realtime-gpu0
    pack per-gpu
    ;;
  per-gpu-serve)
    ansible_tools
    wait_healthy realtime-gpu0 8000 cold && engine_lines realtime-gpu0
    grep -E "^(DevicePolicy|DeviceAllow|Environment=\"CUDA)" "$STATE/vllm-scene-realtime-gpu0.service" >>"$STATE/summary.txt"
    timed verify-per-gpu verify per-gpu "${PER_GPU[@]}"
    stop_scene realtime-gpu0
    pack per-gpu-serve
    ;;
  receive)
    mkdir -p "$WHEELS.parts" && cp -r "$2" "$WHEELS.parts/" && du -sh "$WHEELS.parts"
    ;;
  converge)
    ansible_tools
    reassemble_wheels || exit 1
    timed model python3 tools/make_random_awq.py --out "$MODEL" --name qwen2.5-7b-awq-random
    timed site-1 ansible-playbook "${INVENTORY[@]}" site.yml --skip-tags host_metrics,verify "${@:2}"
    timed plan-realtime ansible-playbook "${INVENTORY[@]}" playbooks/plan.yml "${@:2}"
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
  compile-cache)
    ansible_tools
    # A real host gets zstd from the vllm role's package list; this one installs no packages (vllm_system_packages: []).
    command -v zstd >/dev/null || { install -m 0755 .gpu-tools/zstd /usr/local/bin/zstd && echo "zstd: carried" >>"$STATE/summary.txt"; }
    SITE=(ansible-playbook "${INVENTORY[@]}" site.yml --skip-tags host_metrics,verify -v "${@:2}")
    # Host A: converge started realtime on an empty cache.
    healthy realtime 8000 cold-hostA || { pack compile-cache; exit 1; }
    compile_lines scene-realtime cold-hostA
    { echo "-- written outside $CACHE since the cold start"; outside_cache; } >>"$STATE/summary.txt"
    jit_caches cold-hostA
    timed site-share "${SITE[@]}"
    tasks_said site-share "Ask each scene|Name the bundles|Pack each|Bring each|Publish each|Record in each"
    store_listing
    checkpoint
    ls "$STORE"/*.json >/dev/null 2>&1 || { echo "no bundle published" | tee -a "$STATE/summary.txt"; pack compile-cache; exit 1; }
    # Host B: the same path, empty, and none of the service user's other caches (a second host has neither).
    stop_scene realtime
    mkdir -p "$ASIDE/home" && mv "$CACHE" "$ASIDE/realtime"
    find /var/lib/vllm -mindepth 1 -maxdepth 1 -name '.*' -exec mv -t "$ASIDE/home" {} +
    { echo "-- host B: /var/lib/vllm and its cache dir before site.yml"; ls -la /var/lib/vllm /var/lib/vllm/cache; } >>"$STATE/summary.txt" 2>&1
    timed site-seed "${SITE[@]}"
    tasks_said site-seed "Name each scene|Copy each|Unpack each|Remove the copied|Ask each scene|Name the bundles|Pack each"
    { echo "-- host B's cache, seeded: $(cat "$CACHE/.vllm-fleet-compile-cache")"; } >>"$STATE/summary.txt" 2>&1
    jit_caches seeded-hostB-before-start
    checkpoint
    start_scene realtime hostB
    healthy realtime 8000 seeded-hostB && compile_lines scene-realtime-hostB seeded-hostB
    { echo "-- written outside $CACHE since host B's start"; outside_cache; } >>"$STATE/summary.txt"
    jit_caches seeded-hostB-after-start
    python3 -c 'import sys; a, b = (float(open(f).read()) for f in sys.argv[1:]); print(f"host B / host A: {b:.1f} / {a:.1f} s = {b / a:.2f}x")' \
      "$STATE/cold-hostA.seconds" "$STATE/seeded-hostB.seconds" 2>/dev/null | tee -a "$STATE/summary.txt"
    checkpoint
    if [ "${GPU_PROOF_EXTRAS:-0}" = 1 ] && (( SECONDS < 480 )); then
      stop_scene realtime && start_scene realtime warm
      healthy realtime 8000 warm-restart && compile_lines scene-realtime-warm warm-restart
      checkpoint
    fi
    # What FlashInfer's JIT kernels alone are worth: the same cache without its flashinfer part, if time is left.
    if [ "${GPU_PROOF_EXTRAS:-0}" = 1 ] && (( SECONDS < 400 )) && [ -d "$CACHE/flashinfer" ]; then
      stop_scene realtime && mv "$CACHE/flashinfer" "$ASIDE/flashinfer-hostB"
      start_scene realtime no-flashinfer
      healthy realtime 8000 seeded-without-flashinfer && compile_lines scene-realtime-no-flashinfer seeded-without-flashinfer
    fi
    { echo "-- step took ${SECONDS} s"; ls -la /var/lib/vllm; du -sh "$ASIDE"/*; } >>"$STATE/summary.txt" 2>&1
    pack compile-cache
    ;;
  *)
    awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"
    exit 2
    ;;
esac
