#!/usr/bin/env bash
# The whole device verification in one 30-minute session: three calls of ≤ 9.5 min (a fourth only
# when device time is left), each self-sufficient on a fresh machine and skipping what a warm one
# already has. Priority order: call 1 alone gives the CUDA op tests and the DiT speed figures.
#
#   here:    bash tests/device/prepare.sh && bash tests/device/prepare_engine.sh   (once: .carry/)
#            bash tests/device/prepare_server.sh  (once: the serving stack for call 3, ~15 min, ~5 MB)
#            bash tests/device/prepare_build.sh   (after the last code change: the binaries for sm_90a,
#                                                  ~2 min on 2 cores; without it each call builds, ~1 min)
#   device:  run(command="bash tests/device/session.sh --call N", carry=<bash tests/device/carry.sh N>,
#                timeout_s=600)   (the whole .carry no longer fits the 64 MiB with the tree)
#
#   call 1  (~8 min)  speed: CUDA runtime/ops/kernels/twins + fa3 + sm90 GEMM device tests, mmh3 check,
#                     DiT kit on CUDA, attention kernels, clip5 exact+fast with the block breakdown +
#                     PyTorch reference (ratio), fast-vs-exact quality, clip10, clip15 (+ references)
#                     [background: the random DiT, 19.5 GB]
#   call 2  (~7 min)  vae (kit CUDA+CPU, bench, PyTorch reference) · te (kit, full-size nvfp4 and
#                     bf16-resident encodes, transformers reference) · multigpu --layers 10 (world
#                     size 1: NCCL self-exchange, SP-1 vs plain)   [background: VAEs, text encoder]
#   call 3  (~9 min)  t2v: mmh3 generate 1344x768x124, 28 steps, through the real CLI · server: the
#                     same job through mmh3 serve (PostgreSQL, nginx, mmh3-fcgi, the real engine),
#                     followed on the SSE stream, mp4 through nginx, + a warm second job's start
#                     [background: all four checkpoints, ~41 GB]
#   call 4  (only with ≥ 6 min of device time left) ref2va without and with --ref-kv-cache, kbench
#                     (kernel benchmarks vs PyTorch), qgemm (the int8 GEMM paths); or what an earlier
#                     call skipped, e.g. --steps speed:300 (MMH3_SPEED_ARGS="--part clip15")
#
#   options: --call N | --steps NAME[:SECONDS],...   --budget SECONDS (default 560: the call's
#            whole length; steps that no longer fit are skipped and listed)   --dry (CPU stand-ins)
#   steps:   speed vae te multigpu t2v server ref2va kbench qgemm profile lora fewstep sparse vram throughput
#            (arguments: MMH3_<STEP>_ARGS; throughput needs .carry/server: carry.sh 3)
#
# What comes back ($OUT, ≤ 8 files): session_summary.txt (host, build, every step's rc, time and
# summary lines, the skipped steps) and session_logs.tgz (every step's logs, packed after each
# step, without mp4/safetensors). Progress lines "[Ns] >>> step" on stdout.
# The build: the prebuilt .carry/build-device.tar.xz when its stamp matches this tree
# (lib.sh device_source_stamp) and its programs load here, else lib.sh device_build (configure +
# make -j16 of $DEVICE_TARGETS, ~1 min; 71 s on 2 cores here); MMH3_DEVICE_BUILT=1 then tells every script to reuse it.
# Dry run here (CPU stand-ins, tiny sizes, the CUDA build compiled): bash tests/device/session.sh --dry --call N
set -u
. "$(dirname "$0")/lib.sh"
RESULT=$OUT
call="" steps="" budget=560
while [ $# -gt 0 ]; do
  case "$1" in
    --call) call=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --dry) export MMH3_DEVICE_DRY=1; dry=1 DEV=cpu; shift ;;
    *) echo "session.sh: unknown argument $1"; exit 2 ;;
  esac
