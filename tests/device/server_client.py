#!/usr/bin/env python3
"""The HTTP side of tests/device/server.sh: drives `mmh3 serve` through nginx like a browser tab
would (Python standard library only: the GPU host has no curl).

    server_client.py --base 127.0.0.1:PORT ready [--timeout S]
    server_client.py --base ... job NAME --request JSON --out DIR [--timeout S] [--cancel-after-start]
    server_client.py --base ... status [--out FILE]
    server_client.py --base ... queue NAME --request JSON --jobs N --out DIR [--timeout S] [--serve-start T]
    server_client.py report RECORD.json [--gpu-csv FILE] [--label pipeline=on]

`job` opens the event stream (GET /api/events) BEFORE it enqueues (POST /api/ai/queue), then
records every generation_update of its job with the time since the enqueue answered: when the
worker claimed it, each stage's first event, each denoising step. Succeeded: the stored row
(timings, placement, seed) is read back, the mp4 is downloaded through nginx (result_url) to
DIR/NAME.mp4, and a summary is printed ("SERVER <key> <value>" lines for the shell; the whole record
in DIR/NAME.json). --cancel-after-start: the job is cancelled (DELETE) once its prompt is being
encoded or a later stage is reached — a warm worker's start latency without a whole render.
Exit status 0 when the job ended as expected (succeeded, or cancelled with --cancel-after-start).

`queue` (tests/device/throughput.sh) enqueues N copies of one request back to back (seed 1..N) and
records, in wall-clock seconds so they line up with nvidia-smi's samples, each job's enqueue, claim,
stage starts, denoising steps, first generation_preview and end (DIR/NAME.json). `report` reads such
a record (and the nvidia-smi CSV sampled meanwhile: timestamp, utilization %, power W) and prints the
per-job lines and one "RESULT throughput" line.
"""
import argparse
import datetime
import http.client
import json
import os
import socket
import sys
import threading
import time

STAGES = ("loading", "encoding_prompt", "encoding_references", "denoising", "decoding_video", "decoding_audio",
          "writing")
TERMINAL = ("succeeded", "failed", "cancelled")


def request(base, method, path, body=None, timeout=60):
    conn = http.client.HTTPConnection(base, timeout=timeout)
    headers = {}
    data = None
    if body is not None:
        data = json.dumps(body)
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=data, headers=headers)
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    try:
        return resp.status, json.loads(payload) if payload else None, payload
    except ValueError:
        return resp.status, None, payload


class Stream:
    """GET /api/events on a thread; each event's JSON with its arrival time (time.monotonic())."""

    def __init__(self, base):
        self.events = []
        self.cond = threading.Condition()
        self.closed = False
        self.conn = http.client.HTTPConnection(base, timeout=3600)
        self.conn.request("GET", "/api/events", headers={"Accept": "text/event-stream"})
        self.resp = self.conn.getresponse()
        if self.resp.status != 200:
            raise RuntimeError("GET /api/events -> %d" % self.resp.status)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        ev = {}
        try:
            while True:
                line = self.resp.readline()
                if not line:
                    break
                line = line.decode("utf-8").rstrip("\n")
                if line == "":
                    if "data" in ev:
                        try:
                            data = json.loads(ev["data"])
                        except ValueError:
                            data = None
                        with self.cond:
                            self.events.append((time.monotonic(), ev.get("event", "message"), data))
                            self.cond.notify_all()
                    ev = {}
                elif not line.startswith(":"):
                    k, _, v = line.partition(":")
                    ev[k] = v[1:] if v.startswith(" ") else v
        except (OSError, ValueError):
            pass
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def close(self):
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass
        self.conn.close()


def cmd_ready(a):
    end = time.time() + a.timeout
    last = None
    while time.time() < end:
        try:
            st, body, _ = request(a.base, "GET", "/api/status", timeout=5)
            last = (st, body)
            if st == 200 and body["engine"]["state"] == "ready" and any(w.get("online") for w in body["workers"]):
                print("SERVER ready engine=%s state=%s" % (body["engine"]["kind"], body["engine"]["state"]))
                return 0
        except (OSError, ValueError, KeyError, TypeError):
            pass
        time.sleep(0.25)
    print("SERVER not_ready within %ss; last /api/status: %r" % (a.timeout, last))
    return 1


