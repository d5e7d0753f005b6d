#!/usr/bin/env python3
"""`mmh3 generate` end to end on tiny checkpoints (CPU): the real engine —
Qwen3-VL conditioner, DiT, sampler, both VAEs, the mp4 writer — on random
weights in the released layouts written by `mmh3-gen-tiny all`.

    tests/integration/test_generate.py --build BUILD [TEST ...]

Clips are checked with ffprobe (size, frame count, audio stream); the ref2va
packed layout (--dump-layout) is checked against the reference's packing
rules (dit.md §5.3–5.4, text-encoder.md §3, §4) computed here, independently
of the C code. Prints one "PASS name" / "FAIL name: why" line per test
("SKIP name: why" for one this build cannot run: no serving stack).
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def check(cond, msg, *args):
    if not cond:
        raise AssertionError(msg % args if args else msg)


class Skip(Exception):
    """A test whose check cannot run with this build (a part configured out): reported as SKIP, not PASS."""


class Env:
    def __init__(self, build, work):
        self.build = os.path.abspath(build)
        self.mmh3 = os.path.join(self.build, "mmh3")
        self.work = work
        self.models = os.path.join(work, "models")
        self.media = os.path.join(work, "media")
        # the engine's on-disk caches (preview projections) stay in the run's folder
        os.environ["MMH3_CACHE_DIR"] = os.path.join(work, "cache")

    def generate(self, *args, models=True, timeout=300, device=True):
        cmd = [self.mmh3, "generate"] + list(args)
        if models:
            cmd += ["--models-path", self.models]
        if device:
            cmd += ["--device", "cpu"]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.work)

    def out(self, name):
        return os.path.join(self.work, "out", name)


QUICK = ["--frames", "22", "--steps", "3", "--preset", "ultrafast", "--plain"]


def probe(path):
    r = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                        "stream=codec_type,width,height,nb_read_frames,sample_rate,channels,duration",
                        "-of", "json", path], capture_output=True, text=True)
    check(r.returncode == 0, "ffprobe cannot read %s: %s", path, r.stderr.strip())
    streams = json.loads(r.stdout)["streams"]
    video = [s for s in streams if s["codec_type"] == "video"]
    audio = [s for s in streams if s["codec_type"] == "audio"]
    check(len(video) == 1, "%s: %d video streams", path, len(video))
    return video[0], (audio[0] if audio else None)


def check_clip(path, width, height, frames, audio=True):
    check(os.path.exists(path), "%s was not written", path)
    check(not os.path.exists(path + ".part"), "%s.part left behind", path)
    v, a = probe(path)
    check((v["width"], v["height"]) == (width, height), "%s is %sx%s, %dx%d expected", path, v["width"],
          v["height"], width, height)
    check(int(v["nb_read_frames"]) == frames, "%s has %s frames, %d expected", path, v["nb_read_frames"], frames)
    if audio:
        check(a is not None, "%s has no audio stream", path)
        check(int(a["sample_rate"]) == 32000 and int(a["channels"]) == 2, "audio %r: 32 kHz stereo expected", a)
        check(abs(float(a["duration"]) - frames / 24.0) < 0.05, "audio lasts %s s for %.3f s of video",
              a["duration"], frames / 24.0)
    else:
        check(a is None, "%s has an audio stream; --no-audio asks for none", path)


def ok(r, what):
    check(r.returncode == 0, "%s: exit %d: %s", what, r.returncode, r.stderr.strip()[-800:])


# ------------------------------------------------------------ fixtures

def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-v", "error", "-y"] + list(args), check=True)


def make_media(env):
    os.makedirs(env.media, exist_ok=True)
    m = env.media
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=320x180:rate=1", "-frames:v", "1", m + "/first.png")
    ffmpeg("-f", "lavfi", "-i", "smptebars=size=240x160:rate=1", "-frames:v", "1", m + "/last.jpg")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=160x96:rate=30", "-f", "lavfi", "-i",
           "sine=frequency=440:sample_rate=44100", "-t", "1.5", "-c:v", "libx264", "-pix_fmt", "yuv420p",
           "-c:a", "aac", "-shortest", m + "/clip.mp4")
    ffmpeg("-f", "lavfi", "-i", "sine=frequency=660:sample_rate=22050", "-t", "2", m + "/tone.wav")
    # hostile inputs: a PNG cut after 300 bytes, text named .png, a prompt file that is not UTF-8
    with open(m + "/first.png", "rb") as f, open(m + "/truncated.png", "wb") as g:
        g.write(f.read(300))
    with open(m + "/text.png", "w") as f:
        f.write("hello\n")
    with open(m + "/latin1.txt", "wb") as f:
        f.write(b"a fox \xe9 in snow\n")


# ------------------------------------------------------------ renders

def canvas_for(w, h, short):
    """request_rules: short edge N at the reference's aspect, the derived edge snapped down to 32."""
    a = w / h
    if a >= 1:
        return max(32, int(short * a / 32) * 32), short
    return short, max(32, int(short / a / 32) * 32)


@test
def t2v_clip_has_size_frames_and_audio(env):
    out = env.out("t2v.mp4")
    ok(env.generate("-p", "a red fox runs through fresh snow", "--size", "96x64", "--seed", "7", "-o", out, *QUICK),
       "t2v")
    check_clip(out, 96, 64, 22)


@test
def first_frame_sets_the_canvas_aspect(env):
    out = env.out("first.mp4")
    r = env.generate("-p", "the test card comes alive", "-i", env.media + "/first.png", "--short-edge", "64", "--seed",
                     "3", "-o", out, *QUICK)
    ok(r, "first frame")
    check_clip(out, *canvas_for(320, 180, 64), 22)


@test
def original_size_flags(env):
    """The original project's canvas flags: --size N is a square N x N even with a 16:9 first frame, and an
    off-grid --width/--height snaps to the nearest multiple of 32 (90 -> 96, 50 -> 64; not down to 64x32)
    with a warning naming the value used; 32 is accepted as the minimum."""
    out = env.out("square.mp4")
    ok(env.generate("-p", "a square card", "-i", env.media + "/first.png", "--size", "64", "--seed", "3", "-o", out,
                    *QUICK), "--size 64")
    check_clip(out, 64, 64, 22)
    out = env.out("nearest.mp4")
    r = env.generate("-p", "a nearly square fox", "--width", "90", "--height", "50", "--seed", "3", "-o", out, *QUICK)
    ok(r, "--width 90 --height 50")
    check_clip(out, 96, 64, 22)
    for axis, given, used in (("width", 90, 96), ("height", 50, 64)):
        check("warning: %s %d is off the 32-px grid; using %d" % (axis, given, used) in r.stderr,
              "no warning for %s %d: %s", axis, given, r.stderr)
    out = env.out("tiny.mp4")
    ok(env.generate("-p", "the smallest canvas", "--size", "32", "--seed", "3", "-o", out, *QUICK), "--size 32")
    check_clip(out, 32, 32, 22)


