#!/usr/bin/python3
"""Summarises bench/run.sh's CSV: median and spread per measurement and transport, ratios against
tcp computed round by round (each ratio from two runs made seconds apart, the median of those
reported), results.json, summary.csv, PNG plots (one line per transport) and table.md.

usage: /usr/bin/python3 bench/run_report.py RESULTS_CSV OUT_DIR key=value...   (run metadata)
Exits non-zero if any measurement lacks a transport or a round (the harness's completeness check).
"""
import csv
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PEER = "tcp"
ORDER = ["tcp", "rc_roce", "ud_roce"]
# test -> (label, lower is better, x axis for its plot: "size", "np" or None)
TESTS = {
    "pingpong_lat": ("MPI ping-pong latency {size} (us)", True, "size"),
    "pingpong_bw": ("MPI streaming bandwidth {size} (MB/s)", False, "size"),
    "bibw": ("MPI bidirectional bandwidth {size} (MB/s)", False, "size"),
    "msgrate": ("MPI 8 B message rate, {pairs} (M msg/s)", False, "np"),
    "put_lat": ("MPI_Put + flush latency {size} (us)", True, "size"),
    "get_lat": ("MPI_Get + flush latency {size} (us)", True, "size"),
    "fetch_and_op": ("MPI_Fetch_and_op + flush latency (us)", True, None),
    "compare_and_swap": ("MPI_Compare_and_swap + flush latency (us)", True, None),
    "allreduce": ("MPI_Allreduce 8 B latency, np {np} (us)", True, "np"),
    "ucp_tag_lat": ("UCP tag_lat 8 B, ucx_perftest (us)", True, None),
    "ucp_tag_mr": ("UCP tag_bw 8 B message rate, ucx_perftest (M msg/s)", False, None),
    "ucp_fadd_lat": ("UCP ucp_fadd latency, ucx_perftest (us)", True, None),
}
TABLE_SIZES = {
    "pingpong_lat": [1, 8, 1024, 4096, 65536, 1048576, 4194304],
    "pingpong_bw": [4096, 65536, 1048576, 4194304],
    "bibw": [4096, 65536, 1048576, 4194304],
    "put_lat": [8, 65536, 1048576],
    "get_lat": [8, 65536, 1048576],
}
PLOTS = [("latency", "pingpong_lat", "half round trip (us)"),
         ("bandwidth", "pingpong_bw", "streaming bandwidth, one way (MB/s)"),
         ("bibw", "bibw", "bidirectional bandwidth, both ways (MB/s)"),
         ("msgrate", "msgrate", "8 B messages, all pairs (M msg/s)"),
         ("allreduce", "allreduce", "MPI_Allreduce 8 B (us)")]


def human(size):
    for unit, n in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= n and size % n == 0:
            return f"{size // n} {unit}"
    return f"{size} B"


def num(v):
    return f"{v:.2f}" if v >= 1 else f"{v:.3g}"


def ratio(r):
    return f"{r:.3f}x" if r < 0.1 else f"{r:.2f}x"