def cmd_status(a):
    st, body, raw = request(a.base, "GET", "/api/status")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(body, f, indent=2)
    if st != 200 or not body:
        print("SERVER status_http %d %r" % (st, raw[:300]))
        return 1
    e = body.get("engine", {})
    print("SERVER engine kind=%s state=%s resident=%s placement=%s" % (e.get("kind"), e.get("state"),
                                                                   e.get("resident"), e.get("placement")))
    if e.get("message"):
        print("SERVER engine_message %s" % e["message"])
    details = e.get("details") or {}
    for k in sorted(details):
        print("SERVER engine_details.%s %s" % (k, json.dumps(details[k], sort_keys=True)))
    for w in body.get("workers", []):
        print("SERVER worker %s state=%s online=%s engine=%s" % (w.get("worker_id"), w.get("state"), w.get("online"),
                                                               w.get("engine_kind")))
    print("SERVER queue %s" % json.dumps(body.get("queue"), sort_keys=True))
    return 0


def cmd_job(a):
    req = json.loads(a.request)
    stream = Stream(a.base)
    time.sleep(0.2)  # the stream is registered with the hub before the job exists
    t_post = time.monotonic()
    st, body, raw = request(a.base, "POST", "/api/ai/queue", req)
    t0 = time.monotonic()
    if st != 200:
        print("SERVER enqueue_failed %d %s" % (st, raw[:500].decode("utf-8", "replace")))
        return 1
    gid = body["generations"][0]["generation_id"]
    print("SERVER %s_enqueued %s (POST answered in %.3f s)" % (a.name, gid, t0 - t_post), flush=True)
    end = t0 + a.timeout
    seen = 0
    firsts = {}  # "processing" and each stage -> seconds after the enqueue
    steps = []  # (step, seconds after the enqueue), first event of each step
    last = None
    cancelled = False
    while True:
        with stream.cond:
            while seen >= len(stream.events) and not stream.closed and time.monotonic() < end:
                stream.cond.wait(min(1.0, max(0.01, end - time.monotonic())))
            batch = stream.events[seen:]
            seen = len(stream.events)
            closed = stream.closed
        for t, kind, g in batch:
            if kind != "generation_update" or not g or g.get("generation_id") != gid:
                continue
            if last and g.get("seq", 0) < last.get("seq", 0):
                continue  # a stale snapshot
            last = g
            dt = t - t0
            if g["status"] == "processing" and "processing" not in firsts:
                firsts["processing"] = dt
                print("SERVER %s_event processing +%.2fs" % (a.name, dt), flush=True)
            stage = g.get("stage")
            if g["status"] == "processing" and stage in STAGES and stage not in firsts:
                firsts[stage] = dt
                print("SERVER %s_event stage %s +%.2fs" % (a.name, stage, dt), flush=True)
            if stage == "denoising" and g.get("step", 0) >= 1 and (not steps or g["step"] > steps[-1][0]):
                steps.append((g["step"], dt))
                print("SERVER %s_event step %d/%d +%.2fs" % (a.name, g["step"], g.get("total_steps") or 0, dt),
                      flush=True)
            if a.cancel_after_start and not cancelled and any(s in firsts for s in STAGES[1:]):
                cst, cbody, _ = request(a.base, "DELETE", "/api/ai/queue/%s" % gid)
                cancelled = True
                print("SERVER %s_cancel +%.2fs -> %d %s" % (a.name, time.monotonic() - t0, cst,
                                                            (cbody or {}).get("action")), flush=True)
        if last and last["status"] in TERMINAL:
            break
        if closed or time.monotonic() >= end:
            break
    t_end = time.monotonic() - t0
    stream.close()
    st, g, _ = request(a.base, "GET", "/api/ai/queue/%s" % gid)
    if st != 200 or not g:
        print("SERVER %s_row_missing %d" % (a.name, st))
        return 1
    record = {"name": a.name, "request": req, "generation": g, "events_after_enqueue": firsts,
              "steps": steps, "end_seen_after": t_end}
    ok = g["status"] == ("cancelled" if a.cancel_after_start else "succeeded")
    print("SERVER %s_status %s (seen on the stream after %.2f s; %s)" % (
        a.name, g["status"], t_end, "stream closed early" if closed and g["status"] not in TERMINAL else "ok"))
    if g.get("error_message"):
        print("SERVER %s_error %s" % (a.name, g["error_message"]))
    if "processing" in firsts:
        print("SERVER %s_claimed_after %.2f s" % (a.name, firsts["processing"]))
    for s in STAGES:
        if s in firsts:
            print("SERVER %s_first_%s_after %.2f s" % (a.name, s, firsts[s]))
    if steps:
        print("SERVER %s_first_step_event_after %.2f s" % (a.name, steps[0][1]))
        gaps = [b[1] - p[1] for p, b in zip(steps, steps[1:]) if b[0] == p[0] + 1]
        if gaps:
            print("SERVER %s_step_events %d seen of %s; interval mean %.3f s, min %.3f, max %.3f" % (
                a.name, len(steps), g.get("total_steps"), sum(gaps) / len(gaps), min(gaps), max(gaps)))
        record["step_intervals"] = gaps
    timings = g.get("timings") or {}
    print("SERVER %s_timings %s" % (a.name, " ".join("%s=%.2f" % (k, v) for k, v in timings.items()
                                                     if isinstance(v, (int, float)))))
    if g.get("total_seconds") is not None:
        print("SERVER %s_total_seconds %.2f (enqueue to the end on the stream: %.2f s)" % (
            a.name, g["total_seconds"], t_end))
    print("SERVER %s_placement %s" % (a.name, g.get("placement")))
    print("SERVER %s_seed %s size %sx%s frames %s steps %s" % (a.name, g.get("seed"), g.get("width"), g.get("height"),
                                                               g.get("frames"), g.get("steps")))
    if g["status"] == "succeeded":
        url = g.get("result_url") or ""
        t = time.monotonic()
        conn = http.client.HTTPConnection(a.base, timeout=120)
        conn.request("GET", url)
        resp = conn.getresponse()
        path = os.path.join(a.out, a.name + ".mp4")
        n = 0
        with open(path, "wb") as f:
            while True:
                chunk = resp.read(1 << 20)
                if not chunk:
                    break
                f.write(chunk)
                n += len(chunk)
        conn.close()
        ctype = resp.getheader("Content-Type")
        print("SERVER %s_download %s -> %d, %s, %d bytes in %.2f s (nginx)" % (a.name, url, resp.status, ctype, n,
                                                                              time.monotonic() - t))
        record["download"] = {"url": url, "status": resp.status, "content_type": ctype, "bytes": n}
        ok = ok and resp.status == 200 and n > 0 and ctype == "video/mp4"
    with open(os.path.join(a.out, a.name + ".json"), "w") as f:
        json.dump(record, f, indent=2)
    return 0 if ok else 1


