#!/usr/bin/env bash
# Sparse attention (issue 26) on the GPU host, in calls of at most ~9 minutes:
#
#   build    build-device/ (lib.sh device_build): mmh3, the DiT and sparse benchmarks, the tests
#   tests    test_cuda_sparse (routing vs the CPU twin and the double reference; the portable and
#            the Hopper kernel vs the double reference at every tile edge, vs the CPU twin at DiT
#            sizes, run-to-run bits, the Hopper self-check), test_cuda_lora (the fused adapter
#            branch vs the addend path and fp64, the kit's DiT with adapters), test_sparse_attention
#            (CPU)                                                                        (~120 s)
#   kit      the DiT conformance kit on CUDA through sparse attention at density 1 (--sparse full),
#            beside the default dense run                                                 (~40 s)
#   attn     bench/mmh3-bench-sparse-attn at S = 38,010 and 109,262, 56 heads: fa3 exact and fast
#            (dense), then routed at forced densities 0.5 / 0.25 / 0.1 and Sol τ 1 (prefix sink),
#            each through the portable and the Hopper kernel: routing ms, attention ms, speed-ups,
#            rel_l2 of the Hopper kernel against the portable one                         (~60 s)
#   clip5    bench/mmh3-bench-dit 1344x768x124 (S = 38,010): exact and fast, dense and sparse
#            (forced 0.5 / 0.25 / 0.1, the sol preset's schedule at a sparse step), one warm-up and
#            one timed forward each, the block-5 breakdown (routing's share)              (~180 s)
#   clip10   the same at 1344x768x243 (S = 73,586), one forward per mode and spec          (~150 s)
#   clip15   the same at 1344x768x362 (S = 109,262): dense and forced 0.25 and sol        (~220 s)
#
#   here:    bash tests/device/prepare.sh (and prepare_build.sh for prebuilt binaries)
#   device:  bash tests/device/sparse.sh [--part build,tests,kit,attn,clip5] [--budget SECONDS]
#                 [--specs "dense;forced:density=0.25;sol"]  (the clips' sparse specs; defaults below)
#            carry: the L12 list of tests/device/README.md (carry.sh 1)
#   suggested: call 1 --part build,tests,kit,attn,clip5; call 2 --part build,clip10,clip15
#   CPU stand-in (here): MMH3_DEVICE_DRY=1 (the device tests SKIP, the forwards run a tiny DiT on the CPU).
#
# The full-size random DiT ($DIT_CKPT) is written when missing (~30 s). Logs in $OUT/sparse_*.txt;
# the summary (">>" lines: every RESULT / SPARSE / DENSE line and the verdicts) is printed last and
# kept in $OUT/summary_sparse.txt.
set -u
. "$(dirname "$0")/lib.sh"
device_log sparse.log
device_summary sparse summary_sparse.txt -a

part=build,tests,kit,attn,clip5
budget=540
specs=
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --specs) specs=$2; shift 2 ;;
    *) echo "sparse.sh: unknown argument $1"; exit 2 ;;
  esac
