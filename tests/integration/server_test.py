#!/usr/bin/env python3
"""Integration tests of the serving stack, through HTTP against real
components: PostgreSQL (a private cluster), nginx, mmh3-fcgi and mock-engine
workers, all started by `mmh3 serve --mock`. FFmpeg's ffprobe checks the clips.

    tests/integration/server_test.py --build BUILD [TEST ...]

Prints one "PASS name" / "FAIL name: why" line per test.
"""
import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Events, Stack, short  # noqa: E402

STAGES = ["queued", "loading", "encoding_prompt", "encoding_references", "denoising", "decoding_video",
          "decoding_audio", "writing"]
TERMINAL = ("succeeded", "failed", "cancelled")
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def check(cond, msg, *args):
    if not cond:
        raise AssertionError(msg % args if args else msg)


def small(**kw):
    """A quick render: tiny canvas, few frames and steps, fast encoder."""
    req = dict(prompt="a small test clip", frames=22, width=128, height=96, steps=8, preset="ultrafast")
    req.update(kw)
    return {k: v for k, v in req.items() if v is not None}  # None leaves a field out


def probe(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                          "stream=codec_type,codec_name,width,height,nb_read_frames,sample_rate,channels",
                          "-of", "json", path], capture_output=True, text=True)
    check(out.returncode == 0, "ffprobe cannot read %s: %s", path, out.stderr.strip())
    return json.loads(out.stdout)["streams"]


def file_path(s, url):
    check(url and url.startswith("/api/files/"), "bad result_url %r", url)
    return os.path.join(s.outputs, url[len("/api/files/"):])


# ---------------------------------------------------------------- basics

@test
def status_reports_mock_engine(s):
    st, body = s.get("/api/status")
    check(st == 200, "status %d", st)
    check(body["engine"]["kind"] == "mock" and body["engine"]["state"] == "ready", "engine %r", body["engine"])
    check("mock" in body["engine"]["message"], "the message says it is the mock: %r", body["engine"]["message"])
    check(any(w["online"] and w["engine_kind"] == "mock" for w in body["workers"]), "workers %r", body["workers"])
    check(set(body["queue"]) == set(["queued", "processing", "succeeded", "failed", "cancelled"]), "queue %r",
          body["queue"])


@test
def status_forgets_dead_workers(s):
    """A worker whose heartbeat is older than the lease (its process died without a word) is no longer listed,
    whatever state it last wrote; one beating now is."""
    ids = ["dead-%d" % i for i in range(3)] + ["alive-0"]
    for wid in ids[:3]:
        s.psql("INSERT INTO workers (id, hostname, pid, engine_kind, state, heartbeat_at) VALUES "
               "('%s', 'gone', 1, 'mock', 'busy', now() - interval '10 minutes')" % wid)
    s.psql("INSERT INTO workers (id, hostname, pid, engine_kind, state) VALUES ('alive-0', 'here', 2, 'mock', 'idle')")
    try:
        st, body = s.get("/api/status")
        listed = [w["worker_id"] for w in body["workers"]]
        check(st == 200 and not any(w.startswith("dead-") for w in listed), "dead workers listed: %r", listed)
        check("alive-0" in listed, "a beating worker is missing: %r", listed)
    finally:
        s.psql("DELETE FROM workers WHERE id IN (%s)" % ",".join("'%s'" % w for w in ids))


@test
def head_answers_where_get_does(s):
    """HEAD on every GET route: GET's status and content type, no body; the event stream answers at once."""
    g = s.enqueue(**small(prompt="a head request"))
    gid = g["generation_id"]
    s.request("DELETE", "/api/ai/queue/" + gid)
    for path in ("/api/status", "/api/ai/queue", "/api/ai/queue/" + gid, "/api/settings", "/openapi.json",
                 "/v1/videos", "/v1/videos/" + gid, "/api/ai/queue/00000000-0000-4000-8000-000000000000",
                 "/api/events"):
        st_get, _, h_get = (200, None, {"content-type": "text/event-stream"}) if path == "/api/events" else \
            s.request("GET", path, raw=True)
        conn = http.client.HTTPConnection(s.base, timeout=10)
        conn.request("HEAD", path, headers={"Authorization": "Bearer " + s.token} if s.token else {})
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        check(resp.status == st_get and resp.getheader("content-type", "").split(";")[0] ==
              h_get["content-type"].split(";")[0] and body == b"",
              "HEAD %s: %d %r (GET: %d %r)", path, resp.status, resp.getheader("content-type"), st_get,
              h_get["content-type"])


@test
def the_queue_view_reads_in_psql(s):
    """psql's view of the queue: status, stage, step, attempts, times and the head of the prompt, newest first."""
    g = s.enqueue(**small(prompt="a view   of the\nqueue " + "x" * 80))
    try:
        row = s.psql("SELECT id, status IN ('queued', 'processing'), attempts <= 1, enqueued IS NOT NULL, prompt_head "
                     "FROM queue LIMIT 1")
        check(row == "%s|t|t|t|a view of the queue %s" % (g["generation_id"], "x" * 40), "first row %r", row)
        cols = s.psql("SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM information_schema.columns "
                      "WHERE table_name = 'queue'")
        check(cols == "id,status,stage,step,attempts,canvas,enqueued,started,completed,seconds,worker,prompt_head,"
                      "error", "columns %r", cols)
        # mmh3 db: psql on the same database, found from the outputs folder, with the view to read.
        out = subprocess.run([s.mmh3, "db", "--outputs", s.outputs, "-X", "-At", "-c",
                              "SELECT status FROM queue WHERE id = '%s'" % g["generation_id"]],
                             capture_output=True, text=True, timeout=30)
        check(out.returncode == 0 and out.stdout.strip() in ("queued", "processing", "cancelled", "succeeded"),
              "mmh3 db: %d %r %r", out.returncode, out.stdout, out.stderr)
        out = subprocess.run([s.mmh3, "db", "--outputs", os.path.join(s.work, "no-such-outputs"), "-c", "SELECT 1"],
                             capture_output=True, text=True, timeout=30)
        check(out.returncode == 1 and "no running mmh3 serve" in out.stderr, "mmh3 db without a server: %d %r",
              out.returncode, out.stderr)
    finally:
        s.request("DELETE", "/api/ai/queue/" + g["generation_id"])


@test
def openapi_document_at_openapi_json(s):
    st, body, headers = s.request("GET", "/openapi.json", raw=True)
    check(st == 200 and headers["content-type"].startswith("application/json"), "%d %r", st, headers)
    doc = json.loads(body)
    check(doc["openapi"].startswith("3."), "openapi %r", doc.get("openapi"))
    for path in ("/api/ai/queue", "/api/ai/queue/{id}", "/api/images", "/api/events", "/api/status",
                 "/api/settings"):
        check(path in doc["paths"], "%s missing from the document", path)


def schema_errors(doc, schema, value, path="$"):
    """The JSON Schema subset the OpenAPI document uses: $ref, type (with null),
    enum, const, required, properties, additionalProperties, items, oneOf, minimum/maximum."""
    if "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    errs = []
    if "oneOf" in schema:
        if not any(not schema_errors(doc, alt, value, path) for alt in schema["oneOf"]):
            errs.append("%s: matches no alternative" % path)
        return errs
    types = schema.get("type")
    if types:
        types = types if isinstance(types, list) else [types]
        pytypes = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict,
                   "array": list, "null": type(None)}
        ok = any(isinstance(value, pytypes[t]) and not (t in ("integer", "number") and isinstance(value, bool))
                 for t in types)
        if not ok:
            return ["%s: %r is not %s" % (path, value, types)]
    if "enum" in schema and value not in schema["enum"]:
        errs.append("%s: %r not in %r" % (path, value, schema["enum"]))
    if "const" in schema and value != schema["const"]:
        errs.append("%s: %r != %r" % (path, value, schema["const"]))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errs.append("%s: %r < %r" % (path, value, schema["minimum"]))
        if "maximum" in schema and value > schema["maximum"]:
            errs.append("%s: %r > %r" % (path, value, schema["maximum"]))
    if isinstance(value, dict):
        for k in schema.get("required", []):
            if k not in value:
                errs.append("%s: missing %s" % (path, k))
        props = schema.get("properties", {})
        for k, v in value.items():
            if k in props:
                errs += schema_errors(doc, props[k], v, path + "." + k)
            elif isinstance(schema.get("additionalProperties"), dict):
                errs += schema_errors(doc, schema["additionalProperties"], v, path + "." + k)
            elif props and schema.get("additionalProperties") is not True:
                errs.append("%s: undocumented field %s" % (path, k))
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            errs += schema_errors(doc, schema["items"], v, "%s[%d]" % (path, i))
    return errs


@test
def responses_match_the_openapi_document(s):
    _, doc = s.get("/openapi.json")
    g = s.enqueue(**small(prompt="schema check"))
    g = s.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL, what="the end")
    st, page = s.get("/api/ai/queue?limit=5")
    st, status = s.get("/api/status")
    st, settings = s.get("/api/settings")
    st, err = s.request("POST", "/api/ai/queue", {"prompt": "x", "frames": 1})
    cases = [("Generation", g), ("GenerationList", page), ("Status", status), ("Settings", settings), ("Error", err)]
    if s.upload([("x.txt", b"x")])[0] != 503:
        media = make_media(s.work)
        st, up = s.upload([("a.png", media["a.png"])])
        cases.append(("Upload", up["images"][0]))
    problems = []
    for name, value in cases:
        problems += schema_errors(doc, {"$ref": "#/components/schemas/" + name}, value, name)
    check(not problems, "%d mismatches:\n    %s", len(problems), "\n    ".join(problems[:20]))