done
case "$call" in
  1) : "${steps:=speed:500}" ;;
  2) : "${steps:=vae:200,te:240,multigpu:150}" ;;
  3) : "${steps:=t2v:290,server:260}" ;;
  4) : "${steps:=ref2va:240,kbench:200,qgemm:60}" ;;
  "") [ -n "$steps" ] || { echo "session.sh: --call 1|2|3|4 or --steps"; exit 2; } ;;
  *) echo "session.sh: --call 1|2|3|4"; exit 2 ;;
esac
LOGS=/tmp/mmh3-session/call${call:-x}
rm -rf "$LOGS"; mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
if [ "$dry" = 1 ]; then # CPU stand-ins: tiny shared files of their own
  mkdir -p /tmp/mmh3-dry
  export MMH3_DIT_RANDOM=/tmp/mmh3-dry/dit.safetensors MMH3_TE_RANDOM=/tmp/mmh3-dry/te.safetensors \
    MMH3_VV_RANDOM=/tmp/mmh3-dry/vv.safetensors MMH3_AV_RANDOM=/tmp/mmh3-dry/av.safetensors
  DIT_CKPT=$MMH3_DIT_RANDOM TE_CKPT=$MMH3_TE_RANDOM VV_CKPT=$MMH3_VV_RANDOM AV_CKPT=$MMH3_AV_RANDOM
fi
SUMMARY=$RESULT/session_summary.txt # not S: the serving stack's flags.sh (sourced by the build) sets S
say() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((budget - (SECONDS - t0))); }
pack() {
  tar -czf "$RESULT/session_logs.tgz.part" --exclude='*.mp4' --exclude='*.safetensors' -C "$LOGS" . 2>/dev/null &&
    mv "$RESULT/session_logs.tgz.part" "$RESULT/session_logs.tgz"
}
: >"$SUMMARY"
say "session call ${call:-(steps)}: steps $steps, budget ${budget}s$( [ "$dry" = 1 ] && echo ', CPU stand-ins (dry)')"
say "host: $(timeout 10 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo 'no GPU'); $(nproc) cores; $(df -h /tmp | awk 'NR==2 {print $4 " free in /tmp"}'); carry $(du -sh .carry 2>/dev/null | cut -f1)"

# ------------------------------------------------------------------ the one build
echo "[$((SECONDS - t0))s] >>> build"
device_deps
stamp=$(device_source_stamp)
have=$(cat .carry/build-device.stamp 2>/dev/null || echo none) # "<hash>" or "<hash> server" (full product)
how=""
server_carried=no
if [ -f .carry/server/server.tar.xz ]; then server_carried=yes; DEVICE_TARGETS="$DEVICE_TARGETS mmh3-fcgi"; fi
say "carried: $(cd .carry 2>/dev/null && ls -d * 2>/dev/null | tr '\n' ' ')"
if [ -f .carry/build-device.tar.xz ] && [ "${have%% *}" = "$stamp" ] &&
  { [ "$server_carried" = no ] || [ "$have" = "$stamp server" ]; }; then
  mkdir -p "$B" && tar -xJf .carry/build-device.tar.xz -C "$B"
  bad=$(for t in $DEVICE_TARGETS; do ldd "$B/$t" 2>&1 | grep -E 'not found' | sed "s|^|$t: |"; done | head -5)
  if [ -z "$bad" ] && "$B/mmh3" --help >/dev/null 2>&1; then
    how="prebuilt (stamp $stamp)"
  else
    say "prebuilt binaries do not load here: $bad — building"
    rm -rf "$B"
  fi
else
  [ -f .carry/build-device.tar.xz ] && say "prebuilt stamp '$have' does not match this tree ($stamp$( [ "$server_carried" = yes ] && echo ' server')) — building"
