#!/usr/bin/env python3
"""Mixed workload against a colocated server and a disaggregated deployment, interleaved.

Steady short streams decode while long prompts arrive now and then; what matters is how much
each long prompt stalls the streams that are decoding. Two setups run side by side for the
whole benchmark (only one is loaded at a time):
  colocated: `warden serve --role both --threads T` (T = --threads, default 2)
  split:     `warden serve --role prefill --threads T/2` + `--role decode --threads T/2` +
             `warden router` in front
Rounds alternate colocated, split, colocated, split, ... (--rounds pairs of --seconds each), so
a machine shared with other work loads both setups alike; report ratios from one run.

Per setup: inter-token latency (gaps between a stream's SSE chunks) p50/p99 of the short
streams, TTFT p50/p99 of short and of long requests, output tokens/s of the short streams, and
(split) the KV bytes moved with the page-read time from the decode server's counters
(warden_kv_transfer_bytes_total / warden_kv_page_fetch_seconds_total). itl_ms_p99_outside_long:
the p99 of the gaps outside every long request's decode window. With --decode-log the decode
server logs each step (wall and thread CPU time) and the split's slowest 1% of gaps are sorted by
cause (tail_causes).

Bounded: every request has a timeout, each round stops sending at --seconds and waits for its
requests at most 120 s. Servers bind 127.0.0.1 and are stopped on exit.

Usage: disagg_mixed.py --warden build/warden --model models/M.gguf [--seconds 30 --rounds 2]
           [--streams 3 --long-every 5 --long-words 1500 --kv-dtype bf16] [--pin 0,1]
           [--prefill-nice 10]
           [--out FILE.json] [--trace FILE.json] [--decode-log FILE]
"""
import argparse
import bisect
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx

WORDS = ("alpha beta gamma delta river stone light house world music water city paper green "
         "black white north south table chair window garden market letter").split()


def pct(v, q):
    if not v:
        return float("nan")
    v = sorted(v)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


class Proc:
    def __init__(self, args, pattern, env=None, log=None):
        """log: a file for the process's stderr (read back for `pattern`), else a pipe."""
        err = open(log, "w") if log else subprocess.PIPE
        self.p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, text=True, env=env)
        stream = open(log) if log else self.p.stderr
        self.lines = []
        deadline = time.time() + 180
        self.match = None
        while time.time() < deadline:
            line = stream.readline()
            if log and not line and self.p.poll() is None:
                time.sleep(0.05)
                continue
            if not line:
                break
            self.lines.append(line)
            m = re.search(pattern, line)
            if m:
                self.match = m
                break
        if not self.match:
            self.stop()
            sys.exit("did not start: " + " ".join(args) + "\n" + "".join(self.lines)[-2000:])
        if not log:
            threading.Thread(target=lambda: [None for _ in self.p.stderr], daemon=True).start()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def pinned(a, role):
    """`taskset -c CPU` for the split roles with --pin (prefill on the first CPU, decode on the
    second: each role a machine of its own, as deployed), else nothing."""
    if not a.pin:
        return []
    return ["taskset", "-c", a.pin.split(",")[0 if role == "prefill" else 1]]


def serve(a, *extra, pin=(), log=None):
    level = ["--log-level", "trace"] if log else []
    return Proc([*pin, a.warden, *level, "serve", "-m", a.model, "--host", "127.0.0.1",
                 "--port", "0", "--kv-cache-bytes", "256M", "--kv-dtype", a.kv_dtype, *extra],
                r"http://127\.0\.0\.1:(\d+)", log=log)


