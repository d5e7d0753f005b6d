#!/usr/bin/env bash
# Several GPUs on the GPU host (issue 13). Works on any number of GPUs:
#
#   one GPU (nvidia-h200):  world size 1 — NCCL loads from PyTorch's venv and
#       its send/recv runs (each rank's messages to itself), the host world and
#       a host-staged copy run on GPU buffers, the sequence-parallel DiT over 1
#       GPU equals the plain CUDA forward on the kit and at full width/length
#       (1344x768x124, L=300; fewer blocks with --layers to save time);
#   N GPUs (nvidia-h200-x2/x4/x8): the same, plus NCCL over every GPU, the
#       peer-copy integrity probe of every ordered pair (mmh3 check), and
#       s/forward at 1344x768x124 for 1, 2, 4, 8 GPUs with speed-up, scaling
#       efficiency and equality with the one-GPU output.
#
#   here:    bash tests/device/prepare.sh          (fills .carry/: debs, configure)
#   CPU stand-in (here): MMH3_DEVICE_DRY=1 — unit tests without MMH3_REQUIRE_GPU, the bench on
#            CPU ranks with a 2-block hidden-256 random DiT at 64x64 (--gpus 1,2)
#   device:  bash tests/device/multigpu.sh [--part [copy,]unit,check,bench[,placement]] [--layers 50] [--gpus 1,2,4,8]
#            with carry [".carry"]; NCCL_NVLS_ENABLE=0 is set here and again by mmh3 itself.
#
# placement (optional, needs `bash tests/device/prepare_engine.sh` here too): the real CLI at
# 1344x768x124 with the default placement (2+ GPUs: DiT cuda:0, text encoder + VAEs cuda:1), then
# --gpus N, final latents compared (≈ engine.sh build,gen + one short render per group size).
# Expected durations on H200s (build-device/ reused when present): build ≈ 15-90 s, unit ≈ 30 s,
# check ≈ 10 s, bench: writing the random checkpoint ≈ 20 s per 10 blocks on 16 cores (skipped
# when $MMH3_DIT_RANDOM exists), then per group size one load (≈ 5-20 s) + 3 forwards.
# copy (optional): test_cuda_ops on GPU 0 (≈ 30 s) and the Ulysses pack/unpack copy benchmark (≈ 20 s).
# Every step runs under `timeout`; logs and results go straight to $OUT; progress lines on stdout.
set -u
. "$(dirname "$0")/lib.sh"
device_log multigpu.log
device_summary multigpu summary_multigpu.txt

# NVLink multicast must stay off on these shared hosts (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

part=unit,check,bench
layers=50
gpus=1,2,4,8
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --gpus) gpus=$2; shift 2 ;;
    *) echo "multigpu.sh: unknown argument $1"; exit 2 ;;
  esac
done
want() { [[ ",$part," == *",$1,"* ]]; }

step "host"
nvidia-smi -L 2>&1 | tee "$OUT/gpus.txt"
ngpu=$(grep -c '^GPU ' "$OUT/gpus.txt" || true)
nvidia-smi topo -m >"$OUT/topology.txt" 2>&1 || true
note "GPUs: $ngpu"
# NCCL: mmh3 searches PyTorch's venv by itself; name the file for the log.
nccl=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -1)
[ -n "$nccl" ] && [ -z "${MMH3_NCCL_LIB:-}" ] && export MMH3_NCCL_LIB=$nccl
note "NCCL: ${MMH3_NCCL_LIB:-searched by mmh3 (none named)}"

step "build (build-device/)"
copy_targets=()
want copy && copy_targets=(tests/unit/test_cuda_ops tests/device/bench_kernels)
make_limit=600 device_build multigpu mmh3 mmh3-gen-tiny bench/mmh3-bench-dit bench/mmh3-bench-sp \
  tests/unit/test_parallel_partition tests/unit/test_parallel_comm tests/unit/test_parallel_dit \
  "${copy_targets[@]}" || finish 1
note "build ok"
status=0
export MMH3_BUILD=$B

