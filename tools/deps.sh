# Sourced by tools/test and tools/up: installs what mmh3 needs on Debian 12
# (as root), skipping packages that are already there.
mmh3_debian_packages="build-essential autoconf automake pkg-config git ca-certificates curl \
  libjansson-dev libpcre2-dev libutf8proc-dev libpq-dev libfcgi-dev libcurl4-openssl-dev \
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev \
  nginx-light postgresql postgresql-client ffmpeg nodejs npm chromium \
  clang libclang-rt-14-dev wrk python3"

mmh3_install_deps() {
  local missing=()
  for p in $mmh3_debian_packages; do
    # A NodeSource (or other) Node.js that brings its own npm satisfies nodejs/npm:
    # Debian's npm conflicts with it, and the web build needs Node >= 20 anyway.
    case "$p" in nodejs|npm) command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 && continue ;; esac
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
      echo "mmh3: these Debian packages are missing and installing them needs root: ${missing[*]}" >&2
      return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || return 1
    # The distribution's nginx/postgresql services are not ours; mmh3 runs private instances.
    systemctl disable --now nginx postgresql >/dev/null 2>&1 || service nginx stop >/dev/null 2>&1 || true
  fi
}

# mmh3_build [DIR] [configure args...]: configure (once) and build in DIR (default build/).
mmh3_build() {
  local dir=${1:-build}; shift || true
  local top; top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  ( cd "$top" && { [ -x configure ] && [ configure -nt configure.ac ] || autoreconf -fi >/dev/null; } ) || return 1
  mkdir -p "$top/$dir"
  ( cd "$top/$dir" && { [ -f Makefile ] || "$top/configure" --prefix="${MMH3_PREFIX:-/usr/local}" "$@" >/dev/null; } \
      && make -j"$(nproc)" >/dev/null && make -j"$(nproc)" check >/dev/null ) || return 1
}
