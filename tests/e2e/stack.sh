# Sourced by tests/e2e/run.sh: starts the real stack for the browser tests —
# `mmh3 serve --mock` (private PostgreSQL cluster, nginx, FastCGI pool, one
# worker with the mock engine) on a free loopback port, serving the web app
# built into $MMH3_BUILD/web/dist — and stops it again.

e2e_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# e2e_stack_start BUILD_DIR WORK_DIR: sets E2E_BASE and E2E_STACK_PID.
e2e_stack_start() {
  local build=$1 work=$2
  local mmh3="$build/mmh3"
  if ! "$mmh3" serve --help >/dev/null 2>&1; then
    # tests/run counts this line as a skip (a build configured --without-server)
    echo "SKIP web/e2e: this build has no serving stack (configured --without-server): no \`mmh3 serve --mock\`"
    exit 0
  fi
  "$mmh3" serve --help 2>&1 | grep -q -- '--mock' || { echo "FAIL web/e2e: \`mmh3 serve --help\` lists no --mock"; return 1; }
  [ -f "$build/web/dist/index.html" ] || { echo "FAIL web/e2e: $build/web/dist is not built (make in $build)"; return 1; }
  rm -rf "$work"
  mkdir -p "$work/models/loras"
  # Two tiny adapters (the project's generator) for the few-step tests: a
  # plain one, and one under LightX2V's file name, which names its sampler.
  "$build/mmh3-gen-tiny" lora --seed 3 --rank 4 --out "$work/models/loras/ink.safetensors" >/dev/null &&
  "$build/mmh3-gen-tiny" lora --seed 4 --rank 4 \
    --out "$work/models/loras/minimax_h3_fl2v_turbo_4step_v1.0_768p_bf16.safetensors" >/dev/null ||
    { echo "FAIL web/e2e: mmh3-gen-tiny could not make the adapters"; return 1; }
  local port
  port=$(e2e_free_port) || return 1
  # The rewrite test stores a made-up Oxen key: point the stack at a closed
  # loopback port so no test ever reaches hub.oxen.ai (the sheet then shows the
  # "cannot connect" error event).
  MMH3_OXEN_REMOTE="http://127.0.0.1:9/e2e/no-hub" \
  "$mmh3" serve --mock --mock-seconds 4 --listen "127.0.0.1:$port" --outputs "$work/outputs" --models-path "$work/models" --web "$build/web/dist" \
    >"$work/serve.log" 2>&1 &
  E2E_STACK_PID=$!
  E2E_BASE="http://127.0.0.1:$port"
  local i
  for i in $(seq 1 240); do
    if curl -fsS "$E2E_BASE/api/status" 2>/dev/null | grep -Eq '"state": ?"ready"'; then return 0; fi
    kill -0 "$E2E_STACK_PID" 2>/dev/null || { tail -n 20 "$work/serve.log" | sed 's/^/    /'; return 1; }
    sleep 0.5
  done
  tail -n 20 "$work/serve.log" | sed 's/^/    /'
  return 1
}

e2e_stack_stop() {
  [ -n "${E2E_STACK_PID:-}" ] || return 0
  kill -INT "$E2E_STACK_PID" 2>/dev/null
  local i
  for i in $(seq 1 60); do kill -0 "$E2E_STACK_PID" 2>/dev/null || return 0; sleep 0.5; done
  kill -KILL "$E2E_STACK_PID" 2>/dev/null
}
