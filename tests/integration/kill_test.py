#!/usr/bin/env python3
"""Kill tests of the serving stack (docs/SECURITY.md, "Crash safety").

`mmh3 serve --mock` runs the real stack (PostgreSQL, nginx, mmh3-fcgi, a
mock-engine worker) under a steady load: a client enqueueing short jobs, a
client uploading pictures and clips, the worker rendering. Round after round
we SIGKILL the worker, the FastCGI pool, PostgreSQL (the postmaster) and
nginx, each at a moment when an enqueue request, an upload request and a
render are all in flight, and let `serve` bring it back. Afterwards:

- every job the API accepted (HTTP 200) is in the database, and every job,
  accepted or not, ends succeeded, or failed with a reason;
- every upload the API accepted is recorded and its file is whole;
- no served file is truncated: each clip and poster of a succeeded job and
  each upload is fetched over HTTP and decodes completely (ffprobe counts the
  frames), and every file with a public name decodes too; hidden files
  (attempts in progress, upload spools) are never served.

    tests/integration/kill_test.py --build BUILD [--rounds N]

Prints PASS/FAIL lines and the figures (kills per target and what each hit).
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack  # noqa: E402

TARGETS = ["worker", "fcgi", "postgres", "nginx"]
JOB = dict(frames=5, width=64, height=64, steps=8, preset="ultrafast", no_audio=False)
MAX_BACKLOG = 6
UUID_NAME = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def log(msg):
    print(msg, flush=True)


class Load:
    """Clients that enqueue short jobs at a steady pace (the worker always has
    work) and, while armed (the moments before a kill), keep an enqueue and an
    upload in flight back to back."""

    def __init__(self, s, media):
        self.s = s
        self.media = media
        self.lock = threading.Lock()
        self.in_flight = {"enqueue": 0, "upload": 0}
        self.accepted_jobs = []
        self.accepted_uploads = []
        self.errors = {"enqueue": {}, "upload": {}}
        self.sent = {"enqueue": 0, "upload": 0}
        self.stop = threading.Event()
        self.pause_enqueue = threading.Event()
        self.armed = threading.Event()
        self.threads = [threading.Thread(target=self.enqueuer, daemon=True),
                        threading.Thread(target=self.uploader, daemon=True)]

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def _post(self, kind, path, body, headers):
        with self.lock:
            self.in_flight[kind] += 1
            self.sent[kind] += 1
        try:
            conn = http.client.HTTPConnection(self.s.base, timeout=60)
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            return resp.status, data
        except OSError as e:
            return "connection: " + e.__class__.__name__, b""
        finally:
            with self.lock:
                self.in_flight[kind] -= 1

    def _error(self, kind, status):
        with self.lock:
            self.errors[kind][str(status)] = self.errors[kind].get(str(status), 0) + 1

    def enqueuer(self):
        n = 0
        while not self.stop.is_set():
            if self.pause_enqueue.is_set():
                time.sleep(0.05)
                continue
            n += 1
            body = json.dumps(dict(JOB, prompt="kill test job %d" % n, seed=n))
            st, data = self._post("enqueue", "/api/ai/queue", body, {"Content-Type": "application/json"})
            if st == 200:
                with self.lock:
                    self.accepted_jobs.append(json.loads(data)["generations"][0]["generation_id"])
            else:
                self._error("enqueue", st)
            if not self.armed.is_set():
                self.armed.wait(0.5)

    def uploader(self):
        n = 0
        while not self.stop.is_set():
            if not self.armed.wait(0.1):
                continue
            n += 1
            name, data = ("clip.mp4", self.media["clip.mp4"]) if n % 2 else ("still.png", self.media["still.png"])
            boundary = "killtest%d" % n
            body = (("--%s\r\nContent-Disposition: form-data; name=\"files\"; filename=\"%s\"\r\n"
                     "Content-Type: application/octet-stream\r\n\r\n" % (boundary, name)).encode() + data
                    + ("\r\n--%s--\r\n" % boundary).encode())
            st, resp = self._post("upload", "/api/images", body,
                                  {"Content-Type": "multipart/form-data; boundary=" + boundary})
            if st == 200:
                with self.lock:
                    self.accepted_uploads.append((json.loads(resp)["images"][0], len(data)))
            else:
                self._error("upload", st)


def make_media(work):
    out = {}
    specs = {
        "still.png": ["-f", "lavfi", "-i", "testsrc=size=320x180:rate=1", "-frames:v", "1"],
        "clip.mp4": ["-f", "lavfi", "-i", "testsrc=size=320x240:rate=24", "-f", "lavfi", "-i",
                     "sine=f=440:r=32000", "-t", "2", "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac",
                     "-shortest"],
    }
    for name, args in specs.items():
        path = os.path.join(work, "kill-" + name)
        subprocess.run(["ffmpeg", "-v", "error", "-y"] + args + [path], check=True)
        with open(path, "rb") as f:
            out[name] = f.read()
    return out


def psql_try(s, sql):
    try:
        out = subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", s.conninfo(), "-c", sql],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else None
    except subprocess.TimeoutExpired:
        return None


def pid_and_age(s, name):
    path = os.path.join(s.outputs, ".mmh3", "run", name + ".pid")
    try:
        with open(path) as f:
            pid = int(f.read().strip())
        os.kill(pid, 0)
        return pid, time.time() - os.stat(path).st_mtime
    except (OSError, ValueError):
        return None, 0


def stack_healthy(s):
    """Everything answers: the API through nginx, the database, an online worker."""
    try:
        st, body = s.get("/api/status")
    except (OSError, ValueError):
        return False
    return st == 200 and any(w["online"] and w["state"] in ("idle", "busy") for w in body.get("workers", []))


def ffprobe_frames(path_or_bytes, stream="v:0"):
    """Frames ffprobe decodes (counting every one), or None when it cannot read the input."""
    args = ["ffprobe", "-v", "error", "-count_frames", "-select_streams", stream, "-show_entries",
            "stream=nb_read_frames", "-of", "csv=p=0"]
    if isinstance(path_or_bytes, bytes):
        out = subprocess.run(args + ["-i", "pipe:0"], input=path_or_bytes, capture_output=True)
    else:
        out = subprocess.run(args + [path_or_bytes], capture_output=True)
    text = out.stdout.decode().strip().rstrip(",")
    if out.returncode != 0 or not text.isdigit():
        return None
    return int(text)


def fetch(s, url):
    conn = http.client.HTTPConnection(s.base, timeout=30)
    conn.request("GET", url)
    resp = conn.getresponse()
    data = resp.read()
    length = resp.getheader("Content-Length")
    conn.close()
    return resp.status, data, int(length) if length else None


def run(build, rounds):
    failed = 0
    t_start = time.time()
    s = Stack(build, mock_seconds=1.0, extra=["--lease", "5"])
    try:
        s.start()
        log("PASS kill/stack_starts (serve --mock on %s)" % s.base)
    except Exception as e:  # noqa: BLE001
        log("FAIL kill/stack_starts: %s" % e)
        s.stop()
        return 1
    media = make_media(s.work)
    load = Load(s, media)
    load.start()
    kills = {t: {"kills": 0, "enqueue": 0, "upload": 0, "render": 0, "recovery_s": []} for t in TARGETS}
    problems = []
    aged_wait = [0.0]
    try:
        for rnd in range(rounds):
            for target in TARGETS:
                # serve backs off from a process that dies within 5 s of its start:
                # each one has run longer than that before we kill it.
                end = time.time() + 60
                t_aged = time.time()
                while time.time() < end:
                    pid, age = pid_and_age(s, target)
                    if pid and age > 5.5 and stack_healthy(s):
                        break
                    time.sleep(0.1)
                else:
                    problems.append("round %d: the stack did not come back before killing %s" % (rnd, target))
                    raise RuntimeError(problems[-1] + "\n" + s.log_tail(20))
                aged_wait[0] += time.time() - t_aged
                # Keep the backlog short, so the jobs end within the test.
                queued = psql_try(s, "SELECT count(*) FROM generations WHERE status = 'queued'")
                if queued is not None and int(queued) > MAX_BACKLOG:
                    load.pause_enqueue.set()
                    end = time.time() + 30
                    while time.time() < end and int(psql_try(s, "SELECT count(*) FROM generations"
                                                                " WHERE status = 'queued'") or 0) > 2:
                        time.sleep(0.2)
                load.pause_enqueue.clear()
                # Wait for a moment with an enqueue, an upload and a render in flight:
                # first a render (the steady enqueues keep the worker busy), then the
                # clients go back to back (armed) until both requests are in flight.
                end = time.time() + 10
                hit = None
                t_wait = time.time()
                while time.time() < end and not hit:
                    rendering = psql_try(s, "SELECT count(*) FROM generations WHERE status = 'processing'"
                                            " AND stage IN ('denoising', 'decoding_video', 'decoding_audio',"
                                            " 'writing')")
                    if not rendering or int(rendering) == 0:
                        time.sleep(0.02)
                        continue
                    load.armed.set()
                    armed_until = time.time() + 0.3
                    while time.time() < armed_until:
                        time.sleep(random.uniform(0.002, 0.02))
                        with load.lock:
                            flight = dict(load.in_flight)
                        if flight["enqueue"] > 0 and flight["upload"] > 0:
                            hit = flight
                            break
                    if not hit:
                        load.armed.clear()
                k_wait = time.time() - t_wait
                pid, _ = pid_and_age(s, target)
                os.kill(pid, signal.SIGKILL)
                load.armed.clear()
                k = kills[target]
                k["kills"] += 1
                if hit:
                    k["enqueue"] += 1
                    k["upload"] += 1
                    k["render"] += 1
                t_kill = time.time()
                end = t_kill + 90
                while time.time() < end:
                    new_pid, _ = pid_and_age(s, target)
                    if new_pid and new_pid != pid and stack_healthy(s):
                        break
                    time.sleep(0.05)
                k["recovery_s"].append(time.time() - t_kill)
                k.setdefault("wait_s", []).append(k_wait)
            log("  round %d/%d done (%.0f s): %d jobs and %d uploads accepted so far"
                % (rnd + 1, rounds, time.time() - t_start, len(load.accepted_jobs), len(load.accepted_uploads)))
    except Exception as e:  # noqa: BLE001
        problems.append("kill loop: %s" % e)
    finally:
        load.finish()

    # A job that takes the worker down with it, three times over, is failed with a
    # message instead of crash-looping (serve restarts the worker each time).
    poison_problem = None
    try:
        # The last kill round may have just restarted PostgreSQL: the API answers 503 "try again
        # shortly" until it is back, and a client does exactly that.
        fields = dict(JOB, prompt="a job that kills its worker", steps=200)
        end = time.time() + 90
        while True:
            st, body = s.request("POST", "/api/ai/queue", fields)
            if st == 200 or st != 503 or time.time() > end:
                break
            time.sleep(0.5)
        if st != 200:
            raise AssertionError("enqueue %r -> %d %r" % (fields, st, body))
        gid = body["generations"][0]["generation_id"]
        for attempt in (1, 2, 3):
            s.wait_for(gid, lambda g: g["attempts"] == attempt and g["status"] == "processing"
                       and g["stage"] == "denoising", timeout=90, what="attempt %d" % attempt)
            pid, _ = pid_and_age(s, "worker")
            os.kill(pid, signal.SIGKILL)
        g = s.wait_for(gid, lambda g: g["status"] in ("succeeded", "failed"), timeout=60, what="the verdict")
        if not (g["status"] == "failed" and g["attempts"] == 3 and "3 times" in (g["error_message"] or "")):
            poison_problem = "after 3 crashes: %s, attempts %s, %r" % (g["status"], g["attempts"], g["error_message"])
        else:
            log("  info: the poison job: %s" % g["error_message"])
    except Exception as e:  # noqa: BLE001
        poison_problem = str(e)

    # ------------------------------------------------------------ settle
    end = time.time() + 240
    left = None
    while time.time() < end:
        left = psql_try(s, "SELECT count(*) FROM generations WHERE status IN ('queued', 'processing')")
        if left == "0":
            break
        time.sleep(0.5)
    t_settled = time.time()

    # ------------------------------------------------------------ figures
    for t in TARGETS:
        k = kills[t]
        rec = sorted(k["recovery_s"]) or [0]
        log("  info: %-8s %2d kills; in flight at the kill: enqueue %d, upload %d, render %d; back in %.1f s median,"
            " %.1f s max; %.1f s waited for the moment" % (t, k["kills"], k["enqueue"], k["upload"], k["render"],
                                                           rec[len(rec) // 2], rec[-1], sum(k.get("wait_s", [0]))))
    log("  info: requests: %d enqueues sent, %d accepted, refused/failed %r; %d uploads sent, %d accepted,"
        " refused/failed %r" % (load.sent["enqueue"], len(load.accepted_jobs), load.errors["enqueue"],
                                 load.sent["upload"], len(load.accepted_uploads), load.errors["upload"]))

    def verdict(name, ok, why=""):
        nonlocal failed
        if ok:
            log("PASS kill/%s" % name)
        else:
            failed += 1
            log("FAIL kill/%s: %s" % (name, why))

    log("  info: %.0f s waiting for processes to be older than 5 s (serve's restart back-off)" % aged_wait[0])
    verdict("kills_hit_enqueue_upload_and_render",
            not problems and all(kills[t]["kills"] >= rounds and kills[t]["render"] >= rounds for t in TARGETS),
            "; ".join(problems) or "kills that did not find all three in flight: %r"
            % {t: kills[t]["kills"] - kills[t]["render"] for t in TARGETS})

    verdict("job_crashing_the_worker_3_times_fails_with_a_message", poison_problem is None, poison_problem or "")

    # Every job ends, and none is lost.
    rows = psql_try(s, "SELECT json_agg(json_build_object('id', id, 'status', status, 'error', error_message,"
                       " 'attempts', attempts, 'result', result_path, 'poster', poster_path)) FROM generations")
    rows = {r["id"]: r for r in json.loads(rows or "[]") or []}
    lost = [g for g in load.accepted_jobs if g not in rows]
    verdict("no_accepted_job_lost", not lost, "%d accepted jobs are not in the database: %r" % (len(lost), lost[:5]))
    open_rows = [r for r in rows.values() if r["status"] in ("queued", "processing")]
    verdict("every_job_ends", left == "0" and not open_rows,
            "%d jobs still open %.0f s after the last kill: %r" % (len(open_rows), t_settled - t_start,
                                                                  open_rows[:3]))
    bad_fail = [r for r in rows.values() if r["status"] == "failed" and not (r["error"] or "").strip()]
    bad_status = [r for r in rows.values() if r["status"] not in ("succeeded", "failed", "queued", "processing")]
    verdict("failures_say_why", not bad_fail and not bad_status,
            "failed without a reason: %r; unexpected: %r" % (bad_fail[:3], bad_status[:3]))
    by_status = {}
    reasons = {}
    for r in rows.values():
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
        if r["status"] == "failed":
            key = re.sub(r"[0-9a-f-]{36}|vm:\d+:\w+|\d+", "#", r["error"])[:90]
            reasons[key] = reasons.get(key, 0) + 1
    log("  info: jobs: %r; attempts > 1: %d; failure reasons: %r"
        % (by_status, sum(1 for r in rows.values() if r["attempts"] > 1), reasons))

    # Every clip with a public name decodes whole (ffprobe counts its frames) ...
    public_clips = sorted(f for f in os.listdir(os.path.join(s.outputs, "generations"))
                          if UUID_NAME.match(f) and f.endswith(".mp4"))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        frames = dict(zip(public_clips, pool.map(
            lambda f: ffprobe_frames(os.path.join(s.outputs, "generations", f)), public_clips)))
    # ... and what is served is exactly that file.
    truncated = ["generations/%s decodes %s of %d frames" % (f, n, JOB["frames"])
                 for f, n in frames.items() if n != JOB["frames"]]
    checked = 0
    for r in rows.values():
        if r["status"] != "succeeded":
            continue
        st, data, length = fetch(s, "/api/files/" + r["result"])
        try:
            with open(os.path.join(s.outputs, r["result"]), "rb") as f:
                on_disk = f.read()
        except OSError:
            on_disk = None
        if st != 200 or length != len(data) or data != on_disk:
            truncated.append("%s: HTTP %s, %s of %s bytes, %s on disk" % (
                r["result"], st, len(data), length, len(on_disk) if on_disk is not None else "nothing"))
        if r["poster"]:
            st, data, length = fetch(s, "/api/files/" + r["poster"])
            if st != 200 or not (data.startswith(b"\xff\xd8") and data.rstrip(b"\0").endswith(b"\xff\xd9")):
                truncated.append("%s: HTTP %s, not a whole JPEG" % (r["poster"], st))
        checked += 1
    verdict("served_clips_whole", checked > 0 and not truncated,
            "%d of %d: %s" % (len(truncated), checked, "; ".join(truncated[:5])))

    # Accepted uploads are recorded and served byte for byte as sent.
    bad_up = []
    recorded = psql_try(s, "SELECT json_object_agg(id, bytes) FROM uploads") or "{}"
    recorded = json.loads(recorded) or {}
    for item, sent in load.accepted_uploads:
        st, data, length = fetch(s, item["url"])
        original = media["clip.mp4" if item["kind"] == "video" else "still.png"]
        if st != 200 or data != original or recorded.get(item["image_id"]) != sent:
            bad_up.append("%s: recorded %r bytes, HTTP %s, %d of %d bytes" % (
                item["url"], recorded.get(item["image_id"]), st, len(data), sent))
    verdict("accepted_uploads_recorded_and_whole", load.accepted_uploads and not bad_up,
            "%d of %d: %s" % (len(bad_up), len(load.accepted_uploads), "; ".join(bad_up[:5])))

    # Whatever carries a public name is whole; whatever is hidden is never served.
    bad_files = []
    hidden = 0
    for sub in ("generations", "uploads"):
        for name in sorted(os.listdir(os.path.join(s.outputs, sub))):
            if UUID_NAME.match(name):
                continue  # clips checked above; uploads are renamed into place whole
            hidden += 1
            st, data, _ = fetch(s, "/api/files/%s/%s" % (sub, name))
            if st == 200:
                bad_files.append("%s/%s (hidden) is served" % (sub, name))
    verdict("hidden_files_unserved", not bad_files, "; ".join(bad_files[:6]))
    log("  info: %d hidden files left (interrupted attempts and upload spools, removed later)" % hidden)

    rc = s.stop()
    verdict("serve_stops_cleanly_after_the_kills", rc == 0, "exit %r\n%s" % (rc, s.log_tail(15)))
    log("  info: %.0f s in all (kills and settling %.0f s, checks %.0f s)"
        % (time.time() - t_start, t_settled - t_start, time.time() - t_settled))
    if failed:
        os.environ["MMH3_KEEP_TEST_DIR"] = "1"
        log("  (serve log: %s)" % s.log_path)
    s.cleanup()
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("MMH3_BUILD", "build"))
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("MMH3_KILL_ROUNDS", "20")))
    a = ap.parse_args()
    return run(a.build, a.rounds)


if __name__ == "__main__":
    sys.exit(main())
