#!/usr/bin/env bash
# Nsight Compute on the DiT's hot kernels at the real sizes (issue 9): what bounds each one — tensor pipe,
# MUFU/FMA, L2/HBM, stalls — so that kernel work is chosen by counters, not guesses.
#
#   device:  bash tests/device/profile.sh [--part attn,qgemm,glue,vae,attn-src,clocks] [--set full|detailed]
#            (session.sh step `profile`; needs the session's build-device/); also --part sparse
#
# Each part profiles ONE launch of each kernel it names (ncu replays it once per counter pass; a 65 ms
# attention call × ~40 passes ≈ 3 s) with --clock-control none (the clocks stay as the benchmarks see them).
# Output: profile_<part>.txt (ncu's text report) and a one-line digest per kernel in summary_profile.txt.
# vae: not counters but where the time goes — every kernel of one video VAE decode (--frames, default 22: one
# chunk of 28 tiles at 1344x768) timed by ncu (one metric, gpu__time_duration), summed per kernel name:
# profile_vae_kernels.txt (name, launches, total ms, share). Needs the full-size random video VAE (written
# here when missing, ~5 GB).
# attn-src: where the default attention kernels (exact fa3, fast fa3-fast) spend their issue slots and
# stalls, per SASS instruction: one real launch each under ncu --set full, its source page as CSV
# (profile_attn_src_<path>.csv: every instruction with its executed count, warp-state samples per stall
# reason; tests/device/ncu_ledger.py's digest of it: profile_attn_ledger_<path>.txt), the details page, and
# the kernels' SASS (profile_attn_sass.txt when cuobjdump is on the host).
# sparse: kernel times (gpu__time_duration per launch, summed per name) of one sparse attention call at
# S = 38,010, forced density 0.25, exact and fast kernels: profile_sparse_<kernel>_kernels.txt.
# clocks: no profiler — the SM clock, power draw and the clock event reasons sampled every 50 ms by
# nvidia-smi while the attention kernels and the int8 GEMMs run at full size (clocks_<bench>.csv), the
# median per benchmark in the summary: is a kernel held back by the power limit rather than by its code?
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
# (the default kernels: exact fa3 with 192-key tiles, fast mode, the sm90 int8 GEMM)
want attn && prof attn 'k_fa3(<|$)' 10 "$B/bench/mmh3-bench-attn" --seq 38010 --heads 56 --reps 1 --paths fa3,fa3-fast
want qgemm && prof qgemm 'k_qgemm_persistent(<|$)' 10 "$B/bench/mmh3-bench-qgemm" --rows 38010 --reps 1
want glue && prof glue 'k_convrot_quant' 6 "$B/tests/device/bench_kernels" --reps 1 --only convrot
want glue && prof qknorm 'k_qk_norm_rope' 2 "$B/tests/device/bench_kernels" --reps 1 --only qk_norm

# full_counters AREA NAME REGEX SKIP TIMEOUT PROGRAM ARGS...: one launch of the kernels REGEX matches (after
# SKIP of them) under ncu --set full: profile_AREA_details_NAME.txt (the details page),
# profile_AREA_ledger_NAME.txt (tests/device/ncu_ledger.py over the per-instruction source counters,
# profile_AREA_src_NAME.csv) and the summary's digest of both
full_counters() {
  local area=$1 name=$2 regex=$3 skip=$4 limit=$5; shift 5
  local rep="/tmp/mmh3-prof-$area-$name" base="$OUT/profile_${area}"
  step "$area-src: $name, one launch, full counters"
  rm -f "$rep.ncu-rep"
  timeout "$limit" "$NCU" --clock-control none --set full --import-source no -k "regex:$regex" --launch-skip "$skip" \
      -c 1 -o "$rep" "$@" >"${base}_src_$name.log" 2>&1
  note "$area-src $name: ncu rc $?"
  [ -s "$rep.ncu-rep" ] || return 0
  "$NCU" -i "$rep.ncu-rep" --page details --print-units base >"${base}_details_$name.txt" 2>&1
  "$NCU" -i "$rep.ncu-rep" --page source --csv --print-source sass >"${base}_src_$name.csv" 2>&1
  python3 tests/device/ncu_ledger.py "${base}_src_$name.csv" 40 >"${base}_ledger_$name.txt" 2>&1
  note "$area-src $name: $(head -1 "${base}_ledger_$name.txt") (profile_${area}_ledger_$name.txt)"
  grep -E '^ *(Duration|Registers Per Thread|Achieved Occupancy|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Local Memory Spilling)' \
      "${base}_details_$name.txt" | tr -s ' ' | while read -r l; do note "  $name: $l"; done
}

