# Shared by the device scripts (tests/device/*.sh), sourced right after `set -u`:
#
#   . "$(dirname "$0")/lib.sh"       → $top (the tree, now the working folder), $OUT (created),
#                                      nvcc on PATH, t0, step, note, finish
#   device_log FILE                  everything printed from here on also goes to $OUT/FILE
#   device_summary TITLE FILE [-a]   what finish prints ("==== TITLE summary") and keeps in
#                                    $OUT/FILE (-a: appended, so split runs keep every part)
#   device_python "torch, x"         $PY = the first python with those modules (python3, then
#                                    PyTorch's venv), or empty
#   device_deps                      the carried .carry/debs unpacked in /tmp/mmh3-deps and
#                                    configure/link/run pointed at them
#   device_configure DIR LOG ARGS…   unless DIR has a Makefile: the carried autotools outputs (or
#                                    autoreconf), then ../configure ARGS into $OUT/LOG
#   device_make DIR LOG TARGETS…     make -j$(nproc) TARGETS in DIR into $OUT/LOG
#
# The last three note a FAIL line and return 1 on failure; callers `|| finish 1`.
# $configure_limit / $make_limit (seconds; default 300 / 900) bound those two steps.
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$top" || exit 2
OUT=${OUT:-$top/tests/out/device}
mkdir -p "$OUT"
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH

device_log() {
  exec > >(tee -a "$OUT/$1") 2>&1
  device_tee_pid=$!
}

t0=$SECONDS
step() { echo; echo "=== [$((SECONDS - t0))s] $*"; }
summary=()
note() { summary+=("$*"); echo ">> $*"; }
summary_title=""
summary_file=""
summary_tee=(tee)
device_summary() {
  summary_title=$1
  summary_file=$2
  summary_tee=(tee)
  [ "${3:-}" = -a ] && summary_tee=(tee -a)
}
finish() {
  echo; echo "================ ${summary_title:+$summary_title }summary ($((SECONDS - t0)) s)"
  if [ -n "$summary_file" ]; then
    printf '%s\n' "${summary[@]}" | "${summary_tee[@]}" "$OUT/$summary_file"
  else
    printf '%s\n' "${summary[@]}"
  fi
  exit "${1:-0}"
}

device_python() {
  PY=""
  local p
  for p in python3 /opt/torch/.venv/bin/python3; do
    if "$p" -c "import $1" 2>/dev/null; then PY=$p; return 0; fi
  done
  return 0
}

device_deps() {
  local P=/tmp/mmh3-deps d
  ls .carry/debs/*.deb >/dev/null 2>&1 || return 0
  mkdir -p "$P"
  for d in .carry/debs/*.deb; do dpkg-deb -x "$d" "$P" || note "FAIL: could not unpack $d"; done
  local LIBDIR=$P/usr/lib/x86_64-linux-gnu
  export JANSSON_CFLAGS="-I$P/usr/include" JANSSON_LIBS="-L$LIBDIR -Wl,-rpath,$LIBDIR -ljansson"
  export PCRE2_CFLAGS="-I$P/usr/include" PCRE2_LIBS="-L$LIBDIR -Wl,-rpath,$LIBDIR -lpcre2-8"
  # the tokenizer's NFC (libutf8proc) when carried and not on the host
  if [ -f "$P/usr/include/utf8proc.h" ]; then
    export UTF8PROC_CFLAGS="-I$P/usr/include" UTF8PROC_LIBS="-L$LIBDIR -Wl,-rpath,$LIBDIR -lutf8proc"
  fi
  export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  command -v make >/dev/null || export PATH="$PATH:$P/usr/bin"
}

# The generated configure and Makefile.in files: the carried ones when they were made from this tree's
# autotools inputs (tests/device/prepare.sh stores the stamp), else autoreconf where the host has it.
device_autotools() {
  local want have
  want=$(bash tests/device/autotools_stamp.sh 2>/dev/null || echo x)
  have=$(cat .carry/autotools.stamp 2>/dev/null || echo none)
  if [ -f .carry/autotools.tar.gz ] && [ "$want" = "$have" ]; then
    tar -xzf .carry/autotools.tar.gz
    # make must see the generated files as newer than their inputs
    touch aclocal.m4; sleep 1; touch configure config.h.in; sleep 1
    find . -name Makefile.in -not -path './.carry/*' -exec touch {} +
    echo "using the carried configure (stamp ${want:0:12})"
  elif command -v autoreconf >/dev/null; then
    echo "carried autotools outputs missing or stale (${have:0:12} vs ${want:0:12}): running autoreconf"
    autoreconf -fi 2>&1 | tail -5
  else
    note "FAIL: the carried autotools outputs are missing or stale (${have:0:12} vs ${want:0:12}) and this host" \
      "has no autoreconf: run tests/device/prepare.sh here and carry .carry"
    return 1
  fi
}

device_configure() {
  local dir=$1 log=$OUT/$2; shift 2
  [ -f "$dir/Makefile" ] && return 0
  device_autotools || return 1
  mkdir -p "$dir"
  if ! (cd "$dir" && timeout "${configure_limit:-300}" ../configure "$@" >"$log" 2>&1); then
    tail -30 "$log"; tail -60 "$dir/config.log" >>"$log" 2>/dev/null
    note "FAIL: configure (see $(basename "$log"))"
    return 1
  fi
}

device_make() {
  local dir=$1 log=$OUT/$2; shift 2
  if ! (cd "$dir" && timeout "${make_limit:-900}" make -j"$(nproc)" "$@") >"$log" 2>&1; then
    grep -E -B2 -A6 'error|Error' "$log" | head -80
    note "FAIL: build (see $(basename "$log"))"
    return 1
  fi
}
