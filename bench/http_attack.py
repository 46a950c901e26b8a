#!/usr/bin/env python3
"""Hostile-client harness for `warden serve`: each case attacks a live server on loopback, bounded
in time and connection count, while a normal small request measures the server's latency.

Attack traffic comes from source addresses 127.0.0.2 .. 127.0.0.9 (bound before connect) and
the normal probe requests from 127.0.0.1, so the per-client connection limit never hits the
probe. For every case the harness records: the expected and the observed outcome, the probe's
latency during the attack against its unloaded latency (pass: <= 2x + a small absolute floor),
the server's RSS before and after (pass: within +10%), `warden_kv_pages_used` back to 0, and
that the process is still alive. It prints a table and exits non-zero on any failure.

  .venv/bin/python bench/http_attack.py --warden build/warden [--case slowloris] [--small]

--small runs the reduced sizes that tests/python/test_server_hostile.py uses. Python standard
library only (sockets, threads, asyncio); no traffic leaves 127.0.0.0/8.
"""
from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import re
import resource
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))
from warden_serve import ServeProcess, parse_metrics  # noqa: E402

DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
ATTACK_SOURCES = [f"127.0.0.{i}" for i in range(2, 10)]
PROBE_SOURCE = "127.0.0.1"
API_KEY = "sk-hostile-probe"


def raise_nofile(want: int = 20000) -> int:
    """Raise this process's open-file limit (the server, started from here, inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(max(soft, want), hard) if hard != resource.RLIM_INFINITY else max(soft, want)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


# ------------------------------------------------------------------------------------ server

_flags_cache: dict[str, set[str]] = {}


def supported_flags(warden: str) -> set[str]:
    """The options `warden serve --help` lists: a server without the hostile-client limits (the
    one before the move) still runs every case, with its defaults in place of the missing flags."""
    if warden not in _flags_cache:
        p = subprocess.run([warden, "serve", "--help"], capture_output=True, text=True, timeout=60)
        _flags_cache[warden] = set(re.findall(r"(--[a-z][a-z0-9-]*)", p.stdout + p.stderr))
    return _flags_cache[warden]


def drop_flags(args: tuple[str, ...], drop: list[str]) -> tuple[str, ...]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in drop:
            skip = True  # every flag the cases pass takes one value
            continue
        out.append(a)
    return tuple(out)


class Server:
    """`warden serve` on 127.0.0.1 with a port it picked; the probe request and /metrics."""

    def __init__(self, warden: str, args: tuple[str, ...] = (), model: str | None = None, threads: int = 2,
                 api_keys_file: str | None = None, start_timeout: float = 120):
        self.args = tuple(args)
        self.owner = os.getpid()
        self.key = API_KEY if api_keys_file else None
        self.dropped = [a for a in args if a.startswith("--") and a not in supported_flags(warden)]
        args = drop_flags(args, self.dropped)
        cmd = [warden, "serve", "-m", model or str(DEFAULT_MODEL), "--host", "127.0.0.1", "--port", "0",
               "--threads", str(threads), *args]
        if api_keys_file:
            cmd += ["--api-keys", api_keys_file]
        self.cmd = cmd
        started = ServeProcess(cmd, start_timeout, max_lines=20000)
        self.proc = started.proc
        self.log: list[str] = started.lines
        if started.port is None:
            self.kill()
            raise RuntimeError(f"warden serve did not start: {started.log_tail()}")
        self.port = started.port
        self.model_id = self.get_json("/v1/models")["data"][0]["id"]

    def alive(self) -> bool:
        if os.getpid() != self.owner:  # an attack's forked child: the server is not its child
            try:
                state = Path(f"/proc/{self.proc.pid}/stat").read_text().split(")")[-1].split()[0]
                return state not in ("Z", "X")
            except OSError:
                return False
        return self.proc.poll() is None

    def rss_mib(self) -> float:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if self.key:
            h["Authorization"] = f"Bearer {self.key}"
        return h

    def conn(self, timeout: float) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout, source_address=(PROBE_SOURCE, 0))

    def get_json(self, path: str, timeout: float = 30):
        c = self.conn(timeout)
        try:
            c.request("GET", path, headers=self.headers())
            r = c.getresponse()
            return json.loads(r.read())
        finally:
            c.close()

    def metrics(self, timeout: float = 30) -> dict[str, float]:
        c = self.conn(timeout)
        try:
            c.request("GET", "/metrics", headers=self.headers())
            text = c.getresponse().read().decode()
        finally:
            c.close()
        return parse_metrics(text)

    def probe(self, timeout: float = 30) -> tuple[float, int]:
        """One normal small request from 127.0.0.1: (seconds, status); status -1 on failure."""
        body = json.dumps({"model": self.model_id, "prompt": "Hello", "max_tokens": 4, "temperature": 0})
        t0 = time.monotonic()
        c = self.conn(timeout)
        try:
            c.request("POST", "/v1/completions", body=body, headers=self.headers())
            r = c.getresponse()
            r.read()
            return time.monotonic() - t0, r.status
        except (OSError, http.client.HTTPException):
            return time.monotonic() - t0, -1
        finally:
            c.close()

    def pages_used(self) -> float:
        try:
            return self.metrics(timeout=10).get("warden_kv_pages_used", float("nan"))
        except (OSError, http.client.HTTPException, ValueError):
            return float("nan")

    def wait_pages_zero(self, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while True:
            p = self.pages_used()
            if p == 0 or time.monotonic() > deadline or not self.alive():
                return p
            time.sleep(0.2)

    def wait_resident(self, timeout: float) -> float:
        """Waits (bounded) until the KV pool's background thread has made it resident, so an RSS
        reading is settled; returns the bytes still pending (0 when settled)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                p = self.metrics(timeout=10).get("warden:memory_populate_pending_bytes", 0.0)
            except (OSError, http.client.HTTPException, ValueError):
                p = float("nan")
            if p == 0 or time.monotonic() > deadline or not self.alive():
                return p
            time.sleep(0.2)

    def stop(self, timeout: float = 60) -> int | None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# ------------------------------------------------------------------------------ raw sockets

