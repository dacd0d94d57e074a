#!/usr/bin/env bash
# The real-GPU proof of the cuda flavour (docs/gpu-proof.md), one step per call on the GPU host, from the repo root:
#   facts                     the GPU facts module on this host, named by the hardware registry, and the raw
#                             nvidia-smi link query, P2P matrix and topology it reads (test data for tests/data/nvidia)
#   metrics                   the kit's textfile collector (lib/vllm_fleet/host_metrics.py) on this host's real cards,
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
#                             reports straight into $OUT/tune (what a cut-off call wrote still comes back)
#   gateway-pack GPU GW       ON THE CONTROLLER, with `make lab` up: the kit's HAProxy configs as the lab rendered them
#                             (GPU: the lab GPU host's address, GW: the gateway's), moved to this one host's loopback,
#                             into .gpu-gateway/, and the controller's haproxy binary and its libraries into .gpu-tools/
#   gateway                   after converge: the gateway and the ingress (those configs) in front of realtime; vllm
#                             bench serve directly and through the gateway's TLS port, alternately, GATEWAY_RUNS times
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
STORE=${HOME:-}/.cache/vllm-fleet/compile-cache  # the role's default store: the controller is this host
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
lab_file() {  # lab_file ADDRESS PATH: a file of a lab host, as root over SSH
  ssh -i "$LAB_KEYS/id_ed25519" -o UserKnownHostsFile="$LAB_KEYS/known_hosts" -o StrictHostKeyChecking=yes "root@$1" cat "$2"
}
GATEWAY_LOAD=(--backend=openai-chat --endpoint=/v1/chat/completions --dataset-name=random --random-input-len=512
  --random-output-len=128 --num-prompts=480 --max-concurrency=16 --ignore-eos --request-rate=inf
  --percentile-metrics=ttft,tpot,e2el --metric-percentiles=50,99)