if want attn-src; then
  for path in fa3 fa3-fast; do
    full_counters attn "$path" 'k_fa3(<|$)' 1 200 "$B/bench/mmh3-bench-attn" --seq 38010 --heads 56 --reps 1 --paths "$path"
  done
  CUOBJDUMP=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null | head -1)
  obj=$(ls "$B"/kernels/attn_fa3.o 2>/dev/null | head -1)
  if [ -n "$CUOBJDUMP" ] && [ -n "$obj" ]; then
    "$CUOBJDUMP" -sass "$obj" >"$OUT/profile_attn_sass.txt" 2>&1
    note "attn-src: SASS of $obj ($(wc -l <"$OUT/profile_attn_sass.txt") lines)"
  else
    note "attn-src: no cuobjdump (${CUOBJDUMP:-none}) or no $B/kernels/attn_fa3.o (${obj:-none})"
  fi
fi

if want clocks; then
  step "clocks: SM clock and power while the hot kernels run"
  # sample NAME PROGRAM ARGS...: nvidia-smi every 50 ms around one benchmark run; median clock and power
  sample() {
    local name=$1; shift
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active \
        --format=csv,noheader,nounits -lms 50 >"$OUT/clocks_$name.csv" 2>&1 &
    local smi=$!
    sleep 0.5
    timeout 120 "$@" >"$OUT/clocks_${name}_bench.txt" 2>&1
    kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
    note "clocks $name: $(grep -E '^(ATTN|QGEMM op)' "$OUT/clocks_${name}_bench.txt" | tr '\n' ' ' | cut -c1-300)"
    note "clocks $name: $(python3 - "$OUT/clocks_$name.csv" <<'PY'
import sys, collections
rows = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    try:
        rows.append((int(f[1]), float(f[3]), float(f[4]), int(f[5]), f[6]))
    except (ValueError, IndexError):
        pass
busy = [r for r in rows if r[1] > 150]
if not busy:
    sys.exit(print(f"no busy samples of {len(rows)}"))
med = lambda v: sorted(v)[len(v) // 2]
why = collections.Counter(r[4] for r in busy).most_common(3)
print(f"{len(busy)} busy samples (> 150 W): SM clock median {med([r[0] for r in busy])} MHz "
      f"(min {min(r[0] for r in busy)}, max {max(r[0] for r in busy)}), power median {med([r[1] for r in busy]):.0f} W "
      f"of {busy[0][2]:.0f} W, temperature max {max(r[3] for r in busy)} C; event reasons {why}")
PY
)"
  }
  sample attn_exact "$B/bench/mmh3-bench-attn" --seq 38010 --heads 56 --reps 40 --paths fa3
  sample attn_fast "$B/bench/mmh3-bench-attn" --seq 38010 --heads 56 --reps 40 --paths fa3-fast
  sample qgemm "$B/bench/mmh3-bench-qgemm" --rows 38010 --reps 20
  # the yardstick: PyTorch's bf16 GEMM (cuBLAS) at 8192³ for ~4 s, its TFLOP/s and the clock it holds
  device_python torch
  if [ -n "$PY" ]; then
    sample torch_bf16_gemm "$PY" -c '
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(5): a @ b
torch.cuda.synchronize(); n, t0 = 0, time.time()
while time.time() - t0 < 4:
    for _ in range(20): a @ b
    torch.cuda.synchronize(); n += 20
dt = time.time() - t0
print(f"QGEMM op=torch-bf16-8192 tflops={2 * 8192**3 * n / dt * 1e-12:.1f} ({n} products in {dt:.2f} s)")'
  fi
fi