_src_next = [0]


def attack_source() -> str:
    s = ATTACK_SOURCES[_src_next[0] % len(ATTACK_SOURCES)]
    _src_next[0] += 1
    return s


def connect(port: int, timeout: float = 10, src: str | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src or attack_source(), 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s


def set_rst_on_close(s: socket.socket):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class Response:
    def __init__(self, status: int, reason: str, headers: dict[str, str], body: bytes):
        self.status, self.reason, self.headers, self.body = status, reason, headers, body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<{self.status} {self.reason} {len(self.body)}B>"


class Reader:
    """Reads HTTP/1.1 responses one after another from a socket (pipelining, chunked, close)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""
        self.eof = False

    def _fill(self) -> bool:
        if self.eof:
            return False
        try:
            d = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            d = b""
        if not d:
            self.eof = True
            return False
        self.buf += d
        return True

    def _line(self) -> bytes | None:
        while b"\r\n" not in self.buf:
            if not self._fill():
                return None
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n: int) -> bytes | None:
        while len(self.buf) < n:
            if not self._fill():
                return None
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read(self, head_only: bool = False) -> Response | None:
        """The next response, or None on EOF/timeout before a status line."""
        try:
            line = self._line()
            if line is None:
                return None
            parts = line.decode("latin-1").split(" ", 2)
            status, reason = int(parts[1]), (parts[2] if len(parts) > 2 else "")
            headers: dict[str, str] = {}
            while True:
                h = self._line()
                if h is None or h == b"":
                    break
                k, _, v = h.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            if head_only:
                return Response(status, reason, headers, b"")
            if "transfer-encoding" in headers and "chunked" in headers["transfer-encoding"].lower():
                body = b""
                while True:
                    sz = self._line()
                    if sz is None:
                        break
                    n = int(sz.split(b";")[0].strip() or b"0", 16)
                    if n == 0:
                        self._line()
                        break
                    chunk = self._take(n)
                    if chunk is None:
                        body += self.buf
                        self.buf = b""
                        break
                    body += chunk
                    self._line()
            elif "content-length" in headers:
                body = self._take(int(headers["content-length"])) or b""
            else:
                while self._fill():
                    pass
                body, self.buf = self.buf, b""
            return Response(status, reason, headers, body)
        except (socket.timeout, TimeoutError):
            return None

    def closed(self, timeout: float) -> bool:
        """True when the server closes (FIN or RST) within timeout, reading and dropping data."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except (socket.timeout, TimeoutError):
            return False
        return False


def exchange(port: int, data: bytes, timeout: float = 10, src: str | None = None,
             check_close: bool = False) -> tuple[Response | None, bool]:
    """Send raw bytes, read one response; with check_close, also whether the server then closed
    the connection (within 2 s)."""
    s = connect(port, timeout, src)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        rd = Reader(s)
        r = rd.read()
        closed = rd.eof or (check_close and rd.closed(2.0))
        return r, closed
    finally:
        s.close()


def send_streaming_body(port: int, head: bytes, pieces, timeout: float = 20,
                        src: str | None = None) -> tuple[Response | None, int, float]:
    """Send the head, then body pieces until the server answers (or the pieces run out, or the
    server stops reading). Returns (response, body bytes handed to the kernel, seconds)."""
    import select
    s = connect(port, timeout, src)
    t0 = time.monotonic()
    sent = 0
    try:
        s.sendall(head)
        s.setblocking(False)
        pending = b""
        it = iter(pieces)
        deadline = t0 + timeout
        done = False
        while time.monotonic() < deadline:
            r, w, _ = select.select([s], [] if done else [s], [], 0.5)
            if r:
                break
            if w:
                if not pending:
                    pending = next(it, b"")
                    if not pending:
                        done = True
                        continue
                try:
                    n = s.send(pending)
                except (BlockingIOError, InterruptedError):
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    break
                sent += n
                pending = pending[n:]
        s.setblocking(True)
        s.settimeout(max(1.0, deadline - time.monotonic()))
        resp = Reader(s).read()
        return resp, sent, time.monotonic() - t0
    finally:
        s.close()


def request_bytes(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
                  length: bool = True) -> bytes:
    h = {"Host": "127.0.0.1"}
    if length and method != "GET":
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    return (f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n").encode(
        "latin-1") + body


def auth(srv: Server) -> dict[str, str]:
    return {"Authorization": f"Bearer {srv.key}"} if srv.key else {}


def error_code(r: Response | None) -> str:
    try:
        return r.json()["error"].get("code") or ""
    except Exception:  # noqa: BLE001 - a non-JSON answer simply has no code
        return ""


def fmt(r: Response | None, closed: bool | None = None) -> str:
    if r is None:
        return "no response" + (" (closed)" if closed else "")
    return str(r.status) + (" close" if closed else "")


# ----------------------------------------------------------------------------------- cases

@dataclass
class Outcome:
    expected: str
    got: str
    ok: bool


@dataclass
class Case:
    name: str
    expected: str
    attack: object  # fn(srv, stop: threading.Event, size) -> Outcome
    server_args: tuple[str, ...] = ()
    api_keys: bool = False
    probe_after: float = 0.3  # seconds into the attack before the first probe
    probes: int = 3
    fresh_server: bool = False  # the case ends the server (SIGTERM)
    probe_when_done: bool = False  # probe once the attack is over (work it left must be gone)


@dataclass
class Result:
    case: str
    expected: str
    got: str
    status_ok: bool
    alive: bool
    base_s: float
    during_s: float
    latency_ok: bool
    rss_before: float
    rss_after: float
    rss_ok: bool
    pages: float
    pages_ok: bool
    probe_status: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status_ok and self.alive and self.latency_ok and self.rss_ok and self.pages_ok


def nested_body(model: str, where: str, depth: int) -> bytes:
    deep = "[" * depth + "]" * depth
    if where == "content":
        return ('{"model":"%s","max_tokens":1,"messages":[{"role":"user","content":%s}]}' % (model, deep)).encode()
    if where == "name":
        return ('{"model":"%s","max_tokens":1,"messages":[{"role":"user","name":%s,"content":"hi"}]}'
                % (model, deep)).encode()
    if where == "tool_calls":
        return ('{"model":"%s","max_tokens":1,"messages":[{"role":"user","content":"hi"},'
                '{"role":"assistant","tool_calls":%s}]}' % (model, deep)).encode()
    if where == "tools":
        return ('{"model":"%s","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":%s}'
                % (model, deep)).encode()
    if where == "top":  # the whole body is the nesting
        return deep.encode()
    raise ValueError(where)


def make_nested(where: str, depth: int):
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        body = nested_body(srv.model_id, where, depth)
        r, closed = exchange(srv.port, request_bytes("POST", "/v1/chat/completions", body,
                                                     {"Content-Type": "application/json", **auth(srv)}), timeout=30)
        code = error_code(r)
        got = fmt(r) + (f" {code}" if code else "")
        return Outcome("400 json_too_deep", got, r is not None and r.status == 400 and code == "json_too_deep")
    return attack


async def _slow_conn(port: int, src: str, payload: bytes, interval: float, until: float, result: dict,
                     prefix: bytes = b""):
    """Send prefix at once, then payload one byte per interval; note when and how the server
    ends the connection."""
    t0 = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(src, 0))
    except OSError:
        result["connect_failed"] += 1
        return
    status = None
    try:
        if prefix:
            writer.write(prefix)
            await writer.drain()
        i = 0
        while time.monotonic() < until:
            if i < len(payload):
                writer.write(payload[i:i + 1])
                i += 1
                try:
                    await writer.drain()
                except (ConnectionResetError, BrokenPipeError):
                    break
            try:
                data = await asyncio.wait_for(reader.read(4096), timeout=interval)
            except asyncio.TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError):
                break
            if not data:
                break
            m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
            if m and status is None:
                status = int(m.group(1))
            # keep reading until the close
        else:
            result["still_open"] += 1
            return
        result["closed"] += 1
        result["close_s"].append(time.monotonic() - t0)
        result["statuses"][status] = result["statuses"].get(status, 0) + 1
    finally:
        writer.close()