def wait_events(stream, seen, end):
    """The events after index `seen` (waiting up to `end`), the new index, and whether the stream closed."""
    with stream.cond:
        while seen >= len(stream.events) and not stream.closed and time.monotonic() < end:
            stream.cond.wait(min(1.0, max(0.01, end - time.monotonic())))
        return stream.events[seen:], len(stream.events), stream.closed


def enqueue_all(a, req):
    """N POSTs back to back; {generation_id: job record} in enqueue order, or None."""
    jobs = {}
    for i in range(a.jobs):
        body = dict(req, seed=i + 1)
        st, out, raw = request(a.base, "POST", "/api/ai/queue", body)
        if st != 200:
            print("SERVER enqueue_failed %d %s" % (st, raw[:500].decode("utf-8", "replace")))
            return None
        gid = out["generations"][0]["generation_id"]
        jobs[gid] = {"index": i + 1, "generation_id": gid, "enqueued": time.time(), "stages": {}, "steps": [],
                     "previews": []}
    return jobs


def note_event(job, kind, g, now):
    """Folds one event of this job into its record; True when the job reached a terminal state."""
    if kind == "generation_preview":
        job["previews"].append([g.get("step"), now])
        return False
    if g.get("seq", 0) < job.get("seq", 0):
        return False  # a stale snapshot
    job["seq"] = g.get("seq", 0)
    if g["status"] == "processing":
        job.setdefault("claimed", now)
        stage = g.get("stage")
        if stage in STAGES:
            job["stages"].setdefault(stage, now)
        if stage == "denoising" and g.get("step", 0) >= 1 and (not job["steps"] or g["step"] > job["steps"][-1][0]):
            job["steps"].append([g["step"], now])
    if g["status"] in TERMINAL:
        job.setdefault("done", now)
        job["status"] = g["status"]
        return True
    return False


