#!/usr/bin/env python3
"""Structured-output cost: decode tokens/s with and without a JSON schema, at concurrency 1 and
32, for warden and (with --llama-server) llama.cpp's llama-server (its json_schema -> GBNF path)
on the same GGUF, prompts and thread count. The servers are started here on 127.0.0.1, run side
by side, and are stopped after.

On a machine shared with other jobs the speed moves by 2x within minutes, so nothing is compared
across time: per concurrency level C, each round runs one batch of every (server, mode) pair, in
an order rotated from round to round (A/B/A/B, the first pair changing), and a batch is C
concurrent streams each sending --per-stream requests. The figure per request is its decode
speed as the server itself timed it (warden: 1000 / warden_timing.tpot_ms, the mean gap after
the first token; llama.cpp: timings.predicted_per_second), so queueing and prefill are left out;
each (server, mode) reports the median over all its requests, and the change is the median of
the per-round ratios schema/free of those medians (each ratio taken between batches run next to
each other).

llama-server builds of early 2025 (b4748, tried here) ignore OpenAI's
`response_format: {"type": "json_schema", "json_schema": {"schema": ...}}` on
/v1/chat/completions and answer free text; their own form, `{"type": "json_object", "schema":
...}`, compiles the schema to GBNF, so llama.cpp gets that one. Every schema answer that ends
with "stop" must parse as JSON (the invalid JSON column counts those that do not).

"free" requests send the prompts without a schema and ignore_eos (so they run the same
--max-tokens as a schema that is not finished by then); "schema" requests send response_format
json_schema (a 5-field object) and end at the schema's end or --max-tokens. Greedy by default;
--top-p < 1 samples (temperature 0.8), which makes warden apply the full vocabulary mask at every
step instead of checking the drawn token.

Usage: bench/structured_outputs.py --warden build/warden --model models/X.gguf --threads 2 \\
           [--llama-server /path/llama-server] [--concurrency 1,32] [--rounds 4] \\
           [--per-stream 1] [--max-tokens 64] [--top-p 1.0] [--budget-s 900]
Prints a Markdown table.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

import httpx

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 32},
        "age": {"type": "integer"},
        "email": {"type": "string", "maxLength": 40},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4},
        "employed": {"type": "boolean"},
    },
    "required": ["name", "age", "email", "skills", "employed"],
    "additionalProperties": False,
}
PROMPTS = [
    "Describe a fictional software engineer as JSON.",
    "Give the profile of a chef in JSON format.",
    "Invent a teacher and describe them in JSON.",
    "Return a JSON record for a made-up pilot.",
]


def start(cmd, ready_re, timeout=180):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    box = []
    ev = threading.Event()

    def reader():
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            m = re.search(ready_re, line)
            if m and not box:
                box.append(m)
                ev.set()
        ev.set()

    threading.Thread(target=reader, daemon=True).start()
    if not ev.wait(timeout) or not box:
        proc.kill()
        sys.exit(f"server did not start: {' '.join(cmd)}")
    return proc, box[0]


def decode_speed(name, body):
    """Decode tokens/s of one response as the server timed it, or None."""
    if name == "warden":
        tpot = (body.get("warden_timing") or {}).get("tpot_ms") or 0
        return 1000.0 / tpot if tpot > 0 else None
    t = body.get("timings") or {}
    return t.get("predicted_per_second") or None


def run_batch(server, conc, per_stream, mode, args, rnd):
    """C concurrent streams, per_stream requests each: (per-request decode tok/s, tokens, wall,
    errors, invalid JSON count)."""
    name, base, model = server
    speeds, tokens, errors, invalid = [], [], [], [0]
    lock = threading.Lock()

    def worker(i):
        with httpx.Client(timeout=600) as c:
            for k in range(per_stream):
                body = {"model": model, "max_tokens": args.max_tokens,
                        "messages": [{"role": "user", "content": PROMPTS[(i + k + rnd) % len(PROMPTS)]}]}
                if args.top_p < 1:
                    body.update(temperature=0.8, top_p=args.top_p, seed=rnd * 1000 + i * 10 + k)
                else:
                    body.update(temperature=0)
                if mode == "schema" and name == "warden":
                    body["response_format"] = {"type": "json_schema",
                                               "json_schema": {"name": "p", "schema": SCHEMA, "strict": True}}
                elif mode == "schema":  # the form this llama-server build reads (see above)
                    body["response_format"] = {"type": "json_object", "schema": SCHEMA}
                else:
                    body["ignore_eos"] = True
                try:
                    r = c.post(base + "/v1/chat/completions", json=body)
                    r.raise_for_status()
                    out = r.json()
                    with lock:
                        tokens.append(out["usage"]["completion_tokens"])
                        s = decode_speed(name, out)
                        if s:
                            speeds.append(s)
                        if mode == "schema" and out["choices"][0]["finish_reason"] == "stop":
                            try:
                                json.loads(out["choices"][0]["message"]["content"])
                            except ValueError:
                                invalid[0] += 1
                except Exception as e:  # noqa: BLE001
                    with lock:
                        errors.append(repr(e)[:200])

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(conc)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return speeds, tokens, time.perf_counter() - t0, errors, invalid[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warden", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-server")
    ap.add_argument("--concurrency", default="1,32")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--per-stream", type=int, default=1, help="requests per stream per batch")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--budget-s", type=float, default=900, help="stop starting rounds after this")
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    model_id = os.path.basename(args.model)
    specs = [("warden", [args.warden, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", "0",
                         "--threads", str(args.threads), "--max-seqs", str(max(levels)),
                         "--kv-cache-bytes", "512M"],
              r"http://127\.0\.0\.1:(\d+)")]
    if args.llama_server:
        specs.append(("llama.cpp", [args.llama_server, "-m", args.model, "--host", "127.0.0.1",
                                    "--port", "18431", "-t", str(args.threads), "-np", str(max(levels)),
                                    "-c", str(max(levels) * 512)],
                      r"listening on http://127\.0\.0\.1:(\d+)|server is listening"))
    procs, servers = [], []
    t_start = time.perf_counter()
    try:
        for name, cmd, ready in specs:
            proc, m = start(cmd, ready)
            procs.append(proc)
            port = m.group(1) if m.lastindex and m.group(1) else "18431"
            base = f"http://127.0.0.1:{port}"
            for _ in range(600):  # until the model is loaded
                try:
                    if httpx.get(base + "/health", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            servers.append((name, base, model_id))
        pairs = [(s, mode) for s in servers for mode in ("free", "schema")]
        for p in pairs:  # warm-up: one request each (grammar compiled, caches touched)
            run_batch(p[0], 1, 1, p[1], args, 0)
        rows = []
        for conc in levels:
            speeds = {(s[0], m): [] for s, m in pairs}
            round_med = {(s[0], m): [] for s, m in pairs}
            thr = {(s[0], m): [] for s, m in pairs}
            invalid = {s[0]: 0 for s in servers}
            n_rounds = 0
            for rnd in range(args.rounds):
                if time.perf_counter() - t_start > args.budget_s:
                    print(f"budget reached: c={conc} after {rnd} rounds", file=sys.stderr)
                    break
                k = rnd % len(pairs)
                order = pairs[k:] + pairs[:k]
                if rnd % 2:
                    order = order[::-1]
                for s, mode in order:
                    sp, toks, wall, errs, bad = run_batch(s, conc, args.per_stream, mode, args, rnd)
                    if errs:
                        print(f"{s[0]} c={conc} {mode}: errors {errs[:3]}", file=sys.stderr)
                    key = (s[0], mode)
                    speeds[key] += sp
                    if sp:
                        round_med[key].append(statistics.median(sp))
                    thr[key].append(sum(toks) / wall)
                    invalid[s[0]] += bad
                n_rounds += 1
                print(f"c={conc} round {rnd}: " + ", ".join(
                    f"{a}/{b} {round_med[(a, b)][-1]:.1f}" for a, b in round_med if round_med[(a, b)]),
                    file=sys.stderr, flush=True)
            for s in servers:
                f, sc = (s[0], "free"), (s[0], "schema")
                if not speeds[f] or not speeds[sc]:
                    continue
                ratios = [b / a for a, b in zip(round_med[f], round_med[sc])]
                thr_ratios = [b / a for a, b in zip(thr[f], thr[sc])]
                rows.append((s[0], conc, n_rounds, len(speeds[f]), statistics.median(speeds[f]),
                             statistics.median(speeds[sc]), 100 * (statistics.median(ratios) - 1),
                             min(ratios), max(ratios), 100 * (statistics.median(thr_ratios) - 1),
                             invalid[s[0]]))
                print("row:", rows[-1], file=sys.stderr, flush=True)
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    print("| server | concurrency | rounds | requests per mode | free decode tok/s (median) "
          "| schema decode tok/s (median) | change, median of paired rounds (min, max) "
          "| change in batch tok/s | invalid JSON |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, conc, n, nreq, f, s, d, lo, hi, dthr, bad in rows:
        print(f"| {name} | {conc} | {n} | {nreq} | {f:.1f} | {s:.1f} | {d:+.1f}% "
              f"({100 * (lo - 1):+.0f}%, {100 * (hi - 1):+.0f}%) | {dthr:+.1f}% | {bad} |")


if __name__ == "__main__":
    main()
