"""A fake Oxen.ai hub on loopback, for the Oxen integration tests.

It speaks the endpoints mmh3 calls (docs/OXEN-INTEGRATION.md), with the
hub's rules that matter to a client: Bearer auth, workspaces staged on a
commit and refused at merge when the branch moved on (422), data frames that
must be committed and indexed before rows are appended, rows checked against
the frame's columns, the async queue with a claim that is idempotent for
the same claim id, and OpenAI-style streamed chat completions. Everything it
receives is recorded for the tests to check. Fault modes make it answer 401,
500, malformed JSON, slowly, or not at all (stopped).

Python 3 standard library only.
"""
import csv
import email.parser
import email.policy
import hashlib
import io
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Hub:
    def __init__(self, token, namespace="alice", repo="renders", port=0):
        self.token = token
        self.namespace, self.repo = namespace, repo
        self.lock = threading.RLock()
        self.requests = []          # (method, path, authorization header or None)
        self.mode = "ok"            # ok | http401 | http500 | malformed | slow
        self.slow_seconds = 3.0
        self.claim_delay = 0.0      # seconds the claim answer waits (after the claim is recorded)
        self.chat_mode = "ok"       # ok | http401 | midstream_error | cut
        self.chat_tokens = ["integrated_multimodal_description: [Shot 1] Live-action, ",
                            "a lighthouse keeper (S1) says: <d>[English] Fog's in.</d> ",
                            "Caf\u00e9 lights \U0001F3AC flicker.\n\noverall_soundscape: Waves ",
                            "break.\n\nnon_diegetic_music: N/A"]
        self.chat_gap = 0.15        # seconds between tokens
        self.chat_bodies = []
        # repository: committed files (path -> bytes), commits, frames (path -> {"columns", "rows"})
        self.files = {}
        self.commits = []
        self.frames = {}
        self.workspaces = {}
        # queue: hub generation id -> row
        self.jobs = {}
        self.claims = []            # (hub id, claim_id)
        self.completions = []       # (hub id, body)
        self.port = port
        self.server = None

    # ------------------------------------------------------------ lifecycle
    def start(self):
        hub = self

        class Handler(HubHandler):
            pass
        Handler.hub = hub
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        """The hub goes down: nothing listens on its port until start()."""
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    @property
    def origin(self):
        return "http://127.0.0.1:%d" % self.port

    @property
    def remote(self):
        return "%s/%s/%s" % (self.origin, self.namespace, self.repo)

    # ------------------------------------------------------------ test helpers
    def add_job(self, prompt, model="minimax-h3", **fields):
        gid = "hub-%s" % hashlib.sha1(("%s%f" % (prompt, time.time())).encode()).hexdigest()[:16]
        row = {"generation_id": gid, "model_name": model, "media_type": "video", "status": "queued",
               "enqueued_at": int(time.time()), "started_at": None, "completed_at": None, "result_url": None,
               "error_message": None, "target_namespace": None, "target_repo": None, "target_directory": None,
               "prompt": prompt}
        row.update(fields)
        with self.lock:
            self.jobs[gid] = row
        return gid

    def history(self):
        with self.lock:
            f = self.frames.get("history.csv")
            return [dict(r) for r in f["rows"]] if f else []

    def count(self, method=None, prefix=""):
        with self.lock:
            return sum(1 for m, p, _ in self.requests if (method is None or m == method) and p.startswith(prefix))


def _json(data):
    return json.dumps(data).encode()


