#!/usr/bin/env bash
# Builds HERE (the development machine) the serving stack's outside programs and libraries for the
# GPU host, which has none of them (no PostgreSQL, nginx, libpq, libfcgi, libcurl, PCRE2), so
# `mmh3 serve` runs there with the real engine (tests/device/server.sh):
#
#   .carry/server/server.tar.xz   everything below, to be unpacked at /tmp/mmh3-server (a FIXED path:
#                                 `mmh3 serve` finds nginx and the PostgreSQL binaries at the paths
#                                 configure saw, and nginx/PostgreSQL at their compiled-in prefix)
#     bin/postgres initdb pg_ctl psql   PostgreSQL 15 (+ share/postgresql: catalog, time zones;
#                                       lib/postgresql: plpgsql, dict_snowball, encoding conversions,
#                                       pg_trgm — the one extension sql/ creates)
#     sbin/nginx                 nginx 1.22 with only what nginx/*.conf.in use: FastCGI, static files,
#                                auth_request, return/error_page, regex locations (PCRE2 built in),
#                                gzip (zlib built in; mmh3.conf.in turns it on), the proxy/uwsgi/scgi
#                                temp-path directives; no SSL
#     lib/ include/              static libpq (+ libpgcommon, libpgport; libpq.so.5 for initdb/psql,
#                                through their rpath $SP/lib), libfcgi, libcurl (HTTP only,
#                                no TLS: downloads and Oxen are off on the GPU host) and their headers
#     flags.sh                   what ../configure needs to build the FULL product against them
#                                (lib.sh device_server_flags sources it)
#   .carry/server/server.stamp    hash of the recipe version + the source versions (the tarball's identity;
#                                 also $SP/.stamp, so the device unpacks only when it changed)
#
# Sources: Debian bookworm SOURCE packages (postgresql-15, nginx, pcre2, zlib, libfcgi, curl), fetched
# with apt-get source through a private source list (the system's apt configuration is not touched),
# Debian's patches applied (not PostgreSQL's: they only move files to Debian's fixed paths). Every program needs only glibc (libc, libm, libdl, libpthread, librt) at
# run time; the check at the end (ldd) refuses anything else. jansson comes from .carry/debs as before.
#
# Idempotent: skipped when .carry/server/server.stamp matches (MMH3_SERVER_REBUILD=1 forces; bump
# `recipe` below when the build changes).
# Takes ~15 min on 2 shared cores; ~5 MB.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
SP=/tmp/mmh3-server                 # where the device (and the dry run here) unpacks it
C=$top/.carry/server
start=$SECONDS

