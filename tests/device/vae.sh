#!/usr/bin/env bash
# The VAEs on the GPU host:
#   (kit)   the conformance kit with --device cuda and --device cpu, then CUDA
#           vs CPU output by output;
#   (bench) full-size random-weight checkpoints in the released Comfy layouts
#           (mmh3-gen-tiny video-vae|audio-vae --full, 5.2 GB + 0.6 GB,
#           generated there), then bench/bench_vae on CUDA: decode of 124
#           frames at 1344x768 (37 x 48 x 84 latents, 7 chunks x 28 tiles),
#           encode of one 1344x768 keyframe, decode of 5 s of stereo audio —
#           time and peak memory above the weights;
#   (ref)   the same checkpoints and the same seeded inputs through a plain
#           PyTorch implementation (bench/reference/vae_ref.py, one ViT pass
#           per tile as upstream), timed on the same GPU in the same run, its
#           outputs compared with ours; the ratios at the end.
#   (int8)  the video decode of 124 frames at 1344x768 three ways in one run:
#           ours fp16, ours with the decoder's block linears in int8 ConvRot
#           (bench_vae --int8, the opt-in --vae-int8), PyTorch fp16; the
#           int8 frames' PSNR against ours fp16 (first and last frame; the
#           target is >= 45 dB) and the times as ratios.
#           Not in the default parts: bash tests/device/vae.sh --part int8
#           (needs the checkpoints of --part bench, or makes them).
#
#   here:    bash tests/device/prepare.sh            (fills .carry/: debs, configure)
#   device:  bash tests/device/vae.sh [--part kit,bench,ref]   with carry [".carry"]
#            (reuses build-device/ and the checkpoints $VV_CKPT / $AV_CKPT (lib.sh) when present;
#            tests/device/session.sh call 2)
#   CPU stand-in (here): MMH3_DEVICE_DRY=1 — tiny checkpoints, --device cpu, 22 frames at 128x128
#            (the reference needs torch: skipped where there is none)
#
# Expected on the H200 (16 cores): build reused or ~90 s, kit CUDA + CPU ~30 s, checkpoint generation
# ~40 s, ours ~40 s, PyTorch ~70 s: about 4 minutes; every step has its own timeout.
# Checked end to end here with CPU stand-ins (tiny checkpoints, --device cpu, the reference in f32).
# Logs and outputs go to $OUT (vae.log, vae_kit_{cuda,cpu}.txt and their --out
# files, vae_bench.txt, vae_ref.txt, vae_io.safetensors); the last lines
# printed are the summary. Parts are independent so a run can be split over
# several 10-minute calls (bench writes the inputs ref reads).
set -u
. "$(dirname "$0")/lib.sh"
device_log vae.log
device_summary vae vae_summary.txt

part=kit,bench,ref
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift 2 ;;
    *) echo "vae.sh: unknown argument $1"; exit 2 ;;
  esac
done
want() { [[ ",$part," == *",$1,"* ]]; }

step "host"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
device_python "torch, safetensors"
echo "python with torch: ${PY:-none}"

step "build (build-device/)"
device_build vae mmh3 mmh3-gen-tiny bench/bench_vae || finish 1
note "build ok ($((SECONDS - t0)) s)"
status=0

if want kit; then
  step "(kit) conformance kit on $DEV"
  timeout 120 "$B/mmh3" conformance tests/data/vae --device "$DEV" --out "$OUT/vae_cuda.safetensors" |
    tee "$OUT/vae_kit_cuda.txt" | grep -v '^PASS'
  rc=${PIPESTATUS[0]}
  note "kit --device $DEV: $(grep 'passed' "$OUT/vae_kit_cuda.txt" | tail -1) (exit $rc)"
  [ "$rc" = 0 ] || status=1
  step "(kit) the same on $DEV with MMH3_KERNELS=portable (every op's fallback kernel)"
  MMH3_KERNELS=portable timeout 120 "$B/mmh3" conformance tests/data/vae --device "$DEV" \
    --out "$OUT/vae_cuda_portable.safetensors" >"$OUT/vae_kit_cuda_portable.txt" 2>&1
  rc=$?
  grep -v '^PASS' "$OUT/vae_kit_cuda_portable.txt"
  note "kit --device $DEV portable kernels: $(grep 'passed' "$OUT/vae_kit_cuda_portable.txt" | tail -1) (exit $rc)"
  [ "$rc" = 0 ] || status=1
  step "(kit) the same kit on the CPU, and CUDA vs CPU"
  timeout 150 "$B/mmh3" conformance tests/data/vae --device cpu --out "$OUT/vae_cpu.safetensors" >"$OUT/vae_kit_cpu.txt" 2>&1
  note "kit --device cpu: $(grep 'passed' "$OUT/vae_kit_cpu.txt" | tail -1)"
  if [ -n "$PY" ] && [ -f "$OUT/vae_cuda.safetensors" ] && [ -f "$OUT/vae_cpu.safetensors" ]; then
    timeout 60 "$PY" - "$OUT/vae_cuda.safetensors" "$OUT/vae_cpu.safetensors" <<'PYEOF' | tee "$OUT/vae_cuda_vs_cpu.txt"
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
worst = {}
for k in sorted(set(a) & set(b)):
    x, y = a[k].double(), b[k].double()
    rel = float((x - y).norm() / y.norm().clamp_min(1e-30))
    kind = "audio" if k.startswith("audio") else "video"
    if ".out." in k:
        worst[kind] = max(worst.get(kind, 0.0), rel)
    print(f"  {k:52s} rel_l2 {rel:.3g}  max_abs {float((x - y).abs().max()):.3g}")
