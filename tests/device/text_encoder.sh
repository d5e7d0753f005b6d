#!/usr/bin/env bash
# The prompt conditioner on the GPU host, in one call (~3-4 min with the build shared):
#   1. the conformance kit on CUDA (against the reference) and on the CPU,
#      then CUDA vs CPU output by output;
#   2. a full-size random-weight checkpoint in the release's exact layout
#      ($TE_CKPT, 15.7 GB, written there once by bench_text_encoder --generate and kept: the
#      engine's run links it), encoded by our CUDA path — a 300-token prompt and a 1344×768
#      keyframe + caption — nvfp4-resident and bf16-resident, and the same two inputs
#      through the transformers reference (bf16, SDPA) in the device's PyTorch venv, in the
#      same run; figures and their ratio at the end. Medians of $TE_REPS (default 3) after
#      one warm-up.
#
#   here:    bash tests/device/prepare.sh              (.carry/debs incl. libutf8proc, generated configure)
#            and either bash tests/device/prepare_engine.sh (the release's config + processor JSONs
#            in .carry/minimax-h3) or bash tests/device/text_encoder.sh --prepare (.carry/te only)
#   device:  bash tests/device/text_encoder.sh     with carry [".carry"]
#            (reuses build-device/ and $TE_CKPT when present; tests/device/session.sh call 2)
#   CPU stand-in (here): MMH3_DEVICE_DRY=1 — a tiny text encoder (mmh3-gen-tiny all, its patched
#            config), everything on the CPU, no transformers run.
#
#   The bench ends with TE_DECODE: the nvfp4 decode of one layer alone (GB/s moved), the part of
#   the nvfp4-resident time the bf16-resident run does not pay.
#
# Logs under $OUT: te_run.log, te_summary.txt, te_cuda_ops.txt, te_cuda.safetensors, te_cpu.safetensors.
set -u
. "$(dirname "$0")/lib.sh"

if [ "${1:-}" = "--prepare" ]; then
  src=""
  for d in "${MMH3_SHARED:-}" ../shared ../../shared ../../../shared; do
    [ -n "$d" ] && [ -f "$d/minimax-h3/FL2VA/text_encoder/config.json" ] && { src=$d/minimax-h3/FL2VA; break; }
  done
  [ -n "$src" ] || { echo "prepare: ../shared/minimax-h3/FL2VA not found (set MMH3_SHARED)"; exit 1; }
  mkdir -p .carry/te
  cp "$src/text_encoder/config.json" .carry/te/config.json
  cp "$src/processor/preprocessor_config.json" "$src/processor/video_preprocessor_config.json" .carry/te/
  ls -la .carry/te
  exit 0
fi

device_log te_run.log
device_summary "text encoder" te_summary.txt
REPS=${TE_REPS:-3}

step "build"
targets=(mmh3 mmh3-gen-tiny bench/bench_text_encoder)
[ "$dry" = 1 ] || targets+=(tests/unit/test_cuda_ops)
device_build te "${targets[@]}" || finish 1
note "build ok ($((SECONDS - t0)) s)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1

if [ "$dry" = 0 ]; then # the nvfp4 decode (128-bit and general kernels) bit for bit against its CPU twin, among all ops
  step "CUDA ops vs their CPU twins"
  timeout 120 "$B/tests/unit/test_cuda_ops" >"$OUT/te_cuda_ops.txt" 2>&1
  grep -E '^FAIL|nvfp4' "$OUT/te_cuda_ops.txt"
  note "cuda ops: $(grep -c '^PASS' "$OUT/te_cuda_ops.txt") passed, $(grep -c '^FAIL' "$OUT/te_cuda_ops.txt") failed"
fi

device_python "torch, transformers"

step "kit on $DEV"
timeout 120 "$B/mmh3" conformance tests/data/text_encoder --device "$DEV" --out "$OUT/te_cuda.safetensors" |
  tee "$OUT/te_kit_cuda.txt" | grep -v '^PASS'
note "kit $DEV: $(tail -2 "$OUT/te_kit_cuda.txt" | grep passed)"
step "kit on CPU"
timeout 120 "$B/mmh3" conformance tests/data/text_encoder --device cpu --out "$OUT/te_cpu.safetensors" >"$OUT/te_kit_cpu.txt" 2>&1
note "kit cpu: $(tail -2 "$OUT/te_kit_cpu.txt" | grep passed)"
if [ -n "$PY" ] && [ -f "$OUT/te_cuda.safetensors" ] && [ -f "$OUT/te_cpu.safetensors" ]; then
  timeout 60 "$PY" - "$OUT/te_cuda.safetensors" "$OUT/te_cpu.safetensors" <<'PYEOF'
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
worst = 0.0
for k in sorted(b):
    x, y = a[k].double(), b[k].double()
    rel = ((x - y).norm() / y.norm().clamp_min(1e-30)).item()
    worst = max(worst, rel)
    print(f"TE_CUDA_VS_CPU {k:<36} rel_l2 {rel:.3g} max_abs {(x - y).abs().max().item():.3g}")
print(f"TE_CUDA_VS_CPU worst rel_l2 {worst:.3g} over {len(b)} tensors")
PYEOF
fi

