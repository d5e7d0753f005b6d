#!/usr/bin/env bash
# Issue 9 (DiT speed) and the CUDA op tests on the GPU host, in one call of at most ~8 minutes.
# Every part runs what `mmh3 generate` runs: no environment forces a kernel (the Hopper kernels
# are used after their first-use self-checks; the "kernels in use" line of each forward and
# `mmh3 check --json` say which).
#
#   build    build-device/ (lib.sh device_build; the session's prebuilt binaries when present)
#   tests    the device tests, each under its own timeout (~70 s together):
#              test_cuda_runtime     allocator, copies, events
#              test_cuda_ops         every op vs its CPU twin (incl. the fused DiT ops)
#              test_backend_twins    the engine foundation's op twins, CUDA half
#              test_cuda_kernels     fused kernels + the portable and sm90p attention with packed
#                                    sequences (ragged, causal, GQA) vs double references
#              test_speed_attention  fa3 bf16 vs the CPU twin; fast (int8 q·k + e4m3 p·v) vs the CPU
#                                    model of its rounding, inside its error budget; the
#                                    kernel-choice policy (self-checks, overrides)
#              test_speed_qgemm      the sm90 int8 GEMM, bit for bit vs cuBLASLt and the CPU
#              mmh3 check --json     which kernels the product uses ("kernel_paths")
#   kit      the DiT conformance kit on CUDA, default path                            (~15 s)
#   attn     bench/mmh3-bench-attn at S=38010, 56 heads: sm80, sm90p (mm_attention's
#            kernels), fa3, fa3-fast (the DiT's) — time and rel_l2 against sm80
#            (MMH3_ATTN_PATHS, MMH3_ATTN_REPS override the list and the repetitions)   (~15 s)
#   clip5    1344x768x124 (5 s, S=38,010): exact + fast forward (one warm-up each), the
#            per-kernel breakdown of block 1, fast-vs-exact velocity error; the PyTorch
#            reference (bench/reference/dit_ref.py, --ref-linear: bf16 or int8, SDPA), same size (~95 s)
#   quality  bench/mmh3-bench-dit-quality: fast vs exact over a sampler run (1344x768x22,
#            8 steps; per-step velocity rel_l2, final latent PSNR, decoded-frame PSNR) (~40 s)
#   clip10   1344x768x243 (10 s, S=73,586): exact + fast, one forward each; reference  (~75 s)
#   clip15   1344x768x362 (15 s, S=109,262): the same                                 (~130 s)
#   qgemm    (not in "all") bench/mmh3-bench-qgemm: the four linears, cuBLASLt and the fused
#            sm90 kernel, bit for bit                                                 (~20 s)
#
#   here:    bash tests/device/prepare.sh   (and tests/device/prepare_build.sh: prebuilt binaries)
#   device:  bash tests/device/speed.sh [--part a,b,...] [--budget SECONDS] [--no-ref clip10,clip15]
#                 [--ref-linear bf16|int8] [--forward-env VAR=VALUE[,VAR=VALUE...]]   carry [".carry"]
#            --ref-linear: the reference's linears — bf16 (the default: dense bf16 + SDPA, what issue 9
#            names as the reference) or int8 (torch._int_mm W8A8, as ai-toolkit runs the Comfy file);
#            --forward-env: variables set for the clip and quality forwards only (not the tests, the kit
#            or the benchmarks), e.g. the portable kernels: MMH3_KERNELS=portable
#            (all = build,tests,kit,attn,clip5,quality,clip10,clip15: ~460 s after the build)
#            or through tests/device/session.sh (call 1), which writes the checkpoint meanwhile.
#   CPU stand-in (here): MMH3_DEVICE_DRY=1 — the tests without MMH3_REQUIRE_GPU (they SKIP), the
#            kit and the forwards on the CPU with a 2-block hidden-256 random DiT at 64x64.
#
# The full-size random DiT ($DIT_CKPT, lib.sh) is written when missing (~30 s). Every step runs
# under `timeout` (its own limit, cut to what is left of the budget, default 470 s; steps that no
# longer fit are skipped and say so). Progress lines "=== [Ns] step" and one ">>" line per result
# on stdout; logs in $OUT/speed_*.txt; the summary, with the clip table of the issue, is printed
# last and kept in $OUT/summary_speed.txt.
set -u
. "$(dirname "$0")/lib.sh"
device_summary speed summary_speed.txt