@test
def unknown_routes_and_methods(s):
    st, body = s.get("/api/nope")
    check(st == 404 and body["status"] == "error", "%d %r", st, body)
    st, body = s.request("PUT", "/api/ai/queue")
    check(st == 405 and body["error"]["accepted"], "%d %r", st, body)
    st, body = s.get("/api/ai/queue/not-a-uuid")
    check(st == 404, "%d", st)
    st, body = s.get("/api/ai/queue/" + str(uuid.uuid4()))
    check(st == 404 and "no generation" in body["error"]["message"], "%d %r", st, body)


@test
def app_shell_and_deep_links(s):
    for path in ("/", "/g/" + str(uuid.uuid4())):
        st, body, headers = s.request("GET", path, raw=True)
        check(st == 200 and headers["content-type"].startswith("text/html"), "%s: %d %r", path, st, headers)


# ---------------------------------------------------------------- the main path

@test
def enqueue_progress_over_sse_to_decodable_mp4(s):
    ev = Events(s.base)
    try:
        check(ev.status == 200 and ev.headers["content-type"].startswith("text/event-stream"), "SSE %d %r",
              ev.status, ev.headers)
        g = s.enqueue(**small(prompt="a red fox in the snow", frames=39, width=160, height=96, steps=10, seed=1234))
        gid = g["generation_id"]
        check(g["status"] == "queued" and g["seed"] == 1234 and not g["seed_drawn"], "enqueued %s", short(g))
        done = ev.wait(lambda e: e.get("event") == "generation_update" and e["json"]["generation_id"] == gid
                       and e["json"]["status"] in TERMINAL, timeout=60, what="terminal update")
        g = done["json"]
        check(g["status"] == "succeeded", "ended %s", short(g))
        updates = [e for e in ev.of(gid) if e.get("event") == "generation_update"]
        ids = [int(e["id"]) for e in updates]
        check(ids == sorted(ids) and len(set(ids)) == len(ids), "event ids not increasing: %r", ids)
        check(all(int(e["id"]) == e["json"]["seq"] for e in updates), "event id != seq")
        stages = []
        for e in updates:
            if e["json"]["status"] == "processing" and (not stages or stages[-1] != e["json"]["stage"]):
                stages.append(e["json"]["stage"])
        check(stages == [x for x in STAGES if x in stages], "stages out of order: %r", stages)
        # The mock's short stages (40-60 ms) can share a relay batch with their
        # neighbour when the machine is slow (a sanitizer build), and a batch
        # carries the newest snapshot: most, not all, must be seen.
        check("denoising" in stages, "stage denoising never reported (saw %r)", stages)
        seen = [x for x in ("encoding_prompt", "decoding_video", "decoding_audio", "writing") if x in stages]
        check(len(seen) >= 3, "only %r of the short stages reported (saw %r)", seen, stages)
        # Steps are stored at most every 100 ms and a relay batch carries the
        # newest snapshot, so a fast mock job shows a subset of its steps.
        steps = [e["json"]["step"] for e in updates if e["json"]["stage"] == "denoising"]
        check(len(set(steps)) >= 2 and steps == sorted(steps) and max(steps) <= 9, "denoising steps %r", steps)
        check(g["step"] == 9 and g["total_steps"] == 9, "final step %d of %d", g["step"], g["total_steps"])
        # Past denoising the steps are all done: decoding and writing keep step 9 of 9, not 0.
        after = [(e["json"]["stage"], e["json"]["step"]) for e in updates if e["json"]["status"] == "processing"
                 and e["json"]["stage"] in ("decoding_video", "decoding_audio", "writing")]
        check(after and all(step == 9 for _, step in after), "steps after denoising %r", after)
        check(all(e["json"]["total_steps"] == 9 for e in updates if e["json"]["stage"] == "denoising"),
              "total_steps")
        check(g["progress"] == 1 and g["completed_at"] >= g["started_at"] >= g["enqueued_at"], "times %s", g)
        check(g["timings"].get("denoising", 0) > 0 and g["total_seconds"] > 0, "timings %r", g["timings"])
        check(g["attempts"] == 1 and g["worker_id"], "claim %s", short(g))
        path = file_path(s, g["result_url"])
        check(not os.path.exists(path + ".part"), "a .part file was left behind")
        streams = probe(path)
        video = [x for x in streams if x["codec_type"] == "video"]
        audio = [x for x in streams if x["codec_type"] == "audio"]
        check(len(video) == 1 and video[0]["width"] == 160 and video[0]["height"] == 96, "video %r", video)
        check(int(video[0]["nb_read_frames"]) == 39, "decoded %s frames, 39 requested", video[0]["nb_read_frames"])
        check(len(audio) == 1 and audio[0]["sample_rate"] == "32000" and audio[0]["channels"] == 2, "audio %r",
              audio)
        # nginx serves the file (Range too), with nosniff.
        st, body, headers = s.request("GET", g["result_url"], headers={"Range": "bytes=0-99"}, raw=True)
        check(st == 206 and len(body) == 100 and headers.get("content-type") == "video/mp4", "range: %d %r", st,
              headers)
        check(headers.get("x-content-type-options") == "nosniff", "nosniff header %r", headers)
        st, body, headers = s.request("GET", g["poster_url"] or "/none", raw=True)
        check(st == 200 and headers.get("content-type") == "image/jpeg" and body[:2] == b"\xff\xd8",
              "poster %r -> %d", g["poster_url"], st)
    finally:
        ev.close()


@test
def live_previews_over_sse_then_the_clip(s):
    """The mock engine's previews reach two real SSE streams as generation_preview
    events (newer seq, later step), nginx serves each URL as a JPEG strip while the
    job renders, and when it ends the file and its record are gone."""
    ev, ev2 = Events(s.base), Events(s.base)
    try:
        g = s.enqueue(**small(steps=100))  # about 2.5 s of denoising with --mock-seconds 1: several previews
        gid = g["generation_id"]
        first = ev.wait(lambda e: e.get("event") == "generation_preview" and e["json"]["generation_id"] == gid,
                        timeout=60, what="a preview")["json"]
        check("id" not in first and first["url"].startswith("/api/files/previews/%s.jpg?seq=" % gid),
              "preview event %r", first)
        # 22 frames = 7 latent frames; a 128x96 canvas is 8x6 latents, 342x256 in the strip (341.3, even)
        check((first["frames"], first["frame_width"], first["frame_height"]) == (7, 342, 256), "geometry %r", first)
        st, body, headers = s.request("GET", first["url"], raw=True)
        check(st == 200 and headers.get("content-type") == "image/jpeg" and body[:2] == b"\xff\xd8",
              "the preview URL: %d %r", st, headers)
        check(headers.get("cache-control") == "no-store", "previews are not cached: %r", headers)
        jpg = os.path.join(s.work, "preview-%s.jpg" % gid)
        with open(jpg, "wb") as f:
            f.write(body)
        v = [x for x in probe(jpg) if x["codec_type"] == "video"]
        check(v and (v[0]["width"], v[0]["height"]) == (7 * 342, 256), "FFmpeg decodes the strip: %r", v)
        st, _, _ = s.request("GET", first["url"], headers={"Host": "evil.example"}, raw=True)
        check(st in (400, 403), "the guard runs before nginx serves it: %d for a foreign Host", st)
        done = ev.wait(lambda e: e.get("event") == "generation_update" and e["json"]["generation_id"] == gid
                       and e["json"]["status"] in TERMINAL, timeout=60, what="terminal update")
        check(done["json"]["status"] == "succeeded", "ended %s", short(done["json"]))
        # the second stream's relay may still be behind the first one's
        ev2.wait(lambda e: e.get("event") == "generation_update" and e["json"]["generation_id"] == gid
                 and e["json"]["status"] in TERMINAL, timeout=60, what="terminal update on the second stream")
        for stream in (ev, ev2):
            mine = stream.of(gid)
            previews = [e["json"] for e in mine if e.get("event") == "generation_preview"]
            check(len(previews) >= 3, "%d previews", len(previews))
            seqs, steps = [p["seq"] for p in previews], [p["step"] for p in previews]
            check(seqs == sorted(set(seqs)) and steps == sorted(set(steps)) and steps[-1] <= 99,
                  "seq %r, steps %r", seqs, steps)
            last = max(i for i, e in enumerate(mine) if e.get("event") == "generation_preview")
            end = min(i for i, e in enumerate(mine) if e.get("event") == "generation_update"
                      and e["json"]["status"] in TERMINAL)
            check(last < end, "every preview comes before the job's end")
        check(not os.path.exists(os.path.join(s.outputs, "previews", gid + ".jpg")), "the file is removed at the end")
        st, _, _ = s.request("GET", first["url"], raw=True)
        check(st == 404, "the preview URL after the end: %d", st)
        check(s.psql("SELECT count(*) FROM generation_previews WHERE generation_id = '%s'" % gid) == "0",
              "the record is removed at the end")
    finally:
        ev.close()
        ev2.close()


@test
def no_audio_clip_has_no_audio_stream(s):
    g = s.enqueue(**small(no_audio=True))
    g = s.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL, what="the end")
    check(g["status"] == "succeeded", "ended %s", short(g))
    streams = probe(file_path(s, g["result_url"]))
    check([x["codec_type"] for x in streams] == ["video"], "streams %r", streams)
    check("decoding_audio" not in g["timings"], "a silent clip has no audio decode: %r", g["timings"])


