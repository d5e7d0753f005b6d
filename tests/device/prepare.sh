#!/usr/bin/env bash
# Prepares a device run: run this HERE (the development machine, which has
# apt and autotools), in the checkout whose tree the device run will send.
# It fills the git-ignored folder .carry/ with what the GPU host lacks:
#
#   .carry/debs/*.deb          jansson, PCRE2, utf8proc (runtime + headers), GNU make
#   .carry/autotools.tar.gz    configure, Makefile.in, ... generated from this tree
#   .carry/autotools.stamp     hash of the autotools inputs they came from
#
# Then run on the device: `bash tests/device/run.sh` with carry [".carry"].
# Re-run this whenever configure.ac or a *.am file changes (run.sh checks the
# stamp and regenerates with autoreconf if the host has it, else fails).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"

mkdir -p .carry/debs
rm -f .carry/debs/*.deb
(cd .carry/debs && apt-get download -q libjansson4 libjansson-dev libpcre2-8-0 libpcre2-dev libutf8proc2 libutf8proc-dev make >/dev/null)
echo "debs: $(ls .carry/debs | tr '\n' ' ')"

# Generate the autotools outputs in a scratch copy of the tree that travels
# (tracked files and untracked ones git does not ignore), never in place.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -e "$f" ] && printf '%s\0' "$f"
done | tar -c --null -T - -f - | tar -x -C "$tmp"
(cd "$tmp" && autoreconf -fi >/dev/null 2>&1) || { echo "prepare: autoreconf failed" >&2; exit 1; }
tar -czf .carry/autotools.tar.gz -C "$tmp" configure Makefile.in config.h.in aclocal.m4 build-aux $(cd "$tmp" && ls -d m4 2>/dev/null)
bash tests/device/autotools_stamp.sh >.carry/autotools.stamp
echo "autotools outputs: .carry/autotools.tar.gz ($(du -h .carry/autotools.tar.gz | cut -f1)), stamp $(cut -c1-12 .carry/autotools.stamp)"
du -sh .carry
