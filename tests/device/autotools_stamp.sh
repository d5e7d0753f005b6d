#!/usr/bin/env bash
# Prints one hash over the autotools inputs of the tree (configure.ac, every
# *.am, the project's m4 macros): prepare.sh stores it with the generated
# files, run.sh compares it to decide whether they still fit the tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
{ echo configure.ac; find . -name '*.am' -not -path './build*' -not -path './.carry/*' -not -path './node_modules/*' \
    -not -path '*/node_modules/*'; ls m4/mmh3_*.m4 2>/dev/null || true; } |
  sed 's|^\./||' | LC_ALL=C sort -u | while read -r f; do printf '%s\n' "$f"; cat "$f"; done | sha256sum | cut -d' ' -f1
