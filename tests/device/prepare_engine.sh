#!/usr/bin/env bash
# Prepares HERE what tests/device/engine.sh needs on the GPU host, in the
# git-ignored .carry/ folder the device call carries:
#
#   .carry/ffmpeg/         a minimal static FFmpeg + x264 (tests/device/prepare_ffmpeg.sh; built once)
#   .carry/ffmpeg.tar.xz   the same, packed (~2 MB): what device calls carry (tests/device/carry.sh)
#   .carry/minimax-h3/     the release's small config files: FL2VA/{text_encoder/config.json,
#                          processor/*.json, tokenizer/*}, scheduler/, audio_scheduler/ (copied from
#                          shared/minimax-h3; MiniMax-licensed, never committed)
#   .carry/engine-media/   reference fixtures for the ref2va run, written with the ffmpeg CLI
#                          here (test side): a 1920x1080 JPEG, a 1 s 640x360 H.264+AAC clip, a
#                          3 s 44.1 kHz WAV
#
# Also run tests/device/prepare.sh (debs + generated configure). Then on the device:
#   bash tests/device/engine.sh [--part build,gen,t2v,ref2va]   with carry [".carry"]
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
mkdir -p .carry

if [ ! -f .carry/ffmpeg/flags.sh ]; then
  bash tests/device/prepare_ffmpeg.sh
fi
# the packed form the device calls carry (10 MB of archives -> ~2 MB; lib.sh device_build unpacks it)
if [ ! -f .carry/ffmpeg.tar.xz ] || [ -n "$(find .carry/ffmpeg -newer .carry/ffmpeg.tar.xz | head -1)" ]; then
  tar -C .carry -cf - ffmpeg | xz -T"$(nproc)" -9 >.carry/ffmpeg.tar.xz.part && mv .carry/ffmpeg.tar.xz.part .carry/ffmpeg.tar.xz
fi

shared=${MMH3_SHARED:-}
for c in "$shared" "$top/../shared" "$top/../../shared" "$top/../../../shared"; do
  [ -n "$c" ] && [ -f "$c/minimax-h3/FL2VA/text_encoder/config.json" ] && { shared=$c; break; }
done
[ -f "$shared/minimax-h3/FL2VA/text_encoder/config.json" ] || { echo "prepare_engine: no shared/minimax-h3 found (set MMH3_SHARED)" >&2; exit 1; }
rm -rf .carry/minimax-h3
mkdir -p .carry/minimax-h3/FL2VA
cp -r "$shared/minimax-h3/FL2VA/text_encoder" "$shared/minimax-h3/FL2VA/processor" \
  "$shared/minimax-h3/FL2VA/tokenizer" .carry/minimax-h3/FL2VA/
chmod -R u+w .carry/minimax-h3
rm -f .carry/minimax-h3/FL2VA/text_encoder/*.index.json
for s in scheduler audio_scheduler; do
  [ -d "$shared/minimax-h3/$s" ] && cp -r "$shared/minimax-h3/$s" .carry/minimax-h3/
done

m=.carry/engine-media
mkdir -p "$m"
ff() { ffmpeg -v error -y "$@"; }
ff -f lavfi -i testsrc2=size=1920x1080:rate=1 -frames:v 1 -q:v 3 "$m/ref_image.jpg"
ff -f lavfi -i testsrc2=size=640x360:rate=30 -f lavfi -i sine=frequency=330:sample_rate=44100 -t 1 \
  -c:v libx264 -pix_fmt yuv420p -c:a aac -shortest "$m/ref_clip.mp4"
ff -f lavfi -i "sine=frequency=523:sample_rate=44100" -t 3 "$m/ref_audio.wav"
# the release's t2va sample (1344x768, real content) for the H.264 writer bench (engine.sh --part x264)
[ -f "$shared/minimax-h3/assets/t2va.mp4" ] && cp "$shared/minimax-h3/assets/t2va.mp4" "$m/t2va.mp4"
echo "prepare_engine: $(du -sh .carry/ffmpeg .carry/ffmpeg.tar.xz .carry/minimax-h3 .carry/engine-media | tr '\n' ' ')"
