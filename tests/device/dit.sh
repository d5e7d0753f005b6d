#!/usr/bin/env bash
# DiT on the GPU host: (a) the conformance kit with --device cuda, and the CUDA
# outputs next to the CPU ones; (b) one full-size forward on random weights in
# the real file layout (50 blocks, hidden 5376; 1344x768x124 t2va, L = 300,
# S = 38010): s/forward, TFLOP/s, peak memory; (c) the same forward in plain
# PyTorch (bench/reference/dit_ref.py) on the same GPU, and the ratio.
#
#   here:    bash tests/device/prepare.sh          (fills .carry/: debs, configure)
#   device:  bash tests/device/dit.sh [--part all | a comma list of rng,conformance,bench,ref]
#                                     [--ref-linear int8|bf16|both]
#            with carry [".carry"]
#
# (rng) also checks the torch CPU generator and sigma grids against torch on
# this host beyond what the kit pins (tests/device/torch_rng_check.py).
# Logs and outputs go to $OUT (dit.log, conformance_{cuda,cpu}.txt, the --out
# files, bench_mmh3.txt, bench_torch_*.txt, summary.txt); the last lines
# printed are the summary. Parts are independent so a run can be split over
# several 10-minute calls; the build directory build-device/ is reused.
set -u
. "$(dirname "$0")/lib.sh"
device_log dit.log
device_summary dit summary_dit.txt

part=all
ref_linear=int8
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift 2 ;;
    --ref-linear) ref_linear=$2; shift 2 ;;
    *) echo "dit.sh: unknown argument $1"; exit 2 ;;
  esac
done
want() { [ "$part" = all ] || [[ ",$part," == *",$1,"* ]]; }

step "host"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
device_python "torch, safetensors"
echo "python with torch: ${PY:-none}"

step "dependencies and build (build-device/)"
device_build dit mmh3 bench/mmh3-bench-dit || finish 1
note "build ok"
status=0

if want rng; then
  step "torch CPU generator and sigma grids vs torch on this host"
  if [ -n "$PY" ]; then
    "$PY" tests/device/torch_rng_check.py 2>&1 | tee "$OUT/torch_rng_check.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    note "$(tail -1 "$OUT/torch_rng_check.txt")"
  else
    note "FAIL: no python with torch for the generator check"; status=1
  fi
fi

if want conformance; then
  step "(a) conformance kit on CUDA"
  "$B/mmh3" conformance tests/data/dit --device cuda --out "$OUT/dit_cuda.safetensors" | tee "$OUT/conformance_cuda.txt"
  rc=${PIPESTATUS[0]}
  note "conformance --device cuda: $(tail -2 "$OUT/conformance_cuda.txt" | head -1) (exit $rc)"
  [ "$rc" = 0 ] || status=1
  step "(a) the same kit on the CPU, and CUDA vs CPU"
  "$B/mmh3" conformance tests/data/dit --device cpu --out "$OUT/dit_cpu.safetensors" >"$OUT/conformance_cpu.txt"
  note "conformance --device cpu: $(tail -2 "$OUT/conformance_cpu.txt" | head -1)"
  if [ -n "$PY" ]; then
    "$PY" - "$OUT/dit_cuda.safetensors" "$OUT/dit_cpu.safetensors" <<'PYEOF' | tee "$OUT/cuda_vs_cpu.txt"
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
worst = 0.0
for k in sorted(set(a) & set(b)):
    x, y = a[k].double(), b[k].double()
    rel = float((x - y).norm() / y.norm().clamp_min(1e-30))
    worst = max(worst, rel) if ".out." in k or ".final." in k else worst
    print(f"  {k:55s} rel_l2 {rel:.3g}  max_abs {float((x - y).abs().max()):.3g}")
print(f"CUDA vs CPU: worst output rel_l2 {worst:.3g} over {len(set(a) & set(b))} tensors")
PYEOF
    note "$(tail -1 "$OUT/cuda_vs_cpu.txt")"
  fi
fi

CKPT=$DIT_CKPT
if want bench; then
  step "(b) full-size random-weight DiT: write $CKPT, one forward at 1344x768x124 (t2va, L=300)"
  gen=(--checkpoint "$CKPT")
  [ -f "$CKPT" ] || gen=(--write-random "$CKPT")
  "$B/bench/mmh3-bench-dit" "${gen[@]}" --device cuda --width 1344 --height 768 --frames 124 --text-rows 300 \
      --warmup 1 --iters 2 2>&1 | tee "$OUT/bench_mmh3.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  note "mmh3: $(grep '^forward:' "$OUT/bench_mmh3.txt" | tail -1)"
fi

if want ref; then
  if [ -z "$PY" ]; then
    note "FAIL: no python with torch for the reference"; status=1
  else
    for lin in $( [ "$ref_linear" = both ] && echo "int8 bf16" || echo "$ref_linear" ); do
      step "(c) PyTorch reference forward (linears $lin) on the same GPU"
      PYTHONUNBUFFERED=1 "$PY" bench/reference/dit_ref.py --width 1344 --height 768 --frames 124 --text-rows 300 \
          --linear "$lin" --warmup 1 --iters 2 2>&1 | tee "$OUT/bench_torch_$lin.txt"
      note "torch-$lin: $(grep '^refiner' "$OUT/bench_torch_$lin.txt" | tail -1)"
    done
  fi
fi

# ratio = PyTorch s/forward / mmh3 s/forward (> 1: mmh3 is faster)
if [ -f "$OUT/bench_mmh3.txt" ]; then
  ours=$(awk '$1 == "RESULT" { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "s_per_forward") print kv[2] } }' "$OUT/bench_mmh3.txt" | tail -1)
  while read -r line; do note "$line"; done < <(
    for f in "$OUT"/bench_torch_*.txt; do
      [ -f "$f" ] || continue
      awk -v ours="$ours" '$1 == "RESULT" { s = ""; p = ""; for (i = 3; i <= NF; i++) { split($i, kv, "=");
          if (kv[1] == "s_per_forward") s = kv[2]; if (kv[1] == "peak_gib") p = kv[2] }
          if (s != "" && ours != "") printf "ratio %s / mmh3: %.2fx (%s s vs %s s per forward; torch peak %s GiB)\n", $2, s / ours, s, ours, p }' "$f"
    done)
fi
finish $status
