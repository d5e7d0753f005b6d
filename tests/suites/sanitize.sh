# Sanitize suite: the unit test programs rebuilt with ASan + UBSan (configure
# --enable-sanitizers, CPU backend, in build-asan/ beside the main build) and
# run again. Any sanitizer report makes its program exit non-zero, which
# tests/run counts as a failure even when every case printed PASS.
asan_build="$here/build-asan"
mkdir -p "$asan_build"
if [ ! -f "$asan_build/Makefile" ]; then
  (cd "$asan_build" && "$here/configure" --enable-sanitizers --with-cuda=no --without-server >"$outdir/sanitize-configure.log" 2>&1)
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
fi