@test
def last_frame_only(env):
    out = env.out("last.mp4")
    r = env.generate("-p", "colour bars fade in", "--last-image", env.media + "/last.jpg", "--short-edge", "64", "--seed",
                     "3", "-o", out, *QUICK)
    ok(r, "last frame")
    check_clip(out, *canvas_for(240, 160, 64), 22)


@test
def first_and_last_frames(env):
    out = env.out("first_last.mp4")
    r = env.generate("-p", "from the test card to colour bars", "-i", env.media + "/first.png", "--last-image",
                     env.media + "/last.jpg", "--short-edge", "64", "--frames", "39", "--steps", "3", "--preset",
                     "ultrafast", "--plain", "--seed", "5", "-o", out, "--dump-layout", env.out("fl.layout"))
    ok(r, "first + last")
    check_clip(out, *canvas_for(320, 180, 64), 39)
    lay = read_safetensors(env.out("fl.layout"))
    roles = lay["roles"]
    w, h = canvas_for(320, 180, 64)
    per_frame = (h // 32) * (w // 32)
    check(roles.count(3) == 2 * per_frame, "two keyframes pin %d rows; %d condition rows", 2 * per_frame,
          roles.count(3))


@test
def no_audio_gives_a_silent_clip(env):
    out = env.out("silent.mp4")
    ok(env.generate("-p", "a quiet lake", "--size", "64x64", "--no-audio", "--seed", "1", "-o", out, *QUICK),
       "--no-audio")
    check_clip(out, 64, 64, 22, audio=False)


@test
def fast_mode_reaches_the_dit_and_is_exact_on_the_cpu(env):
    """--fast sets the DiT request's fast mode (its attention line says so); on a
    CPU there is no 8-bit kernel, so the clip is the exact one, byte for byte."""
    a, b = env.out("exact.mp4"), env.out("fast.mp4")
    ok(env.generate("-p", "a fast fox", "--size", "64x64", "--seed", "5", "-o", a, *QUICK), "exact")
    r = env.generate("-p", "a fast fox", "--size", "64x64", "--seed", "5", "--fast", "-v", "-o", b, *QUICK)
    ok(r, "--fast")
    check("fast mode" in r.stderr, "the request line does not say fast mode: %s", r.stderr[-600:])
    check("DiT attention: mm_attention (fast mode" in r.stderr, "fast mode did not reach the DiT: %s", r.stderr[-800:])
    with open(a, "rb") as fa, open(b, "rb") as fb:
        check(fa.read() == fb.read(), "--fast on the CPU changed the clip")


@test
def step_cache_reaches_the_dit(env):
    """--cache: at threshold 0 (never skips) the clip is the uncached one byte for byte; a huge threshold
    skips the forwards its guards leave, the clip changes, and the request line and the timing table say
    which forwards skipped (docs/CACHING.md)."""
    a, b, c = env.out("nocache.mp4"), env.out("cache0.mp4"), env.out("cachebig.mp4")
    args = ["-p", "a cached fox", "--size", "64x64", "--seed", "5", "--frames", "22", "--steps", "8", "--preset",
            "ultrafast", "--plain"]
    ok(env.generate(*args, "-o", a), "no cache")
    ok(env.generate(*args, "--cache", "fbc:0", "-o", b), "--cache fbc:0")
    r = env.generate(*args, "--cache", "fbc:1e9,warmup=2,max-cached=2", "-o", c)
    ok(r, "--cache fbc:1e9")
    check(", cache fbc:1e+09,warmup=2,max-cached=2 ->" in r.stderr, "the request line: %s", r.stderr[:400])
    check("step cache fbc:1e+09,warmup=2,max-cached=2: 3 of 7 forwards skipped their blocks (forwards 3-4, 6)"
          in r.stderr, "the timing table: %s", r.stderr[-1500:])
    with open(a, "rb") as fa, open(b, "rb") as fb, open(c, "rb") as fc:
        da, db, dc = fa.read(), fb.read(), fc.read()
    check(da == db, "--cache fbc:0 changed the clip")
    check(da != dc, "skipping forwards left the clip as it was")


@test
def same_seed_same_bytes_other_seed_other_bytes(env):
    a, b, c = env.out("seed_a.mp4"), env.out("seed_b.mp4"), env.out("seed_c.mp4")
    for path, seed in ((a, "11"), (b, "11"), (c, "12")):
        ok(env.generate("-p", "waves on a beach", "--size", "64x64", "--seed", seed, "-o", path, *QUICK),
           "seed " + seed)
    with open(a, "rb") as fa, open(b, "rb") as fb, open(c, "rb") as fc:
        da, db, dc = fa.read(), fb.read(), fc.read()
    check(da == db, "the same seed and parameters gave different bytes (%d vs %d)", len(da), len(db))
    check(da != dc, "another seed gave the same clip")


def write_safetensors(path, tensors):
    """tensors: {name: (shape, list of float32)} -> a minimal safetensors file."""
    header, blob = {}, b""
    for name, (shape, values) in tensors.items():
        data = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)


@test
def lora_adapters_through_the_cli(env):
    """--lora NAME[:S]: a name is found in $MODELS_PATH/loras and reaches the DiT (the final latents change;
    at strength 0 they are the base's, bit for bit); the same adapter in another spelling, given as a path,
    renders the same latents bit for bit; a malformed adapter, a missing one and a bad strength are refused
    in one line before the engine starts (exit 2)."""
    gen = os.path.join(env.build, "mmh3-gen-tiny")
    loras = os.path.join(env.models, "loras")
    os.makedirs(loras, exist_ok=True)
    kohya = os.path.join(env.work, "style_kohya.safetensors")
    for spelling, path in (("diffusers", os.path.join(loras, "style.safetensors")), ("kohya", kohya)):
        r = subprocess.run([gen, "lora", "--seed", "3", "--rank", "8", "--alpha", "4", "--gain", "0.5",
                            "--spelling", spelling, "--out", path], capture_output=True, text=True)
        check(r.returncode == 0, "mmh3-gen-tiny lora %s: %s", spelling, r.stderr)

    def latents(name, *extra):
        dump = env.out(name + ".latents.safetensors")
        r = env.generate("-p", "an ink painting of a fox", "--size", "64x64", "--seed", "9", "--no-audio",
                         "--dump-latents", dump, "-o", env.out(name + ".mp4"), *extra, *QUICK)
        ok(r, name)
        with open(dump, "rb") as f:
            return f.read(), r.stderr

    base, _ = latents("lora_base")
    styled, log = latents("lora_style", "--lora", "style:0.75")
    check("lora style.safetensors (strength 0.75): generic, rank 8, alpha 4" in log,
          "the adapter's summary line is missing: %s", log[-800:])
    check(styled != base, "--lora did not change the latents")
    off, _ = latents("lora_off", "--lora", "style.safetensors:0")
    check(off == base, "strength 0 changed the latents")
    again, _ = latents("lora_kohya", "--lora", kohya + ":0.75")
    check(again == styled, "the kohya spelling of the same adapter rendered other latents")

    bad = os.path.join(loras, "broken.safetensors")
    write_safetensors(bad, {"blocks.0.attn.wobble.lora_A.weight": ([2, 2], [0.0] * 4)})
    for args, needles in ((["--lora", "broken"], ["broken.safetensors", "blocks.0.attn.wobble.lora_A.weight",
                                                   "cannot place"]),
                          (["--lora", "absent:0.5"], ["absent", "not found", loras]),
                          (["--lora", "style:1e9"], ["strength", "-100..100"])):
        r = env.generate("-p", "a fox", "--size", "64x64", "-o", env.out("lora_bad.mp4"), *args, *QUICK)
        check(r.returncode == 2, "%s: exit %d, 2 expected: %s", args, r.returncode, r.stderr[-400:])
        for n in needles:
            check(n in r.stderr, "%s: the message lacks %r: %s", args, n, r.stderr.strip()[-600:])
        check(not os.path.exists(env.out("lora_bad.mp4")), "%s: a clip was written", args)


