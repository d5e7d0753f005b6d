"""The PyTorch side of tests/device/bench_kernels.c: the same ops at the same
sizes through PyTorch on the same GPU, printed as

    TORCH <name> <median ms> <TFLOP/s or 0> <GB/s or 0>

with names matching bench_kernels' BENCH lines, plus the measured bf16 GEMM
peak (8192^3) that the benchmark's figures are compared against.

    python3 bench_torch.py [--rows S] [--reps N] [--only SUBSTRING]
"""
import argparse
import sys

import torch
import torch.nn.functional as F


def timed(fn, reps):
    for _ in range(1):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2], times[0], times[-1]


ONLY = None


def report(name, fn, reps, flops=0.0, nbytes=0.0):
    if ONLY and ONLY not in name:
        return
    try:
        ms, lo, hi = timed(fn, reps)
    except Exception as e:  # an op PyTorch lacks here must not hide the others
        print(f"TORCH {name} FAILED: {type(e).__name__}: {e}", flush=True)
        return
    tf = flops / (ms * 1e9) if flops else 0.0
    gb = nbytes / (ms * 1e6) if nbytes else 0.0
    print(f"TORCH {name:<28} {ms:9.3f} ms {tf:8.1f} TFLOP/s {gb:7.0f} GB/s   (min {lo:.3f} max {hi:.3f})", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=38010)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default=None, help="only the measurements whose name contains this")
    args = ap.parse_args()
    global ONLY
    ONLY = args.only
    S, reps = args.rows, args.reps
    dev = torch.device("cuda")
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}, S={S}", flush=True)
    H, NH, D, FF = 5376, 56, 128, 14336
    QKV = 3 * NH * D

    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    report("peak_bf16_gemm_8192", lambda: a @ b, reps, 2.0 * n ** 3)
    del a, b

    lin = [("qkv", QKV, H), ("out", H, NH * D), ("fc1", 2 * FF, H), ("fc2", H, FF)]
    for name, N, K in lin:
        xq = torch.randint(-127, 128, (S, K), device=dev, dtype=torch.int8)
        wq = torch.randint(-127, 128, (N, K), device=dev, dtype=torch.int8)
        sx = torch.rand(S, device=dev) * 0.01
        sw = torch.rand(N, device=dev) * 0.001
        flops = 2.0 * S * N * K
        wt = wq.t()  # column-major [K, N], what _int_mm wants
        # the reference's W8A8 path: int32 GEMM, then (acc * (sx*sw)) -> bf16
        report(f"i8_{name}", lambda: (torch._int_mm(xq, wt).float() * (sx[:, None] * sw[None, :])).to(torch.bfloat16),
               reps, flops)
        report(f"i8raw4096_{name}", lambda: torch._int_mm(xq[:4096], wt), reps, 2.0 * 4096 * N * K)
        del xq, wq, wt
        x16 = torch.randn(S, K, device=dev, dtype=torch.bfloat16)
        w16 = torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02
        report(f"bf16_{name}", lambda: F.linear(x16, w16), reps, flops)
        del x16, w16
        torch.cuda.empty_cache()

    qkv = torch.randn(S, QKV, device=dev, dtype=torch.bfloat16) * 2
    q, k, v = (t.view(S, NH, D).transpose(0, 1).unsqueeze(0) for t in qkv.split(NH * D, dim=1))
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    report("attn_s38k_h56_d128", lambda: F.scaled_dot_product_attention(q, k, v), reps, 4.0 * S * S * D * NH)
    report("attn_causal_h56_d128", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps,
           2.0 * S * S * D * NH)
    del q, k, v
    torch.cuda.empty_cache()

    # glue, eager PyTorch (what the reference forward runs)
    x = torch.randn(S, H, device=dev, dtype=torch.bfloat16) * 3
    w = torch.randn(H, device=dev, dtype=torch.bfloat16)
    shift = torch.randn(H, device=dev, dtype=torch.bfloat16) * 0.5
    scale = torch.randn(H, device=dev, dtype=torch.bfloat16) * 0.5
    norm = torch.nn.RMSNorm(H, eps=1e-5, device=dev, dtype=torch.bfloat16)
    report("rmsnorm_mod_5376", lambda: norm(x) * (1 + scale) + shift, reps, 0, S * H * 4.0)
    gate = torch.randn(H, device=dev, dtype=torch.bfloat16)
    y = torch.randn(S, H, device=dev, dtype=torch.bfloat16)
    report("gated_add_5376", lambda: x.add_(gate * y), reps, 0, S * H * 6.0)
    # the Ulysses pack / unpack at 2 GPUs (bench_kernels: ulysses_*)
    n, hl = S // 2, NH // 2
    q2 = qkv[:n, : NH * D]
    report("ulysses_pack_q_n19005", lambda: q2.view(n, 2, hl, D).transpose(0, 1).contiguous(), reps, 0,
           2.0 * n * NH * D * 2)
    grouped = torch.randn(2, n, hl, D, device=dev, dtype=torch.bfloat16)
    out = torch.empty(n, NH * D, device=dev, dtype=torch.bfloat16)
    report("ulysses_unpack_n19005", lambda: out.view(n, 2, hl, D).copy_(grouped.transpose(0, 1)), reps, 0,
           2.0 * n * NH * D * 2)
    report("ulysses_memcpy_anchor", lambda: out.view(-1).copy_(grouped.view(-1)),
           reps, 0, 2.0 * n * NH * D * 2)
    print("# torch done", flush=True)


if __name__ == "__main__":
    sys.exit(main())
