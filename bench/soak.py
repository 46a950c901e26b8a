#!/usr/bin/env python3
"""Bounded soak of `warden serve`: calibrate the sustainable request rate with a closed loop,
then send open-loop Poisson traffic at a multiple of it (default 2x) for DURATION seconds, with
a mix of streaming and non-streaming chat and completion requests and some clients that drop
the connection mid-stream. Every SAMPLE seconds it records the server's RSS (/proc) and its
/metrics gauges. At the end it waits for the server to go idle and checks: the process is alive,
KV pages used returned to 0, RSS flat (last-minute median within TOLERANCE of the median of
the first minute after warm-up), and no errors other than the intended rejections (429 when
the queue is full, 503 while the server drains, and the client-side disconnects it chose to
make). The report has RSS and KV pages per minute; 30 minutes at twice the sustainable rate:

  .venv/bin/python bench/soak.py --duration 1800 --factor 2

  .venv/bin/python bench/soak.py [--duration 600] [--factor 2] [--out bench/out/soak]

The server binds 127.0.0.1 only; every loop is bounded by the deadline and by --max-in-flight.
Exit status 0 when every check passes, 1 otherwise. Writes soak.json, soak.md and soak.png.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))
from warden_serve import ServeProcess, parse_metrics  # noqa: E402


def default_model() -> str:
    models = sorted((ROOT / "models").glob("*.gguf"))
    return str(models[0]) if models else ""


def start_server(args) -> tuple[subprocess.Popen, str, list[str]]:
    cmd = [args.warden, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", "0", "--threads",
           str(args.threads), "--kv-cache-bytes", args.kv_bytes, "--max-queue", str(args.max_queue),
           "--request-timeout", "120", "--weights", args.weights]
    started = ServeProcess(cmd, 300, max_lines=10000)
    if started.port is None:
        started.proc.kill()
        sys.exit(f"soak: server did not start: {started.log_tail()}")
    return started.proc, f"http://127.0.0.1:{started.port}", started.lines


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def metrics(client: httpx.AsyncClient, base: str) -> dict[str, float]:
    return parse_metrics((await client.get(base + "/metrics", timeout=30)).text)


WORDS = ("river stone lamp harbor signal winter copper garden ledger orbit canyon meadow "
         "lantern quartz beacon summit thicket valley anchor").split()


def make_request(rng: random.Random, model: str) -> tuple[str, dict, bool, bool]:
    """(path, body, stream, disconnect early)."""
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 120)))
    stream = rng.random() < 0.5
    disconnect = stream and rng.random() < 0.1
    body = {"model": model, "max_tokens": rng.randint(4, 48), "temperature": rng.choice([0, 0.8]),
            "stream": stream, "seed": rng.randint(0, 10**6)}
    if rng.random() < 0.5:
        body["messages"] = [{"role": "user", "content": text}]
        return "/v1/chat/completions", body, stream, disconnect
    body["prompt"] = text
    return "/v1/completions", body, stream, disconnect


async def one(client, base, path, body, stream, disconnect, tally):
    try:
        if not stream:
            r = await client.post(base + path, json=body, timeout=180)
            tally[str(r.status_code)] = tally.get(str(r.status_code), 0) + 1
            return r.status_code
        async with client.stream("POST", base + path, json=body, timeout=180) as r:
            if r.status_code != 200:
                await r.aread()
                tally[str(r.status_code)] = tally.get(str(r.status_code), 0) + 1
                return r.status_code
            n = 0
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    n += 1
                    if disconnect and n >= 2:
                        tally["disconnect"] = tally.get("disconnect", 0) + 1
                        return 0  # leaving the context manager closes the connection
                    if line == "data: [DONE]":
                        break
            tally["200"] = tally.get("200", 0) + 1
            return 200
    except Exception as e:  # noqa: BLE001 - every failure is counted and reported
        key = "exception:" + type(e).__name__
        tally[key] = tally.get(key, 0) + 1
        return -1


async def calibrate(client, base, model, seconds, concurrency, rng) -> float:
    done = 0
    deadline = time.monotonic() + seconds
    tally: dict[str, int] = {}

    async def worker():
        nonlocal done
        while time.monotonic() < deadline:
            path, body, stream, _ = make_request(rng, model)
            if await one(client, base, path, body, stream, False, tally) == 200:
                done += 1

    t0 = time.monotonic()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    return done / (time.monotonic() - t0)


async def soak(args) -> int:
    proc, base, server_log = start_server(args)
    rng = random.Random(args.seed)
    # Pooled connections expire before the server's keep-alive idle timeout (5 s by default), so
    # the client never reuses a connection the server is closing at that moment.
    limits = httpx.Limits(max_connections=args.max_in_flight + 8, max_keepalive_connections=32,
                          keepalive_expiry=2.0)
    samples, tally = [], {}
    ok = True
    async with httpx.AsyncClient(limits=limits) as client:
        model = (await client.get(base + "/v1/models", timeout=30)).json()["data"][0]["id"]
        rate = await calibrate(client, base, model, args.calibrate, args.calibrate_concurrency, rng)
        target = rate * args.factor
        print(f"soak: sustainable ~{rate:.2f} req/s; soaking at {target:.2f} req/s for {args.duration:.0f} s",
              file=sys.stderr)
        t0 = time.monotonic()
        deadline = t0 + args.duration
        in_flight: set[asyncio.Task] = set()
        skipped = 0
        next_sample = t0

        async def sample():
            m = await metrics(client, base)
            samples.append({"t": time.monotonic() - t0, "rss_mib": rss_mib(proc.pid),
                            "kv_pages_used": m.get("warden_kv_pages_used", -1),
                            "running": m.get("warden_requests_running", -1),
                            "waiting": m.get("warden_requests_waiting", -1)})

        while time.monotonic() < deadline:
            if proc.poll() is not None:
                print("soak: the server died", file=sys.stderr)
                ok = False
                break
            if time.monotonic() >= next_sample:
                await sample()
                next_sample += args.sample
            await asyncio.sleep(rng.expovariate(target))
            if len(in_flight) >= args.max_in_flight:
                skipped += 1  # the client's own bound: counted, never queued without limit
                continue
            task = asyncio.create_task(one(client, base, *make_request(rng, model), tally))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.wait(in_flight, timeout=240)
        # Idle: pages must be back to zero.
        for _ in range(60):
            await sample()
            if samples[-1]["kv_pages_used"] == 0 and samples[-1]["running"] == 0:
                break
            await asyncio.sleep(1)
        final = await metrics(client, base)
    proc.terminate()
    try:
        rc = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = -9

    warm = [s["rss_mib"] for s in samples if 60 <= s["t"] < 120] or [samples[0]["rss_mib"]]
    last = [s["rss_mib"] for s in samples if s["t"] >= samples[-1]["t"] - 60]
    rss_growth = statistics.median(last) / statistics.median(warm) - 1
    intended = {"200", "429", "503", "disconnect"}
    errors = {k: v for k, v in tally.items() if k not in intended}
    checks = {
        "server alive until SIGTERM": ok,
        "clean exit on SIGTERM (rc 0)": rc == 0,
        "kv pages used back to 0": samples[-1]["kv_pages_used"] == 0,
        f"RSS flat (growth {100 * rss_growth:+.1f}% <= {100 * args.tolerance:.0f}%)": rss_growth <= args.tolerance,
        "no errors besides 429/503 and chosen disconnects": not errors,
        "some requests were rejected with 429 (overload reached)": tally.get("429", 0) > 0,
    }
    report = {"sustainable_req_s": rate, "target_req_s": target, "duration_s": args.duration, "factor": args.factor,
              "outcomes": tally, "client_skipped_at_cap": skipped, "errors": errors, "rss_growth": rss_growth,
              "checks": checks, "samples": samples, "server_rc": rc,
              "integrity_violations": final.get("warden_integrity_violations_total", -1),
              "preemptions": final.get("warden_preemptions_total", -1)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(report, indent=1))
    md = [f"Soak: {args.duration:.0f} s at {target:.2f} req/s ({args.factor}x the calibrated {rate:.2f} req/s), "
          f"model {Path(args.model).name}, {args.threads} threads, KV {args.kv_bytes}, queue {args.max_queue}.", "",
          "| outcome | count |", "|---|---:|"]
    md += [f"| {k} | {v} |" for k, v in sorted(tally.items())]
    md += ["", f"Client-side cap reached (request not sent): {skipped}. RSS first minute after warm-up "
           f"{statistics.median(warm):.0f} MiB, last minute {statistics.median(last):.0f} MiB. "
           f"Preemptions {report['preemptions']:.0f}, integrity violations {report['integrity_violations']:.0f}.", "",
           "| minute | RSS MiB (median) | KV pages used (max) |", "|---:|---:|---:|"]
    for minute in range(int(samples[-1]["t"] // 60) + 1):
        part = [s for s in samples if minute * 60 <= s["t"] < (minute + 1) * 60]
        if part:
            md.append(f"| {minute} | {statistics.median(s['rss_mib'] for s in part):.0f} | "
                      f"{max(s['kv_pages_used'] for s in part):.0f} |")
    md += ["", "| check | result |", "|---|---|"]
    md += [f"| {k} | {'pass' if v else 'FAIL'} |" for k, v in checks.items()]
    (out / "soak.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
        ts = [s["t"] for s in samples]
        ax[0].plot(ts, [s["rss_mib"] for s in samples])
        ax[0].set_ylabel("RSS MiB")
        ax[1].plot(ts, [s["kv_pages_used"] for s in samples], label="KV pages used")
        ax[1].plot(ts, [s["waiting"] for s in samples], label="waiting")
        ax[1].set_xlabel("seconds")
        ax[1].legend()
        fig.suptitle("warden serve soak")
        fig.savefig(out / "soak.png", dpi=90)
    except Exception as e:  # noqa: BLE001 - the plot is optional
        print(f"soak: no plot ({e})", file=sys.stderr)
    return 0 if all(checks.values()) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warden", default=os.environ.get("WARDEN_BIN", str(ROOT / "build" / "warden")))
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--weights", default="bf16", help="warden --weights (bf16: the documented soak; auto: the file's own)")
    ap.add_argument("--kv-bytes", default="32M")
    ap.add_argument("--max-queue", type=int, default=32)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--calibrate", type=float, default=45)
    ap.add_argument("--calibrate-concurrency", type=int, default=8)
    ap.add_argument("--sample", type=float, default=5)
    ap.add_argument("--max-in-flight", type=int, default=128)
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "soak"))
    args = ap.parse_args()
    if not Path(args.model).is_file():
        sys.exit("soak: no model (pass --model)")
    return asyncio.run(soak(args))


if __name__ == "__main__":
    sys.exit(main())