part=all
budget=470
noref="" # clips whose PyTorch reference is not run (--no-ref clip10,clip15: a call short of time)
ref_linear=bf16
fwd_env=()
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --no-ref) noref=$2; shift 2 ;;
    --ref-linear)
      case "$2" in bf16|int8) ref_linear=$2 ;; *) echo "speed.sh: --ref-linear $2: accepted: bf16, int8"; exit 2 ;; esac
      shift 2 ;;
    --forward-env)
      IFS=, read -r -a fwd_env <<<"$2"
      for kv in "${fwd_env[@]}"; do
        [[ "$kv" =~ ^[A-Z][A-Z0-9_]*=[^[:space:]]*$ ]] || { echo "speed.sh: --forward-env $kv: expected VAR=VALUE"; exit 2; }
      done
      shift 2 ;;
    *) echo "speed.sh: unknown argument $1"; exit 2 ;;
  esac
done
want() { { [ "$part" = all ] && [ "$1" != qgemm ]; } || [[ ",$part," == *",$1,"* ]]; }

# limit SECONDS: the step's time limit within what is left of the budget (0: no time left)
limit() {
  local left=$((budget - (SECONDS - t0)))
  local l=$1; [ "$left" -lt "$l" ] && l=$left
  [ "$l" -lt 15 ] && l=0
  echo "$l"
}
skipped() { note "SKIP $1: out of time (budget ${budget}s)"; }
# run NAME SECONDS LOG CMD...: under timeout, stdout+stderr into LOG
run() {
  local name=$1 secs=$2 log=$3; shift 3
  timeout --kill-after=5 "$secs" "$@" >"$log" 2>&1
  local rc=$?
  { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && echo "TIMEOUT $name after ${secs}s" | tee -a "$log"
  return $rc
}
# field KEY FILE [PATTERN]: the value of KEY=... on the last RESULT line (matching PATTERN)
field() {
  awk -v k="$1" -v pat="${3:-}" '$1 == "RESULT" && (pat == "" || index($0, pat)) {
    for (i = 2; i <= NF; i++) { n = index($i, "="); if (substr($i, 1, n - 1) == k) v = substr($i, n + 1) } }
    END { print v }' "$2" 2>/dev/null
}

# Geometry: the release's canvas on the device; a tiny DiT at 64x64 for CPU stand-ins.
W=1344 H=768 TEXT_ROWS=300 CLIP5=124 CLIP10=243 CLIP15=362 QSTEPS=8
gen_shape=()
if [ "$dry" = 1 ]; then
  W=64 H=64 TEXT_ROWS=16 CLIP5=22 CLIP10=39 CLIP15=56 QSTEPS=3
  gen_shape=(--layers 2 --hidden 256 --heads 2 --ffn 512 --text-dim 256)
fi

step "host"
timeout 10 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 || true
device_python "torch, safetensors"
echo "python with torch: ${PY:-none}; device: $DEV"
status=0

BIN="mmh3 bench/mmh3-bench-dit bench/mmh3-bench-attn bench/mmh3-bench-qgemm bench/mmh3-bench-dit-quality
  tests/unit/test_cuda_runtime tests/unit/test_cuda_ops tests/unit/test_backend_twins tests/unit/test_cuda_kernels
  tests/unit/test_speed_attention tests/unit/test_speed_qgemm"
