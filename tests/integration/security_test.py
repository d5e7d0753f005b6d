#!/usr/bin/env python3
"""Security tests of the serving stack (docs/SECURITY.md), through HTTP against
real components: `mmh3 serve --mock --auth on` (PostgreSQL, nginx, mmh3-fcgi,
a mock-engine worker) with small limits, driven by a client that sometimes
has no token, a wrong or revoked one, a foreign Host or Origin, or hostile
uploads and paths. Every refusal is checked for its status and for leaving
nothing behind (no row, no file).

    tests/integration/security_test.py --build BUILD [TEST ...]

Prints one "PASS name" / "FAIL name: why" line per test.
"""
import argparse
import glob
import http.client
import json
import math
import os
import re
import socket
import subprocess
import sys
import time
import traceback
import uuid

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Events, Stack, short  # noqa: E402

TERMINAL = ("succeeded", "failed", "cancelled")
TESTS = []
UPLOAD_MB = 2
RATE_ENQUEUE = 20
RATE_UPLOAD = 40
RATE_REWRITE = 30  # mmh3-fcgi's default (--rate-rewrite)
MAX_QUEUED = 40
EXTRA_HOST = "mmh3.test"


def test(fn):
    TESTS.append(fn)
    return fn


def check(cond, msg, *args):
    if not cond:
        raise AssertionError(msg % args if args else msg)


def small(**kw):
    req = dict(prompt="a small test clip", frames=22, width=128, height=96, steps=8, preset="ultrafast")
    req.update(kw)
    return req


def is_json_error(body):
    return isinstance(body, dict) and body.get("status") == "error" and body.get("error", {}).get("message")


class Snapshot:
    """What a refused request must not change: rows and files."""

    def __init__(self, s):
        self.s = s
        self.state = self.take()

    def take(self):
        s = self.s
        counts = s.psql("SELECT (SELECT count(*) FROM generations) || '/' || (SELECT count(*) FROM uploads) || '/' ||"
                        " (SELECT count(*) FROM settings) || '/' || (SELECT count(*) FROM api_tokens)")
        files = []
        for sub in ("generations", "uploads"):
            files += sorted(os.path.join(sub, f) for f in os.listdir(os.path.join(s.outputs, sub)))
        return counts, files

    def unchanged(self, what):
        now = self.take()
        check(now[0] == self.state[0], "%s changed the database (generations/uploads/settings/tokens %s -> %s)",
              what, self.state[0], now[0])
        added = sorted(set(now[1]) - set(self.state[1]))
        check(not added, "%s left files: %r", what, added)


def raw_request(base, method, path, headers=None, body=None):
    """A request exactly as given (http.client adds Host and nothing else we did not ask for)."""
    conn = http.client.HTTPConnection(base, timeout=30)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    h = dict(headers or {})
    if not any(k.lower() == "host" for k in h):
        h["Host"] = base
    if body is not None:
        h["Content-Length"] = str(len(body))
    for k, v in h.items():
        conn.putheader(k, v)
    conn.endheaders(body)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    try:
        parsed = json.loads(data) if data else None
    except ValueError:
        parsed = data
    return resp.status, parsed, dict((k.lower(), v) for k, v in resp.getheaders())


def finished_generation(s):
    g = s.enqueue(**small(prompt="security fixture"))
    return s.wait_for(g["generation_id"], lambda g: g["status"] == "succeeded", what="success")


def new_token(s, name):
    out = s.mmh3_cli("token", "create", name)
    check(out.returncode == 0 and re.fullmatch(r"mmh3_[0-9a-f]{64}\n", out.stdout), "token create %s: %d %r %r",
          name, out.returncode, out.stdout, out.stderr)
    return out.stdout.strip()


# ---------------------------------------------------------------- tokens

@test
def first_start_printed_one_token_stored_hashed(s):
    check(s.token and s.token.startswith("mmh3_"), "no token was printed at the first start:\n%s", s.log_tail())
    rows = s.psql("SELECT name || ':' || encode(token_sha256, 'hex') FROM api_tokens ORDER BY created_at LIMIT 1")
    name, digest = rows.split(":")
    import hashlib
    check(name == "default" and digest == hashlib.sha256(s.token.encode()).hexdigest(),
          "the table holds %r, not the SHA-256 of the printed token", rows)
    dump = s.psql("SELECT string_agg(t::text, ' ') FROM api_tokens t")
    check(s.token[5:] not in dump and s.token not in dump, "the token itself is in the database")
    out = s.mmh3_cli("token", "list")
    check(out.returncode == 0 and "default" in out.stdout and "active" in out.stdout, "token list: %r", out.stdout)
    check("mmh3_" not in out.stdout + out.stderr, "token list shows a secret: %r", out.stdout)


