#!/usr/bin/env bash
# The whole product on the GPU host: full-size random weights in the released
# layouts for all five components, rendered through the real CLI.
#
#   (build)  build-device/ (lib.sh device_build: CUDA + the minimal static FFmpeg of .carry/ffmpeg,
#            so the product's own mp4 writer runs; the host has no FFmpeg), --without-server
#   (gen)    $MODELS (default /tmp/mmh3-engine-models) laid out like $MODELS_PATH: links to the
#            shared full-size random checkpoints of lib.sh (19.5 + 15.7 + 5.2 + 0.6 GB), each
#            written once per machine when missing (the DiT by mmh3-bench-dit --write-random, the
#            text encoder by bench_text_encoder --generate: the released layouts with cheap random
#            fill; the VAEs by mmh3-gen-tiny --full), and the release config folder from
#            .carry/minimax-h3
#   (t2v)    mmh3 generate 1344x768, 124 frames, 28 steps (STEPS=N to change), seed 1, through the
#            real CLI: its progress lines and the timing table; the mp4 checked from its boxes
#   (fewstep) few-step clips as the few-step issue measures them: 1344x768x124 t2va with a random
#            rank-128 adapter on every block in the released layout (mmh3-gen-tiny lora --full, native
#            spelling), --sampler turbo8-768p and turbo4-768p, fast and exact (FEWSTEP_MODES, default
#            "8:fast 4:fast 8:exact"; N:MODE:int8 adds --vae-int8, N:MODE:v22 --vram-budget 22); each run's timing table, and the clip's wall time without the
#            load stages (the weights-resident figure)
#   (previews) the live previews' cost (--preview-dir, a preview after every forward): the t2v
#            render at PREVIEW_STEPS (default 8) grid points; the timing table's "live previews"
#            row against its "denoise (DiT forwards)" row (target: previews <= 1 % of step time),
#            the projection fit's line, and the strips written; then the same render with
#            --vae-int8: its "decode video" row beside the fp16 one
#   (x264)   bench/mmh3-bench-mp4 on the release's t2va sample (carried in .carry/engine-media):
#            124 frames at 1344x768 through the H.264 writer per x264 preset, fed as fast as the
#            writer takes them and paced at the VAE decode's ~26 frames/s: the flush/close time (the
#            clip's serial tail), throughput, size, PSNR of the output against its input; then the
#            same paced run on uniformly random frames (X264_PRESETS: the presets)
#   (ref2va) a ref2va render (a 1920x1080 picture, a 1 s clip with sound, a 3 s audio clip; the
#            released 2048-px picture rule), without and with --ref-kv-cache (REF_STEPS grid
#            points, default 5): per-step times, the speed-up, the rel_l2 of the final latents
#
#   here:    bash tests/device/prepare.sh && bash tests/device/prepare_engine.sh
#   device:  bash tests/device/engine.sh --part build,gen     (~6 min)   carry [".carry"]
#            bash tests/device/engine.sh --part t2v           (~4-5 min at ~5 s/forward; STEPS=N)
#            bash tests/device/engine.sh --part ref2va        (~5-6 min, optional)
#            (parts skip what the machine already has: build-device/, the checkpoints in /tmp;
#            tests/device/session.sh call 3 runs gen,t2v,ref2va)
#
# Expected on one H200 (16 cores): build ~2 min, model files ~3-4 min (disk bound; files other
# device steps wrote in /tmp are linked), t2v: loads ~30-60 s, 27 forwards at the DiT's measured
# 5.0 s (docs/PERFORMANCE.md, device run #5), VAE decode ~30-40 s → ~4-5 min (limit 560 s).
# Every step has its own timeout; progress lines "=== [Ns] step" on stdout; everything is logged
# to $OUT/engine.log, the tables to $OUT/engine_t2v.txt / engine_ref2va_{nokv,kv}.txt, the
# summary to $OUT/engine_summary.txt (its last lines), the t2v clip to $OUT/engine_t2v.mp4.
set -u
. "$(dirname "$0")/lib.sh"
device_log engine.log
device_summary engine engine_summary.txt -a

part=build,gen,t2v
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift 2 ;;
    *) echo "engine.sh: unknown argument $1"; exit 2 ;;
  esac