step "build: $(echo $BIN)"
# shellcheck disable=SC2086
make_limit=$(limit 300) device_build speed $BIN || finish 1
note "build ok ($((SECONDS - t0)) s)"

# devtest NAME SECONDS PROGRAM: a device test program, its PASS/FAIL count in the summary
devtest() {
  local name=$1 secs=$2 prog=$3 log="$OUT/speed_$1.txt"
  secs=$(limit "$secs")
  [ "$secs" -gt 0 ] || { skipped "$name"; return; }
  local req=(MMH3_REQUIRE_GPU=1); [ "$dry" = 1 ] && req=() # (the tests read its presence, not its value)
  run "$name" "$secs" "$log" env "${req[@]}" "$B/tests/unit/$prog"
  local rc=$?
  local p f s; p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP' "$log")
  grep -E '^FAIL|TIMEOUT|^mmh3: ' "$log" | head -12
  note "$prog: $p passed, $f failed, $s skipped (exit $rc)"
  { [ "$rc" = 0 ] && [ "$f" = 0 ] && { [ "$p" -gt 0 ] || [ "$dry" = 1 ]; }; } || status=1
}

if want tests; then
  step "tests: CUDA runtime, ops and kernels vs their twins; fa3 attention (exact, fast, policy); sm90 int8 GEMM; mmh3 check"
  devtest runtime 60 test_cuda_runtime
  devtest ops 120 test_cuda_ops
  devtest twins 60 test_backend_twins
  devtest kernels 90 test_cuda_kernels
  grep -E 'attention path' "$OUT/speed_kernels.txt" | head -2
  devtest fa3 180 test_speed_attention
  grep -E '^  \.\. |rel_l2|default:' "$OUT/speed_fa3.txt" | tail -44
  while read -r line; do note "fa3 $line"; done < <(grep -E '^     rel_l2 .* vs exact' "$OUT/speed_fa3.txt" | sed 's/^ *//')
  devtest qgemm_test 150 test_speed_qgemm
  secs=$(limit 40)
  if [ "$secs" -gt 0 ]; then
    dev_arg=(--device cuda:0); [ "$dry" = 1 ] && dev_arg=(--device cpu)
    run check "$secs" "$OUT/speed_check.txt" "$B/mmh3" check --json "${dev_arg[@]}" --models-path /nonexistent
    paths=$(grep -o '"kernel_paths": *"[^"]*"' "$OUT/speed_check.txt" | sed 's/^"kernel_paths": *//')
    note "mmh3 check kernel_paths: ${paths:-missing (see speed_check.txt)}"
    note "mmh3 check kernel_policy: $(grep -o '"kernel_policy": *"[^"]*"' "$OUT/speed_check.txt" | sed 's/^"kernel_policy": *//')"
    [ -n "$paths" ] || grep -E '"kernels"|FAIL' "$OUT/speed_check.txt" | head -4
  fi
fi

if want kit; then
  step "kit: DiT conformance on $DEV, default path"
  secs=$(limit 90)
  [ "$secs" -gt 0 ] || skipped kit
  if [ "$secs" -gt 0 ]; then
    run kit "$secs" "$OUT/speed_kit.txt" "$B/mmh3" conformance tests/data/dit --device "$DEV"
    rc=$?
    grep -E '^mmh3: ' "$OUT/speed_kit.txt" | head -6
    note "DiT kit --device $DEV (default path): $(grep -E 'passed|failed' "$OUT/speed_kit.txt" | tail -1) (exit $rc)"
    grep '^FAIL' "$OUT/speed_kit.txt" | head -10
    [ "$rc" = 0 ] || status=1
  fi
fi

if want attn; then
  step "attn: attention kernels at S=38010, 56 heads x 128"
  secs=$(limit 75)
  if [ "$dry" = 1 ]; then
    note "SKIP attn: CUDA only (CPU stand-in run)"
  elif [ "$secs" -gt 0 ]; then
    run attn "$secs" "$OUT/speed_attn.txt" "$B/bench/mmh3-bench-attn" --seq 38010 --heads 56 --reps "${MMH3_ATTN_REPS:-2}" \
        --paths "${MMH3_ATTN_PATHS:-sm80,sm90p,fa3,fa3-fast}"
    while read -r line; do note "$line"; done < <(grep '^ATTN' "$OUT/speed_attn.txt")
  else
    skipped attn
  fi
fi

CKPT=$DIT_CKPT
# the random DiT: written here when missing (or being written by session.sh: wait for it)
ckpt_ready() {
  device_wait_file "$CKPT" "$(limit 120)" && return 0
  local secs; secs=$(limit 180)
  [ "$secs" -gt 0 ] || return 1
  echo "writing $CKPT"
  run write-ckpt "$secs" "$OUT/speed_write_ckpt.txt" "$B/bench/mmh3-bench-dit" --write-random "$CKPT.part" \
      "${gen_shape[@]}" --write-only && mv "$CKPT.part" "$CKPT" && return 0
  rm -f "$CKPT.part"; note "FAIL: writing $CKPT (speed_write_ckpt.txt)"; status=1; return 1
}

# clip NAME FRAMES MMH3_SECONDS REF_SECONDS WARMUP PROFILE: our forward (exact + fast) then the reference
clip() {
  local name=$1 frames=$2 warm=$5 prof=$6 secs
  [ "$dry" = 1 ] && prof=-1
  step "$name: ${W}x${H}x$frames t2va L=$TEXT_ROWS, exact + fast (warm-up $warm, breakdown of block $prof), then the PyTorch reference"
  secs=$(limit "$3")
  if [ "$secs" -gt 0 ] && ckpt_ready; then
    secs=$(limit "$3")
    [ ${#fwd_env[@]} -gt 0 ] && note "$name: forwards with ${fwd_env[*]}"
    run "$name" "$secs" "$OUT/speed_$name.txt" env "${fwd_env[@]}" "$B/bench/mmh3-bench-dit" --checkpoint "$CKPT" --device "$DEV" \
        --width "$W" --height "$H" --frames "$frames" --text-rows "$TEXT_ROWS" --warmup "$warm" --iters 1 \
        --modes exact,fast --profile-block "$prof"
    local rc=$?
    grep -E '^(kernels in use|mode|forward \(|QUALITY|RESULT|BREAKDOWN|mmh3: )' "$OUT/speed_$name.txt" | head -20
    [ "$prof" -ge 0 ] && grep -E '^  ' "$OUT/speed_$name.txt" | head -30
    while read -r line; do note "$name: $line"; done < <(grep -E '^(RESULT|QUALITY|kernels in use)' "$OUT/speed_$name.txt")
    [ "$rc" = 0 ] || { note "FAIL $name (exit $rc, speed_$name.txt)"; status=1; }
  else
    skipped "$name"
  fi
  secs=$(limit "$4")
  if [[ ",$noref," == *",$name,"* ]]; then
    note "SKIP $name reference: --no-ref"
  elif [ "$secs" -gt 0 ] && [ -n "$PY" ]; then
    run "$name-ref" "$secs" "$OUT/speed_${name}_ref.txt" env PYTHONUNBUFFERED=1 "$PY" bench/reference/dit_ref.py \
        --width "$W" --height "$H" --frames "$frames" --text-rows "$TEXT_ROWS" --linear "$ref_linear" --warmup "$warm" --iters 1
    tail -3 "$OUT/speed_${name}_ref.txt"
    while read -r line; do note "$name: $line"; done < <(grep '^RESULT' "$OUT/speed_${name}_ref.txt")
  elif [ -z "$PY" ]; then
    note "SKIP $name reference: no python with torch"
  else
    skipped "$name reference"
  fi
}
want clip5 && clip clip5 "$CLIP5" 150 90 1 1

if want quality; then
  step "quality: fast vs exact over a sampler run (${W}x${H}x22, $QSTEPS steps, random full-size weights, kit VAE)"
  secs=$(limit 70)
  if [ "$secs" -gt 0 ] && ckpt_ready; then
    secs=$(limit 70)
    run quality "$secs" "$OUT/speed_quality.txt" env "${fwd_env[@]}" "$B/bench/mmh3-bench-dit-quality" --checkpoint "$CKPT" \
        --video-vae tests/data/vae/video_vae.safetensors --device "$DEV" --width "$W" --height "$H" --frames 22 \
        --text-rows "$TEXT_ROWS" --steps "$QSTEPS" --seed 42
    rc=$?
    grep -E '^(quality|QUALITY|RESULT|FAIL)' "$OUT/speed_quality.txt" | tail -14
    while read -r line; do note "$line"; done < <(grep -E '^(QUALITY final|RESULT)' "$OUT/speed_quality.txt")
    [ "$rc" = 0 ] || { note "FAIL quality (exit $rc, speed_quality.txt)"; status=1; }
  else
    skipped quality
  fi
fi

want clip10 && clip clip10 "$CLIP10" 80 75 0 -1
want clip15 && clip clip15 "$CLIP15" 130 120 0 -1

if want qgemm; then
  step "qgemm: the four int8 linears at S=38010, cuBLASLt + epilogue vs the fused sm90 kernel"
  if [ "$dry" = 1 ]; then
    note "SKIP qgemm: CUDA only (CPU stand-in run)"
  else
    secs=$(limit 90)
    if [ "$secs" -gt 0 ]; then
      log="$OUT/speed_qgemm_bench.txt"
      run qgemm "$secs" "$log" "$B/bench/mmh3-bench-qgemm" --rows 38010 --reps 2
      while read -r line; do note "$line"; done < <(grep -E '^QGEMM|^TIMEOUT|^FAIL' "$log")
    else
      skipped qgemm
    fi
  fi
fi

# The issue's table: per clip, s/forward exact and fast, the reference, ratios, TFLOP/s, peak memory.
table=()
for c in clip5:$CLIP5 clip10:$CLIP10 clip15:$CLIP15; do
  name=${c%%:*}; frames=${c#*:}; f="$OUT/speed_$name.txt"; r="$OUT/speed_${name}_ref.txt"
  [ -f "$f" ] || [ -f "$r" ] || continue
  ex=$(field s_per_forward "$f" mode=exact); fa=$(field s_per_forward "$f" mode=fast); to=$(field s_per_forward "$r")
  row=$(awk -v n="$name" -v fr="$frames" -v s="$(field rows "$f" mode=exact)" -v ex="$ex" -v fa="$fa" -v to="$to" \
      -v tex="$(field tflops "$f" mode=exact)" -v tfa="$(field tflops "$f" mode=fast)" -v tto="$(field tflops "$r")" \
      -v pex="$(field peak_gib "$f" mode=exact)" -v pfa="$(field peak_gib "$f" mode=fast)" -v pto="$(field peak_gib "$r")" \
      'function q(x) { return x == "" ? "-" : x }
       function ratio(t, m) { return (t == "" || m == "" || m == 0) ? "-" : sprintf("%.2fx", t / m) }
       BEGIN { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s | %s / %s / %s |", n, fr, q(s), q(ex), q(fa),
               q(to), ratio(to, ex), ratio(to, fa), q(tex), q(tfa), q(tto), q(pex), q(pfa), q(pto) }')
  table+=("$row")
done
if [ ${#table[@]} -gt 0 ]; then
  note "(torch: bench/reference/dit_ref.py --linear $ref_linear, SDPA; same call)"
  note "| clip | frames | S | exact s | fast s | torch s | torch/exact | torch/fast | TFLOP/s exact/fast/torch | peak GiB exact/fast/torch |"
  for row in "${table[@]}"; do note "$row"; done
fi
finish $status
