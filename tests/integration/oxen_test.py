#!/usr/bin/env python3
"""Integration tests of the Oxen.ai integration and the client-compatibility
APIs, through HTTP against the real stack (`mmh3 serve --mock`: PostgreSQL,
nginx, mmh3-fcgi) and real `mmh3 worker` processes, with a fake Oxen hub on
loopback (fake_oxen_hub.py) standing in for hub.oxen.ai. FFmpeg's ffprobe
checks the clips.

    tests/integration/oxen_test.py --build BUILD [TEST ...]

Prints one "PASS name" / "FAIL name: why" line per test.
"""
import argparse
import http.client
import json
import os
import subprocess
import sys
import time
import traceback
import uuid

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_oxen_hub import Hub  # noqa: E402
from server_test import make_adapters, schema_errors  # noqa: E402
from stack import Stack, short  # noqa: E402

KEY = "oxk-test-" + uuid.uuid4().hex  # the API key; must never show up anywhere but the hub's header
TERMINAL = ("succeeded", "failed", "cancelled")
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def check(cond, msg, *args):
    if not cond:
        raise AssertionError(msg % args if args else msg)


class Ctx:
    """The stack, the fake hub and the worker currently serving the queue."""

    def __init__(self, build):
        self.hub = Hub(KEY).start()
        self.s = Stack(build, mock_seconds=0.5, extra=["--no-worker", "--oxen-remote", self.hub.remote])
        self.worker = None

    def worker_args(self):
        return ["--mock", "--mock-seconds", "0.5", "--oxen-remote", self.hub.remote, "--oxen-poll", "0.5",
                "--oxen-timeout", "1"]

    def start_worker(self, configured=True):
        args = self.worker_args() if configured else ["--mock", "--mock-seconds", "0.5"]
        self.worker = self.s.start_worker(*args)
        return self.worker

    def stop_worker(self):
        if self.worker and self.worker.poll() is None:
            self.worker.terminate()
            self.worker.wait(30)

    def wait_worker_ready(self, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            st, body = self.s.get("/api/status")
            if st == 200 and any(w["online"] and w["pid"] == self.worker.pid and w["state"] == "idle"
                                 for w in body["workers"]):
                return
            time.sleep(0.1)
        raise AssertionError("worker %d did not become ready" % self.worker.pid)


def small(**kw):
    req = dict(prompt="a small test clip", frames=22, width=128, height=96, steps=8, preset="ultrafast")
    req.update(kw)
    return req


def probe(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                          "stream=codec_type,width,height,nb_read_frames", "-of", "json", path],
                         capture_output=True, text=True)
    check(out.returncode == 0, "ffprobe cannot read %s: %s", path, out.stderr.strip())
    return json.loads(out.stdout)["streams"]


def local_file(s, url):
    check(url and url.startswith("/api/files/"), "bad url %r", url)
    return os.path.join(s.outputs, url[len("/api/files/"):])


def wait(pred, timeout, what):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        last = pred()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError("timed out waiting for %s" % what)


def render_and_mirror(c, timeout=60, **kw):
    """Enqueues a small job; returns its row once it ended and its mirroring settled."""
    g = c.s.enqueue(**small(**kw))
    return c.s.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL and g["oxen_status"] in
                        (None, "mirrored", "failed"), timeout=timeout, what="the render and its mirroring")


def logs_contain(c, text):
    found = []
    for name in os.listdir(c.s.work):
        if name.endswith(".log"):
            with open(os.path.join(c.s.work, name), "rb") as f:
                if text.encode() in f.read():
                    found.append(name)
    return found


# ---------------------------------------------------------------- configuration

@test
def no_hub_traffic_without_a_key(c):
    """A worker given a remote but no key (none stored) makes no Oxen calls."""
    g = render_and_mirror(c)
    check(g["status"] == "succeeded", "render %s", short(g))
    time.sleep(1.5)  # a few agent rounds and claim polls
    check(c.hub.requests == [], "the hub was called: %r", c.hub.requests[:5])
    check(g["oxen_status"] is None and g["oxen_job_id"] is None, "oxen fields %r", g)