# A fixed work folder, removed when everything is packed: a run that failed resumes after the last
# component it finished (each leaves $work/NAME.done).
work=/tmp/mmh3-prepare-server
mkdir -p "$work"
cd "$work"
command -v libtoolize >/dev/null || apt-get install -y -q libtool >/dev/null   # libfcgi's autoreconf
printf 'deb-src http://deb.debian.org/debian bookworm main\ndeb-src http://deb.debian.org/debian-security bookworm-security main\n' >src.list
mkdir -p lists
apt_src=(-o Dir::Etc::SourceList="$work/src.list" -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$work/lists")
apt-get "${apt_src[@]}" update -q >/dev/null
pkgs="postgresql-15 nginx pcre2 zlib libfcgi curl"
# The newest version of each whose files the mirror has (the security index can run ahead of its pool).
versions=""
for p in $pkgs; do
  for v in $(apt-cache "${apt_src[@]}" showsrc "$p" | sed -n 's/^Version: //p' | sort -rV | uniq); do
    versions="$versions $p=$v"; break
  done
done
# The recipe's version: bump it with every change to how the builds below are made or slimmed.
recipe=2
want=$(echo "recipe $recipe:$versions" | sha256sum | cut -c1-16)
if [ -z "${MMH3_SERVER_REBUILD:-}" ] && [ -f "$C/server.tar.xz" ] && [ "$(cat "$C/server.stamp" 2>/dev/null)" = "$want" ]; then
  echo "prepare_server: .carry/server is up to date (stamp $want)"; exit 0
fi
for p in $pkgs; do
  ok=0
  [ -f "get-$p.done" ] && continue
  for v in $(apt-cache "${apt_src[@]}" showsrc "$p" | sed -n 's/^Version: //p' | sort -rV | uniq); do
    # PostgreSQL: upstream's release as it is (Debian's patches only move files to Debian's fixed paths,
    # which would break the relocatable prefix; its fixes come as upstream point releases); the others
    # with Debian's patches (security fixes)
    if [ "$p" = postgresql-15 ]; then
      get=(apt-get "${apt_src[@]}" source -q --download-only "$p=$v")
    else
      get=(apt-get "${apt_src[@]}" source -q "$p=$v")
    fi
    if "${get[@]}" >"get-$p.log" 2>&1 &&
      { [ "$p" != postgresql-15 ] || dpkg-source -q --skip-patches -x "$p"_*.dsc >>"get-$p.log" 2>&1; }; then
      ok=1; echo "prepare_server: $p $v"; : >"get-$p.done"; break
    fi
    echo "prepare_server: $p $v not fetchable ($(grep -m1 -o '404 *Not Found' "get-$p.log" || echo error)); trying an older one"
  done
  [ "$ok" = 1 ] || { tail -5 "get-$p.log"; echo "prepare_server: cannot fetch $p" >&2; exit 1; }
done
rm -f ./*.orig.tar.* ./*.debian.tar.* ./*.diff.gz
stage=$work/stage
D=$stage$SP
mkdir -p "$D"
J=$(nproc)
build() { # NAME COMMAND...: quiet, the log's tail on failure; skipped when an earlier run finished it
  local name=$1 s=$SECONDS rc; shift
  [ -f "$work/$name.done" ] && { echo "prepare_server: $name already built (resumed run)"; return 0; }
  set +e
  ( set -e; "$@" ) >"$work/$name.log" 2>&1 # a subshell, so set -e holds inside the step
  rc=$?
  set -e
  if [ "$rc" != 0 ]; then
    tail -30 "$work/$name.log"; echo "prepare_server: $name failed (log: $work/$name.log; a rerun resumes)" >&2; exit 1
  fi
  : >"$work/$name.done"
  echo "prepare_server: $name built in $((SECONDS - s)) s"
}

# ---------------------------------------------------------------- PostgreSQL 15
pg() {
  cd "$work"/postgresql-15-*/
  ./configure --prefix="$SP" --without-icu --without-readline --without-zlib --without-openssl --without-gssapi \
    --without-ldap --without-pam --without-llvm --without-perl --without-python --without-tcl --without-libxml \
    --without-libxslt --without-systemd --without-selinux --without-lz4 --without-zstd \
    --without-bonjour --disable-nls CFLAGS="-O2" # rpath $SP/lib: initdb/psql find our libpq.so.5 there
  # the generated headers first (the top-level make does this; single folders do not)
  make -j"$J" -C src/backend generated-headers || exit 1
  # the server, what initdb loads (plpgsql, snowball dictionaries, encoding conversions), the programs
  # and pg_trgm (sql/001_init.sql creates it for the prompt search)
  for d in src/backend src/backend/utils/mb/conversion_procs src/backend/snowball src/pl/plpgsql src/timezone \
    src/bin/initdb src/bin/pg_ctl src/bin/psql src/interfaces/libpq src/common src/port contrib/pg_trgm; do
    make -j"$J" -C "$d" || exit 1
    make -C "$d" install DESTDIR="$stage" || exit 1
  done
  # libpq's public headers (libpq-fe.h includes postgres_ext.h)
  make -C src/include install DESTDIR="$stage" >/dev/null || exit 1
}
build postgresql pg

# ---------------------------------------------------------------- nginx (PCRE2 and zlib built in)
ngx() {
  cd "$work"/nginx-*/
  ./configure --prefix="$SP/nginx" --sbin-path="$SP/sbin/nginx" --conf-path="$SP/nginx/nginx.conf" \
    --pid-path="$SP/nginx/nginx.pid" --error-log-path=stderr --http-log-path="$SP/nginx/access.log" \
    --with-pcre="$(ls -d "$work"/pcre2-*/)" --with-zlib="$(ls -d "$work"/zlib-*/)" \
    --with-http_auth_request_module --without-http_ssi_module --without-http_userid_module \
    --without-http_access_module --without-http_auth_basic_module --without-http_mirror_module \
    --without-http_autoindex_module --without-http_geo_module --without-http_map_module \
    --without-http_split_clients_module --without-http_referer_module --without-http_memcached_module \
    --without-http_empty_gif_module --without-http_browser_module --without-http_upstream_hash_module \
    --without-http_upstream_ip_hash_module --without-http_upstream_least_conn_module \
    --without-http_upstream_random_module --without-http_upstream_keepalive_module \
    --without-http_upstream_zone_module --without-http_grpc_module --without-http_limit_conn_module \
    --without-http_limit_req_module --without-http_charset_module --without-mail_pop3_module \
    --without-mail_imap_module --without-mail_smtp_module --with-cc-opt="-O2"
  make -j"$J" || exit 1
  make install DESTDIR="$stage" || exit 1
  rm -rf "$D/nginx/html" "$D/nginx"/*.default "$D/nginx"/*.conf "$D/nginx"/*_params "$D/nginx"/*-utf "$D/nginx"/*-win \
    "$D/nginx/mime.types" "$D/nginx/koi-win" "$D/nginx/logs"
}
build nginx ngx

# ---------------------------------------------------------------- libfcgi (static, C only)
fcgi() {
  cd "$work"/libfcgi-*/
  [ -x configure ] || ./autogen.sh || autoreconf -fi
  ./configure --prefix="$SP" --disable-shared --enable-static --with-pic CFLAGS="-O2"
  make -j"$J" -C libfcgi libfcgi.la
  mkdir -p "$D/lib" "$D/include"
  cp libfcgi/.libs/libfcgi.a "$D/lib/"
  cp include/fcgiapp.h "$D/include/"
}
build libfcgi fcgi

