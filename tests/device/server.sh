#!/usr/bin/env bash
# The same full-size run as engine.sh's t2v, through the SERVER: `mmh3 serve` with the real engine
# (private PostgreSQL cluster, mmh3-fcgi, nginx, one GPU worker) on the shared full-size random
# checkpoints, driven over HTTP by tests/device/server_client.py (Python standard library; the
# GPU host has no curl):
#
#   (prefix) the carried serving stack (.carry/server, tests/device/prepare_server.sh) unpacked
#            at /tmp/mmh3-server; the binaries the stack will run, with their versions
#   (build)  build-device/ with the serving stack (lib.sh device_build: CUDA + .carry/ffmpeg +
#            .carry/server), or the session's prebuilt one: mmh3 and mmh3-fcgi
#   (models) the $MODELS_PATH-like folder engine.sh --part gen makes (made here when missing)
#   (start)  mmh3 serve --checkpoints $M --listen 127.0.0.1:PORT --outputs /tmp/mmh3-serve-run, as
#            root: PostgreSQL runs as its own account (MMH3_PG_USER, default mmh3: serve creates it),
#            nginx's workers as nobody; the processes it started, by binary path (/proc/PID/exe)
#   (job1)   the t2v request of engine.sh (1344x768, 124 frames, 28 steps, seed 1, same prompt)
#            through POST /api/ai/queue, followed on GET /api/events (time to the claim, to each
#            stage, to the first denoising step; per-step event intervals), the mp4 downloaded
#            through nginx and checked (tests/device/mp4_info.py), the stored timings
#   (status) GET /api/status after the job: residency, placement, memory
#   (job2)   a second job with the weights resident: the time from the enqueue to the prompt
#            encoding (the promise: "within about 2 s"); cancelled there (SERVER_JOB2=full: run
#            it to the end instead)
#   (compare) the server's stored timings next to the CLI run's table (--cli FILE: engine.sh's
#            engine_t2v.txt; session.sh passes call 3's)
#
#   here:    bash tests/device/prepare.sh && bash tests/device/prepare_engine.sh &&
#            bash tests/device/prepare_server.sh && bash tests/device/prepare_build.sh
#   device:  tests/device/session.sh call 3 runs it after t2v (carry list: tests/device/carry.sh 3);
#            alone: bash tests/device/server.sh [--cli FILE] [--budget S]   (~4-5 min at ~5 s/forward;
#            --budget, default 600: job 1 gets what is left but ~45 s, job 2 what remains after it)
#   dry run here (CPU stand-ins: tiny checkpoints, 64x64, 22 frames, 3 steps, --device cpu):
#            MMH3_DEVICE_DRY=1 bash tests/device/server.sh
#
# Every step has its own timeout; logs in $OUT: server.log (everything), server_summary.txt,
# server_job1.json / server_job2.json (the recorded events and rows), server_status.json,
# server_serve.log (mmh3 serve's output), server_stack_logs.tgz (worker, fcgi, PostgreSQL, nginx).
set -u
. "$(dirname "$0")/lib.sh"
device_log server.log
device_summary server server_summary.txt

cli="" budget=600
while [ $# -gt 0 ]; do
  case "$1" in
    --cli) cli=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    *) echo "server.sh: unknown argument $1"; exit 2 ;;
  esac
done
if [ "$dry" = 1 ]; then
  SIZE=${SIZE:-64x64} FRAMES=${FRAMES:-22} STEPS=${STEPS:-3}
  export MMH3_REF_SHORT_EDGE=${MMH3_REF_SHORT_EDGE:-64} MMH3_REF_VIDEO_SHORT_EDGE=${MMH3_REF_VIDEO_SHORT_EDGE:-64}
  M=${MODELS:-/tmp/mmh3-dry/engine-models}
else
  M=${MODELS:-/tmp/mmh3-engine-models}
fi
SIZE=${SIZE:-1344x768} FRAMES=${FRAMES:-124} STEPS=${STEPS:-28}
PROMPT="A red fox trots through fresh snow at dawn, breath steaming, soft golden light." # engine.sh's t2v
O=${MMH3_SERVE_OUTPUTS:-/tmp/mmh3-serve-run}
PY=$(command -v python3 || echo /opt/torch/.venv/bin/python3)

step "(prefix) the carried serving stack"
if ! device_server; then
  note "FAIL: .carry/server was not carried (run tests/device/prepare_server.sh here and carry .carry/server;" \
    "the exact list: bash tests/device/carry.sh 3)"
  finish 1
fi
for p in postgres initdb pg_ctl psql; do echo "$SERVER_PREFIX/bin/$p: $("$SERVER_PREFIX/bin/$p" --version 2>&1)"; done
echo "$SERVER_PREFIX/sbin/nginx: $("$SERVER_PREFIX/sbin/nginx" -V 2>&1 | tr '\n' ' ')"
note "prefix: $SERVER_PREFIX ($("$SERVER_PREFIX/bin/postgres" --version), $("$SERVER_PREFIX/sbin/nginx" -v 2>&1 | sed 's/.*: //'))"

