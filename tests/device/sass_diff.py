#!/usr/bin/env python3
"""Compares the SASS of two `cuobjdump -sass` listings function by function (tests/device/ab.sh).

usage: sass_diff.py BASE.txt NEW.txt [OLD=NEW ...]

Functions are matched by demangled name (c++filt when the host has it); OLD=NEW renames a
substring of a base name to its new spelling (a template parameter dropped, say). One line per
function: "same", "DIFFERS" (with the first differing instruction), "gone" (only in the base) or
"new" (only in NEW); the last line counts them.
"""
import re
import shutil
import subprocess
import sys


def functions(path):
    """{name: [instruction text, ...]} for every 'Function : name' block of a listing."""
    out, name, body = {}, None, []
    for line in open(path, errors="replace"):
        m = re.match(r"\s*Function : (\S+)", line)
        if m or line.strip().startswith("....."):
            if name:
                out[name] = body
            name, body = (m.group(1) if m else None), []
            continue
        if name:
            # the instruction and its encoding; the listing's offsets are part of both builds alike
            ins = re.sub(r"\s+", " ", line.strip())
            if ins:
                body.append(ins)
    if name:
        out[name] = body
    return out


def demangled(names):
    if not shutil.which("c++filt"):
        return {n: n for n in names}
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return dict(zip(names, r.stdout.split("\n")))


def main():
    base, new = functions(sys.argv[1]), functions(sys.argv[2])
    renames = [a.split("=", 1) for a in sys.argv[3:]]
    db, dn = demangled(list(base)), demangled(list(new))
    by_new = {dn[n]: n for n in new}
    counts = {"same": 0, "DIFFERS": 0, "gone": 0, "new": 0}
    seen = set()
    for b in sorted(base, key=lambda n: db[n]):
        name = db[b]
        for old, rep in renames:
            name = name.replace(old, rep)
        n = by_new.get(name)
        if n is None:
            counts["gone"] += 1
            print("gone    ", db[b])
            continue
        seen.add(n)
        x, y = base[b], new[n]
        if x == y:
            counts["same"] += 1
            print("same    ", db[b], f"({len(x)} lines)")
        else:
            counts["DIFFERS"] += 1
            i = next((k for k in range(min(len(x), len(y))) if x[k] != y[k]), min(len(x), len(y)))
            print("DIFFERS ", db[b], f"({len(x)} vs {len(y)} lines; first at line {i}:",
                  x[i] if i < len(x) else "-", "|", y[i] if i < len(y) else "-", ")")
    for n in sorted(set(new) - seen, key=lambda n: dn[n]):
        counts["new"] += 1
        print("new     ", dn[n])
    print(f"{counts['same']} same, {counts['DIFFERS']} differ, {counts['gone']} gone, {counts['new']} new")
    return 1 if counts["DIFFERS"] else 0


if __name__ == "__main__":
    sys.exit(main())
