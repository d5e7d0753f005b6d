#!/usr/bin/env python3
"""AdaLN adapters and a PDD head bank applied to the public DiT kit's model in plain PyTorch, for mmh3's
test_dit_adaln to compare against on the device (docs/LORA.md, "AdaLN adapters on the pruned base").

The forward follows shared/spec/dit.md and the kit README's "reference arithmetic" (bf16 activations, f32
islands, W8A8 ConvRot with exact integer products); the adapters follow fewstep.md §2.5 / §5.2:

  mod(t) = W·temb(t) + b + s·B·(A·e(t))      per block and for the final layer, f32, before the bf16 rounding
  e(t)   = temb(t), the interpolated adaln_t_table row        (A [r, 8]: an adapter trained on the pruned base)
         = lerp of the SiLU(temb) grid, Larry's node's rule   (A [r, 32]: one trained on a full model)
  heads  = Σ_l w_l · bank_l                                   (PDD: w = pdd8's interval weights of one step)

It first checks its own base forward against the kit's reference outputs (so a mistake here cannot pass as a
mismatch in mmh3), then writes the adapters, the grid and the reference velocities:

    python3 tests/device/adaln_adapter_ref.py --kit tests/data/dit --out OUT
    MMH3_ADALN_REF=OUT MMH3_ADALN_DEVICE=cuda build-device/tests/unit/test_dit_adaln

OUT: adapter_adaln.safetensors, adapter_pdd.safetensors, h3_silu_temb_grid.safetensors, reference.safetensors,
adaln_ref.json (strengths, the PDD step, the self-check). Runs on the CPU in seconds (--device cuda works too).
"""

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

BF16 = torch.bfloat16
DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": BF16, "I64": torch.int64,
          "I32": torch.int32, "I8": torch.int8, "U8": torch.uint8}
NAMES = {v: k for k, v in DTYPES.items()}

PDD_STEP = 3          # the coarse step whose bank weights reference_pdd uses
STRENGTH_ADALN = 1.0  # reference_adaln
STRENGTH_MIXED = 0.7  # the AdaLN adapter beside the bank in reference_pdd


def load(path):
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        buf = bytearray(raw[8 + n + a:8 + n + b])
        t = torch.frombuffer(buf, dtype=DTYPES[v["dtype"]]) if buf else torch.empty(0, dtype=DTYPES[v["dtype"]])
        out[k] = t.reshape(v["shape"]).clone()
    return out


