#!/usr/bin/env bash
# Runs the gallery's end-to-end tests (gallery.e2e.mjs, gallery-use.e2e.mjs, fewstep.e2e.mjs) in Debian's Chromium,
# OpenAI's Node SDK against /v1 (openai.e2e.mjs),
# against the real stack: PostgreSQL, nginx, the FastCGI pool and a worker
# with the mock engine, started here and stopped on exit; then the same app
# behind access tokens (auth.e2e.mjs, its own `serve --auth on`).
#
#   tests/e2e/run.sh [name filter]
#
# MMH3_E2E_BASE=http://host:port runs against a stack that is already up.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${MMH3_BUILD:-$here/build}
out="$here/tests/out/e2e"
mkdir -p "$out"
assets=${MMH3_H3_ASSETS:-$(cd "$here/.." && pwd)/shared/minimax-h3/assets}
[ -d "$assets" ] || assets=$(cd "$here/../.." 2>/dev/null && pwd)/shared/minimax-h3/assets
export MMH3_H3_ASSETS="$assets"

chromium=${CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] || { echo "FAIL web/e2e: $chromium not found (apt-get install chromium)"; exit 1; }
[ -f "$assets/t2va.mp4" ] || { echo "FAIL web/e2e: the real H3 sample clips are not at $assets (set MMH3_H3_ASSETS)"; exit 1; }
[ -d "$here/web/node_modules/playwright-core" ] || { echo "FAIL web/e2e: web/node_modules is missing (npm ci in web/)"; exit 1; }

# Two stills from a real H3 clip for the first/last-frame test.
stills="$out/stills"
mkdir -p "$stills"
if [ ! -s "$stills/last.png" ]; then
  ffmpeg -v error -y -i "$assets/i2va.mp4" -vf "select=eq(n\,0),scale=448:256" -frames:v 1 "$stills/first.png" &&
  ffmpeg -v error -y -i "$assets/i2va.mp4" -vf "select=eq(n\,120),scale=448:256" -frames:v 1 "$stills/last.png" ||
  { echo "FAIL web/e2e: could not extract stills with ffmpeg"; exit 1; }
fi
export MMH3_E2E_STILLS="$stills"
[ -s "$stills/voice.wav" ] || ffmpeg -v error -y -i "$assets/ref2va.mp4" -vn -t 4 -ac 1 -ar 32000 "$stills/voice.wav" ||
  { echo "FAIL web/e2e: could not extract audio with ffmpeg"; exit 1; }
MMH3_E2E_T2VA_FRAMES=$(ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 "$assets/t2va.mp4")
export MMH3_E2E_T2VA_FRAMES

base=${MMH3_E2E_BASE:-}
if [ -z "$base" ]; then
  . "$here/tests/e2e/stack.sh" || exit 1
  e2e_stack_start "$build" "$out/stack" || { echo "FAIL web/e2e: the stack did not start (logs in $out/stack)"; exit 1; }
  trap e2e_stack_stop EXIT
  base=$E2E_BASE
  export MMH3_E2E_RUN_DIR="$out/stack/outputs/.mmh3/run" # pid files, for the reconnect test
fi
node "$here/tests/e2e/gallery.e2e.mjs" "$base" "$out" "$@"
rc=$?
# The gallery as people use it: shapes, batches, history, keys, estimates, axe, screenshots.
node "$here/tests/e2e/gallery-use.e2e.mjs" "$base" "$out" "$@" || rc=1
# Few-step generation: adapters from GET /api/loras, their samplers, the speed choice, what a clip used.
node "$here/tests/e2e/fewstep.e2e.mjs" "$base" "$out" "$@" || rc=1
# OpenAI's Node SDK against /v1/videos: create/retrieve/list/delete and its error objects.
node "$here/tests/e2e/openai.e2e.mjs" "$base" "$out" "$@" || rc=1
# Behind access tokens (its own stack, `serve --auth on`): login, cookie, revocation.
if [ -z "${MMH3_E2E_BASE:-}" ]; then
  node "$here/tests/e2e/auth.e2e.mjs" "$build" "$out" "$@" || rc=1
fi
exit $rc
