#!/usr/bin/env bash
# Several GPUs on the GPU host (issue 13). Works on any number of GPUs:
#
#   one GPU (nvidia-h200):  world size 1 — NCCL loads from PyTorch's venv and
#       its send/recv runs (each rank's messages to itself), the host world and
#       a host-staged copy run on GPU buffers, the sequence-parallel DiT over 1
#       GPU equals the plain CUDA forward on the kit and at full width/length
#       (1344x768x124, L=300; fewer blocks with --layers to save time);
#   N GPUs (nvidia-h200-x2/x4/x8): the same, plus NCCL over every GPU, the
#       peer-copy integrity probe of every ordered pair (mmh3 check), and
#       s/forward at 1344x768x124 for 1, 2, 4, 8 GPUs with speed-up, scaling
#       efficiency and equality with the one-GPU output.
#
#   here:    bash tests/device/prepare.sh          (fills .carry/: debs, configure)
#   device:  bash tests/device/multigpu.sh [--part unit,check,bench] [--layers 50] [--gpus 1,2,4,8]
#            with carry [".carry"]; NCCL_NVLS_ENABLE=0 is set here and again by mmh3 itself.
#
# Expected durations on H200s (build-device/ reused when present): build ≈ 15-90 s, unit ≈ 30 s,
# check ≈ 10 s, bench: writing the random checkpoint ≈ 20 s per 10 blocks on 16 cores (skipped
# when $MMH3_DIT_RANDOM exists), then per group size one load (≈ 5-20 s) + 3 forwards.
# Every step runs under `timeout`; logs and results go straight to $OUT; progress lines on stdout.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
OUT=${OUT:-$top/tests/out/device}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/multigpu.log") 2>&1

# NVLink multicast must stay off on these shared hosts (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

part=unit,check,bench
layers=50
gpus=1,2,4,8
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --gpus) gpus=$2; shift 2 ;;
    *) echo "multigpu.sh: unknown argument $1"; exit 2 ;;
  esac
done
want() { [[ ",$part," == *",$1,"* ]]; }

t0=$SECONDS
step() { echo; echo "=== [$((SECONDS - t0))s] $*"; }
summary=()
note() { summary+=("$*"); echo ">> $*"; }
finish() {
  echo; echo "================ multigpu summary ($((SECONDS - t0)) s)"
  printf '%s\n' "${summary[@]}" | tee "$OUT/summary_multigpu.txt"
  exit "${1:-0}"
}

step "host"
nvidia-smi -L 2>&1 | tee "$OUT/gpus.txt"
ngpu=$(grep -c '^GPU ' "$OUT/gpus.txt" || true)
nvidia-smi topo -m >"$OUT/topology.txt" 2>&1 || true
note "GPUs: $ngpu"
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
# NCCL: mmh3 searches PyTorch's venv by itself; name the file for the log.
nccl=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -1)
[ -n "$nccl" ] && [ -z "${MMH3_NCCL_LIB:-}" ] && export MMH3_NCCL_LIB=$nccl
note "NCCL: ${MMH3_NCCL_LIB:-searched by mmh3 (none named)}"

