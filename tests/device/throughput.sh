#!/usr/bin/env bash
# Queue throughput on the GPU host (issue #20 item 5): `mmh3 serve` with the real engine on the
# shared full-size random checkpoints, weights resident (--preload), a queue of N identical t2va
# jobs enqueued at once over HTTP and followed on the SSE stream by tests/device/server_client.py
# (queue + report), the GPU sampled by nvidia-smi every 50 ms meanwhile:
#
#   (prefix)  the carried serving stack (.carry/server) at /tmp/mmh3-server, as server.sh
#   (build)   build-device/ with the serving stack (lib.sh device_build) or the session's prebuilt one
#   (models)  the folder engine.sh --part gen makes (made here when missing)
#   (adapter) a random rank-128 Turbo-shaped adapter in $M/loras (mmh3-gen-tiny lora, as engine.sh
#             --part fewstep writes it)
#   (probe)   whether `mmh3 serve` has --no-pipeline (else only the default queue runs: a SKIP line)
#   (queue pipeline=off|on) per queue: nvidia-smi in the background, mmh3 serve --preload started,
#             JOBS (default 4) jobs of 1344x768x124 with --sampler $SAMPLER (default turbo4-768p) and
#             the adapter, seeds 1..N, enqueued back to back; then serve stopped and the report:
#             per job enqueue -> claim, -> first step, -> first generation_preview (and its delay after
#             the first step), -> done, the stored timings; between consecutive jobs the GPU idle
#             stretch (nvidia-smi samples under 5 % from the previous job's mux start - 1 s to the
#             next job's first step) and the gap from the events (previous job's GPU work ends ->
#             next job's starts, < 0 when they overlap); one line per queue:
#   RESULT throughput pipeline=on|off jobs=N clips_per_hour=… gpu_busy=… idle_gap_max_s=…
#          idle_gap_mean_s=… first_preview_after_step_s=… cold_start_s=… event_gap_max_s=…
#             (clips per hour = N / (last done - first enqueue) x 3600; gpu_busy = share of the
#             samples over that span at >= 5 %; cold start = serve start -> the first clip done,
#             weights loaded from local disk included)
#
#   here:    bash tests/device/prepare.sh && bash tests/device/prepare_engine.sh &&
#            bash tests/device/prepare_server.sh && bash tests/device/prepare_build.sh
#   device:  bash tests/device/session.sh --steps throughput:420 (carry: tests/device/carry.sh 3);
#            alone: bash tests/device/throughput.sh [--budget S] (default 380; ~2.5 min a queue at
#            turbo4; JOBS=N SAMPLER=turbo8-768p FAST=1 change the queue)
#   dry run here (CPU stand-ins: tiny checkpoints, 64x64, 22 frames, 2 forwards, --device cpu, no
#            nvidia-smi: the GPU columns say n/a; without .carry/server the host's PostgreSQL and
#            nginx that build/ was configured with): MMH3_DEVICE_DRY=1 bash tests/device/throughput.sh
#
# Every step has its own timeout; logs in $OUT: throughput.log (everything), throughput_summary.txt,
# throughput_<label>.json (the recorded events and rows), throughput_<label>_gpu.csv (the samples),
# throughput_<label>_serve.log, throughput_<label>_stack_logs.tgz.
set -u
. "$(dirname "$0")/lib.sh"
device_log throughput.log
device_summary throughput throughput_summary.txt

budget=380
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) budget=$2; shift 2 ;;
    *) echo "throughput.sh: unknown argument $1"; exit 2 ;;
  esac
done
JOBS=${JOBS:-4}
if [ "$dry" = 1 ]; then
  SIZE=${SIZE:-64x64} FRAMES=${FRAMES:-22} SAMPLER=${SAMPLER:-[1.0, 0.5, 0.0]} RANK=${RANK:-8}
  M=${MODELS:-/tmp/mmh3-dry/throughput-models}
  # the tree's own build (configured for the host's PostgreSQL and nginx) when no device build exists
  if [ -z "${MMH3_BUILD_DIR:-}" ] && [ ! -x "$B/mmh3" ] && [ -x "$top/build/mmh3" ]; then
    B=$top/build; export MMH3_DEVICE_BUILT=1
  fi
else
  M=${MODELS:-/tmp/mmh3-engine-models}
