#!/usr/bin/env python3
"""One-stream time to first token, split into the front end's part and the engine's, on running
OpenAI-compatible warden servers, requests alternating between them (A, B, B, A, ...).

Per request: the client's time to the first non-empty content chunk (ttft), and the engine's own
ttft from the final usage chunk's warden_timing (scheduler admission to first token). Their
difference is the front end's share: reading, parsing, templating, tokenizing, submitting, and
delivering the first token. Prints medians per server and, for two servers, the median of the
per-pair ratios and differences (what to report on a shared machine).

  python3 bench/server_ttft_split.py --ports 18601,18602 --requests 60 --max-tokens 4
  --client httplib: Nagle on and the request head and body in two writes, as cpp-httplib's client
  (warden bench) sends them; --client nodelay (default): TCP_NODELAY and one write.
Loopback only.
"""
import argparse
import json
import random
import socket
import statistics
import time

WORDS = ("the of and to in is that it was for on are with as his they at be this from have or by "
         "one had not but what all were when we there can an your which their said if do will each "
         "about how up out them then she many some so these would other into has more her two like "
         "him see time could make than first been its who now people my made over did down only "
         "way find use may water long little very after words called just where most know").split()


def model_name(port):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        buf = b""
        while d := s.recv(65536):
            buf += d
    return json.loads(buf.split(b"\r\n\r\n", 1)[1])["data"][0]["id"]


def one(port, model, prompt, max_tokens, client):
    body = json.dumps({"model": model, "max_tokens": max_tokens, "stream": True,
                       "stream_options": {"include_usage": True}, "temperature": 0.0,
                       "messages": [{"role": "user", "content": prompt}]}).encode()
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Accept: text/event-stream\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port))
    if client == "nodelay":
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(head + body)
    else:
        s.sendall(head)
        s.sendall(body)
    buf, t_tok = b"", None
    while d := s.recv(65536):
        now = time.perf_counter()
        buf += d
        if t_tok is None:
            for line in buf.split(b"\n"):
                if not line.startswith(b"data: {"):
                    continue
                try:
                    ch = json.loads(line[6:]).get("choices") or []
                except ValueError:
                    continue  # a line cut at a read boundary
                if ch and (ch[0].get("delta") or {}).get("content"):
                    t_tok = now
                    break
    s.close()
    engine_ttft = float("nan")
    for line in buf.split(b"\n"):
        if line.startswith(b"data: {") and b'"usage"' in line:
            j = json.loads(line[6:])
            if j.get("usage") and j.get("warden_timing"):
                engine_ttft = j["warden_timing"]["ttft_ms"]
    if t_tok is None:
        raise RuntimeError(f"port {port}: no content in the stream: {buf[:300]!r}")
    return (t_tok - t0) * 1e3, engine_ttft


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ports", required=True, help="comma-separated loopback ports")
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--input-words", type=int, default=64)
    ap.add_argument("--client", choices=["nodelay", "httplib"], default="nodelay")
    a = ap.parse_args()
    ports = [int(p) for p in a.ports.split(",")]
    models = {p: model_name(p) for p in ports}
    rng = random.Random(1)
    res = {p: [] for p in ports}
    for i in range(a.requests + 2):  # the first two of each are warm-up
        prompt = " ".join(rng.choice(WORDS) for _ in range(a.input_words))
        for p in (ports if i % 2 == 0 else ports[::-1]):
            r = one(p, models[p], prompt, a.max_tokens, a.client)
            if i >= 2:
                res[p].append(r)
    for p in ports:
        r = res[p]
        print(f"port {p}: n={len(r)} ttft p50 {statistics.median(x[0] for x in r):.1f} ms, "
              f"engine ttft p50 {statistics.median(x[1] for x in r):.1f} ms, front end p50 "
              f"{statistics.median(x[0] - x[1] for x in r):.2f} ms")
    if len(ports) == 2:
        x, y = res[ports[0]], res[ports[1]]
        ratio = sorted(b[0] / a_[0] for a_, b in zip(x, y))
        diff = sorted((b[0] - b[1]) - (a_[0] - a_[1]) for a_, b in zip(x, y))
        print(f"ttft {ports[1]}/{ports[0]}: median ratio {statistics.median(ratio):.3f} "
              f"(quartiles {ratio[len(ratio) // 4]:.3f}, {ratio[3 * len(ratio) // 4]:.3f}); "
              f"front end {ports[1]} - {ports[0]}: median {statistics.median(diff):+.2f} ms")


if __name__ == "__main__":
    main()
