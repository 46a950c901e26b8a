#!/usr/bin/env python3
"""KV page transfer throughput of a prefill/decode pair against `ucx_perftest` (ucx-utils) on
the same UCX transport, on loopback.

For each transport (UCX_TLS as given, e.g. "all" for UCX's own choice, which is shared memory
on one host, and "tcp"):
- ucx_perftest: a server and a client process, `-t ucp_get` of one KV page's size (the decode
  server's page bytes), --window gets outstanding, --iters iterations: its bandwidth in MB/s.
  Its one page-sized buffer stays in the CPU's cache, so on shared memory this is a cache-to-
  cache copy rate. A second run gets, per operation, as many bytes as warden moved in all
  (every prompt's KV, more than a server CPU's last-level cache), --bulk-iters iterations:
  like warden's page reads, that streams through memory;
- warden: a prefill server and a decode server (1 thread each) under that UCX_TLS; --prompts
  long prompts (distinct, so no prefix-cache hit), each one request; the decode server's
  counters give the bytes fetched and the time its page reads took (first get issued -> last
  get completed, warden_kv_page_fetch_seconds_total): bytes/s of KV moved while the pages
  were read, and per request (which includes the prefill server's compute).
Bounded: every process has a timeout; servers bind 127.0.0.1 and are stopped on exit.

Usage: disagg_transfer.py --warden build/warden --model models/M.gguf [--tls all,tcp]
           [--kv-dtype bf16] [--prompts 6 --words 1500] [--out FILE.json]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from disagg_mixed import WORDS, Proc, metric  # noqa: E402

PERFTEST_PORT = 13371


def perftest(tls, size, iters, window):
    env = dict(os.environ, UCX_TLS=tls)
    warmup = max(1, min(50, iters // 10))
    srv = subprocess.Popen(["ucx_perftest", "-p", str(PERFTEST_PORT)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        out = subprocess.run(["ucx_perftest", "127.0.0.1", "-p", str(PERFTEST_PORT), "-t",
                              "ucp_get", "-s", str(size), "-n", str(iters), "-w", str(warmup), "-O",
                              str(window), "-f"], env=env, capture_output=True, text=True,
                             timeout=300)
    finally:
        srv.kill()
        srv.wait()
    # Final line: iterations, latency (typical, avg, overall), bandwidth MB/s (avg, overall),
    # message rate (avg, overall).
    rows = [ln.split() for ln in out.stdout.splitlines()
            if ln.strip() and ln.split()[0].isdigit()]
    if not rows:
        sys.exit(f"ucx_perftest ({tls}) gave no result:\n{out.stdout}\n{out.stderr}")
    r = rows[-1]
    return {"mb_s_overall": float(r[5]), "latency_us_avg": float(r[2]), "raw": " ".join(r)}


def warden_pair(a, tls):
    env = dict(os.environ, UCX_TLS=tls)
    common = ["serve", "-m", a.model, "--host", "127.0.0.1", "--port", "0", "--threads", "1",
              "--kv-cache-bytes", "512M", "--kv-dtype", a.kv_dtype]
    pre = Proc([a.warden, *common, "--role", "prefill", "--kv-listen", "127.0.0.1:0"],
               r"kv transfers on [\d.]+:(\d+)", env=env)
    try:
        dec = Proc([a.warden, *common, "--role", "decode", "--prefill-kv",
                    f"127.0.0.1:{pre.match.group(1)}"], r"http://127\.0\.0\.1:(\d+)", env=env)
        try:
            base = f"http://127.0.0.1:{dec.match.group(1)}"
            model = a.model.rsplit("/", 1)[-1]
            per_req = []
            for i in range(a.prompts):
                prompt = f"Report {i} {time.time()}: " + " ".join(
                    WORDS[(i * 11 + j * 3) % len(WORDS)] for j in range(a.words))
                r = httpx.post(base + "/v1/completions", timeout=300,
                               json={"model": model, "prompt": prompt, "max_tokens": 1})
                r.raise_for_status()
                t = r.json()["warden_timing"]
                per_req.append({"bytes": t["kv_transfer_bytes"], "ms": t["kv_transfer_ms"],
                                "prompt_tokens": r.json()["usage"]["prompt_tokens"]})
            moved = metric(base, "warden_kv_transfer_bytes_total")
            fetch_s = metric(base, "warden_kv_page_fetch_seconds_total")
            return {"bytes": moved, "page_fetch_s": fetch_s,
                    "page_fetch_mb_s": moved / fetch_s / 1e6 if fetch_s else 0,
                    "per_request_mb_s_incl_prefill":
                        sum(x["bytes"] for x in per_req) / sum(x["ms"] for x in per_req) / 1e3,
                    "requests": per_req}
        finally:
            dec.stop()
    finally:
        pre.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warden", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tls", default="all,tcp")
    ap.add_argument("--kv-dtype", default="bf16")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--words", type=int, default=1500)
    ap.add_argument("--page-bytes", type=int, default=0,
                    help="ucx_perftest message size (default: taken from warden's transfers)")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--bulk-iters", type=int, default=10)
    ap.add_argument("--out")
    a = ap.parse_args()
    report = {"config": vars(a), "transports": {}}
    for tls in a.tls.split(","):
        w = warden_pair(a, tls)
        req = w["requests"][0]
        pages = -(-req["prompt_tokens"] // 16)
        size = a.page_bytes or int(req["bytes"] // pages)
        p = perftest(tls, size, a.iters, a.window)
        bulk_bytes = int(w["bytes"])
        pp = perftest(tls, bulk_bytes, a.bulk_iters, 1)
        # ucx_perftest's MB is 2^20 bytes; warden's figures are 10^6: compare in bytes.
        report["transports"][tls] = {
            "page_bytes": size, "ucx_perftest": p, "bulk_bytes": bulk_bytes,
            "ucx_perftest_bulk": pp, "warden": w,
            "warden_page_fetch_over_perftest":
                w["page_fetch_mb_s"] * 1e6 / (p["mb_s_overall"] * 2**20),
            "warden_page_fetch_over_perftest_bulk":
                w["page_fetch_mb_s"] * 1e6 / (pp["mb_s_overall"] * 2**20)}
        print(f"{tls}: perftest {p['mb_s_overall']:.0f} MiB/s (page), "
              f"{pp['mb_s_overall']:.0f} MiB/s (bulk), warden page reads "
              f"{w['page_fetch_mb_s'] * 1e6 / 2**20:.0f} MiB/s", file=sys.stderr, flush=True)
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