fi
SIZE=${SIZE:-1344x768} FRAMES=${FRAMES:-124} SAMPLER=${SAMPLER:-turbo4-768p} RANK=${RANK:-128}
PROMPT="A red fox trots through fresh snow at dawn, breath steaming, soft golden light." # engine.sh's t2v
O=${MMH3_SERVE_OUTPUTS:-/tmp/mmh3-throughput-run}
PY=$(command -v python3 || echo /opt/torch/.venv/bin/python3)
ADAPTER=turbo-random-r128.safetensors

step "(prefix) the carried serving stack"
if device_server; then
  note "prefix: $SERVER_PREFIX ($("$SERVER_PREFIX/bin/postgres" --version), $("$SERVER_PREFIX/sbin/nginx" -v 2>&1 | sed 's/.*: //'))"
elif [ "$dry" = 1 ]; then
  note "SKIP prefix: no .carry/server; the dry run uses the PostgreSQL and nginx $B was configured with"
else
  note "FAIL: .carry/server was not carried (run tests/device/prepare_server.sh here and carry .carry/server;" \
    "the exact list: bash tests/device/carry.sh 3)"
  finish 1
fi

step "(build) mmh3 + mmh3-fcgi with the serving stack"
device_serving_build throughput || finish 1

step "(models) $M"
if [ ! -f "$M/MiniMax-H3/FL2VA/text_encoder/config.json" ] || [ ! -e "$M/diffusion_models" ]; then
  if [ "$dry" = 1 ]; then
    from=(); [ -d .carry/minimax-h3/FL2VA ] && from=(--config-from .carry/minimax-h3/FL2VA)
    rm -rf "$M"; mkdir -p "$(dirname "$M")"
    timeout 300 "$B/mmh3-gen-tiny" all "${from[@]}" --out "$M" >/dev/null || { note "FAIL: mmh3-gen-tiny all"; finish 1; }
  else
    OUT=$OUT timeout 900 bash tests/device/engine.sh --part gen >"$OUT/throughput_gen.log" 2>&1 ||
      { tail -20 "$OUT/throughput_gen.log"; note "FAIL: engine.sh --part gen (throughput_gen.log)"; finish 1; }
  fi
fi
ls -laL "$M"/diffusion_models "$M"/text_encoders "$M"/vae 2>&1 | grep -v '^total' | head -12

step "(adapter) a random rank-$RANK adapter on every block -> $M/loras/$ADAPTER"
mkdir -p "$M/loras"
if [ ! -s "$M/loras/$ADAPTER" ]; then
  shared=/tmp/mmh3-lora-r128-native.safetensors # engine.sh --part fewstep's (and lora.sh's), same flags
  if [ "$dry" = 0 ] && [ -s "$shared" ]; then
    ln -f "$shared" "$M/loras/$ADAPTER" 2>/dev/null || cp "$shared" "$M/loras/$ADAPTER"
  else
    full=(); [ "$dry" = 0 ] && full=(--full)
    timeout 120 "$B/mmh3-gen-tiny" lora "${full[@]}" --rank "$RANK" --alpha 8 --gain 0.05 --spelling native \
      --out "$M/loras/$ADAPTER" >/dev/null || { note "FAIL: writing the adapter"; finish 1; }
  fi
fi
ls -laL "$M/loras/$ADAPTER"

step "(probe) mmh3 serve --no-pipeline"
labels=(pipeline=off pipeline=on)
if ! "$B/mmh3" serve --help 2>&1 | grep -q -- '--no-pipeline'; then
  labels=(pipeline=default)
  note "SKIP pipeline=off: this mmh3 serve has no --no-pipeline; only the default queue runs"
fi
gpu=no
if command -v nvidia-smi >/dev/null && timeout 10 nvidia-smi -L >/dev/null 2>&1; then gpu=yes; fi
[ "$gpu" = yes ] || note "SKIP GPU samples: no working nvidia-smi here; the GPU columns say n/a"
# as root, mmh3 serve runs PostgreSQL as its own account (mmh3, created when missing; never nobody)