@test
def seed_drawn_and_recorded_when_absent(s):
    g = s.enqueue(**small())
    check(g["seed_drawn"] and isinstance(g["seed"], int) and 0 <= g["seed"] < 2**53, "seed %r", g["seed"])
    s.request("DELETE", "/api/ai/queue/" + g["generation_id"])


@test
def defaults_and_snapping_with_warnings(s):
    cases = [
        (dict(prompt="defaults"), dict(frames=124, width=1280, height=704, steps=28, partition="fl2va"), 0),
        (dict(prompt="off grid", frames=130, width=1000, height=700),
         dict(frames=124, width=992, height=704), 3),
        (dict(prompt="nearest", width=721, height=33), dict(width=736, height=32), 2),
        (dict(prompt="halfway", width=1280, height=720), dict(width=1280, height=704), 1),
        (dict(prompt="seconds", seconds=5), dict(frames=124, seconds=5.167), 1),
        (dict(prompt="seconds 10", seconds=10), dict(frames=243), 1),
        (dict(prompt="size N", size="768"), dict(width=768, height=768), 0),
        (dict(prompt="short edge", short_edge=768), dict(width=1344, height=768), 0),
        (dict(prompt="size WxH", size="640x352"), dict(width=640, height=352), 0),
        (dict(prompt="width only", width=1024), dict(width=1024, height=576), 0),
    ]
    for req, want, n_warn in cases:
        g = s.enqueue(**req)
        s.request("DELETE", "/api/ai/queue/" + g["generation_id"])  # cancel it: only the numbers matter here
        for k, v in want.items():
            check(g[k] == v, "%r: %s = %r, expected %r", req, k, g[k], v)
        check(len(g["warnings"]) == n_warn, "%r: warnings %r", req, g["warnings"])
    g = s.enqueue(prompt="w", frames=130)
    s.request("DELETE", "/api/ai/queue/" + g["generation_id"])
    check("130" in g["warnings"][0] and "124" in g["warnings"][0], "warning text %r", g["warnings"])


# ---------------------------------------------------------------- validation

def seed_uploads(s):
    """Upload rows for validation tests (only the uploads table is consulted)."""
    rows = []
    for kind, n, w, h in (("image", 10, 1920, 1080), ("video", 4, 1280, 720), ("audio", 4, None, None)):
        for i in range(n):
            uid = str(uuid.uuid4())
            s.psql("INSERT INTO uploads (id, kind, path, content_type, bytes, width, height) VALUES "
                   "('%s', '%s', 'uploads/%s.bin', 'application/octet-stream', 1, %s, %s)"
                   % (uid, kind, uid, w or "NULL", h or "NULL"))
            rows.append((kind, uid))
    portrait = str(uuid.uuid4())
    s.psql("INSERT INTO uploads (id, kind, path, content_type, bytes, width, height) VALUES "
           "('%s', 'image', 'uploads/%s.png', 'image/png', 1, 720, 1280)" % (portrait, portrait))
    by = {"image": [], "video": [], "audio": [], "portrait": [portrait]}
    for kind, uid in rows:
        by[kind].append(uid)
    return by


@test
def every_validation_error(s):
    up = seed_uploads(s)
    img, vid, aud = up["image"], up["video"], up["audio"]
    bad = [
        ("not an object", [1, 2], None),
        ("no prompt", {}, "prompt"),
        ("prompt not a string", {"prompt": 3}, "prompt"),
        ("blank prompt", {"prompt": " \n "}, "prompt"),
        ("prompt too long", {"prompt": "x" * 8001}, "prompt"),
        ("unknown field", {"prompt": "x", "model_id": "m"}, "model_id"),
        ("frames below", {"prompt": "x", "frames": 4}, "frames"),
        ("frames above", {"prompt": "x", "frames": 379}, "frames"),
        ("frames fractional", {"prompt": "x", "frames": 22.5}, "frames"),
        ("frames and seconds", {"prompt": "x", "frames": 22, "seconds": 1}, "seconds"),
        ("seconds zero", {"prompt": "x", "seconds": 0}, "seconds"),
        ("seconds too long", {"prompt": "x", "seconds": 16}, "seconds"),
        ("width small", {"prompt": "x", "width": 31}, "width"),
        ("frames past 362", {"prompt": "x", "frames": 370}, "frames"),
        ("height large", {"prompt": "x", "height": 4096}, "height"),
        ("width string", {"prompt": "x", "width": "512"}, "width"),
        ("size malformed", {"prompt": "x", "size": "huge"}, "size"),
        ("size with width", {"prompt": "x", "size": "512x512", "width": 512}, "size"),
        ("steps", {"prompt": "x", "steps": 1}, "steps"),
        ("seed negative", {"prompt": "x", "seed": -5}, "seed"),
        ("seed too large", {"prompt": "x", "seed": 2**53}, "seed"),
        ("partition", {"prompt": "x", "partition": "t2v"}, "partition"),
        ("no_audio type", {"prompt": "x", "no_audio": "yes"}, "no_audio"),
        ("crf", {"prompt": "x", "crf": 60}, "crf"),
        ("preset", {"prompt": "x", "preset": "instant"}, "preset"),
        ("image_ids type", {"prompt": "x", "image_ids": img[0]}, "image_ids"),
        ("image id malformed", {"prompt": "x", "image_ids": ["nope"]}, "image_ids[0]"),
        ("image id unknown", {"prompt": "x", "image_ids": [str(uuid.uuid4())]}, "image_ids[0]"),
        ("duplicate image id", {"prompt": "x", "image_ids": [img[0], img[0]]}, "image_ids[1]"),
        ("ten images", {"prompt": "x", "image_ids": img[:10]}, "image_ids"),
        ("four videos", {"prompt": "x", "partition": "ref2va", "image_ids": vid[:4]}, "image_ids"),
        ("four audio clips", {"prompt": "x", "image_ids": aud[:4]}, "image_ids"),
        ("audio with fl2va", {"prompt": "x", "partition": "fl2va", "image_ids": aud[:1]}, "image_ids"),
        ("last image unknown", {"prompt": "x", "last_image_id": str(uuid.uuid4())}, "last_image_id"),
        ("last image is a video", {"prompt": "x", "last_image_id": vid[0]}, "last_image_id"),
        ("last image with ref2va", {"prompt": "x", "partition": "ref2va", "last_image_id": img[0]}, "last_image_id"),
        ("last image with audio refs", {"prompt": "x", "image_ids": aud[:1], "last_image_id": img[0]},
         "last_image_id"),
    ]
    failures = []
    for name, body, field in bad:
        st, resp = s.request("POST", "/api/ai/queue", body)
        ok = (st == 400 and isinstance(resp, dict) and resp.get("status") == "error"
              and resp["error"].get("field") == field and bool(resp["error"].get("message"))
              and bool(resp["error"].get("accepted")) and (field is None or field in resp["status_message"]))
        if not ok:
            failures.append("%s: %d %r" % (name, st, resp))
    # Not JSON at all, or not declared JSON.
    st, resp = s.request("POST", "/api/ai/queue", '{"prompt": ', {"Content-Type": "application/json"})
    if st != 400 or "JSON" not in resp["error"]["message"]:
        failures.append("broken JSON: %d %r" % (st, resp))
    st, resp = s.request("POST", "/api/ai/queue", '{"prompt": "x"}', {"Content-Type": "text/plain"})
    if st != 415:
        failures.append("text/plain body: %d %r" % (st, resp))
    st, resp = s.request("POST", "/api/ai/queue", '{"prompt": "x", "prompt": "y"}',
                         {"Content-Type": "application/json"})
    if st != 400:
        failures.append("duplicate keys: %d %r" % (st, resp))
    check(not failures, "%d of %d cases wrong:\n    %s", len(failures), len(bad) + 3, "\n    ".join(failures))
    check(int(s.psql("SELECT count(*) FROM generations WHERE prompt = 'x'")) == 0, "a refused request was stored")

    # What is accepted around the limits.
    ok_cases = [
        ({"prompt": "é" * 8000}, {}),
        ({"prompt": "x", "image_ids": img[:9]}, {"partition": "fl2va", "width": 1344, "height": 768}),
        ({"prompt": "x", "image_ids": up["portrait"]}, {"width": 768, "height": 1344}),
        ({"prompt": "x", "image_ids": aud[:3] + vid[:3] + img[:9]}, {"partition": "ref2va"}),
        ({"prompt": "x", "image_ids": img[:1], "last_image_id": img[1]}, {"last_image_id": img[1]}),
        ({"prompt": "x", "seed": 2**53 - 1}, {"seed": 2**53 - 1}),
    ]
    for body, want in ok_cases:
        st, resp = s.request("POST", "/api/ai/queue", body)
        check(st == 200, "%r refused: %d %r", body, st, resp)
        g = resp["generations"][0]
        s.request("DELETE", "/api/ai/queue/" + g["generation_id"])
        for k, v in want.items():
            check(g[k] == v, "%s = %r, expected %r", k, g[k], v)
        if "image_ids" in body:
            check([r["image_id"] for r in g["references"]] == body["image_ids"], "references in request order")


def make_adapters(s, *names):
    """Tiny real adapters (the project's generator) in the stack's adapter folder, once GET /api/loras lists them."""
    folder = os.path.join(s.models, "loras")
    os.makedirs(folder, exist_ok=True)
    for i, name in enumerate(names):
        path = os.path.join(folder, name + ".safetensors")
        if not os.path.exists(path):
            subprocess.run([os.path.join(s.build, "mmh3-gen-tiny"), "lora", "--seed", str(i + 1), "--rank", "4",
                            "--out", path], check=True, capture_output=True)
    end = time.time() + 20
    while True:
        st, body = s.get("/api/loras")
        listed = [e["name"] for e in body.get("loras", [])]
        if all(n + ".safetensors" in listed for n in names):
            return body
        check(time.time() < end, "GET /api/loras never listed %r: %r", names, body)
        time.sleep(0.2)