bench_gateway() {  # bench_gateway NAME URL KEY SEED: vllm bench serve against URL, its JSON into $STATE/bench-NAME.json
  OPENAI_API_KEY=$3 SSL_CERT_FILE=$PWD/.gpu-gateway/client-ca.pem HF_HUB_OFFLINE=1 /opt/vllm/current/bin/vllm bench serve \
    "${GATEWAY_LOAD[@]}" --base-url="$2" --model=qwen2.5-7b-random --tokenizer="$MODEL" --seed="$4" --save-result \
    --result-dir="$STATE" --result-filename="bench-$1.json" >"$STATE/bench-$1.log" 2>&1
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
    timed "tune-$2" ansible-playbook "${INVENTORY[@]}" playbooks/tune.yml -e @inventory/extra-vars/gpu-proof-tune.yml \
      -e "$scenes" -e vllm_tune_report_dir="$OUT/tune" -e vllm_verify_report_dir="$STATE/tune-verify-$2"
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
    for file in haproxy.cfg tls.pem fleet-ca.pem client.pem; do lab_file "$3" "/etc/vllm-gateway/$file" >".gpu-gateway/gateway-$file"; done
    cp /var/lib/vllm-fleet-lab/pki/lab/ca.crt .gpu-gateway/client-ca.pem
    .venv/bin/python -c 'import sys; from pathlib import Path; sys.path.insert(0, "tools"); from lab_vault import lab_secrets
print(lab_secrets(Path("inventory/lab/group_vars/gateways/vault.yml"))["vault_lab_gateway_key_lab_user"])' >.gpu-gateway/user.key
    # One GPU host on loopback: its ingress at 127.0.0.2, the gateway at 127.0.0.3, the proof's model and realtime's
    # max_num_seqs (16 in the cuda preset); the other lab hosts' servers and batch go.
    sed -i -e "s/$2/127.0.0.2/g" -e "s/$3/127.0.0.3/g" -e 's#/etc/vllm-ingress/#@DIR@/ingress-#g' \
      -e 's#/etc/vllm-gateway/#@DIR@/gateway-#g' -e 's#/run/vllm-\(ingress\|gateway\)/#@RUN@/\1-#g' \
      -e 's/tiny-qwen2/qwen2.5-7b-random/g' -e 's/maxconn [0-9]*/maxconn 16/' .gpu-gateway/*haproxy.cfg
    sed -i -e '/^ *server /{/127\.0\.0\.2:.*realtime/!d}' .gpu-gateway/gateway-haproxy.cfg
    grep -n "bind\|server \|nbthread\|maxconn" .gpu-gateway/*haproxy.cfg
    ;;
  gateway)
    wait_healthy realtime 8000 cold && engine_lines realtime
    run_dir=$STATE/haproxy && mkdir -p "$run_dir" && cp .gpu-gateway/* "$run_dir/" && chmod 600 "$run_dir"/*
    sed -i -e "s#@DIR@#$run_dir#g" -e "s#@RUN@#$run_dir#g" "$run_dir"/*haproxy.cfg
    scene_key=$(sed -n 's/^VLLM_API_KEY=//p' /etc/vllm/scenes/realtime.env)
    user_key=$(cat "$run_dir/user.key")
    # The gateway's certificate names the lab gateway: the client reaches it by that name, here on loopback.
    gateway_name=$(openssl x509 -noout -ext subjectAltName -in "$run_dir/gateway-tls.pem" | grep -o 'DNS:[^,]*' | head -1 | cut -c5-)
    grep -q " $gateway_name\$" /etc/hosts || echo "127.0.0.3 $gateway_name" >>/etc/hosts
    export LD_LIBRARY_PATH=$PWD/.gpu-tools/haproxy/lib
    for part in ingress gateway; do
      .gpu-tools/haproxy/haproxy -c -f "$run_dir/$part-haproxy.cfg" >>"$STATE/haproxy-check.log" 2>&1 || { cat "$STATE/haproxy-check.log"; exit 1; }
      SCENE_KEY_REALTIME=$scene_key .gpu-tools/haproxy/haproxy -f "$run_dir/$part-haproxy.cfg" >"$STATE/haproxy-$part.log" 2>&1 &
      echo $! >"$STATE/haproxy-$part.pid"
    done
    unset LD_LIBRARY_PATH
    sleep 3
    for key in "$user_key" wrong-key-0123456789abcdef0123456789ab; do
      echo "GET /v1/models through the gateway: $(curl -s -o /dev/null -w '%{http_code}' --cacert "$run_dir/client-ca.pem" \
        -H "Authorization: Bearer $key" "https://$gateway_name/v1/models")" | tee -a "$STATE/summary.txt"
    done
    for run in $(seq 1 "${GATEWAY_RUNS:-5}"); do
      bench_gateway "direct-$run" http://127.0.0.1:8000 "$scene_key" "$run" || echo "direct run $run failed" | tee -a "$STATE/summary.txt"
      bench_gateway "gateway-$run" "https://$gateway_name" "$user_key" "$run" || echo "gateway run $run failed" | tee -a "$STATE/summary.txt"
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
  facts)
    ansible_tools
    nvidia-smi "--query-gpu=index,pci.device_id,pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max" \
      --format=csv,noheader,nounits >"$STATE/smi-links.csv" 2>&1
    nvidia-smi topo -p2p r >"$STATE/topo-p2p-r.txt" 2>&1
    nvidia-smi topo -m >"$STATE/topo-m.txt" 2>&1
    timed facts ansible "${INVENTORY[@]}" gpu_hosts -m vllm_fleet_gpu_facts -a 'profiles={{ {} | vllm_fleet_card_matchers }}'
    timed plan-facts ansible-playbook "${INVENTORY[@]}" playbooks/plan.yml "${PER_GPU[@]}"
    cat "$STATE/smi-links.csv" "$STATE/topo-p2p-r.txt" "$STATE/topo-m.txt" "$STATE/facts.log"
    pack facts
    ;;
  metrics)
    python3 - "$STATE/host-metrics.json" <<'PY'
import json, subprocess, sys
sys.path.insert(0, "lib")
from vllm_fleet import monitoring
rows = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total,compute_cap,pci.device_id",
                       "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True).stdout
gpus = [{"index": int(i), "name": n.strip(), "memory_total_mib": int(m), "compute_capability": c.strip(),
         "pci_id": p.strip().lower()} for i, n, m, c, p in (r.split(",") for r in rows.strip().splitlines())]
limits = monitoring.gpu_limits({"gpus": gpus}, [{"gpus": [g["index"] for g in gpus], "engine_args": {}}])
json.dump({"nvidia_smi": "nvidia-smi", "gpus": limits}, open(sys.argv[1], "w"), indent=2)
PY
    cat "$STATE/host-metrics.json"
    nvidia-smi "--query-gpu=$(python3 -c 'import sys; sys.path.insert(0, "lib/vllm_fleet"); import host_metrics; print(",".join(host_metrics.QUERY_FIELDS))')" \
      --format=csv,noheader,nounits >"$STATE/metrics-query.csv" 2>&1
    for run in 1 2 3 4 5; do
      start=$(now)
      python3 -I lib/vllm_fleet/host_metrics.py --config "$STATE/host-metrics.json" --out "$STATE/vllm_fleet.prom"
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
    sed -n '2,11p' "$0"
    exit 2
    ;;
esac
