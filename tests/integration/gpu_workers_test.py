#!/usr/bin/env python3
"""`mmh3 serve --gpu-workers N`: one worker per GPU, all claiming from the
same queue (docs/MULTIGPU.md "Serving"). Runs the real stack (PostgreSQL,
nginx, mmh3-fcgi) with mock-engine workers, so it needs no GPU: each worker
is handed its own `--device cuda:i` (and `--gpus K` for sequence-parallel
groups), the jobs spread over the workers, none is rendered twice, a killed
worker comes back with its device, and Ctrl-C stops them all.

    tests/integration/gpu_workers_test.py --build BUILD
"""
import argparse
import os
import signal
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stack import Stack  # noqa: E402


def check(cond, msg, *args):
    if not cond:
        raise AssertionError(msg % args if args else msg)


def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().split(b"\0")


def arg_after(argv, flag):
    """The value of the last `flag` in argv (getopt: the last one wins)."""
    vals = [argv[i + 1].decode() for i, a in enumerate(argv[:-1]) if a == flag.encode()]
    return vals[-1] if vals else None


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def workers_of(st, n):
    names = ["worker"] + ["worker-%d" % i for i in range(1, n)]
    return [st.pid(name) for name in names]


def test_three_workers_share_the_queue(build):
    st = Stack(build, mock_seconds=1.5, extra=["--gpu-workers", "3"])
    try:
        st.start()
        pids = workers_of(st, 3)
        check(len(set(pids)) == 3 and all(alive(p) for p in pids), "three live workers expected: %r", pids)
        devices = [arg_after(cmdline(p), "--device") for p in pids]
        check(devices == ["cuda:0", "cuda:1", "cuda:2"], "worker devices %r", devices)
        check(all(arg_after(cmdline(p), "--gpus") is None for p in pids), "no --gpus without --gpus")
        gids = [st.enqueue(prompt="job %d on many GPUs" % i, frames=22, width=64, height=64, steps=4)["generation_id"]
                for i in range(6)]
        done = [st.wait_for(g, lambda x: x["status"] in ("succeeded", "failed"), timeout=120, what="the end")
                for g in gids]
        check(all(g["status"] == "succeeded" for g in done), "every job succeeds: %r",
              [(g["status"], g.get("error_message")) for g in done])
        check(all(g["attempts"] == 1 for g in done), "no job rendered twice: %r", [g["attempts"] for g in done])
        by = {g["worker_id"] for g in done}
        check(len(by) >= 2, "six 1.5 s jobs on three workers ran on %d worker(s): %r", len(by), by)
        # A killed worker is restarted with its own device.
        os.kill(pids[2], signal.SIGKILL)
        end = time.time() + 30
        while time.time() < end:
            try:
                p = st.pid("worker-2")
                # Between fork and exec the child still shows serve's argv.
                if p != pids[2] and alive(p) and cmdline(p)[1:2] == [b"worker"]:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        p = st.pid("worker-2")
        check(p != pids[2] and alive(p), "worker-2 was not restarted")
        check(arg_after(cmdline(p), "--device") == "cuda:2", "restarted worker-2 keeps cuda:2")
        rc = st.stop()
        check(rc == 0, "serve exit status %r", rc)
        left = [q for q in workers_of(st, 3) if alive(q)]
        check(not left, "workers left running after Ctrl-C: %r", left)
    finally:
        if st.proc and st.proc.poll() is None:
            st.stop()
        st.cleanup()


def test_sequence_parallel_groups(build):
    st = Stack(build, mock_seconds=0.5, extra=["--gpu-workers", "2", "--gpus", "4"])
    try:
        st.start()
        pids = workers_of(st, 2)
        got = [(arg_after(cmdline(p), "--device"), arg_after(cmdline(p), "--gpus")) for p in pids]
        check(got == [("cuda:0", "4"), ("cuda:4", "4")], "two groups of four: %r", got)
        g = st.enqueue(prompt="one job", frames=22, width=64, height=64, steps=4)["generation_id"]
        g = st.wait_for(g, lambda x: x["status"] == "succeeded", timeout=60, what="success")
        check(st.stop() == 0, "serve exit status")
    finally:
        if st.proc and st.proc.poll() is None:
            st.stop()
        st.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    failed = 0
    for t in (test_three_workers_share_the_queue, test_sequence_parallel_groups):
        t0 = time.time()
        try:
            t(args.build)
            print("PASS %s (%.1fs)" % (t.__name__, time.time() - t0))
        except Exception as e:  # noqa: BLE001 — report and go on
            failed += 1
            print("FAIL %s: %s" % (t.__name__, e))
            traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
