#!/usr/bin/env bash
# Superseded by tests/device/session.sh (the plan of a whole device session, tests/device/README.md);
# kept for single steps.
# The lead's single device call: every area's device script in one run, each
# step under its own time limit so one slow part cannot eat the call, and a
# progress line per step on stdout. The device tool brings back at most 8
# files, so the scripts log into /tmp/mmh3-device and after every step the
# whole folder is packed into $OUT/logs.tgz (what was done comes back even if
# a later step runs past the call's limit).
#
#   device:  bash tests/device/lead.sh STEP...     with carry [".carry"]
#   steps:   cuda (build + CUDA-vs-CPU op tests), bench (kernel benchmarks vs
#            torch), dit (kit on CUDA, CUDA vs CPU), rng, ditbench (full-size
#            forward + PyTorch reference), kits (the text-encoder and VAE
#            kits on CUDA and on the CPU, after cuda built build-device/), te
#            (text-encoder kit + full-size bench), vae (VAE kit + bench), speed,
#            multigpu, engine (their scripts; arguments in $MMH3_<STEP>_ARGS).
#            Each as NAME or NAME:SECONDS.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
RESULT=${OUT:-$top/tests/out/device}
OUT=/tmp/mmh3-device
mkdir -p "$OUT" "$RESULT"
export OUT PYTHONUNBUFFERED=1
export CUDA_ARCH=${CUDA_ARCH:--gencode arch=compute_90a,code=sm_90a}
t0=$SECONDS
run_step() {
  local name=$1 limit=$2; shift 2
  echo "[$((SECONDS - t0))s] >>> $name (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" >"$OUT/step_$name.log" 2>&1
  local rc=$?
  echo "[$((SECONDS - t0))s] <<< $name rc=$rc"
  tail -n 25 "$OUT/step_$name.log" | cut -c1-220
  tar -czf "$RESULT/logs.tgz.part" -C "$OUT" . && mv "$RESULT/logs.tgz.part" "$RESULT/logs.tgz"
}
for spec in "$@"; do
  name=${spec%%:*}; limit=${spec#*:}; [ "$limit" = "$spec" ] && limit=300
  case $name in
    cuda) MMH3_DEVICE_UNIT_SUITE=0 run_step cuda "$limit" bash tests/device/run.sh --no-bench ;;
    bench) run_step bench "$limit" bash -c 'B=build-device; "$B"/tests/device/bench_kernels && python3 tests/device/bench_torch.py' ;;
    dit) run_step dit "$limit" bash tests/device/dit.sh --part conformance ;;
    rng) run_step rng "$limit" bash tests/device/dit.sh --part rng ;;
    ditbench) run_step ditbench "$limit" bash tests/device/dit.sh --part bench,ref ;;
    kits) run_step kits "$limit" bash -c 'for k in text_encoder vae; do
            echo "== $k on cuda"; build-device/mmh3 conformance tests/data/$k --device cuda | tail -6
            echo "== $k on cpu";  build-device/mmh3 conformance tests/data/$k --device cpu | tail -2
          done' ;;
    te) run_step te "$limit" bash tests/device/text_encoder.sh ;;
    speed) run_step speed "$limit" bash tests/device/speed.sh ${MMH3_SPEED_ARGS:-} ;;
    multigpu) run_step multigpu "$limit" bash tests/device/multigpu.sh ${MMH3_MULTIGPU_ARGS:-} ;;
    engine) run_step engine "$limit" bash tests/device/engine.sh ${MMH3_ENGINE_ARGS:-} ;;
    vae) run_step vae "$limit" bash tests/device/vae.sh ;;
    *) echo "unknown step $name" ;;
  esac
done
echo "[$((SECONDS - t0))s] done"
