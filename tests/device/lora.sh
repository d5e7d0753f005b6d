#!/usr/bin/env bash
# LoRA adapters on the GPU host (docs/LORA.md), in one call of ~4–5 minutes:
#
#   tests   the device tests (MMH3_REQUIRE_GPU=1):
#             test_cuda_lora   the Hopper int8 GEMM with the adapter branch fused vs the cuBLASLt
#                              path with the branch's f32 sums as its addend (plain + gated, the
#                              DiT's qkv shape: rank-128 q/k/v slices + a second adapter); per
#                              adapted module of the kit DiT the branch vs fp64 s·B·A·x; the
#                              forward with an adapter, fused block and composition, vs the CPU
#             test_cuda_ops    every op vs its CPU twin (the fused ConvRot passes' bf16 h output)
#             test_speed_qgemm the sm90 int8 GEMM still bit for bit the cuBLASLt path
#   bench   bench/mmh3-bench-lora at 1344x768x124 (S = 38,010) on the full-size random DiT
#           ($DIT_CKPT, written when missing: ~30 s) with random adapters in the released layouts
#           (mmh3-gen-tiny lora --full): rank 128 on all 50 blocks + refiner with q/k/v split
#           (LightX2V's diffusers files; its rank-384 _comfyui_ exports load as the same pieces),
#           and with one A on the whole qkv (native files: Larry's, FlashGen's layout); exact and
#           fast; the overhead per forward and block 1's stage breakdown with and without the
#           adapters (RESULT lora ... lines)
#
#   device: bash tests/device/lora.sh [--part tests,bench] [--budget SECONDS]
#           or: bash tests/device/session.sh --steps lora:300   (carry: tests/device/carry.sh 1)
#   CPU stand-in (here): MMH3_DEVICE_DRY=1 — the tests SKIP, the bench on a 2-block DiT at 128x64.
# Summary in $OUT/summary_lora.txt.
set -u
. "$(dirname "$0")/lib.sh"
device_summary lora summary_lora.txt

part=tests,bench
budget=290
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    *) echo "lora.sh: unknown argument $1"; exit 2 ;;
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

W=1344 H=768 FRAMES=124 TEXT_ROWS=300 gen=(--full) dit_shape=()
if [ "$dry" = 1 ]; then
  W=128 H=64 FRAMES=22 TEXT_ROWS=8
  dit_shape=(--layers 2 --hidden 256 --heads 2 --ffn 512 --text-dim 256)
  gen=("${dit_shape[@]}")
fi
status=0

BIN="mmh3-gen-tiny bench/mmh3-bench-dit bench/mmh3-bench-lora tests/unit/test_cuda_lora tests/unit/test_cuda_ops
  tests/unit/test_speed_qgemm"
step "build: $(echo $BIN)"
# shellcheck disable=SC2086
make_limit=$(limit 200) device_build lora $BIN || finish 1

devtest() {
  local name=$1 secs=$2 prog=$3 log="$OUT/lora_$1.txt"
  secs=$(limit "$secs")
  [ "$secs" -gt 0 ] || { note "SKIP $name: out of time"; return; }
  local req=(MMH3_REQUIRE_GPU=1); [ "$dry" = 1 ] && req=()
  run "$name" "$secs" "$log" env "${req[@]}" MMH3_BUILD="$B" MMH3_TEST_DATA="$top/tests/data" "$B/tests/unit/$prog"
  local rc=$? p f s
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP' "$log")
  grep -E '^FAIL|TIMEOUT|^mmh3: |^     ' "$log" | head -16
  note "$prog: $p passed, $f failed, $s skipped (exit $rc)"
  { [ "$rc" = 0 ] && [ "$f" = 0 ] && { [ "$p" -gt 0 ] || [ "$dry" = 1 ]; }; } || status=1
}

if want tests; then
  step "tests: the fused branch, the branch vs fp64, the forward with an adapter vs the CPU"
  devtest lora 150 test_cuda_lora
  devtest ops 120 test_cuda_ops
  devtest qgemm 60 test_speed_qgemm
fi

if want bench; then
  step "bench: a forward with and without rank-128 adapters on all blocks, ${W}x${H}x${FRAMES}"
  if ! device_wait_file "$DIT_CKPT" 240; then
    run dit_write "$(limit 120)" "$OUT/lora_dit_write.txt" "$B/bench/mmh3-bench-dit" --write-only "${dit_shape[@]}" \
      --write-random "$DIT_CKPT" || { note "FAIL: writing $DIT_CKPT"; finish 1; }
  fi
  A_SPLIT=/tmp/mmh3-lora-r128-split.safetensors A_NATIVE=/tmp/mmh3-lora-r128-native.safetensors
  for a in "diffusers:$A_SPLIT" "native:$A_NATIVE"; do
    sp=${a%%:*} f=${a#*:}
    [ -s "$f" ] || run "gen_$sp" "$(limit 90)" "$OUT/lora_gen_$sp.txt" "$B/mmh3-gen-tiny" lora "${gen[@]}" --rank 128 \
      --alpha 8 --gain 0.05 --spelling "$sp" --out "$f" || { note "FAIL: writing the $sp adapter"; status=1; }
  done
  for a in "split:$A_SPLIT" "native:$A_NATIVE"; do
    name=${a%%:*} f=${a#*:}
    secs=$(limit 150)
    [ "$secs" -gt 0 ] || { note "SKIP bench $name: out of time"; continue; }
    log="$OUT/lora_bench_$name.txt"
    run "bench_$name" "$secs" "$log" "$B/bench/mmh3-bench-lora" --checkpoint "$DIT_CKPT" --lora "$f" \
      --device "$DEV" --width $W --height $H --frames $FRAMES --text-rows $TEXT_ROWS --modes exact,fast
    rc=$?
    grep -E '^(adapter|S =|mode |RESULT|FAIL|PASS)' "$log" | cut -c1-260
    while read -r line; do note "$name: $line"; done < <(grep '^RESULT' "$log")
    grep -q '^PASS mmh3-bench-lora' "$log" || { note "FAIL bench $name (exit $rc, $log)"; status=1; }
  done
fi
finish $status
