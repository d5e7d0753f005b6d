#!/usr/bin/env bash
# Prebuilds HERE the programs of a device session ($DEVICE_TARGETS in lib.sh) exactly as the GPU
# host would build them, so no device call spends ~1 minute of its time building:
#
#   .carry/build-device.tar.xz   the programs (debug info stripped), paths as in build-device/
#   .carry/build-device.stamp    lib.sh device_source_stamp of the tree they were built from
#
# Same build as lib.sh device_build on the device: a scratch copy of the tree that travels
# (tracked + untracked-not-ignored files), CUDA for sm_90a only (nvcc 13.0 here and there),
# the FULL product when .carry/server exists (prepare_server.sh: unpacked at /tmp/mmh3-server, the
# path the device unpacks it to; static libpq/libfcgi/libcurl; + mmh3-fcgi; stamp "<hash> server"),
# else --without-server, the carried static FFmpeg, the carried Debian debs unpacked in /tmp/mmh3-deps
# (the path the device unpacks them to: the programs' rpath), pkg-config blinded so nothing else
# of this host is linked (no libcurl, no system FFmpeg). session.sh uses the archive when the stamp
# matches the tree it runs and every program loads there; otherwise it builds.
#
# Needs .carry/debs (prepare.sh) and .carry/ffmpeg (prepare_engine.sh); run prepare_server.sh first
# for the serving stack. ~2 min on 2 cores, ~3.5 MB.
# Re-run after every code change that should reach the device.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(mktemp -d)
. "$here/tests/device/lib.sh"
[ -d .carry/debs ] || { echo "prepare_build: run tests/device/prepare.sh first" >&2; exit 1; }
[ -f .carry/ffmpeg/flags.sh ] || { echo "prepare_build: run tests/device/prepare_engine.sh first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$OUT"' EXIT
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -e "$f" ] && printf '%s\0' "$f"
done | tar -c --null -T - -f - | tar -x -C "$tmp"
ln -s "$here/.carry" "$tmp/.carry"
stamp=$(top=$tmp device_source_stamp)
echo "prepare_build: tree stamp $stamp"
(cd "$tmp" && autoreconf -fi >/dev/null 2>&1) || { echo "prepare_build: autoreconf failed" >&2; exit 1; }
cd "$tmp"
set +e
device_deps
FF=$here/.carry/ffmpeg . .carry/ffmpeg/flags.sh
server=(--without-server) kind=""
if device_server_flags; then
  server=("${MMH3_SERVER_CONFIGURE[@]}") kind=" server"
  DEVICE_TARGETS="$DEVICE_TARGETS mmh3-fcgi"
fi
mkdir -p build-device
start=$SECONDS
if ! (cd build-device && PKG_CONFIG_LIBDIR=/nonexistent PKG_CONFIG_PATH="" ../configure --with-cuda=yes \
  "${server[@]}" --with-ffmpeg CUDA_ARCH="-gencode arch=compute_90a,code=sm_90a" >"$OUT/configure.log" 2>&1); then
  tail -30 "$OUT/configure.log"; echo "prepare_build: configure failed" >&2; exit 1
fi
grep -A8 '^  mmh3 ' "$OUT/configure.log"
# shellcheck disable=SC2086
if ! (cd build-device && nice make -j"$(nproc)" $DEVICE_TARGETS >"$OUT/build.log" 2>&1); then
  grep -E -B2 -A6 'error|Error' "$OUT/build.log" | head -60; echo "prepare_build: build failed" >&2; exit 1
fi
set -e
echo "prepare_build: built in $((SECONDS - start)) s"
stage=$tmp/stage
for t in $DEVICE_TARGETS; do
  mkdir -p "$stage/$(dirname "$t")"
  strip --strip-debug -o "$stage/$t" "build-device/$t"
done
bad=$(for t in $DEVICE_TARGETS; do ldd "$stage/$t" | grep -E 'curl|libav|libpq|libfcgi|not found' | sed "s|^|$t: |"; done || true)
[ -z "$bad" ] || { echo "prepare_build: host libraries linked: $bad" >&2; exit 1; }
(cd "$stage" && tar -cf - $DEVICE_TARGETS) | xz -T"$(nproc)" -9 >"$here/.carry/build-device.tar.xz"
echo "$stamp$kind" >"$here/.carry/build-device.stamp"
echo "prepare_build: $(du -h "$here/.carry/build-device.tar.xz" | cut -f1) .carry/build-device.tar.xz, stamp $stamp$kind"
