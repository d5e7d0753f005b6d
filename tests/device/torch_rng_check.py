#!/usr/bin/env python3
"""mmh3's PyTorch CPU generator and sigma grids against torch on this host, bit for bit, beyond what the
conformance kit pins: randn sizes below 16 (the scalar double path), sizes that are not a multiple of 16 (the
tail block recompute), many seeds, torch.linspace and the sampler grid at step counts where the SIMD width of
the torch build matters (N >= 16).

    python3 tests/device/torch_rng_check.py [--cc cc]
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))


def bits(t):
    return [struct.unpack("<I", struct.pack("<f", float(x)))[0] for x in t.tolist()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    a = ap.parse_args()
    exe = os.path.join(tempfile.mkdtemp(), "torch_rng_check")
    src = [os.path.join(TOP, p) for p in ("tests/device/torch_rng_check.c", "src/sampler/torch_rng.c",
                                          "src/sampler/sigmas.c", "src/core/error.c")]
    subprocess.run([a.cc, "-std=c17", "-O2", "-I" + os.path.join(TOP, "src"), *src, "-lm", "-o", exe], check=True)

    cases, want = [], []
    for seed in (0, 1, 42, 1234, 2**32 + 5, 987654321):
        for n in (1, 2, 5, 15, 16, 17, 31, 33, 100, 1000, 4099, 24 * 7 * 48 * 84):
            g = torch.Generator().manual_seed(seed)
            cases.append(f"randn {seed} {n}")
            want.append(bits(torch.randn(n, generator=g, dtype=torch.float32)))
    cap = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
    lanes = {"AVX2": 8, "AVX512": 16}.get(str(cap).upper(), 1)
    for n in list(range(2, 40)) + [50, 64, 100]:
        cases.append(f"linspace {n} {lanes}")
        want.append(bits(torch.linspace(1.0, 0.0, n, dtype=torch.float32)))
        for shift in (12.0, 3.0):
            b = torch.linspace(1.0, 0.0, n, dtype=torch.float32)
            s = torch.unique_consecutive(shift * b / (1 + (shift - 1) * b))
            cases.append(f"sigmas {n} {shift}")
            want.append(bits(s))
    out = subprocess.run([exe], input="\n".join(cases) + "\n", capture_output=True, text=True, check=True).stdout
    got = [[int(x, 16) for x in line.split()] for line in out.strip().split("\n")]
    bad = 0
    for case, w, g in zip(cases, want, got):
        diff = sum(1 for x, y in zip(w, g) if x != y) + abs(len(w) - len(g))
        if diff:
            bad += 1
            print(f"FAIL {case}: {diff} of {len(w)} values differ")
    print(f"torch {torch.__version__}, CPU capability {cap} (linspace lanes {lanes}); "
          f"sampler grids built with MM_SIGMA_LINSPACE_LANES as compiled")
    print(f"{'PASS' if bad == 0 else 'FAIL'} torch_rng_check: {len(cases) - bad} of {len(cases)} cases bit for bit")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
