"""/metrics in vLLM's vocabulary (warden:X for vllm:X): finishes by reason (a stop string is a
"stop", not an abort), tokens counted while a request runs, the latency and per-request token
histograms, HTTP answers by route and status, process metrics; and the Grafana dashboard in
bench/grafana uses only metric names the server exports.
"""
from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest

from conftest import ROOT, WardenServer

PROMPT = "The three primary colors are"


def m(server):
    return server.metrics()


def delta(after, before, key):
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_stop_string_counts_as_stop(server):
    c = server.client()
    base = c.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=20, temperature=0,
                                extra_body={"ignore_eos": True}).choices[0].text
    before = m(server)
    r = c.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=20, temperature=0, stop=[base[6:10]],
                             extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "stop"
    after = m(server)
    assert delta(after, before, 'warden:request_success_total{finished_reason="stop"}') == 1
    assert delta(after, before, 'warden:request_success_total{finished_reason="abort"}') == 0
    assert delta(after, before, 'warden_requests_finished_total{tenant="default",reason="stop"}') == 1
    assert delta(after, before, 'warden_requests_finished_total{tenant="default",reason="cancelled"}') == 0
    assert delta(after, before, 'warden_request_aborts_total{tenant="default",reason="cancelled"}') == 0


def test_tokens_counted_live_and_histograms(server):
    prompt_len = server.client().completions.create(model=server.model_id, prompt=PROMPT, max_tokens=1).usage.prompt_tokens
    before = m(server)
    body = {"model": server.model_id, "prompt": PROMPT, "max_tokens": 400, "temperature": 0, "stream": True,
            "ignore_eos": True}
    seen, mid = 0, None
    with httpx.stream("POST", server.base + "/v1/completions", json=body, timeout=300) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                seen += 1
                if seen == 8:
                    mid = m(server)  # while the request still runs
    after = m(server)
    assert delta(mid, before, "warden:generation_tokens_total") >= 7
    assert delta(mid, before, "warden:prompt_tokens_total") == prompt_len
    assert delta(mid, before, 'warden:request_success_total{finished_reason="length"}') == 0
    assert delta(after, before, "warden:generation_tokens_total") == 400
    assert delta(after, before, 'warden:request_success_total{finished_reason="length"}') == 1
    assert delta(after, before, "warden:time_to_first_token_seconds_count") == 1
    assert delta(after, before, "warden:inter_token_latency_seconds_count") == 399
    for h in ("e2e_request_latency_seconds", "request_queue_time_seconds", "request_prefill_time_seconds",
              "request_decode_time_seconds", "request_inference_time_seconds",
              "request_time_per_output_token_seconds", "request_prompt_tokens", "request_generation_tokens"):
        assert delta(after, before, f"warden:{h}_count") == 1, h
    assert delta(after, before, "warden:request_generation_tokens_sum") == 400
    assert delta(after, before, "warden:request_prompt_tokens_sum") == prompt_len
    e2e = delta(after, before, "warden:e2e_request_latency_seconds_sum")
    parts = delta(after, before, "warden:request_queue_time_seconds_sum") + \
        delta(after, before, "warden:request_inference_time_seconds_sum")
    assert abs(e2e - parts) < 1e-3
    assert 0.0 <= after["warden:kv_cache_usage_perc"] <= 1.0
    assert after["warden:num_requests_running"] >= 0 and after["warden:num_requests_waiting"] >= 0


@pytest.fixture(scope="module")
def small_chunk_server():
    # 16-token prefill chunks and no prefix cache: a long prompt takes many steps to prefill.
    s = WardenServer("--max-batch-tokens", "16", "--no-prefix-cache", "--kv-cache-bytes", "128M")
    yield s
    s.stop()


def test_prompt_tokens_counted_per_prefill_chunk(small_chunk_server):
    s = small_chunk_server
    prompt = " ".join(f"item {i}," for i in range(200))
    n = len(httpx.post(s.base + "/tokenize", json={"model": s.model_id, "prompt": prompt},
                       timeout=60).json()["tokens"])
    assert n > 500
    before = m(s)["warden:prompt_tokens_total"]
    done = threading.Event()
    result = {}

    def run():
        try:
            result["r"] = httpx.post(s.base + "/v1/completions", timeout=300,
                                     json={"model": s.model_id, "prompt": prompt, "max_tokens": 1})
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    seen = []
    deadline = time.time() + 300
    while not done.is_set() and time.time() < deadline:
        seen.append(m(s)["warden:prompt_tokens_total"] - before)
        time.sleep(0.05)
    assert done.wait(60)
    assert result["r"].status_code == 200, result["r"].text
    assert result["r"].json()["usage"]["prompt_tokens"] == n
    assert m(s)["warden:prompt_tokens_total"] - before == n
    partial = sorted({v for v in seen if 0 < v < n})
    # Counted as chunks complete: values strictly between nothing and the whole prompt, each a
    # whole number of 16-token chunks, seen while the request was still being prefilled.
    assert partial, f"the counter never moved mid-prefill: {sorted(set(seen))}"
    assert all(v % 16 == 0 for v in partial), partial
    assert seen == sorted(seen)


def test_http_requests_by_route_and_status(server):
    before = m(server)
    httpx.post(server.base + "/v1/completions", json={"model": server.model_id, "prompt": "x", "max_tokens": 1})
    httpx.post(server.base + "/v1/completions", json={"model": server.model_id, "prompt": "x", "bogus": 1})
    httpx.get(server.base + "/nothing/here")
    httpx.get(server.base + "/v1/completions")
    after = m(server)
    k = 'warden:http_requests_total{handler="%s",method="%s",status="%d"}'
    assert delta(after, before, k % ("/v1/completions", "POST", 200)) == 1
    assert delta(after, before, k % ("/v1/completions", "POST", 400)) == 1
    assert delta(after, before, k % ("other", "GET", 404)) == 1
    assert delta(after, before, k % ("/v1/completions", "GET", 405)) == 1


def test_process_metrics(server):
    a = m(server)
    assert a["process_resident_memory_bytes"] > 20e6
    assert a["process_virtual_memory_bytes"] >= a["process_resident_memory_bytes"]
    assert a["process_cpu_seconds_total"] > 0
    assert 3 < a["process_open_fds"] <= a["process_max_fds"]
    assert a["process_start_time_seconds"] > 1.6e9


def test_grafana_dashboard_uses_exported_names(server):
    text = httpx.get(server.base + "/metrics", timeout=30).text
    exported = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            exported.add(line.split()[2])
    dash = json.loads((ROOT / "bench/grafana/warden.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs.append(dash["templating"]["list"][0]["query"])
    used = set()
    for e in exprs:
        for name in re.findall(r"\b((?:warden[:_]|process_)[A-Za-z0-9_:]+)", e):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            used.add(base)
    assert len(used) >= 15
    missing = sorted(u for u in used if u not in exported)
    assert not missing, missing