print("VAE CUDA vs CPU: worst output rel_l2 " + ", ".join(f"{k} {v:.3g}" for k, v in sorted(worst.items())))
PYEOF
    note "$(tail -1 "$OUT/vae_cuda_vs_cpu.txt")"
  fi
fi

VV=$VV_CKPT
AV=$AV_CKPT
IO=$OUT/vae_io.safetensors
full=--full FRAMES=124 VW=1344 VH=768 ASEC=5
[ "$dry" = 1 ] && full="" FRAMES=22 VW=128 VH=128 ASEC=1
if want bench; then
  step "(bench) full-size random checkpoints in the released layouts"
  df -h /tmp | tail -1
  for f in "$VV:video-vae:240" "$AV:audio-vae:120"; do
    IFS=: read -r file kind lim <<<"$f"
    device_wait_file "$file" "$lim" && continue
    if [ "$dry" = 1 ]; then # the stand-in models' tiny VAEs (the audio one with the released strides)
      device_dry_models && cp "$DRY_MODELS/vae/minimax_h3_$( [ "$kind" = video-vae ] && echo video_vae_fp16 ||
        echo audio_vae_fp32).safetensors" "$file" && continue
    fi
    # shellcheck disable=SC2086
    timeout "$lim" "$B/mmh3-gen-tiny" "$kind" $full --out "$file.part" >/dev/null && mv "$file.part" "$file" ||
      { rm -f "$file.part"; note "FAIL: generate $kind"; finish 1; }
  done
  note "checkpoints ready ($((SECONDS - t0)) s)"
  ls -la "$VV" "$AV"
  step "(bench) ours on $DEV: decode $FRAMES x ${VW}x$VH, one keyframe, $ASEC s audio"
  timeout 240 "$B/bench/bench_vae" --video "$VV" --audio "$AV" --device "$DEV" --frames "$FRAMES" --width "$VW" \
    --height "$VH" --audio-seconds "$ASEC" --reps 3 --out "$IO" | tee "$OUT/vae_bench.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || { status=1; note "FAIL: bench_vae"; }
  while read -r l; do note "ours: $l"; done < <(grep '^VAE_' "$OUT/vae_bench.txt")
  if [ "${MMH3_VAE_GLUE_BENCH:-1}" = 1 ]; then # the video decode again on the portable kernels, for the before/after
    step "(bench) ours on $DEV, video decode with MMH3_KERNELS=portable"
    MMH3_KERNELS=portable timeout 200 "$B/bench/bench_vae" --video "$VV" --audio "$AV" --device "$DEV" \
      --frames "$FRAMES" --width "$VW" --height "$VH" --audio-seconds "$ASEC" --reps 3 --what decode |
      tee "$OUT/vae_bench_portable.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || { status=1; note "FAIL: bench_vae (portable kernels)"; }
    while read -r l; do note "ours (portable kernels): $l"; done < <(grep '^VAE_BENCH' "$OUT/vae_bench_portable.txt")
  fi
fi

if want ref; then
  step "(ref) plain PyTorch on the same checkpoints and inputs"
  if [ -z "$PY" ] && [ "$dry" = 1 ]; then
    note "SKIP ref: no python with torch (CPU stand-in run)"
  elif [ -z "$PY" ]; then
    note "FAIL: no python with torch"; status=1
  elif [ ! -f "$IO" ] || [ ! -f "$VV" ]; then
    note "FAIL: run --part bench first (inputs $IO)"; status=1
  else
    timeout 300 "$PY" bench/reference/vae_ref.py --video "$VV" --audio "$AV" --inputs "$IO" --reps 2 |
      tee "$OUT/vae_ref.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || { status=1; note "FAIL: vae_ref.py"; }
    while read -r l; do note "torch: $l"; done < <(grep '^VAE_' "$OUT/vae_ref.txt")
    # ratios: torch median / ours median per case
    for c in decode keyframe audio_decode; do
      o=$(grep "^VAE_BENCH $c" "$OUT/vae_bench.txt" 2>/dev/null | awk '{print $4}' | head -1)
      r=$(grep "^VAE_REF $c" "$OUT/vae_ref.txt" 2>/dev/null | awk '{print $4}' | head -1)
      [ -n "$o" ] && [ -n "$r" ] && note "$c: ours ${o}s, PyTorch ${r}s, speedup $(awk -v a="$r" -v b="$o" 'BEGIN{printf "%.2fx", a/b}')"
      o=$(grep "^VAE_BENCH $c" "$OUT/vae_bench_generic.txt" 2>/dev/null | awk '{print $4}' | head -1)
      [ -n "$o" ] && [ -n "$r" ] && note "$c (glue generic): ours ${o}s, PyTorch ${r}s, speedup $(awk -v a="$r" -v b="$o" 'BEGIN{printf "%.2fx", a/b}')"
    done
  fi
