#!/usr/bin/env python3
"""A plain PyTorch forward of the MiniMax-H3 DiT, written from shared/spec/dit.md (no upstream code), to time
the reference arithmetic on the same GPU as mmh3's forward.

It builds random weights directly on the GPU with the release's shapes (or any other), and runs one forward
the way the reference does: f32 patch projections, bf16 residual stream, per-(timestep, modality) AdaLN rows
gathered per row, RMSNorm, fused QKV, per-head q/k RMSNorm, rotate-half RoPE on 96 of 128 channels,
F.scaled_dot_product_attention (FlashAttention in bf16), gated residuals, SwiGLU, final layer, f32 heads.
Linears are either W8A8 ConvRot (default; the Comfy file's form: bf16 Hadamard rotation GEMM, per-row int8
activations, torch._int_mm, f32 epilogue — ai-toolkit's convrot8 arithmetic) or dense bf16 (the diffusers
form of the unquantized model).

    python3 bench/reference/dit_ref.py --width 1344 --height 768 --frames 124 --text-rows 300 --linear int8

The last line is machine-readable:
    RESULT torch-int8 s_per_forward=5.21 tflops=680.2 pflop=3.54 rows=38010 peak_gib=31.2 weights_gib=19.3
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F

BF16 = torch.bfloat16


def hadamard256(device):
    h4 = torch.tensor([[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]], dtype=torch.float64)
    h = h4
    for _ in range(3):
        h = torch.kron(h, h4)
    return (h / 16.0).to(device=device, dtype=BF16)


class Linear:
    """y = x·Wᵀ in one of the two forms; random weights of unit output variance."""

    def __init__(self, n, k, mode, device, h256):
        self.mode, self.n, self.k, self.h256 = mode, n, k, h256
        if mode == "int8":
            self.q_w = torch.randint(-127, 128, (n, k), dtype=torch.int8, device=device)
            self.s_w = torch.full((n,), math.sqrt(3.0 / k) / 127.0, dtype=torch.float32, device=device)
        else:
            self.w = (torch.rand(n, k, device=device, dtype=torch.float32) * 2 - 1).mul_(math.sqrt(3.0 / k)).to(BF16)

    def bytes(self):
        return self.n * self.k * (1 if self.mode == "int8" else 2)

    def __call__(self, x):
        if self.mode != "int8":
            return x @ self.w.t()
        r = x.shape[0]
        x_rot = (x.view(r, self.k // 256, 256) @ self.h256).view(r, self.k)  # bf16 GEMM, bf16 result
        xf = x_rot.float()
        s_x = xf.abs().amax(dim=1).div_(127.0).clamp_(min=1e-30)
        q_x = torch.round(xf / s_x[:, None]).clamp_(-127, 127).to(torch.int8)
        acc = torch._int_mm(q_x, self.q_w.t())
        return (acc.float() * (s_x[:, None] * self.s_w[None, :])).to(BF16)


def rms(x, w, eps=1e-5):
    return F.rms_norm(x, (x.shape[-1],), w, eps)


class Model:
    def __init__(self, a, device):
        H, NH, D, Fd = a.hidden, a.heads, a.head_dim, a.ffn
        A = NH * D
        self.a = a
        h256 = hadamard256(device)
        ones = lambda n: torch.ones(n, dtype=BF16, device=device)
        self.video_in = (torch.randn(H, 96, device=device) / math.sqrt(96), torch.zeros(H, device=device))
        self.audio_in = (torch.randn(H, 32, device=device) / math.sqrt(32), torch.zeros(H, device=device))
        self.cond = (torch.randn(H, a.text_dim, device=device, dtype=BF16) / math.sqrt(a.text_dim))
        self.table = torch.rand(1025, 8, device=device) * 2 - 1
        self.inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 32, 2, dtype=torch.float32, device=device) / 32))

        def block(mode):
            return {
                "n1": ones(H), "n2": ones(H), "qn": ones(D), "kn": ones(D),
                "qkv": Linear(3 * A, H, mode, device, h256), "out": Linear(H, A, mode, device, h256),
                "fc1": Linear(2 * Fd, H, mode, device, h256), "fc2": Linear(H, Fd, mode, device, h256),
            }

        self.refiner = [block("bf16") for _ in range(2)]
        self.blocks = []
        for _ in range(a.layers):
            b = block(a.linear)
            b["ada_w"] = (torch.rand(18 * H, 8, device=device) * 0.04 - 0.02).half()
            b["ada_b"] = (torch.rand(18 * H, device=device) * 0.1 - 0.05).half()
            self.blocks.append(b)
        self.final_norm = ones(H)
        self.final_ada = ((torch.rand(2 * H, 8, device=device) * 0.04 - 0.02).half(),
                          (torch.rand(2 * H, device=device) * 0.1 - 0.05).half())
        self.video_out = (torch.randn(96, H, device=device) / math.sqrt(H), torch.zeros(96, device=device))
        self.audio_out = (torch.randn(32, H, device=device) / math.sqrt(H), torch.zeros(32, device=device))
        self.weight_bytes = sum(l.bytes() for b in self.blocks + self.refiner for l in
                                (b["qkv"], b["out"], b["fc1"], b["fc2"]))

    def attn(self, b, h, cos=None, sin=None):
        a = self.a
        s = h.shape[0]
        A = a.heads * a.head_dim
        qkv = b["qkv"](h)
        q, k, v = qkv.split(A, dim=-1)
        q = rms(q.view(s, a.heads, a.head_dim), b["qn"])
        k = rms(k.view(s, a.heads, a.head_dim), b["kn"])
        v = v.view(s, a.heads, a.head_dim)
        if cos is not None:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None])
        return b["out"](o[0].transpose(0, 1).reshape(s, A))

    def mlp(self, b, h):
        g, u = b["fc1"](h).chunk(2, dim=-1)
        return b["fc2"](F.silu(g) * u)

    def refine(self, text):
        x = text.to(BF16) @ self.cond.t()
        for b in self.refiner:
            x = x + self.attn(b, rms(x, b["n1"]))
            x = x + self.mlp(b, rms(x, b["n2"]))
        return rms(x, self.final_norm)

    def forward(self, video, audio, text_emb, layout):
        a = self.a
        tags, ti, cos, sin, vid_idx, aud_idx, L, temb = layout
        S = tags.shape[0]
        x = torch.empty(S, a.hidden, dtype=BF16, device=video.device)
        x[:L] = text_emb
        x[vid_idx] = F.linear(video, *self.video_in).to(BF16)
        x[aud_idx] = F.linear(audio, *self.audio_in).to(BF16)
        row = ti * 3 + tags
        for b in self.blocks:
            mod = F.linear(temb, b["ada_w"].float(), b["ada_b"].float()).view(-1, 6, a.hidden)
            sm, cm, gm, sf, cf, gf = (mod[:, c][row].to(BF16) for c in range(6))
            h = rms(x, b["n1"]) * (1 + cm) + sm
            x = x + gm * self.attn(b, h, cos, sin)
            h = rms(x, b["n2"]) * (1 + cf) + sf
            x = x + gf * self.mlp(b, h)
        fm = F.linear(temb, self.final_ada[0].float(), self.final_ada[1].float()).view(-1, 2, a.hidden)
        h = (rms(x, self.final_norm) * (1 + fm[:, 1][ti].to(BF16)) + fm[:, 0][ti].to(BF16)).float()
        return F.linear(h[vid_idx], *self.video_out), F.linear(h[aud_idx], *self.audio_out)


def rope(x, cos, sin):
    rot = cos.shape[-1]
    xr, xp = x[..., :rot], x[..., rot:]
    c, s = cos[:, None, :], sin[:, None, :]
    x1, x2 = xr.chunk(2, dim=-1)
    return torch.cat([xr * c + torch.cat([-x2, x1], dim=-1) * s, xp], dim=-1)


def build_layout(a, model, device):
    """t2va packing (dit.md §5): [text | audio | video] with the reference's positions."""
    T = (a.frames - 5) // 17 * 5 + 2
    hl, wl = a.height // 16, a.width // 16
    A = int(round(a.frames / 24 * 40))
    L = a.text_rows
    rows_per_frame = (hl // 2) * (wl // 2)
    S = L + 2 * A + T * rows_per_frame
    pos = torch.zeros(S, 3, dtype=torch.float64)
    pos[:L, 0] = torch.arange(L, dtype=torch.float64)
    area = math.sqrt(hl * wl)

    def grid(dim):
        ratio = dim / area
        left = (1 - ratio) / 2
        n = dim // 2
        step = ((left + ratio) - left) / n
        return torch.tensor([(i * step + left) * 32 for i in range(n)], dtype=torch.float64)

    gh, gw = grid(hl), grid(wl)
    at = L + torch.arange(A, dtype=torch.float64)
    pos[L:L + 2 * A, 0] = at.repeat(2)
    pos[L:L + A, 2], pos[L + A:L + 2 * A, 2] = gw[0], gw[-1]
    spans = torch.tensor([5 / 3 * (1 if k % 5 == 0 else 4) for k in range(T)], dtype=torch.float64)
    tt = L + torch.cat([torch.zeros(1, dtype=torch.float64), spans[:-1].cumsum(0)])
    vp = torch.empty(T, gh.numel(), gw.numel(), 3, dtype=torch.float64)
    vp[..., 0] = tt[:, None, None]
    vp[..., 1] = gh[None, :, None]
    vp[..., 2] = gw[None, None, :]
    pos[L + 2 * A:] = vp.reshape(-1, 3)
    tags = torch.ones(S, dtype=torch.long)
    tags[L:L + 2 * A] = 2
    tags[L + 2 * A:] = 0
    row_t = torch.full((S,), 0.3, dtype=torch.float32)
    row_t[L:L + 2 * A] = 0.5
    u, ti = torch.unique(row_t, sorted=True, return_inverse=True)
    pos = pos.to(device)
    ang = pos.float()[:, :, None] * model.inv_freq[None, None, :]
    ang = ang.reshape(S, 48)
    ang = torch.cat([ang, ang], dim=-1)
    cos, sin = ang.cos().to(BF16), ang.sin().to(BF16)
    p = u.to(device).clamp(0, 1) * 1024
    lo = p.floor().long()
    hi = (lo + 1).clamp(max=1024)
    w = (p - lo.float())[:, None]
    temb = model.table[lo] * (1 - w) + model.table[hi] * w
    vid_idx = torch.arange(L + 2 * A, S, device=device)
    aud_idx = torch.arange(L, L + 2 * A, device=device)
    return (tags.to(device), ti.to(device), cos, sin, vid_idx, aud_idx, L, temb), S, T, hl, wl, A


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=1344)
    ap.add_argument("--height", type=int, default=768)
    ap.add_argument("--frames", type=int, default=124)
    ap.add_argument("--text-rows", type=int, default=300)
    ap.add_argument("--layers", type=int, default=50)
    ap.add_argument("--hidden", type=int, default=5376)
    ap.add_argument("--heads", type=int, default=56)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--ffn", type=int, default=14336)
    ap.add_argument("--text-dim", type=int, default=5120)
    ap.add_argument("--linear", choices=["int8", "bf16"], default="int8")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=2)
    a = ap.parse_args()
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    with torch.inference_mode():
        model = Model(a, device)
        layout, S, T, hl, wl, A = build_layout(a, model, device)
        video = torch.randn(T * (hl // 2) * (wl // 2), 96, device=device)
        audio = torch.randn(2 * A, 32, device=device)
        text = torch.randn(a.text_rows, a.text_dim, device=device)
        torch.cuda.synchronize()
        weights = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.time()
        text_emb = model.refine(text)
        torch.cuda.synchronize()
        refine_s = time.time() - t0
        times = []
        for i in range(a.warmup + a.iters):
            torch.cuda.synchronize()
            t0 = time.time()
            v, au = model.forward(video, audio, text_emb, layout)
            torch.cuda.synchronize()
            dt = time.time() - t0
            print(f"forward {i + 1}{' (warm-up)' if i < a.warmup else ''}: {dt:.3f} s", flush=True)
            if i >= a.warmup:
                times.append(dt)
        peak = torch.cuda.max_memory_allocated()
        bad = int((~torch.isfinite(v)).sum())
    Hd, Ad, Fd = a.hidden, a.heads * a.head_dim, a.ffn
    per_row = 2 * Hd * 3 * Ad + 2 * Ad * Hd + 2 * Hd * 2 * Fd + 2 * Fd * Hd
    flop = a.layers * (per_row * S + 4.0 * S * S * Ad) + 2.0 * Hd * (v.shape[0] * 96 * 2 + au.shape[0] * 32 * 2)
    sec = min(times)
    gib = 1024 ** 3
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()} | S = {S} | {a.layers} blocks, hidden {a.hidden}, "
          f"linears {a.linear}")
    print(f"refiner {refine_s:.3f} s | forward {sec:.3f} s best of {len(times)} | {flop / sec * 1e-12:.1f} TFLOP/s "
          f"({flop * 1e-15:.3f} PFLOP) | peak {peak / gib:.2f} GiB")
    print(f"RESULT torch-{a.linear} s_per_forward={sec:.4f} tflops={flop / sec * 1e-12:.1f} pflop={flop * 1e-15:.4f} "
          f"rows={S} peak_gib={peak / gib:.2f} weights_gib={weights / gib:.2f} nonfinite={bad}")


if __name__ == "__main__":
    main()