@test
def settings_store_the_key_write_only(c):
    st, body = c.s.request("PUT", "/api/settings", {"oxen_api_key": KEY, "rewrite_enabled": True,
                                                    "rewrite_model": "claude-sonnet-4-6"})
    check(st == 200 and body["has_oxen_api_key"] and KEY not in json.dumps(body), "%d %r", st, body)
    check("integrated_multimodal_description" in body["rewrite_system_prompt_default"], "default prompt %r",
          body.get("rewrite_system_prompt_default", "")[:80])
    st, body = c.s.get("/api/settings")
    check(KEY not in json.dumps(body), "the key came back")


# ---------------------------------------------------------------- mirroring

@test
def mirrored_success_uploads_the_clip_and_appends_rows(c):
    commits0 = len(c.hub.commits)
    g = render_and_mirror(c, prompt="a mirrored clip")
    gid = g["generation_id"]
    check(g["status"] == "succeeded" and g["oxen_status"] == "mirrored", "%s %r", short(g), g["oxen_message"])
    with open(local_file(c.s, g["result_url"]), "rb") as f:
        local = f.read()
    hub_path = "videos/%s.mp4" % gid
    check(c.hub.files.get(hub_path) == local, "the hub's %s differs from the local clip (%s vs %d bytes)", hub_path,
          len(c.hub.files.get(hub_path) or b""), len(local))
    rows = [r for r in c.hub.history() if r["generation_id"] == gid]
    check([r["status"] for r in rows] == ["processing", "succeeded"], "history rows %r", rows)
    done = rows[1]
    check(done["file"] == hub_path and done["model_name"] == "minimax-h3" and done["media_type"] == "video"
          and done["prompt"] == "a mirrored clip" and done["width"] == 128 and done["height"] == 96
          and done["frames"] == 22 and done["source"] == "local" and done["completed_at"] >= done["started_at"],
          "row %r", done)
    # The row's result_url is the hub's file route; the clip downloaded from it decodes.
    conn = http.client.HTTPConnection("127.0.0.1", c.hub.port, timeout=10)
    path = done["result_url"][len(c.hub.origin):]
    conn.request("GET", path, headers={"Authorization": "Bearer " + KEY})
    resp = conn.getresponse()
    data = resp.read()
    check(resp.status == 200 and data == local, "GET %s: %d", path, resp.status)
    copy = os.path.join(c.s.work, "from-hub.mp4")
    with open(copy, "wb") as f:
        f.write(data)
    video = [x for x in probe(copy) if x["codec_type"] == "video"][0]
    check(int(video["nb_read_frames"]) == 22 and video["width"] == 128, "hub copy %r", video)
    # Sequential commits: start record then final record; every call authenticated with the key.
    new = c.hub.commits[commits0:]
    check(len(new) >= 2 and "started" in new[-2]["message"] and hub_path in new[-1]["files"], "commits %r", new)
    check(all(a == "Bearer " + KEY for _, _, a in c.hub.requests), "a request without the key")
    check(all(KEY not in p for _, p, _ in c.hub.requests), "the key in a URL")
    check(not c.hub.workspaces, "workspaces left on the hub: %r", list(c.hub.workspaces))


def failure_case(c, mode, expect, setup=None, teardown=None):
    c.hub.mode = mode
    if setup:
        setup()
    try:
        t0 = time.time()
        g = render_and_mirror(c, prompt="hub trouble: " + mode, timeout=90)
    finally:
        c.hub.mode = "ok"
        if teardown:
            teardown()
    check(g["status"] == "succeeded", "the local render did not succeed: %s", short(g))
    streams = probe(local_file(c.s, g["result_url"]))
    check(any(x["codec_type"] == "video" and int(x["nb_read_frames"]) == 22 for x in streams), "clip %r", streams)
    check(g["oxen_status"] == "failed", "oxen_status %r (%r)", g["oxen_status"], g["oxen_message"])
    msg = g["oxen_message"] or ""
    check(expect.lower() in msg.lower(), "message %r lacks %r", msg, expect)
    check(KEY not in msg, "the key is in the message")
    return g, time.time() - t0


@test
def hub_401_is_recorded_and_the_render_succeeds(c):
    failure_case(c, "http401", "HTTP 401")