@test
def no_or_wrong_token_refused_everywhere(s):
    g = finished_generation(s)
    gid = g["generation_id"]
    snap = Snapshot(s)
    routes = [
        ("GET", "/api/status", None), ("GET", "/api/ai/queue", None), ("GET", "/api/ai/queue/" + gid, None),
        ("GET", "/api/settings", None), ("GET", "/api/images/" + str(uuid.uuid4()), None),
        ("GET", "/api/events", None), ("POST", "/api/ai/queue", small()),
        ("PATCH", "/api/ai/queue/" + gid, {"rating": "approved"}), ("DELETE", "/api/ai/queue/" + gid, None),
        ("PUT", "/api/settings", {"oxen_api_key": "sk-should-not-land"}),
        ("GET", g["result_url"], None), ("GET", g["poster_url"], None), ("HEAD", g["result_url"], None),
    ]
    bad = []
    for creds in ({}, {"Authorization": "Bearer mmh3_" + "0" * 64}, {"Authorization": "Bearer " + s.token[:-1]},
                  {"Authorization": "Basic " + s.token}, {"Cookie": "mmh3_token=" + s.token + "x"},
                  {"Cookie": "other=" + s.token}):
        for method, path, body in routes:
            st, resp, headers = s.request(method, path, body, headers=dict(creds), raw=True, auth=False)
            data = json.loads(resp) if resp else None
            ok = st == 401 and (method == "HEAD" or is_json_error(data)) and "bearer" in headers.get(
                "www-authenticate", "").lower()
            if not ok:
                bad.append("%s %s with %s: %d %r" % (method, path, list(creds) or "nothing", st, resp[:120]))
        st, _ = s.upload([("a.png", b"\x89PNG\r\n\x1a\n")], headers=creds, auth=False)
        if st != 401:
            bad.append("upload with %s: %d" % (list(creds) or "nothing", st))
    check(not bad, "%d requests were not refused with 401:\n    %s", len(bad), "\n    ".join(bad[:12]))
    snap.unchanged("requests without a valid token")
    check(s.generation(gid)["rating"] is None, "a refused PATCH changed the row")


@test
def public_routes_need_no_token(s):
    for path, ctype in (("/openapi.json", "application/json"), ("/docs", "text/html"), ("/login", "text/html"),
                        ("/", "text/html"), ("/api/session", "application/json")):
        st, body, headers = s.request("GET", path, raw=True, auth=False)
        check(st == 200 and headers["content-type"].startswith(ctype), "%s: %d %r", path, st, headers)
    st, body = s.request("GET", "/api/session", auth=False)
    check(body == {"auth_required": True, "authenticated": False, "token_name": None}, "session %r", body)
    st, body = s.get("/api/session")
    check(body == {"auth_required": True, "authenticated": True, "token_name": "default"}, "session %r", body)
    st, body, headers = s.request("GET", "/login", raw=True, auth=False)
    check(b"<form" in body and b"<script" not in body, "the login page is a plain form")
    csp = headers.get("content-security-policy", "")
    check("default-src 'none'" in csp and "frame-ancestors 'none'" in csp, "login page CSP %r", csp)


@test
def login_cookie_works_for_api_events_and_files(s):
    g = finished_generation(s)
    base_headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://" + s.base,
                    "Sec-Fetch-Site": "same-origin"}
    form = "token=%s&next=%%2Fg%%2F%s" % (s.token, g["generation_id"])
    st, body, headers = s.request("POST", "/api/login", form, headers=dict(base_headers), raw=True, auth=False)
    check(st == 303 and headers.get("location") == "/g/" + g["generation_id"], "login: %d %r", st, headers)
    cookie = headers.get("set-cookie", "")
    attrs = [a.strip().lower() for a in cookie.split(";")]
    check(cookie.startswith("mmh3_token=" + s.token + ";") and "httponly" in attrs and "samesite=strict" in attrs
          and "path=/" in attrs and "secure" not in attrs, "cookie %r", cookie)
    jar = {"Cookie": "mmh3_token=" + s.token}
    st, body = s.request("GET", "/api/ai/queue?limit=1", headers=dict(jar), auth=False)
    check(st == 200 and body["count"] >= 1, "API with the cookie: %d", st)
    st, data, headers = s.request("GET", g["result_url"], headers=dict(jar, Range="bytes=0-99"), raw=True,
                                  auth=False)
    check(st == 206 and len(data) == 100 and headers["content-type"] == "video/mp4", "clip with the cookie: %d", st)
    ev = Events(s.base, headers=jar)
    try:
        check(ev.status == 200, "events with the cookie: %d", ev.status)
        st, _ = s.request("PATCH", "/api/ai/queue/" + g["generation_id"], {"rating": "approved"},
                          headers=dict(jar, Origin="http://" + s.base), auth=False)
        check(st == 200, "PATCH with the cookie: %d", st)
        ev.wait(lambda e: e.get("json", {}).get("rating") == "approved", what="the rating over the cookie stream")
    finally:
        ev.close()
    # Where the login sends you: only paths of this site.
    for nxt, want in (("//evil.example/x", "/"), ("https://evil.example/", "/"), ("/\\evil.example", "/"),
                      ("/g/x\r\nSet-Cookie: a=b", "/"), ("/gallery?q=1", "/gallery?q=1")):
        form = "token=%s&next=%s" % (s.token, urllib_quote(nxt))
        st, _, headers = s.request("POST", "/api/login", form, headers=dict(base_headers), raw=True, auth=False)
        check(st == 303 and headers.get("location") == want, "next=%r -> %d %r", nxt, st, headers.get("location"))
    # Wrong tokens: the page again, 401, no cookie.
    st, body, headers = s.request("POST", "/api/login", "token=mmh3_nope&next=%2F", headers=dict(base_headers),
                                  raw=True, auth=False)
    check(st == 401 and "set-cookie" not in headers and b"not valid" in body, "wrong login: %d %r", st, headers)
    st, body = s.request("POST", "/api/login", {"token": "mmh3_nope"}, auth=False)
    check(st == 401 and body["error"]["field"] == "token", "wrong JSON login: %d %r", st, body)
    st, body = s.request("POST", "/api/login", {"token": s.token}, auth=False)
    check(st == 200 and body["token_name"] == "default", "JSON login: %d %r", st, body)
    st, body, headers = s.request("POST", "/api/logout", "", headers=dict(base_headers, **jar), raw=True, auth=False)
    check(st == 303 and "max-age=0" in headers.get("set-cookie", "").lower(), "logout: %d %r", st, headers)


