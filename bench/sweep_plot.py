#!/usr/bin/python3
"""Summarises bench/sweep.sh's CSV: medians and spread per transport and size, ratios against
tcp, PNG plots (latency and bandwidth vs size, one line per transport) and a Markdown table.

usage: /usr/bin/python3 bench/sweep_plot.py SWEEP_CSV OUT_DIR COMMAND
"""
import csv
import datetime
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PEER = "tcp"
OURS = "rc_roce"
TABLE_SIZES = [8, 1024, 4096, 65536, 1048576, 4194304]


def main():
    src, out, command = sys.argv[1], sys.argv[2], sys.argv[3]
    runs = {}
    loads = []
    with open(src, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["transport"], int(row["size"]))
            runs.setdefault(key, []).append((float(row["lat_us"]), float(row["bw_MBps"])))
            loads.append(float(row["load1"]))
    if not runs:
        sys.exit("sweep_plot: no results in " + src)
    transports = sorted({t for t, _ in runs}, key=lambda t: (t != PEER, t))
    summary = {}
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["transport", "size", "runs", "lat_us_median", "lat_us_min", "lat_us_max",
                    "bw_MBps_median", "bw_MBps_min", "bw_MBps_max"])
        for (t, size), vals in sorted(runs.items()):
            lat = [v[0] for v in vals]
            bw = [v[1] for v in vals]
            s = (statistics.median(lat), min(lat), max(lat), statistics.median(bw), min(bw), max(bw))
            summary[(t, size)] = s
            w.writerow([t, size, len(vals)] + [f"{x:.2f}" for x in s])

    for metric, idx, ylabel, name in ((0, 0, "half round trip (us)", "latency"),
                                      (1, 3, "streaming bandwidth (MB/s)", "bandwidth")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for t in transports:
            sizes = sorted(s for tt, s in summary if tt == t)
            med = [summary[(t, s)][idx] for s in sizes]
            lo = [summary[(t, s)][idx + 1] for s in sizes]
            hi = [summary[(t, s)][idx + 2] for s in sizes]
            ax.plot(sizes, med, marker=".", label=t)
            ax.fill_between(sizes, lo, hi, alpha=0.2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"MPI ping-pong {name}, loopback (median, band = min..max)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"{name}.png"), dpi=110)
        plt.close(fig)

    lines = [
        f"Produced by `{command}` on {datetime.date.today().isoformat()}, {os.cpu_count()} cores, "
        f"load average {min(loads):.1f}..{max(loads):.1f} during the runs; median of "
        f"{max(len(v) for v in runs.values())} interleaved rounds; ratio = {OURS} / {PEER}. "
        f"Plots: build/bench-results/latency.png, bandwidth.png.",
        "",
        f"| size | {PEER} latency us | {OURS} latency us | ratio | {PEER} MB/s | {OURS} MB/s | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in TABLE_SIZES:
        if (PEER, size) not in summary or (OURS, size) not in summary:
            continue
        p, o = summary[(PEER, size)], summary[(OURS, size)]
        lines.append(f"| {size} | {p[0]:.2f} | {o[0]:.2f} | {o[0] / p[0]:.2f}x | {p[3]:.1f} | "
                     f"{o[3]:.1f} | {o[3] / p[3] if p[3] else 0:.2f}x |")
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