@test
def hub_500_is_retried_then_recorded(c):
    n0 = c.hub.count("PUT", "/api/repos/")
    failure_case(c, "http500", "HTTP 500")
    check(c.hub.count("PUT", "/api/repos/") - n0 >= 3, "500s were not retried")


@test
def hub_malformed_json_is_recorded(c):
    failure_case(c, "malformed", "not JSON")


@test
def hub_slow_times_out_and_is_recorded(c):
    c.hub.slow_seconds = 2.5  # the worker's --oxen-timeout is 1 s
    g, took = failure_case(c, "slow", "timed out")


@test
def hub_down_is_recorded(c):
    port = c.hub.port
    c.hub.stop()

    def back():
        c.hub.port = port
        c.hub.start()
    failure_case(c, "ok", "cannot connect", teardown=back)
    # The hub is back: the next render mirrors again.
    g = render_and_mirror(c, prompt="hub is back")
    check(g["oxen_status"] == "mirrored", "after the outage %s %r", g["oxen_status"], g["oxen_message"])


# ---------------------------------------------------------------- Oxen-style clients

@test
def oxen_style_request_is_accepted(c):
    st, body = c.s.request("POST", "/api/ai/queue", {"model": "minimax-h3", "prompt": "an oxen client request",
                                                     "duration": 1, "aspect_ratio": "9:16"})
    check(st == 200 and len(body["generations"]) == 1, "%d %r", st, body)
    g = body["generations"][0]
    check(g["model_name"] == "minimax-h3" and g["media_type"] == "video" and g["status"] == "queued", "%r", g)
    check(isinstance(g["enqueued_at"], int) and g["started_at"] is None and g["completed_at"] is None
          and g["result_url"] is None and g["error_message"] is None, "timestamps/urls %r", g)
    check(g["frames"] == 39 and (g["width"], g["height"]) == (768, 1344), "duration 1 s / 9:16 -> %d frames %dx%d",
          g["frames"], g["width"], g["height"])
    g = c.s.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL, timeout=90, what="the render")
    check(g["status"] == "succeeded" and isinstance(g["completed_at"], int) and g["result_url"], "%s", short(g))
    video = [x for x in probe(local_file(c.s, g["result_url"])) if x["codec_type"] == "video"][0]
    check((video["width"], video["height"]) == (768, 1344), "clip %r", video)
    # num_generations: one row each, seeds counting up; the model may pick the partition.
    st, body = c.s.request("POST", "/api/ai/queue", small(model="MiniMax-H3-fl2va", num_generations=3, seed=7,
                                                          duration=0.5, frames=None))
    check(st == 400 and body["error"]["field"] in ("frames", "duration"), "frames null + duration: %d %r", st, body)
    req = small(model="minimax-h3-fl2va", num_generations=3, seed=7, generate_audio=False)
    st, body = c.s.request("POST", "/api/ai/queue", req)
    check(st == 200 and [g["seed"] for g in body["generations"]] == [7, 8, 9], "%d %r", st, body)
    check(all(g["partition"] == "fl2va" and g["no_audio"] for g in body["generations"]), "rows %r",
          body["generations"])
    ids = [g["generation_id"] for g in body["generations"]]
    check(len(set(ids)) == 3, "ids %r", ids)
    for bad, field in (({"model": "kling-video-v2-6-pro-text-to-video"}, "model"), ({"num_generations": 5},
                       "num_generations"), ({"aspect_ratio": "16x9"}, "aspect_ratio"), ({"duration": "5"}, "duration"),
                       ({"aspect_ratio": "16:9", "size": "320x192"}, "aspect_ratio")):
        st, body = c.s.request("POST", "/api/ai/queue", dict({"prompt": "x"}, **bad))
        check(st == 400 and body["error"]["field"] == field, "%r -> %d %r", bad, st, body)
    for gid in ids:
        c.s.wait_for(gid, lambda g: g["status"] in TERMINAL, timeout=60, what="the batch")


# ---------------------------------------------------------------- /v1/videos

def make_png(c):
    path = os.path.join(c.s.work, "first.png")
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=320x180:rate=1", "-frames:v",
                    "1", path], check=True)
    with open(path, "rb") as f:
        return f.read()


