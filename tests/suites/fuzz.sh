# fuzz suite — short libFuzzer smoke runs (clang -fsanitize=fuzzer,address,undefined),
# MMH3_FUZZ_SECONDS each (default 20; the 10-minute runs are in docs/SECURITY.md).
#
# fuzz_target NAME SECONDS SOURCES... builds tests/fuzz/NAME.c with the listed
# project sources (linking jansson and the pkg-config packages in $FUZZ_PKGS)
# and runs it for SECONDS on a copy of tests/fuzz/corpus/<short name>/ (the
# committed seeds). A crash, leak or sanitizer report is a FAIL;
# the crashing input is kept under tests/out/fuzz/.
fuzz_target() {
  local name=$1 secs=$2; shift 2
  local short=${name#fuzz_}
  local dir="$MMH3_BUILD/fuzz" out="$here/tests/out/fuzz"
  mkdir -p "$dir/$short.corpus" "$out"
  : >"$dir/config.h" # the fuzz build is CPU-only whatever the main build is
  local srcs=()
  for s in "$@"; do srcs+=("$MMH3_SRC/$s"); done
  if ! command -v clang >/dev/null; then
    echo "FAIL fuzz/$name: clang not installed (tools/deps.sh installs it)"; return
  fi
  if ! clang -std=c17 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
      -I"$dir" -I"$MMH3_SRC/src" -I"$MMH3_SRC" $(pkg-config --cflags jansson ${FUZZ_PKGS:-}) \
      -o "$dir/$name" "$MMH3_SRC/tests/fuzz/$name.c" "${srcs[@]}" $(pkg-config --libs jansson ${FUZZ_PKGS:-}) -lm -lpthread \
      >"$out/$name.build.log" 2>&1; then
    echo "FAIL fuzz/$name: build failed (see tests/out/fuzz/$name.build.log)"; return
  fi
  cp "$MMH3_SRC/tests/fuzz/corpus/$short/"* "$dir/$short.corpus/" 2>/dev/null
  local dict=()
  [ -f "$MMH3_SRC/tests/fuzz/$short.dict" ] && dict=(-dict="$MMH3_SRC/tests/fuzz/$short.dict")
  if "$dir/$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$out/$name-" \
      "${dict[@]}" -print_final_stats=1 "$dir/$short.corpus" >"$out/$name.log" 2>&1; then
    echo "PASS fuzz/$name ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$name.log" | grep -o '[0-9]*$') runs in ${secs}s)"
  else
    echo "FAIL fuzz/$name: $(grep -m1 -E 'ERROR|runtime error|SUMMARY' "$out/$name.log") (see tests/out/fuzz/$name.log)"
  fi
}

fuzz_run_all() {
  fuzz_target fuzz_safetensors "${MMH3_FUZZ_SECONDS:-20}" \
    src/io/safetensors.c src/core/error.c src/core/dtype.c src/core/tensor.c \
    src/backend/device.c src/backend/cuda/cuda_stub.c
  FUZZ_PKGS="libpcre2-8 libutf8proc" fuzz_target fuzz_tokenizer "${MMH3_FUZZ_SECONDS:-20}" \
    src/model/text/tokenizer.c src/model/text/tokenizer_load.c src/model/text/bpe.c \
    src/model/text/pretokenize.c src/model/text/normalize.c src/core/error.c
  # media: the upload probe on arbitrary bytes (FFmpeg libraries, our allowlists and limits)
  FUZZ_PKGS="libavformat libavcodec libavutil libswscale libswresample" \
    fuzz_target fuzz_media_probe "${MMH3_FUZZ_SECONDS:-20}" \
    src/media/probe.c src/media/media_input.c src/media/ff_common.c src/media/defaults.c src/core/error.c
  # media: the reference readers the worker runs (image, video frames, audio) on arbitrary bytes
  FUZZ_PKGS="libavformat libavcodec libavutil libswscale libswresample" \
    fuzz_target fuzz_media_readers "${MMH3_FUZZ_SECONDS:-20}" \
    src/media/image_read.c src/media/video_reader.c src/media/audio_reader.c src/media/resample.c \
    src/media/probe.c src/media/media_input.c src/media/ff_common.c src/media/defaults.c src/core/error.c
  # server: the upload body parser and the enqueue request validation
  fuzz_target fuzz_multipart "${MMH3_FUZZ_SECONDS:-20}" fcgi/multipart.c src/core/error.c
  fuzz_target fuzz_enqueue "${MMH3_FUZZ_SECONDS:-20}" \
    src/request/json.c src/request/settle.c src/request/rules.c src/request/step_cache.c src/request/sampler_presets.c \
    src/core/uuid.c src/core/error.c
  # oxen: the hub's streamed answers (event-stream reader, chat frames) and --oxen-remote URLs
  FUZZ_PKGS="libcurl" fuzz_target fuzz_oxen_stream "${MMH3_FUZZ_SECONDS:-30}" \
    src/oxen/sse.c src/oxen/remote.c src/core/error.c
  # other areas: add one fuzz_target line per target here
}

run_one fuzz/all fuzz_run_all
