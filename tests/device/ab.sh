#!/usr/bin/env bash
# This tree against a base commit in one device call (~6–8 min on a fresh machine): the device tests of
# this tree, the DiT kit on CUDA (the default kernels and MMH3_KERNELS=portable), the SASS of every
# kernel both builds share (cuobjdump -sass, function by function), and clip5 forwards (1344x768x124,
# S = 38,010, exact + fast) of the two builds alternating, so that drift falls on both alike.
#
#   here:    bash tests/device/prepare.sh && bash tests/device/prepare_ab.sh BASE    (.carry/ab-base.tar.gz)
#   device:  run(command="bash tests/device/ab.sh", timeout_s=600, carry=[".carry/debs",
#                ".carry/autotools.tar.gz", ".carry/autotools.stamp", ".carry/ab-base.tar.gz"])
#            options: --rounds N (clip5 A/B rounds, default 2)  --no-tests  --no-kit  --no-sass
#            --rename OLD=NEW (SASS: a kernel renamed between the builds, demangled-name substrings)
#
# Output ($OUT, five files): ab_summary.txt (every step's result; RESULT lines of both builds per round
# and the mean ratio new/base of s_per_forward per mode), ab.txt (the whole log), ab_configure.log,
# ab_build.log and ab_logs.tgz (every step's log). MMH3_DEVICE_DRY=1: CPU stand-ins (tiny checkpoint,
# the device tests SKIP, no SASS).
set -u
. "$(dirname "$0")/lib.sh"
device_log ab.txt
device_summary ab ab_summary.txt
rounds=2 tests=1 kit=1 sass=1 renames=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --no-tests) tests=0; shift ;;
    --no-kit) kit=0; shift ;;
    --no-sass) sass=0; shift ;;
    --rename) renames+=("$2"); shift 2 ;;
    *) echo "ab.sh: unknown argument $1"; exit 2 ;;
  esac
done
[ -f .carry/ab-base.tar.gz ] || { note "FAIL: .carry/ab-base.tar.gz was not carried (tests/device/prepare_ab.sh)"; finish 1; }
status=0
BASE=/tmp/mmh3-ab/base
BB=$BASE/build-device
L=/tmp/mmh3-ab/logs # the steps' logs (the tool returns few files: they come back packed)
rm -rf /tmp/mmh3-ab && mkdir -p "$L" && tar -xzf .carry/ab-base.tar.gz -C /tmp/mmh3-ab
note "base $(cat "$BASE/.ab-base" 2>/dev/null | cut -c1-12) against this tree ($(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
TARGETS="mmh3 bench/mmh3-bench-dit tests/unit/test_cuda_runtime tests/unit/test_cuda_ops tests/unit/test_cuda_kernels
  tests/unit/test_backend_twins tests/unit/test_speed_attention tests/unit/test_speed_qgemm tests/unit/test_cuda_lora
  tests/unit/test_parallel_dit mmh3-gen-tiny"
cuda=yes arch="-gencode arch=compute_90a,code=sm_90a"
[ "$dry" = 1 ] && cuda=no tests=0 TARGETS="mmh3 bench/mmh3-bench-dit" # CPU stand-in: no CUDA test programs

step "build: this tree ($B) and the base ($BB), side by side"
device_deps
( mkdir -p "$BB" && cd "$BB" && ../configure --with-cuda=$cuda --without-server --without-ffmpeg CUDA_ARCH="$arch" \
    CFLAGS="-g -O2 -Wno-error" \
    >"$L/base_configure.log" 2>&1 && make -j"$(nproc)" bench/mmh3-bench-dit >"$L/base_build.log" 2>&1 ) &
base_build=$!
CUDA=$cuda CUDA_ARCH=$arch device_build ab $TARGETS || { wait "$base_build"; finish 1; }
wait "$base_build" || { tail -30 "$L/base_build.log"; note "FAIL: the base build (base_build.log)"; finish 1; }
note "builds done in $((SECONDS - t0)) s"

# the random DiT in the background while the tests run (both builds read the same file)
gen_shape=()
[ "$dry" = 1 ] && gen_shape=(--layers 2 --hidden 256 --heads 2 --ffn 512 --text-dim 256)
if [ ! -s "$DIT_CKPT" ]; then
  ( "$B/bench/mmh3-bench-dit" --write-random "$DIT_CKPT.part" "${gen_shape[@]}" --write-only >"$L/write.log" 2>&1 &&
      mv "$DIT_CKPT.part" "$DIT_CKPT" ) &
  writer=$!
fi

