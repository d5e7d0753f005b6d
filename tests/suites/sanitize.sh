# Sanitize suite: the unit test programs rebuilt with ASan + UBSan (configure
# --enable-sanitizers, CPU backend, in build-asan/ beside the main build) and
# run again. Any sanitizer report makes its program exit non-zero, which
# tests/run counts as a failure even when every case printed PASS.
#
# build-asan has the serving stack too: the server integration and security
# suites then run against it (serve, mmh3-fcgi, the workers and `mmh3 token`
# instrumented; PostgreSQL and nginx are the system's). Those processes are
# restarted by serve or end with the test, so their reports are collected
# through log_path and any report is a failure.
asan_build="$here/build-asan"
mkdir -p "$asan_build"
if [ -f "$asan_build/config.status" ] && "$asan_build/config.status" --config | grep -q -- '--without-server'; then
  rm -f "$asan_build/Makefile" # an older build-asan without the serving stack: configure it again
fi
if [ ! -f "$asan_build/Makefile" ]; then
  (cd "$asan_build" && "$here/configure" --enable-sanitizers --with-cuda=no >"$outdir/sanitize-configure.log" 2>&1)
fi
if ! (cd "$asan_build" && make -j"$(nproc)" >"$outdir/sanitize-build.log" 2>&1 && make -j"$(nproc)" check >>"$outdir/sanitize-build.log" 2>&1); then
  echo "  sanitize build failed (see tests/out/sanitize-build.log)"
  failed=$((failed + 1)); failures+=("sanitize/build")
else
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:exitcode=86"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=87"
  for prog in "$asan_build"/tests/unit/test_*; do
    [ -x "$prog" ] || continue
    run_one "sanitize/$(basename "$prog")" env MMH3_BUILD="$asan_build" "$prog"
  done
  unset ASAN_OPTIONS UBSAN_OPTIONS

  sanitize_server() {
    local reports="$outdir/sanitize-server-reports"
    rm -rf "$reports" && mkdir -p "$reports"
    if ! "$asan_build/mmh3" serve --help >/dev/null 2>&1; then
      echo "FAIL sanitize/server: build-asan has no serving stack (see tests/out/sanitize-configure.log)"
      return 1
    fi
    local rc=0 test
    for test in server_test security_test; do
      ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:log_path=$reports/asan" \
      UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan" \
        python3 "$MMH3_SRC/tests/integration/$test.py" --build "$asan_build" >"$reports.$test.log" 2>&1 || rc=1
      sed 's/^\(PASS\|FAIL\|SKIP\) /\1 sanitize\//' "$reports.$test.log"
    done
    local found
    found=$(ls "$reports" 2>/dev/null)
    if [ -n "$found" ]; then
      echo "FAIL sanitize/server_no_reports: $(echo "$found" | wc -l) sanitizer report(s) in tests/out/sanitize-server-reports:"
      for f in $found; do grep -m3 -E 'ERROR|runtime error|SUMMARY' "$reports/$f" | sed 's/^/    /'; done
      rc=1
    else
      echo "PASS sanitize/server_no_reports (serve, mmh3-fcgi, workers, mmh3 token: no ASan/UBSan/LSan report)"
    fi
    return $rc
  }
  run_one sanitize/server sanitize_server
fi