step "(build) mmh3 + mmh3-fcgi with the serving stack"
device_serving_build server || finish 1
grep -q -a -F "$SERVER_PREFIX/sbin/nginx" "$B/mmh3" || { note "FAIL: $B/mmh3 was not configured for $SERVER_PREFIX (its nginx path differs)"; finish 1; }
for f in "$B/mmh3" "$B/mmh3-fcgi"; do
  echo "ldd $(basename "$f"):"; ldd "$f" | sed 's/^/   /'
  if ldd "$f" | grep -q -E 'libpq|libcurl|libfcgi|not found'; then note "FAIL: $f links a host libpq/libcurl/libfcgi"; finish 1; fi
done

step "(models) $M"
if [ ! -f "$M/MiniMax-H3/FL2VA/text_encoder/config.json" ] || [ ! -e "$M/diffusion_models" ]; then
  echo "no model folder yet: engine.sh --part gen"
  OUT=$OUT timeout 900 bash tests/device/engine.sh --part gen >"$OUT/server_gen.log" 2>&1 ||
    { tail -20 "$OUT/server_gen.log"; note "FAIL: engine.sh --part gen (server_gen.log)"; finish 1; }
fi
ls -laL "$M"/diffusion_models "$M"/text_encoders "$M"/vae 2>&1 | grep -v '^total' | head -12

# ---------------------------------------------------------------- start the stack
step "(start) mmh3 serve, real engine"
# as root, mmh3 serve runs PostgreSQL as its own account (mmh3, created when missing; never nobody)
echo "running as $(id -un); PostgreSQL as ${MMH3_PG_USER:-$( [ "$(id -u)" = 0 ] && echo mmh3 || id -un)}"
rm -rf "$O"; mkdir -p "$O"; chmod 755 "$O"
port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base=127.0.0.1:$port
serve_args=(serve --checkpoints "$M" --listen "$base" --outputs "$O")
[ "$dry" = 1 ] && serve_args+=(--device cpu)
echo "$B/mmh3 ${serve_args[*]}"
s0=$SECONDS
"$B/mmh3" "${serve_args[@]}" >"$OUT/server_serve.log" 2>&1 &
serve_pid=$!
stop_stack() {
  [ -n "${serve_pid:-}" ] || return 0
  if kill -0 "$serve_pid" 2>/dev/null; then
    kill -INT "$serve_pid"
    local i
    for i in $(seq 1 60); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$serve_pid" 2>/dev/null && { echo "serve did not stop in 60 s: SIGKILL"; kill -KILL "$serve_pid"; }
  fi
  wait "$serve_pid" 2>/dev/null
  serve_rc=$?
  serve_pid=""
  tar -czf "$OUT/server_stack_logs.tgz" -C "$O/.mmh3" logs 2>/dev/null
}
trap 'stop_stack' EXIT
client() { timeout --kill-after=5 "$1" "$PY" tests/device/server_client.py --base "$base" "${@:2}"; }
ready=no
while [ $((SECONDS - s0)) -lt 140 ]; do
  if ! kill -0 "$serve_pid" 2>/dev/null; then
    wait "$serve_pid"; rc=$?; serve_pid=""
    tail -30 "$OUT/server_serve.log"
    note "FAIL: mmh3 serve exited (status $rc) before the stack was ready: $(grep -m1 -E 'serve: .*(ERROR|error|failed|cannot)' \
      "$OUT/server_serve.log" | cut -c1-300)"
    tar -czf "$OUT/server_stack_logs.tgz" -C "$O/.mmh3" logs 2>/dev/null
    finish 1
  fi
  if client 15 ready --timeout 3 >"$OUT/server_ready.txt" 2>&1; then ready=yes; break; fi
done
if [ "$ready" != yes ]; then
  tail -30 "$OUT/server_serve.log"; cat "$OUT/server_ready.txt"
  note "FAIL: the stack did not become ready within 140 s (server_serve.log)"
  finish 1
