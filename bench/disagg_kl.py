#!/usr/bin/env python3
"""How far a cross-format hand-off moves the model's predictions: a bf16-KV prefill server
handing its pages to an fp8_e4m3-KV decode server, against colocated servers.

Four servers on 127.0.0.1: colocated bf16 KV, colocated fp8_e4m3 KV, and a prefill (bf16 KV) +
decode (fp8 KV) pair. For each prefix of a text (token ids, so every server reads the same
tokens), one greedy request of 2 tokens with the top 5 logprobs: the first token comes from the
prompt's logits (the prefill server's, bf16 in the split), the second is the first one decoded,
reading the prompt's KV from the decode pool (fp8 pages in the split, written by the prefill
server from bf16). At that second position, against colocated bf16 as the reference:
  KL(bf16 || X) over the reference's top 5 (a token missing from X's top 5 is given X's 5th
  logprob: a lower bound on its logprob's drop, so the KL is approximate), and top-1 agreement,
for X = the split pair and X = colocated fp8 (the same KV format without a hand-off). Prefixes
whose first token differs from the reference's are counted and skipped.

  .venv/bin/python bench/disagg_kl.py --warden build/warden --model models/M.gguf [--prefixes 48]

Bounded: each request has a timeout; servers bind 127.0.0.1 and are stopped on exit.
"""
import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import httpx

from disagg_mixed import Proc

ROOT = Path(__file__).resolve().parent.parent


def serve(a, *extra):
    return Proc([a.warden, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", "0",
                 "--kv-cache-bytes", "128M", "--threads", str(a.threads), *extra],
                r"http://127\.0\.0\.1:(\d+)")


def url(p):
    return f"http://127.0.0.1:{p.match.group(1)}"


def second_position(base, model, ids):
    """(first token, {token: logprob} of the top 5 at the second position, second token)."""
    r = httpx.post(base + "/v1/completions", timeout=120,
                   json={"model": model, "prompt": ids, "max_tokens": 2, "temperature": 0,
                         "logprobs": 5, "ignore_eos": True})
    r.raise_for_status()
    lp = r.json()["choices"][0]["logprobs"]
    return lp["tokens"][0], lp["top_logprobs"][1], lp["tokens"][1]


def kl(ref, got):
    floor = min(got.values())
    return sum(math.exp(lr) * (lr - got.get(t, floor)) for t, lr in ref.items())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warden", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prefixes", type=int, default=48)
    ap.add_argument("--text", default=str(ROOT / "bench/foundation_prompt.txt"))
    ap.add_argument("--out")
    a = ap.parse_args()
    procs = []
    try:
        ref16 = serve(a, "--kv-dtype", "bf16")
        procs.append(ref16)
        ref8 = serve(a, "--kv-dtype", "fp8_e4m3")
        procs.append(ref8)
        pre = Proc([a.warden, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", "0",
                    "--kv-cache-bytes", "128M", "--kv-dtype", "bf16", "--threads", str(a.threads),
                    "--role", "prefill", "--kv-listen", "127.0.0.1:0"],
                   r"kv transfers on [\d.]+:(\d+)")
        procs.append(pre)
        dec = serve(a, "--kv-dtype", "fp8_e4m3", "--role", "decode",
                    "--prefill-kv", f"127.0.0.1:{pre.match.group(1)}")
        procs.append(dec)
        model = a.model.rsplit("/", 1)[-1]
        text = Path(a.text).read_text()
        ids = httpx.post(url(ref16) + "/tokenize", timeout=60,
                         json={"model": model, "prompt": text * 4}).json()["tokens"]
        step = max(1, (len(ids) - 8) // a.prefixes)
        lengths = [8 + i * step for i in range(a.prefixes)]
        res = {"split (bf16 prefill -> fp8 decode)": [], "colocated fp8": []}
        skipped = {k: 0 for k in res}
        for n in lengths:
            first, ref, top1 = second_position(url(ref16), model, ids[:n])
            for name, base in (("split (bf16 prefill -> fp8 decode)", url(dec)),
                               ("colocated fp8", url(ref8))):
                f, got, t1 = second_position(base, model, ids[:n])
                if f != first:
                    skipped[name] += 1
                    continue
                res[name].append({"prefix": n, "kl": kl(ref, got), "top1": t1 == top1})
        report = {"prefix_tokens": [lengths[0], lengths[-1]], "prefixes": len(lengths)}
        print(f"\n{len(lengths)} prefixes of {lengths[0]}-{lengths[-1]} tokens; reference: "
              f"colocated bf16 KV\n")
        print("| against colocated bf16 | KL mean | KL p90 | KL max | top-1 agreement | first token differed |")
        print("|---|---|---|---|---|---|")
        for name, rows in res.items():
            k = sorted(r["kl"] for r in rows)
            row = {"kl_mean": statistics.mean(k), "kl_p90": k[int(0.9 * (len(k) - 1))],
                   "kl_max": k[-1], "top1": sum(r["top1"] for r in rows) / len(rows),
                   "n": len(rows), "first_token_differed": skipped[name]}
            report[name] = row
            print(f"| {name} | {row['kl_mean']:.2e} | {row['kl_p90']:.2e} | {row['kl_max']:.2e} | "
                  f"{row['top1']:.3f} ({sum(r['top1'] for r in rows)}/{len(rows)}) | {skipped[name]} |")
        if a.out:
            Path(a.out).write_text(json.dumps(report, indent=2) + "\n")
    finally:
        for p in reversed(procs):
            p.stop()


if __name__ == "__main__":
    sys.exit(main())