done
want() { [[ ",$part," == *",$1,"* ]]; }
# Dry runs elsewhere (CPU stand-ins): MMH3_DEVICE_DRY=1 (= GEN_FLAGS= SIZE=64x64 FRAMES=22 STEPS=3
# REF_STEPS=3 MMH3_REF_SHORT_EDGE=64 MMH3_REF_VIDEO_SHORT_EDGE=64; CUDA=no skips the CUDA compile)
# bash tests/device/engine.sh --part build,gen,t2v,ref2va
if [ "$dry" = 1 ]; then
  GEN_FLAGS=${GEN_FLAGS-} SIZE=${SIZE:-64x64} FRAMES=${FRAMES:-22} STEPS=${STEPS:-3} REF_STEPS=${REF_STEPS:-3}
  export MMH3_REF_SHORT_EDGE=${MMH3_REF_SHORT_EDGE:-64} MMH3_REF_VIDEO_SHORT_EDGE=${MMH3_REF_VIDEO_SHORT_EDGE:-64}
  M=${MODELS:-/tmp/mmh3-dry/engine-models}
fi
[ "$dry" = 1 ] || M=${MODELS:-/tmp/mmh3-engine-models}
STEPS=${STEPS:-28}
REF_STEPS=${REF_STEPS:-5}
GEN_FLAGS=${GEN_FLAGS---full}
SIZE=${SIZE:-1344x768}
FRAMES=${FRAMES:-124}

step "host"
nvidia-smi --query-gpu=name,memory.total,driver_version,temperature.gpu --format=csv,noheader 2>&1 || true
df -h /tmp | tail -1
PY=$(command -v python3 || true)

# ---------------------------------------------------------------- build
if want build; then
  step "(build) build-device/ with CUDA and the static FFmpeg"
  [ -f .carry/ffmpeg/flags.sh ] || [ -f .carry/ffmpeg.tar.xz ] || [ "${MMH3_DEVICE_BUILT:-0}" = 1 ] ||
    note "WARNING: no .carry/ffmpeg (run tests/device/prepare_engine.sh here): no mp4 can be written"
  make_limit=400 device_build engine mmh3 mmh3-gen-tiny bench/mmh3-bench-dit bench/bench_text_encoder || finish 1
  note "build ok ($((SECONDS - t0)) s; $(grep -o 'media (FFmpeg): [a-z]*' "$B/config.log" "$OUT/engine_configure.log" 2>/dev/null | tail -1 || echo 'prebuilt'))"
else
  device_deps
fi
[ -x "$B/mmh3" ] || { note "FAIL: $B/mmh3 missing (run --part build first)"; finish 1; }

# ---------------------------------------------------------------- model files
DIT=$M/diffusion_models/minimax_h3_fl2va_pruned_int8_convrot.safetensors
TE=$M/text_encoders/qwen3vl_32b_minimax_h3_nvfp4_awq.safetensors
VV=$M/vae/minimax_h3_video_vae_fp16.safetensors
AV=$M/vae/minimax_h3_audio_vae_fp32.safetensors
if want gen; then
  step "(gen) full-size random checkpoints in the released layouts -> $M"
  mkdir -p "$M/diffusion_models" "$M/text_encoders" "$M/vae"
  [ -d .carry/minimax-h3/FL2VA ] || { note "FAIL: no .carry/minimax-h3 (run tests/device/prepare_engine.sh here)"; finish 1; }
  # shared FILE LIMIT WRITER...: the shared checkpoint (a background writer's, or written now), linked as LINK
  shared() {
    local file=$1 link=$2 lim=$3 s=$SECONDS; shift 3
    if ! device_wait_file "$file" "$lim"; then
      timeout "$lim" "$@" "$file.part" >/dev/null && mv "$file.part" "$file" ||
        { rm -f "$file.part"; note "FAIL: writing $file ($*)"; finish 1; }
      echo "wrote $file in $((SECONDS - s)) s"
    fi
    ln -sf "$file" "$link"
  }
  if [ "$GEN_FLAGS" = --full ]; then
    shared "$DIT_CKPT" "$DIT" 420 "$B/bench/mmh3-bench-dit" --write-only --write-random
    shared "$TE_CKPT" "$TE" 300 "$B/bench/bench_text_encoder" --config .carry/minimax-h3/FL2VA/text_encoder/config.json \
      --layers 50 --generate
    shared "$VV_CKPT" "$VV" 240 "$B/mmh3-gen-tiny" video-vae --full --out
    shared "$AV_CKPT" "$AV" 120 "$B/mmh3-gen-tiny" audio-vae --full --out
    # the release's config files match the released sizes as they are
    rm -rf "$M/MiniMax-H3"; cp -r .carry/minimax-h3 "$M/MiniMax-H3" && chmod -R u+w "$M/MiniMax-H3"
  else
    # dry runs: a tiny set whose text-encoder config.json is patched to the generated sizes
    # shellcheck disable=SC2086
    timeout 300 "$B/mmh3-gen-tiny" all $GEN_FLAGS --config-from .carry/minimax-h3/FL2VA --out "$M" >/dev/null ||
      { note "FAIL: mmh3-gen-tiny all"; finish 1; }
  fi
  ls -laL "$DIT" "$TE" "$VV" "$AV"; df -h /tmp | tail -1
  note "model files ready ($((SECONDS - t0)) s)"
