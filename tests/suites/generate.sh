# generate suite: `mmh3 generate` end to end on tiny checkpoints written at
# test time by `mmh3-gen-tiny all` (CPU): t2v, first / last / first+last
# frames, --no-audio, seeds, --frames-dir, cancel, the timing table, every
# flag rule, and the ref2va packed layout against the reference's rules.
# Clips checked with ffprobe. Sourced by tests/run.
generate_python=/usr/bin/python3
[ -x "$generate_python" ] || generate_python=python3
run_one generate/cli "$generate_python" "$MMH3_SRC/tests/integration/test_generate.py" --build "$MMH3_BUILD"
# The serving stack with the real engine on the same tiny checkpoints (needs
# the server build: PostgreSQL, nginx, libfcgi).
if "$MMH3_BUILD/mmh3" serve --help >/dev/null 2>&1; then
  run_one generate/server "$generate_python" "$MMH3_SRC/tests/integration/test_generate_server.py" --build "$MMH3_BUILD"
else
  skip_one generate/server "this build has no serving stack (configured --without-server)"
fi
