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
#   device_build LOG TARGETS…        the one shared build, $B = build-device/: CUDA (sm_90a unless
#                                    $CUDA_ARCH says otherwise; CUDA=no for CPU stand-ins), the
#                                    carried static FFmpeg (.carry/ffmpeg/ here, or its packed
#                                    form .carry/ffmpeg.tar.xz that device calls carry), the FULL
#                                    product (serving stack: mmh3 serve, mmh3-fcgi) when
#                                    .carry/server is carried, else --without-server; configure
#                                    once, then make TARGETS (LOG_configure.log, LOG_build.log).
#                                    With MMH3_DEVICE_BUILT=1 (session.sh: the prebuilt binaries
#                                    or its own build are in place) it only checks that the
#                                    targets exist, and builds the missing ones.
#   device_server                    the carried serving-stack prefix (.carry/server/server.tar.xz,
#                                    tests/device/prepare_server.sh: PostgreSQL 15, nginx, static
#                                    libpq/libfcgi/libcurl) unpacked at $SERVER_PREFIX (a fixed
#                                    path: the build records nginx's and PostgreSQL's paths) unless
#                                    already there with the same stamp; returns 1 when not carried
#   device_server_flags              device_server, then its flags.sh: LIBPQ_*/CURL_* and
#                                    CPPFLAGS/LDFLAGS exported, $MMH3_SERVER_CONFIGURE (configure
#                                    arguments) set; returns 1 when not carried
#   device_source_stamp              one hash over what the build reads (C/CUDA sources, *.am,
#                                    configure.ac, m4): the prebuilt binaries carry it
#   device_wait_file FILE SECONDS    waits while FILE.part exists and session.sh's background
#                                    writers (/tmp/mmh3-writers.pid) run; returns 0 when FILE exists
#
# The configure/make/build helpers note a FAIL line and return 1 on failure; callers `|| finish 1`.
# $configure_limit / $make_limit (seconds; default 300 / 900) bound those two steps.
#
# Shared inputs, written once per machine (session.sh writes them in the background, each
# script writes what is missing): $DIT_CKPT, $TE_CKPT, $VV_CKPT, $AV_CKPT (full-size random
# checkpoints in the released layouts; MMH3_DIT_RANDOM / MMH3_TE_RANDOM / MMH3_VV_RANDOM /
# MMH3_AV_RANDOM override). MMH3_DEVICE_DRY=1 = a CPU stand-in run (dry=1, DEV=cpu, tiny sizes;
# each script's header says what it shrinks); otherwise dry=0, DEV=cuda.
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$top" || exit 2
OUT=${OUT:-$top/tests/out/device}
mkdir -p "$OUT"
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
B=${MMH3_BUILD_DIR:-$top/build-device}
DIT_CKPT=${MMH3_DIT_RANDOM:-/tmp/mmh3-dit-full-random.safetensors}
TE_CKPT=${MMH3_TE_RANDOM:-/tmp/mmh3-te-full-random.safetensors}
VV_CKPT=${MMH3_VV_RANDOM:-/tmp/vae_video_full.safetensors}
AV_CKPT=${MMH3_AV_RANDOM:-/tmp/vae_audio_full.safetensors}
if [ "${MMH3_DEVICE_DRY:-0}" = 1 ]; then dry=1 DEV=cpu; else dry=0 DEV=cuda; fi
SERVER_PREFIX=/tmp/mmh3-server # where .carry/server/server.tar.xz is unpacked (prepare_server.sh builds for it)
# every program a device session runs (session.sh builds them once; prepare_build.sh prebuilds them here)
DEVICE_TARGETS="mmh3 mmh3-gen-tiny bench/mmh3-bench-dit bench/mmh3-bench-attn bench/mmh3-bench-qgemm
  bench/mmh3-bench-dit-quality bench/bench_text_encoder bench/bench_vae bench/mmh3-bench-sp
  tests/unit/test_cuda_runtime tests/unit/test_cuda_ops tests/unit/test_cuda_kernels tests/unit/test_backend_twins
  tests/unit/test_speed_attention tests/unit/test_speed_qgemm tests/unit/test_parallel_partition
  tests/unit/test_parallel_comm tests/unit/test_parallel_dit tests/device/bench_kernels
  bench/mmh3-bench-lora tests/unit/test_cuda_lora tests/unit/test_dit_step_cache tests/unit/test_dit_adaln bench/mmh3-bench-sparse-attn tests/unit/test_cuda_sparse tests/unit/test_sparse_attention
  bench/mmh3-bench-vram tests/unit/test_dit_stream bench/mmh3-bench-mp4"

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

