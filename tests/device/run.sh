#!/usr/bin/env bash
# The device run: ONE call on the GPU host (about 5 minutes) that builds mmh3
# with CUDA, runs every unit test (the CPU ones and the device tests
# tests/unit/test_cuda_*, with MMH3_REQUIRE_GPU=1), then benchmarks the
# kernels at the DiT's sizes next to the same ops in PyTorch.
#
#   here:    bash tests/device/prepare.sh        (fills .carry/, see there)
#   device:  bash tests/device/run.sh [--no-bench] [--bench-only SUBSTRING] [--no-build] [--no-tests]
#            with carry [".carry"]
#          MMH3_DEVICE_UNIT_SUITE=0 skips the (informational) CPU unit suite there.
#
# Everything is printed (build errors and test failures included) and logged
# under $OUT: run.log (all of it), configure.log, build.log, tests.log (the
# device tests), unit_suite.log, bench_cuda.txt, bench_torch.txt,
# bench_join.txt (8 files: what the device tool brings back). The last lines
# printed are the summary; the
# exit status is the device tests' verdict.
set -u
. "$(dirname "$0")/lib.sh"
device_log run.log

bench=1
build=1
tests=1
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) bench=0; shift ;;
    --bench-only) only=$2; shift 2 ;;
    --no-build) build=0; shift ;;   # reuse build-device/ from an earlier step of the same call
    --no-tests) tests=0; shift ;;
    *) echo "run.sh: unknown argument $1"; exit 2 ;;
  esac
done

# the summary, then the benchmark table; the log is complete when we exit
finish() {
  echo
  echo "================ summary ($((SECONDS - t0)) s)"
  printf '%s\n' "${summary[@]}"
  [ -f "$OUT/bench_join.txt" ] && cat "$OUT/bench_join.txt"
  exec 1>&- 2>&-
  wait "$device_tee_pid" 2>/dev/null
  exit "${1:-0}"
}

step "host"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 || true
nvcc --version 2>&1 | tail -1
gcc --version 2>&1 | head -1
nproc
for t in make autoreconf pkg-config python3; do printf '%-12s %s\n' "$t" "$(command -v $t || echo '(missing)')"; done

