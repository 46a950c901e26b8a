#!/usr/bin/env python3
"""An independent load generator built on the official `openai` client, to cross-check
`warden bench` (both must agree within a few percent on throughput and TTFT).

Closed loop: for each concurrency level, C threads (one openai.OpenAI client each, no
retries) send `--requests` streaming /v1/completions requests of `--input-len` words and
`--output-len` max_tokens (ignore_eos sent in extra_body), timing TTFT (first non-empty text
chunk), TPOT ((last - first token) / (tokens - 1), tokens from usage when reported) and
end-to-end. Throughput = output tokens of successful requests / (first send -> last end).
Percentiles interpolate linearly (numpy's default), as warden bench does.
Writes the same JSON shape as `warden bench` (levels[].output_tok_s, ttft_ms.p50, ...).

Usage: openai_loadgen.py --url http://127.0.0.1:8080 --concurrency 1,8 --requests 16 \
           --input-len 128 --output-len 64 --out DIR
"""
import argparse
import json
import os
import random
import sys
import threading
import time

import openai

WORDS = ("alpha beta gamma delta river stone light house world music water city paper green "
         "black white north south table chair window garden market letter").split()


def pct(v, q):
    if not v:
        return 0.0
    v = sorted(v)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def dist(v):
    return {"n": len(v), "mean": sum(v) / len(v) if v else 0.0, "p50": pct(v, 0.5), "p90": pct(v, 0.9),
            "p99": pct(v, 0.99), "max": max(v) if v else 0.0}


def one(client, model, prompt, max_tokens):
    rec = {"ok": False}
    t0 = time.monotonic()
    first = last = None
    chunks = 0
    usage_out = None
    try:
        stream = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, stream=True,
                                           temperature=0.0, stream_options={"include_usage": True},
                                           extra_body={"ignore_eos": True})
        for ch in stream:
            now = time.monotonic()
            if ch.usage is not None and ch.usage.completion_tokens is not None:
                usage_out = ch.usage.completion_tokens
            if ch.choices and ch.choices[0].text:
                if first is None:
                    first = now
                last = now
                chunks += 1
        t1 = time.monotonic()
    except Exception as e:  # noqa: BLE001 - any failure is a failed request
        rec["error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
        rec["e2e_ms"] = (time.monotonic() - t0) * 1000
        rec["t0"], rec["t1"] = t0, time.monotonic()
        return rec
    if first is None:
        rec["error"] = "no tokens"
        return rec
    n = usage_out if usage_out else chunks
    rec.update(ok=True, t0=t0, t1=t1, ttft_ms=(first - t0) * 1000, e2e_ms=(t1 - t0) * 1000, output_tokens=n,
               tpot_ms=(last - first) * 1000 / (n - 1) if n > 1 else None)
    return rec


def run_level(a, c, prompts, warm_prompt):
    recs = [None] * len(prompts)
    nxt = [0]
    lock = threading.Lock()

    n_threads = min(c, len(prompts))
    # Clients are built before the clock starts and the streams start together (a barrier),
    # so client construction does not stagger the first sends.
    base_url = a.url.rstrip("/") + ("" if a.url.rstrip("/").endswith("/v1") else "/v1")
    clients = [openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=a.timeout_s)
               for _ in range(n_threads)]
    barrier = threading.Barrier(n_threads)

    def worker(client):
        for _ in range(a.warmup):  # not counted: connection set-up and the client's lazy imports
            one(client, a.model, warm_prompt, a.output_len)
        barrier.wait()
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(prompts):
                return
            recs[i] = one(client, a.model, prompts[i], a.output_len)

    ths = [threading.Thread(target=worker, args=(cl,)) for cl in clients]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    sent = [r for r in recs if "t0" in r]
    dur = max(r["t1"] for r in sent) - min(r["t0"] for r in sent) if sent else 0.0
    ok = [r for r in recs if r["ok"]]
    out_tok = sum(r["output_tokens"] for r in ok)
    return {"label": "c=%d" % c, "concurrency": c, "requests": len(recs), "ok": len(ok),
            "errors": len(recs) - len(ok), "error_samples": sorted({r["error"] for r in recs if not r["ok"]})[:5],
            "duration_s": dur, "output_tokens": out_tok, "output_tok_s": out_tok / dur if dur > 0 else 0.0,
            "req_s": len(ok) / dur if dur > 0 else 0.0,
            "ttft_ms": dist([r["ttft_ms"] for r in ok]),
            "tpot_ms": dist([r["tpot_ms"] for r in ok if r["tpot_ms"] is not None]),
            "e2e_ms": dist([r["e2e_ms"] for r in ok])}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True)
    p.add_argument("--model", default=None)
    p.add_argument("--concurrency", default="1")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--timeout-s", type=float, default=120)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=0, help="uncounted requests per stream before each level")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    if a.model is None:
        try:
            c = openai.OpenAI(base_url=a.url.rstrip("/") + "/v1", api_key="none", max_retries=0, timeout=10)
            a.model = c.models.list().data[0].id
        except Exception:  # noqa: BLE001
            a.model = "default"
    # Fresh prompts per level (and a warm-up prompt of its own, not measured): with
    # the same prompts every level after the first would measure a server's prefix-cache hits.
    levels = []
    for li, c in enumerate(a.concurrency.split(",")):
        rng = random.Random(a.seed * 1000003 + li)
        prompts = [" ".join(rng.choice(WORDS) for _ in range(a.input_len)) for _ in range(a.requests + 1)]
        levels.append(run_level(a, int(c), prompts[:-1], prompts[-1]))
    res = {"tool": "openai_loadgen", "openai_version": openai.__version__, "url": a.url, "model": a.model,
           "input_len": a.input_len, "output_len": a.output_len, "levels": levels}
    for l in levels:
        print("%-6s ok=%d err=%d out_tok/s=%.2f ttft_p50=%.1f tpot_p50=%.2f" % (
            l["label"], l["ok"], l["errors"], l["output_tok_s"], l["ttft_ms"]["p50"], l["tpot_ms"]["p50"]))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "loadgen.json"), "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