@test
def v1_videos_create_poll_content(c):
    prompt = ("integrated_multimodal_description: [Shot 1] Live-action, a kettle on a stove. [Shot 2] At 00:00.500, "
              "the shot cuts to steam.\n\noverall_soundscape: A hiss.\n\nnon_diegetic_music: N/A")
    st, v = c.s.request("POST", "/v1/videos", {"task": "t2va", "prompt": prompt, "seed": 42, "steps": 8,
                                               "target": {"short_edge": 256, "aspect_ratio": "16:9",
                                                          "duration_seconds": 1}})
    check(st == 200 and v["object"] == "video" and v["status"] == "queued" and v["size"] == "448x256"
          and v["seconds"] == "1.625" and v["task"] == "t2va" and v["seed"] == 42 and v["progress"] == 0, "%d %r",
          st, v)
    vid = v["id"]
    st, body, _ = c.s.request("GET", "/v1/videos/%s/content" % vid, raw=True)
    check(st == 409, "content before completion: %d", st)
    seen = set()

    def done():
        st, v = c.s.get("/v1/videos/" + vid)
        check(st == 200, "GET /v1/videos/%s: %d", vid, st)
        seen.add(v["status"])
        return v if v["status"] in ("completed", "failed") else None
    v = wait(done, 60, "the video to complete")
    check(v["status"] == "completed" and v["progress"] == 100 and v["error"] is None
          and v["content_url"] == "/v1/videos/%s/content" % vid, "%r", v)
    check(seen <= {"queued", "in_progress", "completed"}, "statuses %r", seen)
    st, data, headers = c.s.request("GET", v["content_url"], raw=True)
    check(st == 200 and headers["content-type"] == "video/mp4", "content: %d %r", st, headers)
    path = os.path.join(c.s.work, "v1.mp4")
    with open(path, "wb") as f:
        f.write(data)
    video = [x for x in probe(path) if x["codec_type"] == "video"][0]
    check((video["width"], video["height"]) == (448, 256) and int(video["nb_read_frames"]) == 39, "%r", video)
    st, jpg, headers = c.s.request("GET", v["content_url"] + "?variant=thumbnail", raw=True)
    check(st == 200 and jpg[:3] == b"\xff\xd8\xff", "thumbnail %d %r", st, headers)
    st, _, _ = c.s.request("GET", "/internal/generations/%s.mp4" % vid, raw=True)
    check(st == 404, "the internal location is reachable from outside: %d", st)
    # The same job through our own API.
    g = c.s.generation(vid)
    check(g and g["seed"] == 42 and g["prompt"] == prompt, "generation %r", g)


@test
def v1_videos_takes_the_few_step_fields(c):
    """loras, sampler, sparse and cache on /v1/videos: the same checks and storage as /api/ai/queue (an adapter
    name the worker did not publish is refused with the ones it did)."""
    make_adapters(c.s, "turbo_style")
    body = {"task": "t2va", "prompt": "a kettle, quickly", "target": {"short_edge": 64, "duration_seconds": 0.25},
            "loras": [{"name": "turbo_style", "strength": 0.5}], "sampler": "turbo4", "sparse": "sol",
            "cache": "fbc:medium"}
    st, v = c.s.request("POST", "/v1/videos", body)
    check(st == 200 and v["status"] == "queued", "%d %r", st, v)
    g = c.s.generation(v["id"])
    check(g["loras"] == [{"name": "turbo_style", "strength": 0.5}] and g["sampler"] == "turbo4" and g["steps"] == 5
          and g["sparse"] == "sol" and g["cache"] == "fbc:medium", "stored %r",
          {k: g.get(k) for k in ("loras", "sampler", "steps", "sparse", "cache")})
    vid = v["id"]

    def ended():
        v = c.s.get("/v1/videos/" + vid)[1]
        return v if v["status"] in ("completed", "failed") else None
    v = wait(ended, 60, "the video to complete")
    check(v["status"] == "completed", "%r", v)
    st, err = c.s.request("POST", "/v1/videos", dict(body, loras=[{"name": "absent"}]))
    text = json.dumps(err)
    check(st == 400 and "loras[0].name" in text and "turbo_style.safetensors" in text, "%d %s", st, text)
    st, err = c.s.request("POST", "/v1/videos", dict(body, steps=8))
    check(st == 400 and "steps" in json.dumps(err), "steps with a sampler: %d %r", st, err)


