#!/usr/bin/env python3
"""Summary of bench/weights_speed.sh results.tsv: best-of-rounds decode tok/s per configuration,
bytes read per token, fraction of the memory roofline, per-round ratio to warden bf16.

Bytes per token = every matrix streamed once per decoded token: the layer matrices plus the
output head (the token embedding table is read one row per token, so it is not counted).
warden: from its load line `weights F: layers X MiB, embeddings/head Y MiB` as X + Y/2 (the model
must have an untied head in the same format as token_embd, checked in the GGUF); llama.cpp: the
GGUF's tensor bytes without token_embd.weight.

Roofline = read bandwidth / bytes per token. The bandwidth is the highest `membw` reading of any
round (weights_speed.sh measures it every round; membw.json only when no round did). membw is a
plain read loop, and the bf16 GEMV sometimes draws more than it, so a second column gives each
configuration's bandwidth draw (tok/s x bytes/token) as a fraction of warden bf16's in the same
round: the roofline as the bf16 kernel shows it on that minute's machine. A third gives each
round's draw as a fraction of that round's own membw reading (the bandwidth of this VM moves
within a run, so the highest reading can come from a minute no decode run saw). Where the run
bracketed every configuration's run with membw readings (weights_speed.sh BRACKET=1), a fourth
gives each run's draw against the mean of its own two brackets, with the median over rounds, and
a fifth the per-round ratio to warden bf16 at equal bandwidth: (tok/s / bracket bandwidth) over
warden bf16's (tok/s / its bracket bandwidth), i.e. the speed ratio had both run on the same
memory.

Every round of weights_speed.sh also reads the bandwidth over a window of about one decode run's
length (membw --seconds; the per-round reading above is the best of three ~35 ms bursts, and on a
VM whose bandwidth moves within seconds the highest burst can sit above what any second-long
run draws). Where the results have such readings, a column after "% of roofline" gives the best tok/s
against the highest of them: the same order statistic (best of as many one-second samples) on
both sides of the ratio.

Usage: weights_speed_summary.py results.tsv membw.json THREADS
"""
from __future__ import annotations

import csv
import io
import json
import re
import statistics
import sys
from collections import defaultdict

import gguf

MIB = 1 << 20


def gguf_bytes(path: str) -> tuple[int, bool]:
    """(bytes of all tensors but token_embd, has output.weight)."""
    r = gguf.GGUFReader(path)
    names = {t.name: int(t.n_bytes) for t in r.tensors}
    has_out = "output.weight" in names
    total = sum(b for n, b in names.items() if n != "token_embd.weight" or not has_out)
    return total, has_out


