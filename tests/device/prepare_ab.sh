#!/usr/bin/env bash
# Prepares tests/device/ab.sh HERE: the tree of a base commit (the "before" of an A/B run) with its
# generated configure, packed as .carry/ab-base.tar.gz (a few MB: sources only, no test data).
#
#   bash tests/device/prepare.sh && bash tests/device/prepare_ab.sh [BASE]   (BASE: a commit, default main)
#
# Then on the device: tests/device/ab.sh (its header has the run(...) call).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
base=${1:-main}
rev=$(git rev-parse --verify "$base^{commit}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/base" .carry
# what a build reads; the test data and the web app stay behind (the A/B builds only programs)
git archive "$rev" | tar -x -C "$tmp/base" --exclude=tests/data --exclude=tests/fixtures --exclude=web
mkdir -p "$tmp/base/web" && git show "$rev:web/local.am" >"$tmp/base/web/local.am"
(cd "$tmp/base" && autoreconf -fi >/dev/null 2>&1) || { echo "prepare_ab: autoreconf of $rev failed" >&2; exit 1; }
echo "$rev" >"$tmp/base/.ab-base"
tar -czf .carry/ab-base.tar.gz -C "$tmp" base
echo "prepare_ab: .carry/ab-base.tar.gz ($(du -h .carry/ab-base.tar.gz | cut -f1)), base $(git log -1 --format='%h %s' "$rev" | cut -c1-80)"
