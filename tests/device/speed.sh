#!/usr/bin/env bash
# Issue 9 (DiT speed) on the GPU host, in one call of at most ~6 minutes:
#
#   build     configure (if build-device/ is not there yet) + make the programs below
#   fa3       tests/unit/test_speed_attention: the FA3-style Hopper attention (bf16 and
#             e4m3) against its CPU twin, 12 cases              → decides MMH3_DIT_ATTN=fa3
#   qgemm     tests/unit/test_speed_qgemm: the Hopper int8 GEMM with the fused epilogue, bit
#             for bit against the cuBLASLt path and the CPU twin → decides MMH3_DIT_GEMM=sm90;
#             then bench/mmh3-bench-qgemm: the four linears at S=38010, both paths, timed
#   kit       the DiT conformance kit with --device cuda through the fused CUDA block
#             (dit_block_cuda.c: fused norm/quant, int8 GEMM + gated residual, q/k norm + RoPE)
#   attn      bench/mmh3-bench-attn at S=38010, 56 heads: every attention kernel, timed,
#             each checked against the first (sm80)
#   forward   bench/mmh3-bench-dit at 1344x768x124 t2va L=300 on a random full-size
#             checkpoint (written here if missing): exact then fast mode on the same
#             request, fast-vs-exact velocity error, per-kernel breakdown of block 1
#   ref       bench/reference/dit_ref.py (PyTorch, int8 _int_mm + SDPA) on the same GPU
#   quality   bench/mmh3-bench-dit-quality: fast vs exact over a whole sampler run
#             (per-step velocity error, final latent PSNR, decoded-frame PSNR through
#             the kit's small video VAE) at 1344x768x22, 8 steps, full-size weights
#   kernels   tests/unit/test_cuda_kernels (the CUDA helper's kernel tests; includes the
#             fused RMSNorm+modulation+ConvRot case that hung in runs #2/#3)
#   clips     (not in "all": ~4-5 min on its own) 10 s and 15 s clips at 1344x768 (243 and 362
#             frames: S = 73,586 and 109,262): one forward each in exact and fast mode, peak
#             memory, and the PyTorch reference at the same sizes; run it as
#             `--part fa3,qgemm,clips --budget 330` so the verified kernels are selected
#
#   here:    bash tests/device/prepare.sh
#   device:  bash tests/device/speed.sh [--part a,b,...] [--budget SECONDS]     carry [".carry"]
#            (parts: build,fa3,qgemm,kit,attn,forward,ref,quality,kernels,clips; all = every part but clips)
#
# Every step runs under `timeout` (its own limit, cut to what is left of the
# budget, default 350 s; steps that no longer fit are skipped and say so).
# Progress lines "=== [Ns] step" and one ">>" line per result go to stdout;
# full logs under $OUT (speed_*.txt); the summary is printed last and kept in
# $OUT/summary_speed.txt.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
OUT=${OUT:-$top/tests/out/device}
mkdir -p "$OUT"

part=all
budget=350
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    *) echo "speed.sh: unknown argument $1"; exit 2 ;;
  esac
done
want() { { [ "$part" = all ] && [ "$1" != clips ]; } || [[ ",$part," == *",$1,"* ]]; }

t0=$SECONDS
step() { echo; echo "=== [$((SECONDS - t0))s] $*"; }
summary=()
note() { summary+=("$*"); echo ">> $*"; }
finish() {
  echo; echo "================ speed summary ($((SECONDS - t0)) s)"
  printf '%s\n' "${summary[@]}" | tee "$OUT/summary_speed.txt"
  exit "${1:-0}"
}
# limit SECONDS: the step's time limit within what is left of the budget (0: no time left)
limit() {
  local left=$((budget - (SECONDS - t0)))
  local l=$1; [ "$left" -lt "$l" ] && l=$left
  [ "$l" -lt 15 ] && l=0
  echo "$l"
}
skipped() { note "SKIP $1: out of time (budget ${budget}s)"; }
# run NAME SECONDS LOG CMD...: under timeout, stdout+stderr into LOG and to our stdout
run() {
  local name=$1 secs=$2 log=$3; shift 3
  timeout --kill-after=5 "$secs" "$@" >"$log" 2>&1
  local rc=$?
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "TIMEOUT $name after ${secs}s" >>"$log"
  return $rc
}

step "host"
timeout 10 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 || true
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
PY=""
for p in python3 /opt/torch/.venv/bin/python3; do
  if timeout 30 "$p" -c 'import torch, safetensors' 2>/dev/null; then PY=$p; break; fi
done
echo "python with torch: ${PY:-none}"
status=0