def main() -> int:
    results, membw_json, threads = sys.argv[1], sys.argv[2], sys.argv[3]
    tok = defaultdict(dict)  # config -> round -> tok/s
    bpt = {}
    round_bw = {}  # round -> bytes/s
    sustained_bw = {}  # round -> bytes/s over a window of about one decode run
    brackets = defaultdict(list)  # (config, round) -> bytes/s readings before and after its run
    for line in open(results):
        f = line.rstrip("\n").split("\t")
        if f[0] == "membw":
            try:
                round_bw[int(f[1])] = json.loads(f[2])["read_gbps"][str(threads)] * 1e9
            except (ValueError, KeyError, IndexError):
                print(f"warning: round {f[1]}: unreadable membw reading, not used", file=sys.stderr)
        elif f[0] == "membw_sustained":
            try:
                sustained_bw[int(f[1])] = json.loads(f[2])["read_gbps"][str(threads)] * 1e9
            except (ValueError, KeyError, IndexError):
                print(f"warning: round {f[1]}: unreadable sustained membw reading, not used", file=sys.stderr)
        elif f[0] == "bracket":
            try:
                brackets[(f[2], int(f[1]))].append(json.loads(f[4])["read_gbps"][str(threads)] * 1e9)
            except (ValueError, KeyError, IndexError):
                print(f"warning: round {f[1]} {f[2]}: unreadable bracket reading, not used", file=sys.stderr)
        elif f[0] == "warden":
            _, rnd, fmt, tim, mem, path = f[:6]
            m = re.search(r"decode_tok_s=([\d.]+)", tim)
            mm = re.search(r"layers (\d+) MiB, embeddings/head (\d+) MiB", mem)
            if not m or not mm:
                continue
            cfg = "warden " + fmt
            tok[cfg][int(rnd)] = float(m.group(1))
            if cfg not in bpt:
                _, has_out = gguf_bytes(path)
                head = int(mm.group(2)) / 2 if has_out else int(mm.group(2))
                bpt[cfg] = (int(mm.group(1)) + head) * MIB
        elif f[0] == "llama":
            rnd, q, row, path = f[1], f[2], f[3], f[-1]
            cols = next(csv.reader(io.StringIO(row)))
            cfg = "llama.cpp " + q
            tok[cfg][int(rnd)] = float(cols[-2])  # avg_ts
            if cfg not in bpt:
                bpt[cfg] = gguf_bytes(path)[0]
    if round_bw:
        bw = max(round_bw.values())
        src = f"highest of {len(round_bw)} rounds (" + " ".join(f"{round_bw[r] / 1e9:.1f}" for r in sorted(round_bw)) + ")"
    else:
        bw = json.load(open(membw_json))["read_gbps"][str(threads)] * 1e9
        src = membw_json
    base = tok.get("warden bf16", {})
    print(f"membw {bw / 1e9:.1f} GB/s ({threads} threads, {src}); best of "
          f"{max((len(v) for v in tok.values()), default=0)} rounds")
    sbw = max(sustained_bw.values()) if sustained_bw else None
    if sbw:
        print(f"sustained membw {sbw / 1e9:.1f} GB/s, highest of {len(sustained_bw)} one-run-long windows ("
              + " ".join(f"{sustained_bw[r] / 1e9:.1f}" for r in sorted(sustained_bw)) + ")")
    bracketed = bool(brackets)
    head = ("| config | best tok/s | MB/token | roofline tok/s | % of roofline |"
            + (" % of sustained roofline |" if sbw else "") + " % of that round's membw, per round "
            "| GB/s drawn / warden bf16's, per round | best / warden bf16 best | per-round ratio to warden bf16 |")
    if bracketed:
        head += " % of the run's bracketing membw, per round (median) | per-round ratio to warden bf16 at equal bandwidth |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")

    def bracket_bw(cfg: str, r: int) -> float | None:
        v = brackets.get((cfg, r), [])
        return sum(v) / len(v) if len(v) == 2 else None
    bbest = max(base.values()) if base else None
    # warden bf16's tok/s per byte/s of its own brackets, per round: the equal-bandwidth baseline.
    base_eq = {r: base[r] / bracket_bw("warden bf16", r) for r in base if bracket_bw("warden bf16", r)}
    for cfg, rounds in tok.items():
        best = max(rounds.values())
        roof = bw / bpt[cfg]
        ratios = " ".join(f"{rounds[r] / base[r]:.2f}" for r in sorted(rounds) if r in base and base[r] > 0)
        draw = " ".join(f"{rounds[r] * bpt[cfg] / (base[r] * bpt['warden bf16']):.2f}" for r in sorted(rounds)
                        if r in base and base[r] > 0) if base else "-"
        own = " ".join(f"{100 * rounds[r] * bpt[cfg] / round_bw[r]:.0f}" for r in sorted(rounds) if r in round_bw) or "-"
        rel = f"{best / bbest:.2f}" if bbest else "-"
        sus = f" {100 * best * bpt[cfg] / sbw:.0f}% |" if sbw else ""
        row = (f"| {cfg} | {best:.2f} | {bpt[cfg] / 1e6:.0f} | {roof:.1f} | {100 * best / roof:.0f}% |{sus} {own} | {draw} "
               f"| {rel} | {ratios} |")
        if bracketed:
            fr = {r: rounds[r] * bpt[cfg] / bracket_bw(cfg, r) for r in sorted(rounds) if bracket_bw(cfg, r)}
            med = statistics.median(fr.values()) if fr else None
            eq = " ".join(f"{(rounds[r] / bracket_bw(cfg, r)) / base_eq[r]:.2f}" for r in sorted(rounds)
                          if r in base_eq and bracket_bw(cfg, r)) or "-"
            row += (" " + " ".join(f"{100 * v:.0f}" for v in fr.values()) + (f" ({100 * med:.0f}%)" if med else "-")
                    + f" | {eq} |")
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
