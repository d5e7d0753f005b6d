#!/usr/bin/env python3
"""Plain-PyTorch MiniMax-H3 video and audio VAEs, written from the project's
spec (shared/spec/vae.md), for the device benchmark (tests/device/vae.sh):
the same checkpoints (random weights in the released Comfy layouts) and the
same seeded inputs as bench/bench_vae, timed on the same GPU, and their
outputs compared with ours.

    vae_ref.py --video FILE --audio FILE --inputs bench_out.safetensors
               [--reps 3] [--what decode,keyframe,audio] [--tile 256 --overlap 64]

Precision is the reference recipe for the fp16 Comfy file: fp16 weights and
GEMMs/convs, fp32 norms, fp32 x_embedder / proj_out; the audio VAE in fp32
with TF32 off. One ViT pass per tile, as the upstream code decodes. Prints
  VAE_REF <case> median_s <t> min_s <t> reps <n> peak_above_weights_gib <g>
  VAE_CMP <what> ... (ours vs this reference)
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
V_MEAN = [0.858090341091156, -0.9606591463088989, 1.0661640167236328, -0.5090325474739075, -0.2727581858634949,
          -1.3675414323806763, -0.2553254961967468, -0.26907554268836975, -0.5376840829849243, -0.0464097298681736,
          0.6657370328903198, 0.19690127670764923, -0.5460608005523682, -0.4035342037677765, -0.23683024942874908,
          0.25928452610969543, -0.30133944749832153, 0.211341992020607, -1.1206848621368408, 0.3581933379173279,
          -0.04225143790245056, 0.2604829967021942, 0.22864092886447906, 0.7056031823158264]
V_STD = [1.2223774194717407, 1.2767263650894165, 1.68317747116088865, 1.7549455165863037, 1.5636216402053833,
         2.194143533706665, 0.96531379222869875, 1.05698859691619875, 0.841948926448822, 0.7729952931404114,
         1.8955937623977661, 0.946841835975647, 0.7996809482574463, 0.44988900423049925, 0.7197399735450745,
         0.69362932443618775, 2.961095094680786, 2.7694199085235595, 3.0496184825897215, 2.1088054180145265,
         3.276226282119751, 3.1627357006073, 2.28168129920959475, 2.6127843856811525]
A_MEAN = [-0.020211687488382354, 0.3876466479950502, -0.04398279799186767, -0.28591514936373, 0.08179686214561671,
          -0.35782641352446604, 0.040623809960919084, -0.01552534501956604, -0.223362481667332, 0.1821006842509091,
          0.2941778783780663, -0.07901167601970885, -0.056815072777201, -0.3699028221860095, -0.31616315591624855,
          0.5905951377425391, -0.052139568068853864, 0.013673160263486295, -0.03691647864630577, 0.09732660653298163,
          -0.3394662328788498, -0.30685677538541667, -0.24504598907458763, -0.034698524462007344,
          0.02868032184767538, -0.21217779266454084, -0.1678263169941987, 0.3221287889040614, -0.1223055851554907,
          0.4356604928128464, -0.0502599202236253, 0.3979258376211797]
A_STD = [1.6895524230479284, 2.76263727217653, 1.7945344281264435, 1.6801681847309828, 1.6390226546605453,
         2.7788298348882177, 1.7659090095747236, 1.6199757612137327, 2.6336525640336896, 1.8539356672817833,
         2.5056497896915633, 1.811019237886178, 1.9579657790720237, 1.6685498243529284, 1.4922469314453364,
         3.298670198067373, 1.9491804496832168, 1.8720003270431442, 1.8334080103291832, 1.6488070416529093,
         1.6176957696319716, 1.9131449234774398, 1.5695245398428617, 1.6943659940415912, 1.8318420762504692,
         1.5540637421583379, 1.9344930328968526, 1.599198216109855, 1.718045989838149, 1.6307219190837705,
         1.8661226051202384, 1.5613768203168363]

SPACE_DOWN, TIME_DOWN = (2, 2, 2, 2, 1, 1), (1, 2, 2, 1, 1, 1)


def rms_norm(x, shape, w, eps):
    """F.rms_norm (torch >= 2.4), or the same formula on older torch."""
    if hasattr(F, 'rms_norm'):
        return F.rms_norm(x, shape, w, eps)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


def sdpa(q, k, v):
    if hasattr(F, 'scaled_dot_product_attention'):
        return F.scaled_dot_product_attention(q, k, v)
    p = torch.softmax((q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1]), -1)
    return (p @ v.float()).to(q.dtype)

CLIP, DROP, HEAD_DIM, THETA, EPS = 17, 3, 64, 100.0, 1e-5


# ------------------------------------------------------------ video: tiling

def tile_plan(length, tile, overlap_min, step=16):
    if length <= tile:
        return [0], [length], []
    n = math.ceil(length / tile)
    while tile * n - overlap_min * (n - 1) < length:
        n += 1
    ov = [overlap_min] * (n - 1)
    for i in range((tile * n - sum(ov) - length) // step):
        ov[i % (n - 1)] += step
    starts = [0]
    for i in range(n - 1):
        starts.append(starts[-1] + tile - ov[i])
    return starts, [min(tile, length - s) for s in starts], ov


def lerp_into(a, b, e, dim):
    """b's first e samples along dim become a's last e (weight k/e on b)."""
    e = min(e, a.shape[dim], b.shape[dim])
    w = (torch.arange(e, device=b.device, dtype=b.dtype) / e).view([-1 if d == dim % b.ndim else 1
                                                                       for d in range(b.ndim)])
    head = a.narrow(dim, a.shape[dim] - e, e) * (1 - w) + b.narrow(dim, 0, e) * w
    return torch.cat([head, b.narrow(dim, e, b.shape[dim] - e)], dim=dim)


def stitch(rows, ovy, ovx):
    out = []
    for i, row in enumerate(rows):
        line = []
        for j, t in enumerate(row):
            if i > 0:
                t = lerp_into(rows[i - 1][j], t, ovy[i - 1], -2)
            if j > 0:
                t = lerp_into(row[j - 1], t, ovx[j - 1], -1)
            if i < len(rows) - 1:
                t = t[..., : t.shape[-2] - ovy[i], :]
            if j < len(row) - 1:
                t = t[..., : t.shape[-1] - ovx[j]]
            line.append(t)
        out.append(torch.cat(line, dim=-1))
    return torch.cat(out, dim=-2)


# ----------------------------------------------------------- video: decoder

class VideoVAE:
    def __init__(self, path, device, tile, overlap, dtype=torch.float16):
        sd = load_file(path, device=str(device))
        if dtype != torch.float16:  # --compute float32: checking the script where fp16 kernels are missing
            sd = {k: v.to(dtype) for k, v in sd.items()}
        self.w, self.dt = sd, dtype
        self.tile, self.overlap = tile, overlap
        self.layers = len({k.split('.')[2] for k in sd if k.startswith('decoder.transformer_blocks.')})
        self.dim = sd['decoder.x_embedder.weight'].shape[0]
        self.heads = self.dim // HEAD_DIM
        self.levels = len({k.split('.')[2] for k in sd if k.startswith('encoder.down.')})
        f32 = lambda k: sd[k].float()
        self.emb_w, self.emb_b = f32('decoder.x_embedder.weight'), f32('decoder.x_embedder.bias')
        self.proj_w, self.proj_b = f32('decoder.proj_out.weight'), f32('decoder.proj_out.bias')
        self.lmean = torch.tensor(V_MEAN, device=device).view(1, -1, 1, 1, 1)
        self.lstd = torch.tensor(V_STD, device=device).view(1, -1, 1, 1, 1)
        self.pmean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1, 1)
        self.pstd = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1, 1)

    def rope(self, t, h, w, device):
        rd = int(HEAD_DIM * 0.75)
        inv = 1.0 / THETA ** torch.arange(0, 1, 6 / rd, dtype=torch.float32, device=device)
        axes = [2.0 * (torch.arange(0.5, n, dtype=torch.float32, device=device) / n) - 1.0 for n in (t, h, w)]
        pos = torch.stack(torch.meshgrid(*axes, indexing='ij'), -1).reshape(-1, 3)
        pos = torch.cat([pos, pos.new_zeros(5, 3)])
        ang = (2.0 * math.pi * pos[:, :, None] * inv).flatten(1).repeat(1, 2)
        return ang.cos().to(self.dt)[:, None], ang.sin().to(self.dt)[:, None]  # [S, 1, rd]: over heads

    def vit(self, z):
        sd, D, H = self.w, self.dim, self.heads
        b, c, t, h, w = z.shape
        z = F.conv3d(z.to(self.dt), sd['post_quant_conv.weight'], sd['post_quant_conv.bias'])
        tok = z.permute(0, 2, 3, 4, 1).reshape(b, t * h * w, c)
        x = F.linear(tok.float(), self.emb_w, self.emb_b).to(self.dt)
        n = x.shape[1]
        x = torch.cat([x, sd['decoder.register_tokens'].expand(b, -1, -1), x.new_zeros(b, 1, D)], 1)
        cos, sin = self.rope(t, h, w, z.device)
        rd = cos.shape[-1]

        def rot(v):
            a, p = v[..., :rd], v[..., rd:]
            a1, a2 = a.chunk(2, -1)
            return torch.cat([a * cos + torch.cat([-a2, a1], -1) * sin, p], -1)

        for i in range(self.layers):
            p = f'decoder.transformer_blocks.{i}.'
            y = rms_norm(x.float(), (D,), sd[p + 'norm1.weight'].float(), EPS).to(self.dt)
            qkv = F.linear(y, sd[p + 'attn.to_qkv.weight'], sd[p + 'attn.to_qkv.bias'])
            q, k, v = qkv.view(b, -1, H, 3 * HEAD_DIM).chunk(3, -1)
            q = rot(rms_norm(q.float(), (HEAD_DIM,), None, EPS).to(self.dt))
            k = rot(rms_norm(k.float(), (HEAD_DIM,), None, EPS).to(self.dt))
            o = sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            o = F.linear(o.transpose(1, 2).reshape(b, -1, D), sd[p + 'attn.to_out.weight'], sd[p + 'attn.to_out.bias'])
            x = x + o * sd[p + 'scale1']
            y = rms_norm(x.float(), (D,), sd[p + 'norm2.weight'].float(), EPS).to(self.dt)
            g, val = F.linear(y, sd[p + 'ff.w1.weight'], sd[p + 'ff.w1.bias']).chunk(2, -1)
            x = x + F.linear(F.silu(g) * val, sd[p + 'ff.w2.weight'], sd[p + 'ff.w2.bias']) * sd[p + 'scale2']
        x = F.layer_norm(x.float(), (D,), sd['decoder.norm_out.weight'].float(), sd['decoder.norm_out.bias'].float(), EPS)
        x = F.linear(x, self.proj_w, self.proj_b)[:, :n]
        x = x.view(b, t, h, w, 3, 4, 16, 16).permute(0, 4, 1, 5, 2, 6, 3, 7)
        return x.reshape(b, 3, 4 * t, 16 * h, 16 * w)

    def decode_window(self, z):
        ys, yl, yo = tile_plan(z.shape[-2] * 16, self.tile, self.overlap)
        xs, xl, xo = tile_plan(z.shape[-1] * 16, self.tile, self.overlap)
        rows = [[self.vit(z[..., y // 16:(y + ly) // 16, x // 16:(x + lx) // 16]) for x, lx in zip(xs, xl)]
                for y, ly in zip(ys, yl)]
        return stitch(rows, yo, xo)

    @torch.no_grad()
    def decode(self, zn):
        """normalized [1, 24, L, h, w] (L = 5n + 2) -> uint8 frames [T, H, W, 3]"""
        z = zn.float() * self.lstd + self.lmean
        chunks = (z.shape[2] + DROP) // 5 - 1
        out, tail = [], None
        for i in range(chunks):
            clip = self.decode_window(z[:, :, 5 * i:5 * i + 7])
            a, b = clip[:, :, 3:20], clip[:, :, 23:28]
            if tail is not None:
                a = lerp_into(tail, a, 5, 2)
            out.append(a)
            tail = b
        out.append(tail)
        x = torch.cat(out, 2) * self.pstd + self.pmean
        return torch.round(x.clamp(0, 1) * 255).to(torch.uint8)[0].permute(1, 2, 3, 0)

    # ----------------------------------------------------------- encoder
    def conv(self, x, p, stride=(1, 1, 1), spatial='sym'):
        if spatial == 'sym':
            x = F.pad(x, (1, 1, 1, 1, 0, 0), mode='reflect')
        elif spatial == 'rb':
            x = F.pad(x, (0, 1, 0, 1, 0, 0), mode='reflect')
        w = self.w[p + '.weight']
        if w.shape[2] > 1:
            x = F.pad(x, (0, 0, 0, 0, w.shape[2] - 1, 0))
        return F.conv3d(x, w, self.w[p + '.bias'], stride=stride)

    def gn_silu(self, x, p):
        b, c, t, h, w = x.shape
        y = x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)
        y = F.group_norm(y, 32, self.w[p + '.weight'], self.w[p + '.bias'], 1e-6)
        return F.silu(y.view(b, t, c, h, w).permute(0, 2, 1, 3, 4))

    def encoder(self, x):
        h = self.conv(x, 'encoder.conv_in')
        for l in range(self.levels):
            for j in range(2):
                p = f'encoder.down.{l}.block.{j}'
                r = self.conv(self.gn_silu(h, p + '.norm1'), p + '.conv1')
                r = self.conv(self.gn_silu(r, p + '.norm2'), p + '.conv2')
                if p + '.nin_shortcut.weight' in self.w:
                    h = self.conv(h, p + '.nin_shortcut', spatial=None)
                h = h + r
            if SPACE_DOWN[l] * TIME_DOWN[l] > 1:
                h = self.conv(h, f'encoder.down.{l}.downsample.conv', (TIME_DOWN[l], SPACE_DOWN[l], SPACE_DOWN[l]),
                              'rb' if SPACE_DOWN[l] == 2 else None)
        h = self.conv(self.gn_silu(h, 'encoder.norm_out'), 'encoder.conv_out')
        return F.conv3d(h, self.w['quant_conv.weight'], self.w['quant_conv.bias'])

    @torch.no_grad()
    def encode_image(self, rgb):
        """uint8 [H, W, 3] -> (normalized seeded latents, posterior mean) [1, 24, 1, h, w]"""
        x = rgb.permute(2, 0, 1)[None, :, None].float() / 255.0
        x = ((x - self.pmean) / self.pstd).to(self.dt)
        ys, yl, yo = tile_plan(x.shape[-2], self.tile, self.overlap)
        xs, xl, xo = tile_plan(x.shape[-1], self.tile, self.overlap)
        rows = [[self.encoder(x[..., y:y + ly, xx:xx + lx]) for xx, lx in zip(xs, xl)] for y, ly in zip(ys, yl)]
        m = stitch(rows, [o // 16 for o in yo], [o // 16 for o in xo])
        mean, logvar = m.float().chunk(2, 1)
        g = torch.Generator('cpu').manual_seed(42)
        eps = torch.randn(mean.shape, generator=g, dtype=torch.float32).to(mean.device)
        z = (mean + torch.exp(0.5 * logvar.clamp(-30, 20)) * eps).half().float()
        return (z - self.lmean) / self.lstd, mean


# -------------------------------------------------------------------- audio

class AudioVAE:
    def __init__(self, path, device):
        self.w = {k: v.float() for k, v in load_file(path, device=str(device)).items()}
        self.stages = len({k.split('.')[2] for k in self.w if k.startswith('decoder.ups.')})
        self.rates = [(self.w[f'decoder.ups.{i}.0.weight'].shape[2] + 1) // 2 for i in range(self.stages)]
        self.mean = torch.tensor(A_MEAN, device=device).view(1, -1, 1)
        self.std = torch.tensor(A_STD, device=device).view(1, -1, 1)

    def act(self, x, p):
        c = x.shape[1]
        fu, fd = self.w[p + '.upsample.filter'], self.w[p + '.downsample.lowpass.filter']
        k = fu.shape[-1]
        pad = k // 2 - 1
        y = F.conv_transpose1d(F.pad(x, (pad, pad), mode='replicate'), fu.expand(c, -1, -1), stride=2, groups=c) * 2
        y = y[..., pad * 2 + (k - 2) // 2: y.shape[-1] - (pad * 2 + (k - 1) // 2)]
        a, b = self.w[p + '.act.alpha'].exp()[None, :, None], self.w[p + '.act.beta'].exp()[None, :, None]
        y = y + (b + 1e-9).reciprocal() * torch.sin(a * y).pow(2)
        return F.conv1d(F.pad(y, (k // 2 - 1, k // 2), mode='replicate'), fd.expand(c, -1, -1), stride=2, groups=c)

    @torch.no_grad()
    def decode(self, zn):
        w = self.w
        x = F.conv1d(zn * self.std + self.mean, w['dec_in_proj.weight'], w['dec_in_proj.bias'])
        x = F.conv1d(x, w['decoder.conv_pre.weight'], w['decoder.conv_pre.bias'], padding=3)
        for i, u in enumerate(self.rates):
            k = w[f'decoder.ups.{i}.0.weight'].shape[2]
            x = F.conv_transpose1d(x, w[f'decoder.ups.{i}.0.weight'], w[f'decoder.ups.{i}.0.bias'], stride=u,
                                   padding=(k - u) // 2)
            acc = None
            for m in range(3):
                q = f'decoder.resblocks.{3 * i + m}'
                kk = w[q + '.convs1.0.weight'].shape[2]
                h = x
                for n, d in enumerate((1, 3, 5)):
                    r = F.conv1d(self.act(h, f'{q}.activations.{2 * n}'), w[f'{q}.convs1.{n}.weight'],
                                 w[f'{q}.convs1.{n}.bias'], dilation=d, padding=d * (kk - 1) // 2)
                    r = F.conv1d(self.act(r, f'{q}.activations.{2 * n + 1}'), w[f'{q}.convs2.{n}.weight'],
                                 w[f'{q}.convs2.{n}.bias'], padding=(kk - 1) // 2)
                    h = h + r
                acc = h if acc is None else acc + h
            x = acc / 3
        x = F.conv1d(self.act(x, 'decoder.activation_post'), w['decoder.conv_post.weight'], padding=3)
        return x.clamp(-1, 1)[:, 0]


def timed(fn, reps, base):
    cuda = torch.cuda.is_available()
    ts, out = [], None
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        out = fn()
        if cuda:
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    ts.sort()
    peak = (torch.cuda.max_memory_allocated() - base) / 2 ** 30 if cuda else 0.0
    return out, ts[len(ts) // 2], ts[0], peak


def allocated():
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--video', required=True)
    ap.add_argument('--audio', required=True)
    ap.add_argument('--inputs', required=True, help='bench_vae --out file (seeded inputs and our outputs)')
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--what', default='decode,keyframe,audio')
    ap.add_argument('--tile', type=int, default=256)
    ap.add_argument('--overlap', type=int, default=64)
    ap.add_argument('--device', default='cuda', help='cuda (the benchmark) or cpu (checking the script)')
    ap.add_argument('--compute', default='float16', help='video compute dtype: float16 (the recipe) or float32')
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(a.device)
    io = load_file(a.inputs)
    what = a.what.split(',')

    if 'decode' in what or 'keyframe' in what:
        vv = VideoVAE(a.video, dev, a.tile, a.overlap, getattr(torch, a.compute))
        base = allocated()
        print(f'VAE_REF video_weights_gib {base / 2 ** 30:.3f}', flush=True)
        if 'decode' in what:
            z = io['decode.in.latents'].to(dev)[None]
            fr, med, mn, peak = timed(lambda: vv.decode(z), a.reps, base)
            T, H, W = fr.shape[:3]
            print(f'VAE_REF decode_{T}x{W}x{H} median_s {med:.4f} min_s {mn:.4f} reps {a.reps} '
                  f'peak_above_weights_gib {peak:.3f}', flush=True)
            for name, idx in (('first_frame', 0), ('last_frame', T - 1)):
                key = f'decode.out.{name}'
                if key in io:
                    d = (io[key].to(dev).int() - fr[idx].int()).abs()
                    print(f'VAE_CMP decode {name} max_levels {d.max().item()} '
                          f'mismatch {(d > 0).float().mean().item():.4f} over1 {(d > 1).float().mean().item():.5f}')
        if 'keyframe' in what:
            rgb = io['keyframe.in.rgb'].to(dev)
            (lat, mean), med, mn, peak = timed(lambda: vv.encode_image(rgb), a.reps, base)
            print(f'VAE_REF keyframe_{rgb.shape[1]}x{rgb.shape[0]} median_s {med:.4f} min_s {mn:.4f} reps {a.reps} '
                  f'peak_above_weights_gib {peak:.3f}', flush=True)
            for key, ref in (('keyframe.out.latents', lat), ('keyframe.out.mean', mean)):
                if key in io:
                    ours = io[key].to(dev).view_as(ref)
                    rel = ((ours - ref).norm() / ref.norm()).item()
                    print(f'VAE_CMP {key} rel_l2 {rel:.3g} max_abs {(ours - ref).abs().max().item():.3g}')
        del vv
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    if 'audio' in what:
        av = AudioVAE(a.audio, dev)
        base = allocated()
        z = io['audio.in.latents'].to(dev)
        wav, med, mn, peak = timed(lambda: av.decode(z), a.reps, base)
        secs = z.shape[-1] / 40
        print(f'VAE_REF audio_decode_{secs:.3g}s median_s {med:.4f} min_s {mn:.4f} reps {a.reps} '
              f'peak_above_weights_gib {peak:.3f}', flush=True)
        if 'audio.out.waveform' in io:
            ours = io['audio.out.waveform'].to(dev)
            rel = ((ours - wav).norm() / wav.norm()).item()
            print(f'VAE_CMP audio waveform rel_l2 {rel:.3g} max_abs {(ours - wav).abs().max().item():.3g}')


if __name__ == '__main__':
    main()