def run_slow_clients(port: int, n: int, payload: bytes, interval: float, duration: float,
                     stagger: float = 0.0, prefix: bytes = b"") -> dict:
    result = {"closed": 0, "still_open": 0, "connect_failed": 0, "close_s": [], "statuses": {}}

    async def main():
        until = time.monotonic() + duration
        tasks = []
        for i in range(n):
            tasks.append(asyncio.create_task(
                _slow_conn(port, ATTACK_SOURCES[i % len(ATTACK_SOURCES)], payload, interval, until, result,
                           prefix)))
            if stagger:
                await asyncio.sleep(stagger)
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    return result


def make_slowloris(n: int, duration: float, deadline_s: float):
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        payload = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 4096
        res = run_slow_clients(srv.port, n, payload, 1.0, duration)
        in_time = sum(1 for t in res["close_s"] if t <= deadline_s)
        got = (f"{res['closed']}/{n} closed ({in_time} by {deadline_s:.0f}s), "
               f"status {','.join(f'{k}x{v}' for k, v in sorted(res['statuses'].items(), key=str))}")
        ok = in_time == n and set(res["statuses"]) <= {408}
        return Outcome(f"{n} x 408+close by {deadline_s:.0f}s", got, ok)
    return attack


def make_slow_body(n: int, duration: float, deadline_s: float):
    """The head at once, then the declared 1000-byte body one byte per second: the body
    deadline ends it with 408."""
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        head = request_bytes("POST", "/v1/completions", headers={
            "Content-Type": "application/json", "Content-Length": "1000", **auth(srv)})
        res = run_slow_clients(srv.port, n, b'{"prompt":"' + b"a" * 989, 1.0, duration, prefix=head)
        in_time = sum(1 for t in res["close_s"] if t <= deadline_s)
        got = (f"{res['closed']}/{n} closed ({in_time} by {deadline_s:.0f}s), "
               f"status {','.join(f'{k}x{v}' for k, v in sorted(res['statuses'].items(), key=str))}")
        return Outcome(f"{n} x 408+close by {deadline_s:.0f}s", got, in_time == n and set(res["statuses"]) <= {408})
    return attack