def stream_one(base, model, prompt, max_tokens, timeout=120):
    """(ttft_s, [chunk gaps s], tokens, t_sent, [chunk times]) of one streaming completion
    (times: time.perf_counter, CLOCK_MONOTONIC on Linux), or None on failure."""
    t0 = time.perf_counter()
    times = []
    try:
        with httpx.stream("POST", base + "/v1/completions", timeout=timeout,
                          json={"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                "temperature": 0, "stream": True, "ignore_eos": True}) as r:
            if r.status_code != 200:
                return None
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    d = json.loads(line[6:])
                    if d.get("choices") and d["choices"][0].get("text"):
                        times.append(time.perf_counter())
    except httpx.HTTPError:
        return None
    if not times:
        return None
    gaps = [b - a for a, b in zip(times, times[1:])]
    return times[0] - t0, gaps, len(times), t0, times


def run_round(a, base, model, seconds, out):
    stop_at = time.time() + seconds
    lock = threading.Lock()

    def short_worker(k):
        i = 0
        while time.time() < stop_at:
            prompt = " ".join(WORDS[(k * 7 + i + j) % len(WORDS)] for j in range(24))
            r = stream_one(base, model, prompt, a.short_tokens)
            i += 1
            with lock:
                if r is None:
                    out["errors"] += 1
                    continue
                out["short_ttft"].append(r[0])
                out["itl"].extend(r[1])
                out["short_tokens"] += r[2]
                out["trace_short"].append(r[4])

    def long_worker():
        if a.long_every <= 0:  # steady streams alone: the inter-token floor of each setup
            return
        i = 0
        time.sleep(min(2.0, seconds / 4))  # the streams are decoding when the first arrives
        while time.time() < stop_at:
            t_next = time.time() + a.long_every
            # A distinct long prompt each time (no prefix-cache hits between them).
            prompt = f"Document {i} {time.time()}: " + " ".join(
                WORDS[(i * 13 + j * 5) % len(WORDS)] for j in range(a.long_words))
            r = stream_one(base, model, prompt, 4)
            i += 1
            with lock:
                if r is None:
                    out["errors"] += 1
                else:
                    out["long_ttft"].append(r[0])
                    out["trace_long"].append([r[3], r[4][0], r[4][-1]])
            time.sleep(max(0.0, min(t_next, stop_at) - time.time()))  # never past the round

    t0 = time.perf_counter()
    ts = [threading.Thread(target=short_worker, args=(k,), daemon=True) for k in range(a.streams)]
    ts.append(threading.Thread(target=long_worker, daemon=True))
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=seconds + 120)
    out["seconds"] += time.perf_counter() - t0


def tail_causes(r, log):
    """Sorts the split's slowest 1% of chunk gaps by what the decode server's step log (the
    --decode-log file) shows during each gap: a step whose thread CPU time is over 1.5x the
    median (more work: a long sequence in the batch, an admission); the decode thread off the
    CPU for over 40% of the gap (another thread or process had the core); three or more
    ordinary steps in one gap (the token came late after the engine: HTTP, router, client);
    else other. Returns {cause: gaps}, plus the step wall and thread-CPU percentiles."""
    steps = []
    with open(log) as f:
        for line in f:
            m = re.search(r"step at ([\d.]+) s: \d+ sequences, ([\d.]+) ms wall, ([\d.]+) ms "
                          r"thread CPU", line)
            if m:
                t, w = float(m[1]), float(m[2])
                steps.append((t, t + w / 1e3, w, float(m[3])))
    gaps = [(b - a, a, b) for times in r["trace_short"] for a, b in zip(times, times[1:])]
    if not steps or not gaps:
        return {}
    cpu_p50 = pct([s[3] for s in steps], 0.5)
    threshold = pct([g[0] for g in gaps], 0.99)
    starts = [s[0] for s in steps]
    causes = {"more work in a step": 0, "decode thread off the CPU": 0,
              "late after the engine": 0, "other": 0}
    for g, a, b in gaps:
        if g < threshold:
            continue
        i = max(0, bisect.bisect_left(starts, a - 0.2) - 1)
        during = [s for s in steps[i:i + 200] if s[0] < b and s[1] > a]
        if during and max(s[3] for s in during) > 1.5 * cpu_p50:
            causes["more work in a step"] += 1
        elif during and sum(s[2] - s[3] for s in during) > 0.4 * g * 1e3:
            causes["decode thread off the CPU"] += 1
        elif len(during) >= 3:
            causes["late after the engine"] += 1
        else:
            causes["other"] += 1
    causes["step_wall_ms_p50"] = pct([s[2] for s in steps], 0.5)
    causes["step_wall_ms_p99"] = pct([s[2] for s in steps], 0.99)
    causes["step_cpu_ms_p50"] = cpu_p50
    causes["step_cpu_ms_p99"] = pct([s[3] for s in steps], 0.99)
    return causes


def metric(base, name):
    for line in httpx.get(base + "/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def summarize(r):
    ms = lambda v: [x * 1000 for x in v]  # noqa: E731
    return {
        "itl_ms_p50": pct(ms(r["itl"]), 0.5), "itl_ms_p99": pct(ms(r["itl"]), 0.99),
        "short_ttft_ms_p50": pct(ms(r["short_ttft"]), 0.5),
        "short_ttft_ms_p99": pct(ms(r["short_ttft"]), 0.99),
        "long_ttft_ms_p50": pct(ms(r["long_ttft"]), 0.5),
        "long_ttft_ms_p99": pct(ms(r["long_ttft"]), 0.99),
        "short_output_tok_s": r["short_tokens"] / r["seconds"] if r["seconds"] else 0,
        "itl_samples": len(r["itl"]), "long_requests": len(r["long_ttft"]),
        "errors": r["errors"],
        "itl_ms_p99_outside_long": pct(ms(outside_long(r)), 0.99),
    }


def outside_long(r, margin=0.05):
    """The chunk gaps that do not overlap any long request's first-to-last token window
    (widened by `margin` s): what the steady streams see when no long prompt is being
    admitted or decoded. Its p99 beside the overall p99 says how much of the tail comes from
    the long requests' own decode steps (attention over their whole prompt) and admission."""
    wins = sorted((a - margin, b + margin) for _, a, b in r["trace_long"])
    gaps = []
    for times in r["trace_short"]:
        for a, b in zip(times, times[1:]):
            if not any(lo < b and a < hi for lo, hi in wins):
                gaps.append(b - a)
    return gaps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warden", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--streams", type=int, default=3)
    ap.add_argument("--short-tokens", type=int, default=48)
    ap.add_argument("--long-every", type=float, default=5.0,
                    help="seconds between long prompts; 0: none (the steady streams alone)")
    ap.add_argument("--long-words", type=int, default=1500)
    ap.add_argument("--kv-dtype", default="bf16")
    ap.add_argument("--prefill-kv-dtype", help="the prefill server's own KV format (default: "
                    "--kv-dtype); pages travel in --kv-dtype")
    ap.add_argument("--pin", metavar="CPU,CPU",
                    help="split: pin the prefill server, the router and (in split rounds) the load "
                         "generator to the first CPU and the decode server to the second: in a "
                         "fleet the router and clients run on other hosts, the decode server's "
                         "CPU is its own. Colocated: the server and its load generator stay on "
                         "all CPUs")
    ap.add_argument("--prefill-nice", type=int, default=0, metavar="N",
                    help="run the prefill server N nice steps down, so that with --pin the router "
                         "and load generator sharing its CPU (in a fleet: other hosts) relay each "
                         "token as it comes instead of waiting for a prefill time slice")
    ap.add_argument("--out")
    ap.add_argument("--decode-log", help="run the decode server at --log-level trace (a line "
                    "per step: wall and thread CPU time) with its stderr in this file")
    ap.add_argument("--trace", help="write every short stream's chunk times and every long "
                    "request's (sent, first token, last token) times (CLOCK_MONOTONIC s) here")
    a = ap.parse_args()
    half = str(max(1, a.threads // 2))
    procs = []
    try:
        colo = serve(a, "--threads", str(a.threads))
        procs.append(colo)
        niced = ["nice", "-n", str(a.prefill_nice)] if a.prefill_nice else []
        pre = Proc([*pinned(a, "prefill"), *niced, a.warden, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", "0",
                    "--kv-cache-bytes", "256M", "--kv-dtype", a.prefill_kv_dtype or a.kv_dtype,
                    "--threads", half, "--role", "prefill", "--kv-listen", "127.0.0.1:0"],
                   r"kv transfers on [\d.]+:(\d+)")
        procs.append(pre)
        kv = pre.match.group(1)
        pre_port = re.search(r"http://127\.0\.0\.1:(\d+)", "".join(pre.lines)).group(1)
        dec = serve(a, "--threads", half, "--role", "decode", "--prefill-kv", f"127.0.0.1:{kv}",
                    pin=pinned(a, "decode"), log=a.decode_log)
        procs.append(dec)
        pre_base = f"http://127.0.0.1:{pre_port}"
        dec_base = f"http://127.0.0.1:{dec.match.group(1)}"
        # With --pin the router and this load generator share the prefill server's CPU: in a
        # fleet they run on other hosts, and the decode server's CPU is its own.
        router = Proc([*pinned(a, "prefill"), a.warden, "router", "--port", "0", "--decode",
                       dec_base, "--prefill", pre_base], r"http://127\.0\.0\.1:(\d+)")
        procs.append(router)
        setups = {"colocated": f"http://127.0.0.1:{colo.match.group(1)}",
                  "split": f"http://127.0.0.1:{router.match.group(1)}"}
        model = a.model.rsplit("/", 1)[-1]
        for base in setups.values():  # warm up both (first-request costs)
            stream_one(base, model, "warm up", 4)
        res = {k: {"itl": [], "short_ttft": [], "long_ttft": [], "short_tokens": 0,
                   "seconds": 0.0, "errors": 0, "trace_short": [], "trace_long": []}
               for k in setups}
        b0 = metric(dec_base, "warden_kv_transfer_bytes_total")
        f0 = metric(dec_base, "warden_kv_page_fetch_seconds_total")
        all_cpus = os.sched_getaffinity(0)
        for rnd in range(a.rounds):
            for name, base in setups.items():
                print(f"round {rnd + 1}/{a.rounds}: {name}", file=sys.stderr, flush=True)
                if a.pin:  # the round's client threads inherit this thread's CPUs
                    os.sched_setaffinity(0, {int(a.pin.split(",")[0])} if name == "split"
                                         else all_cpus)
                run_round(a, base, model, a.seconds, res[name])
        moved = metric(dec_base, "warden_kv_transfer_bytes_total") - b0
        fetch_s = metric(dec_base, "warden_kv_page_fetch_seconds_total") - f0
        report = {k: summarize(v) for k, v in res.items()}
        report["split"]["kv_bytes_moved"] = moved
        report["split"]["kv_page_fetch_s"] = fetch_s
        report["split"]["kv_fetch_bytes_per_s"] = moved / fetch_s if fetch_s else 0
        if a.decode_log:
            report["split"]["itl_tail_causes"] = tail_causes(res["split"], a.decode_log)
        c, s = report["colocated"], report["split"]
        report["ratios_split_over_colocated"] = {
            k: (s[k] / c[k] if c[k] else float("nan"))
            for k in ("itl_ms_p50", "itl_ms_p99", "short_ttft_ms_p50", "short_ttft_ms_p99",
                      "long_ttft_ms_p50", "long_ttft_ms_p99", "short_output_tok_s")}
        report["config"] = vars(a)
        text = json.dumps(report, indent=2)
        print(text)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text + "\n")
        if a.trace:
            with open(a.trace, "w") as f:
                json.dump({k: {"short": v["trace_short"], "long": v["trace_long"]}
                           for k, v in res.items()}, f)
    finally:
        for p in reversed(procs):
            p.stop()


if __name__ == "__main__":
    main()
