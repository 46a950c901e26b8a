"""Shared helpers for the Python end-to-end tests: locating and running the warden binary.

Environment:
  WARDEN_BIN        warden binary (default: <repo>/build/warden)
  WARDEN_SMOLLM2    SmolLM2 GGUF (default: <repo>/models/SmolLM2-135M-Instruct.Q4_1.gguf)
  WARDEN_TIMEOUT_S  per-invocation timeout in seconds (default 300)
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

import pytest

from warden_serve import ServeProcess, parse_metrics

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "models"
WARDEN_BIN = Path(os.environ.get("WARDEN_BIN", ROOT / "build" / "warden"))
SMOLLM2_GGUF = Path(os.environ.get("WARDEN_SMOLLM2", ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
TIMEOUT_S = float(os.environ.get("WARDEN_TIMEOUT_S", "300"))

# Numbers measured by the tests, printed at the end of the session (see terminal summary).
REPORT: dict[str, dict] = {}


def record(section: str, key: str, value) -> None:
    REPORT.setdefault(section, {})[key] = value


def require_warden() -> Path:
    if not (WARDEN_BIN.is_file() and os.access(WARDEN_BIN, os.X_OK)):
        pytest.skip(f"warden binary not found at {WARDEN_BIN} (build it or set WARDEN_BIN)")
    return WARDEN_BIN


def gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet (the ByteLevel pre-tokenizer's): character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class WardenLogits:
    """Parsed output of `warden logits`: tops[pos] = [(id, logit), ...], greedy = [id, ...]."""

    def __init__(self, tops: list[list[tuple[int, float]]], greedy: list[int] | None):
        self.tops = tops
        self.greedy = greedy

    def as_dict(self, pos: int) -> dict[int, float]:
        return {i: v for i, v in self.tops[pos]}


@functools.lru_cache(maxsize=None)
def _run_cached(path: str, ids: tuple[int, ...], dtype: str, top: int, greedy: int, weights: str) -> WardenLogits:
    # --weights defaults to `dtype`: without it a Q4_0/Q4_1 GGUF keeps its own format (int4,
    # W4A8), and most tests compare the dequantized weights at `dtype` with the reference.
    cmd = [str(WARDEN_BIN), "logits", "-m", path, "--tokens", ",".join(map(str, ids)),
           "--dtype", dtype, "--weights", weights, "--top", str(top)]
    if greedy:
        cmd += ["--greedy", str(greedy)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"timeout after {TIMEOUT_S}s: {' '.join(cmd)}")
    if p.returncode != 0:
        pytest.fail(f"warden exited {p.returncode}: {' '.join(cmd)}\nstderr:\n{p.stderr[-4000:]}")
    tops: dict[int, list[tuple[int, float]]] = {}
    gen = None
    for line in p.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        obj = json.loads(line)
        if "greedy" in obj:
            gen = [int(t) for t in obj["greedy"]]
        elif "pos" in obj:
            tops[int(obj["pos"])] = [(int(i), float(v)) for i, v in obj["top"]]
    assert sorted(tops) == list(range(len(ids))), (
        f"expected one line per position 0..{len(ids) - 1}, got {sorted(tops)}\n{' '.join(cmd)}")
    if greedy:
        assert gen is not None, f"no greedy line in output of {' '.join(cmd)}"
    return WardenLogits([tops[i] for i in range(len(ids))], gen)


def run_logits(path: Path | str, ids, dtype: str = "f32", top: int = 8, greedy: int = 0,
               weights: str | None = None) -> WardenLogits:
    require_warden()
    return _run_cached(str(path), tuple(int(i) for i in ids), dtype, int(top), int(greedy), weights or dtype)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not REPORT:
        return
    terminalreporter.section("reference logits: measured numbers")
    for section in sorted(REPORT):
        terminalreporter.write_line(f"{section}:")
        for k, v in REPORT[section].items():
            if isinstance(v, float):
                v = f"{v:.4g}"
            terminalreporter.write_line(f"    {k}: {v}")


# ---------------------------------------------------------------- `warden serve` fixtures

class WardenServer:
    """A running `warden serve` process on 127.0.0.1 with a port it picked itself."""

    def __init__(self, *extra: str, model: Path | None = None, timeout: float = 120):
        require_warden()
        model = model or SMOLLM2_GGUF
        if not Path(model).exists():
            pytest.skip(f"default model missing at {model}")
        self.cmd = [str(WARDEN_BIN), "serve", "-m", str(model), "--host", "127.0.0.1", "--port", "0",
                    "--threads", os.environ.get("WARDEN_SERVER_THREADS", "2"), *extra]
        started = ServeProcess(self.cmd, timeout, cwd=ROOT)
        self.proc = started.proc
        self.stderr_lines: list[str] = started.lines
        if started.port is None:
            if not started.exited:
                self.stop()
                pytest.fail(f"warden serve did not start: {started.log_tail()}")
            pytest.fail(f"warden serve exited: {started.log_tail()}")
        self.port = started.port
        self.base = f"http://127.0.0.1:{self.port}"
        self.model_id = Path(model).name

    def client(self, api_key: str = "none", **kw):
        import openai
        return openai.OpenAI(base_url=self.base + "/v1", api_key=api_key, max_retries=0, timeout=300, **kw)

    def metrics(self) -> dict[str, float]:
        """Prometheus text -> {'name{labels}': value}."""
        import httpx
        headers = {}
        if "--api-keys" in self.cmd:  # /metrics needs a key when keys are set: the first one
            keys = Path(self.cmd[self.cmd.index("--api-keys") + 1]).read_text().split("\n")
            key = next(l.split()[0] for l in keys if l.strip() and not l.startswith("#"))
            headers["Authorization"] = f"Bearer {key}"
        r = httpx.get(self.base + "/metrics", headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        return parse_metrics(r.text)

    def stop(self, sig=None) -> int:
        import signal as _signal
        if self.proc.poll() is None:
            self.proc.send_signal(sig or _signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    s = WardenServer("--max-seqs", "64", "--kv-cache-bytes", "256M")
    yield s
    rc = s.stop()
    assert rc == 0, "".join(s.stderr_lines)[-2000:]