def make_per_client_limit(extra: int, limit: int = 256):
    """limit + extra connections from one address: the extra ones are closed at once, the
    first `limit` stay open, and another address still gets served."""
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        src = ATTACK_SOURCES[-1]
        socks = []
        try:
            for _ in range(limit + extra):
                socks.append(connect(srv.port, 5, src))
            closed = sum(Reader(s).closed(0.5) if i >= limit - 8 else False for i, s in enumerate(socks))
            # The connections under the limit still work.
            s0 = socks[0]
            s0.settimeout(10)
            s0.sendall(request_bytes("GET", "/health", headers=auth(srv)))
            r0 = Reader(s0).read()
            r1, _ = exchange(srv.port, request_bytes("GET", "/health", headers=auth(srv)), src=ATTACK_SOURCES[0])
        finally:
            for s in socks:
                s.close()
        ok = closed == extra and r0 is not None and r0.status == 200 and r1 is not None and r1.status == 200
        return Outcome(f"{extra} of {limit + extra} closed; first and other address 200",
                       f"{closed} closed; {fmt(r0)}, other address {fmt(r1)}", ok)
    return attack


def make_keepalive_idle(n: int, deadline_s: float):
    """n keep-alive connections that made one request and then go silent: closed by the idle
    timeout."""
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        socks, served = [], 0
        t0 = time.monotonic()
        try:
            for _ in range(n):
                s = connect(srv.port, 10)
                s.sendall(request_bytes("GET", "/health", headers=auth(srv)))
                r = Reader(s).read()
                served += r is not None and r.status == 200
                socks.append(s)
            closed = sum(Reader(s).closed(max(0.05, t0 + deadline_s - time.monotonic())) for s in socks)
        finally:
            for s in socks:
                s.close()
        return Outcome(f"{n} served, closed by {deadline_s:.0f}s", f"{served} served, {closed} closed",
                       served == n and closed == n)
    return attack


def make_idle(n: int, duration: float, deadline_s: float):
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        res = run_slow_clients(srv.port, n, b"", 1.0, duration)
        in_time = sum(1 for t in res["close_s"] if t <= deadline_s)
        got = f"{res['closed']}/{n} closed ({in_time} by {deadline_s:.0f}s), {res['connect_failed']} refused"
        ok = in_time == n and set(res["statuses"]) <= {None, 408}
        return Outcome(f"{n} closed by {deadline_s:.0f}s", got, ok)
    return attack


def _json_prefix(srv: Server) -> bytes:
    return ('{"model":"%s","max_tokens":1,"prompt":"' % srv.model_id).encode()


def make_chunked_over(total: int):
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        head = request_bytes("POST", "/v1/completions", length=False, headers={
            "Content-Type": "application/json", "Transfer-Encoding": "chunked", **auth(srv)})
        piece = b"a" * 65536

        def pieces():
            yield b"%x\r\n%s\r\n" % (len(_json_prefix(srv)), _json_prefix(srv))
            sent = 0
            while sent < total:
                yield b"%x\r\n%s\r\n" % (len(piece), piece)
                sent += len(piece)
            yield b'2\r\n"}\r\n0\r\n\r\n'

        r, sent, secs = send_streaming_body(srv.port, head, pieces(), timeout=60)
        got = f"{fmt(r)} after {sent / 2**20:.1f} MiB sent"
        return Outcome("413 before the whole body", got, r is not None and r.status == 413 and sent < total)
    return attack


def make_nolength_over(total: int):
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        head = request_bytes("POST", "/v1/completions", length=False,
                             headers={"Content-Type": "application/json", "Connection": "close", **auth(srv)})
        piece = b"a" * 65536

        def pieces():
            yield _json_prefix(srv)
            sent = 0
            while sent < total:
                yield piece
                sent += len(piece)

        r, sent, secs = send_streaming_body(srv.port, head, pieces(), timeout=60)
        got = f"{fmt(r)} after {sent / 2**20:.1f} MiB sent"
        # Without Content-Length or Transfer-Encoding the body is empty (RFC 9112 6.3): the bytes
        # that follow are no request; any 4xx is right as long as the server did not read them all.
        return Outcome("4xx (413/411/400) before the whole body", got,
                       r is not None and 400 <= r.status < 500 and sent < total)
    return attack


def make_gzip(expanded: int):
    import functools

    @functools.lru_cache(maxsize=1)
    def bomb() -> bytes:
        # Compressed once before the baseline (Case.prepare), not while the probes run.
        z = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip framing
        out = [z.compress(b'{"model":"m","max_tokens":1,"prompt":"')]
        piece = b"a" * (1 << 20)
        for _ in range(expanded >> 20):
            out.append(z.compress(piece))
        out.append(z.compress(b'"}'))
        out.append(z.flush())
        return b"".join(out)

    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        body = bomb()
        r, closed = exchange(srv.port, request_bytes("POST", "/v1/completions", body, {
            "Content-Type": "application/json", "Content-Encoding": "gzip", **auth(srv)}), timeout=60)
        return Outcome("415", f"{fmt(r)} ({len(body) // 1024} KiB -> {expanded >> 20} MiB)",
                       r is not None and r.status == 415)
    attack.prepare = bomb
    return attack


def make_cl_over(claimed: int):
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        t0 = time.monotonic()
        r, closed = exchange(srv.port, request_bytes("POST", "/v1/completions", headers={
            "Content-Type": "application/json", "Content-Length": str(claimed), **auth(srv)}), timeout=10)
        dt = time.monotonic() - t0
        return Outcome("413 at once (no body sent)", f"{fmt(r)} in {dt:.2f}s",
                       r is not None and r.status == 413 and dt < 3)
    return attack


def make_auth_before_body(claimed: int):
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        t0 = time.monotonic()
        # The body is announced but only its first bytes are sent.
        r, closed = exchange(srv.port, request_bytes("POST", "/v1/completions", headers={
            "Content-Type": "application/json", "Content-Length": str(claimed),
            "Authorization": "Bearer sk-wrong"}) + b'{"model":"x","prompt":"', timeout=10)
        dt = time.monotonic() - t0
        return Outcome("401 before the body", f"{fmt(r)} in {dt:.2f}s",
                       r is not None and r.status == 401 and dt < 3)
    return attack