fi

status=0
gen_run() { # NAME LIMIT ARGS...
  local name=$1 limit=$2; shift 2
  step "($name) mmh3 generate $*"
  timeout --kill-after=10 "$limit" "$B/mmh3" generate --models-path "$M" --plain -v "$@" 2>&1 |
    tee "$OUT/engine_$name.txt" | grep -v '^  .*: /'
  return "${PIPESTATUS[0]}"
}
figure() { grep -m1 "$1" "$OUT/engine_$2.txt" | sed 's/^ *//'; }
# clip_check MP4 WxHxFRAMES: the clip's boxes, frame count and audio track, one note; status=1 when wrong
clip_check() {
  [ -n "$PY" ] || return 0
  local info
  info=$("$PY" tests/device/mp4_info.py "$1" --expect "$2" --audio yes) || status=1
  note "  $(echo "$info" | tail -1)"
}

if want x264; then
  step "(x264) the H.264 writer per preset on the release's sample frames"
  X264_IN=.carry/engine-media/t2va.mp4
  if [ -s "$X264_IN" ] && [ -x "$B/bench/mmh3-bench-mp4" ]; then
    # the release's frames, then random-weight-like noise frames (what the device's renders encode)
    for run in "$X264_IN:0" "$X264_IN:26" "noise:1344x768:26"; do
      input=${run%:*} pace=${run##*:}
      timeout 240 "$B/bench/mmh3-bench-mp4" --input "$input" --frames 124 --pace "$pace" \
        --presets "${X264_PRESETS:-medium,fast,faster,veryfast}" 2>"$OUT/engine_x264_${input##*/}_$pace.log" |
        tee -a "$OUT/engine_x264.txt" | grep -E '^(MP4|input)' | while read -r l; do note "$l"; done
    done
  else
    note "SKIP x264: needs $X264_IN (prepare_engine.sh, carry .carry/engine-media) and $B/bench/mmh3-bench-mp4"
  fi
fi

if want t2v; then
  gen_run t2v 560 -p "A red fox trots through fresh snow at dawn, breath steaming, soft golden light." \
    --size "$SIZE" --frames "$FRAMES" --steps "$STEPS" --seed 1 -o "$OUT/engine_t2v.mp4"
  rc=$?
  if [ "$rc" = 0 ]; then
    note "t2v ${SIZE}x$FRAMES, $STEPS steps: $(figure 'total (wall clock)' t2v)"
    for k in 'per step:' 'frames/s:' 'realtime factor:' 'megapixel-frames/s:' 'peak memory' 'denoise (DiT' \
      'decode video' 'load DiT' 'load text encoder' 'encode prompt' 'mux video'; do
      note "  $(figure "$k" t2v)"
    done
    clip_check "$OUT/engine_t2v.mp4" "${SIZE}x$FRAMES"
  else
    note "FAIL: t2v generate (exit $rc; see $OUT/engine_t2v.txt)"; status=1
  fi
fi

if want fewstep; then
  # the full-size adapter lora.sh writes too (same flags); dry runs: the stand-in DiT's default shape
  ADAPTER=/tmp/mmh3-lora-r128-native.safetensors lora_gen=(--full)
  [ "$dry" = 1 ] && ADAPTER=$M/loras/fewstep-r128.safetensors lora_gen=()
  mkdir -p "$(dirname "$ADAPTER")"
  if [ ! -s "$ADAPTER" ]; then
    step "(fewstep) a random rank-128 adapter on every block -> $ADAPTER"
    timeout 120 "$B/mmh3-gen-tiny" lora "${lora_gen[@]}" --rank 128 --alpha 8 --gain 0.05 --spelling native \
      --out "$ADAPTER" >/dev/null || { note "FAIL: writing the adapter"; status=1; }
  fi
  for m in ${FEWSTEP_MODES:-8:fast 4:fast 8:exact}; do
    # N:MODE[:EXTRA[:FRAMES]]: forwards, exact|fast; EXTRA int8 = the opt-in int8 video decoder,
    # vNN = --vram-budget NN, - = none; FRAMES: the clip's length (default $FRAMES; 243 = 10 s, 362 = 15 s)
    IFS=: read -r n mode extra frames <<<"$m"
    fast=(); [ "$mode" = fast ] && fast=(--fast)
    name=few${n}_$mode
    case $extra in
      int8) fast+=(--vae-int8); name+=_int8 ;;
      v[0-9]*) fast+=(--vram-budget "${extra#v}"); name+=_vram${extra#v} ;;
    esac
    limit=240
    if [ -n "$frames" ] && [ "$frames" != "$FRAMES" ]; then name+=_f$frames; limit=$((240 * frames / 124)); fi
    gen_run "$name" "$limit" -p "A red fox trots through fresh snow at dawn, breath steaming, soft golden light." \
      --size "$SIZE" --frames "${frames:-$FRAMES}" --sampler "turbo$n-768p" --lora "$ADAPTER:1" "${fast[@]}" --seed 1 \
      -o "/tmp/engine_$name.mp4"
    rc=$?
    if [ "$rc" = 0 ]; then
      note "$name: $(figure 'total (wall clock)' "$name")"
      clip_check "/tmp/engine_$name.mp4" "${SIZE}x${frames:-$FRAMES}"
      for k in 'per step:' 'denoise (DiT' 'decode video' 'decode audio' 'encode prompt' 'mux video' 'load DiT' \
        'finish mp4' 'DiT setup' 'load text encoder' 'load video VAE' 'load audio VAE' 'LoRA adapters' 'peak memory'; do
        l=$(figure "$k" "$name"); [ -n "$l" ] && note "  $l"
      done
      # the weights-resident wall time: the clip's total less the table's loading group
      awk -v name="$name" '
        function secs(   i) { for (i = 1; i <= NF; i++) { if ($i ~ /^[0-9]+m$/ && $(i + 1) ~ /^[0-9.]+s$/) return $i * 60 + $(i + 1);
                              if ($i ~ /^[0-9.]+s$/) return $i + 0 } return "" }
        /total \(wall clock\)/ { tot = secs() }
        /^loading / { ld = secs() }
        END { if (tot != "") printf "RESULT fewstep %s total_s %.2f load_s %.2f resident_s %.2f\n", name, tot, ld, tot - ld }' \
        "$OUT/engine_$name.txt" | tee -a "$OUT/engine_$name.txt" | while read -r l; do note "$l"; done
    else
      note "FAIL: $name generate (exit $rc; see $OUT/engine_$name.txt)"; status=1
    fi
    rm -f "/tmp/engine_$name.mp4"
  done
fi

if want previews; then
  PV=$OUT/engine_previews
  rm -rf "$PV"
  gen_run previews 400 -p "A red fox trots through fresh snow at dawn, breath steaming, soft golden light." \
    --size "$SIZE" --frames "$FRAMES" --steps "${PREVIEW_STEPS:-8}" --seed 1 --preview-dir "$PV" -o /tmp/engine_previews.mp4
  rc=$?
  strips=$(ls "$PV" 2>/dev/null | wc -l)
  if [ "$rc" = 0 ] && { grep -q 'previews: off' "$OUT/engine_previews.txt" || [ "$strips" = 0 ]; }; then
    # a render whose previews were switched off measured nothing about them
    note "FAIL: previews: $(grep -m1 -o 'previews: off.*' "$OUT/engine_previews.txt" || echo "none written in $PV")"
    status=1
  elif [ "$rc" = 0 ]; then
    for k in 'previews: projection' 'live previews' 'denoise (DiT' 'decode video' 'per step:' 'previews: [0-9]* in'; do
      l=$(figure "$k" previews); [ -n "$l" ] && note "  $l"
    done
    while read -r l; do note "$l"; done < <(awk '
      function secs(   i) { for (i = 1; i <= NF; i++) { if ($i ~ /^[0-9]+m$/ && $(i + 1) ~ /^[0-9.]+s$/) return $i * 60 + $(i + 1);
                            if ($i ~ /^[0-9.]+s$/) return $i + 0 } return "" }
      /live previews/ { pv = secs() }
      /denoise \(DiT forwards\)/ { dn = secs() }
      END { if (pv != "" && dn > 0) printf "RESULT previews live_s %.3f denoise_s %.2f share_of_step_pct %.3f (target <= 1)\n", pv, dn, 100 * pv / dn }' \
      "$OUT/engine_previews.txt" | tee -a "$OUT/engine_previews.txt")
    note "  strips: $(ls "$PV" | wc -l) in $PV, first $(ls "$PV" | head -1) ($(stat -c %s "$PV/$(ls "$PV" | head -1)" 2>/dev/null) bytes)"
  else
    note "FAIL: previews generate (exit $rc; see $OUT/engine_previews.txt)"; status=1
  fi
  if [ "${PREVIEW_INT8:-1}" = 1 ]; then # PREVIEW_INT8=0: without the --vae-int8 render
    gen_run previews_int8 400 -p "A red fox trots through fresh snow at dawn, breath steaming, soft golden light." \
      --size "$SIZE" --frames "$FRAMES" --steps "${PREVIEW_STEPS:-8}" --seed 1 --vae-int8 -o /tmp/engine_previews_int8.mp4
    rc=$?
    if [ "$rc" = 0 ]; then
      note "  --vae-int8: $(figure 'decode video' previews_int8) (fp16 above: $(figure 'decode video' previews))"
    else
      note "FAIL: --vae-int8 generate (exit $rc; see $OUT/engine_previews_int8.txt)"; status=1
    fi
  fi
  rm -f /tmp/engine_previews.mp4 /tmp/engine_previews_int8.mp4
fi

if want ref2va; then
  R=.carry/engine-media
  refs=(-i "$R/ref_image.jpg" -i "$R/ref_clip.mp4" --audio "$R/ref_audio.wav")
  common=(-p "The fox from the picture walks into the clip while the tone plays." --partition ref2va
    --dit-path "$DIT" --size "$SIZE" --frames "$FRAMES" --steps "$REF_STEPS" --seed 1 --no-audio)
  gen_run ref2va_nokv 280 "${common[@]}" "${refs[@]}" -o /tmp/engine_ref_nokv.mp4 \
    --dump-latents /tmp/engine_ref_nokv.safetensors; rc1=$?
  gen_run ref2va_kv 280 "${common[@]}" "${refs[@]}" --ref-kv-cache -o /tmp/engine_ref_kv.mp4 \
    --dump-latents /tmp/engine_ref_kv.safetensors; rc2=$?
  if [ "$rc1" = 0 ] && [ "$rc2" = 0 ]; then
    note "ref2va rows: $(grep -m1 'denoise: ' "$OUT/engine_ref2va_nokv.txt" | sed 's/^ *//')"
    note "ref2va KV cache: $(grep -m1 'reference KV cache' "$OUT/engine_ref2va_kv.txt" | sed 's/^ *//')"
    # which attention each run's forwards used (the cache's forwards 2..: fewer queries than keys)
    note "ref2va attention uncached: $(grep -m1 'DiT attention' "$OUT/engine_ref2va_nokv.txt" | sed 's/^ *//')"
    note "ref2va attention cached: $(grep -m1 'DiT attention' "$OUT/engine_ref2va_kv.txt" | sed 's/^ *//')"
    note "ref2va attention cached: $(grep -m1 'forwards 2.. run' "$OUT/engine_ref2va_kv.txt" | sed 's/^ *//')"
    note "ref2va fa3 self-check: $(grep -m1 'fa3 bf16 (exact) kernel' "$OUT/engine_ref2va_kv.txt" | sed 's/^mmh3: //')"
    a=$(figure 'per step:' ref2va_nokv | awk '{print $3}'); b=$(figure 'per step:' ref2va_kv | awk '{print $3}')
    note "ref2va per step: uncached $a s, cached $b s (mean over $REF_STEPS-1 forwards, forward 1 full in both)"
    [ -n "$a" ] && [ -n "$b" ] && note "ref2va denoise speed-up with --ref-kv-cache: $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2fx", a/b}')"
    if [ -n "$PY" ]; then
      timeout 120 "$PY" - /tmp/engine_ref_nokv.safetensors /tmp/engine_ref_kv.safetensors <<'PYEOF' | tee -a "$OUT/engine_ref2va_kv.txt"
import json, struct, sys, array, math
def load(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); d = f.read()
    out = {}
    for k, e in h.items():
        if k == "__metadata__": continue
        a, b = e["data_offsets"]; x = array.array("f"); x.frombytes(d[a:b]); out[k] = x
    return out
u, c = load(sys.argv[1]), load(sys.argv[2])
for k in ("video_rows", "audio_rows"):
    num = sum((p - q) * (p - q) for p, q in zip(c[k], u[k])); den = sum(q * q for q in u[k])
    print("KV_DEVIATION %s rel_l2 %.4g (cached vs uncached final latents, same seed)" % (k, math.sqrt(num / max(den, 1e-30))))
PYEOF
      while read -r l; do note "$l"; done < <(grep '^KV_DEVIATION' "$OUT/engine_ref2va_kv.txt")
    fi
  else
    note "FAIL: ref2va runs (exit $rc1 / $rc2; see $OUT/engine_ref2va_*.txt)"; status=1
  fi
  rm -f /tmp/engine_ref_nokv.mp4 /tmp/engine_ref_kv.mp4
fi
finish $status