step "dependencies (.carry/debs)"
ls .carry/debs/*.deb >/dev/null 2>&1 ||
  { note "FAIL: .carry/debs is missing (run tests/device/prepare.sh here and carry .carry)"; finish 1; }
rm -rf /tmp/mmh3-deps
device_deps
command -v make >/dev/null || { note "FAIL: no make on this host and none carried"; finish 1; }

B=$top/build-device
if [ "$build" = 1 ]; then
step "autotools and configure (a fresh build-device/)"
rm -rf "$B"
device_configure "$B" configure.log --with-cuda=yes --without-server --without-ffmpeg \
  ${CUDA_ARCH:+CUDA_ARCH="$CUDA_ARCH"} || finish 1
tail -8 "$OUT/configure.log"

step "build (make -j$(nproc))"
if ! (cd "$B" && make -j"$(nproc)" && make -j"$(nproc)" check) >"$OUT/build.log" 2>&1; then
  grep -E -B2 -A6 'error|Error' "$OUT/build.log" | head -120
  note "FAIL: build (see build.log)"; finish 1
fi
note "build ok ($((SECONDS - t0)) s so far)"
else
  [ -x "$B/tests/device/bench_kernels" ] || { note "FAIL: --no-build but $B has no build"; finish 1; }
fi

tests_line="not run"
if [ "$tests" = 1 ]; then
step "device tests (tests/unit/test_cuda_*, test_backend_twins: each CUDA op against its CPU twin)"
export MMH3_REQUIRE_GPU=1
dev_pass=0 dev_fail=0 dev_skip=0
: >"$OUT/tests.log"
# ours, and the engine foundation's op-twins test (it runs its CUDA half where a GPU is usable)
for prog in "$B"/tests/unit/test_cuda_* "$B"/tests/unit/test_backend_twins; do
  [ -x "$prog" ] || continue
  name=$(basename "$prog")
  start=$SECONDS
  timeout --kill-after=5 90 "$prog" >"$OUT/$name.log" 2>&1
  rc=$?
  [ "$rc" -eq 124 ] && echo "FAIL $name: timed out after 90 s" >>"$OUT/$name.log"
  p=$(grep -c '^PASS ' "$OUT/$name.log"); f=$(grep -c '^FAIL ' "$OUT/$name.log"); s=$(grep -c '^SKIP ' "$OUT/$name.log")
  [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { f=1; echo "FAIL $name: exited with status $rc" >>"$OUT/$name.log"; }
  dev_pass=$((dev_pass + p)); dev_fail=$((dev_fail + f)); dev_skip=$((dev_skip + s))
  printf '  %-28s %4d passed %4d failed %4d skipped  (%ds)\n' "$name" "$p" "$f" "$s" $((SECONDS - start))
  grep -v '^PASS ' "$OUT/$name.log" | head -60
  { echo "=== $name"; cat "$OUT/$name.log"; } >>"$OUT/tests.log"
  rm -f "$OUT/$name.log"
done
tests_line="$dev_pass passed, $dev_fail failed, $dev_skip skipped"
note "device tests: $tests_line"

if [ "${MMH3_DEVICE_UNIT_SUITE:-1}" = 1 ]; then
step "the CPU unit suite on this host (informational: tests that read ../shared or the web stack fail here)"
timeout 240 tests/run --build "$B" unit >"$OUT/unit_suite.log" 2>&1
grep -E '^  unit/.*FAILED|passed, .* failed, .* skipped' "$OUT/unit_suite.log" | head -30
note "unit suite on the GPU host: $(tail -1 "$OUT/unit_suite.log")"
fi

fi

if [ "$bench" = 1 ]; then
  step "benchmark: our kernels"
  timeout --kill-after=5 200 "$B"/tests/device/bench_kernels ${only:+--only "$only"} 2>&1 | tee "$OUT/bench_cuda.txt"
  step "benchmark: PyTorch on the same GPU"
  PY=""
  for p in python3 /opt/torch/.venv/bin/python3; do
    if "$p" -c 'import torch' 2>/dev/null; then PY=$p; break; fi
  done
  if [ -n "$PY" ]; then
    PYTHONUNBUFFERED=1 timeout --kill-after=5 200 "$PY" tests/device/bench_torch.py 2>&1 | tee "$OUT/bench_torch.txt"
  else
    echo "no python with torch found" | tee "$OUT/bench_torch.txt"
  fi
  # ratio = PyTorch time / our time (> 1: we are faster)
  awk '
    $1 == "BENCH" && $4 == "ms" { ours[$2] = $3; tf[$2] = $5; order[++n] = $2 }
    $1 == "TORCH" && $4 == "ms" { ref[$2] = $3; rtf[$2] = $5 }
    END {
      if ("peak_bf16_gemm_8192" in ref) printf "torch bf16 GEMM peak (8192^3): %.1f TFLOP/s\n", rtf["peak_bf16_gemm_8192"]
      printf "%-28s %10s %10s %8s %10s %10s\n", "op", "ours ms", "torch ms", "ratio", "ours TF/s", "torch TF/s"
      for (i = 1; i <= n; i++) { k = order[i]; b = k
        sub(/^attn90p?p?_/, "attn_", b); sub(/^i8outer_/, "i8_", b)   # variants of one op share the reference
        if (b in ref) printf "%-28s %10.3f %10.3f %7.2fx %10.1f %10.1f\n", k, ours[k], ref[b], ref[b] / ours[k], tf[k], rtf[b]
        else printf "%-28s %10.3f %10s %8s %10.1f\n", k, ours[k], "-", "-", tf[k] }
    }' "$OUT/bench_cuda.txt" "$OUT/bench_torch.txt" >"$OUT/bench_join.txt"
fi

# With MMH3_REQUIRE_GPU=1 a device test never skips; a skip here means it did not run.
case "$tests_line" in *" passed, 0 failed, 0 skipped"|"not run") finish 0 ;; *) finish 1 ;; esac
