#!/usr/bin/env python3
"""How far prompt lookup (`--spec ngram`) can go on spec_bench.py's grounded prompts, under the
verify-step cost model T = T1 + (rows - 1) * TROW (docs/SPECULATIVE.md, "Cost of a verify step").

Greedy acceptance is deterministic (a draft token is kept iff it equals the greedy token), so the
greedy output of `--spec off` replays any drafting choice exactly. Per prompt this prints:
  policy   warden's own drafts (`warden batch --spec ngram`, batch 1): kept / proposed, by
           position, and the speed-up they imply under the cost model;
  oracle   the same n-gram lookup (longest of the last 1-4 tokens, most recent occurrence, up
           to K tokens) cut to exactly the tokens that will be kept: no draft is ever rejected.
The oracle is the bound of any policy that sizes n-gram drafts; K = 4 at full acceptance is
(K + 1) * T1 / (T1 + K * TROW).

  .venv/bin/python bench/ngram_bound.py --k 4
"""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import spec_bench as sb

NAMES = ["repeat", "rename", "quote", "summarize"]


def lookup(toks: list[int], k: int) -> list[int]:
    # NgramProposer::find: the longest n in 4..1 whose last n tokens occur earlier, most recent
    # occurrence first, and the (up to k) tokens after it.
    for n in range(min(4, len(toks) - 1), 0, -1):
        tail = toks[-n:]
        for s in range(len(toks) - n - 1, -1, -1):
            if toks[s:s + n] == tail:
                return toks[s + n:s + n + k]
    return []


def batch(warden: str, model: str, prompt: str, n: int, extra: list[str]) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(json.dumps({"prompt": prompt}) + "\n")
    p = subprocess.run([warden, "batch", "-m", model, "--prompts", f.name, "-n", str(n), "--temp",
                        "0", "--ignore-eos", "-t", "1", "--max-seqs", "1", *extra],
                       capture_output=True, text=True, timeout=600, check=True)
    Path(f.name).unlink()
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    return {"tokens": lines[0]["tokens"], "spec": lines[-1].get("spec")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(sb.ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--t1", type=float, default=3.8, help="ms of a one-token step")
    ap.add_argument("--trow", type=float, default=1.4, help="ms of each further row")
    a = ap.parse_args()
    warden = str(sb.ROOT / "build/warden")
    bound = (a.k + 1) * a.t1 / (a.t1 + a.k * a.trow)
    print(f"cost model: {a.t1} ms + {a.trow} ms per draft token; K = {a.k} fully kept: "
          f"{bound:.2f}x")
    sums = {"policy": 0.0, "oracle": 0.0}
    for name, prompt in zip(NAMES, sb.GROUNDED):
        ids = subprocess.run([warden, "tokenize", "-m", a.model], input=prompt, text=True,
                             capture_output=True, check=True).stdout.split()
        out = batch(warden, a.model, prompt, a.n, ["--spec", "off"])["tokens"]
        toks = [int(x) for x in ids] + out[:1]  # the first token comes from the prefill
        g, steps, proposed = 1, 0, 0
        while g < len(out):
            d = lookup(toks, min(a.k, len(out) - g - 1))
            kept = 0
            while kept < len(d) and d[kept] == out[g + kept]:
                kept += 1
            steps += 1
            proposed += kept
            toks += out[g:g + kept + 1]
            g += kept + 1
        base = (len(out) - 1) * a.t1
        oracle = base / (steps * a.t1 + proposed * a.trow)
        s = batch(warden, a.model, prompt, a.n, ["--spec", "ngram", "--spec-tokens", str(a.k)])
        s = s["spec"]
        pol_steps = len(out) - 1 - s["accepted"]
        policy = base / (pol_steps * a.t1 + s["proposed"] * a.trow)
        pos = " ".join(f"{x}/{y}" for x, y in zip(s["accepted_at"], s["proposed_at"]))
        print(f"{name:10s} policy {s['accepted']:3d}/{s['proposed']:3d} kept (by position "
              f"{pos}) -> {policy:.2f}x   oracle {oracle:.2f}x")
        sums["policy"] += policy
        sums["oracle"] += oracle
    print(f"mean       policy {sums['policy'] / 4:.2f}x   oracle {sums['oracle'] / 4:.2f}x")


if __name__ == "__main__":
    main()
