# server suite: the serving stack end to end with real components — a private
# PostgreSQL cluster, nginx, mmh3-fcgi and mock-engine workers started by
# `mmh3 serve --mock` — driven over HTTP and SSE, clips checked with ffprobe.
# (The C unit tests of the request rules, multipart parser and request
# validation run in the unit suite.) Sourced by tests/run.
server_python=/usr/bin/python3
[ -x "$server_python" ] || server_python=python3

server_integration() {
  if ! "$MMH3_BUILD/mmh3" serve --help >/dev/null 2>&1; then
    echo "FAIL server/build: $MMH3_BUILD/mmh3 has no serving stack (configured --without-server?)"
    return 1
  fi
  for tool in psql ffprobe ffmpeg; do
    command -v "$tool" >/dev/null 2>&1 || { echo "FAIL server/tools: $tool is not installed"; return 1; }
  done
  "$server_python" "$MMH3_SRC/tests/integration/server_test.py" --build "$MMH3_BUILD"
}

run_one server/integration server_integration

# Security: tokens, login cookie, Host/Origin checks, traversal, hostile
# uploads, rate limits and the queue bound, against `serve --auth on`
# (tests/integration/security_test.py; docs/SECURITY.md).
server_security() {
  "$MMH3_BUILD/mmh3" serve --help >/dev/null 2>&1 || { echo "FAIL server/security: no serving stack in this build"; return 1; }
  "$server_python" "$MMH3_SRC/tests/integration/security_test.py" --build "$MMH3_BUILD"
}

run_one server/security server_security

# The Oxen.ai integration and the client-compatibility APIs (/v1/videos,
# Oxen-style enqueue, /api/rewrite) against a fake Oxen hub on loopback.
server_oxen() {
  "$MMH3_BUILD/mmh3" serve --help >/dev/null 2>&1 || { echo "FAIL server/oxen: no serving stack in this build"; return 1; }
  "$server_python" "$MMH3_SRC/tests/integration/oxen_test.py" --build "$MMH3_BUILD"
}

run_one server/oxen server_oxen

# Several GPUs: `serve --gpu-workers N [--gpus K]` starts one worker per GPU
# (group), all claiming from the same queue (mock engine; no GPU needed).
server_gpu_workers() {
  "$MMH3_BUILD/mmh3" serve --help >/dev/null 2>&1 || { echo "FAIL server/gpu-workers: no serving stack in this build"; return 1; }
  "$server_python" "$MMH3_SRC/tests/integration/gpu_workers_test.py" --build "$MMH3_BUILD"
}

run_one server/gpu-workers server_gpu_workers

# The schema migrations on real PostgreSQL: a database migrated by an older
# mmh3 and a fresh one end with the same schema; the newest is idempotent
# (tests/integration/migrate_test.py).
server_migrations() {
  "$MMH3_BUILD/mmh3" serve --help >/dev/null 2>&1 || { echo "FAIL server/migrations: no serving stack in this build"; return 1; }
  command -v pg_dump >/dev/null 2>&1 || { echo "FAIL server/migrations: pg_dump is not installed"; return 1; }
  "$server_python" "$MMH3_SRC/tests/integration/migrate_test.py" --build "$MMH3_BUILD"
}

run_one server/migrations server_migrations

# mmh3-fcgi links nothing of the engine: no global symbol of the binary is one
# that an object of the engine's folders (or the worker's) defines.
server_fcgi_links() {
  local fcgi="$MMH3_BUILD/mmh3-fcgi" failed=0 dir
  [ -x "$fcgi" ] || { echo "FAIL fcgi_links_no_engine: no $fcgi in this build"; return 1; }
  local mine; mine=$(nm --defined-only "$fcgi" | awk '$2 ~ /^[TDBR]$/ {print $3}' | sort -u)
  [ -n "$mine" ] || { echo "FAIL fcgi_links_no_engine: nm found no symbols in $fcgi"; return 1; }
  for dir in src/engine src/model src/backend src/sampler src/parallel src/formats src/io src/conformance \
      kernels src/worker; do
    # objects of sources that exist (an older build may hold objects of moved files)
    local objs="" o rel
    for o in $(find "$MMH3_BUILD/$dir" -name '*.o' 2>/dev/null); do
      rel=${o#"$MMH3_BUILD"/}
      rel=${rel%.o}
      [ -f "$MMH3_SRC/$rel.c" ] || [ -f "$MMH3_SRC/$rel.cu" ] && objs="$objs $o"
    done
    [ -n "$objs" ] || continue
    # shellcheck disable=SC2086
    local both; both=$(comm -12 <(echo "$mine") <(nm --defined-only $objs 2>/dev/null | awk '$2 ~ /^[TDBR]$/ {print $3}' | sort -u))
    if [ -n "$both" ]; then
      echo "FAIL fcgi_links_no_engine: mmh3-fcgi holds objects of $dir: $(echo $both | cut -c1-300)"
      failed=1
    fi
  done
  [ "$failed" -eq 0 ] && echo "PASS fcgi_links_no_engine"
  return 0
}

run_one server/fcgi-links server_fcgi_links
