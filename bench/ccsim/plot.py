#!/usr/bin/python3
"""Draws the congestion-control simulator figures (PNG) from `roce_ccsim sweep --out DIR` output.

usage: /usr/bin/python3 bench/ccsim/plot.py DATA_DIR [PNG_DIR]   (PNG_DIR defaults to DATA_DIR)

Needs matplotlib (Debian: python3-matplotlib). Figures:
  queue_depth.png       queue depth over time, incast N = 2, 16, 128, 1024, CC off / dcqcn / delay
  fairness_vs_n.png     Jain's index, utilisation and per-flow goodput (min/max / fair share) vs N
  latency_vs_n.png      packet latency p50 / p99 / p99.9 vs N
  fairness_join.png     flows joining one by one: per-flow goodput over time
"""
import csv
import glob
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODES = ["off", "dcqcn", "delay"]
COLORS = {"off": "tab:red", "dcqcn": "tab:blue", "delay": "tab:green"}
BUFFER_KB = 4096
KMIN_KB, KMAX_KB = 5, 200


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def col(rows, key):
    return [float(r[key]) for r in rows]


def queue_depth(data, out):
    ns = [2, 16, 128, 1024]
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5), sharey=True)
    for ax, n in zip(axes.flat, ns):
        for m in MODES:
            p = os.path.join(data, f"ts_incast_{m}_n{n}.csv")
            if not os.path.exists(p):
                continue
            rows = read_csv(p)
            ax.plot([t / 1000 for t in col(rows, "t_us")], [max(q, 0.5) for q in col(rows, "queue_kb")],
                    color=COLORS[m], lw=0.8, label=f"CC {m}")
        ax.axhline(BUFFER_KB, color="k", ls="--", lw=0.8, label="buffer (4 MB)")
        ax.axhspan(KMIN_KB, KMAX_KB, color="tab:orange", alpha=0.12, label="RED Kmin..Kmax")
        ax.set_yscale("log")
        ax.set_title(f"incast {n}-to-1")
        ax.set_xlabel("time (ms)")
        ax.set_ylabel("switch queue (KB)")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Bottleneck queue depth (100 Gb/s port, RED/ECN 5 KB / 200 KB / 1%, no PFC)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "queue_depth.png"), dpi=110)
    plt.close(fig)


def by_mode(summary, scenario="incast"):
    res = {}
    for r in summary:
        if r["scenario"] != scenario:
            continue
        res.setdefault(r["cc"], []).append(r)
    for m in res:
        res[m].sort(key=lambda r: int(r["n"]))
    return res


def fairness_vs_n(summary, out):
    res = by_mode(summary)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for m in MODES:
        rows = res.get(m, [])
        if not rows:
            continue
        n = [int(r["n"]) for r in rows]
        axes[0].plot(n, col(rows, "jain"), "o-", color=COLORS[m], label=f"CC {m}")
        axes[1].plot(n, [100 * u for u in col(rows, "util")], "o-", color=COLORS[m], label=f"CC {m}")
        fair = [100.0 / k for k in n]   # Gb/s per flow at a fair share of 100 Gb/s
        lo = [a / f for a, f in zip(col(rows, "min_flow_gbps"), fair)]
        hi = [a / f for a, f in zip(col(rows, "max_flow_gbps"), fair)]
        axes[2].fill_between(n, lo, hi, color=COLORS[m], alpha=0.2)
        axes[2].plot(n, lo, "v-", color=COLORS[m], lw=0.8, label=f"CC {m} min")
        axes[2].plot(n, hi, "^-", color=COLORS[m], lw=0.8, label=f"CC {m} max")
    axes[0].axhline(0.95, color="k", ls=":", lw=0.8)
    axes[0].set_ylabel("Jain's fairness index")
    axes[1].axhline(90, color="k", ls=":", lw=0.8)
    axes[1].set_ylabel("bottleneck goodput (% of 100 Gb/s)")
    axes[2].axhline(1.0, color="k", ls=":", lw=0.8)
    axes[2].set_ylabel("per-flow goodput / fair share")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("incast degree N")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Fairness and utilisation vs N (steady state, after warm-up)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "fairness_vs_n.png"), dpi=110)
    plt.close(fig)


def latency_vs_n(summary, out):
    res = by_mode(summary)
    fig, ax = plt.subplots(figsize=(8, 5))
    styles = {"lat_p50_us": ("o-", "p50"), "lat_p99_us": ("s--", "p99"), "lat_p999_us": ("^:", "p99.9")}
    for m in MODES:
        rows = res.get(m, [])
        if not rows:
            continue
        n = [int(r["n"]) for r in rows]
        for key, (st, name) in styles.items():
            ax.plot(n, col(rows, key), st, color=COLORS[m], label=f"CC {m} {name}", lw=0.9)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("incast degree N")
    ax.set_ylabel("packet latency, sender NIC -> receiver (us)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=3)
    ax.set_title("Network latency percentiles vs N")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "latency_vs_n.png"), dpi=110)
    plt.close(fig)


def fairness_join(data, out):
    files = {m: glob.glob(os.path.join(data, f"ts_fairness_{m}_n*.csv")) for m in MODES}
    if not any(files.values()):
        return
    fig, axes = plt.subplots(len(MODES), 1, figsize=(11, 9), sharex=True)
    for ax, m in zip(axes, MODES):
        if not files[m]:
            continue
        rows = read_csv(files[m][0])
        t = [x / 1000 for x in col(rows, "t_us")]
        flows = [k for k in rows[0] if k.startswith("flow") and k.endswith("_gbps") and "rate" not in k]
        # 10-sample moving average: one 10 us sample holds only a few packets per flow.
        for k in flows:
            y = col(rows, k)
            w = 10
            sm = [sum(y[max(0, i - w + 1):i + 1]) / min(w, i + 1) for i in range(len(y))]
            ax.plot(t, sm, lw=0.7, label=k.replace("_gbps", ""))
        ax.set_ylabel("goodput (Gb/s)")
        ax.set_title(f"CC {m}: flows join every interval on a 100 Gb/s bottleneck")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time (ms)")
    axes[0].legend(fontsize=7, ncol=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "fairness_join.png"), dpi=110)
    plt.close(fig)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    data = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else data
    os.makedirs(out, exist_ok=True)
    summary = read_csv(os.path.join(data, "summary.csv"))
    queue_depth(data, out)
    fairness_vs_n(summary, out)
    latency_vs_n(summary, out)
    fairness_join(data, out)
    for f in ["queue_depth.png", "fairness_vs_n.png", "latency_vs_n.png", "fairness_join.png"]:
        p = os.path.join(out, f)
        if os.path.exists(p):
            print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