@test
def few_step_fields_are_settled_and_stored(s):
    """loras, sampler, sparse and cache: checked like every field (the sampler by the presets' table, the cache
    by the step cache's own parser, adapter names against the worker's catalogue), stored with the request,
    shown in the generation object and read back by the worker (which renders the job; the mock engine opens
    the adapters), and a bad one stores nothing."""
    make_adapters(s, "turbo_8step", "pdd_acc8")
    st, resp = s.request("POST", "/api/ai/queue", small(prompt="an extension is the file's", loras=[{"name": "pdd_acc8.bin"}]))
    check(st == 400 and resp["error"]["field"] == "loras[0].name", "a name with another extension: %d %r", st, resp)
    body = small(prompt="few-step fields", loras=[{"name": "turbo_8step", "strength": 0.75},
                                                 {"name": "pdd_acc8"}],
                 sampler=[1, 0.9375, 0.6, 0.1, 0], sparse="sol-attn", cache="fbc:0.08", steps=None)
    st, resp = s.request("POST", "/api/ai/queue", body)
    check(st == 200, "refused: %d %r", st, resp)
    g = resp["generations"][0]
    check(g["loras"] == [{"name": "turbo_8step", "strength": 0.75}, {"name": "pdd_acc8", "strength": 1}],
          "loras %r", g["loras"])
    check(g["sampler"] == [1, 0.9375, 0.6, 0.1, 0] and g["sparse"] == "sol-attn" and g["cache"] == "fbc:0.08"
          and g["steps"] == 5, "sampler %r sparse %r cache %r steps %r", g["sampler"], g["sparse"], g["cache"],
          g["steps"])
    check(s.psql("SELECT sampler::text || ' ' || sparse || ' ' || cache FROM generations WHERE id = '%s'"
                 % g["generation_id"]) == "[1, 0.9375, 0.6, 0.1, 0] sol-attn fbc:0.08", "stored columns")
    g = s.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL, timeout=60, what="the render")
    # the mock engine parses the sparse preset as the real one does: "sol-attn" is none of them
    check(g["status"] == "failed" and "sol-attn" in (g.get("error_message") or ""),
          "the worker read the job back and its engine refused the sparse preset: %s", short(g))
    body["sparse"] = "sol"
    st, resp = s.request("POST", "/api/ai/queue", body)
    g = s.wait_for(resp["generations"][0]["generation_id"], lambda g: g["status"] in TERMINAL, timeout=60,
                   what="the render")
    check(g["status"] == "succeeded" and g["total_steps"] == 4 and (g.get("timings") or {}).get("forwards") == 4,
          "the worker rendered the sigma list's 4 forwards: %s", short(g))
    st, resp = s.request("POST", "/api/ai/queue", small(prompt="defaults of the few-step fields", sampler="turbo8",
                                                       steps=None))
    check(st == 200, "refused: %d %r", st, resp)
    g = resp["generations"][0]
    check(g["loras"] == [] and g["sampler"] == "turbo8" and g["steps"] == 9 and g["sparse"] == "off"
          and g["cache"] == "off", "defaults %r", {k: g[k] for k in ("loras", "sampler", "steps", "sparse", "cache")})
    s.request("DELETE", "/api/ai/queue/" + g["generation_id"])
    st, resp = s.request("POST", "/api/ai/queue", small(prompt="fbc alone", cache="fbc", steps=None))
    check(st == 200 and resp["generations"][0]["cache"] == "fbc:high", "bare fbc is stored as its preset: %d %r",
          st, resp)
    s.request("DELETE", "/api/ai/queue/" + resp["generations"][0]["generation_id"])
    bad = [({"loras": [{"name": "Turbo"}]}, "loras[0].name", "pdd_acc8.safetensors"),
           ({"loras": [{"name": "../t"}]}, "loras[0].name", "'.'"),
           ({"loras": [{"name": "pdd_acc8", "strength": 150}]}, "loras[0].strength", "-100..100"),
           ({"loras": [{"name": "a%d" % i} for i in range(9)]}, "loras", "8"),
           ({"sampler": [1, 0.5]}, "sampler", "ending at 0"), ({"sampler": [1, 1, 0]}, "sampler", "decreasing"),
           ({"sampler": "turbo-8"}, "sampler", "turbo8"), ({"sampler": "turbo8", "steps": 9}, "steps", "not both"),
           ({"sparse": "Sol"}, "sparse", "preset"), ({"cache": "fbc:-1"}, "cache", "warmup=N"),
           ({"cache": "lru"}, "cache", "teacache"),
           ({"cache": "teacache", "partition": "ref2va"}, "cache", "fbc")]
    for extra, field, accepted in bad:
        st, resp = s.request("POST", "/api/ai/queue", dict(prompt="a bad few-step field", **extra))
        check(st == 400 and resp["error"]["field"] == field and accepted in resp["error"]["accepted"] + " " +
              resp["error"]["message"], "%r -> %d %r", extra, st, resp)
    check(int(s.psql("SELECT count(*) FROM generations WHERE prompt = 'a bad few-step field'")) == 0,
          "a refused request was stored")


@test
def adapter_catalogue_follows_the_folder(s):
    """GET /api/loras: what the worker found, with what each header says; a file added to the folder appears
    without a restart, a removed one goes, and a name that is not listed is refused with the listed ones."""
    body = make_adapters(s, "pdd_acc8")
    check(body["published"] is True and isinstance(body.get("published_at"), int), "catalogue %r", body)
    entry = next(e for e in body["loras"] if e["name"] == "pdd_acc8.safetensors")
    check(entry["family"] and entry["rank"] == 4 and entry["bytes"] > 0 and entry.get("error") is None,
          "entry %r", entry)
    make_adapters(s, "style_late")
    os.unlink(os.path.join(s.models, "loras", "style_late.safetensors"))
    end = time.time() + 20
    while "style_late.safetensors" in [e["name"] for e in s.get("/api/loras")[1]["loras"]]:
        check(time.time() < end, "a removed adapter stayed listed")
        time.sleep(0.2)
    st, resp = s.request("POST", "/api/ai/queue", small(prompt="an unlisted adapter",
                                                       loras=[{"name": "style_late"}]))
    check(st == 400 and resp["error"]["field"] == "loras[0].name" and "pdd_acc8.safetensors" in
          resp["error"]["accepted"], "%d %r", st, resp)
    st, resp = s.request("POST", "/api/loras", {})
    check(st == 405, "POST /api/loras -> %d", st)


# ---------------------------------------------------------------- cancel, delete, rating

@test
def failure_messages_do_not_reveal_server_paths(s):
    """A reference whose file vanished fails the job with a message every user
    sees: it names the file relative to the outputs folder, never where the
    server keeps it."""
    uid = str(uuid.uuid4())
    s.psql("INSERT INTO uploads (id, kind, path, content_type, bytes, width, height) VALUES "
           "('%s', 'image', 'uploads/%s.png', 'image/png', 1, 64, 64)" % (uid, uid))
    g = s.enqueue(**small(prompt="a reference that is gone", image_ids=[uid]))
    g = s.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL, timeout=60, what="the failure")
    msg = g["error_message"] or ""
    check(g["status"] == "failed", "a missing reference file: %s", short(g))
    check("uploads/%s.png" % uid in msg, "the message names the file: %r", msg)
    for folder in {s.outputs, os.path.realpath(s.outputs)}:
        check(folder not in msg, "the message reveals the outputs folder %s: %r", folder, msg)
    # An adapter gone by the time the job renders (the row changed while another job held the worker): named by
    # its name, the folder as $MODELS_PATH/loras.
    busy = s.enqueue(**small(prompt="holds the worker", steps=120))
    g = s.enqueue(**small(prompt="an adapter that is gone"))
    s.psql("UPDATE generations SET loras = '[{\"name\": \"gone\", \"strength\": 1}]' WHERE id = '%s'"
           % g["generation_id"])
    s.request("DELETE", "/api/ai/queue/" + busy["generation_id"])
    g = s.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL, timeout=60, what="the failure")
    msg = g["error_message"] or ""
    check(g["status"] == "failed" and "gone" in msg and "$MODELS_PATH/loras" in msg, "a missing adapter: %s",
          short(g))
    for folder in {s.models, os.path.realpath(s.models)}:
        check(folder not in msg, "the message reveals the models folder %s: %r", folder, msg)


@test
def cancel_mid_job_stops_at_next_step(s):
    g = s.enqueue(**small(steps=120))
    gid = g["generation_id"]
    s.wait_for(gid, lambda g: g["stage"] == "denoising" and g["step"] >= 2, what="denoising")
    st, body = s.request("DELETE", "/api/ai/queue/" + gid)
    check(st == 200 and body["action"] == "cancelling", "%d %r", st, body)
    g = s.wait_for(gid, lambda g: g["status"] in TERMINAL, timeout=10, what="the cancel")
    check(g["status"] == "cancelled" and g["cancel_requested"], "ended %s", short(g))
    check(g["step"] < 119, "stopped at step %d of 119", g["step"])
    check(g["result_url"] is None, "no result")
    leftovers = [f for f in os.listdir(os.path.join(s.outputs, "generations")) if gid in f]
    check(not leftovers, "files left: %r", leftovers)


