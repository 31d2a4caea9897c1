#!/usr/bin/env python3
"""Per-iteration instruction cost by function from two callgrind runs of the same program with
different iteration counts (cmake/rxe-guest/tests/cgcount.sh): (cost in the longer run - cost in
the shorter) / extra iterations, largest first; start-up work cancels out.

    bench/cg_per_iteration.py SHORT.out LONG.out EXTRA_ITERATIONS [--inclusive] [--top N]
"""
import argparse
import re
import subprocess


def costs(path, inclusive):
    cmd = ["callgrind_annotate", "--threshold=100", "--auto=no"]
    if inclusive:
        cmd.append("--inclusive=yes")
    out = subprocess.run(cmd + [path], capture_output=True, text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)", line)
        if m and "PROGRAM TOTALS" not in line:
            name = m.group(2)[:170]
            table[name] = table.get(name, 0) + int(m.group(1).replace(",", ""))
    return table


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("short")
    ap.add_argument("long")
    ap.add_argument("extra", type=int)
    ap.add_argument("--inclusive", action="store_true")
    ap.add_argument("--top", type=int, default=60)
    a = ap.parse_args()
    s, l = costs(a.short, a.inclusive), costs(a.long, a.inclusive)
    rows = sorted(((l.get(k, 0) - s.get(k, 0)) / a.extra, k) for k in set(s) | set(l))
    for v, k in reversed(rows[-a.top:]):
        if abs(v) >= 3:
            print(f"{v:9.1f}  {k}")


if __name__ == "__main__":
    main()