@test
def revoked_token_refused_at_once_and_its_stream_ends(s):
    t = new_token(s, "revoke-me")
    st, _ = s.request("GET", "/api/status", headers={"Authorization": "Bearer " + t}, auth=False)
    check(st == 200, "the new token works: %d %r", st, _)
    ev = Events(s.base, token=t)
    other = Events(s.base, token=s.token)
    try:
        check(ev.status == 200 and other.status == 200, "streams %d %d", ev.status, other.status)
        time.sleep(0.3)
        out = s.mmh3_cli("token", "revoke", "revoke-me")
        check(out.returncode == 0, "revoke: %r", out.stderr)
        t0 = time.time()
        st, body = s.request("GET", "/api/status", headers={"Authorization": "Bearer " + t}, auth=False)
        # The API hears of it by NOTIFY: within milliseconds, not necessarily before our next request.
        while st == 200 and time.time() - t0 < 2:
            time.sleep(0.02)
            st, body = s.request("GET", "/api/status", headers={"Authorization": "Bearer " + t}, auth=False)
        check(st == 401 and "not valid" in body["error"]["message"], "2 s after revoking: %d %r", st, body)
        print("  info: a revoked token was refused %.0f ms after `mmh3 token revoke` returned"
              % ((time.time() - t0) * 1000))
        st, _ = s.request("GET", "/api/status", headers={"Cookie": "mmh3_token=" + t}, auth=False)
        check(st == 401, "the revoked token's cookie: %d", st)
        with ev.cond:
            while not ev.closed and time.time() - t0 < 5:
                ev.cond.wait(0.2)
        check(ev.closed, "the revoked token's event stream is still open after 5 s")
        check(not other.closed, "another token's stream was closed too")
        out = s.mmh3_cli("token", "revoke", "revoke-me")
        check(out.returncode == 1 and "no active token" in out.stderr, "second revoke: %d %r", out.returncode,
              out.stderr)
        # The name can be used again; the old secret stays dead.
        t2 = new_token(s, "revoke-me")
        check(s.request("GET", "/api/status", headers={"Authorization": "Bearer " + t2}, auth=False)[0] == 200,
              "the new token under the old name")
        check(s.request("GET", "/api/status", headers={"Authorization": "Bearer " + t}, auth=False)[0] == 401,
              "the old secret under the reused name")
    finally:
        ev.close()
        other.close()


# ---------------------------------------------------------------- Host, Origin

@test
def foreign_host_names_refused(s):
    g = finished_generation(s)
    snap = Snapshot(s)
    for host in ("evil.example", "evil.example:%d" % s.port, "localhost.evil.example", "127.0.0.1.nip.io",
                 "2130706433", "0x7f.1", "LOCALHOST.evil", "[::1"):
        for method, path, body in (("GET", "/api/status", None), ("GET", g["result_url"], None),
                                   ("POST", "/api/ai/queue", json.dumps(small()).encode()),
                                   ("GET", "/api/events", None)):
            headers = {"Host": host, "Authorization": "Bearer " + s.token, "Content-Type": "application/json"}
            st, resp, _ = raw_request(s.base, method, path, headers, body)
            check(st in (400, 403), "Host %r, %s %s: %d", host, method, path, st)
    st, _, _ = raw_request(s.base, "POST", "/api/images", {"Host": "evil.example", "Authorization": "Bearer " +
                                                          s.token, "Content-Type": "multipart/form-data; boundary=x"},
                           b"--x--\r\n")
    check(st == 403, "upload to a foreign Host: %d", st)
    snap.unchanged("requests to foreign host names")
    for host in ("localhost:%d" % s.port, "LocalHost", "127.0.0.1", "[::1]:%d" % s.port, socket.gethostname(),
                 EXTRA_HOST, EXTRA_HOST + ":8443"):
        st, _, _ = raw_request(s.base, "GET", "/api/status", {"Host": host, "Authorization": "Bearer " + s.token})
        check(st == 200, "Host %r refused: %d", host, st)
        st, _, _ = raw_request(s.base, "GET", g["poster_url"], {"Host": host, "Authorization": "Bearer " + s.token})
        check(st == 200, "poster via Host %r: %d", host, st)