fi
if want int8; then
  step "(int8) the video decode: ours fp16, ours int8 linears, PyTorch fp16, in this run"
  for f in "$VV:video-vae:240" "$AV:audio-vae:120"; do
    IFS=: read -r file kind lim <<<"$f"
    device_wait_file "$file" "$lim" && continue
    if [ "$dry" = 1 ]; then
      device_dry_models && cp "$DRY_MODELS/vae/minimax_h3_$( [ "$kind" = video-vae ] && echo video_vae_fp16 ||
        echo audio_vae_fp32).safetensors" "$file" && continue
    fi
    # shellcheck disable=SC2086
    timeout "$lim" "$B/mmh3-gen-tiny" "$kind" $full --out "$file.part" >/dev/null && mv "$file.part" "$file" ||
      { rm -f "$file.part"; note "FAIL: generate $kind"; finish 1; }
  done
  I16=$OUT/vae_int8_fp16_io.safetensors I8=$OUT/vae_int8_io.safetensors
  for mode in fp16 int8; do
    flag=""; io=$I16
    [ "$mode" = int8 ] && flag=--int8 io=$I8
    # shellcheck disable=SC2086
    timeout 200 "$B/bench/bench_vae" --video "$VV" --audio "$AV" --device "$DEV" --frames "$FRAMES" --width "$VW" \
      --height "$VH" --reps 3 --what decode $flag --out "$io" | tee "$OUT/vae_int8_bench_$mode.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || { status=1; note "FAIL: bench_vae ($mode)"; }
  done
  if [ -n "$PY" ] && [ -f "$I16" ] && [ -f "$I8" ]; then
    timeout 60 "$PY" - "$I16" "$I8" <<'PYEOF' | tee "$OUT/vae_int8_psnr.txt"
import math, sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
worst = math.inf
for k in ("decode.out.first_frame", "decode.out.last_frame"):
    x, y = a[k].double(), b[k].double()
    mse = float(((x - y) ** 2).mean())
    psnr = math.inf if mse == 0 else 10 * math.log10(255 ** 2 / mse)
    worst = min(worst, psnr)
    print(f"  {k}: PSNR {psnr:.2f} dB, max |diff| {float((x - y).abs().max()):.0f} levels")
print(f"VAE_INT8 psnr_db_min {worst:.2f} (target >= 45)")
PYEOF
    note "$(tail -1 "$OUT/vae_int8_psnr.txt")"
    timeout 300 "$PY" bench/reference/vae_ref.py --video "$VV" --audio "$AV" --inputs "$I16" --reps 2 --what decode |
      tee "$OUT/vae_int8_ref.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || { status=1; note "FAIL: vae_ref.py (decode)"; }
  elif [ "$dry" = 1 ]; then
    note "SKIP int8 PSNR and PyTorch: no python with torch (CPU stand-in run)"
  else
    note "FAIL: no python with torch, or a bench run failed"; status=1
  fi
  o16=$(grep '^VAE_BENCH decode' "$OUT/vae_int8_bench_fp16.txt" 2>/dev/null | awk '{print $4}' | head -1)
  o8=$(grep '^VAE_BENCH decode' "$OUT/vae_int8_bench_int8.txt" 2>/dev/null | awk '{print $4}' | head -1)
  r=$(grep '^VAE_REF decode' "$OUT/vae_int8_ref.txt" 2>/dev/null | awk '{print $4}' | head -1)
  [ -n "$o16" ] && [ -n "$o8" ] && note "decode $FRAMES x ${VW}x$VH: ours fp16 ${o16}s, ours int8 ${o8}s, int8 speedup $(awk -v a="$o16" -v b="$o8" 'BEGIN{printf "%.2fx", a/b}')"
  [ -n "$o8" ] && [ -n "$r" ] && note "decode: PyTorch fp16 ${r}s, ours int8 vs PyTorch $(awk -v a="$r" -v b="$o8" 'BEGIN{printf "%.2fx", a/b}'), ours fp16 vs PyTorch $(awk -v a="$r" -v b="$o16" 'BEGIN{printf "%.2fx", a/b}')"
fi
finish $status