step "dependencies and build (build-device/)"
P=/tmp/mmh3-deps
if ls .carry/debs/*.deb >/dev/null 2>&1; then
  mkdir -p "$P"; for d in .carry/debs/*.deb; do dpkg-deb -x "$d" "$P"; done
  LIBDIR=$P/usr/lib/x86_64-linux-gnu
  export JANSSON_CFLAGS="-I$P/usr/include" JANSSON_LIBS="-L$LIBDIR -Wl,-rpath,$LIBDIR -ljansson"
  export PCRE2_CFLAGS="-I$P/usr/include" PCRE2_LIBS="-L$LIBDIR -Wl,-rpath,$LIBDIR -lpcre2-8"
  export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  command -v make >/dev/null || export PATH="$PATH:$P/usr/bin"
fi
export CUDA_ARCH=${CUDA_ARCH:--gencode arch=compute_90a,code=sm_90a}
B=$top/build-device
if [ ! -f "$B/Makefile" ]; then
  if [ -f .carry/autotools.tar.gz ]; then
    tar -xzf .carry/autotools.tar.gz
    touch aclocal.m4; sleep 1; touch configure config.h.in; sleep 1
    find . -name Makefile.in -not -path './.carry/*' -exec touch {} +
  elif command -v autoreconf >/dev/null; then
    autoreconf -fi 2>&1 | tail -3
  else
    note "FAIL: no configure (run tests/device/prepare.sh here and carry .carry)"; finish 1
  fi
  mkdir -p "$B"
  (cd "$B" && timeout 300 ../configure --with-cuda=yes --without-server --without-ffmpeg >"$OUT/configure_multigpu.log" 2>&1) ||
    { tail -30 "$OUT/configure_multigpu.log"; note "FAIL: configure"; finish 1; }
fi
targets="mmh3 mmh3-gen-tiny bench/mmh3-bench-dit bench/mmh3-bench-sp tests/unit/test_parallel_partition tests/unit/test_parallel_comm tests/unit/test_parallel_dit"
if ! (cd "$B" && timeout 600 make -j"$(nproc)" $targets) >"$OUT/build_multigpu.log" 2>&1; then
  grep -E -B2 -A6 'error|Error' "$OUT/build_multigpu.log" | head -80; note "FAIL: build"; finish 1
fi
note "build ok"
status=0
export MMH3_BUILD=$B

if want unit; then
  for t in test_parallel_partition test_parallel_comm test_parallel_dit; do
    step "unit: $t (MMH3_REQUIRE_GPU=1)"
    MMH3_REQUIRE_GPU=1 timeout 180 "$B/tests/unit/$t" 2>&1 | tee "$OUT/unit_$t.txt"
    rc=${PIPESTATUS[0]}
    fails=$(grep -c '^FAIL' "$OUT/unit_$t.txt" || true)
    passes=$(grep -c '^PASS' "$OUT/unit_$t.txt" || true)
    note "unit $t: $passes passed, $fails failed (exit $rc)"
    [ "$rc" = 0 ] || status=1
  done
fi

if want check; then
  step "mmh3 check: GPUs, placement, peer-copy integrity probe"
  timeout 120 "$B/mmh3" check --models-path /nonexistent 2>&1 | tee "$OUT/check.txt"
  note "check: $(grep -i 'peer' "$OUT/check.txt" | head -1 | sed 's/^ *//')"
  note "check: $(grep -i 'placement\|dit=' "$OUT/check.txt" | head -1 | sed 's/^ *//')"
fi

if want bench; then
  CKPT=${MMH3_DIT_RANDOM:-/tmp/mmh3-dit-random-l$layers.safetensors}
  [ "$layers" = 50 ] && [ -z "${MMH3_DIT_RANDOM:-}" ] && [ -f /tmp/mmh3-dit-full-random.safetensors ] &&
    CKPT=/tmp/mmh3-dit-full-random.safetensors
  if [ ! -f "$CKPT" ]; then
    step "random DiT in the real layout ($layers blocks, hidden 5376, 56x128 heads) → $CKPT"
    timeout 420 "$B/bench/mmh3-bench-dit" --write-random "$CKPT" --layers "$layers" --write-only 2>&1 | tail -3
    [ -f "$CKPT" ] || { note "FAIL: writing the random checkpoint"; finish 1; }
  fi
  step "sequence-parallel forward at 1344x768x124 (t2va, L=300), GPUs $gpus (of $ngpu)"
  timeout 540 "$B/bench/mmh3-bench-sp" --checkpoint "$CKPT" --gpus "$gpus" --width 1344 --height 768 --frames 124 \
      --text-rows 300 --warmup 1 --iters 2 2>&1 | tee "$OUT/bench_sp.txt"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || status=1
  while read -r line; do note "$line"; done < <(grep -E '^(RESULT|PASS|FAIL|SKIP)' "$OUT/bench_sp.txt")
  awk '$1 == "RESULT" && $2 == "sp" { printf "| %s | %s | %s | %s | %s |\n", $3, $4, $5, $6, $7 }' \
      "$OUT/bench_sp.txt" | sed 's/[a-z_0-9]*=//g' >"$OUT/bench_sp_table.md"
  note "table (gpus | s/forward | speed-up | efficiency | rel_l2 video) in bench_sp_table.md ($layers blocks)"
fi
finish $status
