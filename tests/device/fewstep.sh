#!/usr/bin/env bash
# Few-step generation on the GPU host, beside lora.sh (the adapter branch): ~2 minutes.
#
#   stepcache  test_dit_step_cache on the CUDA forward (MMH3_REQUIRE_GPU=1): threshold 0 gives the
#              uncached forward bit for bit, a huge threshold skips what the guards leave, the skip
#              lists match a double-precision replay of the rule, a skipped forward is bf16(h1 + D)
#   adaln      AdaLN adapters and a PDD head bank on the public kit's model: the PyTorch reference
#              (tests/device/adaln_adapter_ref.py, the device's torch) writes the adapters, the grid and
#              its velocities; test_dit_adaln compares the engine's CUDA forward with them
#
#   device: bash tests/device/fewstep.sh [--part stepcache,adaln]
#           or: bash tests/device/session.sh --steps fewstep:150
# Summary in $OUT/summary_fewstep.txt.
set -u
. "$(dirname "$0")/lib.sh"
device_summary fewstep summary_fewstep.txt

part=stepcache,adaln
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift 2 ;;
    *) echo "fewstep.sh: unknown argument $1"; exit 2 ;;
  esac
done
want() { [[ ",$part," == *",$1,"* ]]; }
status=0
step "build: test_dit_step_cache test_dit_adaln"
device_build fewstep tests/unit/test_dit_step_cache tests/unit/test_dit_adaln || finish 1

devtest() { # NAME SECONDS PROGRAM [ENV...]
  local name=$1 secs=$2 prog=$3 log="$OUT/fewstep_$1.txt"; shift 3
  local req=(MMH3_REQUIRE_GPU=1); [ "$dry" = 1 ] && req=()
  timeout --kill-after=5 "$secs" env "${req[@]}" MMH3_BUILD="$B" MMH3_TEST_DATA="$top/tests/data" "$@" \
    "$B/tests/unit/$prog" >"$log" 2>&1
  local rc=$? p f s
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP' "$log")
  grep -E '^FAIL|^SKIP|^     ' "$log" | head -16
  note "$prog: $p passed, $f failed, $s skipped (exit $rc)"
  { [ "$rc" = 0 ] && [ "$f" = 0 ] && [ "$p" -gt 0 ]; } || status=1
}

if want stepcache; then
  step "stepcache: the step cache on the CUDA forward"
  devtest stepcache 150 test_dit_step_cache
fi
if want adaln; then
  step "adaln: AdaLN adapters and a PDD bank, the engine on CUDA against PyTorch"
  py=python3
  [ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3
  ref=/tmp/mmh3-adaln-ref
  rm -rf "$ref"
  if timeout 120 "$py" tests/device/adaln_adapter_ref.py --kit tests/data/dit --out "$ref" >"$OUT/fewstep_adaln_ref.txt" 2>&1; then
    tail -4 "$OUT/fewstep_adaln_ref.txt"
    devtest adaln 120 test_dit_adaln MMH3_ADALN_REF="$ref" MMH3_ADALN_DEVICE=cuda
  else
    tail -20 "$OUT/fewstep_adaln_ref.txt"; note "FAIL: the PyTorch reference (fewstep_adaln_ref.txt)"; status=1
  fi
fi
finish $status
