#!/usr/bin/env python3
"""The serving stack with the REAL engine (not the mock) on tiny checkpoints:
`mmh3 serve --checkpoints DIR --device cpu` (PostgreSQL, nginx, mmh3-fcgi, a
worker running the MiniMax-H3 pipeline on random weights in the released
layouts written by `mmh3-gen-tiny all`), driven over HTTP. serve's engine
flags reach the worker process it starts (its argv, read from /proc).

    tests/integration/test_generate_server.py --build BUILD [TEST ...]

Checks what the worker promises with the real engine: status reports the h3
engine, residency and placement; a job runs through every stage to a
decodable mp4 with timings, seed and placement stored; the weights stay
resident (the second job has no loading stage); cancel stops at the next
forward; an engine error fails that job with its message and the worker
keeps serving; ref2va with an image, a video with sound and an audio clip.
Prints one "PASS name" / "FAIL name: why" line per test.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack, short  # noqa: E402
from test_generate import check, make_media, probe, write_safetensors  # noqa: E402

TERMINAL = ("succeeded", "failed", "cancelled")
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def engine_args(models):
    """The engine flags serve is given; it passes them on to its worker
    (small references keep the ref2va job quick on a CPU)."""
    return ["--checkpoints", models, "--device", "cpu", "--te-device", "cpu", "--cpu-threads", "2",
            "--ref-short-edge", "64", "--ref-video-short-edge", "64"]



class RealStack(Stack):
    """Stack with the h3 engine instead of `--mock`."""

    def __init__(self, build, models):
        super().__init__(build)
        self.models = models

    def start(self, timeout=120):
        log = open(self.log_path, "ab")
        args = [self.mmh3, "serve", "--listen", self.base, "--outputs", self.outputs] + engine_args(self.models)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MMH3_REF_")}
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("mmh3 serve exited (%s):\n%s" % (self.proc.returncode, self.log_tail()))
            try:
                st, body = self.get("/api/status")
                if st == 200 and body["engine"]["state"] == "ready":
                    return self
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        raise RuntimeError("the stack did not become ready:\n" + self.log_tail())


def small(**kw):
    """A quick request; a keyword given as None leaves that field out."""
    req = dict(prompt="a small real render", frames=22, width=64, height=64, steps=3, preset="ultrafast")
    req.update(kw)
    return {k: v for k, v in req.items() if v is not None}


def result_file(s, g):
    url = g["result_url"]
    check(url and url.startswith("/api/files/"), "bad result_url %r", url)
    return os.path.join(s.outputs, url[len("/api/files/"):])


def finish(s, gid, timeout=120):
    return s.wait_for(gid, lambda g: g["status"] in TERMINAL, timeout=timeout, what="the end")


@test
def status_reports_the_h3_engine(s):
    st, body = s.get("/api/status")
    check(st == 200 and body["engine"]["kind"] == "h3" and body["engine"]["state"] == "ready", "engine %r",
          body["engine"])
    details = body["engine"].get("details") or {}
    check(details.get("placement") == "dit=cpu text_encoder=cpu vae=cpu", "placement %r", details)


@test
def serve_passes_its_engine_flags_to_the_worker(s):
    """The worker process serve started got each engine flag serve was given
    (first spelling: --checkpoints arrives as --models-path), and no other."""
    with open("/proc/%d/cmdline" % s.pid("worker"), "rb") as f:
        argv = [a.decode() for a in f.read().split(b"\0") if a]
    check(argv[1] == "worker", "not a worker: %r", argv)
    want = [("--models-path", s.models), ("--device", "cpu"), ("--te-device", "cpu"), ("--threads", "2"),
            ("--ref-short-edge", "64"), ("--ref-video-short-edge", "64")]
    for flag, value in want:
        check(flag in argv and argv[argv.index(flag) + 1] == value, "worker argv lacks %s %s: %r", flag, value, argv)
    engine = [a for a in argv if a.startswith("--") and a not in ("--outputs", "--lease", "--max-attempts")]
    check(sorted(engine) == sorted(f for f, _ in want), "the worker got other flags: %r", engine)


@test
def job_runs_to_a_decodable_mp4_with_timings(s):
    g = s.enqueue(**small(seed=42, prompt="a fox in the snow"))
    g = finish(s, g["generation_id"])
    check(g["status"] == "succeeded", "job %s", short(g))
    v, a = probe(result_file(s, g))
    check((v["width"], v["height"], int(v["nb_read_frames"])) == (64, 64, 22), "clip %r", v)
    check(a is not None and int(a["channels"]) == 2, "audio %r", a)
    check(g["seed"] == 42, "seed %r", g["seed"])
    timings = g.get("timings") or {}
    for stage in ("encoding_prompt", "denoising", "decoding_video", "decoding_audio", "writing"):
        check(timings.get(stage, 0) > 0, "no %s time in %r", stage, timings)
    check(g.get("placement") in (None, "dit=cpu text_encoder=cpu vae=cpu") or "dit=cpu" in str(g.get("placement")),
          "placement %r", g.get("placement"))
    st, body = s.get("/api/status")
    check(body["engine"].get("resident") is True, "weights resident after a job: %r", body["engine"])


@test
def second_job_finds_the_weights_resident(s):
    g = s.enqueue(**small(seed=7, prompt="a second render"))
    g = finish(s, g["generation_id"])
    check(g["status"] == "succeeded", "job %s", short(g))
    check("loading" not in (g.get("timings") or {}), "the second job loaded weights again: %r", g.get("timings"))


@test
def cancel_stops_at_the_next_forward_and_the_worker_goes_on(s):
    g = s.enqueue(**small(steps=200, prompt="cancel me"))
    gid = g["generation_id"]
    s.wait_for(gid, lambda g: g["stage"] == "denoising" and g["step"] >= 1, timeout=60, what="denoising")
    st, body = s.request("DELETE", "/api/ai/queue/%s" % gid)
    check(st == 200 and body.get("action") == "cancelling", "cancel -> %d %r", st, body)
    g = finish(s, gid, timeout=30)
    check(g["status"] == "cancelled" and g["step"] < 20, "after cancel %s", short(g))
    g = finish(s, s.enqueue(**small(prompt="after the cancel"))["generation_id"])
    check(g["status"] == "succeeded", "next job %s", short(g))


@test
def engine_error_fails_the_job_and_the_worker_keeps_serving(s):
    media = os.path.join(s.work, "media")
    # 0.4 s: too short for a ref2va reference video (22 frames at 24 fps at least)
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=96x64:rate=24", "-t", "0.4",
                    "-c:v", "libx264", "-pix_fmt", "yuv420p", os.path.join(media, "short.mp4")], check=True)
    with open(os.path.join(media, "short.mp4"), "rb") as f:
        st, up = s.upload([("short.mp4", f.read())])
    check(st == 200, "upload %d %r", st, up)
    g = s.enqueue(**small(prompt="too short", partition="ref2va", image_ids=up["image_ids"]))
    g = finish(s, g["generation_id"])
    check(g["status"] == "failed" and "22" in (g.get("error_message") or ""), "job %s", short(g))
    g = finish(s, s.enqueue(**small(prompt="after a failure"))["generation_id"])
    check(g["status"] == "succeeded", "next job %s", short(g))


@test
def ref2va_image_video_with_sound_and_audio(s):
    media = os.path.join(s.work, "media")
    ids = []
    for name in ("first.png", "clip.mp4", "tone.wav"):
        with open(os.path.join(media, name), "rb") as f:
            st, up = s.upload([(name, f.read())])
        check(st == 200, "upload %s: %d %r", name, st, up)
        ids += up["image_ids"]
    g = s.enqueue(**small(prompt="a fox, a card and a tone", image_ids=ids, partition="ref2va", width=96))
    g = finish(s, g["generation_id"])
    check(g["status"] == "succeeded", "job %s", short(g))
    check(g.get("timings", {}).get("encoding_references", 0) > 0, "references were encoded: %r", g.get("timings"))
    v, a = probe(result_file(s, g))
    check((v["width"], v["height"], int(v["nb_read_frames"])) == (96, 64, 22) and a is not None, "clip %r %r", v, a)


def decoded_frames(path):
    """The clip's video decoded to raw RGB (FFmpeg reading what we wrote), and its audio as raw PCM."""
    def raw(*sel):
        r = subprocess.run(["ffmpeg", "-v", "error", "-i", path, *sel, "-"], capture_output=True)
        check(r.returncode == 0, "ffmpeg could not decode %s: %s", path, r.stderr[-300:])
        return r.stdout
    return raw("-map", "0:v:0", "-f", "rawvideo", "-pix_fmt", "rgb24"), raw("-map", "0:a:0?", "-f", "s16le")