fi
if [ -z "$how" ]; then
  # shellcheck disable=SC2086
  OUT=$LOGS make_limit=$(( $(left) - 60 )) device_build session $DEVICE_TARGETS >"$LOGS/build.log" 2>&1 ||
    { tail -40 "$LOGS/build.log"; say "FAIL: build (build.log in session_logs.tgz)"; pack; exit 1; }
  how="built here in $((SECONDS - t0)) s"
fi
export MMH3_DEVICE_BUILT=1
say "build: $how"
pack

# ------------------------------------------------------------------ shared checkpoints, in the background
want_ckpt() { [[ ",$steps," == *",$1"[,:]* ]]; }
chain=()
want_ckpt speed && chain+=(dit)
want_ckpt lora && chain+=(dit)
want_ckpt sparse && chain+=(dit)
want_ckpt vram && chain+=(dit)
want_ckpt vae && chain+=(vv av)
want_ckpt te && chain+=(te)
{ want_ckpt t2v || want_ckpt ref2va || want_ckpt server || want_ckpt throughput; } && chain+=(dit te vv av)
writer() { # KIND: write the shared checkpoint unless present (FILE.part marks a write in progress)
  local f shape=() full=--full
  [ "$dry" = 1 ] && shape=(--layers 2 --hidden 256 --heads 2 --ffn 512 --text-dim 256) full=""
  case $1 in
    dit) f=$DIT_CKPT; set -- "$B/bench/mmh3-bench-dit" --write-only "${shape[@]}" --write-random ;;
    te) f=$TE_CKPT
        if [ "$dry" = 1 ]; then # the tiny encoder of the stand-in models, with its patched config
          device_dry_models
          set -- "$B/bench/bench_text_encoder" --config "$DRY_MODELS/MiniMax-H3/FL2VA/text_encoder/config.json" \
            --layers 4 --generate
        else
          set -- "$B/bench/bench_text_encoder" --config .carry/minimax-h3/FL2VA/text_encoder/config.json --layers 50 --generate
        fi ;;
    vv) f=$VV_CKPT; set -- "$B/mmh3-gen-tiny" video-vae $full --out ;;
    av) f=$AV_CKPT; set -- "$B/mmh3-gen-tiny" audio-vae $full --out ;;
  esac
  [ -s "$f" ] && return 0
  if [ "$dry" = 1 ] && [ "$f" = "$VV_CKPT" -o "$f" = "$AV_CKPT" ]; then
    device_dry_models && cp "$DRY_MODELS/vae/$( [ "$f" = "$VV_CKPT" ] && echo minimax_h3_video_vae_fp16 ||
      echo minimax_h3_audio_vae_fp32).safetensors" "$f" && rm -f "$f.part"
    return 0
  fi
  local s=$SECONDS
  "$@" "$f.part" >"$LOGS/write_$(basename "$f").log" 2>&1 && mv "$f.part" "$f" &&
    echo "[$((SECONDS - t0))s] wrote $f in $((SECONDS - s)) s" || { rm -f "$f.part"; echo "FAIL: writing $f"; }
}
if [ ${#chain[@]} -gt 0 ]; then
  todo=$(printf '%s\n' "${chain[@]}" | awk '!seen[$0]++' | tr '\n' ' ')
  for k in $todo; do # mark them now, so every step waits for the writer instead of writing again
    case $k in dit) f=$DIT_CKPT ;; te) f=$TE_CKPT ;; vv) f=$VV_CKPT ;; av) f=$AV_CKPT ;; esac
    [ -s "$f" ] || : >"$f.part"
  done
  ( for k in $todo; do writer "$k"; done ) >>"$LOGS/writers.log" 2>&1 &
  writers=$!
  echo "$writers" >/tmp/mmh3-writers.pid
  say "checkpoints in the background: $todo($(df -h /tmp | awk 'NR==2 {print $4}') free)"
fi

