"""The real serving stack for integration tests: `mmh3 serve --mock` (a private
PostgreSQL cluster, nginx, the FastCGI pool and a mock-engine worker) on a free
loopback port in a temporary folder, plus small HTTP, SSE and psql helpers.
Python 3 standard library only.

A stack that requires access tokens (`--auth on`, or a listen address beyond
loopback) prints its first token at start; Stack picks it up from the log
and sends it as `Authorization: Bearer` (request(..., auth=False) sends none).
"""
import http.client
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    def __init__(self, build, mock_seconds=1.0, extra=(), work=None, listen_host="127.0.0.1", token=None,
                 host_port_flags=False):
        self.build = os.path.abspath(build)
        self.mmh3 = os.path.join(self.build, "mmh3")
        self.work = work or tempfile.mkdtemp(prefix="mmh3-server-test-")
        os.chmod(self.work, 0o755)
        self.outputs = os.path.join(self.work, "outputs")
        # The worker's adapter folder is <models>/loras: the test's own, never the host's.
        self.models = os.path.join(self.work, "models")
        self.port = free_port()
        self.listen = "%s:%d" % (listen_host, self.port)
        self.base = "127.0.0.1:%d" % self.port
        self.token = token
        self.log_path = os.path.join(self.work, "serve-%d.log" % self.port)
        self.mock_seconds = mock_seconds
        self.extra = list(extra)
        # The original project's --host/--port instead of --listen HOST:PORT.
        self.listen_flags = (["--host", listen_host, "--port", str(self.port)] if host_port_flags
                             else ["--listen", self.listen])
        self.proc = None
        self.workers = []

    # ------------------------------------------------------------ lifecycle
    def start(self, timeout=90, engine_ready=True):
        log = open(self.log_path, "ab")
        args = [self.mmh3, "serve", "--mock", "--mock-seconds", str(self.mock_seconds),
                "--outputs", self.outputs, "--models-path", self.models] + self.listen_flags + self.extra
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("mmh3 serve exited (%s):\n%s" % (self.proc.returncode, self.log_tail()))
            if self.token is None:
                self.token = self.first_token()
            try:
                st, body = self.get("/api/status")
                if st == 200 and (body["engine"]["state"] == "ready" or not engine_ready):
                    return self
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        raise RuntimeError("the stack did not become ready:\n" + self.log_tail())

    def stop(self):
        for w in self.workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in self.workers:
            try:
                w.wait(20)
            except subprocess.TimeoutExpired:
                w.kill()
        rc = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                rc = self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait()
        return rc

    def cleanup(self):
        if os.environ.get("MMH3_KEEP_TEST_DIR"):
            print("(kept %s)" % self.work)
            return
        shutil.rmtree(self.work, ignore_errors=True)

    def first_token(self):
        """The token a first start printed (None if it printed none)."""
        try:
            with open(self.log_path) as f:
                m = re.search(r"^\s+(mmh3_[0-9a-f]{64})\s*$", f.read(), re.M)
            return m.group(1) if m else None
        except OSError:
            return None

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""

    # ------------------------------------------------------------ processes
    def pid(self, name):
        with open(os.path.join(self.outputs, ".mmh3", "run", name + ".pid")) as f:
            return int(f.read().strip())

    def conninfo(self):
        return "host=%s port=5432 dbname=mmh3 user=mmh3" % os.path.join(self.outputs, ".mmh3", "pg.sock")

    def start_worker(self, *args):
        env = dict(os.environ, MMH3_DATABASE_URL=self.conninfo())
        self.n_started = getattr(self, "n_started", 0) + 1
        log_path = os.path.join(self.work, "worker-%d.log" % self.n_started)
        with open(log_path, "ab") as log:
            w = subprocess.Popen([self.mmh3, "worker", "--outputs", self.outputs, "--models-path", self.models]
                                 + list(args),
                                 stdout=log, stderr=subprocess.STDOUT, env=env)
        w.log_path = log_path
        self.workers.append(w)
        return w

    def psql(self, sql):
        out = subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", self.conninfo(), "-c", sql],
                             capture_output=True, text=True, check=True)
        return out.stdout.strip()

    # ------------------------------------------------------------ HTTP
    def request(self, method, path, body=None, headers=None, raw=False, auth=True):
        conn = http.client.HTTPConnection(self.base, timeout=30)
        h = dict(headers or {})
        if auth and self.token and not any(k.lower() in ("authorization", "cookie") for k in h):
            h["Authorization"] = "Bearer " + self.token
        data = body
        if body is not None and not isinstance(body, (bytes, str)):
            data = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        payload = resp.read()
        conn.close()
        if raw:
            return resp.status, payload, dict((k.lower(), v) for k, v in resp.getheaders())
        try:
            return resp.status, json.loads(payload) if payload else None
        except ValueError:
            return resp.status, payload

    def get(self, path):
        return self.request("GET", path)

    def enqueue(self, **fields):
        st, body = self.request("POST", "/api/ai/queue", fields)
        if st != 200:
            raise AssertionError("enqueue %r -> %d %r" % (fields, st, body))
        return body["generations"][0]

    def generation(self, gid):
        st, body = self.get("/api/ai/queue/" + gid)
        return body if st == 200 else None

    def wait_for(self, gid, pred, timeout=60, what="condition"):
        end = time.time() + timeout
        g = None
        while time.time() < end:
            g = self.generation(gid)
            if g is not None and pred(g):
                return g
            time.sleep(0.05)
        raise AssertionError("timed out waiting for %s on %s; last: %s" % (what, gid, short(g)))

    def upload(self, files, headers=None, auth=True):
        """files: [(filename, bytes)]; returns (status, body)."""
        boundary = "mmh3test%d" % int(time.time() * 1000)
        parts = []
        for name, data in files:
            parts.append(("--%s\r\nContent-Disposition: form-data; name=\"files\"; filename=\"%s\"\r\n"
                          "Content-Type: application/octet-stream\r\n\r\n" % (boundary, name)).encode() + data + b"\r\n")
        body = b"".join(parts) + ("--%s--\r\n" % boundary).encode()
        h = {"Content-Type": "multipart/form-data; boundary=" + boundary}
        h.update(headers or {})
        return self.request("POST", "/api/images", body, h, auth=auth)

    def mmh3_cli(self, *args):
        """Runs `mmh3 ARGS --outputs <this stack's>`; returns the CompletedProcess."""
        return subprocess.run([self.mmh3] + list(args) + ["--outputs", self.outputs], capture_output=True,
                              text=True, timeout=60)