fi
note "stack ready in $((SECONDS - s0)) s (PostgreSQL initdb + start, migrations, mmh3-fcgi, nginx, worker) on $base"
# which binaries the stack runs (proof that these are the carried ones, not a host's)
for f in "$O"/.mmh3/run/*.pid; do
  pid=$(head -1 "$f" 2>/dev/null)
  [ -n "$pid" ] && [ -e "/proc/$pid/exe" ] || continue
  exe=$(readlink "/proc/$pid/exe")
  note "  $(basename "$f" .pid): pid $pid $exe (user $(ps -o user= -p "$pid" | tr -d ' '))"
done
pg_exe=$(readlink "/proc/$(head -1 "$O/.mmh3/run/postgres.pid" 2>/dev/null || echo 0)/exe" 2>/dev/null || echo "")
ngx_exe=$(readlink "/proc/$(head -1 "$O/.mmh3/run/nginx-master.pid" 2>/dev/null || echo 0)/exe" 2>/dev/null || echo "")
case "$pg_exe:$ngx_exe" in
  "$SERVER_PREFIX/bin/postgres:$SERVER_PREFIX/sbin/nginx") note "  PostgreSQL and nginx are the carried ones ($SERVER_PREFIX)" ;;
  *) note "FAIL: the stack runs postgres=$pg_exe nginx=$ngx_exe, not $SERVER_PREFIX's"; finish 1 ;;
esac

# ---------------------------------------------------------------- the jobs
status=0
req=$(printf '{"prompt": "%s", "size": "%s", "frames": %d, "steps": %d, "seed": 1}' "$PROMPT" "$SIZE" "$FRAMES" "$STEPS")
left() { echo $((budget - (SECONDS - t0))); }
# job 1 gets what is left but ~45 s (the warm job, stopping, the summary); 420 s at most
lim1=$(( $(left) - 45 )); [ "$lim1" -gt 420 ] && lim1=420
step "(job1, limit ${lim1}s) $req"
client "$lim1" job server_job1 --request "$req" --out "$OUT" --timeout "$((lim1 - 10))" | tee "$OUT/server_job1.txt"
rc=${PIPESTATUS[0]}
while read -r l; do note "$l"; done < <(sed -n 's/^SERVER server_job1_/job1 /p' "$OUT/server_job1.txt" |
  grep -E '^job1 (claimed|first_|step_events|timings|total_seconds|placement|download|status|error)')
if [ "$rc" = 0 ]; then
  if [ -s "$OUT/server_job1.mp4" ]; then
    "$PY" tests/device/mp4_info.py "$OUT/server_job1.mp4" --expect "${SIZE}x$FRAMES" --audio yes >"$OUT/server_job1_mp4.txt" 2>&1 ||
      status=1
    note "job1 mp4 (downloaded through nginx): $(tail -1 "$OUT/server_job1_mp4.txt")"
  fi
else
  note "FAIL: job1 (exit $rc; server_job1.txt, server_stack_logs.tgz)"; status=1
fi

step "(status) GET /api/status"
while read -r l; do note "status: $l"; done < <(client 30 status --out "$OUT/server_status.json" | sed 's/^SERVER //')

lim2=$(( $(left) - 15 )); [ "$lim2" -gt 420 ] && lim2=420
if [ "$status" = 0 ] && [ "$lim2" -lt 20 ]; then
  note "job2 SKIPPED: ${lim2}s of the budget left"
elif [ "$status" = 0 ]; then
  if [ "${SERVER_JOB2:-cancel}" = full ]; then
    step "(job2, limit ${lim2}s) the same request again (seed 2), weights resident"
    client "$lim2" job server_job2 --request "${req/\"seed\": 1/\"seed\": 2}" --out "$OUT" \
      --timeout "$((lim2 - 5))" | tee "$OUT/server_job2.txt"
  else
    [ "$lim2" -gt 90 ] && lim2=90
    step "(job2, limit ${lim2}s) a second job, weights resident: time to its prompt encoding, then cancelled"
    client "$lim2" job server_job2 --request "${req/\"seed\": 1/\"seed\": 2}" --out "$OUT" --timeout "$((lim2 - 5))" \
      --cancel-after-start | tee "$OUT/server_job2.txt"
  fi
  rc=${PIPESTATUS[0]}
  while read -r l; do note "$l"; done < <(sed -n 's/^SERVER server_job2_/job2 /p' "$OUT/server_job2.txt" |
    grep -E '^job2 (claimed|first_(loading|encoding_prompt|denoising)|status|timings|cancel|error)')
  enc=$(sed -n 's/^SERVER server_job2_first_encoding_prompt_after \([0-9.]*\) s/\1/p' "$OUT/server_job2.txt")
  [ -z "$enc" ] && enc=$(sed -n 's/^SERVER server_job2_first_denoising_after \([0-9.]*\) s/\1/p' "$OUT/server_job2.txt")
  grep -q 'server_job2_first_loading_after' "$OUT/server_job2.txt" && note "job2 LOADED WEIGHTS AGAIN (not resident)"
  [ -n "$enc" ] && note "warm start: enqueue -> prompt encoding (or the next stage, when the stream coalesced it) in" \
    "$enc s (promise: within about 2 s)"
  [ "$rc" = 0 ] || { note "FAIL: job2 (exit $rc; server_job2.txt)"; status=1; }
fi

step "(stop) SIGINT to mmh3 serve"
stop_stack
note "serve stopped (exit $serve_rc)"

# ---------------------------------------------------------------- next to the CLI run
step "(compare) server vs CLI"
while read -r l; do note "$l"; done < <(
  echo "server job1 stored timings (s): $(sed -n 's/^SERVER server_job1_timings //p' "$OUT/server_job1.txt")"
  echo "server job1: $(sed -n 's/^SERVER server_job1_total_seconds //p' "$OUT/server_job1.txt")"
  if [ -n "$cli" ] && [ -f "$cli" ]; then
    echo "CLI ($cli):"
    for k in 'load DiT' 'load text encoder' 'encode prompt' 'denoise (DiT' 'decode video' 'decode audio' 'mux video' \
      'per step:' 'total (wall clock)' 'peak memory'; do
      grep -m1 "$k" "$cli" | sed 's/^ */   /'
    done
  else
    echo "CLI: no table given (--cli engine_t2v.txt)"
  fi
)
finish $status