# ------------------------------------------------------------------ the steps
declare -A summ=([speed]=summary_speed.txt [vae]=vae_summary.txt [te]=te_summary.txt [multigpu]=summary_multigpu.txt
  [t2v]=engine_summary.txt [ref2va]=engine_summary.txt [kbench]=bench_join.txt [qgemm]=summary_speed.txt
  [server]=server_summary.txt [profile]=summary_profile.txt [lora]=summary_lora.txt [fewstep]=summary_fewstep.txt [sparse]=summary_sparse.txt [vram]=summary_vram.txt
  [throughput]=throughput_summary.txt)
skipped=()
for spec in ${steps//,/ }; do
  name=${spec%%:*}; limit=${spec#*:}; [ "$limit" = "$spec" ] && limit=300
  l=$(left); l=$((l - 10))
  [ "$l" -lt "$limit" ] && limit=$l
  if [ "$limit" -lt 45 ]; then skipped+=("$name"); say "== $name: SKIPPED (${l}s of the budget left)"; continue; fi
  args_var="MMH3_${name^^}_ARGS"; extra=${!args_var:-}
  case $name in
    speed) cmd=(bash tests/device/speed.sh --budget $((limit - 10)) ${extra:---part tests,kit,attn,clip5,quality,clip10,clip15}) ;;
    vae) cmd=(bash tests/device/vae.sh $extra) ;;
    te) cmd=(bash tests/device/text_encoder.sh $extra) ;;
    multigpu) cmd=(bash tests/device/multigpu.sh ${extra:---layers 10 --gpus 1}) ;;
    t2v) cmd=(bash tests/device/engine.sh --part gen,t2v $extra) ;;
    ref2va) cmd=(bash tests/device/engine.sh --part gen,ref2va $extra) ;;
    server) cmd=(bash tests/device/server.sh --budget $((limit - 10)) --cli "$LOGS/t2v/engine_t2v.txt" $extra) ;;
    kbench) cmd=(bash tests/device/run.sh --no-build --no-tests $extra) ;;
    qgemm) cmd=(bash tests/device/speed.sh --part qgemm --budget $((limit - 10)) $extra) ;;
    profile) cmd=(bash tests/device/profile.sh $extra) ;;
    lora) cmd=(bash tests/device/lora.sh --budget $((limit - 10)) $extra) ;;
    fewstep) cmd=(bash tests/device/fewstep.sh $extra) ;;
    vram) cmd=(bash tests/device/vram.sh $extra) ;;
    throughput) cmd=(bash tests/device/throughput.sh --budget $((limit - 10)) $extra) ;;
    sparse) cmd=(bash tests/device/sparse.sh --budget $((limit - 10)) ${extra:---part tests,kit,attn,clip5}) ;;
    *) say "== $name: unknown step"; continue ;;
  esac
  echo "[$((SECONDS - t0))s] >>> $name (limit ${limit}s): ${cmd[*]}"
  mkdir -p "$LOGS/$name"
  s=$SECONDS
  OUT=$LOGS/$name timeout --kill-after=10 "$limit" "${cmd[@]}" >"$LOGS/$name.log" 2>&1
  rc=$?
  { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && rc="$rc (TIMEOUT)"
  say "== $name: rc=$rc, $((SECONDS - s)) s of ${limit}s"
  if [ -f "$LOGS/$name/${summ[$name]}" ]; then
    sed 's/^/   /' "$LOGS/$name/${summ[$name]}" | tee -a "$SUMMARY"
  else
    tail -n 15 "$LOGS/$name.log" | cut -c1-220 | sed 's/^/   /' | tee -a "$SUMMARY"
  fi
  pack
done
if [ -n "${writers:-}" ]; then # a writer still running at the end is stopped (by its ids)
  pkill -P "$writers" 2>/dev/null; kill "$writers" 2>/dev/null; rm -f /tmp/mmh3-writers.pid
  cat "$LOGS/writers.log" >>"$SUMMARY"
fi
[ ${#skipped[@]} -gt 0 ] && say "SKIPPED (run them in call 4 with --steps): ${skipped[*]}"
say "session call ${call:-(steps)} done in $((SECONDS - t0)) s"
pack