if want unit; then
  for t in test_parallel_partition test_parallel_comm test_parallel_dit; do
    step "unit: $t (MMH3_REQUIRE_GPU=1)"
    req=(MMH3_REQUIRE_GPU=1); [ "$dry" = 1 ] && req=() # (read by presence)
    env "${req[@]}" timeout 180 "$B/tests/unit/$t" 2>&1 | tee "$OUT/unit_$t.txt"
    rc=${PIPESTATUS[0]}
    fails=$(grep -c '^FAIL' "$OUT/unit_$t.txt" || true)
    passes=$(grep -c '^PASS' "$OUT/unit_$t.txt" || true)
    skips=$(grep -c '^SKIP' "$OUT/unit_$t.txt" || true)
    note "unit $t: $passes passed, $fails failed, $skips skipped (exit $rc)"
    [ "$rc" = 0 ] || status=1
  done
fi

if want copy; then
  # The raw-row copy kernel behind the Ulysses pack/unpack (kernels/elementwise.cu k_copy_rows):
  # every CUDA op against its CPU twin (test_strided_copies: byte for byte), then the pack at
  # S/2 = 19,005 rows against the element-wise walk it replaced, a memcpy anchor and PyTorch.
  step "copy: test_cuda_ops (MMH3_REQUIRE_GPU=1)"
  req=(MMH3_REQUIRE_GPU=1); [ "$dry" = 1 ] && req=()
  env "${req[@]}" timeout 240 "$B/tests/unit/test_cuda_ops" 2>&1 | tee "$OUT/unit_test_cuda_ops.txt"
  rc=${PIPESTATUS[0]}
  note "unit test_cuda_ops: $(grep -c '^PASS' "$OUT/unit_test_cuda_ops.txt") passed, $(grep -c '^FAIL' "$OUT/unit_test_cuda_ops.txt") failed (exit $rc)"
  [ "$rc" = 0 ] || status=1
  if [ "$dry" = 1 ]; then
    note "copy bench: skipped (CPU stand-in)"
  else
    step "copy: bench_kernels --only ulysses (GB/s = read + write)"
    timeout 120 "$B/tests/device/bench_kernels" --only ulysses --reps 5 2>&1 | tee "$OUT/bench_copy.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    device_python torch
    [ -n "$PY" ] && timeout 180 "$PY" tests/device/bench_torch.py --only ulysses --reps 5 2>&1 | tee -a "$OUT/bench_copy.txt"
    while read -r line; do note "$line"; done < <(grep -E '^(BENCH|TORCH) ulysses' "$OUT/bench_copy.txt")
  fi
fi

if want check; then
  step "mmh3 check: GPUs, placement, peer-copy integrity probe"
  timeout 120 "$B/mmh3" check --models-path /nonexistent 2>&1 | tee "$OUT/check.txt"
  note "check: $(grep -i 'peer' "$OUT/check.txt" | head -1 | sed 's/^ *//')"
  note "check: $(grep -i 'placement\|dit=' "$OUT/check.txt" | head -1 | sed 's/^ *//')"
fi

if want bench; then
  CKPT=/tmp/mmh3-dit-random-l$layers.safetensors
  [ "$layers" = 50 ] && CKPT=$DIT_CKPT
  shape=(--layers "$layers"); geom=(--width 1344 --height 768 --frames 124 --text-rows 300)
  [ "$dry" = 1 ] && CKPT=/tmp/mmh3-dry/dit-sp.safetensors shape=(--layers 2 --hidden 256 --heads 2 --ffn 512 --text-dim 256) \
    geom=(--width 64 --height 64 --frames 22 --text-rows 16 --device cpu) gpus=1,2
  device_wait_file "$CKPT" 300
  if [ ! -f "$CKPT" ]; then
    step "random DiT in the real layout (${shape[*]}) → $CKPT"
    timeout 420 "$B/bench/mmh3-bench-dit" --write-random "$CKPT.part" "${shape[@]}" --write-only 2>&1 | tail -3
    mv "$CKPT.part" "$CKPT" 2>/dev/null
    [ -f "$CKPT" ] || { note "FAIL: writing the random checkpoint"; finish 1; }
  fi
  step "sequence-parallel forward at 1344x768x124 (t2va, L=300), GPUs $gpus (of $ngpu)"
  timeout 540 "$B/bench/mmh3-bench-sp" --checkpoint "$CKPT" --gpus "$gpus" "${geom[@]}" \
      --warmup 1 --iters 2 2>&1 | tee "$OUT/bench_sp.txt"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || status=1
  while read -r line; do note "$line"; done < <(grep -E '^(RESULT|PASS|FAIL|SKIP)' "$OUT/bench_sp.txt")
  awk '$1 == "RESULT" && $2 == "sp" { printf "| %s | %s | %s | %s | %s |\n", $3, $4, $5, $6, $7 }' \
      "$OUT/bench_sp.txt" | sed 's/[a-z_0-9]*=//g' >"$OUT/bench_sp_table.md"
  note "table (gpus | s/forward | speed-up | efficiency | rel_l2 video) in bench_sp_table.md ($layers blocks)"