@test
def cancel_queued_job_at_once(s):
    blocker = s.enqueue(**small(steps=60))
    s.wait_for(blocker["generation_id"], lambda g: g["status"] == "processing", what="processing")
    g = s.enqueue(**small())
    st, body = s.request("DELETE", "/api/ai/queue/" + g["generation_id"])
    check(st == 200 and body["action"] == "cancelled", "%d %r", st, body)
    g = s.generation(g["generation_id"])
    check(g["status"] == "cancelled" and g["attempts"] == 0, "after cancel %s", short(g))
    s.request("DELETE", "/api/ai/queue/" + blocker["generation_id"])
    s.wait_for(blocker["generation_id"], lambda g: g["status"] in TERMINAL, what="blocker cancelled")


@test
def delete_finished_removes_row_and_files(s):
    ev = Events(s.base)
    try:
        g = s.enqueue(**small())
        gid = g["generation_id"]
        g = s.wait_for(gid, lambda g: g["status"] == "succeeded", what="success")
        path = file_path(s, g["result_url"])
        check(os.path.exists(path), "no mp4")
        st, body = s.request("DELETE", "/api/ai/queue/" + gid)
        check(st == 200 and body == {"status": "success", "generation_id": gid, "action": "deleted"}, "%d %r", st,
              body)
        check(s.generation(gid) is None, "the row is still there")
        check(not os.path.exists(path), "the mp4 is still there")
        check(not os.path.exists(file_path(s, g["poster_url"])), "the poster is still there")
        st, _, _ = s.request("GET", g["result_url"], raw=True)
        check(st == 404, "the file is still served (%d)", st)
        e = ev.wait(lambda e: e.get("event") == "generation_deleted" and e["json"]["generation_id"] == gid,
                    what="generation_deleted")
        check(int(e["id"]) == e["json"]["seq"], "deleted event id")
        st, body = s.request("DELETE", "/api/ai/queue/" + gid)
        check(st == 404, "second delete %d", st)
    finally:
        ev.close()


@test
def rating_is_broadcast_to_every_stream(s):
    g = s.enqueue(**small())
    gid = g["generation_id"]
    s.wait_for(gid, lambda g: g["status"] == "succeeded", what="success")
    tabs = [Events(s.base), Events(s.base)]
    try:
        time.sleep(0.3)
        st, body = s.request("PATCH", "/api/ai/queue/" + gid, {"rating": "approved"})
        check(st == 200 and body["rating"] == "approved", "%d %r", st, body)
        for t in tabs:
            t.wait(lambda e: e.get("event") == "generation_update" and e["json"]["generation_id"] == gid
                   and e["json"]["rating"] == "approved", what="the approval on every tab")
        st, body = s.request("PATCH", "/api/ai/queue/" + gid, {"rating": None})
        check(st == 200 and body["rating"] is None, "%d %r", st, body)
        for t in tabs:
            t.wait(lambda e: e.get("event") == "generation_update" and e["json"]["generation_id"] == gid
                   and e["json"]["rating"] is None and int(e["id"]) > body["seq"] - 1, what="the reset")
        for bad in ({"rating": "great"}, {"rating": 1}, {}, {"rating": "approved", "prompt": "y"}):
            st, resp = s.request("PATCH", "/api/ai/queue/" + gid, bad)
            check(st == 400 and resp["error"]["field"], "%r -> %d %r", bad, st, resp)
        st, resp = s.request("PATCH", "/api/ai/queue/" + str(uuid.uuid4()), {"rating": "rejected"})
        check(st == 404, "unknown id %d", st)
    finally:
        for t in tabs:
            t.close()


@test
def two_hundred_streams_all_get_every_event(s):
    g = s.enqueue(**small())
    gid = g["generation_id"]
    s.wait_for(gid, lambda g: g["status"] == "succeeded", what="success")
    streams = [Events(s.base) for _ in range(200)]
    try:
        check(all(e.status == 200 for e in streams), "statuses %r", set(e.status for e in streams))
        time.sleep(1.0)
        for rating in ("approved", "rejected", None):
            st, body = s.request("PATCH", "/api/ai/queue/" + gid, {"rating": rating})
            check(st == 200, "PATCH %d", st)
        for e in streams:
            e.wait(lambda ev: ev.get("event") == "generation_update" and ev["json"]["generation_id"] == gid
                   and ev["json"]["rating"] is None and ev["json"]["seq"] == body["seq"], timeout=20,
                   what="the last rating on every stream")
        # Each stream sees the row's snapshots in seq order, ending with the newest
        # (changes that land in one relay batch arrive as one snapshot).
        order = ["approved", "rejected", None]
        bad = []
        for i, e in enumerate(streams):
            evs = [ev["json"] for ev in e.of(gid) if ev.get("event") == "generation_update"]
            seqs = [x["seq"] for x in evs]
            idx = [order.index(x["rating"]) for x in evs]
            if seqs != sorted(set(seqs)) or idx != sorted(idx) or not evs or evs[-1]["rating"] is not None:
                bad.append(i)
        check(not bad, "%d streams saw updates out of order (e.g. #%s)", len(bad), bad[:3])
    finally:
        for e in streams:
            e.close()


@test
def last_event_id_catch_up_and_resync(s):
    g1 = s.enqueue(**small())
    g2 = s.enqueue(**small())
    for g in (g1, g2):
        s.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL, what="the end")
    ev = Events(s.base)
    time.sleep(0.3)
    st, body = s.request("PATCH", "/api/ai/queue/" + g1["generation_id"], {"rating": "rejected"})
    e = ev.wait(lambda e: e.get("json", {}).get("rating") == "rejected", what="the rating")
    last = int(e["id"])
    ev.close()
    # Missed while away: a rating, a deletion.
    s.request("PATCH", "/api/ai/queue/" + g1["generation_id"], {"rating": "approved"})
    s.request("DELETE", "/api/ai/queue/" + g2["generation_id"])
    ev = Events(s.base, last_event_id=last)
    try:
        try:
            ev.wait(lambda e: e.get("event") == "generation_update"
                    and e["json"]["generation_id"] == g1["generation_id"]
                    and e["json"]["rating"] == "approved", timeout=10, what="the missed rating")
        except AssertionError:
            print("  debug: last=%d events=%r" % (last, [(e.get("event"), e.get("id"), (e.get("data") or "")[:80])
                                                     for e in ev.events]))
            raise
        ev.wait(lambda e: e.get("event") == "generation_deleted"
                and e["json"]["generation_id"] == g2["generation_id"], timeout=10, what="the missed deletion")
        ids = [int(e["id"]) for e in ev.events if "id" in e]
        check(ids == sorted(ids), "catch-up out of order: %r", ids)
    finally:
        ev.close()
    ev = Events(s.base, last_event_id=10**12)
    try:
        ev.wait(lambda e: e.get("event") == "resync", timeout=10, what="resync for an unknown id")
    finally:
        ev.close()
    st, body = s.request("GET", "/api/events", headers={"Last-Event-ID": "abc"})
    check(st == 400, "a malformed Last-Event-ID: %d", st)


@test
def streams_closed_while_the_database_was_away_are_dropped_on_its_return(s):
    # When the hub's LISTEN connection comes back it catches every stream up; a stream that
    # closed meanwhile fails mid catch-up and is freed, and the walk over the streams once
    # read its `next` after that (a use-after-free ASan reports in the sanitize suite).
    gs = [s.enqueue(**small()) for _ in range(2)]
    for g in gs:
        s.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL, what="the end")
    live, dead = Events(s.base), Events(s.base)
    try:
        time.sleep(0.3)
        for g in gs:
            s.request("PATCH", "/api/ai/queue/" + g["generation_id"], {"rating": "rejected"})
        for ev in (live, dead):
            ev.wait(lambda e: e.get("json", {}).get("generation_id") == gs[-1]["generation_id"]
                    and e["json"].get("rating") == "rejected", what="the ratings")
        dead.close()
        time.sleep(0.5)
        s.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
               " WHERE application_name = 'mmh3-fcgi-events'")
        time.sleep(1.5)
        s.request("PATCH", "/api/ai/queue/" + gs[0]["generation_id"], {"rating": "approved"})
        live.wait(lambda e: e.get("json", {}).get("generation_id") == gs[0]["generation_id"]
                  and e["json"].get("rating") == "approved", timeout=15, what="an event after the reconnect")
    finally:
        live.close()
        if dead.conn.sock:
            dead.close()


# ---------------------------------------------------------------- listing