def make_adapter(s, name, seed):
    """A tiny random adapter for the tiny DiT (the project's generator), in the adapter folder."""
    r = subprocess.run([os.path.join(s.build, "mmh3-gen-tiny"), "lora", "--seed", str(seed), "--rank", "8",
                        "--alpha", "4", "--gain", "0.5", "--out", os.path.join(s.models, "loras", name)],
                       capture_output=True, text=True)
    check(r.returncode == 0, "mmh3-gen-tiny lora: %s", r.stderr)


def catalogue(s, want=None, timeout=20):
    """GET /api/loras once it lists `want` (a name), or at once."""
    end = time.time() + timeout
    while True:
        st, body = s.get("/api/loras")
        check(st == 200, "GET /api/loras -> %d %r", st, body)
        names = [e["name"] for e in body["loras"]]
        if want is None or want in names or time.time() > end:
            return body, names
        time.sleep(0.3)


@test
def adapters_are_listed_and_applied_like_the_cli(s):
    """A tiny real adapter through POST /api/ai/queue: GET /api/loras lists it with what its header says; the
    clip differs from the same seed without it and decodes to the same frames and samples as
    `mmh3 generate --lora` for the same request on the same engine flags."""
    body, names = catalogue(s, "style.safetensors")
    check(body["published"] is True and "style.safetensors" in names, "the catalogue %r", body)
    entry = next(e for e in body["loras"] if e["name"] == "style.safetensors")
    check(entry["family"] == "generic" and entry["rank"] == 8 and entry["alpha"] == 4 and not entry.get("error")
          and entry["bytes"] == os.path.getsize(os.path.join(s.models, "loras", "style.safetensors")),
          "the entry %r", entry)
    req = small(seed=31, prompt="an ink painting of a fox")
    plain = finish(s, s.enqueue(**req)["generation_id"])
    styled = finish(s, s.enqueue(**req, loras=[{"name": "style", "strength": 0.75}])["generation_id"])
    check(plain["status"] == "succeeded" and styled["status"] == "succeeded", "jobs %s / %s", short(plain),
          short(styled))
    check(styled["loras"] == [{"name": "style", "strength": 0.75}], "stored loras %r", styled["loras"])
    served = decoded_frames(result_file(s, styled))
    check(served[0] != decoded_frames(result_file(s, plain))[0], "the adapter did not change the frames")
    out = os.path.join(s.work, "cli_style.mp4")
    cmd = [s.mmh3, "generate", "-p", req["prompt"], "--seed", "31", "--frames", "22", "--size", "64x64",
           "--steps", "3", "--preset", "ultrafast", "--lora", "style:0.75", "--plain", "-o", out] + engine_args(s.models)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, "mmh3 generate --lora: %s", r.stderr[-600:])
    cli = decoded_frames(out)
    check(cli[0] == served[0], "the server's frames differ from the CLI's (%d vs %d bytes)", len(served[0]),
          len(cli[0]))
    check(cli[1] == served[1], "the server's audio differs from the CLI's")