fi
if want placement; then
  # The whole product through the real CLI (tests/device/engine.sh builds build-device/ with a static
  # FFmpeg and writes the full-size models): default placement (2+ GPUs: DiT on cuda:0, text encoder
  # and VAEs on cuda:1, hand-offs through mm_transfer), then --gpus N, final latents compared.
  step "placement: engine build + full-size models (tests/device/engine.sh --part build,gen)"
  timeout 900 bash tests/device/engine.sh --part build,gen >"$OUT/placement_engine_setup.log" 2>&1 ||
    { tail -20 "$OUT/placement_engine_setup.log"; note "FAIL: engine build/models (placement_engine_setup.log)"; finish 1; }
  EB=$B; M=${MODELS:-/tmp/mmh3-engine-models}
  device_python "torch, safetensors"
  steps=${PLACEMENT_STEPS:-3}
  for g in 1 $(echo "$gpus" | tr ',' ' '); do
    [ "$g" -le "$ngpu" ] || continue
    [ -f "$OUT/placement_latents_g$g.safetensors" ] && continue
    step "placement: mmh3 generate 1344x768x124, $steps steps, --gpus $g"
    timeout --kill-after=10 560 "$EB/mmh3" generate --models-path "$M" --plain -v --gpus "$g" \
      -p "A red fox trots through fresh snow at dawn, breath steaming, soft golden light." --size 1344x768 \
      --frames 124 --steps "$steps" --seed 1 --dump-latents "$OUT/placement_latents_g$g.safetensors" \
      -o "$OUT/placement_g$g.mp4" >"$OUT/placement_g$g.txt" 2>&1
    rc=$?
    note "generate --gpus $g: exit $rc; $(grep -m1 'placement:' "$OUT/placement_g$g.txt" | sed 's/^ *//')"
    note "  $(grep -m1 'denoise (DiT' "$OUT/placement_g$g.txt" | sed 's/^ *//')"
    [ "$rc" = 0 ] || status=1
    if [ "$g" != 1 ] && [ -n "$PY" ] && [ -f "$OUT/placement_latents_g1.safetensors" ]; then
      "$PY" - "$OUT/placement_latents_g1.safetensors" "$OUT/placement_latents_g$g.safetensors" <<'PYEOF' | tee -a "$OUT/placement_compare.txt"
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
for k in sorted(set(a) & set(b)):
    x, y = a[k].double(), b[k].double()
    print(f"{sys.argv[2].rsplit('_', 1)[-1]} {k}: rel_l2 {float((x - y).norm() / y.norm().clamp_min(1e-30)):.3g} vs --gpus 1")
PYEOF
      while read -r line; do note "  $line"; done < <(grep "g$g.safetensors" "$OUT/placement_compare.txt")
    fi
  done
  # Cross-GPU hand-offs are staged through the host by default; --peer-copy opts into direct copies
  # where the probe passes. The same render both ways must give the same latents, bit for bit.
  if [ "$ngpu" -ge 2 ] && [ -f "$OUT/placement_latents_g1.safetensors" ]; then
    step "placement: --peer-copy (direct copies where the probe passed) against the staged default"
    timeout --kill-after=10 560 "$EB/mmh3" generate --models-path "$M" --plain -v --gpus 1 --peer-copy \
      -p "A red fox trots through fresh snow at dawn, breath steaming, soft golden light." --size 1344x768 \
      --frames 124 --steps "$steps" --seed 1 --dump-latents "$OUT/placement_latents_peer.safetensors" \
      -o "$OUT/placement_peer.mp4" >"$OUT/placement_peer.txt" 2>&1 || status=1
    if cmp -s "$OUT/placement_latents_g1.safetensors" "$OUT/placement_latents_peer.safetensors"; then
      note "PASS --peer-copy: latents bit-identical to the staged default"
    else
      note "FAIL --peer-copy: latents differ from the staged default (placement_peer.txt)"; status=1
    fi
  fi
fi
finish $status