@test
def search_filter_and_paging(s):
    tag = uuid.uuid4().hex[:8]
    s.psql("INSERT INTO generations (prompt, frames, width, height, steps, seed, status, rating, enqueued_at) "
           "SELECT format('%s item %%s %%s', i, CASE WHEN i %% 3 = 0 THEN 'Blue_Whale 100%%' ELSE 'red fox' END), "
           "22, 128, 96, 8, i, CASE WHEN i %% 2 = 0 THEN 'succeeded' ELSE 'failed' END, "
           "CASE WHEN i %% 5 = 0 THEN 'approved' END, now() - make_interval(secs => i) "
           "FROM generate_series(1, 150) i" % tag)
    st, body = s.get("/api/ai/queue?search=%s&limit=500" % tag)
    check(st == 200 and body["count"] == 150 and len(body["generations"]) == 150, "count %r", body.get("count"))
    times = [g["enqueued_at"] for g in body["generations"]]
    check(times == sorted(times, reverse=True), "not newest first")
    # Pages are disjoint and cover everything in order.
    seen = []
    for off in range(0, 150, 40):
        st, page = s.get("/api/ai/queue?search=%s&limit=40&offset=%d" % (tag, off))
        check(page["count"] == 150, "count on page %d", off)
        seen += [g["generation_id"] for g in page["generations"]]
    check(seen == [g["generation_id"] for g in body["generations"]], "paging does not match the full list")
    st, body = s.get("/api/ai/queue?search=%s&status=succeeded" % tag)
    check(body["count"] == 75 and all(g["status"] == "succeeded" for g in body["generations"]), "status filter")
    st, body = s.get("/api/ai/queue?search=%s&status=failed,succeeded&limit=1" % tag)
    check(body["count"] == 150 and len(body["generations"]) == 1, "two statuses, limit 1")
    st, body = s.get("/api/ai/queue?search=%s&rating=approved" % tag)
    check(body["count"] == 30 and all(g["rating"] == "approved" for g in body["generations"]), "rating filter")
    st, body = s.get("/api/ai/queue?search=%s&rating=none&status=failed" % tag)
    check(body["count"] == 60, "unrated failed: %r", body["count"])
    # Case-insensitive substring; LIKE's wildcards are literal characters.
    st, body = s.get("/api/ai/queue?search=" + urllib_quote("BLUE_whale 100%"))
    check(body["count"] == 50, "case-insensitive search: %r", body["count"])
    st, body = s.get("/api/ai/queue?search=" + urllib_quote("blue%whale"))
    check(body["count"] == 0, "%% matched as a wildcard: %r", body["count"])
    st, body = s.get("/api/ai/queue?search=" + urllib_quote("blue_whale"))
    check(body["count"] == 50, "_ literal: %r", body["count"])
    st, body = s.get("/api/ai/queue?status=active&search=%s" % tag)
    check(body["count"] == 0, "active = queued+processing")
    for q, field in (("status=done", "status"), ("limit=0", "limit"), ("limit=501", "limit"), ("offset=-1", "offset"),
                     ("limit=abc", "limit"), ("rating=good", "rating")):
        st, body = s.get("/api/ai/queue?" + q)
        check(st == 400 and body["error"]["field"] == field, "%s -> %d %r", q, st, body)
    # 'active' adds 17 characters per mention: a long list is refused, not written past the array (it once was).
    st, body = s.get("/api/ai/queue?status=" + ",".join(["active"] * 36))
    check(st == 400 and body["error"]["field"] == "status" and "too many" in body["error"]["message"],
          "36 x active -> %d %r", st, body)
    st, body = s.get("/api/ai/queue?status=active,active&search=%s" % tag)
    check(st == 200 and body["count"] == 0, "active twice -> %d %r", st, body)


@test
def fcgi_refuses_malformed_limits(s):
    # mmh3-fcgi's own options (serve checks its copies first): atol/atof once read "-1" MiB as
    # an 8-EiB upload limit and "abc" as a lease of 0 seconds.
    fcgi = os.path.join(s.build, "mmh3-fcgi")
    for args, flag in ((["--max-upload-mb", "-1"], "--max-upload-mb"), (["--max-upload-mb", "12x"], "--max-upload-mb"),
                       (["--lease", "abc"], "--lease"), (["--lease", "-5"], "--lease")):
        p = subprocess.run([fcgi, "--listen", os.path.join(s.work, "never.sock")] + args, capture_output=True,
                           text=True, timeout=20)
        check(p.returncode == 2 and flag in p.stderr and "accepted" in p.stderr, "%r -> %d %r", args, p.returncode,
              p.stderr[-300:])


def urllib_quote(text):
    import urllib.parse
    return urllib.parse.quote(text)


@test
def indexes_serve_history_and_search_at_100k_rows(s):
    s.psql("INSERT INTO generations (prompt, frames, width, height, steps, seed, status, enqueued_at) "
           "SELECT 'bulk prompt number ' || i || CASE WHEN i % 1000 = 0 THEN ' zebra crossing' ELSE '' END, "
           "22, 128, 96, 8, i, (ARRAY['succeeded','failed','cancelled'])[1 + i % 3], "
           "now() - interval '1 day' - make_interval(secs => i) FROM generate_series(1, 100000) i; ANALYZE generations")
    plans = {
        "history page": "SELECT id FROM generations ORDER BY enqueued_at DESC, id DESC LIMIT 60 OFFSET 120",
        "status page": "SELECT id FROM generations WHERE status = ANY('{failed}') "
                       "ORDER BY enqueued_at DESC, id DESC LIMIT 60",
        "search": "SELECT id FROM generations WHERE prompt ILIKE '%zebra cross%' "
                  "ORDER BY enqueued_at DESC, id DESC LIMIT 60",
        "claim": "SELECT id FROM generations WHERE status = 'queued' ORDER BY enqueued_at, id LIMIT 1",
    }
    for name, sql in plans.items():
        plan = s.psql("EXPLAIN " + sql)
        check("Seq Scan" not in plan, "%s scans the table:\n%s", name, plan)
    # Counting the hits of a search goes through the trigram index (the page query
    # may instead walk the history index, whichever the planner finds cheaper).
    count_plan = s.psql("EXPLAIN SELECT count(*) FROM generations WHERE prompt ILIKE '%zebra cross%'")
    check("generations_prompt_trgm" in count_plan, "search counting does not use the trigram index:\n%s",
          count_plan)
    for q in ("limit=60", "limit=60&offset=50000", "status=failed&limit=60", "search=zebra%20cross&limit=60"):
        t0 = time.time()
        st, body = s.get("/api/ai/queue?" + q)
        check(st == 200, "%s -> %d", q, st)
        print("  info: GET /api/ai/queue?%s over 100k rows: %.1f ms, count %d" % (q, (time.time() - t0) * 1000,
                                                                                 body["count"]))
    st, body = s.get("/api/ai/queue?search=zebra%20cross")
    check(body["count"] == 100, "zebra count %r", body["count"])


# ---------------------------------------------------------------- crash recovery and concurrency

@test
def sigkill_worker_mid_job_requeues_and_recovers(s):
    g = s.enqueue(**small(steps=60))
    gid = g["generation_id"]
    g = s.wait_for(gid, lambda g: g["stage"] == "denoising" and g["step"] >= 1, what="denoising")
    victim = s.pid("worker")
    os.kill(victim, signal.SIGKILL)
    # serve restarts the worker; at start it re-queues the interrupted job, attempt counted, then renders it again.
    g = s.wait_for(gid, lambda g: g["attempts"] == 2, timeout=30, what="the second attempt")
    check(g["error_message"] and "interrupted" in g["error_message"] or g["status"] == "succeeded",
          "the re-queue note: %s", short(g))
    g = s.wait_for(gid, lambda g: g["status"] in TERMINAL, timeout=60, what="the end")
    check(g["status"] == "succeeded" and g["attempts"] == 2, "after recovery %s", short(g))
    check(g["error_message"] is None, "a success clears the note: %r", g["error_message"])
    check(s.pid("worker") != victim, "the worker was not restarted")
    probe(file_path(s, g["result_url"]))


@test
def job_that_kills_the_worker_three_times_fails(s):
    g = s.enqueue(**small(steps=200))
    gid = g["generation_id"]
    for attempt in (1, 2, 3):
        g = s.wait_for(gid, lambda g: g["attempts"] == attempt and g["status"] == "processing"
                       and g["stage"] == "denoising", timeout=30, what="attempt %d" % attempt)
        os.kill(s.pid("worker"), signal.SIGKILL)
        time.sleep(0.3)
    g = s.wait_for(gid, lambda g: g["status"] in TERMINAL, timeout=30, what="the verdict")
    check(g["status"] == "failed" and g["attempts"] == 3, "after 3 crashes %s", short(g))
    check("3 times" in g["error_message"], "message %r", g["error_message"])
    # The worker keeps serving other jobs.
    g = s.enqueue(**small())
    g = s.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL, timeout=30, what="the next job")
    check(g["status"] == "succeeded", "next job %s", short(g))


@test
def postgres_restart_is_invisible_to_the_next_requests(s):
    """After PostgreSQL dies and serve restarts it, each FastCGI process holds a
    connection to the dead server; the first request on it must reconnect, not
    fail with a 5xx."""
    for _ in range(30):  # every process of the pool has an open connection
        s.get("/api/status")
    victim = s.pid("postgres")
    os.kill(victim, signal.SIGKILL)
    end = time.time() + 60
    back = False
    while time.time() < end and not back:
        time.sleep(0.2)
        try:
            back = s.pid("postgres") != victim and s.psql("SELECT 1") == "1"
        except (OSError, ValueError, subprocess.CalledProcessError):
            back = False
    check(back, "PostgreSQL was not restarted within 60 s")
    statuses = [s.get("/api/status")[0] for _ in range(30)]
    check(all(st == 200 for st in statuses), "requests after the restart answered %r", statuses)
    g = s.enqueue(**small(prompt="after a database restart"))
    g = s.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL, timeout=60, what="a job after the restart")
    check(g["status"] == "succeeded", "job after the restart %s", short(g))


