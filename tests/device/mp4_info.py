#!/usr/bin/env python3
"""What an mp4 holds, read from its boxes with the standard library only (the
GPU host has no ffprobe): per track the handler (vide/soun), the display size
(tkhd), the sample count (stsz) and the duration (mdhd).

    mp4_info.py FILE [--expect WxHxFRAMES] [--audio yes|no]

Prints one line per track; with --expect / --audio exits 1 when the file
disagrees."""
import struct
import sys


def boxes(data, start, end):
    i = start
    while i + 8 <= end:
        size, kind = struct.unpack(">I4s", data[i:i + 8])
        head = 8
        if size == 1:
            size = struct.unpack(">Q", data[i + 8:i + 16])[0]
            head = 16
        elif size == 0:
            size = end - i
        if size < head:
            return
        yield kind.decode("latin-1"), i + head, i + size
        i += size


def find(data, start, end, path):
    for kind, s, e in boxes(data, start, end):
        if kind == path[0]:
            if len(path) == 1:
                return s, e
            r = find(data, s, e, path[1:])
            if r:
                return r
    return None


def tracks(data):
    moov = find(data, 0, len(data), ["moov"])
    if not moov:
        raise SystemExit("no moov box")
    out = []
    for kind, s, e in boxes(data, *moov):
        if kind != "trak":
            continue
        t = {}
        tkhd = find(data, s, e, ["tkhd"])
        if tkhd:
            ver = data[tkhd[0]]
            off = tkhd[0] + (88 if ver == 1 else 76)
            w, h = struct.unpack(">II", data[off:off + 8])
            t["width"], t["height"] = w >> 16, h >> 16
        hdlr = find(data, s, e, ["mdia", "hdlr"])
        if hdlr:
            t["handler"] = data[hdlr[0] + 8:hdlr[0] + 12].decode("latin-1")
        mdhd = find(data, s, e, ["mdia", "mdhd"])
        if mdhd:
            ver = data[mdhd[0]]
            if ver == 1:
                scale, dur = struct.unpack(">IQ", data[mdhd[0] + 20:mdhd[0] + 32])
            else:
                scale, dur = struct.unpack(">II", data[mdhd[0] + 12:mdhd[0] + 20])
            t["seconds"] = dur / scale if scale else 0
            t["timescale"] = scale
        stsz = find(data, s, e, ["mdia", "minf", "stbl", "stsz"])
        if stsz:
            t["samples"] = struct.unpack(">I", data[stsz[0] + 8:stsz[0] + 12])[0]
        out.append(t)
    return out


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    path, expect, audio = args[0], None, None
    if "--expect" in args:
        expect = args[args.index("--expect") + 1]
    if "--audio" in args:
        audio = args[args.index("--audio") + 1]
    with open(path, "rb") as f:
        data = f.read()
    ts = tracks(data)
    for t in ts:
        print("%s: %s" % (path, " ".join("%s=%s" % kv for kv in sorted(t.items()))))
    ok = True
    video = [t for t in ts if t.get("handler") == "vide"]
    sound = [t for t in ts if t.get("handler") == "soun"]
    if expect:
        w, h, n = (int(x) for x in expect.split("x"))
        ok &= len(video) == 1 and (video[0].get("width"), video[0].get("height"), video[0].get("samples")) == (w, h, n)
    if audio:
        ok &= (len(sound) == 1) == (audio == "yes")
    print("MP4 %s %s" % (path, "OK" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