def cmd_queue(a):
    req = json.loads(a.request)
    stream = Stream(a.base)
    time.sleep(0.2)  # the stream is registered with the hub before the jobs exist
    wall = time.time() - time.monotonic()  # the stream stamps events with time.monotonic()
    jobs = enqueue_all(a, req)
    if jobs is None:
        return 1
    print("SERVER %s_enqueued %d jobs in %.3f s" % (a.name, len(jobs), time.time() - min(
        j["enqueued"] for j in jobs.values())), flush=True)
    end = time.monotonic() + a.timeout
    seen, left, closed = 0, len(jobs), False
    while left and not closed and time.monotonic() < end:
        batch, seen, closed = wait_events(stream, seen, end)
        for t, kind, g in batch:
            job = jobs.get((g or {}).get("generation_id")) if kind in ("generation_update", "generation_preview") else None
            if job is None or "done" in job:
                continue
            if note_event(job, kind, g, t + wall):
                left -= 1
                print("SERVER %s_job%d %s +%.2fs" % (a.name, job["index"], job["status"], job["done"] - job["enqueued"]),
                      flush=True)
    stream.close()
    ok = True
    for job in jobs.values():
        st, g, _ = request(a.base, "GET", "/api/ai/queue/%s" % job["generation_id"])
        job["row"] = g if st == 200 else None
        if not g or g.get("status") != "succeeded":
            ok = False
            print("SERVER %s_job%d_failed %s %s" % (a.name, job["index"], (g or {}).get("status"),
                                                   (g or {}).get("error_message")))
    record = {"name": a.name, "request": req, "serve_start": a.serve_start,
              "jobs": sorted(jobs.values(), key=lambda j: j["index"])}
    with open(os.path.join(a.out, a.name + ".json"), "w") as f:
        json.dump(record, f, indent=2)
    return 0 if ok and not left else 1


def read_gpu_csv(path):
    """nvidia-smi --format=csv,noheader,nounits lines -> [(unix seconds, utilization %, power W)]."""
    samples = []
    with open(path) as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            try:
                stamp = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")  # the host's local time
                samples.append((stamp.timestamp(), float(parts[1]), float(parts[2])))
            except (ValueError, IndexError):
                continue  # a header, or a line cut by the kill
    return samples


IDLE_UTIL = 5  # % below which a sample counts as idle: NVML's share of its period with a kernel running


def idle_runs(samples, lo, hi):
    """[(start, seconds)] of the idle stretches between lo and hi: from the first idle sample to the next busy one."""
    runs, start = [], None
    for t, util, _ in samples:
        if t < lo or t > hi:
            continue
        if util < IDLE_UTIL and start is None:
            start = t
        elif util >= IDLE_UTIL and start is not None:
            runs.append((start, t - start))
            start = None
    if start is not None:
        runs.append((start, hi - start))
    return runs


def gpu_bounds(job):
    """When a job's GPU work starts (prompt encoding, else the first step) and ends (the mux, else its end)."""
    st = job["stages"]
    first = [st[s] for s in ("loading", "encoding_prompt", "encoding_references", "denoising") if s in st]
    begin = min(first) if first else job.get("claimed")
    return begin, st.get("writing", job.get("done"))


def job_lines(job):
    """Prints one job's latencies after its enqueue; returns its first preview's delay after the first step
    event (< 0: the preview was relayed before that step's update), or None."""
    def rel(t):
        return "%.2f" % (t - job["enqueued"]) if t is not None else "n/a"

    step1 = job["steps"][0][1] if job["steps"] else None
    prev = job["previews"][0][1] if job["previews"] else None
    after = prev - step1 if prev is not None and step1 is not None else None
    print("QUEUE job%d %s: claim +%s, first step +%s, first preview +%s (%s s after the first step; %d previews), "
          "done +%s" % (job["index"], job.get("status"), rel(job.get("claimed")), rel(step1), rel(prev),
                        "%.2f" % after if after is not None else "n/a", len(job["previews"]), rel(job.get("done"))))
    timings = ((job.get("row") or {}).get("timings")) or {}
    print("QUEUE job%d stored timings: %s" % (job["index"], " ".join(
        "%s=%.2f" % (k, v) for k, v in timings.items() if isinstance(v, (int, float)))))
    return after


