#!/usr/bin/env bash
# A benchmark under several settings of the environment, interleaved over rounds, so that the GPU's clock
# and power drift fall on every setting alike (kernels a few percent apart; the H200 runs power-capped, and
# the same kernel measures ±1.5% from one run to the next). E.g. the default kernels against the portable
# ones: --set MMH3_KERNELS=default --set MMH3_KERNELS=portable -- bench/mmh3-bench-attn --paths sm90p,fa3
#
#   device:  bash tests/device/sweep.sh [--rounds N] --set 'VAR=V [VAR=V...]' [--set ...] -- PROGRAM ARGS...
#            (PROGRAM relative to the build, e.g. bench/mmh3-bench-attn; needs the session's build-device/)
#
# Every output line of the benchmark that starts with ATTN or QGEMM comes back prefixed with the round and
# the setting ("SWEEP round=1 set=MMH3_KERNELS=portable ATTN path=..."), in $OUT/sweep_<n>.txt and on stdout.
set -u
. "$(dirname "$0")/lib.sh"
B=${B:-build-device}
rounds=2 sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --set) sets+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "sweep.sh: unknown argument $1 (usage: --rounds N --set 'VAR=V ...' ... -- PROGRAM ARGS)"; exit 2 ;;
  esac
done
[ $# -gt 0 ] && [ ${#sets[@]} -gt 0 ] || { echo "sweep.sh: needs at least one --set and a program"; exit 2; }
prog=$1; shift
[ -x "$B/$prog" ] || { echo "sweep.sh: $B/$prog is not built"; exit 1; }
n=$(ls "$OUT"/sweep_*.txt 2>/dev/null | wc -l)
log="$OUT/sweep_$((n + 1)).txt"
for ((r = 1; r <= rounds; r++)); do
  for set in "${sets[@]}"; do
    read -r -a kv <<<"$set"
    for x in "${kv[@]}"; do
      [[ "$x" =~ ^[A-Z][A-Z0-9_]*=[^[:space:]]*$ ]] || { echo "sweep.sh: --set $x: expected VAR=VALUE"; exit 2; }
    done
    env "${kv[@]}" timeout 120 "$B/$prog" "$@" 2>&1 | grep -E '^(ATTN|QGEMM|FAIL)' |
      sed "s|^|SWEEP round=$r set=${set// /,} |" | tee -a "$log"
  done
done
