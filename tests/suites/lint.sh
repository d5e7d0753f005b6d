# lint suite: the architecture rules of docs/ARCHITECTURE.md, checked by
# tools/lint-arch (CUDA includes, SQL outside src/store/, getenv outside the
# configuration readers, history in comments, function lengths, layers).
# Categories that work in flight will satisfy print SKIP with a count; see
# PENDING in tools/lint-arch. Sourced by tests/run.
lint_python=/usr/bin/python3
[ -x "$lint_python" ] || lint_python=python3
run_one lint/arch "$lint_python" "$MMH3_SRC/tools/lint-arch"
# The checks themselves, on made-up sources with and without a violation.
run_one lint/self-test "$lint_python" "$MMH3_SRC/tools/lint-arch" --self-test