def main():
    src, out = sys.argv[1], sys.argv[2]
    meta = dict(a.split("=", 1) for a in sys.argv[3:])
    rows = []
    with open(src, newline="") as f:
        for r in csv.DictReader(f):
            r["round"], r["np"], r["size"] = int(r["round"]), int(r["np"]), int(r["size"])
            r["value"], r["load1"] = float(r["value"]), float(r["load1"])
            rows.append(r)
    if not rows:
        sys.exit("run_report: no results in " + src)
    transports = [t for t in ORDER if any(r["transport"] == t for r in rows)]
    rounds = int(meta.get("rounds", max(r["round"] for r in rows)))
    by = {}   # (test, np, size) -> transport -> round -> value
    for r in rows:
        by.setdefault((r["test"], r["np"], r["size"]), {}).setdefault(r["transport"], {})[r["round"]] = r["value"]

    missing = [f"{k} {t}: {len(v.get(t, {}))}/{rounds} rounds" for k, v in sorted(by.items())
               for t in ORDER if len(v.get(t, {})) != rounds]
    summary = []
    for (test, np_, size), per in sorted(by.items()):
        for t in transports:
            vals = list(per.get(t, {}).values())
            if not vals:
                continue
            s = {"test": test, "np": np_, "size": size, "transport": t, "runs": len(vals),
                 "median": statistics.median(vals), "min": min(vals), "max": max(vals)}
            peer = per.get(PEER, {})
            ratios = [v / peer[rd] for rd, v in per[t].items() if peer.get(rd)]
            s["ratio_vs_tcp"] = statistics.median(ratios) if ratios and t != PEER else None
            summary.append(s)
    med = {(s["test"], s["np"], s["size"], s["transport"]): s for s in summary}

    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["test", "np", "size", "transport", "runs", "median", "min", "max", "ratio_vs_tcp"])
        for s in summary:
            w.writerow([s["test"], s["np"], s["size"], s["transport"], s["runs"], f"{s['median']:.3f}",
                        f"{s['min']:.3f}", f"{s['max']:.3f}",
                        "" if s["ratio_vs_tcp"] is None else f"{s['ratio_vs_tcp']:.3f}"])
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"meta": meta, "summary": summary, "runs": rows, "missing": missing}, f, indent=1)

    for name, test, ylabel in PLOTS:
        keys = sorted({(n, s) for (tt, n, s, _) in med if tt == test})
        if not keys:
            continue
        axis = TESTS[test][2]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for t in transports:
            pts = [(n if axis == "np" else s, med[(test, n, s, t)]) for n, s in keys if (test, n, s, t) in med]
            xs = [p[0] for p in pts]
            ax.plot(xs, [p[1]["median"] for p in pts], marker=".", label=t)
            ax.fill_between(xs, [p[1]["min"] for p in pts], [p[1]["max"] for p in pts], alpha=0.2)
        if axis == "size":
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("message size (bytes)")
        else:
            ax.set_xlabel("MPI ranks (np)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{test}, loopback, UCX_TLS=<tl>,self (median, band = min..max)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"{name}.png"), dpi=110)
        plt.close(fig)

    loads = [r["load1"] for r in rows]
    ours = [t for t in transports if t != PEER]
    lines = [
        f"Produced by `{meta.get('command', 'bench/run.sh')}` on {meta.get('date', '?')} in "
        f"{meta.get('seconds', '?')} s: {meta.get('cores', '?')} cores ({meta.get('cpu', '?')}), "
        f"Linux {meta.get('kernel', '?')}, UCX {meta.get('ucx', '?')}, {meta.get('mpi', '?')}; load "
        f"average {min(loads):.1f}..{max(loads):.1f} during the runs. Loopback, userspace device, "
        f"`UCX_TLS=<tl>,self` (no shared memory). " +
        (f"Each figure: median of {rounds} interleaved rounds, ±half the spread (max-min) in % of "
         f"the median; ratio = ours / tcp, the median of the per-round ratios" if rounds > 1 else
         "One round (no median, no spread); ratio = ours / tcp") +
        f" (latency: lower is better; bandwidth and rate: higher). Plots: "
        f"{meta.get('plots', 'build/bench-results/run')}/{{latency,bandwidth,bibw,msgrate,allreduce}}.png.",
        "",
        "| measurement | " + " | ".join(transports) + " | " + " | ".join(f"{t}/tcp" for t in ours) + " |",
        "|---" * (1 + len(transports) + len(ours)) + "|",
    ]
    for test, (label, _, _) in TESTS.items():
        for (tt, np_, size) in sorted(by):
            if tt != test or (test in TABLE_SIZES and size not in TABLE_SIZES[test]):
                continue
            text = label.format(size=human(size), np=np_, pairs=f"{np_ // 2} pair{'s' if np_ > 2 else ''}")
            cells = []
            for t in transports:
                s = med.get((test, np_, size, t))
                if s is None:
                    cells.append("-")
                elif s["runs"] < 2 or not s["median"]:
                    cells.append(num(s["median"]))
                else:
                    cells.append(f"{num(s['median'])} ±{50 * (s['max'] - s['min']) / s['median']:.0f}%")
            for t in ours:
                s = med.get((test, np_, size, t))
                cells.append("-" if s is None or s["ratio_vs_tcp"] is None else ratio(s["ratio_vs_tcp"]))
            lines.append(f"| {text} | " + " | ".join(cells) + " |")
    # The target for this harness's new figures: 8-byte message rate of rc_roce >= 1.5x tcp.
    rates = [(f"MPI {n // 2} pair{'s' if n > 2 else ''}", med.get(("msgrate", n, 8, "rc_roce")))
             for n in sorted({k[1] for k in by if k[0] == "msgrate"})]
    rates.append(("UCP tag_bw", med.get(("ucp_tag_mr", 2, 8, "rc_roce"))))
    rates = [(name, s["ratio_vs_tcp"]) for name, s in rates if s and s["ratio_vs_tcp"] is not None]
    if rates:
        lines += ["", "Target: 8 B message rate of rc_roce >= 1.50x tcp's — " +
                  ", ".join(f"{name} {r:.2f}x ({'met' if r >= 1.5 else 'not met'})" for name, r in rates) + "."]
    if missing:
        lines += ["", "Incomplete: " + "; ".join(missing)]
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if missing:
        sys.exit("run_report: incomplete results:\n  " + "\n  ".join(missing))


if __name__ == "__main__":
    main()
