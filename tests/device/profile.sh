#!/usr/bin/env bash
# Nsight Compute on the DiT's hot kernels at the real sizes (issue 9): what bounds each one — tensor pipe,
# MUFU/FMA, L2/HBM, stalls — so that kernel work is chosen by counters, not guesses.
#
#   device:  bash tests/device/profile.sh [--part attn,qgemm,glue] [--set full|detailed]
#            (session.sh step `profile`; needs the session's build-device/)
#
# Each part profiles ONE launch of each kernel it names (ncu replays it once per counter pass; a 65 ms
# attention call × ~40 passes ≈ 3 s) with --clock-control none (the clocks stay as the benchmarks see them).
# Output: profile_<part>.txt (ncu's text report) and a one-line digest per kernel in summary_profile.txt.
set -u
. "$(dirname "$0")/lib.sh"
device_log profile.log
device_summary profile summary_profile.txt

part=attn,qgemm,glue
set_name=full
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift 2 ;;
    --set) set_name=$2; shift 2 ;;
    *) echo "profile.sh: unknown argument $1"; exit 2 ;;
  esac
done
want() { [[ ",$part," == *",$1,"* ]]; }
B=${B:-build-device}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { note "SKIP profile: no ncu on this host"; finish 0; }
note "ncu: $NCU ($("$NCU" --version 2>/dev/null | tail -1))"

# prof NAME KERNEL_REGEX COUNT PROGRAM ARGS...: ncu report of the first COUNT matching launches
prof() {
  local name=$1 regex=$2 count=$3; shift 3
  [ -x "$1" ] || { note "SKIP $name: $1 not built"; return; }
  step "profile $name: $regex"
  timeout 150 "$NCU" --clock-control none --kernel-name-base function --set "$set_name" -k "regex:$regex" -c "$count" \
      --print-units base "$@" >"$OUT/profile_$name.txt" 2>&1
  local rc=$?
  grep -E '^  k_|^  [a-z_]+<|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Executed Ipc A' \
      "$OUT/profile_$name.txt" | head -60
  note "$name (rc $rc): $(grep -cE 'Section: GPU Speed Of Light' "$OUT/profile_$name.txt") kernels profiled; $(grep -m1 -E 'Compute \(SM\) Throughput' "$OUT/profile_$name.txt" | tr -s ' ') /$(grep -m1 -E '^ *Duration' "$OUT/profile_$name.txt" | tr -s ' ')"
  grep -m3 -E 'ERR|==PROF==.*(Error|error)' "$OUT/profile_$name.txt"
}

# (the first launches are the kernels' own first-use self-checks at small sizes: the report's grid sizes tell
# them from the real call)
want attn && prof attn 'k_fa3(<|$)' 10 "$B/bench/mmh3-bench-attn" --seq 38010 --heads 56 --reps 1 --paths fa3,fa3-fast
want qgemm && prof qgemm 'k_qgemm(<|$)' 10 "$B/bench/mmh3-bench-qgemm" --rows 38010 --reps 1
want glue && prof glue 'k_convrot_quant' 6 "$B/tests/device/bench_kernels" --reps 1 --only convrot
want glue && prof qknorm 'k_qk_norm_rope' 2 "$B/tests/device/bench_kernels" --reps 1 --only qk_norm
finish 0
