"""The router chooses the prefill server of each request too (`warden router --prefill-kv`):
requests with the same user key go to one prefill server (affinity, as the prefill servers'
own request counters show), streams are relayed event by event, the choice reaches the decode server (X-Warden-Prefill), a decode
server refuses a prefill server it does not know with 400, and when the chosen prefill server
is dead the decode server retries on another one (nothing was emitted yet): the client gets
the same text as before. A decode server that speculates (n-gram, or an int4 self-draft) on
prompts computed by a prefill server gives, greedy, the text of a colocated server without
speculation, its drafts counted.
"""
from __future__ import annotations

import json
import signal
import time

import httpx
import pytest

from conftest import SMOLLM2_GGUF, WardenServer
from test_disagg import RouterProc, kv_port, metrics, wait_for, wait_pages_zero

KV = ("--kv-cache-bytes", "64M")
PROMPT = "Write a short poem about the sea:"


def ask(base, user, headers=None):
    return httpx.post(base + "/v1/completions", timeout=120, headers=headers or {},
                      json={"model": SMOLLM2_GGUF.name, "prompt": PROMPT, "max_tokens": 12,
                            "temperature": 0, "user": user})


def served(server) -> float:
    """Prompts a prefill server computed (its engine's finished requests)."""
    m = metrics(server.base)
    return sum(v for k, v in m.items() if k.startswith("warden_requests_finished_total"))


def test_router_picks_the_prefill_server_and_retries_on_another():
    pres, dec, router = [], None, None
    try:
        for _ in range(2):
            pres.append(WardenServer(*KV, "--role", "prefill"))
        kvs = [f"127.0.0.1:{kv_port(p)}" for p in pres]
        dec = WardenServer(*KV, "--role", "decode", "--prefill-kv", ",".join(kvs))
        router = RouterProc("--decode", dec.base, "--prefill", ",".join(p.base for p in pres),
                            "--prefill-kv", ",".join(kvs), "--health-interval", "30")
        before = [served(p) for p in pres]
        texts = set()
        for _ in range(3):
            r = ask(router.base, "alice")
            assert r.status_code == 200, r.text
            texts.add(r.json()["choices"][0]["text"])
        assert len(texts) == 1
        # Streamed through the router, events arrive as the decode server sends them, not
        # gathered until the response ends (12 decode steps take well over 10 ms).
        arrivals, text = [], ""
        with httpx.stream("POST", router.base + "/v1/completions", timeout=120,
                          json={"model": SMOLLM2_GGUF.name, "prompt": PROMPT, "max_tokens": 12,
                                "temperature": 0, "user": "alice", "stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    ch = json.loads(line[6:])["choices"]
                    if ch and ch[0]["text"]:
                        arrivals.append(time.perf_counter())
                        text += ch[0]["text"]
        assert text in texts and len(arrivals) >= 3
        assert arrivals[-1] - arrivals[0] > 0.01, arrivals
        # One prefill server computed all four (its request finishes just after the hand-off).
        wait_for(lambda: sum(served(p) for p in pres) - sum(before) >= 4)
        delta = [served(p) - b for p, b in zip(pres, before)]
        assert sorted(delta) == [0, 4], delta
        chosen = delta.index(4)
        # A prefill server the decode server does not know: refused, not ignored.
        bad = ask(dec.base, "alice", {"X-Warden-Prefill": "127.0.0.1:1"})
        assert bad.status_code == 400 and "X-Warden-Prefill" in bad.json()["error"]["message"]
        # The chosen one dies; the router (health checks 30 s apart) still names it: the decode
        # server's first fetch fails and its retry goes to the other prefill server.
        pres[chosen].proc.send_signal(signal.SIGKILL)
        pres[chosen].proc.wait(timeout=30)
        other = pres[1 - chosen]
        b_other = served(other)
        r = ask(router.base, "alice")
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] in texts
        assert wait_for(lambda: served(other) - b_other == 1)
        m = metrics(dec.base)
        assert m.get('warden_remote_prefill_total{outcome="retry"}', 0) >= 1
        assert wait_pages_zero(dec.base) == 0
        rm = httpx.get(router.base + "/metrics", timeout=30).text
        assert 'warden_router_decisions_total{reason="prefill_affinity"}' in rm
    finally:
        if router is not None:
            router.stop()
        for s in [dec, *pres]:
            if s is not None:
                s.stop()


COPY_PROMPT = ("Copy the list exactly.\nList: apple, banana, cherry, grape, lemon, mango, orange, "
               "peach, pear, plum.\nCopy: apple, banana,")


@pytest.mark.parametrize("spec", [("--spec", "ngram"),
                                  ("--spec", "draft", "--draft-weights", "int4-g32-asym")])
def test_speculating_decode_server_behind_the_router(spec):
    ref = pre = dec = router = None
    try:
        ref = WardenServer(*KV)
        pre = WardenServer(*KV, "--role", "prefill")
        kv = f"127.0.0.1:{kv_port(pre)}"
        dec = WardenServer(*KV, "--role", "decode", "--prefill-kv", kv, *spec, "--spec-tokens", "4")
        router = RouterProc("--decode", dec.base, "--prefill", pre.base, "--prefill-kv", kv)
        body = {"model": SMOLLM2_GGUF.name, "prompt": COPY_PROMPT, "max_tokens": 40,
                "temperature": 0}
        want = httpx.post(ref.base + "/v1/completions", json=body, timeout=120)
        got = httpx.post(router.base + "/v1/completions", json=body, timeout=120)
        assert want.status_code == 200 and got.status_code == 200, got.text
        assert got.json()["choices"][0]["text"] == want.json()["choices"][0]["text"]
        t = got.json()["warden_timing"]
        assert t["kv_transfer_bytes"] > 0
        assert 0 < t["spec_accepted"] <= t["spec_proposed"], t
        assert "spec_proposed" not in want.json()["warden_timing"]
        m = metrics(dec.base)
        assert m["warden_spec_accepted_tokens_total"] == t["spec_accepted"]
        assert m['warden_remote_prefill_total{outcome="ok"}'] == 1
        assert wait_pages_zero(dec.base) == 0
    finally:
        for s in (router, dec, pre, ref):
            if s is not None:
                s.stop()