class HubHandler(BaseHTTPRequestHandler):
    hub = None
    protocol_version = "HTTP/1.0"   # the connection closes after each answer (streams end by closing)

    def log_message(self, fmt, *args):  # quiet
        pass

    # ------------------------------------------------------------ plumbing
    def answer(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else _json(body)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def fail(self, status, message):
        self.answer(status, {"status": "error", "status_message": message})

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def json_body(self):
        raw = self.body()
        return json.loads(raw) if raw else None

    def multipart(self):
        raw = self.body()
        head = "Content-Type: %s\r\n\r\n" % self.headers.get("Content-Type")
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head.encode() + raw)
        parts = []
        for part in msg.iter_parts():
            parts.append((part.get_param("name", header="content-disposition"), part.get_filename(),
                          part.get_payload(decode=True)))
        return parts

    def handle_any(self, method):
        hub = self.hub
        url = urllib.parse.urlsplit(self.path)
        auth = self.headers.get("Authorization")
        with hub.lock:
            hub.requests.append((method, self.path, auth))
            mode = hub.mode
        if url.path.startswith("/api/ai/chat/completions"):
            return self.chat(auth)
        if mode == "slow":
            time.sleep(hub.slow_seconds)
        if auth != "Bearer " + hub.token:
            return self.fail(401, "Unauthorized: bad API key")
        if mode == "http401":  # echoes what it was sent, as some servers do
            return self.fail(401, "Unauthorized: your API key was revoked (%s)" % auth)
        if mode == "http500":
            return self.fail(500, "Internal Server Error: the hub fell over")
        if mode == "malformed":
            return self.answer(200, b"{\"status\": \"success\", \"workspace\": {oops", "application/json")
        try:
            self.route(method, urllib.parse.unquote(url.path), urllib.parse.parse_qs(url.query))
        except BrokenPipeError:
            pass
        except Exception as e:  # noqa: BLE001 - answer the client and record the bug
            self.fail(500, "fake hub bug: %r" % e)
            raise

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_DELETE(self):
        self.handle_any("DELETE")

    # ------------------------------------------------------------ routes
    def route(self, method, path, query):
        hub = self.hub
        repo = "/api/repos/%s/%s" % (hub.namespace, hub.repo)
        if path.startswith("/api/ai/queue"):
            return self.queue(method, path[len("/api/ai/queue"):], query)
        if not path.startswith(repo + "/"):
            return self.fail(404, "no such repository or route: %s" % path)
        rest = path[len(repo):]
        parts = rest.strip("/").split("/")
        with hub.lock:
            head = hub.commits[-1]["id"] if hub.commits else "root"
        if rest == "/workspaces" and method in ("PUT", "POST"):
            b = self.json_body()
            wid = b["workspace_id"]
            if b.get("branch_name") != "main":
                return self.fail(404, "no branch %r" % b.get("branch_name"))
            with hub.lock:
                ws = hub.workspaces.setdefault(wid, {"base": head, "files": {}, "indexed": set(), "rows": [],
                                                     "name": b.get("name")})
            return self.answer(200, {"status": "success", "workspace": {"id": wid, "name": ws["name"],
                                                                        "commit": {"id": ws["base"]}}})
        if parts[0] == "workspaces" and len(parts) >= 2:
            wid = parts[1]
            with hub.lock:
                ws = hub.workspaces.get(wid)
            if ws is None:
                return self.fail(404, "workspace %s not found" % wid)
            sub = parts[2:]
            if not sub and method == "DELETE":
                with hub.lock:
                    hub.workspaces.pop(wid, None)
                return self.answer(200, {"status": "success"})
            if sub[:1] == ["files"] and method == "POST":
                d = "/".join(sub[1:])
                paths = []
                for name, filename, data in self.multipart():
                    if name != "file" or not filename:
                        return self.fail(400, "expected file parts")
                    p = (d + "/" if d else "") + filename
                    with hub.lock:
                        ws["files"][p] = data
                    paths.append(p)
                return self.answer(200, {"status": "success", "paths": paths})
            if sub[:2] == ["data_frames", "resource"] and method == "PUT":
                p = "/".join(sub[2:])
                b = self.json_body() or {}
                with hub.lock:
                    if p not in hub.frames:
                        return self.fail(404, "File not found: %s" % p)
                    if b.get("is_indexed"):
                        ws["indexed"].add(p)
                return self.answer(200, {"status": "success", "data_frame": {"path": p, "is_indexed": True}})
            if sub[:3] == ["data_frames", "rows", "resource"] and method == "POST":
                p = "/".join(sub[3:])
                row = self.json_body()
                if isinstance(row, dict) and set(row) == {"data"}:
                    row = row["data"]
                with hub.lock:
                    if p not in ws["indexed"]:
                        return self.fail(400, "DatasetNotIndexed: %s" % p)
                    cols = hub.frames[p]["columns"]
                    if not isinstance(row, dict) or set(row) != set(cols):
                        return self.fail(400, "row columns %s do not match the frame's %s"
                                         % (sorted(row or {}), sorted(cols)))
                    ws["rows"].append((p, row))
                    rid = "row-%d" % (len(ws["rows"]))
                return self.answer(200, {"status": "success", "row_id": rid, "data_frame": {"view": {"data": [row]}}})
            if sub[:1] == ["merge"] and method == "POST":
                branch = "/".join(sub[1:])
                b = self.json_body() or {}
                with hub.lock:
                    if branch != "main":
                        return self.fail(404, "no branch %s" % branch)
                    if ws["base"] != head:
                        return self.fail(422, "workspace is behind the branch main")
                    commit = {"id": "c%04d" % (len(hub.commits) + 1), "message": b.get("message"),
                              "author": b.get("author"), "files": sorted(ws["files"]),
                              "rows": len(ws["rows"])}
                    hub.files.update(ws["files"])
                    for p, row in ws["rows"]:
                        hub.frames[p]["rows"].append(row)
                    hub.commits.append(commit)
                    ws["base"] = commit["id"]
                    ws["files"], ws["rows"] = {}, []
                return self.answer(200, {"status": "success", "commit": commit})
            return self.fail(404, "no workspace route %s %s" % (method, rest))
        if parts[0] == "file" and method == "PUT":
            d = "/".join(parts[2:])
            fields, files = {}, {}
            for name, filename, data in self.multipart():
                if filename:
                    files[(d + "/" if d else "") + filename] = data
                else:
                    fields[name] = data.decode()
            if not files or "message" not in fields:
                return self.fail(400, "files[] and message are required")
            with hub.lock:
                for p, data in files.items():
                    hub.files[p] = data
                    if p.endswith(".csv"):
                        rows = list(csv.reader(io.StringIO(data.decode())))
                        hub.frames[p] = {"columns": rows[0], "rows": []}
                commit = {"id": "c%04d" % (len(hub.commits) + 1), "message": fields["message"], "files": sorted(files)}
                hub.commits.append(commit)
            return self.answer(200, {"status": "success", "commit": commit})
        if parts[0] == "file" and method == "GET":
            p = "/".join(parts[2:])
            with hub.lock:
                data = hub.files.get(p)
            if data is None:
                return self.fail(404, "File not found: %s" % p)
            return self.answer(200, data, "application/octet-stream")
        return self.fail(404, "no route %s %s" % (method, path))

    def queue(self, method, rest, query):
        hub = self.hub
        if rest in ("", "/") and method == "GET":
            with hub.lock:
                rows = [dict(r) for r in hub.jobs.values()
                        if (not query.get("model") or r["model_name"] == query["model"][0])
                        and (not query.get("status") or r["status"] in query["status"][0].split(","))]
            rows.sort(key=lambda r: r["enqueued_at"])
            return self.answer(200, {"count": len(rows), "generations": rows})
        parts = rest.strip("/").split("/")
        if len(parts) != 2 or method != "POST":
            return self.fail(404, "no queue route %s %s" % (method, rest))
        gid, action = parts
        b = self.json_body() or {}
        with hub.lock:
            job = hub.jobs.get(gid)
            if job is None:
                return self.fail(404, "no generation %s" % gid)
            if action == "claim":
                hub.claims.append((gid, b.get("claim_id")))
                if job["status"] == "queued":
                    job.update(status="processing", started_at=int(time.time()), claim_id=b.get("claim_id"))
                elif job.get("claim_id") != b.get("claim_id") or job["status"] != "processing":
                    return self.fail(409, "generation %s is already claimed" % gid)
                delay, row = hub.claim_delay, dict(job)
            elif action == "complete":
                if job.get("claim_id") != b.get("claim_id"):
                    return self.fail(409, "not your claim")
                hub.completions.append((gid, b))
                job.update(status=b.get("status"), completed_at=int(time.time()), result_url=b.get("result_url"),
                           error_message=b.get("error_message"))
                return self.answer(200, {"status": "success", "generation_id": gid})
            else:
                return self.fail(404, "no action %s" % action)
        if delay:
            time.sleep(delay)
        return self.answer(200, {"status": "success", "generation": row})

    # ------------------------------------------------------------ chat
    def chat(self, auth):
        hub = self.hub
        body = self.json_body()
        with hub.lock:
            hub.chat_bodies.append({"body": body, "authorization": auth})
            mode, tokens, gap = hub.chat_mode, list(hub.chat_tokens), hub.chat_gap
        if auth != "Bearer " + hub.token or mode == "http401":
            return self.answer(401, {"error": {"message": "Invalid API key provided: %s" % auth, "type": "auth"}})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        frames = []
        for i, t in enumerate(tokens):
            chunk = {"id": "c1", "object": "chat.completion.chunk", "model": body.get("model"),
                     "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]}
            frames.append(("data: " + json.dumps(chunk, ensure_ascii=False) + ("\r\n\r\n" if i % 2 else "\n\n"))
                          .encode())
            if mode == "midstream_error" and i == 1:
                frames.append(b'data: {"error": {"message": "the upstream model overloaded", "code": 503}}\n\n')
                break
        if mode == "ok":
            frames.append(b": keep-alive comment\n\n")
            frames.append(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
            frames.append(b"data: [DONE]\n\n")
        # Written in small pieces that cut lines, JSON, CRLF pairs and UTF-8
        # sequences, with pauses so they reach the reader as separate reads.
        for frame in frames:
            marks = [7, 13, len(frame) // 2, len(frame) - 3, len(frame) - 1]
            if b"\xf0" in frame:            # inside a 4-byte UTF-8 sequence
                marks.append(frame.index(b"\xf0") + 2)
            if b"\r\n" in frame:            # between the CR and the LF
                marks.append(frame.index(b"\r\n") + 1)
            cuts = sorted(set([0, len(frame)] + [k for k in marks if 0 < k < len(frame)]))
            for a, b in zip(cuts, cuts[1:]):
                try:
                    self.wfile.write(frame[a:b])
                    self.wfile.flush()
                except BrokenPipeError:
                    return
                time.sleep(0.005)
            time.sleep(gap)
