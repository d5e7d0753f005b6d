#!/usr/bin/env bash
# Device memory on the GPU host: budgets of 22, 30 and 46 GiB against the fully resident DiT at clip5
# (1344x768x124, S = 38,010), ~3 minutes after the build.
#
#   tests    test_cuda_runtime (the allocator, copies, events, the upload queue and pinned memory it
#            uses) and test_dit_stream (streamed blocks on the CPU path of the same build) (~60 s)
#   check    mmh3 check --vram-budget 22 on the full-size random files when present: the plan it prints
#   bench    bench/mmh3-bench-vram --budgets resident,22,30,46: per budget the plan, the DiT loaded with
#            its streamed blocks, one warm-up + 2 timed forwards, the denoising phase's peak device memory
#            (the allocator's high-water mark), the plan's peaks of every phase, and the velocities compared
#            bit for bit with the resident run (RESULT lines; ratio = s/forward over the resident one)
#                                                                                            (~120 s)
#   arch     (not in the default) configure --with-cuda-arch (the release list) in build-fat/ and nvcc
#            of every kernel for sm_80 sm_86 sm_89 sm_90a sm_100 sm_120: that the fat build compiles
#
#   device: bash tests/device/vram.sh [--part tests,check,bench,arch] [--budgets resident,22,30,46]
#           (VRAM_BENCH_ARGS: more bench flags, e.g. "--frames 362 --warmup 0 --iters 1" for clip15)
#           or: bash tests/device/session.sh --steps vram:200
#   CPU stand-in: MMH3_DEVICE_DRY=1 (the tests only; the bench needs a GPU).
# The full-size random DiT ($DIT_CKPT) is written when missing (~30 s). Summary: $OUT/summary_vram.txt.
set -u
. "$(dirname "$0")/lib.sh"
device_summary vram summary_vram.txt

part=tests,check,bench budgets=resident,22,30,46
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    *) echo "vram.sh: unknown argument $1"; exit 2 ;;
  esac
done
want() { [[ ",$part," == *",$1,"* ]]; }
status=0
step "build"
device_build vram mmh3 mmh3-gen-tiny bench/mmh3-bench-vram bench/mmh3-bench-dit tests/unit/test_cuda_runtime \
  tests/unit/test_dit_stream || finish 1

if want tests; then
  step "tests: the runtime (upload queue) and streamed blocks"
  for t in test_cuda_runtime:120 test_dit_stream:200; do
    prog=${t%%:*} secs=${t#*:} log="$OUT/vram_$prog.txt"
    req=(MMH3_REQUIRE_GPU=1); [ "$dry" = 1 ] && req=()
    [ "$prog" = test_dit_stream ] && req=()
    timeout --kill-after=5 "$secs" env "${req[@]}" MMH3_BUILD="$B" MMH3_TEST_DATA="$top/tests/data" \
      "$B/tests/unit/$prog" >"$log" 2>&1
    rc=$? p=$(grep -c '^PASS ' "$log") f=$(grep -c '^FAIL ' "$log")
    grep -E '^FAIL|^     ' "$log" | head -12
    note "$prog: $p passed, $f failed (exit $rc)"
    { [ "$rc" = 0 ] && [ "$f" = 0 ] && [ "$p" -gt 0 ]; } || status=1
  done
fi

if [ "$dry" = 0 ] && { want bench || want check; }; then
  if ! device_wait_file "$DIT_CKPT" 240; then
    step "writing the full-size random DiT"
    timeout 200 "$B/bench/mmh3-bench-dit" --write-only --write-random "$DIT_CKPT" >"$OUT/vram_write.txt" 2>&1 ||
      { note "FAIL: writing $DIT_CKPT"; finish 1; }
  fi
fi

if want check && [ "$dry" = 0 ]; then
  step "check: the plan mmh3 check prints for 22 GiB"
  files=(--dit-fl2va-path "$DIT_CKPT")
  [ -s "$TE_CKPT" ] && files+=(--text-encoder-path "$TE_CKPT")
  [ -s "$VV_CKPT" ] && files+=(--video-vae-path "$VV_CKPT")
  [ -s "$AV_CKPT" ] && files+=(--audio-vae-path "$AV_CKPT")
  timeout 60 "$B/mmh3" check "${files[@]}" --vram-budget 22 >"$OUT/vram_check.txt" 2>&1
  sed -n '/^gpus/,/^loras/p' "$OUT/vram_check.txt" | head -20
  note "check: $(grep -A1 '^memory plan' "$OUT/vram_check.txt" | tail -1 | cut -c1-200)"
fi

if want bench && [ "$dry" = 0 ]; then
  step "bench: clip5 at budgets $budgets"
  timeout 400 "$B/bench/mmh3-bench-vram" --checkpoint "$DIT_CKPT" --budgets "$budgets" ${VRAM_BENCH_ARGS:-} >"$OUT/vram_bench.txt" 2>&1
  rc=$?
  grep -E '^budget|^  loaded|^RESULT|^PASS|^FAIL' "$OUT/vram_bench.txt"
  while read -r line; do note "$line"; done < <(grep -E '^RESULT|^FAIL|^PASS' "$OUT/vram_bench.txt")
  [ "$rc" = 0 ] || status=1
fi

if want arch; then
  step "arch: the release's fat build (every kernel for every target)"
  mkdir -p "$top/build-fat"
  ( cd "$top/build-fat" && { [ -f Makefile ] || ../configure --without-server --without-ffmpeg >"$OUT/vram_fat_configure.txt" 2>&1; } ) &&
    grep -E '^CUDA_ARCH_LIST' "$top/build-fat/Makefile" &&
    timeout 600 make -C "$top/build-fat" -j"$(nproc)" libmmh3.a >"$OUT/vram_fat_build.txt" 2>&1
  rc=$?
  note "fat build ($(grep -E '^CUDA_ARCH_LIST' "$top/build-fat/Makefile" | cut -d= -f2)): exit $rc"
  [ "$rc" = 0 ] || { tail -20 "$OUT/vram_fat_build.txt"; status=1; }
fi
finish $status
