#!/usr/bin/env bash
# Builds HERE (the development machine) a minimal static FFmpeg + x264 for the
# GPU host, which has no FFmpeg libraries, so `mmh3 generate` there writes
# real mp4 files through the product's own mp4 writer (libavformat/libavcodec
# in process; no ffmpeg program anywhere):
#
#   .carry/ffmpeg/              include/ + lib/lib{avformat,avcodec,avutil,swscale,swresample,x264}.a
#   .carry/ffmpeg/flags.sh      FFMPEG_CFLAGS / FFMPEG_LIBS for ../configure
#
# Sources: Debian bookworm's ffmpeg and x264 source packages (apt-get source
# through a private source list; nothing of the system configuration is
# changed). Components: the H.264 (libx264), AAC and JPEG (previews, posters) encoders, the mp4 muxer,
# swscale, swresample, and for reference inputs the JPEG/H.264/AAC/PCM/MP3/
# FLAC decoders with the mov/mp4, jpeg_pipe, wav, mp3, flac, aac demuxers (the media
# readers' allowlist) (no zlib, so
# no PNG: device fixtures are JPEG). --disable-autodetect keeps every other
# system library out, so the archives need only libc, libm and libpthread.
#
# Takes ~12 min on 2 shared cores (9 MB of archives); run once (re-run only to change the set).
# Then the device scripts pick it up: tests/device/engine.sh.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
P=$top/.carry/ffmpeg
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v nasm >/dev/null || apt-get install -y -q nasm >/dev/null

cd "$work"
printf 'deb-src http://deb.debian.org/debian bookworm main\ndeb-src http://deb.debian.org/debian-security bookworm-security main\n' >src.list
mkdir -p lists
apt_src=(-o Dir::Etc::SourceList="$work/src.list" -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$work/lists")
apt-get "${apt_src[@]}" update -q >/dev/null
apt-get "${apt_src[@]}" source --download-only -q ffmpeg x264 >/dev/null 2>&1
tar -xf ffmpeg_*.orig.tar.xz
tar -xf x264_*.orig.tar.gz
rm -rf "$P"
mkdir -p "$P"

echo "prepare_ffmpeg: x264"
(cd x264-*/ && ./configure --prefix="$P" --enable-static --enable-pic --disable-cli --disable-opencl --disable-lavf \
  --disable-swscale --disable-ffms --disable-gpac --disable-lsmash >/dev/null && make -j"$(nproc)" >build.log 2>&1 &&
  make install >/dev/null) || { tail -20 x264-*/build.log; exit 1; }

echo "prepare_ffmpeg: FFmpeg (minimal)"
(cd ffmpeg-*/ && PKG_CONFIG_PATH="$P/lib/pkgconfig" ./configure --prefix="$P" --enable-static --disable-shared \
  --enable-pic --enable-gpl --disable-programs --disable-doc --disable-network --disable-autodetect \
  --disable-avdevice --disable-avfilter --disable-postproc \
  --disable-everything --enable-libx264 --enable-avformat --enable-avcodec --enable-swscale --enable-swresample \
  --enable-encoder=libx264,aac,mjpeg --enable-muxer=mp4,mov \
  --enable-decoder=h264,aac,mjpeg,pcm_s16le,pcm_s24le,pcm_f32le,mp3,mp3float,flac \
  --enable-demuxer=mov,image_jpeg_pipe,wav,mp3,aac,flac --enable-parser=h264,aac,mjpeg,mpegaudio,flac \
  --enable-bsf=h264_mp4toannexb,aac_adtstoasc --enable-protocol=file --extra-cflags="-I$P/include" \
  --extra-ldflags="-L$P/lib" >/dev/null && make -j"$(nproc)" >build.log 2>&1 && make install >/dev/null) ||
  { tail -20 ffmpeg-*/build.log; exit 1; }

rm -rf "$P/share" "$P/lib/pkgconfig"
strip -g "$P"/lib/*.a # debug info is 3/4 of the archives; the carry is limited
cat >"$P/flags.sh" <<'EOF'
# sourced by the device scripts: link mmh3 against the static FFmpeg of .carry/ffmpeg
FF=${FF:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
export FFMPEG_CFLAGS="-I$FF/include"
export FFMPEG_LIBS="-L$FF/lib -lavformat -lavcodec -lswscale -lswresample -lavutil -lx264 -lm -lpthread"
EOF
echo "prepare_ffmpeg: $(du -sh "$P" | cut -f1) in $P"
