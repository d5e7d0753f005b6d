#!/usr/bin/env python3
"""Load benchmark of the serving stack (docs/SECURITY.md, "Load").

Starts the real stack on loopback with access tokens on (`mmh3 serve --auth on
--no-worker`: PostgreSQL, nginx, mmh3-fcgi; no worker, which on a GPU host is
another machine and here would only take CPU from the API), fills 100 000
history rows, connects 200 SSE clients (bench/sse_clients), then drives wrk
(Bearer token on every request):

  1. GET /api/ai/queue?limit=60 over the 100k rows, at 1..16 connections;
  2. POST /api/ai/queue (a small valid job) at 1..32 connections, while the
     200 streams relay every new row.

Prints requests/s, p50, p99 and errors per step, the highest rate whose p99
stays under 50 ms, and whether each SSE client received an event for every
row the run created (ids = seqs; any missing one is a lost event).

    bench/load.py --build BUILD [--seconds 10] [--clients 200] [--json OUT]

Rate limits and the queue bound are off for the run (--rate-enqueue 0
--max-queued 0): it measures capacity, not the limits.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from stack import Stack  # noqa: E402

P99_TARGET_MS = 50.0


def to_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", text)
    if not m:
        return float("nan")
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "us" else v if unit == "ms" else v * 1000 if unit == "s" else v * 60000


def wrk(url, token, connections, seconds, script=None, env=None):
    args = ["wrk", "-t1", "-c%d" % connections, "-d%ds" % seconds, "--latency", "--timeout", "10s",
            "-H", "Authorization: Bearer " + token]
    if script:
        args += ["-s", script]
    out = subprocess.run(args + [url], capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    text = out.stdout
    res = {"connections": connections, "seconds": seconds}
    m = re.search(r"Requests/sec:\s+([\d.]+)", text)
    res["rps"] = float(m.group(1)) if m else 0.0
    for pct in ("50", "99"):
        m = re.search(r"^\s+%s%%\s+(\S+)" % pct, text, re.M)
        res["p" + pct + "_ms"] = to_ms(m.group(1)) if m else float("nan")
    m = re.search(r"(\d+) requests in", text)
    res["requests"] = int(m.group(1)) if m else 0
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        errors += sum(int(x) for x in m.groups())
    res["errors"] = errors
    if out.returncode != 0:
        res["wrk_error"] = out.stderr.strip()[-300:]
    return res


def table(title, rows):
    print("\n%s" % title)
    print("  %11s %10s %9s %9s %8s" % ("connections", "req/s", "p50 ms", "p99 ms", "errors"))
    for r in rows:
        print("  %11d %10.1f %9.2f %9.2f %8d" % (r["connections"], r["rps"], r["p50_ms"], r["p99_ms"], r["errors"]))
    ok = [r for r in rows if r["p99_ms"] < P99_TARGET_MS and r["errors"] == 0]
    best = max(ok, key=lambda r: r["rps"]) if ok else None
    if best:
        print("  best with p99 < %g ms and no errors: %.1f req/s at %d connections (p50 %.2f ms, p99 %.2f ms)"
              % (P99_TARGET_MS, best["rps"], best["connections"], best["p50_ms"], best["p99_ms"]))
    else:
        print("  no step kept p99 under %g ms without errors" % P99_TARGET_MS)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("MMH3_BUILD", "build"))
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--history", type=int, default=100000)
    ap.add_argument("--get-connections", default="1,2,4,8,16")
    ap.add_argument("--post-connections", default="1,2,4,8,16,32")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    sse = os.path.join(build, "bench", "sse_clients")
    if not os.access(sse, os.X_OK):
        sys.exit("bench/load.py: %s is not built (make in %s)" % (sse, build))
    s = Stack(build, extra=["--auth", "on", "--no-worker", "--rate-enqueue", "0", "--rate-upload", "0",
                            "--max-queued", "0"])
    s.start(engine_ready=False)
    results = {"machine": os.uname().nodename, "cpus": os.cpu_count(), "clients": a.clients}
    clients = None
    try:
        t0 = time.time()
        s.psql("INSERT INTO generations (prompt, frames, width, height, steps, seed, status, enqueued_at) "
               "SELECT 'history prompt number ' || i, 124, 1280, 704, 28, i, "
               "(ARRAY['succeeded','failed','cancelled'])[1 + i %% 3], now() - interval '1 day' - "
               "make_interval(secs => i) FROM generate_series(1, %d) i; ANALYZE generations" % a.history)
        print("history: %d rows in %.1f s" % (a.history, time.time() - t0))
        time.sleep(2)  # the bulk insert is one flood of NOTIFYs: its resync goes out before the clients come
        ids_path = os.path.join(s.work, "sse-ids.txt")
        clients = subprocess.Popen([sse, "127.0.0.1", str(s.port), str(a.clients), s.token, ids_path],
                                   stdout=subprocess.PIPE, text=True)
        line = clients.stdout.readline()
        if not line.startswith("connected %d" % a.clients):
            sys.exit("bench/load.py: the SSE clients did not all connect: %r" % line)
        print("SSE: %d clients connected" % a.clients)
        base = "http://" + s.base
        gets = [wrk(base + "/api/ai/queue?limit=60", s.token, c, a.seconds)
                for c in [int(x) for x in a.get_connections.split(",")]]
        results["get_list"] = {"steps": gets, "best": table(
            "GET /api/ai/queue?limit=60 over %d rows (%d SSE clients connected)" % (a.history, a.clients), gets)}
        tag = "bench-" + uuid.uuid4().hex[:8]
        posts = [wrk(base + "/api/ai/queue", s.token, c, a.seconds, script=os.path.join(HERE, "wrk_post.lua"),
                     env={"MMH3_BENCH_TAG": tag}) for c in [int(x) for x in a.post_connections.split(",")]]
        results["post_enqueue"] = {"steps": posts, "best": table(
            "POST /api/ai/queue (%d SSE clients relaying every new row)" % a.clients, posts)}
        # Let the relay drain, then compare what each stream got with the rows made.
        time.sleep(3)
        clients.send_signal(signal.SIGTERM)
        clients.wait(60)
        expected = set(int(x) for x in s.psql("SELECT seq FROM generations WHERE prompt LIKE '%s load %%'"
                                              % tag).split())
        lost_total, clients_losing, resyncs, closed, statuses = 0, 0, 0, 0, set()
        with open(ids_path) as f:
            for line in f:
                parts = line.split()
                statuses.add(int(parts[1]))
                resyncs += int(parts[2])
                closed += int(parts[3])
                got = set(int(x) for x in parts[4:])
                missing = len(expected - got)
                lost_total += missing
                clients_losing += missing > 0
        results["sse"] = {"rows_created": len(expected), "clients": a.clients, "events_expected":
                          len(expected) * a.clients, "events_lost": lost_total, "clients_losing": clients_losing,
                          "resyncs": resyncs, "streams_closed": closed, "http_statuses": sorted(statuses)}
        print("\nSSE: %d rows created during the run; %d clients x %d = %d events expected, %d lost (%d clients "
              "missed any), %d resyncs, %d streams closed early, HTTP %s"
              % (len(expected), a.clients, len(expected), len(expected) * a.clients, lost_total, clients_losing,
                 resyncs, closed, sorted(statuses)))
    finally:
        if clients and clients.poll() is None:
            clients.kill()
        s.stop()
        s.cleanup()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