@test
def adapters_switch_per_job_without_touching_the_base(s):
    """Jobs with adapter A, then B, then none, then A again on the one resident engine: each renders the
    frames a job alone would (A again = A, none = the base's), so switching never changed a base weight and
    a resident adapter is the one the file holds; the engine keeps both resident (GET /api/status)."""
    make_adapter(s, "other.safetensors", 5)
    catalogue(s, "other.safetensors")
    req = small(seed=77, prompt="a lighthouse at dusk")
    frames = {}
    for key, loras in (("base", None), ("a", [{"name": "style"}]), ("b", [{"name": "other", "strength": -0.5}]),
                       ("none", None), ("a_again", [{"name": "style"}])):
        g = finish(s, s.enqueue(**req, **({"loras": loras} if loras else {}))["generation_id"])
        check(g["status"] == "succeeded", "%s: %s", key, short(g))
        frames[key] = decoded_frames(result_file(s, g))[0]
    check(len({frames["base"], frames["a"], frames["b"]}) == 3, "A, B and the base are not three different clips")
    check(frames["none"] == frames["base"], "after two adapters the base renders differently")
    check(frames["a_again"] == frames["a"], "adapter A rendered differently after B")
    st, body = s.get("/api/status")
    loras = ((body["engine"].get("details") or {}).get("loras") or {})
    # (bytes may be 0 on the CPU, where an adapter's tensors are views of the mapped file)
    check(loras.get("resident") == 2, "resident adapters %r", loras)


@test
def unknown_adapter_names_are_refused_with_the_known_ones(s):
    catalogue(s, "style.safetensors")
    st, body = s.request("POST", "/api/ai/queue", small(loras=[{"name": "absent"}]))
    check(st == 400, "absent adapter -> %d %r", st, body)
    text = json.dumps(body)
    for needle in ("loras[0].name", "absent", "style.safetensors"):
        check(needle in text, "the refusal lacks %r: %s", needle, text)
    st, body = s.request("POST", "/api/ai/queue", small(loras=[{"name": "../dit"}]))
    check(st == 400 and "loras[0].name" in json.dumps(body), "a name that climbs out -> %d %r", st, body)