if [ "$tests" = 1 ]; then
  step "device tests (MMH3_REQUIRE_GPU=1 on the GPU)"
  req=1; [ "$dry" = 1 ] && req=0
  for t in test_cuda_runtime test_cuda_ops test_cuda_kernels test_backend_twins test_speed_attention test_speed_qgemm \
    test_cuda_lora test_parallel_dit; do
    MMH3_REQUIRE_GPU=$req MMH3_BUILD="$B" MMH3_TEST_DATA="$PWD/tests/data" timeout 200 "$B/tests/unit/$t" >"$L/$t.txt" 2>&1
    rc=$?
    note "$t: $(grep -c '^PASS' "$L/$t.txt") passed, $(grep -c '^FAIL' "$L/$t.txt") failed (exit $rc)$(grep -m1 -E '^SKIP' "$L/$t.txt" | sed 's/^/; /')"
    grep '^FAIL' "$L/$t.txt" | head -5
    [ "$rc" = 0 ] || status=1
  done
  grep -hE '^mmh3: ' "$L"/test_speed_attention.txt "$L"/test_speed_qgemm.txt 2>/dev/null | sort -u | head -6
fi

if [ "$kit" = 1 ]; then
  for k in default portable; do
    step "DiT kit on $DEV, MMH3_KERNELS=$k"
    MMH3_KERNELS=$k timeout 120 "$B/mmh3" conformance tests/data/dit --device "$DEV" >"$L/kit_$k.txt" 2>&1
    rc=$?
    note "DiT kit --device $DEV, MMH3_KERNELS=$k: $(grep -E 'passed|failed' "$L/kit_$k.txt" | tail -1) (exit $rc)"
    grep '^FAIL' "$L/kit_$k.txt" | head -5
    [ "$rc" = 0 ] || status=1
  done
fi

if [ "$sass" = 1 ] && [ "$dry" = 0 ]; then
  step "SASS of the kernels both builds have (cuobjdump -sass, per function)"
  CUOBJDUMP=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null | head -1)
  if [ -z "$CUOBJDUMP" ]; then
    note "SASS: no cuobjdump on this host"
  else
    for o in "$B"/kernels/*.o; do
      f=$(basename "$o")
      [ -f "$BB/kernels/$f" ] || { note "SASS $f: not in the base"; continue; }
      "$CUOBJDUMP" -sass "$BB/kernels/$f" >/tmp/mmh3-ab/sass_base.txt 2>&1
      "$CUOBJDUMP" -sass "$o" >/tmp/mmh3-ab/sass_new.txt 2>&1
      python3 tests/device/sass_diff.py /tmp/mmh3-ab/sass_base.txt /tmp/mmh3-ab/sass_new.txt ${renames[@]+"${renames[@]}"} \
        >"$L/sass_$f.txt" 2>&1
      note "SASS $f: $(tail -1 "$L/sass_$f.txt")"
      grep -E '^(DIFFERS|gone|new) ' "$L/sass_$f.txt" | head -8
    done
  fi
fi

step "clip5 A/B: ${rounds} rounds of base then new, exact + fast"
if [ -n "${writer:-}" ]; then wait "$writer" || { note "FAIL: writing $DIT_CKPT (write.log)"; finish 1; }; fi
W=1344 H=768 F=124 TEXT=300
[ "$dry" = 1 ] && W=64 H=64 F=22 TEXT=16
for ((r = 1; r <= rounds; r++)); do
  for side in base new; do
    bin=$B/bench/mmh3-bench-dit; [ "$side" = base ] && bin=$BB/bench/mmh3-bench-dit
    timeout 150 "$bin" --checkpoint "$DIT_CKPT" --device "$DEV" --width $W --height $H --frames $F --text-rows $TEXT \
      --warmup 1 --iters 1 --modes exact,fast >"$L/clip5_${side}_$r.txt" 2>&1 || { note "FAIL clip5 $side round $r"; status=1; }
    while read -r line; do note "round $r $side: $line"; done < <(grep -E '^RESULT' "$L/clip5_${side}_$r.txt" | cut -c1-200)
  done
done
for mode in exact fast; do
  ratio=$(for side in base new; do
      grep -h "^RESULT mmh3 mode=$mode " "$L"/clip5_${side}_*.txt 2>/dev/null | sed -n 's/.*s_per_forward=\([0-9.]*\).*/\1/p' |
        awk -v s=$side '{t += $1; n++} END {if (n) printf "%s %.4f %d\n", s, t / n, n}'
    done | awk '{m[$1] = $2; n[$1] = $3} END {if (m["base"] > 0 && m["new"] > 0)
      printf "base %.4f s, new %.4f s (means of %d / %d): new/base %.4f", m["base"], m["new"], n["base"], n["new"], m["new"] / m["base"]}')
  note "clip5 $mode: ${ratio:-no figures}"
done
tar -czf "$OUT/ab_logs.tgz" -C "$L" . 2>/dev/null
finish $status
