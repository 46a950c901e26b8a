#!/usr/bin/env python3
"""A tiny OpenAI-compatible mock server with controlled timing, for testing load generators.

Streams /v1/completions and /v1/chat/completions as SSE with the first token at
--ttft-ms after the request arrives and one token every --itl-ms after that (scheduled on
absolute times, so sleep overshoot does not accumulate), then a usage chunk and [DONE].
--mode selects misbehaviour: ok, 500, 429, disconnect (closes the connection after
--fail-after tokens), hang (sends headers and then nothing), or mixed:K (every K-th
request returns 500). Prints "PORT <n>" on stdout once listening (use --port 0).
"""
import argparse
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    counter = 0
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.endswith("/v1/models"):
            self._json(200, {"object": "list", "data": [{"id": "mock-model", "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def _chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self):
        t0 = time.monotonic()
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
        a = self.server.args
        chat = self.path.endswith("/chat/completions")
        if not (chat or self.path.endswith("/v1/completions")):
            return self._json(404, {"error": {"message": "not found"}})
        with Handler.lock:
            Handler.counter += 1
            k = Handler.counter
        mode = a.mode
        if mode.startswith("mixed:"):
            mode = "500" if k % int(mode.split(":")[1]) == 0 else "ok"
        if mode in ("500", "429"):
            return self._json(int(mode), {"error": {"message": "mock failure %s" % mode}})
        if chat:
            prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in req.get("messages", []))
        else:
            prompt_tokens = len(str(req.get("prompt", "")).split())
        max_tokens = int(req.get("max_tokens", 16))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        if mode == "hang":
            time.sleep(a.hang_s)
            self.close_connection = True
            return
        base = {"id": "cmpl-%d" % k, "model": req.get("model", "mock-model"), "created": int(time.time())}
        for i in range(max_tokens):
            due = t0 + (a.ttft_ms + i * a.itl_ms) / 1000.0
            d = due - time.monotonic()
            if d > 0:
                time.sleep(d)
            if mode == "disconnect" and i >= a.fail_after:
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if mode == "error-event" and i >= a.fail_after:
                # llama.cpp's server reports some failures (e.g. its KV cache is full) as an SSE
                # `error:` field, then ends the stream.
                self._chunk(b'error: {"code": 500, "message": "Input prompt is too big compared to KV size."}\n\n')
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
                return
            fin = "length" if i == max_tokens - 1 and mode != "no-finish" else None
            if chat:
                ev = dict(base, object="chat.completion.chunk",
                          choices=[{"index": 0, "delta": {"content": " tok"}, "finish_reason": fin}])
            else:
                ev = dict(base, object="text_completion",
                          choices=[{"index": 0, "text": " tok", "finish_reason": fin}])
            self._chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")
        so = req.get("stream_options") or {}
        if so.get("include_usage"):
            ev = dict(base, choices=[], usage={"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                                               "total_tokens": prompt_tokens + max_tokens})
            self._chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ttft-ms", type=float, default=200)
    p.add_argument("--itl-ms", type=float, default=20)
    p.add_argument("--mode", default="ok")
    p.add_argument("--fail-after", type=int, default=3)
    p.add_argument("--hang-s", type=float, default=30)
    a = p.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    srv.args = a
    print("PORT %d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