def make_header_count(n: int):
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"

        def pieces():  # generated as sent: the server should stop reading long before the end
            for i in range(0, n, 4096):
                yield "".join(f"X-H{j}: v\r\n" for j in range(i, min(n, i + 4096))).encode()
            yield b"\r\n"

        r, sent, secs = send_streaming_body(srv.port, head, pieces(), timeout=30)
        return Outcome("431", f"{fmt(r)} after {n} headers offered, {sent >> 10} KiB sent",
                       r is not None and r.status == 431)
    return attack


def make_header_bytes(n: int):
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "

        def pieces():
            for i in range(0, n, 65536):
                yield b"b" * min(65536, n - i)
            yield b"\r\n\r\n"

        r, sent, secs = send_streaming_body(srv.port, head, pieces(), timeout=30)
        return Outcome("431", f"{fmt(r)} after {sent >> 10} KiB of one header",
                       r is not None and r.status == 431)
    return attack


def make_range(n: int):
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        ranges = "bytes=" + ",".join(f"{i}-{i}" for i in range(n))
        body = json.dumps({"model": srv.model_id, "prompt": "Hello", "max_tokens": 8, "temperature": 0}).encode()
        got, ok = [], True
        for rng in (ranges, "bytes=0-5"):
            r, closed = exchange(srv.port, request_bytes("POST", "/v1/completions", body, {
                "Content-Type": "application/json", "Range": rng, **auth(srv)}), timeout=60)
            good = (r is not None and r.status == 200 and "multipart" not in r.headers.get("content-type", "")
                    and "content-range" not in r.headers)
            if good:
                try:
                    good = "choices" in r.json()
                except ValueError:
                    good = False
            got.append(fmt(r) + (f" {len(r.body)}B" if r else ""))
            ok = ok and good
        return Outcome("200 full JSON (x2)", ", ".join(got), ok)
    return attack


def pipelining(srv: Server, stop: threading.Event, size: dict) -> Outcome:
    paths = ["/health", "/v1/models", "/health", "/v1/models", "/no-such-path",
             "/health", "/v1/models", "/health", "/v1/models", "/health"]
    data = b"".join(request_bytes("GET", p, headers=auth(srv)) for p in paths)
    s = connect(srv.port, 15)
    try:
        s.sendall(data)
        rd = Reader(s)
        got = []
        for _ in paths:
            r = rd.read()
            if r is None:
                break
            got.append(r)
    finally:
        s.close()

    def matches(p: str, r: Response) -> bool:
        if p == "/no-such-path":
            return r.status == 404
        if r.status != 200:
            return False
        if p == "/v1/models":
            try:
                return "data" in r.json()
            except ValueError:
                return False
        return b'"data"' not in r.body

    ok = len(got) == len(paths) and all(matches(p, r) for p, r in zip(paths, got))
    return Outcome("10 answers in order", f"{len(got)} answers" + ("" if ok else " (wrong)" if len(got) == 10 else ""),
                   ok)


def cl_te(srv: Server, stop: threading.Event, size: dict) -> Outcome:
    body = b"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    r, closed = exchange(srv.port, request_bytes("POST", "/v1/completions", body, {
        "Content-Type": "application/json", "Transfer-Encoding": "chunked", **auth(srv)}), timeout=10,
        check_close=True)
    return Outcome("400 close", fmt(r, closed), r is not None and r.status == 400 and closed)


MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET  /health HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/1.1 extra\r\nHost: x\r\n\r\n",
    b"GET /health\r\n\r\n",
    b"G\x00T /health HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/1.1\nHost: x\n\r\n\r\n" + b"\xff\xfe" * 8 + b"\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS ClientHello
    b"GET /health HTTP/1.1\r\n Host: x\r\n\r\n",  # obsolete line folding at the first header
]


def malformed(srv: Server, stop: threading.Event, size: dict) -> Outcome:
    got, ok = [], True
    for req in MALFORMED:
        r, closed = exchange(srv.port, req, timeout=12, check_close=True)
        got.append(fmt(r, closed).replace(" close", "c"))
        ok = ok and r is not None and r.status == 400 and closed
    return Outcome(f"{len(MALFORMED)} x 400 close", " ".join(got), ok)


def bad_headers(srv: Server, stop: threading.Event, size: dict) -> Outcome:
    got, ok = [], True
    for req in (b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
                b"GET /health HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n"):
        r, closed = exchange(srv.port, req, timeout=12, check_close=True)
        got.append(fmt(r, closed))
        ok = ok and r is not None and r.status == 400 and closed
    return Outcome("NUL: 400 close, no colon: 400 close", ", ".join(got), ok)


def routes(srv: Server, stop: threading.Event, size: dict) -> Outcome:
    r1, _ = exchange(srv.port, request_bytes("GET", "/v1/completions", headers=auth(srv)))
    r2, _ = exchange(srv.port, request_bytes("GET", "/v1/nothing-here", headers=auth(srv)))
    deep = ('{"model":"%s","max_tokens":1,"prompt":"x","extra":%s}' % (srv.model_id, "[" * 65 + "]" * 65)).encode()
    r3, _ = exchange(srv.port, request_bytes("POST", "/v1/completions", deep,
                                             {"Content-Type": "application/json", **auth(srv)}))
    ok = (r1 is not None and r1.status == 405 and "POST" in r1.headers.get("allow", "")
          and r2 is not None and r2.status == 404
          and r3 is not None and r3.status == 400 and error_code(r3) == "json_too_deep")
    allow = r1.headers.get("allow", "-") if r1 else "-"
    return Outcome("405 Allow: POST, 404, depth 65: 400 json_too_deep",
                   f"{fmt(r1)} Allow: {allow}, {fmt(r2)}, {fmt(r3)} {error_code(r3)}", ok)


