#!/usr/bin/env python3
"""Structured-output cost: generated tokens/s with and without a JSON schema, at concurrency 1
and 32, for warden and for llama.cpp's llama-server (its json_schema -> GBNF path) on the same
GGUF, prompts and thread count. Each server is started here on 127.0.0.1 and stopped after.

Per (server, concurrency, mode): C threads each send ROUNDS chat requests (greedy, or sampled
with --top-p < 1, which makes warden mask every step instead of checking the drawn token);
throughput = completion tokens / wall time of the whole level. "schema" requests send
response_format json_schema; "free" requests send the same prompts without it. Both stop
naturally (EOS, the schema's end, or --max-tokens).

Usage: bench/structured_outputs.py --warden build/warden --model models/X.gguf --threads 2 \
           [--llama-server /path/llama-server] [--concurrency 1,32] [--rounds 2] [--max-tokens 128]
Prints a Markdown table.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

import httpx
import openai

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


def run_level(base, model, conc, rounds, mode, args):
    tokens = []
    lock = threading.Lock()
    errors = []

    def worker(i):
        c = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)
        for r in range(rounds):
            kw = dict(model=model, max_tokens=args.max_tokens,
                      messages=[{"role": "user", "content": PROMPTS[(i + r) % len(PROMPTS)]}])
            if args.top_p < 1:
                kw.update(temperature=0.8, top_p=args.top_p, seed=i * 100 + r)
            else:
                kw.update(temperature=0)
            if mode == "schema":
                kw["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "p", "schema": SCHEMA, "strict": True}}
            try:
                out = c.chat.completions.create(**kw)
                with lock:
                    tokens.append(out.usage.completion_tokens)
                    if mode == "schema" and out.choices[0].finish_reason == "stop":
                        json.loads(out.choices[0].message.content)  # must parse
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e)[:200])

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(conc)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    return sum(tokens) / wall, sum(tokens) / max(len(tokens), 1), errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warden", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-server")
    ap.add_argument("--concurrency", default="1,32")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--top-p", type=float, default=1.0)
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    model_id = os.path.basename(args.model)
    servers = [("warden", [args.warden, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", "0",
                           "--threads", str(args.threads), "--max-seqs", str(max(levels)),
                           "--kv-cache-bytes", "512M"],
                r"http://127\.0\.0\.1:(\d+)")]
    if args.llama_server:
        servers.append(("llama.cpp", [args.llama_server, "-m", args.model, "--host", "127.0.0.1",
                                      "--port", "18431", "-t", str(args.threads), "-np", str(max(levels)),
                                      "-c", str(max(levels) * 512)],
                        r"listening on http://127\.0\.0\.1:(\d+)|server is listening"))
    rows = []
    for name, cmd, ready in servers:
        proc, m = start(cmd, ready)
        port = m.group(1) if m.lastindex and m.group(1) else "18431"
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):  # until the model is loaded
            try:
                if httpx.get(base + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        try:
            run_level(base, model_id, 1, 1, "free", args)  # warm-up
            for conc in levels:
                res = {}
                for mode in ("free", "schema"):
                    res[mode] = run_level(base, model_id, conc, args.rounds, mode, args)
                    if res[mode][2]:
                        print(f"{name} c={conc} {mode}: errors {res[mode][2][:3]}", file=sys.stderr)
                free, schema = res["free"][0], res["schema"][0]
                if not free:
                    continue
                rows.append((name, conc, free, res["free"][1], schema, res["schema"][1],
                             100.0 * (schema / free - 1.0)))
                print("row:", rows[-1], file=sys.stderr, flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    print("| server | concurrency | free tok/s | free tok/req | schema tok/s | schema tok/req | change |")
    print("|---|---|---|---|---|---|---|")
    for name, conc, f, fl, s, sl, d in rows:
        print(f"| {name} | {conc} | {f:.1f} | {fl:.0f} | {s:.1f} | {sl:.0f} | {d:+.1f}% |")


if __name__ == "__main__":
    main()