def fmt(v, spec="%.2f"):
    return spec % v if v is not None else "n/a"


def cmd_report(a):
    with open(a.record) as f:
        rec = json.load(f)
    jobs = rec["jobs"]
    afters = [x for x in (job_lines(j) for j in jobs) if x is not None]
    done = [j["done"] for j in jobs if "done" in j]
    first_enqueue = min(j["enqueued"] for j in jobs)
    span = max(done) - first_enqueue if len(done) == len(jobs) else None
    # between consecutive jobs: the previous one's GPU work ends -> the next one's starts (< 0: they overlap)
    pairs = [(gpu_bounds(p)[1], gpu_bounds(n)[0], n["steps"][0][1] if n["steps"] else gpu_bounds(n)[0])
             for p, n in zip(jobs, jobs[1:])]
    event_gaps = [b - e for e, b, _ in pairs if e is not None and b is not None]
    for i, g in enumerate(event_gaps):
        print("QUEUE events: job%d GPU work ends -> job%d GPU work starts %+.2f s" % (i + 1, i + 2, g))
    busy = gap_max = gap_mean = None
    samples = read_gpu_csv(a.gpu_csv) if a.gpu_csv and os.path.exists(a.gpu_csv) else []
    if samples and span is not None:
        window = [s for s in samples if first_enqueue <= s[0] <= max(done)]
        busy = sum(1 for s in window if s[1] >= IDLE_UTIL) / len(window) if window else None
        gaps = []
        for i, (end, _, next_step) in enumerate(pairs):
            runs = idle_runs(samples, end - 1.0, next_step) if end is not None and next_step is not None else []
            gaps.append(max([r[1] for r in runs] or [0.0]))
            print("QUEUE nvml: job%d -> job%d longest idle stretch %.2f s (%d samples in the window)" % (
                i + 1, i + 2, gaps[-1], sum(1 for s in samples if end - 1.0 <= s[0] <= next_step)))
        if window:
            print("QUEUE nvml: %d samples over the queue, utilization mean %.1f %%, power mean %.0f W, max %.0f W" % (
                len(window), sum(s[1] for s in window) / len(window), sum(s[2] for s in window) / len(window),
                max(s[2] for s in window)))
        if gaps:
            gap_max, gap_mean = max(gaps), sum(gaps) / len(gaps)
    cold = done[0] - rec["serve_start"] if done and rec.get("serve_start") else None
    print("RESULT throughput %s jobs=%d clips_per_hour=%s gpu_busy=%s idle_gap_max_s=%s idle_gap_mean_s=%s "
          "first_preview_after_step_s=%s cold_start_s=%s event_gap_max_s=%s" % (
              a.label, len(jobs), fmt(len(jobs) / span * 3600 if span else None, "%.1f"), fmt(busy, "%.3f"),
              fmt(gap_max), fmt(gap_mean), fmt(max(afters) if afters else None), fmt(cold),
              fmt(max(event_gaps) if event_gaps else None)))
    return 0 if span is not None else 1




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("ready")
    r.add_argument("--timeout", type=float, default=120)
    s = sub.add_parser("status")
    s.add_argument("--out")
    j = sub.add_parser("job")
    j.add_argument("name")
    j.add_argument("--request", required=True)
    j.add_argument("--out", required=True)
    j.add_argument("--timeout", type=float, default=600)
    j.add_argument("--cancel-after-start", action="store_true")
    q = sub.add_parser("queue")
    q.add_argument("name")
    q.add_argument("--request", required=True)
    q.add_argument("--jobs", type=int, default=4)
    q.add_argument("--out", required=True)
    q.add_argument("--timeout", type=float, default=600)
    q.add_argument("--serve-start", type=float, help="unix time mmh3 serve was started (the cold start)")
    r = sub.add_parser("report")
    r.add_argument("record")
    r.add_argument("--gpu-csv")
    r.add_argument("--label", default="pipeline=default")
    a = ap.parse_args()
    if a.cmd != "report" and not a.base:
        ap.error("--base is required")
    return {"ready": cmd_ready, "status": cmd_status, "job": cmd_job, "queue": cmd_queue, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