def save(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for k in sorted(tensors):
        t = tensors[k].contiguous().cpu()
        shape = list(t.shape)
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[k] = {"dtype": NAMES[t.dtype], "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def hadamard256(dev):
    h4 = torch.tensor([[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]], dtype=torch.float64)
    h = h4
    for _ in range(3):
        h = torch.kron(h, h4)
    return (h / 16).float().to(dev)


class Model:
    """The kit's DiT; adapters: {"adaln": [(prefix, A, B, s, uses_grid)], "grid": tensor, "heads": (Wv, bv, Wa, ba)}."""

    def __init__(self, w, dev):
        self.w = {k: v.to(dev) for k, v in w.items()}
        self.dev = dev
        self.h256 = hadamard256(dev)
        self.layers = len({k.split(".")[1] for k in w if k.startswith("blocks.")})
        self.refiners = len({k.split(".")[2] for k in w if k.startswith("token_refiner.blocks.")})

    def rms(self, x, weight, eps=1e-5):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(BF16) * weight

    def linear(self, prefix, x):
        w = self.w
        if prefix + ".weight_scale" not in w:
            return F.linear(x, w[prefix + ".weight"], w.get(prefix + ".bias"))
        qw, sw = w[prefix + ".weight"], w[prefix + ".weight_scale"].reshape(-1)
        k = x.shape[-1]
        xr = (x.reshape(-1, k).float().reshape(-1, k // 256, 256) @ self.h256).reshape(-1, k).to(BF16).float()
        sx = xr.abs().amax(1) / 127.0
        sx = torch.where(sx > 0, sx, torch.ones_like(sx))
        q = torch.round(xr / sx[:, None]).clamp(-127, 127)
        acc = (q.double() @ qw.double().t()).float()
        return (acc * (sx[:, None] * sw[None, :])).to(BF16).reshape(*x.shape[:-1], -1)

    def attention(self, p, x, cos=None, sin=None):
        s = x.shape[0]
        q, k, v = (t.reshape(s, -1, 128) for t in self.linear(p + ".attn.qkv_proj", x).chunk(3, -1))
        q, k = self.rms(q, self.w[p + ".attn.q_norm.weight"]), self.rms(k, self.w[p + ".attn.k_norm.weight"])
        if cos is not None:
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        qf, kf, vf = (t.float().transpose(0, 1) for t in (q, k, v))
        o = torch.softmax(qf @ kf.transpose(1, 2) / math.sqrt(128), -1) @ vf
        return self.linear(p + ".attn.out_proj", o.transpose(0, 1).reshape(s, -1).to(BF16))

    @staticmethod
    def rope(x, cos, sin):
        rot, half = cos.shape[-1], cos.shape[-1] // 2
        c, s = cos.to(BF16)[:, None, :], sin.to(BF16)[:, None, :]
        xr = x[..., :rot]
        turned = torch.cat([-xr[..., half:], xr[..., :half]], -1)
        return torch.cat([xr * c + turned * s, x[..., rot:]], -1)

    def mlp(self, p, x):
        g, u = self.linear(p + ".mlp.fc1", x).chunk(2, -1)
        return self.linear(p + ".mlp.fc2", F.silu(g) * u)

    def temb(self, t):
        table = self.w["adaln_t_table"].float()
        pos = t.clamp(0, 1) * (table.shape[0] - 1)
        lo = pos.floor().long().clamp(max=table.shape[0] - 1)
        hi = (lo + 1).clamp(max=table.shape[0] - 1)
        f = (pos - lo.float())[:, None]
        return table[lo] * (1 - f) + table[hi] * f

    @staticmethod
    def grid_rows(grid, t):
        n = grid.shape[0]
        pos = t.clamp(0, 1) * (n - 1)
        i0 = pos.floor().long().clamp(max=n - 2)
        return torch.lerp(grid[i0], grid[i0 + 1], (pos - i0.float())[:, None])

    def modulation(self, prefix, temb, t, adapters):
        mod = temb @ self.w[prefix + ".weight"].float().t() + self.w[prefix + ".bias"].float()
        for p, a, b, s, uses_grid in (adapters or {}).get("adaln", []):
            if p == prefix:
                e = self.grid_rows(adapters["grid"], t) if uses_grid else temb
                mod = mod + s * ((e @ a.float().t()) @ b.float().t())
        return mod

    def forward(self, inp, adapters=None):
        w, dev = self.w, self.dev
        tags = inp["token_tags"][0].to(dev)
        s = tags.shape[0]
        ang = (inp["position_ids"][0].float().to(dev)[:, :, None] * w["rope.inv_freq"].float()[None, None, :]).reshape(s, -1)
        ang = torch.cat([ang, ang], -1)
        cos, sin = ang.cos(), ang.sin()
        ev = F.linear(inp["hidden_states"][0].float().to(dev), w["video_patch_proj.weight"], w["video_patch_proj.bias"])
        ea = F.linear(inp["audio_hidden_states"][0].float().to(dev), w["audio_patch_proj.weight"],
                      w["audio_patch_proj.bias"])
        et = self.linear("condition_proj", inp["encoder_hidden_states"][0].to(dev).to(BF16))
        for r in range(self.refiners):
            p = "token_refiner.blocks.%d" % r
            et = et + self.attention(p, self.rms(et, w[p + ".norm1.weight"]))
            et = et + self.mlp(p, self.rms(et, w[p + ".norm2.weight"]))
        et = self.rms(et, w["token_refiner.final_norm.weight"])
        hdim = w["video_patch_proj.weight"].shape[0]
        x = torch.zeros(s, hdim, dtype=BF16, device=dev)
        x[inp["text_indices"].to(dev)] = et
        x[inp["video_indices"].to(dev)] = ev.to(BF16)
        x[inp["audio_indices"].to(dev)] = ea.to(BF16)
        u, ti = torch.unique(inp["row_timesteps"][0].float().to(dev), sorted=True, return_inverse=True)
        temb = self.temb(u)
        row = ti * 3 + tags.clamp(min=0)
        for b in range(self.layers):
            p = "blocks.%d" % b
            mod = self.modulation(p + ".adaln_proj.linear", temb, u, adapters).reshape(-1, 6, hdim)
            sm, cm, gm, sf, cf, gf = (mod[row, c].to(BF16) for c in range(6))
            x = x + gm * self.attention(p, self.rms(x, w[p + ".norm1.weight"]) * (1 + cm) + sm, cos, sin)
            x = x + gf * self.mlp(p, self.rms(x, w[p + ".norm2.weight"]) * (1 + cf) + sf)
        fm = self.modulation("final_layer.adaln_proj.linear", temb, u, adapters).reshape(-1, 2, hdim)
        h = (self.rms(x, w["final_layer.norm.weight"]) * (1 + fm[ti, 1].to(BF16)) + fm[ti, 0].to(BF16)).float()
        heads = (adapters or {}).get("heads") or (w["final_layer.video_out.weight"], w["final_layer.video_out.bias"],
                                                  w["final_layer.audio_out.weight"], w["final_layer.audio_out.bias"])
        vid = F.linear(h, heads[0], heads[1])[inp["video_indices"].to(dev)]
        aud = F.linear(h, heads[2], heads[3])[inp["audio_indices"].to(dev)]
        return vid.cpu(), aud.cpu()


def shift(b, s):
    return s * b / (1 + (s - 1) * b)


def pdd_weights(step, shift_value, fine=32, block=4):
    """fewstep.md §5.2: the interval-weighted mean of coarse step `step` over its `block` fine intervals."""
    t = [1 - shift(1 - n / fine, shift_value) for n in range(fine + 1)]
    span = t[block * step + block] - t[block * step]
    w = [0.0] * fine
    for l in range(block * step, block * step + block):
        w[l] = (t[l + 1] - t[l]) / span
    return torch.tensor(w, dtype=torch.float64)


def rel_l2(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kit", default="tests/data/dit")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    kit = Path(a.kit)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((kit / "manifest.json").read_text())
    cases = load(kit / "cases.safetensors")
    model = Model(load(kit / "dit.safetensors"), torch.device(a.device))
    tol = manifest["tolerances"]["forward"]
    names = [c["name"] for c in manifest["cases"]]

    def inputs(name):
        pre = name + ".in."
        return {k[len(pre):]: v for k, v in cases.items() if k.startswith(pre)}

    # 1. this script's base forward against the kit's reference
    check = {}
    for n in names:
        v, au = model.forward(inputs(n))
        check[n] = (rel_l2(v, cases[n + ".out.video"][0]), rel_l2(au, cases[n + ".out.audio"][0]))
        print("base %-22s video %.4f audio %.4f (tolerances %.3f / %.3f)" % (n, *check[n], tol["video"]["rel_l2"],
                                                                             tol["audio"]["rel_l2"]))
        if check[n][0] > tol["video"]["rel_l2"] or check[n][1] > tol["audio"]["rel_l2"]:
            print("FAIL: this script's forward is outside the kit's tolerance; its references would be wrong")
            return 1

    # 2. adapters, seeded
    g = torch.Generator().manual_seed(2024)
    hdim = model.w["video_patch_proj.weight"].shape[0]
    rank, gw = 4, 32

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=g) * scale

    adaln_keys, adaln_list = {}, []
    # block 0: trained on the pruned base (reads the 8-wide table); block 1 and the final layer: on a full model
    for prefix, rows, width in (("blocks.0.adaln_proj.linear", 18 * hdim, 8), ("blocks.1.adaln_proj.linear",
                                                                              18 * hdim, gw),
                                ("final_layer.adaln_proj.linear", 2 * hdim, gw)):
        A = randn(rank, width, scale=0.5).to(BF16)
        B = randn(rows, rank, scale=0.05).to(BF16)
        adaln_keys["diffusion_model.%s.lora_A.weight" % prefix] = A
        adaln_keys["diffusion_model.%s.lora_B.weight" % prefix] = B
        adaln_keys["diffusion_model.%s.alpha" % prefix] = torch.tensor(2.0)
        adaln_list.append((prefix, A.to(model.dev), B.to(model.dev), 2.0 / rank, width != 8))
    tk = torch.arange(1025, dtype=torch.float64) / 1024
    w1, w2 = randn(64, 16), randn(gw, 64, scale=0.2)
    freqs = torch.exp(-math.log(10000.0) * torch.arange(8) / 8).double()
    emb = torch.cat([torch.cos(tk[:, None] * freqs), torch.sin(tk[:, None] * freqs)], 1)
    grid = F.silu(F.silu(emb @ w1.double().t()) @ w2.double().t()).float()
    outs = (model.w["final_layer.video_out.weight"].shape[0], model.w["final_layer.audio_out.weight"].shape[0])
    bank = {"proj_out.weight": randn(32, outs[0], hdim, scale=0.06), "proj_out.bias": randn(32, outs[0], scale=0.1),
            "audio_proj_out.weight": randn(32, outs[1], hdim, scale=0.06),
            "audio_proj_out.bias": randn(32, outs[1], scale=0.1)}
    save(out / "adapter_adaln.safetensors", adaln_keys)
    save(out / "adapter_pdd.safetensors", bank, {"pdd_num_steps": "32", "pdd_block_size": "4"})
    save(out / "h3_silu_temb_grid.safetensors", {"silu_t_emb_grid": grid})

    def blended(key, wv):
        return torch.einsum("l,l...->...", wv, bank[key].double()).float().to(model.dev)

    wv, wa = pdd_weights(PDD_STEP, 12.0), pdd_weights(PDD_STEP, 3.0)
    heads = (blended("proj_out.weight", wv), blended("proj_out.bias", wv), blended("audio_proj_out.weight", wa),
             blended("audio_proj_out.bias", wa))
    gdev = grid.to(model.dev)

    def scaled(s):
        return [(p, A, B, scale * s, ug) for p, A, B, scale, ug in adaln_list]

    # 3. references
    ref, changed = {}, {}
    for n in names:
        base_v, _ = model.forward(inputs(n))
        v, au = model.forward(inputs(n), {"adaln": scaled(STRENGTH_ADALN), "grid": gdev})
        ref["adaln.%s.video" % n], ref["adaln.%s.audio" % n] = v, au
        changed[n] = rel_l2(v, base_v)
        v, au = model.forward(inputs(n), {"adaln": scaled(STRENGTH_MIXED), "grid": gdev, "heads": heads})
        ref["pdd.%s.video" % n], ref["pdd.%s.audio" % n] = v, au
        print("adapted %-22s the AdaLN adapter moves the video output by rel_l2 %.3f" % (n, changed[n]))
    save(out / "reference.safetensors", ref)
    (out / "adaln_ref.json").write_text(json.dumps({
        "kit": str(kit), "device": a.device, "torch": torch.__version__, "seed": 2024,
        "strength_adaln": STRENGTH_ADALN, "strength_mixed": STRENGTH_MIXED, "pdd_step": PDD_STEP,
        "self_check_rel_l2": check, "adapter_effect_rel_l2": changed}, indent=1))
    print("wrote %s: adapters, grid, %d reference tensors" % (out, len(ref)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