@test
def frozen_worker_loses_its_lease_and_cannot_clobber(s):
    """A worker whose host stops answering (SIGSTOP: its database session stays
    open, its heartbeat stops) loses the job after the lease to a worker that is
    alive; when it wakes up it finds the job taken and drops its result."""
    g = s.enqueue(**small(steps=80, prompt="frozen worker"))
    gid = g["generation_id"]
    s.wait_for(gid, lambda g: g["stage"] == "denoising" and g["step"] >= 1, what="denoising")
    frozen = s.pid("worker")
    os.kill(frozen, signal.SIGSTOP)
    try:
        rescuer = s.start_worker("--mock", "--mock-seconds", "0.5", "--lease", "3")
        g = s.wait_for(gid, lambda g: g["status"] in TERMINAL, timeout=60, what="the rescue")
        check(g["status"] == "succeeded" and g["attempts"] == 2, "rescued %s", short(g))
        check(g["worker_id"] != "" and str(rescuer.pid) in g["worker_id"], "rendered by %r", g["worker_id"])
        with open(file_path(s, g["result_url"]), "rb") as f:
            rescued = f.read()
    finally:
        os.kill(frozen, signal.SIGCONT)
    # The frozen worker wakes up mid-render: it must notice and leave the result alone.
    end = time.time() + 20
    taken = False
    while time.time() < end and not taken:
        with open(s.log_path) as f:
            taken = ("%s: stopped: the job was taken away" % gid) in f.read()
        time.sleep(0.2)
    check(taken, "the woken worker did not notice it lost the job")
    g2 = s.generation(gid)
    check(g2["status"] == "succeeded" and g2["attempts"] == 2 and g2["seq"] == g["seq"], "the row changed: %s",
          short(g2))
    with open(file_path(s, g["result_url"]), "rb") as f:
        check(f.read() == rescued, "the clip was overwritten")
    hidden = [f for f in os.listdir(os.path.join(s.outputs, "generations")) if gid in f and f.startswith(".")]
    check(not hidden, "attempt files left: %r", hidden)
    rescuer.send_signal(signal.SIGTERM)
    rescuer.wait(20)
    s.workers.remove(rescuer)


@test
def several_workers_never_claim_the_same_job(s):
    for _ in range(2):
        s.start_worker("--mock", "--mock-seconds", "0.3")
    end = time.time() + 20
    while time.time() < end:
        st, body = s.get("/api/status")
        if sum(1 for w in body["workers"] if w["online"] and w["state"] == "idle") >= 3:
            break
        time.sleep(0.2)
    check(sum(1 for w in body["workers"] if w["online"]) >= 3, "workers %r", body["workers"])
    ev = Events(s.base)
    try:
        gids = [s.enqueue(**small(frames=5, width=64, height=64, steps=3, prompt="race %d" % i))["generation_id"]
                for i in range(24)]
        for gid in gids:
            s.wait_for(gid, lambda g: g["status"] in TERMINAL, timeout=90, what="the end")
        logs = ""
        for path in [s.log_path] + [w.log_path for w in s.workers]:
            with open(path) as f:
                logs += f.read()
        used = set()
        for gid in gids:
            g = s.generation(gid)
            # Every claim counts an attempt, and every worker logs its claims.
            check(g["status"] == "succeeded" and g["attempts"] == 1, "%s", short(g))
            check(logs.count(gid + ": claimed") == 1, "%s was claimed %d times", gid, logs.count(gid + ": claimed"))
            seen = set(e["json"]["worker_id"] for e in ev.of(gid)
                       if e.get("event") == "generation_update" and e["json"]["worker_id"])
            check(len(seen) <= 1, "%s shows several workers: %r", gid, seen)
            used.add(g["worker_id"])
        check(len(used) >= 2, "only %r did any work", used)
    finally:
        ev.close()
        for w in s.workers:
            w.send_signal(signal.SIGTERM)
        for w in s.workers:
            w.wait(20)
        s.workers = []


@test
def migrations_applied_once_and_counts_exact(s):
    # Every process migrates at start (serve, mmh3-fcgi, each worker): each version once.
    sql_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sql")
    versions = ",".join(str(int(f[:3])) for f in sorted(os.listdir(sql_dir)) if f[:3].isdigit() and f.endswith(".sql"))
    check(s.psql("SELECT string_agg(version::text, ',' ORDER BY version) FROM schema_migrations") == versions,
          "schema_migrations: %s", s.psql("SELECT string_agg(version::text, ',') FROM schema_migrations"))
    # The per-status counts kept by triggers match the table after everything above
    # (bulk inserts, claims, crashes, cancels, deletes).
    bad = s.psql("SELECT string_agg(format('%s: %s kept, %s counted', c.status, c.n, x.k), '; ') "
                 "FROM generation_counts c LEFT JOIN (SELECT status, count(*) AS k FROM generations GROUP BY status) x "
                 "USING (status) WHERE c.n <> COALESCE(x.k, 0)")
    check(bad == "", "counts drifted: %s", bad)
    st, body = s.get("/api/status")
    check(body["queue"]["succeeded"] == int(s.psql("SELECT count(*) FROM generations WHERE status = 'succeeded'")),
          "status queue counts %r", body["queue"])


@test
def second_front_end_on_the_same_database(s):
    """`mmh3 serve --db URL --no-worker`: another nginx + API on the same queue,
    no private cluster; the first stack's worker renders its jobs."""
    import tempfile
    work = tempfile.mkdtemp(prefix="mmh3-frontend-", dir=s.work)
    os.chmod(work, 0o755)
    b = Stack(s.build, work=work, extra=["--db", s.conninfo(), "--no-worker"])
    try:
        b.start()
        g = b.enqueue(**small(prompt="via the second front end"))
        g = b.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL, what="the render")
        check(g["status"] == "succeeded", "%s", short(g))
        check(s.generation(g["generation_id"])["status"] == "succeeded", "not the same database")
        check(not os.path.exists(os.path.join(b.outputs, ".mmh3", "pgdata")), "a private cluster was made")
    finally:
        check(b.stop() == 0, "the second serve did not stop cleanly")


@test
def first_job_worker_is_busy_once_loaded(s):
    """A worker's first job loads the engine (state `loading`); once the job is past its loading stage the
    worker says `busy` — it used to stay `loading` for the whole first job."""
    import tempfile
    work = tempfile.mkdtemp(prefix="mmh3-firstjob-", dir=s.work)
    os.chmod(work, 0o755)
    b = Stack(s.build, work=work, extra=["--no-worker"])  # its own database: no other worker claims the job
    w = None
    try:
        b.start(engine_ready=False)
        w = b.start_worker("--mock", "--mock-seconds", "4", "--name", "first-job-worker")
        g = b.enqueue(**small(prompt="the first job of a fresh worker"))
        g = b.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL or
                       (g["status"] == "processing" and g.get("stage") not in (None, "queued", "loading")),
                       what="the job past its loading stage")
        check(g["status"] == "processing", "the job ended before it could be observed: %s", short(g))
        st, body = b.get("/api/status")
        mine = [x for x in body["workers"] if x["worker_id"] == "first-job-worker"]
        check(mine and mine[0]["state"] == "busy", "stage %s, worker %r", g.get("stage"), mine)
        b.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL, what="the end")
    finally:
        if w is not None:
            w.send_signal(signal.SIGTERM)
            w.wait(20)
        check(b.stop() == 0, "the second serve did not stop cleanly")


@test
def real_engine_failure_is_reported_not_hidden(s):
    w = s.start_worker()  # no --mock: the real engine, which cannot start here
    try:
        end = time.time() + 20
        failed = []
        while time.time() < end and not failed:
            st, body = s.get("/api/status")
            failed = [x for x in body["workers"] if x["pid"] == w.pid and x["state"] == "failed"]
            time.sleep(0.2)
        check(failed and failed[0]["engine_kind"] == "h3" and "cannot start" in failed[0]["message"],
              "status does not say why: %r", failed)
        check(body["engine"]["kind"] == "mock", "the summary should come from the working worker: %r",
              body["engine"])
    finally:
        w.send_signal(signal.SIGTERM)
        w.wait(20)
        s.workers.remove(w)
    with open(w.log_path) as f:
        log = f.read()
    check("cannot start" in log, "the log does not say so")


# ---------------------------------------------------------------- uploads, settings, files

def make_media(work):
    """Fixtures written with the FFmpeg command-line tools (test side only)."""
    files = {}
    specs = {
        "a.png": ["-f", "lavfi", "-i", "testsrc=size=320x180:rate=1", "-frames:v", "1"],
        "v.mp4": ["-f", "lavfi", "-i", "testsrc=size=320x240:rate=24", "-f", "lavfi", "-i",
                  "sine=f=440:r=32000", "-t", "1", "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac",
                  "-shortest"],
        "s.wav": ["-f", "lavfi", "-i", "sine=f=440:r=32000", "-t", "1"],
    }
    for name, args in specs.items():
        path = os.path.join(work, name)
        subprocess.run(["ffmpeg", "-v", "error", "-y"] + args + [path], check=True)
        with open(path, "rb") as f:
            files[name] = f.read()
    return files


