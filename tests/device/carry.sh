#!/usr/bin/env bash
# The `carry` list of a device call of session.sh, checked HERE against the device tool's limits
# (at most 8 paths; the tree that travels + the carried paths ≤ 64 MiB):
#
#   bash tests/device/carry.sh N      prints the JSON list for `run(..., carry=<it>)` on stdout and
#                                     the sizes on stderr; exit 1 when a path is missing or it is
#                                     over the limit
#
#   calls 1, 2   debs, autotools, prebuilt binaries, packed FFmpeg, release configs
#   call 3       + .carry/server (the serving stack for the server step)
#   call 4       + .carry/engine-media (ref2va's inputs) instead of .carry/server
# The whole .carry (unpacked FFmpeg, both extras) is over the limit beside the ~42 MiB tree.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
base=(.carry/debs .carry/autotools.tar.gz .carry/autotools.stamp .carry/build-device.tar.xz .carry/build-device.stamp
  .carry/ffmpeg.tar.xz .carry/minimax-h3)
case "${1:-}" in
  1|2) list=("${base[@]}") ;;
  3) list=("${base[@]}" .carry/server) ;;
  4) list=("${base[@]}" .carry/engine-media) ;;
  *) echo "usage: carry.sh 1|2|3|4" >&2; exit 2 ;;
esac
tree=$(git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -f "$f" ] && printf '%s\0' "$f"; done | xargs -0 stat -c %s | awk '{s += $1} END {print s + 0}')
total=$tree bad=0
for p in "${list[@]}"; do
  if [ ! -e "$p" ]; then
    echo "carry.sh: $p is missing (prepare.sh / prepare_engine.sh / prepare_server.sh / prepare_build.sh)" >&2
    bad=1; continue
  fi
  n=$(du -sb "$p" | cut -f1)
  total=$((total + n))
  printf '  %-28s %6.2f MiB\n' "$p" "$(echo "$n / 1048576" | bc -l)" >&2
done
printf '  tree %.2f MiB + carried = %.2f MiB of 64 MiB\n' "$(echo "$tree / 1048576" | bc -l)" \
  "$(echo "$total / 1048576" | bc -l)" >&2
[ "$total" -le $((64 * 1048576)) ] || { echo "carry.sh: over the 64 MiB limit" >&2; bad=1; }
[ "${#list[@]}" -le 8 ] || { echo "carry.sh: more than 8 paths" >&2; bad=1; }
printf '['; sep=""; for p in "${list[@]}"; do printf '%s"%s"' "$sep" "$p"; sep=", "; done; printf ']\n'
exit $bad
