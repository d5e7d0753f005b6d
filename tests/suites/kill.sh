# kill suite: crash safety of the serving stack. Under a steady load
# (enqueues, uploads, renders) the worker, the FastCGI pool, PostgreSQL and
# nginx are each SIGKILLed 20 times (MMH3_KILL_ROUNDS) while an enqueue, an
# upload and a render are in flight; afterwards no accepted job or upload is
# lost, every job ends succeeded or failed with a reason, and no served file
# is truncated (tests/integration/kill_test.py; docs/SECURITY.md). About 4
# minutes on 2 cores. Sourced by tests/run.
kill_python=/usr/bin/python3
[ -x "$kill_python" ] || kill_python=python3

kill_suite() {
  if ! "$MMH3_BUILD/mmh3" serve --help >/dev/null 2>&1; then
    echo "FAIL kill/build: $MMH3_BUILD/mmh3 has no serving stack (configured --without-server?)"
    return 1
  fi
  for tool in psql ffprobe ffmpeg; do
    command -v "$tool" >/dev/null 2>&1 || { echo "FAIL kill/tools: $tool is not installed"; return 1; }
  done
  "$kill_python" "$MMH3_SRC/tests/integration/kill_test.py" --build "$MMH3_BUILD"
}

run_one kill/stack kill_suite