@test
def a_malformed_adapter_fails_its_job_naming_the_file(s):
    """A file the catalogue lists with its problem; a job naming it fails with a message naming the file and
    the key (not where the server keeps it), and the worker goes on."""
    path = os.path.join(s.models, "loras", "broken.safetensors")
    write_safetensors(path, {"blocks.0.attn.wobble.lora_A.weight": ([2, 2], [0.0] * 4)})
    body, _ = catalogue(s, "broken.safetensors")
    entry = next(e for e in body["loras"] if e["name"] == "broken.safetensors")
    check("blocks.0.attn.wobble" in (entry.get("error") or ""), "the catalogue's entry %r", entry)
    check(s.models not in json.dumps(body), "the catalogue shows the server's folders: %r", body)
    g = finish(s, s.enqueue(**small(loras=[{"name": "broken"}]))["generation_id"])
    msg = g.get("error_message") or ""
    check(g["status"] == "failed" and "broken.safetensors" in msg and "blocks.0.attn.wobble.lora_A.weight" in msg,
          "job %s", short(g))
    check(s.models not in msg, "the message shows the server's folders: %s", msg)
    os.unlink(path)
    body, names = catalogue(s)
    g = finish(s, s.enqueue(**small(prompt="after a bad adapter"))["generation_id"])
    check(g["status"] == "succeeded", "next job %s", short(g))


@test
def sampler_sparse_and_cache_reach_the_engine(s):
    """A sampler preset sets the forwards (turbo4: 4), a step cache that skips everything its guards allow
    (the first and the last forward computed, at most 2 skipped in a row) says which forwards it skipped,
    sparse attention reports a density per forward; all in the stored timings."""
    g = finish(s, s.enqueue(**small(steps=None, sampler="turbo4", cache="fbc:1e9,warmup=1,max-cached=2",
                                    sparse="sol"))["generation_id"])
    check(g["status"] == "succeeded", "job %s", short(g))
    t = g.get("timings") or {}
    check(g["total_steps"] == 4 and t.get("forwards") == 4, "forwards: total_steps %r, timings %r",
          g["total_steps"], t)
    sc = t.get("step_cache") or {}
    check(sc == {"policy": "fbc:1e+09,warmup=1,max-cached=2", "forwards": 4, "skipped": 2, "skipped_forwards": [2, 3]},
          "step_cache %r", sc)
    check(g["cache"] == "fbc:1e+09,warmup=1,max-cached=2", "stored cache %r", g["cache"])
    d = t.get("sparse_density")
    check(isinstance(d, list) and len(d) == 4 and all(0 < x <= 1 for x in d), "sparse_density %r", d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("MMH3_BUILD", "build"))
    ap.add_argument("tests", nargs="*")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    if subprocess.run([os.path.join(build, "mmh3"), "serve", "--help"], capture_output=True).returncode != 0:
        print("FAIL generate_server/build: no serving stack in this build")
        return 1
    work = tempfile.mkdtemp(prefix="mmh3-real-server-")
    os.chmod(work, 0o755)
    models = os.path.join(work, "models")
    gen = subprocess.run([os.path.join(build, "mmh3-gen-tiny"), "all", "--out", models], capture_output=True,
                         text=True)
    if gen.returncode != 0:
        print("FAIL generate_server/tiny_models: %s" % gen.stderr.strip())
        return 1
    s = RealStack(build, models)
    s.work = work
    os.makedirs(os.path.join(models, "loras"), exist_ok=True)
    make_adapter(s, "style.safetensors", 3)

    class M:
        pass
    m = M()
    m.media = os.path.join(work, "media")
    make_media(m)
    failed = 0
    try:
        s.start()
        print("PASS real_stack_starts (serve with the h3 engine on %s)" % s.base)
        for t in TESTS:
            if a.tests and t.__name__ not in a.tests:
                continue
            t0 = time.time()
            try:
                t(s)
                print("PASS %s (%.1fs)" % (t.__name__, time.time() - t0), flush=True)
            except Exception as e:  # noqa: BLE001
                detail = str(e) if isinstance(e, AssertionError) else " | ".join(
                    traceback.format_exc().strip().splitlines()[-3:])
                print("FAIL %s: %s" % (t.__name__, detail), flush=True)
                failed += 1
    except Exception as e:  # noqa: BLE001
        print("FAIL real_stack_starts: %s" % e)
        failed += 1
    finally:
        s.stop()
        if failed:
            print("(worker log tail)\n" + s.log_tail(30))
        if os.environ.get("MMH3_KEEP_TEST_DIR"):
            print("(kept %s)" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