@test
def uploads_checked_stored_and_served(s):
    st, _ = s.upload([("x.txt", b"hello")])
    check(st != 503, "the media probe is not in this build")
    media = make_media(s.work)
    before = set(os.listdir(os.path.join(s.outputs, "uploads")))
    st, body = s.upload([("../../etc/passwd.png", media["a.png"]), ("clip.mp4", media["v.mp4"]),
                         ("tone.wav", media["s.wav"])])
    check(st == 200 and len(body["image_ids"]) == 3, "%d %r", st, body)
    kinds = [i["kind"] for i in body["images"]]
    check(kinds == ["image", "video", "audio"], "kinds %r", kinds)
    img, vid, aud = body["images"]
    check(img["width"] == 320 and img["height"] == 180 and img["poster_url"] == img["url"], "image %r", img)
    check(img["original_name"] == "passwd.png", "display name %r", img["original_name"])
    check(vid["poster_url"] and vid["poster_url"].endswith(".jpg") and vid["duration_seconds"] > 0.5, "video %r", vid)
    check(aud["width"] is None and aud["poster_url"] is None, "audio %r", aud)
    for i in body["images"]:
        name = i["url"].rsplit("/", 1)[1]
        check(name.startswith(i["image_id"]), "stored under a generated name: %s", name)
        st, data, headers = s.request("GET", i["url"], raw=True)
        check(st == 200 and headers.get("x-content-type-options") == "nosniff", "%s -> %d", i["url"], st)
    st, data, headers = s.request("GET", vid["poster_url"], raw=True)
    check(st == 200 and headers["content-type"] == "image/jpeg" and data[:2] == b"\xff\xd8", "poster %d", st)
    st, got = s.get("/api/images/" + vid["image_id"])
    check(st == 200 and got["kind"] == "video", "GET upload %d", st)
    # A generation with these references shows them, in order.
    g = s.enqueue(**small(image_ids=[vid["image_id"], img["image_id"], aud["image_id"]]))
    check(g["partition"] == "ref2va" and [r["kind"] for r in g["references"]] == ["video", "image", "audio"],
          "references %r", g["references"])
    s.request("DELETE", "/api/ai/queue/" + g["generation_id"])
    # Refusals store nothing.
    after_ok = set(os.listdir(os.path.join(s.outputs, "uploads")))
    for files, field in (([("notes.txt", b"just text")], "files[0]"),
                         ([("a.png", media["a.png"]), ("bad.mp4", media["v.mp4"][:300])], "files[1]"),
                         ([("empty.png", b"")], "files[0]")):
        st, resp = s.upload(files)
        check(st == 400 and resp["error"]["field"] == field, "%r -> %d %r", [f[0] for f in files], st, resp)
        check(s.outputs not in json.dumps(resp), "the error shows a server path: %r", resp)
    check(set(os.listdir(os.path.join(s.outputs, "uploads"))) == after_ok, "a refused upload left files")
    check(len(after_ok - before) == 4, "3 files + 1 poster stored: %r", after_ok - before)
    st, resp = s.request("POST", "/api/images", b"{}", {"Content-Type": "application/json"})
    check(st == 415, "non-multipart upload %d", st)


@test
def settings_never_return_the_key(s):
    st, body = s.get("/api/settings")
    default_prompt = body.pop("rewrite_system_prompt_default", "") if st == 200 else ""
    check(st == 200 and body == {"has_oxen_api_key": False, "rewrite_enabled": False,
                                 "rewrite_model": "claude-sonnet-4-6", "rewrite_system_prompt": ""}, "%r", body)
    check("integrated_multimodal_description" in default_prompt, "no default rewriter prompt: %r", default_prompt[:80])
    secret = "sk-test-" + uuid.uuid4().hex
    st, body = s.request("PUT", "/api/settings", {"oxen_api_key": secret, "rewrite_enabled": True})
    check(st == 200 and body["has_oxen_api_key"] and body["rewrite_enabled"], "%r", body)
    check(secret not in json.dumps(body) and secret not in json.dumps(s.get("/api/settings")[1]), "key returned")
    st, body = s.request("PUT", "/api/settings", {"oxen_api_key": "", "rewrite_model": "m2"})
    check(body["has_oxen_api_key"] and body["rewrite_model"] == "m2", "empty keeps the key: %r", body)
    st, body = s.request("PUT", "/api/settings", {"oxen_api_key": None})
    check(not body["has_oxen_api_key"], "null clears the key: %r", body)
    for bad, field in (({"colour": 1}, "colour"), ({"rewrite_enabled": "yes"}, "rewrite_enabled"),
                       ({"rewrite_model": ""}, "rewrite_model"), ({"oxen_api_key": 5}, "oxen_api_key")):
        st, resp = s.request("PUT", "/api/settings", bad)
        check(st == 400 and resp["error"]["field"] == field, "%r -> %d %r", bad, st, resp)
    with open(s.log_path) as f:
        check(secret not in f.read(), "the key reached the log")


@test
def files_route_refuses_traversal_and_partial_files(s):
    gen = os.path.join(s.outputs, "generations")
    with open(os.path.join(gen, "x.mp4.part"), "wb") as f:
        f.write(b"partial")
    with open(os.path.join(s.outputs, "secret.txt"), "w") as f:
        f.write("secret")
    os.symlink(os.path.join(s.outputs, "secret.txt"), os.path.join(gen, "link.mp4"))
    for path in ("/api/files/generations/x.mp4.part", "/api/files/secret.txt", "/api/files/generations/../secret.txt",
                 "/api/files/generations/%2e%2e/secret.txt", "/api/files/.mmh3/run/nginx.conf",
                 "/api/files/generations/link.mp4", "/api/files/uploads/.body-x"):
        st, body, _ = s.request("GET", path, raw=True)
        check(st in (400, 403, 404) and b"secret" not in body, "%s -> %d", path, st)


@test
def sse_heartbeat_keeps_stream_open(s):
    ev = Events(s.base)
    try:
        end = time.time() + 20
        with ev.cond:
            while not any(c.startswith(": ping") for c in ev.comments) and time.time() < end and not ev.closed:
                ev.cond.wait(1)
        check(any(c.startswith(": ping") for c in ev.comments), "no heartbeat within 20 s (%r)", ev.comments)
        check(not ev.closed, "the stream closed")
    finally:
        ev.close()


# ---------------------------------------------------------------- serve itself

def leftover_processes(outputs):
    out = subprocess.run(["pgrep", "-f", outputs], capture_output=True, text=True).stdout.split()
    return [p for p in out if int(p) != os.getpid()]


def serve_owns_its_folder_and_its_children(build, first):
    """Restarts serve on the same outputs folder (the cluster exists now), checks a
    second serve there is refused, then SIGKILLs serve: its children must follow."""
    name = "serve_owns_its_folder_and_its_children"
    s = Stack(build, mock_seconds=1.0, work=first.work)
    try:
        s.start()
        g = s.enqueue(**small(steps=100))
        s.wait_for(g["generation_id"], lambda g: g["status"] == "processing", what="processing")
        second = subprocess.run([s.mmh3, "serve", "--mock", "--listen", "127.0.0.1:%d" % (s.port + 1),
                                 "--outputs", s.outputs], capture_output=True, text=True, timeout=60)
        check(second.returncode != 0 and "another mmh3 serve" in second.stderr, "a second serve: %d %s",
              second.returncode, second.stderr.strip()[-300:])
        s.proc.kill()
        s.proc.wait()
        end = time.time() + 15
        while time.time() < end and leftover_processes(s.outputs):
            time.sleep(0.2)
        left = leftover_processes(s.outputs)
        check(not left, "processes outlived serve: %s", subprocess.run(["ps", "-o", "pid,args", "-p", ",".join(left)],
                                                                       capture_output=True, text=True).stdout)
        # And it comes back on the same folder; the interrupted job is recovered.
        s3 = Stack(build, mock_seconds=1.0, work=first.work)
        s3.start()
        try:
            g = s3.wait_for(g["generation_id"], lambda g: g["status"] in TERMINAL, timeout=60, what="recovery")
            # The worker, told by the death signal, re-queues the job uncounted
            # when the database is still up, else recovery counts the attempt.
            check(g["status"] == "succeeded" and g["attempts"] in (1, 2), "after the restart %s", short(g))
        finally:
            check(s3.stop() == 0, "stop after restart")
        print("PASS " + name)
        return 0
    except Exception as e:  # noqa: BLE001
        print("FAIL %s: %s\n%s" % (name, e, s.log_tail(10)))
        return 1
    finally:
        s.stop()


# ---------------------------------------------------------------- runner

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("MMH3_BUILD", "build"))
    ap.add_argument("tests", nargs="*")
    a = ap.parse_args()
    chosen = [t for t in TESTS if not a.tests or t.__name__ in a.tests]
    s = Stack(a.build, mock_seconds=1.0)
    failed = 0
    try:
        s.start()
        print("PASS stack_starts (serve --mock on %s)" % s.base)
    except Exception as e:  # noqa: BLE001
        print("FAIL stack_starts: %s" % e)
        s.stop()
        s.cleanup()
        return 1
    # The heartbeat test waits ~15 s; run it beside the others.
    slow = [t for t in chosen if t is sse_heartbeat_keeps_stream_open]
    results = {}

    def run(t):
        t0 = time.time()
        try:
            t(s)
            results[t] = "PASS %s (%.1fs)" % (t.__name__, time.time() - t0)
        except Exception as e:  # noqa: BLE001
            detail = str(e) if isinstance(e, AssertionError) else " | ".join(
                traceback.format_exc().strip().splitlines()[-3:])
            results[t] = "FAIL %s: %s" % (t.__name__, detail)
    threads = [threading.Thread(target=run, args=(t,)) for t in slow]
    for th in threads:
        th.start()
    for t in chosen:
        if t in slow:
            continue
        run(t)
        print(results[t], flush=True)
        failed += results[t].startswith("FAIL")
    for th in threads:
        th.join()
    for t in slow:
        print(results[t], flush=True)
        failed += results[t].startswith("FAIL")
    rc = s.stop()
    procs = subprocess.run(["pgrep", "-f", s.outputs], capture_output=True, text=True).stdout.split()
    if rc == 0 and not procs:
        print("PASS serve_stops_cleanly_on_ctrl_c")
    else:
        failed += 1
        print("FAIL serve_stops_cleanly_on_ctrl_c: exit %r, processes left %r\n%s" % (rc, procs, s.log_tail(15)))
    failed += serve_owns_its_folder_and_its_children(a.build, s)
    if failed:
        print("  (serve log: %s)" % s.log_path)
        os.environ["MMH3_KEEP_TEST_DIR"] = "1"
    s.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