def metrics_and_ids(srv: Server, stop: threading.Event, size: dict) -> Outcome:
    r1, _ = exchange(srv.port, request_bytes("GET", "/metrics"))
    r2, _ = exchange(srv.port, request_bytes("GET", "/metrics", headers={"Authorization": "Bearer sk-wrong"}))
    ids = []
    for _ in range(3):
        body = json.dumps({"model": srv.model_id, "prompt": "Hi", "max_tokens": 1}).encode()
        r, _ = exchange(srv.port, request_bytes("POST", "/v1/completions", body,
                                                {"Content-Type": "application/json", **auth(srv)}), timeout=60)
        try:
            ids.append(r.json()["id"])
        except Exception:  # noqa: BLE001
            ids.append("?")
    sequential = any(re.fullmatch(r"\w+-\d{1,6}", i) for i in ids) or len(set(ids)) != len(ids)
    ok = r1 is not None and r1.status == 401 and r2 is not None and r2.status == 401 and not sequential
    return Outcome("/metrics 401 without key; random ids", f"{fmt(r1)}, {fmt(r2)}; ids {' '.join(ids)}", ok)


def _chat_body(srv: Server, stream: bool, max_tokens: int) -> bytes:
    return json.dumps({"model": srv.model_id, "stream": stream, "max_tokens": max_tokens, "temperature": 0.8,
                       "seed": 7, "ignore_eos": True,
                       "messages": [{"role": "user", "content": "Tell me a very long story about rivers."}]}).encode()


def make_disconnect(stream: bool, rst: bool, n: int):
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        req = request_bytes("POST", "/v1/chat/completions", _chat_body(srv, stream, 4000),
                            {"Content-Type": "application/json", **auth(srv)})
        socks = []
        for _ in range(n):
            s = connect(srv.port, 30)
            s.sendall(req)
            socks.append(s)
        if stream:
            for s in socks:  # wait for the first tokens, then leave mid-stream
                buf = b""
                deadline = time.monotonic() + 30
                while buf.count(b"data: ") < 2 and time.monotonic() < deadline:
                    d = s.recv(65536)
                    if not d:
                        break
                    buf += d
        else:  # wait until the requests are generating
            deadline = time.monotonic() + 20
            while srv.metrics().get("warden_kv_pages_used", 0) == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(0.5)
        busy = srv.metrics().get("warden_kv_pages_used", 0)
        for s in socks:
            if rst:
                set_rst_on_close(s)
            else:
                s.shutdown(socket.SHUT_WR)
            s.close()
        t0 = time.monotonic()
        pages = srv.wait_pages_zero(10)
        dt = time.monotonic() - t0
        return Outcome(f"pages {busy:.0f} -> 0 within 10s", f"pages {busy:.0f} -> {pages:.0f} in {dt:.1f}s",
                       busy > 0 and pages == 0)
    return attack


def make_sigterm(drain: float, streams: int, slow: int):
    """SIGTERM with streams running and slow clients attached: new requests 503, exit by
    drain + 1 s (+ slack), cut streams end with a server_shutdown error event and [DONE]."""
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        req = request_bytes("POST", "/v1/chat/completions", _chat_body(srv, True, 4000),
                            {"Content-Type": "application/json", **auth(srv)})
        socks = []
        for _ in range(streams):
            s = connect(srv.port, 30)
            s.sendall(req)
            socks.append(s)
        started = sum(s.recv(4096).startswith(b"HTTP/1.1 200") for s in socks)
        slow_res: dict = {}
        slow_t = threading.Thread(target=lambda: slow_res.update(run_slow_clients(
            srv.port, slow, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000, 1.0,
            drain + 8)), daemon=True)
        slow_t.start()
        # A keep-alive connection that already served a request before the signal.
        ka = connect(srv.port, 10, PROBE_SOURCE)
        ka.sendall(request_bytes("GET", "/health", headers=auth(srv)))
        ka_reader = Reader(ka)
        ka_reader.read()
        time.sleep(1.0)
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        new_req = request_bytes("POST", "/v1/completions", json.dumps(
            {"model": srv.model_id, "prompt": "x", "max_tokens": 1}).encode(),
            {"Content-Type": "application/json", **auth(srv)})
        # A new request is refused at once: 503, or the connection closed / refused (listener
        # closed); never served, never left hanging.
        try:
            ka.sendall(new_req)
            r = ka_reader.read()
            during = "keep-alive " + (fmt(r) if r or not ka_reader.eof else "closed")
            got503 = (r is not None and r.status == 503) or (r is None and ka_reader.eof)
        except OSError as e:
            during = "keep-alive " + type(e).__name__
            got503 = isinstance(e, (ConnectionResetError, BrokenPipeError))
        ka.close()
        t1 = time.monotonic()
        try:
            r, closed = exchange(srv.port, new_req, timeout=5, src=PROBE_SOURCE)
            hung = r is None and time.monotonic() - t1 > 4
            during += ", new conn " + ("hung" if hung else fmt(r) if r else "closed")
            got503 = got503 and ((r is not None and r.status == 503) or (r is None and not hung))
        except OSError as e:
            during += ", new conn " + type(e).__name__
            got503 = got503 and isinstance(e, (ConnectionRefusedError, ConnectionResetError))
        try:
            srv.proc.wait(timeout=drain + 15)
        except subprocess.TimeoutExpired:
            pass
        exit_s = time.monotonic() - t0
        ends = []
        for s in socks:
            s.settimeout(5)
            buf = b""
            try:
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    buf += d
            except OSError:
                pass
            s.close()
            tail = buf[-2000:]
            ends.append(b"server_shutdown" in tail and b"data: [DONE]" in tail)
        exited = srv.proc.poll() is not None
        ok = got503 and exited and exit_s <= drain + 2.5 and all(ends) and started == streams
        got = (f"new req {during}; exit {exit_s:.1f}s" + ("" if exited else " (still running)") +
               f"; {sum(ends)}/{started} streams end error+[DONE]")
        return Outcome(f"new requests refused (503/closed/refused); exit <= {drain + 1:.0f}s; error+[DONE]", got,
                       ok)
    return attack