@test
def adapters_choose_their_sampler_and_adaln_parts_apply(env):
    """An adapter that says which sampler it was distilled for sets the schedule when the request names none:
    PDD's metadata (pdd_num_steps 32 / pdd_block_size 4) gives 8 forwards with its head bank blended per step,
    a LightX2V file name (…_fl2v_turbo_4step_v1.0_768p…) gives 4; an explicit --steps keeps the release grid.
    A full-width AdaLN adapter is refused without the SiLU(temb) grid (the message says where it comes from) and
    renders once the grid is in $MODELS_PATH/loras."""
    gen = os.path.join(env.build, "mmh3-gen-tiny")
    loras = os.path.join(env.models, "loras")
    os.makedirs(loras, exist_ok=True)
    made = {"pdd_acc.safetensors": ["--bank", "32", "--adaln", "--spelling", "diffusers"],
            "minimax_h3_fl2v_turbo_4step_v1.0_768p_bf16.safetensors": ["--spelling", "diffusers"],
            "larry_like.safetensors": ["--adaln", "--adaln-in", "32", "--adaln-rank", "4"]}
    for name, opts in made.items():
        r = subprocess.run([gen, "lora", "--seed", "4", "--rank", "4", "--out", os.path.join(loras, name)] + opts,
                           capture_output=True, text=True)
        check(r.returncode == 0, "mmh3-gen-tiny lora %s: %s", name, r.stderr)
    base = ["-p", "a fox", "--size", "64x64", "--frames", "22", "--seed", "5", "--preset", "ultrafast", "--plain",
            "-v"]

    def run(name, *extra):
        return env.generate(*base, "-o", env.out(name + ".mp4"), *extra)

    r = run("pdd", "--lora", "pdd_acc")
    ok(r, "PDD adapter")
    check("8 forwards (adapter pdd_acc.safetensors: metadata pdd_num_steps / pdd_block_size)" in r.stderr,
          "the PDD adapter did not set its sampler: %s", r.stderr[-1200:])
    r = run("turbo", "--lora", "minimax_h3_fl2v_turbo_4step_v1.0_768p_bf16.safetensors")
    ok(r, "LightX2V adapter")
    check("4 forwards (adapter minimax_h3_fl2v_turbo_4step_v1.0_768p_bf16.safetensors: the LightX2V file-name "
          "contract)" in r.stderr, "the file name did not set the sampler: %s", r.stderr[-1200:])
    r = run("turbo_steps", "--lora", "minimax_h3_fl2v_turbo_4step_v1.0_768p_bf16.safetensors", "--steps", "3")
    ok(r, "LightX2V adapter with --steps")
    check("2 forwards (3 steps on the release grid)" in r.stderr, "--steps did not win: %s", r.stderr[-1200:])

    r = run("larry_no_grid", "--lora", "larry_like", "--sampler", "larry4")
    check(r.returncode == 1 and "h3_silu_temb_grid" in r.stderr and "larry_like.safetensors" in r.stderr,
          "a full-width AdaLN adapter without the grid: exit %d: %s", r.returncode, r.stderr[-800:])
    grid = [math.sin(3.0 * k / 1024 + 0.7 * j) for k in range(1025) for j in range(32)]
    write_safetensors(os.path.join(loras, "h3_silu_temb_grid.safetensors"), {"silu_t_emb_grid": ([1025, 32], grid)})
    r = run("larry", "--lora", "larry_like", "--sampler", "larry4")
    ok(r, "a full-width AdaLN adapter with the grid")
    check("SiLU(temb) grid" in r.stderr and "4 forwards (sampler larry4)" in r.stderr, "log: %s", r.stderr[-1200:])
    check_clip(env.out("larry.mp4"), 64, 64, 22)


@test
def frames_dir_and_default_output_name(env):
    frames_dir = env.out("frames")
    r = env.generate("-p", "Frames, please!", "--size", "64x64", "--seed", "2", "--frames-dir", frames_dir, *QUICK)
    ok(r, "--frames-dir")
    pngs = sorted(f for f in os.listdir(frames_dir) if f.endswith(".png"))
    check(pngs[:1] == ["frame_00000.png"] and len(pngs) == 22, "frames: %r", pngs[:3] + pngs[-1:])
    path = r.stdout.strip().splitlines()[-1]
    check(path.startswith("outputs/") and path.endswith("-frames-please.mp4"), "default output %r", path)
    check_clip(os.path.join(env.work, path), 64, 64, 22)


@test
def preview_dir_gets_a_strip_per_forward_that_ffmpeg_decodes(env):
    d = env.out("previews")
    r = env.generate("-p", "Watch it emerge", "--size", "96x64", "--seed", "4", "--preview-dir", d,
                     "-o", env.out("previews.mp4"), "-v", *QUICK)
    ok(r, "--preview-dir")
    names = sorted(os.listdir(d))
    check(names == ["preview_001.jpg", "preview_002.jpg"], "one preview per forward (3 steps = 2): %r", names)
    for n in names:
        v, _ = probe(os.path.join(d, n))
        # 22 frames = 7 latent frames of 6x4 latents, each 384x256 in the strip
        check((v["width"], v["height"]) == (7 * 384, 256), "%s decodes as %sx%s", n, v["width"], v["height"])
    check("previews: 2 in " + d in r.stderr, "the summary line: %s", r.stderr[-600:])
    check("previews: projection fitted" in r.stderr, "the first run fits: %s", r.stderr[-1500:])
    check(any(f.startswith("preview-") for f in os.listdir(os.path.join(env.work, "cache"))), "and caches it")
    r = env.generate("-p", "Watch it emerge", "--size", "96x64", "--seed", "4", "--preview-dir", d,
                     "--preview-interval", "3600000", "-o", env.out("previews2.mp4"), "-v", *QUICK)
    ok(r, "--preview-interval")
    check("previews: projection from" in r.stderr and "previews: 1 in" in r.stderr,
          "the next run loads the projection and keeps to the interval: %s", r.stderr[-1500:])