step "full-size random checkpoint ($TE_CKPT)"
# the release's config + processor JSONs: .carry/te (--prepare) or .carry/minimax-h3 (prepare_engine.sh)
rel=.carry/minimax-h3/FL2VA
cfg=.carry/te/config.json; [ -f "$cfg" ] || cfg=$rel/text_encoder/config.json
iproc=.carry/te/preprocessor_config.json; [ -f "$iproc" ] || iproc=$rel/processor/preprocessor_config.json
vproc=.carry/te/video_preprocessor_config.json; [ -f "$vproc" ] || vproc=$rel/processor/video_preprocessor_config.json
LAYERS=${TE_LAYERS:-50} TOKENS=300 KEYFRAME=1344x768
if [ "$dry" = 1 ]; then # a tiny encoder with its patched config (mmh3-gen-tiny all)
  device_dry_models || { note "FAIL: mmh3-gen-tiny all"; finish 1; }
  cfg=$DRY_MODELS/MiniMax-H3/FL2VA/text_encoder/config.json LAYERS=4 TOKENS=24 KEYFRAME=128x128
fi
[ -f "$cfg" ] || { note "FAIL: no text-encoder config.json (run tests/device/prepare_engine.sh or text_encoder.sh --prepare here)"; finish 1; }
ck=$TE_CKPT
df -h /tmp | tail -1
if ! device_wait_file "$ck" 300; then
  timeout 300 "$B/bench/bench_text_encoder" --generate "$ck.part" --config "$cfg" --layers "$LAYERS" && mv "$ck.part" "$ck" ||
    { rm -f "$ck.part"; note "FAIL: generate"; finish 1; }
fi
ls -la "$ck"
bench=("$B/bench/bench_text_encoder" --checkpoint "$ck" --config "$cfg" --image-proc "$iproc" --video-proc "$vproc"
  --device "$DEV" --reps "$REPS" --prompt-tokens "$TOKENS" --keyframe "$KEYFRAME")

step "our $DEV path (nvfp4 resident, per-linear dequant + bf16 GEMM)"
timeout 240 "${bench[@]}" | tee "$OUT/te_bench_ours.txt"
step "our $DEV path with the linears dequantized once at load (bf16 resident, 48.8 GB)"
timeout 240 "${bench[@]}" --bf16-weights | tee "$OUT/te_bench_ours_bf16.txt"

step "transformers reference (bf16, SDPA), same GPU"
if [ -n "$PY" ] && [ "$dry" = 0 ]; then
  PYTHONUNBUFFERED=1 timeout 300 "$PY" tests/device/text_encoder_torch.py --config "$cfg" --layers "$LAYERS" --reps "$REPS" \
    --prompt-tokens "$TOKENS" --keyframe "$KEYFRAME" --label-tokens 2 --caption-tokens 40 | tee "$OUT/te_bench_torch.txt"
else
  echo "no python with torch + transformers (or a CPU stand-in run)" | tee "$OUT/te_bench_torch.txt"
fi

while read -r l; do note "$l"; done < <(awk '
  $1 == "TE_BENCH" { ours[$2] = $6; rows[$2] = $4; order[++n] = $2 }
  $1 == "TE_TORCH" { ref[$2] = $6 }
  $1 == "TE_MEM" { peak = $5 }
  $1 == "TE_TORCH_MEM" { tpeak = $5 }
  END {
    for (i = 1; i <= n; i++) { k = order[i]
      if (k in ref) printf "TE %-15s rows %5d  ours %8.2f ms  transformers %8.2f ms  speedup %.2fx\n", k, rows[k], ours[k], ref[k], ref[k] / ours[k]
      else printf "TE %-15s rows %5d  ours %8.2f ms  transformers -\n", k, rows[k], ours[k] }
    if (peak) printf "TE peak GPU memory: ours %.1f GiB, transformers %.1f GiB\n", peak / 2^30, tpeak / 2^30
  }' "$OUT/te_bench_ours.txt" "$OUT/te_bench_torch.txt")
while read -r l; do note "bf16-resident: $l"; done < <(grep -h '^TE_BENCH\|^TE_MEM\|^TE_LOAD' "$OUT/te_bench_ours_bf16.txt" 2>/dev/null)
while read -r l; do note "nvfp4-resident: $l"; done < <(grep -h '^TE_MEM\|^TE_LOAD\|^TE_DECODE' "$OUT/te_bench_ours.txt" 2>/dev/null)
while read -r l; do note "$l"; done < <(grep -h '^TE_CUDA_VS_CPU worst\|^TE_TORCH_MEM\|^TE_TORCH_LOAD' "$OUT/te_run.log" 2>/dev/null)
ops_ok=1
[ "$dry" = 1 ] || { grep -q '^PASS test_nvfp4_and_embedding' "$OUT/te_cuda_ops.txt" && ! grep -q '^FAIL' "$OUT/te_cuda_ops.txt"; } || ops_ok=0
[ "$ops_ok" = 1 ] && grep -q " 0 failed" "$OUT/te_kit_cuda.txt" && grep -q '^TE_BENCH' "$OUT/te_bench_ours.txt" && finish 0 || finish 1