# ---------------------------------------------------------------- one queue
serve_pid="" smi_pid=""
stop_stack() { # LABEL
  if [ -n "$serve_pid" ] && kill -0 "$serve_pid" 2>/dev/null; then
    kill -INT "$serve_pid"
    local i
    for i in $(seq 1 60); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$serve_pid" 2>/dev/null && { echo "serve did not stop in 60 s: SIGKILL"; kill -KILL "$serve_pid"; }
  fi
  [ -n "$serve_pid" ] && wait "$serve_pid" 2>/dev/null
  serve_pid=""
  [ -n "$smi_pid" ] && { kill "$smi_pid" 2>/dev/null; wait "$smi_pid" 2>/dev/null; }
  smi_pid=""
  [ -n "${1:-}" ] && tar -czf "$OUT/throughput_$1_stack_logs.tgz" -C "$O/.mmh3" logs 2>/dev/null
  return 0
}
trap 'stop_stack' EXIT
client() { timeout --kill-after=5 "$1" "$PY" tests/device/server_client.py --base "$base" "${@:2}"; }

fast=false; [ "${FAST:-0}" = 1 ] && fast=true
case "$SAMPLER" in \[*) sampler=$SAMPLER ;; *) sampler="\"$SAMPLER\"" ;; esac
req=$(printf '{"prompt": "%s", "size": "%s", "frames": %d, "sampler": %s, "loras": [{"name": "%s", "strength": 1}], "fast": %s}' \
  "$PROMPT" "$SIZE" "$FRAMES" "$sampler" "$ADAPTER" "$fast")

run_queue() { # LABEL LIMIT SERVE-FLAGS...
  local label=$1 limit=$2 tag=${1#pipeline=}; shift 2
  local name=throughput_$tag csv=$OUT/throughput_${tag}_gpu.csv s0 rc
  step "(queue $label, limit ${limit}s) $JOBS x $req"
  rm -rf "$O"; mkdir -p "$O"; chmod 755 "$O"
  port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  base=127.0.0.1:$port
  local args=(serve --checkpoints "$M" --listen "$base" --outputs "$O" --preload "$@")
  [ "$dry" = 1 ] && args+=(--device cpu)
  rm -f "$csv"
  if [ "$gpu" = yes ]; then
    nvidia-smi --query-gpu=timestamp,utilization.gpu,power.draw --format=csv,noheader,nounits -lms 50 -f "$csv" >/dev/null 2>&1 &
    smi_pid=$!
  fi
  echo "$B/mmh3 ${args[*]}"
  s0=$SECONDS
  local start; start=$(date +%s.%N)
  "$B/mmh3" "${args[@]}" >"$OUT/${name}_serve.log" 2>&1 &
  serve_pid=$!
  # ready = the stack up and the engine loaded (--preload): the queue then measures resident weights
  if ! client $((limit / 2)) ready --timeout $((limit / 2 - 5)) >"$OUT/${name}_ready.txt" 2>&1; then
    tail -20 "$OUT/${name}_serve.log"; cat "$OUT/${name}_ready.txt"
    note "FAIL: $label: the stack was not ready within $((limit / 2)) s (${name}_serve.log)"
    stop_stack "$tag"; return 1
  fi
  note "$label: stack ready, weights loaded, in $((SECONDS - s0)) s"
  client $((limit - (SECONDS - s0))) queue "$name" --request "$req" --jobs "$JOBS" --out "$OUT" \
    --timeout $((limit - (SECONDS - s0) - 10)) --serve-start "$start"
  rc=$?
  stop_stack "$tag"
  [ "$rc" = 0 ] || note "FAIL: $label: the queue (exit $rc; throughput.log, throughput_${tag}_stack_logs.tgz)"
  [ -f "$OUT/$name.json" ] || return 1
  timeout 60 "$PY" tests/device/server_client.py report "$OUT/$name.json" --label "$label" \
    $( [ -s "$csv" ] && echo --gpu-csv "$csv") >"$OUT/${name}_report.txt" 2>&1 || rc=1
  while read -r l; do note "$l"; done <"$OUT/${name}_report.txt"
  return "$rc"
}

status=0
n=${#labels[@]}
for label in "${labels[@]}"; do
  left=$((budget - (SECONDS - t0) - 10))
  limit=$((left / n)); n=$((n - 1))
  if [ "$limit" -lt 30 ]; then note "SKIP $label: ${left}s of the budget left"; status=1; continue; fi
  flags=(); [ "$label" = pipeline=off ] && flags=(--no-pipeline)
  run_queue "$label" "$limit" "${flags[@]}" || status=1
done
finish $status