def short(g):
    if not isinstance(g, dict):
        return repr(g)
    keys = ("status", "stage", "step", "total_steps", "attempts", "error_message", "worker_id")
    return "{%s}" % ", ".join("%s=%r" % (k, g.get(k)) for k in keys)


class Events:
    """An SSE client on a thread: every event goes into a list (and a queue)."""

    def __init__(self, base, last_event_id=None, headers=None, token=None):
        self.events = []
        self.comments = []
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.closed = False
        self.conn = http.client.HTTPConnection(base, timeout=120)
        h = {"Accept": "text/event-stream"}
        h.update(headers or {})
        if token:
            h["Authorization"] = "Bearer " + token
        if last_event_id is not None:
            h["Last-Event-ID"] = str(last_event_id)
        self.conn.request("GET", "/api/events", headers=h)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = dict((k.lower(), v) for k, v in self.resp.getheaders())
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        ev = {}
        try:
            while True:
                line = self.resp.readline()  # decodes the chunked transfer encoding
                if not line:
                    break
                line = line.decode("utf-8").rstrip("\n")
                if line == "":
                    if ev:
                        if "data" in ev:
                            try:
                                ev["json"] = json.loads(ev["data"])
                            except ValueError:
                                ev["json"] = None
                                print("  info: an SSE event whose data is not JSON: %r" % ev["data"][:300])
                        with self.cond:
                            self.events.append(ev)
                            self.cond.notify_all()
                    ev = {}
                elif line.startswith(":"):
                    with self.cond:
                        self.comments.append(line)
                        self.cond.notify_all()
                else:
                    k, _, v = line.partition(":")
                    v = v[1:] if v.startswith(" ") else v
                    ev[k] = ev.get(k, "") + ("\n" if k in ev else "") + v
        except Exception:  # noqa: BLE001 - the stream ends or is closed under us
            pass
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def wait(self, pred, timeout=30, what="event"):
        end = time.time() + timeout
        with self.cond:
            while True:
                for e in self.events:
                    if pred(e):
                        return e
                left = end - time.time()
                if left <= 0 or self.closed:
                    raise AssertionError("no %s within %ss (%d events seen)" % (what, timeout, len(self.events)))
                self.cond.wait(left)

    def of(self, gid):
        with self.lock:
            return [e for e in self.events
                    if e.get("json") and e["json"].get("generation_id") == gid]

    def close(self):
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()