def make_idle_exit(slow: int):
    """An idle server with slow clients attached exits within ~2 s of SIGTERM."""
    def attack(srv: Server, stop: threading.Event, size: dict) -> Outcome:
        slow_t = threading.Thread(target=run_slow_clients, args=(
            srv.port, slow, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + b"X" * 1000, 1.0, 20), daemon=True)
        slow_t.start()
        time.sleep(2.0)
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        try:
            srv.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        dt = time.monotonic() - t0
        exited = srv.proc.poll() is not None
        return Outcome("exit <= 2s", f"exit {dt:.1f}s" if exited else f"still running after {dt:.0f}s",
                       exited and dt <= 2.5)
    return attack


def cases(small: bool) -> list[Case]:
    """Every case; `small` is the CI size (tests/python/test_server_hostile.py)."""
    depth = 10**6
    slow_n, idle_n = (200, 2000)
    hdr_t = 2 if small else 10  # --header-timeout the slow cases run under
    big = (8 << 20) if small else (200 << 20)
    deep_args = ("--max-body", "4M")
    out = [
        Case("nested_1e6_top", "400 json_too_deep", make_nested("top", depth), deep_args),
        Case("nested_1e6_content", "400 json_too_deep", make_nested("content", depth), deep_args),
    ]
    for where in ("content", "name", "tool_calls", "tools"):
        out.append(Case(f"nested_150k_{where}", "400 json_too_deep", make_nested(where, 150000)))
    slow_args = ("--header-timeout", str(hdr_t), "--idle-timeout", str(hdr_t))
    out += [
        Case("slowloris", "", make_slowloris(slow_n, hdr_t + 4, hdr_t + 2), slow_args, probe_after=1.0),
        Case("idle_conns", "", make_idle(idle_n, hdr_t + 4, hdr_t + 2), slow_args, probe_after=1.0),
        Case("keepalive_idle", "", make_keepalive_idle(100, hdr_t + 2), slow_args, probe_after=1.0),
        Case("slow_body", "", make_slow_body(50, hdr_t + 6, hdr_t + 4), ("--body-timeout", str(hdr_t)),
             probe_after=1.0),
        Case("per_client_limit", "", make_per_client_limit(20)),
        Case("chunked_over_limit", "413", make_chunked_over(big)),
        Case("nolength_over_limit", "4xx", make_nolength_over(big)),
        Case("gzip_bomb", "415", make_gzip((20 << 20) if small else (200 << 20))),
        Case("content_length_over", "413", make_cl_over(50 << 20)),
        Case("header_count", "431", make_header_count(10000 if small else 1000000)),
        Case("header_bytes", "431", make_header_bytes((1 << 20) if small else (100 << 20))),
        Case("range_abuse", "200", make_range(1000)),
        Case("pipelining", "", pipelining),
        Case("cl_plus_te", "400", cl_te),
        Case("malformed_request_line", "400", malformed),
        Case("bad_header_lines", "400", bad_headers),
        Case("routes_405_404_depth", "", routes),
    ]
    for stream in (False, True):
        for rst in (False, True):
            name = f"disconnect_{'stream' if stream else 'nonstream'}_{'rst' if rst else 'fin'}"
            out.append(Case(name, "", make_disconnect(stream, rst, 4 if small else 8), probe_after=0.0,
                            probe_when_done=True))
    out += [
        Case("metrics_auth_random_ids", "", metrics_and_ids, api_keys=True),
        Case("auth_before_body", "401", make_auth_before_body(50 << 20), api_keys=True),
    ]
    out += [
        Case("sigterm_under_load", "", make_sigterm(3, 4, 20 if small else 100), ("--drain-timeout", "3"),
             fresh_server=True, probes=0),
        Case("sigterm_idle_slow_clients", "", make_idle_exit(20 if small else 100), fresh_server=True, probes=0),
    ]
    return out


# ------------------------------------------------------------------------------------ runner

class AttackProcess:
    """Runs a case's attack in a forked child and hands its Outcome back through a pipe."""

    def __init__(self, case: Case, srv: Server, size: dict):
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        self.rx, tx = ctx.Pipe(duplex=False)

        def child():
            try:
                out = case.attack(srv, threading.Event(), size)
            except Exception as e:  # noqa: BLE001 - a broken attack is a failed case
                out = Outcome(case.expected, f"harness error: {type(e).__name__}: {e}", False)
            tx.send(out)

        self.proc = ctx.Process(target=child, daemon=True)

    def start(self):
        self.proc.start()

    def is_alive(self) -> bool:
        return self.proc.is_alive()

    def join(self, timeout: float):
        self.proc.join(timeout)

    def result(self) -> list:
        if self.rx.poll(1):
            return [self.rx.recv()]
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        return []


