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