@test
def gpus_sequence_parallel_renders_the_same_frames(env):
    """--gpus N: the DiT split over N ranks (CPU ranks with --device cpu; GPUs on
    a GPU host) renders exactly the frames of the one-device DiT (docs/MULTIGPU.md)."""
    frames = {}
    for g in ("1", "2", "4"):
        d = env.out("gpus%s" % g)
        ok(env.generate("-p", "a red fox runs through fresh snow", "--size", "96x64", "--seed", "7", "--gpus", g,
                        "--frames-dir", d, "-o", env.out("gpus%s.mp4" % g), *QUICK), "--gpus %s" % g)
        frames[g] = {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}
    check(len(frames["1"]) == 22, "%d frames", len(frames["1"]))
    for g in ("2", "4"):
        differ = [f for f in frames["1"] if frames[g].get(f) != frames["1"][f]]
        check(not differ, "--gpus %s: %d of 22 frames differ from --gpus 1 (first %s)", g, len(differ),
              differ[:1])
    r = env.generate("-p", "a", "--size", "64x64", "--gpus", "3", "-o", env.out("gpus3.mp4"), *QUICK)
    check(r.returncode != 0 and "heads" in r.stderr and "1, 2, 4" in r.stderr,
          "--gpus 3 on a 4-head DiT must be refused with the accepted counts: exit %d: %s", r.returncode,
          r.stderr.strip()[-400:])


@test
def fl2va_video_expands_to_four_pictures(env):
    lay_path = env.out("fl2va_video.layout")
    out = env.out("fl2va_video.mp4")
    r = env.generate("-p", "continue the clip", "-i", env.media + "/clip.mp4", "--short-edge", "64", "--seed", "4", "-o",
                     out, "--dump-layout", lay_path, *QUICK)
    ok(r, "fl2va with a video")
    lay = read_safetensors(lay_path)
    runs = vision_runs(lay["tags"], lay["roles"])
    check(len(runs) == 4, "4 vision blocks expected, %d found", len(runs))
    w, h = canvas_for(160, 96, 64)
    check(lay["roles"].count(3) == (h // 32) * (w // 32), "the first frame is pinned as the first keyframe")
    check_clip(out, w, h, 22)


@test
def cancel_stops_at_the_next_forward(env):
    out = env.out("cancelled.mp4")
    cmd = [env.mmh3, "generate", "-p", "a long render", "--size", "64x64", "--frames", "22", "--steps", "200",
           "--plain", "--device", "cpu", "--models-path", env.models, "-o", out]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=env.work)
    seen = ""
    for line in p.stderr:
        seen += line
        if "denoising step 2/" in line:
            p.send_signal(signal.SIGINT)
            break
    rest = p.stderr.read()
    rc = p.wait(60)
    check(rc == 130, "exit %d after Ctrl-C: %s", rc, (seen + rest)[-600:])
    check("cancelled" in rest, "no 'cancelled' message: %s", rest[-300:])
    steps = [ln for ln in (seen + rest).splitlines() if "denoising step" in ln]
    check(len(steps) <= 4, "kept going for %d steps after the cancel", len(steps))
    check(not os.path.exists(out) and not os.path.exists(out + ".part"), "a file was left behind")


def render_and_signal(env, out, stage, sigs, gap=0.05):
    cmd = [env.mmh3, "generate", "-p", "a signalled render", "--size", "256x256", "--frames", "62", "--steps", "3",
           "--plain", "--device", "cpu", "--models-path", env.models, "-o", out]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=env.work)
    seen = ""
    for line in p.stderr:
        seen += line
        if stage in line:
            for s in sigs:
                p.send_signal(s)
                time.sleep(gap)
            break
    seen += p.stderr.read()
    return p.wait(60), seen


@test
def sigterm_cancels_and_a_second_ctrl_c_leaves_no_part_file(env):
    out = env.out("signalled.mp4")
    rc, log = render_and_signal(env, out, "denoising step 2/", [signal.SIGTERM])
    check(rc == 130 and "cancelled" in log, "SIGTERM: exit %d: %s", rc, log[-300:])
    check(not os.path.exists(out) and not os.path.exists(out + ".part"), "SIGTERM left a file behind")
    # the mp4 writer has FILE.part open while the audio decodes; a second
    # Ctrl-C ends the process at once and must take FILE.part with it (when the
    # first one is honoured before the second arrives, the cancel removes it)
    rc, log = render_and_signal(env, out, "decoding audio", [signal.SIGINT, signal.SIGINT], gap=0.005)
    check(rc in (130, -signal.SIGINT), "two Ctrl-C: exit %d: %s", rc, log[-300:])
    check(not os.path.exists(out + ".part"), "two Ctrl-C left %s.part behind", out)
    check(not os.path.exists(out), "two Ctrl-C left a clip at -o")


@test
def a_ctrl_c_too_late_to_cancel_says_so(env):
    # signalled once the mp4 is being finished: either the cancel is still
    # honoured (nothing left behind) or the complete clip is kept and the user
    # is told why the Ctrl-C did not stop it
    out = env.out("late_interrupt.mp4")
    rc, log = render_and_signal(env, out, "writing mp4", [signal.SIGINT])
    if rc == 130:
        check(not os.path.exists(out) and not os.path.exists(out + ".part"), "cancelled but left a file")
    else:
        check(rc == 0, "exit %d: %s", rc, log[-300:])
        check("the interrupt came after the clip was finished" in log, "no word on the late Ctrl-C: %s", log[-400:])
        check_clip(out, 256, 256, 56)  # 62 frames snap down to 17n+5


@test
def timing_table_adds_up(env):
    r = env.generate("-p", "a timing check", "--size", "64x64", "--seed", "9", "-o", env.out("timing.mp4"), *QUICK)
    ok(r, "timing")
    rows = {}
    for line in r.stderr.splitlines():
        # "12.34s" or, from a minute on, "2m 05.3s"
        m = re.match(r"^\s*(.+?)\s+(?:(\d+)m )?(\d+\.\d+)s\s+\d+\.\d%$", line)
        if m:
            rows[m.group(1)] = 60 * int(m.group(2) or 0) + float(m.group(3))
    total = rows.get("total (wall clock)")
    check(total, "no total row in %s", r.stderr[-1200:])
    groups = sum(rows.get(g, 0) for g in ("loading", "inference", "encode", "overhead"))
    check(abs(groups - total) <= 0.02 + 0.01 * total, "rollups %.2f s vs wall %.2f s", groups, total)
    for key in ("denoise (DiT forwards)", "decode video (VAE)", "encode prompt (Qwen3-VL)",
                "mux video (H.264, not overlapped)"):
        check(key in rows, "row %r missing", key)
    for key in ("per step:", "frames/s:", "realtime factor:", "megapixel-frames/s:", "peak memory"):
        check(key in r.stderr, "%r missing", key)


def f32_repr(x):
    return repr(struct.unpack("f", struct.pack("f", x))[0])