@test
def cross_origin_and_cross_site_writes_refused(s):
    g = finished_generation(s)
    gid = g["generation_id"]
    snap = Snapshot(s)
    same = "http://" + s.base
    bad_headers = [
        {"Origin": "http://evil.example"}, {"Origin": "null"}, {"Origin": "http://127.0.0.1:1"},
        {"Origin": "http://localhost.evil.example:%d" % s.port}, {"Origin": "file://"},
        {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
        {"Origin": same, "Sec-Fetch-Site": "cross-site"},
    ]
    writes = [
        ("POST", "/api/ai/queue", small(prompt="forged")), ("PATCH", "/api/ai/queue/" + gid, {"rating": "rejected"}),
        ("DELETE", "/api/ai/queue/" + gid, None), ("PUT", "/api/settings", {"rewrite_enabled": True}),
        ("POST", "/api/logout", {}),
    ]
    bad = []
    for extra in bad_headers:
        # With a valid token as well as with the cookie: Origin checks do not depend on how one logs in.
        for creds in ({"Authorization": "Bearer " + s.token}, {"Cookie": "mmh3_token=" + s.token}):
            for method, path, body in writes:
                st, resp = s.request(method, path, body, headers=dict(extra, **creds), auth=False)
                if st != 403 or not is_json_error(resp):
                    bad.append("%s %s %r: %d" % (method, path, extra, st))
            st, _ = s.upload([("a.png", b"x")], headers=dict(extra, **creds), auth=False)
            if st != 403:
                bad.append("upload %r: %d" % (extra, st))
        form = "token=%s&next=%%2F" % s.token
        st, _, headers = s.request("POST", "/api/login", form, raw=True, auth=False, headers=dict(
            extra, **{"Content-Type": "application/x-www-form-urlencoded"}))
        if st != 403 or "set-cookie" in headers:
            bad.append("login %r: %d" % (extra, st))
    check(not bad, "%d cross-site writes were not refused:\n    %s", len(bad), "\n    ".join(bad[:12]))
    snap.unchanged("cross-site writes")
    g2 = s.generation(gid)
    check(g2["rating"] is None and g2["status"] == "succeeded", "the row changed: %s", short(g2))
    # Same-origin writes, and clients that send no Origin at all (scripts), pass.
    for extra in ({"Origin": same, "Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}, {},
                  {"Host": "localhost:%d" % s.port, "Origin": "http://LOCALHOST:%d" % s.port},
                  {"Host": "%s:80" % EXTRA_HOST, "Origin": "http://%s" % EXTRA_HOST},
                  {"Host": "%s" % EXTRA_HOST, "Origin": "https://%s:443" % EXTRA_HOST}):
        st, resp, _ = raw_request(s.base, "PATCH", "/api/ai/queue/" + gid, dict(
            extra, **{"Authorization": "Bearer " + s.token, "Content-Type": "application/json"}),
            b'{"rating": "approved"}')
        check(st == 200, "a same-origin write %r refused: %d %r", extra, st, resp)
    # A page of another origin of the same machine is another origin.
    st, _, _ = raw_request(s.base, "PATCH", "/api/ai/queue/" + gid, {
        "Origin": "http://localhost:%d" % s.port, "Authorization": "Bearer " + s.token,
        "Content-Type": "application/json"}, b'{"rating": null}')
    check(st == 403, "Origin localhost on Host 127.0.0.1: %d", st)


# ---------------------------------------------------------------- files

@test
def traversal_and_hidden_files_never_served(s):
    g = finished_generation(s)
    gid = g["generation_id"]
    gen = os.path.join(s.outputs, "generations")
    up = os.path.join(s.outputs, "uploads")
    secret = "top secret %s" % uuid.uuid4()
    with open(os.path.join(s.outputs, "secret.txt"), "w") as f:
        f.write(secret)
    fake = str(uuid.uuid4())
    os.symlink(os.path.join(s.outputs, "secret.txt"), os.path.join(gen, fake + ".mp4"))
    os.symlink(os.path.join(s.outputs, "secret.txt"), os.path.join(up, fake + ".png"))
    hidden = "." + gid + ".2.mp4"
    for name in (hidden, hidden + ".part", gid + ".mp4.part"):
        with open(os.path.join(gen, name), "w") as f:
            f.write(secret)
    with open(os.path.join(up, ".body-" + fake), "w") as f:
        f.write(secret)
    paths = [
        "/api/files/secret.txt", "/api/files/generations/../secret.txt", "/api/files/generations/%2e%2e/secret.txt",
        "/api/files/generations/..%2fsecret.txt", "/api/files/generations/%2E%2E%2Fsecret.txt",
        "/api/files/generations/..%5csecret.txt", "/api/files/generations\\..\\secret.txt",
        "/api/files/uploads/../../secret.txt", "/api/files/%2e%2e/secret.txt", "/api/files//secret.txt",
        "/api/files/generations/" + fake + ".mp4", "/api/files/uploads/" + fake + ".png",
        "/api/files/generations/" + hidden, "/api/files/generations/" + hidden + ".part",
        "/api/files/generations/" + gid + ".mp4.part", "/api/files/uploads/.body-" + fake,
        "/api/files/generations/" + gid + ".mp4%00.txt", "/api/files/generations/" + gid + ".mp4/..",
        "/api/files/generations/" + gid.upper() + ".mp4", "/api/files/.mmh3/run/nginx.conf",
        "/api/files/.mmh3/logs/nginx-access.log", "/api/files/.mmh3/pgdata/PG_VERSION",
        "/api/files/generations/" + gid + ".MP4", "/api/files/generations/" + gid + ".mp4.jpg",
        "/api/files/generations/%s.mp4;.jpg" % gid, "/api/files/generations/./" + gid + ".mp4x",
    ]
    bad = []
    for path in paths:
        st, body, _ = raw_request(s.base, "GET", path, {"Authorization": "Bearer " + s.token})
        text = body if isinstance(body, bytes) else json.dumps(body).encode()
        if st not in (400, 403, 404) or secret.encode() in text:
            bad.append("%s -> %d" % (path, st))
    check(not bad, "served:\n    %s", "\n    ".join(bad))
    # The real files are served, with a fixed type and nosniff.
    for url, ctype in ((g["result_url"], "video/mp4"), (g["poster_url"], "image/jpeg")):
        st, body, headers = s.request("GET", url, raw=True)
        check(st == 200 and headers["content-type"] == ctype and headers.get("x-content-type-options") == "nosniff",
              "%s: %d %r", url, st, headers)
    for p in (os.path.join(gen, fake + ".mp4"), os.path.join(up, fake + ".png"), os.path.join(up, ".body-" + fake)):
        os.unlink(p)
    for name in (hidden, hidden + ".part", gid + ".mp4.part"):
        os.unlink(os.path.join(gen, name))


# ---------------------------------------------------------------- uploads

def media_files(work):
    files = {}
    specs = {
        "a.png": ["-f", "lavfi", "-i", "testsrc=size=160x90:rate=1", "-frames:v", "1"],
        "v.mp4": ["-f", "lavfi", "-i", "testsrc=size=160x120:rate=24", "-t", "1", "-c:v", "libx264", "-preset",
                  "ultrafast"],
    }
    for name, args in specs.items():
        path = os.path.join(work, "sec-" + name)
        subprocess.run(["ffmpeg", "-v", "error", "-y"] + args + [path], check=True)
        with open(path, "rb") as f:
            files[name] = f.read()
    return files


def png_claiming(width, height):
    """A PNG whose header claims width x height (valid CRC), with one tiny IDAT."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


@test
def oversized_and_malformed_uploads_refused(s):
    media = media_files(s.work)
    snap = Snapshot(s)
    # nginx's client_max_body_size is --upload-mb + 1 MiB (multipart overhead): beyond
    # that nginx refuses before reading the body; between the two the API does.
    for extra_bytes, who in ((4096, "the API"), (1024 * 1024 + 4096, "nginx")):
        big = media["a.png"] + b"\0" * (UPLOAD_MB * 1024 * 1024 + extra_bytes)
        st, body = s.upload([("big.png", big)])
        check(st == 413 and is_json_error(body), "an upload over --upload-mb (refused by %s): %d %r", who, st,
              body if isinstance(body, dict) else body[:200])
    hostile = [
        ("playlist.m3u8", b"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n"),
        ("remote.m3u8", b"#EXTM3U\n#EXTINF:1,\nhttp://127.0.0.1:1/x.ts\n"),
        ("concat.txt", b"ffconcat version 1.0\nfile '/etc/passwd'\n"),
        ("image.svg", b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>"),
        ("page.html", b"<!doctype html><script>alert(document.cookie)</script>"),
        ("huge.png", png_claiming(100000, 100000)),
        ("wide.png", png_claiming(20000, 64)),
        ("cut.mp4", media["v.mp4"][: len(media["v.mp4"]) // 2]),
        ("cut.png", media["a.png"][:60]),
        ("empty.png", b""),
        ("zeros.mp4", b"\0" * 4096),
        ("rtmp.flv", b"rtmp://127.0.0.1/live/x"),
    ]
    for name, data in hostile:
        st, body = s.upload([("ok.png", media["a.png"]), (name, data)])
        check(st == 400 and body["error"]["field"] == "files[1]", "%s: %d %r", name, st, body)
        check(s.outputs not in json.dumps(body), "%s: the error shows a server path", name)
    # Not multipart, no boundary, broken bodies, too many parts.
    cases = [
        ({"Content-Type": "application/octet-stream"}, media["a.png"], 415),
        ({"Content-Type": "multipart/form-data"}, b"--x\r\n", 415),
        ({"Content-Type": "multipart/form-data; boundary=" + "b" * 71}, b"--x\r\n", 415),
        ({"Content-Type": "multipart/form-data; boundary=xyz"}, b"no boundary here", 400),
        ({"Content-Type": "multipart/form-data; boundary=xyz"},
         b"--xyz\r\nContent-Disposition: form-data; name=\"files\"; filename=\"a.png\"\r\n\r\n" + media["a.png"], 400),
        ({"Content-Type": "multipart/form-data; boundary=xyz"},
         b"--xyz\r\nContent-Type: image/png\r\n\r\nabc\r\n--xyz--\r\n", 400),
        ({"Content-Type": "multipart/form-data; boundary=xyz"}, b"--xyz--\r\n", 400),
        ({"Content-Type": "multipart/form-data; boundary=xyz"},
         b"".join(b"--xyz\r\nContent-Disposition: form-data; name=\"files\"; filename=\"%d.png\"\r\n\r\n" % i
                  + media["a.png"] + b"\r\n" for i in range(16)) + b"--xyz--\r\n", 400),
    ]
    for headers, body, want in cases:
        st, resp = s.request("POST", "/api/images", body, headers=headers)
        check(st == want and is_json_error(resp), "%r: %d (wanted %d) %r", headers, st, want, resp)
    # A body shorter than its Content-Length (the client went away): nothing kept.
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(("POST /api/images HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: "
                  "multipart/form-data; boundary=xyz\r\nContent-Length: 100000\r\n\r\n--xyz\r\n"
                  % (s.base, s.token)).encode())
    sock.close()
    time.sleep(0.5)
    snap.unchanged("refused uploads")
    spools = glob.glob(os.path.join(s.outputs, "uploads", ".*"))
    check(not spools, "spool files left: %r", spools)
    # What is accepted still is.
    st, body = s.upload([("ok.png", media["a.png"])])
    check(st == 200 and body["images"][0]["kind"] == "image", "a good upload: %d %r", st, body)


@test
def nginx_answers_json_and_asks_for_the_token_before_the_size(s):
    """A body over nginx's limit: an anonymous client gets 401 (not the limit), a token holder a JSON 413 (on
    /v1 in OpenAI's shape); nginx's own other errors (a too-long URL, a missing file) are JSON too."""
    big_json = b'{"prompt": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    big_upload = b"\0" * ((UPLOAD_MB + 2) * 1024 * 1024)
    cases = [("/api/ai/queue", big_json, "application/json"), ("/v1/videos", big_json, "application/json"),
             ("/api/images", big_upload, "multipart/form-data; boundary=x")]
    for path, body, ctype in cases:
        st, resp, h = raw_request(s.base, "POST", path, {"Content-Type": ctype}, body)
        check(st == 401 and h.get("content-type", "").startswith("application/json") and
              (is_json_error(resp) or (isinstance(resp, dict) and resp.get("error", {}).get("message"))),
              "anonymous oversize POST %s: %d %r %r", path, st, h.get("content-type"),
              resp if isinstance(resp, dict) else (resp or b"")[:120])
        st, resp, h = raw_request(s.base, "POST", path, {"Content-Type": ctype, "Authorization": "Bearer " + s.token},
                                  body)
        v1 = path.startswith("/v1/")
        shaped = (isinstance(resp, dict) and resp.get("error", {}).get("type") == "invalid_request_error"
                  and "larger than this server accepts" in resp["error"]["message"]) if v1 else \
            (is_json_error(resp) and "larger than this server accepts" in resp["status_message"])
        check(st == 413 and h.get("content-type", "").startswith("application/json") and shaped,
              "oversize POST %s with a token: %d %r", path, st, resp if isinstance(resp, dict) else (resp or b"")[:120])
    for path, want in (("/api/files/generations/" + "a" * 36 + ".mp4", 404), ("/api/files/nothing", 404),
                       ("/api/status?" + "q" * 20000, (400, 414))):
        st, resp, h = raw_request(s.base, "GET", path, {"Authorization": "Bearer " + s.token})
        check(st in (want if isinstance(want, tuple) else (want,)) and is_json_error(resp),
              "GET %s: %d %r", path[:60], st, resp if isinstance(resp, dict) else (resp or b"")[:120])


@test
def database_runs_as_its_own_account_and_logins_authenticate(s):
    """The private PostgreSQL runs as an account of its own (as root: mmh3, never nobody, whose processes
    include nginx's workers), and local logins authenticate (peer, mapped): the serving user gets in, a process
    running as nobody does not, and no login rule trusts anyone."""
    import pwd
    with open(os.path.join(s.outputs, ".mmh3", "run", "postgres.pid")) as f:
        pid = int(f.read().split()[0])
    with open("/proc/%d/status" % pid) as f:
        uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
    name = pwd.getpwuid(uid).pw_name
    if os.geteuid() == 0:
        check(name == "mmh3", "PostgreSQL runs as %s, not its own account mmh3", name)
    else:
        check(uid == os.geteuid(), "PostgreSQL runs as %s", name)
    with open(os.path.join(s.outputs, ".mmh3", "pgdata", "pg_hba.conf")) as f:
        rules = [ln.split() for ln in f if ln.strip() and not ln.startswith("#")]
    check(rules and all(r[-2:] == ["peer", "map=mmh3"] or r[-1] == "reject" for r in rules), "pg_hba.conf: %r", rules)
    check(s.psql("SELECT current_user") == "mmh3", "the serving user cannot log in")
    if os.geteuid() != 0:
        return
    out = subprocess.run(["runuser", "-u", "nobody", "--", "psql", "-X", "-At", s.conninfo(), "-c",
                          "SELECT count(*) FROM api_tokens"], capture_output=True, text=True, timeout=30)
    check(out.returncode != 0 and not out.stdout.strip(), "a process running as nobody read the tokens: %d %r %r",
          out.returncode, out.stdout, out.stderr)


def png_deep(width, height, bits=16):
    """A real RGBA PNG of width x height at `bits` per channel, all zeros: a few hundred KB on disk for
    8000x6000 at 16 bits, which decodes to 366 MiB."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    ihdr = struct.pack(">IIBBBBB", width, height, bits, 6, 0, 0, 0)
    row = b"\0" * (1 + width * 4 * bits // 8)
    z = zlib.compressobj(9)
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def fcgi_hwm_kib(s):
    """The peak resident memory (VmHWM) of the mmh3-fcgi process, in KiB."""
    with open(os.path.join(s.outputs, ".mmh3", "run", "fcgi.pid")) as f:
        pid = int(f.read().split()[0])
    with open("/proc/%d/status" % pid) as f:
        return pid, next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


@test
def deep_pictures_refused_from_their_header_with_memory_bounded(s):
    """An 8000x6000 16-bit PNG (a few hundred KB that decode to 366 MiB) is refused from its header, naming the
    engine's budget, and 8 of them uploaded at once leave mmh3-fcgi's peak memory where it was: nothing is
    decoded. A 16-bit picture within the budget is still accepted."""
    import threading
    bomb = png_deep(8000, 6000)
    check(len(bomb) < 1024 * 1024, "the crafted PNG is %d bytes", len(bomb))
    pid, before = fcgi_hwm_kib(s)
    results = []

    def send():
        results.append(s.upload([("deep.png", bomb)]))
    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    check(len(results) == 8, "%d of 8 uploads answered", len(results))
    for st, body in results:
        msg = body["error"]["message"] if isinstance(body, dict) else str(body)[:200]
        check(st == 400 and body["error"]["field"] == "files[0]" and "8000x6000" in msg and "16 bits per channel" in msg
              and "refused before decoding" in msg and "33.6 megapixels" in msg, "%d %r", st, msg)
    pid2, after = fcgi_hwm_kib(s)
    check(pid2 == pid, "mmh3-fcgi was restarted (%d -> %d): it died under the uploads", pid, pid2)
    check(after - before < 64 * 1024, "mmh3-fcgi's peak memory grew by %d MiB (VmHWM %d -> %d KiB)",
          (after - before) // 1024, before, after)
    st, body = s.upload([("deep-small.png", png_deep(512, 256))])
    check(st == 200 and body["images"][0]["width"] == 512, "a 16-bit 512x256 PNG: %d %r", st, body)


# ---------------------------------------------------------------- limits

def drain_bucket(what, send, per_minute, allowed_status=None):
    """Sends requests counted by one per-token bucket until it answers 429.

    The buckets (fcgi/limits.c) hold per_minute requests when first used and
    refill per_minute/60 a second, so between sending the first request (t0)
    and reading the 429 (t1) the limiter allowed at least per_minute and at
    most per_minute + (t1 - t0) * per_minute / 60 of them. The range widens on
    a slow run (ASan, a loaded machine) instead of failing it, and a limiter
    without a limit, with a smaller burst or a faster refill falls outside it.
    send() returns (status, body, headers); returns the 429's body (parsed)
    and headers."""
    rate = per_minute / 60.0
    codes = []
    t0 = time.monotonic()
    while True:
        st, body, headers = send()
        codes.append(st)
        elapsed = time.monotonic() - t0
        # Past what the bucket can have allowed by now: the limiter is broken; stop.
        if st == 429 or len(codes) > per_minute + elapsed * rate + 1:
            break
    allowed = len(codes) - 1 if codes[-1] == 429 else len(codes)
    most = per_minute + math.floor(elapsed * rate)
    check(codes[-1] == 429, "%s: %d requests in %.1f s and no 429 (at %g a minute the bucket allows at most %d)",
          what, len(codes), elapsed, per_minute, most)
    check(per_minute <= allowed <= most, "%s: %d allowed before the 429 in %.1f s; a bucket of %g a minute "
          "allows %g..%d", what, allowed, elapsed, per_minute, per_minute, most)
    if allowed_status is not None:
        wrong = sorted(set(codes[:-1]) - {allowed_status})
        check(not wrong, "%s: the allowed requests answered %r, not only %d", what, wrong, allowed_status)
    return (body if isinstance(body, dict) else json.loads(body)), headers


@test
def rate_limits_per_token_answer_429(s):
    t = new_token(s, "rate-a")
    other = new_token(s, "rate-b")
    rw = new_token(s, "rate-c")
    snap = Snapshot(s)
    data, headers = drain_bucket("enqueue", lambda: s.request("POST", "/api/ai/queue", {"prompt": " "}, raw=True,
                                                              headers={"Authorization": "Bearer " + t}),
                                 RATE_ENQUEUE, 400)
    retry = int(headers.get("retry-after", "0"))
    check(1 <= retry <= 60 and data["retry_after"] == retry and data["limit"] == "enqueue_rate"
          and "per minute" in data["error"]["accepted"] and "rate-a" in data["status_message"], "429 body %r %r",
          data, headers)
    st, _ = s.request("POST", "/api/ai/queue", {"prompt": " "}, headers={"Authorization": "Bearer " + other})
    check(st == 400, "another token is not limited: %d", st)
    # Uploads have their own bucket.
    data, _ = drain_bucket("upload", lambda: s.upload([("x.txt", b"not media")], auth=False, headers={
        "Authorization": "Bearer " + t}) + ({},), RATE_UPLOAD, 400)
    check(data["limit"] == "upload_rate", "upload 429 body %r", data)
    # Prompt rewrites spend the owner's Oxen credits: 30 a minute per token by default.
    data, _ = drain_bucket("rewrite", lambda: s.request("POST", "/api/rewrite", {"prompt": "a fox"}, raw=True,
                                                        auth=False, headers={"Authorization": "Bearer " + rw}),
                           RATE_REWRITE)
    check(data["limit"] == "rewrite_rate", "rewrite 429 body %r", data)
    snap.unchanged("rate-limited requests")
    # The bucket refills: after Retry-After the token is served again.
    time.sleep(retry + 0.2)
    st, _ = s.request("POST", "/api/ai/queue", {"prompt": " "}, headers={"Authorization": "Bearer " + t})
    check(st == 400, "after Retry-After: %d", st)


@test
def queue_bound_answers_429(s):
    tag = uuid.uuid4().hex[:8]
    st, body = s.get("/api/status")
    waiting = body["queue"]["queued"]
    fill = MAX_QUEUED - waiting
    s.psql("INSERT INTO generations (prompt, frames, width, height, steps, seed) SELECT 'backlog %s ' || i, 22, 128,"
           " 96, 200, i FROM generate_series(1, %d) i" % (tag, fill + 3))
    try:
        st, body, headers = s.request("POST", "/api/ai/queue", small(prompt="one too many " + tag), raw=True)
        data = json.loads(body)
        check(st == 429 and data["limit"] == "queue_length" and int(headers["retry-after"]) >= 5
              and str(MAX_QUEUED) in data["error"]["accepted"] and "full" in data["error"]["message"],
              "a full queue: %d %r %r", st, data, headers.get("retry-after"))
        check(s.psql("SELECT count(*) FROM generations WHERE prompt = 'one too many %s'" % tag) == "0",
              "the refused job was stored")
    finally:
        s.psql("DELETE FROM generations WHERE prompt LIKE 'backlog %s %%'" % tag)
    st, body = s.request("POST", "/api/ai/queue", small(prompt="room again " + tag))
    check(st == 200, "after the backlog cleared: %d %r", st, body)
    s.request("DELETE", "/api/ai/queue/" + body["generations"][0]["generation_id"])


# ---------------------------------------------------------------- secrets

@test
def secrets_never_returned_or_logged(s):
    key = "sk-oxen-" + uuid.uuid4().hex
    st, body = s.request("PUT", "/api/settings", {"oxen_api_key": key})
    check(st == 200 and body["has_oxen_api_key"], "%d %r", st, body)
    t = new_token(s, "log-check")
    s.request("GET", "/api/status", headers={"Authorization": "Bearer " + t}, auth=False)
    s.request("GET", "/api/status", headers={"Authorization": "Bearer " + t + "0"}, auth=False)
    s.request("POST", "/api/login", "token=%s&next=/" % t, auth=False,
              headers={"Content-Type": "application/x-www-form-urlencoded"})
    for path in ("/api/settings", "/api/status", "/api/session", "/api/ai/queue?limit=5"):
        st, body, _ = s.request("GET", path, raw=True)
        check(key.encode() not in body and t.encode() not in body, "%s returns a secret", path)
    time.sleep(0.5)
    logs = [s.log_path] + glob.glob(os.path.join(s.outputs, ".mmh3", "logs", "*")) + glob.glob(
        os.path.join(s.work, "*.log"))
    for path in logs:
        with open(path, "rb") as f:
            data = f.read()
        for name, secret in (("the Oxen key", key), ("a new token", t)):
            check(secret.encode() not in data, "%s is in %s", name, path)
    s.request("PUT", "/api/settings", {"oxen_api_key": None})


# ---------------------------------------------------------------- serve's choices

@test
def serve_requires_tokens_beyond_loopback(s):
    """Listening on every interface turns tokens on by itself, and --auth off is refused there; the original
    project's --host/--port spell the same address as --listen HOST:PORT and obey the same rules."""
    never = os.path.join(s.work, "never")
    for flags in (["--listen", "0.0.0.0:%d" % (s.port + 7)], ["--host", "0.0.0.0", "--port", str(s.port + 7)]):
        out = subprocess.run([s.mmh3, "serve", "--mock", "--auth", "off", "--outputs", never] + flags,
                             capture_output=True, text=True, timeout=60)
        check(out.returncode != 0 and "would listen on 0.0.0.0:%d, beyond loopback" % (s.port + 7) in out.stderr
              and not os.path.exists(os.path.join(never, ".mmh3", "pgdata")),
              "--auth off with %s: %d %r", flags, out.returncode, out.stderr[-300:])
    for flags, why in ((["--listen", "127.0.0.1:1", "--port", "2"], "cannot be given together with --host/--port"),
                       (["--host", "127.0.0.1:80"], "carries a port"), (["--port", "70000"], "--port 70000")):
        out = subprocess.run([s.mmh3, "serve", "--mock", "--outputs", never] + flags, capture_output=True, text=True,
                             timeout=60)
        check(out.returncode == 2 and why in out.stderr, "%s: %d %r", flags, out.returncode, out.stderr[-300:])
    import tempfile
    work = tempfile.mkdtemp(prefix="mmh3-anyif-", dir=s.work)
    os.chmod(work, 0o755)
    b = Stack(s.build, work=work, listen_host="0.0.0.0", token=s.token, host_port_flags=True,
              extra=["--db", s.conninfo(), "--no-worker"])
    try:
        b.start()
        st, body = b.request("GET", "/api/status", auth=False)
        check(st == 401, "0.0.0.0 without a token: %d", st)
        st, body = b.get("/api/status")
        check(st == 200, "0.0.0.0 with the token: %d", st)
        with open(b.log_path) as f:
            check("access tokens required" in f.read(), "serve does not say tokens are required")
    finally:
        check(b.stop() == 0, "the second serve did not stop cleanly")


def urllib_quote(text):
    import urllib.parse
    return urllib.parse.quote(text, safe="")


# ---------------------------------------------------------------- runner

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("MMH3_BUILD", "build"))
    ap.add_argument("tests", nargs="*")
    a = ap.parse_args()
    chosen = [t for t in TESTS if not a.tests or t.__name__ in a.tests]
    s = Stack(a.build, mock_seconds=1.0,
              extra=["--auth", "on", "--upload-mb", str(UPLOAD_MB), "--rate-enqueue", str(RATE_ENQUEUE),
                     "--rate-upload", str(RATE_UPLOAD), "--max-queued", str(MAX_QUEUED), "--allow-host",
                     EXTRA_HOST])
    failed = 0
    try:
        s.start()
        print("PASS security/stack_starts (serve --mock --auth on on %s)" % s.base)
    except Exception as e:  # noqa: BLE001
        print("FAIL security/stack_starts: %s" % e)
        s.stop()
        s.cleanup()
        return 1
    for t in chosen:
        t0 = time.time()
        try:
            t(s)
            print("PASS security/%s (%.1fs)" % (t.__name__, time.time() - t0), flush=True)
        except Exception as e:  # noqa: BLE001
            failed += 1
            detail = str(e) if isinstance(e, AssertionError) else " | ".join(
                traceback.format_exc().strip().splitlines()[-3:])
            print("FAIL security/%s: %s" % (t.__name__, detail), flush=True)
    rc = s.stop()
    if rc != 0:
        failed += 1
        print("FAIL security/serve_stops_cleanly: exit %r\n%s" % (rc, s.log_tail(15)))
    if failed:
        print("  (serve log: %s)" % s.log_path)
        os.environ["MMH3_KEEP_TEST_DIR"] = "1"
    s.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
