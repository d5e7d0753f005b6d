# Unit suite: every C test program the build made (tests/unit/test_*).
for prog in "$MMH3_BUILD"/tests/unit/test_*; do
  [ -x "$prog" ] || continue
  run_one "unit/$(basename "$prog")" "$prog"
done