B=$top/build-device
BIN="mmh3 bench/mmh3-bench-dit bench/mmh3-bench-attn bench/mmh3-bench-qgemm bench/mmh3-bench-dit-quality tests/unit/test_speed_attention tests/unit/test_speed_qgemm tests/unit/test_cuda_kernels"
step "dependencies, configure (if needed) and build: $BIN"
P=/tmp/mmh3-deps
if ls .carry/debs/*.deb >/dev/null 2>&1; then
  mkdir -p "$P"; for d in .carry/debs/*.deb; do dpkg-deb -x "$d" "$P"; done
  LIBDIR=$P/usr/lib/x86_64-linux-gnu
  export JANSSON_CFLAGS="-I$P/usr/include" JANSSON_LIBS="-L$LIBDIR -Wl,-rpath,$LIBDIR -ljansson"
  export PCRE2_CFLAGS="-I$P/usr/include" PCRE2_LIBS="-L$LIBDIR -Wl,-rpath,$LIBDIR -lpcre2-8"
  export UTF8PROC_CFLAGS="-I$P/usr/include" UTF8PROC_LIBS="-L$LIBDIR -Wl,-rpath,$LIBDIR -lutf8proc"
  export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  command -v make >/dev/null || export PATH="$PATH:$P/usr/bin"
fi
if want build || [ ! -x "$B/bench/mmh3-bench-dit" ]; then
  if [ ! -f "$B/Makefile" ]; then
    want_stamp=$(bash tests/device/autotools_stamp.sh 2>/dev/null || echo x)
    have_stamp=$(cat .carry/autotools.stamp 2>/dev/null || echo none)
    if [ -f .carry/autotools.tar.gz ] && [ "$want_stamp" = "$have_stamp" ]; then
      tar -xzf .carry/autotools.tar.gz
      touch aclocal.m4; sleep 1; touch configure config.h.in; sleep 1
      find . -name Makefile.in -not -path './.carry/*' -exec touch {} +
    elif command -v autoreconf >/dev/null; then
      autoreconf -fi 2>&1 | tail -3
    else
      note "FAIL build: stale or missing .carry autotools outputs (run tests/device/prepare.sh here)"; finish 1
    fi
    mkdir -p "$B"
    (cd "$B" && timeout 120 ../configure --with-cuda=yes --without-server --without-ffmpeg \
        CUDA_ARCH="${CUDA_ARCH:--gencode arch=compute_90a,code=sm_90a}" >"$OUT/speed_configure.txt" 2>&1) ||
      { tail -30 "$OUT/speed_configure.txt"; note "FAIL configure"; finish 1; }
  fi
  secs=$(limit 240)
  [ "$secs" -gt 0 ] || skipped build
  if ! run build "$secs" "$OUT/speed_build.txt" make -C "$B" -j"$(nproc)" $BIN; then
    grep -E -B2 -A6 'error|Error' "$OUT/speed_build.txt" | head -60; note "FAIL build (speed_build.txt)"; finish 1
  fi
  note "build ok ($((SECONDS - t0)) s)"
fi

fa3_ok=0
if want fa3; then
  step "fa3: Hopper attention vs its CPU twin (tests/unit/test_speed_attention)"
  secs=$(limit 60)
  [ "$secs" -gt 0 ] || skipped fa3
  if [ "$secs" -gt 0 ]; then
    run fa3 "$secs" "$OUT/speed_fa3.txt" env MMH3_REQUIRE_GPU=1 "$B/tests/unit/test_speed_attention"
    rc=$?
    grep -E '^(PASS|FAIL|SKIP)|rel_l2' "$OUT/speed_fa3.txt" | tail -30
    p=$(grep -c '^PASS ' "$OUT/speed_fa3.txt"); f=$(grep -c '^FAIL ' "$OUT/speed_fa3.txt")
    if [ "$rc" = 0 ] && [ "$f" = 0 ] && [ "$p" -gt 0 ]; then fa3_ok=1; fi
    note "fa3 device test: $p passed, $f failed (exit $rc)$( [ $fa3_ok = 1 ] && echo ' -> MMH3_DIT_ATTN=fa3 for the forward')"
    [ "$fa3_ok" = 1 ] || status=1
  fi
fi
[ "$fa3_ok" = 1 ] && export MMH3_DIT_ATTN=fa3

gemm_ok=0
if want qgemm; then
  step "qgemm: Hopper int8 GEMM + fused epilogue vs the cuBLASLt path (tests/unit/test_speed_qgemm)"
  secs=$(limit 60)
  [ "$secs" -gt 0 ] || skipped qgemm
  if [ "$secs" -gt 0 ]; then
    run qgemm "$secs" "$OUT/speed_qgemm.txt" env MMH3_REQUIRE_GPU=1 "$B/tests/unit/test_speed_qgemm"
    rc=$?
    grep -E '^(PASS|FAIL|SKIP)|differ' "$OUT/speed_qgemm.txt" | tail -20
    p=$(grep -c '^PASS ' "$OUT/speed_qgemm.txt"); f=$(grep -c '^FAIL ' "$OUT/speed_qgemm.txt")
    if [ "$rc" = 0 ] && [ "$f" = 0 ] && [ "$p" -gt 0 ]; then gemm_ok=1; fi
    note "qgemm device test: $p passed, $f failed (exit $rc)$( [ $gemm_ok = 1 ] && echo ' -> MMH3_DIT_GEMM=sm90 for the forward')"
    [ "$gemm_ok" = 1 ] || status=1
  fi
  secs=$(limit 60)
  [ "$secs" -gt 0 ] || skipped qgemm-bench
  if [ "$secs" -gt 0 ]; then
    run qgemm-bench "$secs" "$OUT/speed_qgemm_bench.txt" "$B/bench/mmh3-bench-qgemm" --rows 38010 --reps 2
    while read -r line; do note "$line"; done < <(grep '^QGEMM' "$OUT/speed_qgemm_bench.txt")
  fi
fi
[ "$gemm_ok" = 1 ] && export MMH3_DIT_GEMM=sm90

if want kit; then
  step "kit: DiT conformance on CUDA through the fused block"
  secs=$(limit 90)
  [ "$secs" -gt 0 ] || skipped kit
  if [ "$secs" -gt 0 ]; then
    run kit "$secs" "$OUT/speed_kit_cuda.txt" "$B/mmh3" conformance tests/data/dit --device cuda
    rc=$?
    note "kit --device cuda (fused path): $(grep -E 'passed|failed' "$OUT/speed_kit_cuda.txt" | tail -1) (exit $rc)"
    grep '^FAIL' "$OUT/speed_kit_cuda.txt" | head -10
    [ "$rc" = 0 ] || status=1
  fi
fi

if want attn; then
  step "attn: every attention kernel at S=38010, 56 heads x 128"
  secs=$(limit 75)
  [ "$secs" -gt 0 ] || skipped attn
  if [ "$secs" -gt 0 ]; then
    run attn "$secs" "$OUT/speed_attn.txt" "$B/bench/mmh3-bench-attn" --seq 38010 --heads 56 --reps 2 \
        --paths sm80,sm90p,sm90pp,fa3,fa3-nopp,fa3-e4m3
    cat "$OUT/speed_attn.txt" | tail -12
    while read -r line; do note "$line"; done < <(grep '^ATTN' "$OUT/speed_attn.txt")
  fi
fi

CKPT=${MMH3_DIT_RANDOM:-/tmp/mmh3-dit-full-random.safetensors}
if want forward; then
  step "forward: 1344x768x124 t2va L=300, exact + fast, breakdown of block 1 (attention: ${MMH3_DIT_ATTN:-mm_attention}, int8 GEMM: ${MMH3_DIT_GEMM:-cublaslt})"
  secs=$(limit 150)
  [ "$secs" -gt 0 ] || skipped forward
  if [ "$secs" -gt 0 ]; then
    gen=(--checkpoint "$CKPT"); [ -f "$CKPT" ] || gen=(--write-random "$CKPT")
    run forward "$secs" "$OUT/speed_forward.txt" "$B/bench/mmh3-bench-dit" "${gen[@]}" --device cuda --width 1344 \
        --height 768 --frames 124 --text-rows 300 --warmup 1 --iters 1 --modes exact,fast --profile-block 1
    rc=$?
    grep -E '^(mode|forward|QUALITY|RESULT|BREAKDOWN|\(|  )' "$OUT/speed_forward.txt" | head -60
    while read -r line; do note "$line"; done < <(grep -E '^(RESULT|QUALITY)' "$OUT/speed_forward.txt")
    [ "$rc" = 0 ] || { note "FAIL forward (exit $rc, speed_forward.txt)"; status=1; }
  fi
fi

if want ref; then
  step "ref: PyTorch reference forward (int8 _int_mm + SDPA) on the same GPU"
  secs=$(limit 90)
  [ "$secs" -gt 0 ] || skipped ref
  if [ "$secs" -gt 0 ] && [ -n "$PY" ]; then
    run ref "$secs" "$OUT/speed_ref.txt" env PYTHONUNBUFFERED=1 "$PY" bench/reference/dit_ref.py --width 1344 \
        --height 768 --frames 124 --text-rows 300 --linear int8 --warmup 1 --iters 1
    tail -5 "$OUT/speed_ref.txt"
    while read -r line; do note "$line"; done < <(grep '^RESULT' "$OUT/speed_ref.txt")
  elif [ -z "$PY" ]; then
    note "SKIP ref: no python with torch"
  fi
fi

if want quality; then
  step "quality: fast vs exact over a sampler run (1344x768x22, 8 steps, full-size random weights, kit VAE)"
  secs=$(limit 70)
  [ "$secs" -gt 0 ] || skipped quality
  if [ "$secs" -gt 0 ] && [ -f "$CKPT" ]; then
    run quality "$secs" "$OUT/speed_quality.txt" "$B/bench/mmh3-bench-dit-quality" --checkpoint "$CKPT" \
        --video-vae tests/data/vae/video_vae.safetensors --device cuda --width 1344 --height 768 --frames 22 \
        --text-rows 300 --steps 8 --seed 42
    grep -E '^(quality|QUALITY|RESULT|FAIL)' "$OUT/speed_quality.txt" | tail -14
    while read -r line; do note "$line"; done < <(grep -E '^(QUALITY final|RESULT)' "$OUT/speed_quality.txt")
  fi
fi

if want kernels; then
  step "kernels: tests/unit/test_cuda_kernels (fused ConvRot case fixed here; Hopper attention variants)"
  secs=$(limit 90)
  [ "$secs" -gt 0 ] || skipped kernels
  if [ "$secs" -gt 0 ]; then
    run kernels "$secs" "$OUT/speed_kernels.txt" env MMH3_REQUIRE_GPU=1 "$B/tests/unit/test_cuda_kernels"
    rc=$?
    note "test_cuda_kernels: $(grep -c '^PASS' "$OUT/speed_kernels.txt") passed, $(grep -c '^FAIL' "$OUT/speed_kernels.txt") failed (exit $rc)"
    grep -E '^FAIL|TIMEOUT' "$OUT/speed_kernels.txt" | head -8
  fi
fi

if want clips; then
  for frames in 243 362; do
    step "clips: 1344x768x$frames t2va L=300, one forward exact + fast (attention: ${MMH3_DIT_ATTN:-mm_attention}, int8 GEMM: ${MMH3_DIT_GEMM:-cublaslt})"
    secs=$(limit 150)
    [ "$secs" -gt 0 ] || skipped "clips $frames"
    if [ "$secs" -gt 0 ]; then
      gen=(--checkpoint "$CKPT"); [ -f "$CKPT" ] || gen=(--write-random "$CKPT")
      run "clips-$frames" "$secs" "$OUT/speed_clip_$frames.txt" "$B/bench/mmh3-bench-dit" "${gen[@]}" --device cuda \
          --width 1344 --height 768 --frames "$frames" --text-rows 300 --warmup 0 --iters 1 --modes exact,fast \
          --profile-block -1
      while read -r line; do note "frames $frames: $line"; done < <(grep -E '^(RESULT|QUALITY)' "$OUT/speed_clip_$frames.txt")
    fi
    secs=$(limit 120)
    if [ "$secs" -gt 0 ] && [ -n "$PY" ]; then
      run "clips-ref-$frames" "$secs" "$OUT/speed_clip_ref_$frames.txt" env PYTHONUNBUFFERED=1 "$PY" \
          bench/reference/dit_ref.py --width 1344 --height 768 --frames "$frames" --text-rows 300 --linear int8 \
          --warmup 0 --iters 1
      while read -r line; do note "frames $frames: $line"; done < <(grep -E '^RESULT' "$OUT/speed_clip_ref_$frames.txt")
    fi
  done
fi

# ratios: PyTorch s/forward / mmh3 s/forward (> 1: mmh3 faster)
if [ -f "$OUT/speed_forward.txt" ] && [ -f "$OUT/speed_ref.txt" ]; then
  torch=$(awk '$1 == "RESULT" { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "s_per_forward") print kv[2] } }' "$OUT/speed_ref.txt" | tail -1)
  while read -r mode secs; do
    [ -n "$torch" ] && [ -n "$secs" ] && note "$(awk -v t="$torch" -v s="$secs" -v m="$mode" 'BEGIN { printf "ratio torch/mmh3 (%s): %.2fx (%.3f s vs %.3f s per forward)", m, t / s, t, s }')"
  done < <(awk '$1 == "RESULT" && $2 == "mmh3" { m = ""; s = ""; for (i = 3; i <= NF; i++) { split($i, kv, "=");
             if (kv[1] == "mode") m = kv[2]; if (kv[1] == "s_per_forward") s = kv[2] } print m, s }' "$OUT/speed_forward.txt")
fi
finish $status