def dump_rows(path):
    """The --dump-latents file as {name: bytes of the tensor}."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items()
            if k != "__metadata__"}


@test
def samplers_and_custom_sigma_lists_drive_the_loop(env):
    """--sampler turbo4 runs 4 forwards; the same σ points given as --sigmas (both lists, each value the f32 the
    preset computes in double from shift(linspace(1, 0, 5))) render the same latents bit for bit; a two-forward
    list runs two; the default path keeps its 3 grid points = 2 forwards."""
    shift = lambda b, s: s * b / (1 + (s - 1) * b)
    video = ",".join(f32_repr(shift(1 - i / 4, 12)) for i in range(5))
    audio = ",".join(f32_repr(shift(1 - i / 4, 3)) for i in range(5))
    runs = {"preset": ["--sampler", "turbo4"], "list": ["--sigmas", video + ";" + audio],
            "short": ["--sigmas", "1,0.6,0"], "default": ["--steps", "3"]}
    forwards = {"preset": 4, "list": 4, "short": 2, "default": 2}
    rows = {}
    for name, args in runs.items():
        dump = env.out("sched_%s.safetensors" % name)
        r = env.generate("-p", "a fox in the snow", "--size", "64x64", "--frames", "22", "--seed", "11", "--preset",
                         "ultrafast", "--plain", "-o", env.out("sched_%s.mp4" % name), "--dump-latents", dump, *args)
        ok(r, name)
        check("(%d forwards," % forwards[name] in r.stderr, "%s: %d forwards expected in the timing table: %s", name,
              forwards[name], r.stderr.strip()[-400:])
        rows[name] = dump_rows(dump)
    check(rows["preset"] == rows["list"], "--sampler turbo4 and the same --sigmas lists give different latents")
    check(rows["preset"] != rows["short"], "a different σ list gives the same latents")


@test
def missing_checkpoints_are_named(env):
    r = env.generate("-p", "x", "--models-path", os.path.join(env.work, "nowhere"), models=False, *QUICK)
    check(r.returncode == 1, "exit %d", r.returncode)
    check("nowhere" in r.stderr and "not found" in r.stderr.lower(), "message: %s", r.stderr.strip())


# ------------------------------------------------------------ flag rules

BAD = [
    # (args, flag named in the one-line message)
    (["-p", "a", "-f", "x.txt"], "--prompt and --file"),
    ([], "no prompt"),
    (["-p", "a", "--frames", "22", "--seconds", "2"], "--seconds 2: cannot be given together with --frames"),
    (["-p", "a", "--size", "64", "--width", "64"], "--size 64: cannot be given together with --width"),
    (["-p", "a", "--frames", "3"], "--frames 3"),
    (["-p", "a", "--frames", "abc"], "--frames abc"),
    (["-p", "a", "--seconds", "40"], "--seconds 40"),
    (["-p", "a", "--width", "31"], "--width 31: 31 is below the minimum 32"),
    (["-p", "a", "--size", "64y64"], "--size 64y64"),
    (["-p", "a", "--steps", "1"], "--steps 1"),
    (["-p", "a", "--crf", "99"], "--crf 99"),
    (["-p", "a", "--preset", "fastest"], "--preset fastest"),
    (["-p", "a", "--seed", "-1"], "--seed -1"),
    (["-p", "a", "--partition", "t2v"], "--partition t2v"),
    (["-p", "a", "--dtype", "fp32"], "--dtype fp32"),
    (["-p", "a", "--device", "gpu7"], "--device gpu7"),
    (["-p", "a", "--threads", "0"], "--threads 0"),
    (["-p", "   "], "--prompt"),
    (["-p", "a", "--bogus"], "--bogus"),
    (["-p", "a", "--steps"], "--steps needs a value"),
    (["-p", "a", "--sampler", "turbo5"], "--sampler turbo5: unknown sampler"),
    (["-p", "a", "--sigmas", "1,0.5"], "--sigmas 1,0.5: video σ: the last point is 0.5; the list ends at 0"),
    (["-p", "a", "--sigmas", "1,0.7,0.8,0"], "strictly decrease"),
    (["-p", "a", "--sampler", "turbo4", "--sigmas", "1,0"], "--sampler and --sigmas"),
    (["-p", "a", "--steps", "8", "--sampler", "turbo8"], "--steps and --sampler"),
    (["-p", "a", "--steps", "8", "--sigmas", "1,0"], "--steps and --sigmas"),
    (["-p", "a", "--audio", "MEDIA/tone.wav", "--partition", "fl2va"],
     "-i/--audio: has 1 audio clip(s), which only ref2va uses, and --partition is fl2va"),
    (["-p", "a", "-i", "MEDIA/first.png", "--last-image", "MEDIA/last.jpg", "--partition", "ref2va"],
     "--last-image MEDIA/last.jpg: is only used by fl2va, and --partition is ref2va"),
    (["-p", "a", "-i", "MEDIA/tone.wav"], "--image"),
    (["-p", "a", "--audio", "MEDIA/first.png"], "--audio"),
    (["-p", "a", "--last-image", "MEDIA/clip.mp4"], "--last-image"),
    (["-p", "a", "-i", "MEDIA/missing.png"], "--image"),
    (["-p", "a", "--ref-short-edge", "100"], "--ref-short-edge 100"),
    (["-p", "a", "--cache", "fbc:fast"], "--cache fbc:fast: 'fast' is neither a number nor one of fbc's presets"),
    (["-p", "a", "--cache", "fbc,warmup=-2"], "--cache fbc,warmup=-2: warmup=-2 is not an integer"),
    (["-p", "a", "--cache", "teacache", "--partition", "ref2va"], "--cache: teacache is calibrated for the fl2va"),
    # hostile files: FFmpeg's own log lines stay out; the message is ours, once
    (["-p", "a", "-i", "MEDIA/truncated.png"], "--image MEDIA/truncated.png: "),
    (["-p", "a", "--last-image", "MEDIA/truncated.png"], "--last-image MEDIA/truncated.png: "),
    (["-p", "a", "-i", "MEDIA/text.png"], "not a media file"),
    (["-f", "MEDIA"], "--file MEDIA: cannot read it: Is a directory"),
    (["-f", "MEDIA/latin1.txt"], "the prompt has invalid UTF-8 at byte 6"),
    # the output is checked before anything loads or renders
    (["-p", "a", "-o", "MEDIA"], "--out MEDIA: is a folder"),
    (["-p", "a", "-o", ""], "--out '': empty"),
    (["-p", "a", "-o", "/proc/mmh3-cannot-write.mp4"], "--out /proc/mmh3-cannot-write.mp4: cannot write there"),
]


@test
def bad_values_and_clashes_give_one_clear_line(env):
    problems = []
    for args, named in BAD:
        args = [a.replace("MEDIA", env.media) for a in args]
        r = env.generate(*args, models=False, device=False)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        named = named.replace("MEDIA", env.media)
        if (r.returncode != 2 or len(lines) != 1 or named not in lines[0] or not lines[0].startswith("mmh3 generate")
                or lines[0].count("accepted:") > 1):
            problems.append("%s -> exit %d, %r" % (" ".join(args), r.returncode, lines))
    check(not problems, "\n  ".join([""] + problems))


@test
def failed_runs_keep_an_existing_output_and_leave_no_part(env):
    out = env.out("kept.mp4")
    with open(out, "wb") as f:
        f.write(b"an earlier clip")
    r = env.generate("-p", "x", "-o", out, "--models-path", os.path.join(env.work, "nowhere"), models=False, *QUICK)
    check(r.returncode == 1, "exit %d: %s", r.returncode, r.stderr.strip()[-300:])
    with open(out, "rb") as f:
        check(f.read() == b"an earlier clip", "the existing %s was changed by a failed run", out)
    check(not os.path.exists(out + ".part"), "%s.part left behind", out)
    r = env.generate("-p", "x", "--frames-dir", os.path.join(env.media, "first.png"), "-o", env.out("fd.mp4"),
                     models=False)
    check(r.returncode != 0 and "--frames-dir" in r.stderr and "Not a directory" in r.stderr,
          "a file as --frames-dir: exit %d: %s", r.returncode, r.stderr.strip())


@test
def check_and_conformance_name_the_problem(env):
    # every flag the "not found" lines of mmh3 check suggest exists in check and generate
    r = subprocess.run([env.mmh3, "check", "--models-path", os.path.join(env.work, "nowhere")],
                       capture_output=True, text=True)
    check(r.returncode == 1, "check on an empty folder: exit %d", r.returncode)
    words = [w.rstrip(",") for w in r.stdout.split()]
    flags = sorted(set(w for w in words if w.startswith("--") and w.endswith("-path")))
    check(flags, "no flag suggested: %s", r.stdout[-600:])
    gen_help = subprocess.run([env.mmh3, "generate", "--help"], capture_output=True, text=True).stdout
    for flag in flags:
        c = subprocess.run([env.mmh3, "check", "--models-path", env.models, flag, "/nonexistent/x"],
                           capture_output=True, text=True)
        check("unknown option" not in c.stderr, "check suggests %s but refuses it: %s", flag, c.stderr.strip())
        check(flag in gen_help, "check suggests %s, generate --help does not list it", flag)
    # a folder or a dangling link where a checkpoint belongs is named as such, not just "not found"
    odd = os.path.join(env.work, "odd-models")
    os.makedirs(os.path.join(odd, "diffusion_models", "minimax_h3_fl2va_pruned_int8_convrot.safetensors"),
                exist_ok=True)
    os.makedirs(os.path.join(odd, "vae"), exist_ok=True)
    link = os.path.join(odd, "vae", "minimax_h3_video_vae_fp16.safetensors")
    if not os.path.lexists(link):
        os.symlink(os.path.join(env.work, "gone.safetensors"), link)
    c = subprocess.run([env.mmh3, "check", "--models-path", odd], capture_output=True, text=True)
    check("convrot.safetensors (a folder, not a file)" in c.stdout, "a folder as the DiT: %s", c.stdout[:600])
    check("fp16.safetensors (a link that leads nowhere" in c.stdout, "a dangling link as the VAE: %s", c.stdout)
    # conformance on a folder that is not a kit, a file, and a kit with a broken manifest
    kit = os.path.join(env.work, "broken-kit")
    os.makedirs(kit, exist_ok=True)
    cases = [(env.media, "not a conformance kit"), (os.path.join(env.media, "first.png"), "not a folder"),
             (os.path.join(env.work, "no-such-kit"), "No such file or directory")]
    for path, want in cases:
        c = subprocess.run([env.mmh3, "conformance", path], capture_output=True, text=True)
        msg = (c.stdout + c.stderr).strip()
        check(c.returncode == 1 and want in msg and "accepted:" in msg and "line -1" not in msg,
              "conformance %s: exit %d: %s", path, c.returncode, msg)
    with open(os.path.join(kit, "manifest.json"), "w") as f:
        f.write('{"kit": "minimax-h3-dit-conformance", "cases": [')
    c = subprocess.run([env.mmh3, "conformance", kit], capture_output=True, text=True)
    msg = (c.stdout + c.stderr).strip()
    check(c.returncode == 1 and "manifest.json: not valid JSON" in msg, "broken manifest: exit %d: %s", c.returncode,
          msg)


@test
def snapped_values_are_warned_and_applied(env):
    out = env.out("snapped.mp4")
    r = env.generate("-p", "snap", "--width", "100", "--height", "70", "--frames", "30", "--steps", "3", "--preset",
                     "ultrafast", "--plain", "--seed", "1", "-o", out)
    ok(r, "snapping")
    warnings = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    check(len(warnings) == 3, "3 warnings (width, height, frames) expected: %r", warnings)
    check_clip(out, 96, 64, 22)


# ------------------------------------------------------------ one set of engine flags

# The engine flags every command takes (src/cli/engine_flags.c's table);
# serve spells the threads --cpu-threads (its --threads is the FastCGI pool's).
ENGINE_FLAGS = ["--device", "--te-device", "--offload", "--gpus", "--ref-kv-cache", "--no-ref-kv-cache",
                "--ref-short-edge", "--ref-video-short-edge", "--models-path", "--checkpoints", "--models",
                "--dit-fl2va-path", "--dit-ref2va-path", "--text-encoder-path", "--video-vae-path",
                "--audio-vae-path", "--config-path", "--allow-download", "--cpu-threads"]
RESIDENT_FLAGS = ENGINE_FLAGS + ["--preload"]


def has_server(env):
    """worker and serve exist only in a build with the serving stack."""
    r = subprocess.run([env.mmh3, "worker", "--help"], capture_output=True, text=True)
    return r.returncode == 0


def help_flags(env, cmd):
    r = subprocess.run([env.mmh3, cmd, "--help"], capture_output=True, text=True, timeout=30)
    ok(r, "%s --help" % cmd)
    return {w.rstrip(",)") for w in r.stdout.split() if w.startswith("--")}


def need_server(env):
    if not has_server(env):
        raise Skip("this build has no serving stack (configured --without-server): no worker or serve")


@test
def help_of_generate_lists_the_engine_flags(env):
    listed = help_flags(env, "generate")
    missing = [f for f in ENGINE_FLAGS + ["--threads", "--dtype", "--dit-path"] if f not in listed]
    check(not missing, "mmh3 generate --help lacks %s", missing)


@test
def help_of_worker_and_serve_lists_the_engine_flags(env):
    need_server(env)
    for cmd in ("worker", "serve"):
        listed = help_flags(env, cmd)
        missing = [f for f in RESIDENT_FLAGS if f not in listed]
        check(not missing, "mmh3 %s --help lacks %s", cmd, missing)
    check("--gpu-workers" in help_flags(env, "serve"), "serve --help lost --gpu-workers")


ENGINE_BAD = [
    (["--te-device", "bogus"], "--te-device bogus"),
    (["--device", "gpu7"], "--device gpu7"),
    (["--cpu-threads", "0"], "--cpu-threads 0"),
    (["--gpus", "0"], "--gpus 0"),
    (["--ref-short-edge", "100"], "--ref-short-edge 100"),
    (["--ref-video-short-edge", "4100"], "--ref-video-short-edge 4100"),
    (["--models"], "--models needs a value"),
    (["--no-such-flag"], "--no-such-flag"),
]


@test
def worker_and_serve_refuse_bad_engine_flags_in_one_line(env):
    """Before starting anything: exit 2 and one line naming the flag and what is accepted."""
    need_server(env)
    problems = []
    cases = [(cmd, args, named, None) for cmd in ("worker", "serve") for args, named in ENGINE_BAD]
    cases += [("worker", ["--threads", "abc"], "--threads abc", None)]
    # 2^32 + 1 once passed the range checks as 1 (strtol's long cast to int before the check)
    big = "4294967297"
    cases += [("serve", [flag, big], flag + " " + big, None)
              for flag in ("--threads", "--gpu-workers", "--max-attempts", "--upload-mb")]
    cases += [("worker", ["--max-attempts", big], "--max-attempts " + big, None)]
    cases += [(cmd, [], "MMH3_REF_SHORT_EDGE=100", {"MMH3_REF_SHORT_EDGE": "100"}) for cmd in ("worker", "serve")]
    for cmd, args, named, extra in cases:
        e = dict(os.environ, **(extra or {}))
        r = subprocess.run([env.mmh3, cmd, "--outputs", env.out("never")] + args, capture_output=True, text=True,
                           timeout=30, env=e, cwd=env.work)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        if r.returncode != 2 or len(lines) != 1 or named not in lines[0] or not lines[0].startswith("mmh3 " + cmd):
            problems.append("%s %s -> exit %d, %r" % (cmd, " ".join(args), r.returncode, lines))
        elif "accepted" not in lines[0] and "needs a value" not in named and "no-such" not in named:
            problems.append("%s %s: the line does not say what is accepted: %r" % (cmd, " ".join(args), lines[0]))
    check(not os.path.exists(env.out("never")), "a refused command created its outputs folder")
    check(not problems, "\n  ".join([""] + problems))


@test
def ref_short_edges_from_flags_or_the_environment_agree(env):
    """MMH3_REF_SHORT_EDGE / MMH3_REF_VIDEO_SHORT_EDGE stand in for the flags:
    the same ref2va request packs the same layout either way."""
    base = ["-p", "a card and a clip", "-i", env.media + "/first.png", "-i", env.media + "/clip.mp4",
            "--partition", "ref2va", "--short-edge", "64", "--seed", "8"] + QUICK
    a, b = env.out("edge_flags.layout"), env.out("edge_env.layout")
    ok(env.generate(*base, "--ref-short-edge", "64", "--ref-video-short-edge", "64", "--dump-layout", a,
                    "-o", env.out("edge_flags.mp4")), "flags")
    cmd = [env.mmh3, "generate"] + base + ["--dump-layout", b, "-o", env.out("edge_env.mp4"), "--models-path",
                                           env.models, "--device", "cpu"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=env.work,
                       env=dict(os.environ, MMH3_REF_SHORT_EDGE="64", MMH3_REF_VIDEO_SHORT_EDGE="64"))
    ok(r, "environment")
    la, lb = read_safetensors(a), read_safetensors(b)
    check(la["roles"] == lb["roles"] and la["positions"] == lb["positions"], "the layouts differ")
    # The picture at short edge 64 (128x64) is not the default 2048-edge one: the sizes took effect.
    runs = vision_runs(la["tags"], la["roles"])
    ih, iw = smart_resize(64, 128, 32, 65536, 16777216)
    check(runs[0] == ih * iw // 1024 + 2, "picture block of %d rows, %d expected at short edge 64", runs[0],
          ih * iw // 1024 + 2)


# ------------------------------------------------------------ ref2va layout

DTYPES = {"F64": ("d", 8), "F32": ("f", 4), "I8": ("b", 1), "U8": ("B", 1), "I64": ("q", 8)}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        fmt, size = DTYPES[e["dtype"]]
        a, b = e["data_offsets"]
        vals = list(struct.unpack("<%d%s" % ((b - a) // size, fmt), data[a:b]))
        if len(e["shape"]) == 2:
            cols = e["shape"][1]
            vals = [tuple(vals[i:i + cols]) for i in range(0, len(vals), cols)]
        out[name] = vals
    return out


def vision_runs(tags, roles):
    """Lengths of the runs of vision rows (tag 0) among the text rows."""
    runs, cur = [], 0
    for t, r in zip(tags, roles):
        if r != 0:
            break
        if t == 0:
            cur += 1
        elif cur:
            runs.append(cur)
            cur = 0
    if cur:
        runs.append(cur)
    return runs


def spatial_grid(dm, sqrt_area, patch=2):
    """dit.md §5.3: numpy linspace(left, left+ratio, n, endpoint=False) x 32."""
    ratio = dm / sqrt_area
    left = (1 - ratio) / 2
    n = dm // patch
    step = ((left + ratio) - left) / n
    return [(left + i * step) * 32 for i in range(n)]


def frame_times(t_frames, origin):
    times, c = [], 0.0
    for k in range(t_frames):
        times.append(origin + c)
        c += (5 / 3) * (1 if k % 5 == 0 else 4)
    return times, c


def smart_resize(h, w, factor, lo, hi):
    """text-encoder.md §3.2 step 1 (Python round = half to even)."""
    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if hb * wb > hi:
        beta = math.sqrt(h * w / hi)
        hb, wb = max(factor, math.floor(h / beta / factor) * factor), max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < lo:
        beta = math.sqrt(lo / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def audio_latents(seconds, rate):
    """vae.md §3.7 + media: cut at the source rate, resample to 32 kHz, 800 samples per latent."""
    n = math.floor(seconds * rate)
    return math.ceil(math.ceil(n * 32000 / rate) / 800)


def expected_ref2va_layout(L, frames, target_wh, image_wh, video_wh, video_frames, sound_latents, audio_lat):
    rows = [((float(r), 0.0, 0.0), 0, 0.0) for r in range(L)]  # (position, role, t at step 0)
    T = (frames - 5) // 17 * 5 + 2
    A = round(5 * frames / 3)
    tw, th = target_wh
    t_sqrt = math.sqrt((th // 16) * (tw // 16))
    tgt_h, tgt_w = spatial_grid(th // 16, t_sqrt), spatial_grid(tw // 16, t_sqrt)
    clock = float(L)
    # image: one latent frame on its own grid at the clock
    iw, ih = image_wh
    s = math.sqrt((ih // 16) * (iw // 16))
    gh, gw = spatial_grid(ih // 16, s), spatial_grid(iw // 16, s)
    rows += [((clock, y, x), 3, 0.999) for y in gh for x in gw]
    clock += 1.0
    # video: its soundtrack at the clock with its own grid's width extremes, then its frames
    vw, vh = video_wh
    s = math.sqrt((vh // 16) * (vw // 16))
    gh, gw = spatial_grid(vh // 16, s), spatial_grid(vw // 16, s)
    for ch in range(2):
        rows += [((clock + a, 0.0, gw[0] if ch == 0 else gw[-1]), 4, 1.0) for a in range(sound_latents)]
    tr = (video_frames - 5) // 17 * 5 + 2
    times, span = frame_times(tr, clock)
    rows += [((t, y, x), 3, 0.999) for t in times for y in gh for x in gw]
    clock += max(float(sound_latents), span)
    # audio clip: at the clock with the target grid's width extremes
    for ch in range(2):
        rows += [((clock + a, 0.0, tgt_w[0] if ch == 0 else tgt_w[-1]), 4, 1.0) for a in range(audio_lat)]
    clock += audio_lat
    # targets
    for ch in range(2):
        rows += [((clock + a, 0.0, tgt_w[0] if ch == 0 else tgt_w[-1]), 2, 0.0) for a in range(A)]
    times, _ = frame_times(T, clock)
    rows += [((t, y, x), 1, 0.0) for t in times for y in tgt_h for x in tgt_w]
    return rows


@test
def ref2va_image_video_audio_layout_and_clip(env):
    lay_path = env.out("ref2va.layout")
    out = env.out("ref2va.mp4")
    r = env.generate("-p", "a fox, a test card and a tone", "-i", env.media + "/first.png", "-i",
                     env.media + "/clip.mp4", "--audio", env.media + "/tone.wav", "--ref-short-edge", "64",
                     "--ref-video-short-edge", "64", "--short-edge", "64", "--seed", "21", "-o", out, "--dump-layout",
                     lay_path, "-v", *QUICK)
    ok(r, "ref2va")
    check("ref2va" in r.stderr.splitlines()[0], "partition: %s", r.stderr.splitlines()[0])
    target = canvas_for(320, 180, 64)
    check_clip(out, *target, 22)
    lay = read_safetensors(lay_path)
    roles, tags, pos, row_t = lay["roles"], lay["tags"], lay["positions"], lay["row_t0"]
    L = roles.count(0)
    # references prepared by the reference's rules
    image = (round(320 * 64 / 180 / 32) * 32, 64)  # 2048-rule at short edge 64: 128x64
    video = canvas_for(160, 96, 64)                 # the canvas rule of its own aspect
    video_frames = 22                               # 1.5 s at 24 fps = 36, cut to the target's 22
    sound = audio_latents(22 / 24, 44100)
    clip = audio_latents(min(15.0, 22 / 24), 22050)
    # Qwen3-VL: the picture block, then one 2-frame block of the 2 fps samples (frames 0 and 12)
    ih, iw = smart_resize(image[1], image[0], 32, 65536, 16777216)
    vh, vw = smart_resize(video[1], video[0], 32, 4096, 25165824 // 2)
    runs = vision_runs(tags, roles)
    check(runs == [ih * iw // 1024 + 2, vh * vw // 1024 + 2], "vision blocks %r, expected %r", runs,
          [ih * iw // 1024 + 2, vh * vw // 1024 + 2])
    exp = expected_ref2va_layout(L, 22, target, image, video, video_frames, sound, clip)
    check(len(roles) == len(exp), "%d rows, the reference rules give %d", len(roles), len(exp))
    bad = [i for i, (p, role, t) in enumerate(exp)
           if role != roles[i] or any(abs(a - b) > 1e-9 * max(1.0, abs(b)) for a, b in zip(pos[i], p))
           or abs(row_t[i] - t) > 1e-6]
    check(not bad, "%d rows differ; first %d: got %r role %d t %g, expected %r role %d t %g", len(bad),
          bad[0] if bad else -1, pos[bad[0]] if bad else None, roles[bad[0]] if bad else -1,
          row_t[bad[0]] if bad else 0, exp[bad[0]][0] if bad else None, exp[bad[0]][1] if bad else -1,
          exp[bad[0]][2] if bad else 0)
    tag_exp = [1 if role == 0 else 2 if role in (2, 4) else 0 for _, role, _ in exp]
    check(tags[L:] == tag_exp[L:], "media row tags differ from the reference's (video 0, audio 2)")
    # index maps: pinned rows first, then the targets, in packed order
    vidx = [i for i, (_, role, _) in enumerate(exp) if role in (1, 3)]
    aidx = [i for i, (_, role, _) in enumerate(exp) if role in (2, 4)]
    check(lay["video_index"] == vidx and lay["audio_index"] == aidx, "index maps differ")
    # -v: one line per reference under the stage total, with what was encoded, by which encoder, where
    want = [r"reference 1 \(picture 320x180 -> %dx%d\): video VAE \d+\.\d\d s on cpu$" % image,
            r"reference 2 \(video 160x96 -> %dx%d, 22 frames = 2 clips\): video VAE \d+\.\d\d s, "
            r"audio VAE \d+\.\d\d s \(0\.92 s of sound\) on cpu$" % video,
            r"reference 3 \(audio 0\.92 s\): audio VAE \d+\.\d\d s on cpu$"]
    lines = [ln.strip() for ln in r.stderr.splitlines()]
    for pat in want:
        check(any(re.match(pat, ln) for ln in lines), "no line like %r in the -v output:\n%s", pat,
              "\n".join(ln for ln in lines if "reference" in ln))


@test
def ref2va_with_the_reference_kv_cache(env):
    out = env.out("ref2va_kv.mp4")
    r = env.generate("-p", "a card, kept", "-i", env.media + "/first.png", "--audio", env.media + "/tone.wav",
                     "--ref-short-edge", "64", "--short-edge", "64", "--seed", "21", "--ref-kv-cache", "-v", "-o", out,
                     *QUICK)
    ok(r, "--ref-kv-cache")
    check("reference KV cache:" in r.stderr and "pinned rows kept" in r.stderr, "the cache was not used: %s",
          r.stderr[-800:])
    check_clip(out, *canvas_for(320, 180, 64), 22)


# ------------------------------------------------------------ runner

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("MMH3_BUILD", "build"))
    ap.add_argument("tests", nargs="*")
    a = ap.parse_args()
    for tool in ("ffmpeg", "ffprobe"):
        if not shutil.which(tool):
            print("FAIL generate/tools: %s is not installed" % tool)
            return 1
    work = tempfile.mkdtemp(prefix="mmh3-generate-test-")
    env = Env(a.build, work)
    os.makedirs(env.out(""), exist_ok=True)
    try:
        t0 = time.time()
        gen = subprocess.run([os.path.join(env.build, "mmh3-gen-tiny"), "all", "--out", env.models],
                             capture_output=True, text=True)
        if gen.returncode != 0 or not os.path.isdir(os.path.join(env.models, "MiniMax-H3", "FL2VA")):
            print("FAIL generate/tiny_models: mmh3-gen-tiny all: %s" % (gen.stderr.strip() or gen.stdout.strip()))
            return 1
        make_media(env)
        print("PASS tiny_models_and_media (%.1fs)" % (time.time() - t0))
        failed = 0
        for t in TESTS:
            if a.tests and t.__name__ not in a.tests:
                continue
            t0 = time.time()
            try:
                t(env)
                print("PASS %s (%.1fs)" % (t.__name__, time.time() - t0), flush=True)
            except Skip as e:
                print("SKIP %s: %s" % (t.__name__, e), flush=True)
            except Exception as e:  # noqa: BLE001
                detail = str(e) if isinstance(e, AssertionError) else " | ".join(
                    traceback.format_exc().strip().splitlines()[-3:])
                print("FAIL %s: %s" % (t.__name__, detail), flush=True)
                failed += 1
        return 1 if failed else 0
    finally:
        if os.environ.get("MMH3_KEEP_TEST_DIR"):
            print("(kept %s)" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
