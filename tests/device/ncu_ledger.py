#!/usr/bin/env python3
"""Where a kernel's instructions and stalls go, from Nsight Compute's source page.

    ncu_ledger.py SOURCE.csv [TOP]

SOURCE.csv: `ncu -i REPORT --page source --csv --print-source sass` of one kernel (tests/device/profile.sh
--part attn-src writes them). Prints the total warp-level instructions executed, the stall reasons over all
warp-state samples, the instructions and samples per opcode (predicates and modifiers stripped), and the TOP
(default 25) instructions by samples with their three largest stall reasons — the numbers a kernel change is
chosen by (docs/PERFORMANCE.md, session 5)."""
import collections
import csv
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = list(csv.reader(open(sys.argv[1], newline="")))
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    head = next((i for i, r in enumerate(rows) if "Source" in r and "Instructions Executed" in r), None)
    if head is None:
        sys.exit(f"{sys.argv[1]}: no source table (columns Source, Instructions Executed)")
    cols = {h: i for i, h in enumerate(rows[head])}
    stalls = [h for h in rows[head] if h.startswith("stall_") and "Not Issued" not in h]
    reasons, executed, sampled, lines = collections.Counter(), collections.Counter(), collections.Counter(), []
    for r in rows[head + 1:]:
        if len(r) < len(cols):
            continue
        try:
            samples = int(r[cols["# Samples"]] or 0)
            count = int(r[cols["Instructions Executed"]] or 0)
        except ValueError:
            continue
        words = r[cols["Source"]].split()
        if not words:
            continue
        opcode = (words[1] if words[0].startswith("@") and len(words) > 1 else words[0]).split(".")[0]
        executed[opcode] += count
        sampled[opcode] += samples
        per = {h[6:]: int(r[cols[h]] or 0) for h in stalls}
        for k, v in per.items():
            reasons[k] += v
        lines.append((samples, count, " ".join(words), per))
    total_ex, total_s = sum(executed.values()) or 1, sum(sampled.values()) or 1
    print(f"{total_ex / 1e9:.2f} G warp instructions executed, {total_s} warp-state samples")
    print("stall reasons:")
    for k, v in reasons.most_common(10):
        print(f"  {k:20s} {v:9d} {100 * v / total_s:5.1f}%")
    print("per opcode (instructions, samples):")
    for op, n in executed.most_common(24):
        print(f"  {op:10s} {n:13d} {100 * n / total_ex:5.1f}%   {sampled[op]:8d} {100 * sampled[op] / total_s:5.1f}%")
    print(f"top {top} instructions by samples:")
    for samples, count, text, per in sorted(lines, key=lambda x: -x[0])[:top]:
        why = " ".join(f"{k}={v}" for k, v in sorted(per.items(), key=lambda x: -x[1])[:3] if v)
        print(f"  {samples:7d} {100 * samples / total_s:4.1f}% x{count:<11d} {text[:64]:64s} {why}")


if __name__ == "__main__":
    main()