done
want() { [[ ",$part," == *",$1,"* ]]; }
limit() {
  local left=$((budget - (SECONDS - t0))) l=$1
  [ "$left" -lt "$l" ] && l=$left
  [ "$l" -lt 15 ] && l=0
  echo "$l"
}
run() {
  local name=$1 secs=$2 log=$3; shift 3
  timeout --kill-after=5 "$secs" "$@" >"$log" 2>&1
  local rc=$?
  { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && echo "TIMEOUT $name after ${secs}s" | tee -a "$log"
  return $rc
}
status=0

W=1344 H=768 TEXT_ROWS=300 CLIP5=124 CLIP10=243 CLIP15=362
gen_shape=() seqs="38010 109262"
if [ "$dry" = 1 ]; then
  W=128 H=64 TEXT_ROWS=16 CLIP5=22 CLIP10=39 CLIP15=56 seqs=""
  gen_shape=(--layers 2 --hidden 256 --heads 2 --ffn 512 --text-dim 256)
fi

step "host"
timeout 10 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader 2>&1 || true

BIN="mmh3 bench/mmh3-bench-dit tests/unit/test_sparse_attention"
[ "$dry" = 1 ] || BIN="$BIN bench/mmh3-bench-sparse-attn tests/unit/test_cuda_sparse tests/unit/test_cuda_lora mmh3-gen-tiny"
step "build: $BIN"
# shellcheck disable=SC2086
make_limit=$(limit 300) device_build sparse $BIN || finish 1
note "build ok ($((SECONDS - t0)) s)"

if want tests; then
  step "tests: sparse routing and attention on the GPU vs the CPU twin and the double reference"
  for t in test_cuda_sparse:300 test_cuda_lora:150 test_sparse_attention:90; do
    prog=${t%%:*} secs=$(limit "${t##*:}")
    [ -x "$B/tests/unit/$prog" ] || { note "SKIP $prog: not built (CPU stand-in)"; continue; }
    [ "$secs" -gt 0 ] || { note "SKIP $prog: out of time"; continue; }
    req=(MMH3_REQUIRE_GPU=1); [ "$dry" = 1 ] && req=()
    run "$prog" "$secs" "$OUT/sparse_$prog.txt" env "${req[@]}" MMH3_BUILD="$B" MMH3_TEST_DATA="$top/tests/data" "$B/tests/unit/$prog"
    rc=$?
    p=$(grep -c '^PASS ' "$OUT/sparse_$prog.txt"); f=$(grep -c '^FAIL ' "$OUT/sparse_$prog.txt")
    grep -E '^FAIL|^     [^ ].*(rel_l2|kernel|sparse)|TIMEOUT|^mmh3: ' "$OUT/sparse_$prog.txt" | head -60
    note "$prog: $p passed, $f failed (exit $rc)"
    { [ "$rc" = 0 ] && [ "$f" = 0 ]; } || status=1
  done
fi

if want kit; then
  step "kit: the DiT conformance kit on $DEV, dense and through sparse attention at density 1"
  for mode in dense full; do
    secs=$(limit 90)
    [ "$secs" -gt 0 ] || { note "SKIP kit $mode: out of time"; continue; }
    extra=(); [ "$mode" = full ] && extra=(--sparse full)
    run "kit-$mode" "$secs" "$OUT/sparse_kit_$mode.txt" "$B/mmh3" conformance tests/data/dit --device "$DEV" "${extra[@]}"
    rc=$?
    grep -E '^mmh3: |^note sparse' "$OUT/sparse_kit_$mode.txt" | head -4
    grep '^FAIL' "$OUT/sparse_kit_$mode.txt" | head -10
    note "DiT kit --device $DEV ($mode): $(grep -E 'passed|failed' "$OUT/sparse_kit_$mode.txt" | tail -1) (exit $rc)"
    [ "$rc" = 0 ] || status=1
  done
fi

if want attn && [ -n "$seqs" ]; then
  for S in $seqs; do
    step "attn: sparse attention at S=$S, 56 heads, beside fa3"
    secs=$(limit 120)
    [ "$secs" -gt 0 ] || { note "SKIP attn $S: out of time"; continue; }
    run "attn-$S" "$secs" "$OUT/sparse_attn_$S.txt" "$B/bench/mmh3-bench-sparse-attn" --seq "$S" --heads 56 --reps 2 \
        --routes "forced:0.5,forced:0.25,forced:0.1,sol:1.0"
    rc=$?
    grep -E '^mmh3: ' "$OUT/sparse_attn_$S.txt" | head -4
    while read -r line; do note "S=$S $line"; done < <(grep -E '^(DENSE|SPARSE|FAIL)' "$OUT/sparse_attn_$S.txt")
    [ "$rc" = 0 ] || status=1
  done
fi

CKPT=$DIT_CKPT
ckpt_ready() {
  [ -f "$CKPT" ] && return 0
  device_wait_file "$CKPT" "$(limit 120)" && return 0
  local secs; secs=$(limit 180)
  [ "$secs" -gt 0 ] || return 1
  echo "writing $CKPT"
  run write-ckpt "$secs" "$OUT/sparse_write_ckpt.txt" "$B/bench/mmh3-bench-dit" --write-random "$CKPT.part" \
      "${gen_shape[@]}" --write-only && mv "$CKPT.part" "$CKPT" && return 0
  rm -f "$CKPT.part"; note "FAIL: writing $CKPT (sparse_write_ckpt.txt)"; status=1; return 1
}

# clip NAME FRAMES SECONDS WARMUP PROFILE SPECS: one process, every mode and sparse spec
clip() {
  local name=$1 frames=$2 secs warm=$4 prof=$5 specs=$6
  secs=$(limit "$3")
  [ "$secs" -gt 0 ] || { note "SKIP $name: out of time"; return; }
  ckpt_ready || { note "SKIP $name: no checkpoint"; return; }
  secs=$(limit "$3")
  step "$name: ${W}x${H}x$frames, exact and fast, sparse specs: $specs"
  run "$name" "$secs" "$OUT/sparse_$name.txt" "$B/bench/mmh3-bench-dit" --checkpoint "$CKPT" --device "$DEV" \
      --width "$W" --height "$H" --frames "$frames" --text-rows "$TEXT_ROWS" --modes exact,fast \
      --warmup "$warm" --iters 1 --profile-block "$prof" --sparse "$specs"
  local rc=$?
  grep -E '^(kernels in use|sparse attention|mode |FAIL|TIMEOUT)|^mmh3: ' "$OUT/sparse_$name.txt" | head -30
  grep -E 'sparse routing|attention|block total' "$OUT/sparse_$name.txt" | head -40
  while read -r line; do note "$name $line"; done < <(grep -E '^(RESULT|QUALITY)' "$OUT/sparse_$name.txt")
  [ "$rc" = 0 ] || status=1
}

all_specs="dense;forced:density=0.5;forced:density=0.25;forced:density=0.1;sol"
want clip5 && clip clip5 "$CLIP5" 300 1 5 "${specs:-$all_specs}"
want clip10 && clip clip10 "$CLIP10" 240 0 -1 "${specs:-$all_specs}"
want clip15 && clip clip15 "$CLIP15" 330 0 -1 "${specs:-dense;forced:density=0.25;sol}"

finish "$status"