# ---------------------------------------------------------------- libcurl (static, HTTP only, no TLS)
crl() {
  cd "$work"/curl-*/
  ./configure --prefix="$SP" --disable-shared --enable-static --with-pic --without-ssl --without-zlib \
    --without-brotli --without-zstd --without-libpsl --without-libidn2 --without-nghttp2 --without-ngtcp2 \
    --without-nghttp3 --without-quiche --without-librtmp --without-libssh2 --without-libssh --without-gssapi \
    --without-libgsasl --without-ca-bundle --without-ca-path --disable-ldap --disable-ldaps --disable-rtsp \
    --disable-dict --disable-telnet --disable-tftp --disable-pop3 --disable-imap --disable-smb --disable-smtp \
    --disable-gopher --disable-mqtt --disable-ftp --disable-file --disable-manual --disable-ntlm \
    --disable-ntlm-wb --disable-kerberos-auth --disable-negotiate-auth --disable-aws --disable-netrc \
    --disable-dependency-tracking CFLAGS="-O2"
  make -j"$J" -C lib libcurl.la
  mkdir -p "$D/lib" "$D/include/curl"
  cp lib/.libs/libcurl.a "$D/lib/"
  cp include/curl/*.h "$D/include/curl/"
}
build libcurl crl

# ---------------------------------------------------------------- slim, check, pack
cd "$D"
rm -rf share/doc share/man include/postgresql/server include/postgresql/internal include/libpq include/informix \
  include/ecpg* include/pg_config.h include/pg_config_os.h include/pg_config_manual.h include/postgresql lib/pkgconfig lib/*.la \
  lib/libpq.so lib/*_shlib.a lib/libpgtypes* lib/libecpg* \
  share/postgresql/*.sample.orig
# keep initdb's inputs, drop the rest of bin/ (none built) and unused share data
for f in bin/*; do case $(basename "$f") in postgres|initdb|pg_ctl|psql) ;; *) rm -f "$f" ;; esac; done
strip --strip-unneeded bin/* sbin/nginx lib/postgresql/*.so lib/libpq.so.5.*
strip -g lib/*.a
cat >flags.sh <<EOF
# Sourced by tests/device/lib.sh (device_server_flags): configure the FULL product against $SP.
S=$SP
export LIBPQ_CFLAGS="-I\$S/include"
export LIBPQ_LIBS="-L\$S/lib -l:libpq.a -lpgcommon -lpgport -lm"  # static (libpq.so.5 is initdb's and psql's)
export CURL_CFLAGS="-I\$S/include -DCURL_STATICLIB"
export CURL_LIBS="-L\$S/lib -lcurl -lpthread"
# libfcgi is found by header + library check (configure.ac): the prefix on CPPFLAGS / LDFLAGS
export CPPFLAGS="-I\$S/include\${CPPFLAGS:+ \$CPPFLAGS}"
export LDFLAGS="-L\$S/lib\${LDFLAGS:+ \$LDFLAGS}"
MMH3_SERVER_CONFIGURE=(--with-server NGINX="\$S/sbin/nginx" PG_CTL="\$S/bin/pg_ctl" INITDB="\$S/bin/initdb")
EOF
echo "$want" >.stamp
bad=""
# glibc's libraries, or ours (libpq.so.5, found through the rpath $SP/lib: here the staged copy)
for f in bin/* sbin/nginx lib/postgresql/*.so lib/libpq.so.5; do
  extra=$(LD_LIBRARY_PATH="$D/lib" ldd "$f" 2>&1 | grep -v -F "=> $D/lib/" | awk '{print $1}' |
    grep -v -E '^(linux-vdso\.so\.1|/lib64/ld-linux-x86-64\.so\.2|statically|lib(c|m|dl|pthread|rt)\.so\.[0-9]+)$' || true)
  [ -z "$extra" ] || bad="$bad $f: $(echo $extra)"
done
[ -z "$bad" ] || { echo "prepare_server: programs need more than glibc:$bad" >&2; exit 1; }
mkdir -p "$C"
rm -f "$C/server.tar.xz"
tar -C "$(dirname "$D")" -cf - "$(basename "$SP")" | xz -T"$J" -9e >"$C/server.tar.xz.part"
mv "$C/server.tar.xz.part" "$C/server.tar.xz"
echo "$want" >"$C/server.stamp"
echo "prepare_server: $(du -sh "$D" | cut -f1) unpacked, $(du -h "$C/server.tar.xz" | cut -f1) .carry/server/server.tar.xz" \
  "(stamp $want) in $((SECONDS - start)) s"
cd "$top" && rm -rf "$work"
