#!/usr/bin/env python3
"""Decode and prefill speed on the same GGUF files, warden against llama.cpp, interleaved.

For each file and thread count, alternating (warden, llama, llama, warden, ...) over --rounds:
  * warden  `warden run -m F -p PROMPT -n 32 --threads T --ignore-eos --temp 0`: the timings
            line's decode_tok_s, and prefill_tok_s of a ~128-token prompt;
  * llama   `llama-bench -m F -p 128 -n 64 -t T -r 1 -o json`: tg64 and pp128 tokens/s.
Ratios are taken per round (both runs back to back on the same loaded machine), then the median.

Usage (from the repo root):
  python3 bench/kquant_speed.py --llama-bench /path/to/llama-bench --model A.gguf [--model B.gguf]
      [--threads 1 2] [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT = " ".join(["the quick brown fox jumps over the lazy dog"] * 14)


def warden(binary: str, model: str, threads: int) -> tuple[float, float, int]:
    p = subprocess.run([binary, "run", "-m", model, "-p", PROMPT, "-n", "32", "--threads", str(threads),
                        "--ignore-eos", "--temp", "0"], capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    t = p.stdout + p.stderr
    dec = float(re.search(r"decode_tok_s=([0-9.]+)", t).group(1))
    pre = float(re.search(r"prefill_tok_s=([0-9.]+)", t).group(1))
    n = int(re.search(r"prompt_tokens=(\d+)", t).group(1))
    return dec, pre, n


def llama(binary: str, model: str, threads: int) -> tuple[float, float]:
    p = subprocess.run([binary, "-m", model, "-p", "128", "-n", "64", "-t", str(threads), "-r", "1", "-o", "json"],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    rows = json.loads(p.stdout)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] > 0)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] > 0)
    return tg, pp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--warden", default=str(ROOT / "build" / "warden"))
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    table = []
    for model in a.model:
        for t in a.threads:
            w_dec, w_pre, l_tg, l_pp, r_dec, r_pre = [], [], [], [], [], []
            n_prompt = 0
            for r in range(a.rounds):
                order = ["w", "l"] if r % 2 == 0 else ["l", "w"]
                res = {}
                for who in order:
                    res[who] = warden(a.warden, model, t) if who == "w" else llama(a.llama_bench, model, t)
                (dec, pre, n_prompt), (tg, pp) = res["w"], res["l"]
                w_dec.append(dec), w_pre.append(pre), l_tg.append(tg), l_pp.append(pp)
                r_dec.append(dec / tg), r_pre.append(pre / pp)
                print(json.dumps({"model": Path(model).name, "threads": t, "round": r, "warden_decode": dec,
                                  "warden_prefill": pre, "prompt_tokens": n_prompt, "llama_tg64": tg,
                                  "llama_pp128": pp}), flush=True)
            med = statistics.median
            table.append(f"| {Path(model).name} | {t} | {med(w_dec):.1f} | {med(l_tg):.1f} | {med(r_dec):.2f}x | "
                         f"{med(w_pre):.1f} ({n_prompt} tok) | {med(l_pp):.1f} | {med(r_pre):.2f}x |")
    print("\n| file | threads | warden decode tok/s | llama.cpp tg64 | ratio | warden prefill tok/s | "
          "llama.cpp pp128 | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(table))


if __name__ == "__main__":
    main()
