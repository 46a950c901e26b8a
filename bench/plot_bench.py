#!/usr/bin/env python3
"""Plot `warden bench` results: output throughput against latency, one point per level.

Usage: plot_bench.py RESULT.json [RESULT2.json ...] OUT.png
Each RESULT.json (bench.json of `warden bench`, or of bench/openai_loadgen.py) becomes one
line, labelled with its "label" field or else its directory name; points are the levels
(concurrency or rate). Left: TTFT p50 (solid) and p99 (dashed); right: TPOT p50.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    if len(argv) < 3 or not argv[-1].endswith(".png"):
        print(__doc__, file=sys.stderr)
        return 2
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for path in argv[1:-1]:
        with open(path) as f:
            r = json.load(f)
        label = r.get("label") or os.path.basename(os.path.dirname(os.path.abspath(path)))
        lv = [l for l in r["levels"] if l.get("ok", 0) > 0]
        if not lv:
            continue
        x = [l["output_tok_s"] for l in lv]
        line, = ax1.plot(x, [l["ttft_ms"]["p50"] for l in lv], "o-", label=label)
        ax1.plot(x, [l["ttft_ms"]["p99"] for l in lv], "x--", color=line.get_color())
        ax2.plot(x, [l["tpot_ms"]["p50"] for l in lv], "o-", color=line.get_color(), label=label)
        for l, xi in zip(lv, x):
            ax1.annotate(l["label"], (xi, l["ttft_ms"]["p50"]), fontsize=7, textcoords="offset points",
                         xytext=(3, 3))
            ax2.annotate(l["label"], (xi, l["tpot_ms"]["p50"]), fontsize=7, textcoords="offset points",
                         xytext=(3, 3))
    ax1.set_xlabel("output tokens/s (all streams)")
    ax1.set_ylabel("TTFT ms (p50 solid, p99 dashed)")
    ax1.set_yscale("log")
    ax2.set_xlabel("output tokens/s (all streams)")
    ax2.set_ylabel("TPOT p50 ms")
    ax1.legend(fontsize=7)
    ax1.grid(alpha=0.3)
    ax2.grid(alpha=0.3)
    fig.suptitle("throughput vs latency per level")
    fig.tight_layout()
    fig.savefig(argv[-1], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