# The one build of a device session (see the header).
device_build() {
  local log=$1 t missing=""; shift
  for t in "$@"; do [ -x "$B/$t" ] || missing="$missing $t"; done
  if [ "${MMH3_DEVICE_BUILT:-0}" = 1 ] && [ -z "$missing" ]; then
    echo "using the session's build ($B)"; return 0
  fi
  device_deps
  local ff=--without-ffmpeg
  if [ -f .carry/ffmpeg/flags.sh ]; then
    FF=$top/.carry/ffmpeg . .carry/ffmpeg/flags.sh
    ff=--with-ffmpeg
  elif [ -f .carry/ffmpeg.tar.xz ]; then # the packed form the device calls carry (prepare_engine.sh)
    [ -f /tmp/mmh3-ffmpeg/ffmpeg/flags.sh ] || { mkdir -p /tmp/mmh3-ffmpeg && tar -xJf .carry/ffmpeg.tar.xz -C /tmp/mmh3-ffmpeg; }
    FF=/tmp/mmh3-ffmpeg/ffmpeg . /tmp/mmh3-ffmpeg/ffmpeg/flags.sh
    ff=--with-ffmpeg
  fi
  local server=(--without-server)
  if device_server_flags; then
    server=("${MMH3_SERVER_CONFIGURE[@]}")
    # a build-device/ configured without the serving stack on this machine earlier: configure again
    if [ -f "$B/Makefile" ] && ! grep -q 'define MMH3_HAVE_SERVER 1' "$B/config.h" 2>/dev/null; then
      echo "build-device/ has no serving stack; configuring again with .carry/server"
      rm -f "$B/Makefile"
    fi
  fi
  # The GPU host's newer gcc warns where Debian's does not; CI holds the warnings line, the device runs.
  device_configure "$B" "${log}_configure.log" --with-cuda="${CUDA:-yes}" "${server[@]}" "$ff" \
    CUDA_ARCH="${CUDA_ARCH:--gencode arch=compute_90a,code=sm_90a}" CFLAGS="${MMH3_DEVICE_CFLAGS:--g -O2 -Wno-error}" || return 1
  device_make "$B" "${log}_build.log" "$@"
}

device_server() {
  [ -f .carry/server/server.tar.xz ] || return 1
  local want; want=$(cat .carry/server/server.stamp 2>/dev/null || echo none)
  [ -x "$SERVER_PREFIX/bin/postgres" ] && [ "$(cat "$SERVER_PREFIX/.stamp" 2>/dev/null)" = "$want" ] && return 0
  rm -rf "$SERVER_PREFIX"
  mkdir -p "$(dirname "$SERVER_PREFIX")"
  if ! tar -xJf .carry/server/server.tar.xz -C "$(dirname "$SERVER_PREFIX")" || [ ! -x "$SERVER_PREFIX/bin/postgres" ]; then
    note "FAIL: could not unpack .carry/server/server.tar.xz at $SERVER_PREFIX"
    return 1
  fi
  echo "unpacked the serving stack at $SERVER_PREFIX ($(du -sh "$SERVER_PREFIX" | cut -f1), stamp $want)"
}

device_server_flags() {
  device_server || return 1
  # shellcheck disable=SC1091
  . "$SERVER_PREFIX/flags.sh"
}

device_source_stamp() {
  (cd "$top" && { ls configure.ac m4/mmh3_*.m4 2>/dev/null
    find . \( -path ./.carry -o -path './build*' -o -name node_modules -o -path ./.git \) -prune -o -type f \
      \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.am' -o -name '*.in' \) -print; } |
    sed 's|^\./||' | grep -v -E '^(Makefile\.in|config\.h\.in)$|/Makefile\.in$' | LC_ALL=C sort -u |
    xargs -d '\n' sha256sum | sha256sum | cut -c1-16)
}

# device_serving_build NAME: build-device/ with the serving stack (mmh3 serve, mmh3-fcgi and what the
# server scripts run beside them), or a FAIL line saying why this build has none
device_serving_build() {
  make_limit=400 device_build "$1" mmh3 mmh3-fcgi mmh3-gen-tiny bench/mmh3-bench-dit bench/bench_text_encoder || return 1
  if ! "$B/mmh3" serve --help >/dev/null 2>&1 || [ ! -x "$B/mmh3-fcgi" ]; then
    note "FAIL: $B has no serving stack (a prebuilt build-device made without .carry/server? rerun" \
      "tests/device/prepare_server.sh, then prepare_build.sh, here)"
    return 1
  fi
}

device_wait_file() {
  local f=$1 limit=$2 start=$SECONDS
  while [ ! -s "$f" ] && [ -e "$f.part" ] && [ $((SECONDS - start)) -lt "$limit" ] &&
    kill -0 "$(cat /tmp/mmh3-writers.pid 2>/dev/null || echo x)" 2>/dev/null; do sleep 2; done
  [ $((SECONDS - start)) -gt 2 ] && echo "waited $((SECONDS - start)) s for $f"
  [ -s "$f" ]
}

# CPU stand-ins: one tiny $MODELS_PATH-like folder (mmh3-gen-tiny all: every component tiny, the audio VAE
# with the released strides, the text encoder's config.json patched to its size), made once.
DRY_MODELS=/tmp/mmh3-dry/models
device_dry_models() {
  [ -f "$DRY_MODELS/MiniMax-H3/FL2VA/text_encoder/config.json" ] && return 0
  timeout 300 "$B/mmh3-gen-tiny" all --config-from .carry/minimax-h3/FL2VA --out "$DRY_MODELS.part" >/dev/null &&
    rm -rf "$DRY_MODELS" && mv "$DRY_MODELS.part" "$DRY_MODELS"
}