class Harness:
    def __init__(self, warden: str, model: str | None = None, threads: int = 2, floor: float = 0.1,
                 keys_dir: str | None = None, base_probes: int = 5):
        self.warden, self.model, self.threads, self.floor = warden, model, threads, floor
        self.base_probes = base_probes
        self.srv: Server | None = None
        self.keys_file = None
        kd = Path(keys_dir or os.environ.get("TMPDIR", "/tmp"))
        self.keys_file = str(kd / f"warden-hostile-keys-{os.getpid()}.txt")
        Path(self.keys_file).write_text(f"{API_KEY} probe\n")
        raise_nofile()

    def server_for(self, case: Case) -> Server:
        keys = self.keys_file if case.api_keys else None
        if (self.srv is None or not self.srv.alive() or self.srv.args != case.server_args
                or (self.srv.key is not None) != case.api_keys):
            self.close()
            self.srv = Server(self.warden, case.server_args, self.model, self.threads, keys)
            for _ in range(3):  # warm-up: first-request allocations are not the attack's
                self.srv.probe()
        return self.srv

    def close(self):
        if self.srv is not None:
            self.srv.stop(timeout=30)
            self.srv = None

    def run(self, case: Case, size: dict | None = None) -> Result:
        if hasattr(case.attack, "prepare"):
            case.attack.prepare()
        srv = self.server_for(case)
        if srv.wait_pages_zero(10) != 0:
            # Work left over from an earlier case (a server that does not cancel it): each case
            # starts from an idle server.
            self.close()
            srv = self.server_for(case)
        base = statistics.median(srv.probe()[0] for _ in range(self.base_probes))
        srv.wait_resident(120)  # RSS grows while the KV pool is zeroed in the background
        rss_before = srv.rss_mib()
        stop = threading.Event()
        box: list = []

        def attack():
            try:
                box.append(case.attack(srv, stop, size or {}))
            except Exception as e:  # noqa: BLE001 - a broken attack is a failed case, not a crash
                box.append(Outcome(case.expected, f"harness error: {type(e).__name__}: {e}", False))

        if case.fresh_server:  # it signals and waits for the server: only its parent can
            t = threading.Thread(target=attack, daemon=True)
        else:  # its own process: building payloads never holds this one's GIL during a probe
            t = AttackProcess(case, srv, size or {})
        t.start()
        lat, statuses = [], []
        if case.probe_when_done:
            t.join(timeout=180)
        if case.probes:
            time.sleep(case.probe_after)
            for _ in range(case.probes):
                if not t.is_alive() and lat:
                    break
                dt, st = srv.probe(timeout=60)
                lat.append(dt)
                statuses.append(st)
                time.sleep(0.2)
        stop.set()
        t.join(timeout=180)
        if isinstance(t, AttackProcess):
            box = t.result()
        out = box[0] if box else Outcome(case.expected, "attack did not finish in 180 s", False)
        if case.fresh_server:
            alive = True  # the case itself ends the server; its outcome says whether it did
            pages, rss_after = 0.0, rss_before
            self.srv = None
        else:
            alive = srv.alive()
            pages = srv.wait_pages_zero(15) if alive else float("nan")
            time.sleep(0.5)
            rss_after = srv.rss_mib()
        during = statistics.median(lat) if lat else base
        lat_ok = (not lat) or (during <= 2 * base + self.floor and all(s == 200 for s in statuses))
        rss_ok = rss_after <= rss_before * 1.10
        return Result(case.name, out.expected, out.got, out.ok, alive, base, during, lat_ok,
                      rss_before, rss_after, rss_ok, pages, pages == 0, statuses)


def table(results: list[Result]) -> str:
    lines = ["| case | expected | got | latency (unloaded -> during) | RSS MiB | pages | pass |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        fails = [w for w, bad in (("status", not r.status_ok), ("died", not r.alive), ("latency", not r.latency_ok),
                                  ("rss", not r.rss_ok), ("pages", not r.pages_ok)) if bad]
        lat = f"{r.base_s * 1000:.0f} -> {r.during_s * 1000:.0f} ms ({r.during_s / max(r.base_s, 1e-9):.1f}x)"
        if any(s != 200 for s in r.probe_status):
            lat += f" probe {','.join(map(str, r.probe_status))}"
        rss = f"{r.rss_before:.0f} -> {r.rss_after:.0f} ({100 * (r.rss_after / r.rss_before - 1):+.0f}%)"
        lines.append(f"| {r.case} | {r.expected} | {r.got} | {lat} | {rss} | {r.pages:.0f} | "
                     f"{'pass' if r.ok else 'FAIL: ' + ', '.join(fails)} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warden", default=os.environ.get("WARDEN_BIN", str(ROOT / "build" / "warden")))
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--case", action="append", help="run only these cases (repeatable; substring match)")
    ap.add_argument("--small", action="store_true", help="the CI sizes")
    ap.add_argument("--latency-floor", type=float, default=0.1, help="seconds added to 2x unloaded (noise)")
    ap.add_argument("--out", help="write the table (markdown) here too")
    args = ap.parse_args()
    h = Harness(args.warden, args.model, args.threads, args.latency_floor)
    todo = [c for c in cases(args.small) if not args.case or any(s in c.name for s in args.case)]
    results = []
    try:
        for c in todo:
            t0 = time.monotonic()
            try:
                r = h.run(c)
            except Exception as e:  # noqa: BLE001 - e.g. the server would not start
                r = Result(c.name, c.expected, f"harness error: {type(e).__name__}: {e}", False, False,
                           0, 0, False, 0, 0, False, float("nan"), False)
                h.close()
            results.append(r)
            print(f"{c.name}: {'pass' if r.ok else 'FAIL'} ({time.monotonic() - t0:.1f}s) {r.got}", file=sys.stderr,
                  flush=True)
    finally:
        h.close()
        try:
            os.unlink(h.keys_file)
        except OSError:
            pass
    t = table(results)
    print(t)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(t + "\n")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
