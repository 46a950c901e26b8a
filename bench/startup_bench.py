#!/usr/bin/env python3
"""Start-up time: from process start to the first token served.

For each model file, alternating rounds of:
  * read    `cat FILE... > /dev/null` (the time to read the weights from where they are);
  * warden  `warden serve -m FILE [--weights W]`, polling GET /health until 200, then one
            /v1/completions request with max_tokens 1; the time is process start -> that response;
  * llama   the same against llama.cpp's `llama-server -m FILE` (GGUF only; --llama-server).
Warm page cache: every file is read once before the rounds. --cold drops the page cache before
each timed start (`echo 3 > /proc/sys/vm/drop_caches`; needs root and a writable /proc/sys: the
script says so and stops where it is not permitted).

Usage (from the repo root):
  python3 bench/startup_bench.py --model F.gguf [--model G.safetensors:int4 ...] [--rounds 3]
      [--threads 2] [--llama-server /path/to/llama-server] [--cold]
A model is PATH or PATH:WEIGHTS (passed as --weights), or PATH:--FLAG[,--FLAG...] (passed as
they are, e.g. PATH:--no-mmap). Prints one JSON line per measurement and a
Markdown table of medians (seconds).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def files_of(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".json", ".gguf"))
    return [path]


def read_time(path: Path) -> float:
    t0 = time.perf_counter()
    for f in files_of(path):
        subprocess.run(["cat", str(f)], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def http(url: str, body: dict | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def serve_first_token(cmd: list[str], port: int, limit_s: float, model: str) -> tuple[float, float]:
    """(seconds to /health 200, seconds to the first completion token) from process start."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        ready = None
        while time.perf_counter() - t0 < limit_s:
            if p.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited {p.returncode}: {p.stderr.read()[-2000:]}")
            try:
                status, _ = http(base + "/health", timeout=1.0)
                if status == 200:
                    ready = time.perf_counter() - t0
                    break
            except (urllib.error.URLError, ConnectionError, socket.timeout):
                pass
            time.sleep(0.01)
        if ready is None:
            raise RuntimeError(f"{cmd[0]} not ready in {limit_s} s")
        status, body = http(base + "/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0},
                            timeout=limit_s)
        if status != 200:
            raise RuntimeError(f"completion failed: {status} {body[:300]!r}")
        return ready, time.perf_counter() - t0
    finally:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="PATH or PATH:WEIGHTS (repeatable)")
    ap.add_argument("--warden", default=str(ROOT / "build" / "warden"))
    ap.add_argument("--llama-server", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--limit", type=float, default=300.0, help="seconds allowed per start")
    a = ap.parse_args()
    if a.cold:
        try:
            drop_caches()
        except OSError as e:
            sys.exit(f"--cold: cannot drop the page cache here ({e}); run warm, or as root with /proc/sys writable")
    models = []
    for spec in a.model:
        path, _, weights = spec.partition(":") if not os.path.exists(spec) else (spec, "", "")
        models.append((Path(path), weights))
    results: dict[tuple[str, str], list[float]] = {}

    def record(model: str, what: str, value: float) -> None:
        results.setdefault((model, what), []).append(value)
        print(json.dumps({"model": model, "what": what, "s": round(value, 4)}), flush=True)

    for path, _ in models:  # warm: every file read once
        read_time(path)
    def label(path: Path, weights: str) -> str:
        if weights.startswith("--"):
            return path.name + " " + " ".join(weights.split(","))
        return path.name + (f" --weights {weights}" if weights else "")

    for r in range(a.rounds):
        for path, weights in models:
            name = label(path, weights)
            runs = [("read", None)]
            wcmd = [a.warden, "serve", "-m", str(path), "--host", "127.0.0.1", "--threads", str(a.threads)]
            if weights.startswith("--"):
                wcmd += weights.split(",")
            elif weights:
                wcmd += ["--weights", weights]
            runs.append(("warden", wcmd))
            if a.llama_server and path.suffix == ".gguf" and not weights:
                runs.append(("llama-server", [a.llama_server, "-m", str(path), "--host", "127.0.0.1", "-t",
                                              str(a.threads), "-c", "2048", "-np", "1"]))
            if r % 2:
                runs.reverse()  # alternate the order between rounds
            for what, cmd in runs:
                if a.cold:
                    drop_caches()
                if cmd is None:
                    record(name, "read", read_time(path))
                    continue
                port = free_port()
                ready, first = serve_first_token(cmd + ["--port", str(port)], port, a.limit, path.name)
                record(name, what + " ready", ready)
                record(name, what + " first token", first)
    print(f"\n{'cold' if a.cold else 'warm'} page cache, {a.threads} threads, median of {a.rounds} (seconds)\n")
    print("| model | read (cat) | warden ready | warden first token | llama-server ready | llama-server first token |")
    print("|---|---:|---:|---:|---:|---:|")
    for path, weights in models:
        name = label(path, weights)

        def med(what: str) -> str:
            v = results.get((name, what))
            return f"{statistics.median(v):.2f}" if v else ""

        print(f"| {name} | {med('read')} | {med('warden ready')} | {med('warden first token')} | "
              f"{med('llama-server ready')} | {med('llama-server first token')} |")


if __name__ == "__main__":
    main()