@test
def v1_videos_conditions_and_openai_form(c):
    st, up = c.s.upload([("first.png", make_png(c))])
    check(st == 200, "upload %d %r", st, up)
    img = up["images"][0]
    st, v = c.s.request("POST", "/v1/videos", {"task": "i2va", "prompt": "the test card comes alive",
                                               "conditions": [{"type": "image", "url": img["url"]}],
                                               "target": {"short_edge": 256, "duration_seconds": 0.5},
                                               "steps": 4})
    check(st == 200 and v["task"] == "i2va", "%d %r", st, v)
    g = c.s.generation(v["id"])
    check(g["image_ids"] == [img["image_id"]] and g["last_image_id"] is None and g["partition"] == "fl2va",
          "i2va mapping %r", g)
    st, v2 = c.s.request("POST", "/v1/videos", {"task": "l2va", "prompt": "ends on the card",
                                                "conditions": [{"type": "image", "upload_id": img["image_id"]}],
                                                "target": {"short_edge": 256, "duration_seconds": 0.5}, "steps": 4})
    g2 = c.s.generation(v2["id"]) if st == 200 else None
    check(st == 200 and g2["image_ids"] == [] and g2["last_image_id"] == img["image_id"] and v2["task"] == "l2va",
          "l2va %d %r", st, v2)
    for bad in ({"task": "fl2va", "prompt": "x", "conditions": [{"upload_id": img["image_id"]}]},
                {"task": "t2va", "prompt": "x", "conditions": [{"upload_id": img["image_id"]}]},
                {"prompt": "x", "conditions": [{"url": "http://example.com/cat.png"}]},
                {"prompt": "x", "target": {"fps": 30}},
                {"prompt": "x", "negative_prompt": "blurry"}):
        st, body = c.s.request("POST", "/v1/videos", bad)
        check(st == 400 and body["error"]["message"] and body["error"]["type"] == "invalid_request_error"
              and "param" in body["error"] and "status" not in body, "%r -> %d %r (OpenAI's error shape)", bad, st,
              body)
    # A condition whose type is not the upload's kind is refused, naming it.
    st, body = c.s.request("POST", "/v1/videos", {"task": "ref2va", "prompt": "x",
                                                   "conditions": [{"type": "video", "upload_id": img["image_id"]}]})
    check(st == 400 and body["error"]["param"] == "conditions[0].type"
          and "is 'video', but upload %s is an image" % img["image_id"] in body["error"]["message"],
          "a picture sent as a video: %d %r", st, body)
    # OpenAI's SDK form: multipart text fields, seconds as a string, size WxH.
    boundary = "oxentest%d" % int(time.time())
    fields = {"model": "minimax-h3", "prompt": "an openai-style request", "seconds": "1", "size": "320x192",
              "seed": "5"}
    body = b"".join(("--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (boundary, k, v)).encode()
                    for k, v in fields.items()) + ("--%s--\r\n" % boundary).encode()
    st, v3 = c.s.request("POST", "/v1/videos", body, {"Content-Type": "multipart/form-data; boundary=" + boundary})
    check(st == 200 and v3["size"] == "320x192" and v3["seed"] == 5 and v3["model"] == "minimax-h3", "%d %r", st, v3)
    for vid in (v["id"], v2["id"], v3["id"]):
        c.s.wait_for(vid, lambda g: g["status"] in TERMINAL, timeout=90, what="the /v1 jobs")
    st, v3 = c.s.get("/v1/videos/" + v3["id"])
    check(v3["status"] == "completed", "%r", v3)


# ---------------------------------------------------------------- prompt rewrite

def rewrite(c, body):
    """POSTs /api/rewrite and reads the SSE answer as it arrives: [(time, event, data)]."""
    conn = http.client.HTTPConnection(c.s.base, timeout=60)
    conn.request("POST", "/api/rewrite", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if not resp.getheader("Content-Type", "").startswith("text/event-stream"):
        payload = resp.read()
        conn.close()
        return resp.status, json.loads(payload), b""
    events, ev, raw = [], {}, b""
    while True:
        line = resp.readline()
        if not line:
            break
        raw += line
        line = line.decode("utf-8").rstrip("\r\n")
        if line == "":
            if ev:
                events.append((time.time(), ev.get("event"), json.loads(ev.get("data", "null"))))
            ev = {}
        elif not line.startswith(":"):
            k, _, v = line.partition(":")
            ev[k] = v[1:] if v.startswith(" ") else v
    conn.close()
    return resp.status, events, raw


@test
def rewrite_streams_token_by_token(c):
    c.hub.chat_mode = "ok"
    st, events, raw = rewrite(c, {"prompt": "a lighthouse keeper in fog", "model": "claude-sonnet-4-6"})
    check(st == 200, "status %d %r", st, events)
    tokens = [d["token"] for _, e, d in events if e == "token"]
    check(tokens == c.hub.chat_tokens, "tokens %r", tokens)
    check(events[-1][1] == "done" and events[-1][2]["prompt"] == "".join(c.hub.chat_tokens), "done %r", events[-1])
    times = [t for t, e, _ in events if e == "token"]
    check(times[-1] - times[0] >= 0.25, "tokens arrived together (%.3f s apart): buffered, not relayed",
          times[-1] - times[0])
    sent = c.hub.chat_bodies[-1]
    body = sent["body"]
    check(sent["authorization"] == "Bearer " + KEY and body["stream"] is True and body["model"] == "claude-sonnet-4-6",
          "upstream request %r", {k: body[k] for k in ("model", "stream")})
    msgs = body["messages"]
    check(msgs[0]["role"] == "system" and "integrated_multimodal_description" in msgs[0]["content"]
          and "overall_soundscape" in msgs[0]["content"] and "non_diegetic_music" in msgs[0]["content"]
          and "<d>" in msgs[0]["content"] and msgs[1] == {"role": "user", "content": "a lighthouse keeper in fog"},
          "messages %r", msgs)
    check(KEY.encode() not in raw, "the key reached the browser")
    # A stored system prompt replaces the default.
    c.s.request("PUT", "/api/settings", {"rewrite_system_prompt": "Rewrite tersely."})
    rewrite(c, {"prompt": "a cat"})
    check(c.hub.chat_bodies[-1]["body"]["messages"][0]["content"] == "Rewrite tersely.", "system prompt not used")
    c.s.request("PUT", "/api/settings", {"rewrite_system_prompt": ""})


@test
def rewrite_upstream_errors_become_error_events(c):
    try:
        c.hub.chat_mode = "http401"
        st, events, raw = rewrite(c, {"prompt": "x"})
        check(st == 200 and [e for _, e, _ in events] == ["error"] and "401" in events[0][2]["message"], "401: %r",
              events)
        c.hub.chat_mode = "midstream_error"
        st, events, raw = rewrite(c, {"prompt": "x"})
        kinds = [e for _, e, _ in events]
        check(kinds == ["token", "token", "error"] and "overloaded" in events[-1][2]["message"], "mid-stream %r",
              events)
        c.hub.chat_mode = "cut"
        st, events, raw = rewrite(c, {"prompt": "x"})
        check([e for _, e, _ in events][-1] == "error" and "DONE" in events[-1][2]["message"], "cut %r", events)
        check(KEY.encode() not in raw, "the key reached the browser")
    finally:
        c.hub.chat_mode = "ok"
    port = c.hub.port
    c.hub.stop()
    try:
        st, events, raw = rewrite(c, {"prompt": "x"})
        check(st == 200 and events and events[-1][1] == "error" and "connect" in events[-1][2]["message"],
              "hub down %r", events)
    finally:
        c.hub.port = port
        c.hub.start()


@test
def rewrite_refusals_are_plain_errors(c):
    st, body, _ = rewrite(c, {"prompt": "x", "model": "gpt-something-expensive"})
    check(st == 400 and body["error"]["field"] == "model", "%d %r", st, body)
    st, body, _ = rewrite(c, {"prompt": "   "})
    check(st == 400 and body["error"]["field"] == "prompt", "%d %r", st, body)
    st, body, _ = rewrite(c, {"prompt": "x", "url": "http://evil/"})
    check(st == 400 and body["error"]["field"] == "url", "%d %r", st, body)
    c.s.request("PUT", "/api/settings", {"rewrite_enabled": False})
    st, body, _ = rewrite(c, {"prompt": "x"})
    check(st == 409 and "off" in body["status_message"], "%d %r", st, body)
    c.s.request("PUT", "/api/settings", {"rewrite_enabled": True, "oxen_api_key": None})
    n = len(c.hub.chat_bodies)
    st, body, _ = rewrite(c, {"prompt": "x"})
    check(st == 409 and "key" in body["status_message"] and len(c.hub.chat_bodies) == n, "%d %r", st, body)
    c.s.request("PUT", "/api/settings", {"oxen_api_key": KEY})


# ---------------------------------------------------------------- claim loop

@test
def claimed_hub_job_rendered_once_across_sigkill(c):
    c.hub.claim_delay = 3.0
    hub_id = c.hub.add_job("a hub job survives crashes", duration=1, aspect_ratio="16:9", size="256", steps=200,
                           seed=11)
    try:
        # 1. Killed while the hub holds the claim answer back: the claim is made, no local row yet.
        wait(lambda: c.hub.claims, 20, "the claim")
        c.worker.kill()
        c.worker.wait()
        rows = c.s.psql("SELECT count(*) FROM generations WHERE oxen_job_id = '%s'" % hub_id)
        check(rows == "0", "a local row already exists before the claim was answered: %s", rows)
        c.hub.claim_delay = 0
        c.start_worker()
        gid = wait(lambda: c.s.psql("SELECT id FROM generations WHERE oxen_job_id = '%s'" % hub_id), 30,
                   "the claimed job's local row")
        # 2. Killed mid-render: the local queue recovers the job; it is rendered to completion once.
        c.s.wait_for(gid, lambda g: g["status"] == "processing" and g["step"] > 0, timeout=30, what="the render")
        c.worker.kill()
        c.worker.wait()
        c.start_worker()
        g = c.s.wait_for(gid, lambda g: g["status"] in TERMINAL and g["oxen_status"] in ("mirrored", "failed"),
                         timeout=90, what="the job's end")
    finally:
        c.hub.claim_delay = 0
    check(g["status"] == "succeeded" and g["oxen_status"] == "mirrored" and g["oxen_job_id"] == hub_id,
          "%s %r %r", short(g), g["oxen_status"], g["oxen_message"])
    check((g["width"], g["height"], g["frames"], g["seed"], g["steps"]) == (448, 256, 39, 11, 200), "request %r", g)
    check(c.s.psql("SELECT count(*) FROM generations WHERE oxen_job_id = '%s'" % hub_id) == "1", "local rows")
    check(c.s.psql("SELECT count(*) FROM generations WHERE prompt = 'a hub job survives crashes'") == "1",
          "rows with the prompt")
    claim_ids = set(cid for hid, cid in c.hub.claims if hid == hub_id)
    check(claim_ids == {gid}, "claims %r (local id %s)", claim_ids, gid)
    done = [b for hid, b in c.hub.completions if hid == hub_id]
    check(len(done) == 1 and done[0]["status"] == "succeeded", "completions %r", done)
    job = c.hub.jobs[hub_id]
    check(job["status"] == "succeeded" and job["result_url"].endswith("/videos/%s.mp4" % gid), "hub job %r", job)
    uploads = c.hub.files.get("videos/%s.mp4" % gid)
    with open(local_file(c.s, g["result_url"]), "rb") as f:
        check(uploads == f.read(), "the uploaded clip is not the result")
    finals = [r for r in c.hub.history() if r["generation_id"] == gid and r["status"] == "succeeded"]
    check(len(finals) == 1 and finals[0]["source"] == "oxen" and finals[0]["oxen_job_id"] == hub_id, "rows %r",
          finals)
    # Jobs for other models, or that we cannot render, are left alone.
    other = c.hub.add_job("someone else's model", model="kling-video-v2-6-pro-text-to-video")
    refused = c.hub.add_job("needs an image", input_image="https://example.com/cat.png")
    time.sleep(2)
    check(c.hub.jobs[other]["status"] == "queued" and c.hub.jobs[refused]["status"] == "queued", "jobs %r %r",
          c.hub.jobs[other]["status"], c.hub.jobs[refused]["status"])
    check(c.s.psql("SELECT state FROM oxen_claims WHERE hub_generation_id = '%s'" % refused) == "refused",
          "the unrenderable job is not marked refused")


@test
def unconfigured_worker_makes_no_hub_traffic(c):
    c.stop_worker()
    c.start_worker(configured=False)
    c.wait_worker_ready()
    n = len(c.hub.requests)
    hub_id = c.hub.add_job("nobody should claim this")
    g = render_and_mirror(c, prompt="no oxen here")
    time.sleep(1.5)
    check(g["status"] == "succeeded" and g["oxen_status"] is None, "%s %r", short(g), g["oxen_status"])
    check(len(c.hub.requests) == n, "hub calls: %r", c.hub.requests[n:])
    check(c.hub.jobs[hub_id]["status"] == "queued", "the hub job was claimed")
    with c.hub.lock:
        c.hub.jobs.pop(hub_id)
    c.stop_worker()
    c.start_worker()


@test
def responses_match_the_openapi_document(c):
    _, doc = c.s.get("/openapi.json")
    for path in ("/api/rewrite", "/v1/videos", "/v1/videos/{id}", "/v1/videos/{id}/content"):
        check(path in doc["paths"], "%s is not documented", path)
    st, page = c.s.get("/api/ai/queue?limit=50")
    mirrored = [g for g in page["generations"] if g["oxen_status"] == "mirrored"]
    failed = [g for g in page["generations"] if g["oxen_status"] == "failed"]
    claimed = [g for g in page["generations"] if g["oxen_job_id"]]
    check(mirrored and failed and claimed, "the earlier tests left no mirrored/failed/claimed rows to check")
    st, video = c.s.get("/v1/videos/" + mirrored[0]["generation_id"])
    st, settings = c.s.get("/api/settings")
    st, err = c.s.request("POST", "/v1/videos", {"prompt": "x", "task": "nope"})
    cases = [("Generation", mirrored[0]), ("Generation", failed[0]), ("Generation", claimed[0]), ("Video", video),
             ("Settings", settings), ("OpenAIError", err)]
    problems = []
    for name, value in cases:
        problems += schema_errors(doc, {"$ref": "#/components/schemas/" + name}, value, name)
    check(not problems, "%d mismatches:\n    %s", len(problems), "\n    ".join(problems[:20]))


@test
def the_key_is_in_no_log(c):
    found = logs_contain(c, KEY)
    check(not found, "the key is written in %s", found)


# ---------------------------------------------------------------- runner

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("MMH3_BUILD", "build"))
    ap.add_argument("tests", nargs="*")
    a = ap.parse_args()
    chosen = [t for t in TESTS if not a.tests or t.__name__ in a.tests]
    c = Ctx(a.build)
    failed = 0
    try:
        c.start_worker()
        c.s.start()
        print("PASS oxen_stack_starts (serve --mock on %s, fake hub on %s)" % (c.s.base, c.hub.origin), flush=True)
    except Exception as e:  # noqa: BLE001
        print("FAIL oxen_stack_starts: %s" % e)
        c.s.stop()
        return 1
    for t in chosen:
        t0 = time.time()
        try:
            if c.worker.poll() is not None:
                c.start_worker()
            t(c)
            print("PASS %s (%.1fs)" % (t.__name__, time.time() - t0), flush=True)
        except Exception as e:  # noqa: BLE001
            failed += 1
            detail = str(e) if isinstance(e, AssertionError) else " | ".join(
                traceback.format_exc().strip().splitlines()[-3:])
            print("FAIL %s: %s" % (t.__name__, detail), flush=True)
    rc = c.s.stop()
    c.hub.stop()
    if rc != 0:
        failed += 1
        print("FAIL oxen_stack_stops: exit %r\n%s" % (rc, c.s.log_tail(15)))
    if failed:
        print("  (logs: %s)" % c.s.work)
        os.environ["MMH3_KEEP_TEST_DIR"] = "1"
    c.s.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