# kernel_times RAW_CSV OUT_TXT: ncu's one-metric CSV summed per kernel name (launches, total ms, share)
kernel_times() {
  python3 - "$1" >"$2" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if head is None:
    sys.exit("no ncu table")
cols = rows[head]
name, dur = cols.index("Kernel Name"), cols.index("gpu__time_duration.sum")
tot, cnt = collections.Counter(), collections.Counter()
for r in rows[head + 1:]:
    try:
        ns = float(r[dur].replace(",", ""))
    except (ValueError, IndexError):
        continue
    k = r[name].split("(")[0]
    tot[k] += ns
    cnt[k] += 1
all_ns = sum(tot.values())
print(f"total {all_ns / 1e6:.2f} ms in {sum(cnt.values())} launches")
for k, ns in tot.most_common(40):
    print(f"{ns / 1e6:10.3f} ms {100 * ns / all_ns:5.1f}% {cnt[k]:6d}x  {k}")
PY
}

if want vae; then
  step "vae: kernel times of one video VAE decode"
  VV=${VV_CKPT:-/tmp/mmh3-vv-full.safetensors} AV=${AV_CKPT:-/tmp/mmh3-av-full.safetensors}
  for pair in "video-vae:$VV" "audio-vae:$AV"; do
    f=${pair#*:}
    [ -s "$f" ] || timeout 120 "$B/mmh3-gen-tiny" "${pair%%:*}" --full --out "$f" >/dev/null 2>&1 ||
      note "FAIL vae: could not write $f"
  done
  timeout 240 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --page raw --print-units base \
      "$B/bench/bench_vae" --video "$VV" --audio "$AV" --device cuda --frames "${MMH3_PROFILE_VAE_FRAMES:-22}" \
      --what decode --reps 1 >"$OUT/profile_vae_raw.csv" 2>"$OUT/profile_vae.txt"
  note "vae (rc $?): $(grep -m1 VAE_BENCH "$OUT/profile_vae_raw.csv" "$OUT/profile_vae.txt" 2>/dev/null | head -1)"
  kernel_times "$OUT/profile_vae_raw.csv" "$OUT/profile_vae_kernels.txt"
  head -25 "$OUT/profile_vae_kernels.txt"
  while read -r line; do note "vae kernels: $line"; done < <(head -12 "$OUT/profile_vae_kernels.txt")
fi

# sparse-src: the two Hopper sparse kernels' counters (one real launch each under --set full: the details page
# and the per-instruction ledger), to see why the fast one lags its dense twin more than the exact one does
if want sparse-src; then
  for spec in "sm90:k_sp_fa3\$:2" "sm90-fast:k_sp_fa3_fast:0"; do
    IFS=: read -r kern regex skip <<<"$spec"
    full_counters sparse "$kern" "$regex" "$skip" 150 "$B/bench/mmh3-bench-sparse-attn" --seq 38010 --heads 56 \
        --reps 1 --routes forced:0.25 --kernels "$kern"
    rm -f "$OUT/profile_sparse_src_$kern.csv"
  done
fi

# sparse: where a sparse attention call's time goes, per kernel (routing, quantization, centroid and routed
# passes, merge), at clip5's S for one forced density through the exact (sm90) and the fast (sm90-fast) kernels;
# the bench runs the dense fa3 kernels first, so they are in the table too
if want sparse; then
  for kern in sm90 sm90-fast; do
    step "sparse: kernel times of one $kern call, S = 38,010, forced 0.25"
    timeout 150 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --page raw --print-units base \
        "$B/bench/mmh3-bench-sparse-attn" --seq 38010 --heads 56 --reps 1 --routes forced:0.25 --kernels "$kern" \
        >"$OUT/profile_sparse_${kern}_raw.csv" 2>"$OUT/profile_sparse_$kern.txt"
    note "sparse $kern (rc $?)"
    kernel_times "$OUT/profile_sparse_${kern}_raw.csv" "$OUT/profile_sparse_${kern}_kernels.txt"
    while read -r line; do note "sparse $kern kernels: $line"; done < <(head -14 "$OUT/profile_sparse_${kern}_kernels.txt")
  done
fi
finish 0
