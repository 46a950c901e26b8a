"""`warden serve` driven by the official `openai` client: every endpoint and option, streaming
and not, and the error cases. One server (session fixture) on 127.0.0.1 with the default model;
extra servers for API keys / queue overflow live in test_server_load.py.
"""
from __future__ import annotations

import json
import math

import httpx
import openai
import pytest

PROMPT = "The three primary colors are"


def greedy(server, prompt=PROMPT, n_tokens=24, **kw):
    c = server.client()
    return c.completions.create(model=server.model_id, prompt=prompt, max_tokens=n_tokens, temperature=0, **kw)


def test_health_and_models(server):
    r = httpx.get(server.base + "/health", timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "ok"
    models = server.client().models.list()
    assert [m.id for m in models.data] == [server.model_id]


def test_completion_matches_warden_run(server):
    """The server's greedy continuation equals `warden run --temp 0` (same model, same prompt)."""
    import subprocess
    from conftest import ROOT, SMOLLM2_GGUF, WARDEN_BIN
    r = greedy(server, n_tokens=20, extra_body={"ignore_eos": True})
    ch = r.choices[0]
    assert ch.finish_reason == "length"
    assert r.usage.completion_tokens == 20
    p = subprocess.run([str(WARDEN_BIN), "run", "-m", str(SMOLLM2_GGUF), "-p", PROMPT, "-n", "20", "--temp", "0",
                        "--ignore-eos", "--threads", "2"], capture_output=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert ch.text == p.stdout.decode()[:-1]  # run adds a newline
    t = r.model_extra["warden_timing"]
    assert set(t) == {"queue_ms", "prefill_ms", "ttft_ms", "tpot_ms", "total_ms"}
    assert 0 <= t["queue_ms"] <= t["ttft_ms"] <= t["total_ms"]
    assert t["tpot_ms"] > 0


def test_streaming_equals_non_streaming(server):
    c = server.client()
    full = greedy(server, n_tokens=30)
    parts, finish, usage = [], None, None
    stream = c.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=30, temperature=0, stream=True,
                                  stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            parts.append(ch.text)
            finish = ch.finish_reason or finish
    assert "".join(parts) == full.choices[0].text
    assert finish == full.choices[0].finish_reason
    assert usage.completion_tokens == full.usage.completion_tokens
    assert usage.prompt_tokens == full.usage.prompt_tokens


def test_sse_wire_format(server):
    body = {"model": server.model_id, "prompt": PROMPT, "max_tokens": 5, "temperature": 0, "stream": True}
    with httpx.stream("POST", server.base + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [l for l in r.iter_lines() if l]
    assert lines[-1] == "data: [DONE]"
    assert all(l.startswith("data: ") for l in lines)
    for l in lines[:-1]:
        json.loads(l[6:])


def test_chat_completion(server):
    c = server.client()
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a primary color."}]
    r = c.chat.completions.create(model=server.model_id, messages=msgs, max_tokens=16, temperature=0)
    ch = r.choices[0]
    assert ch.message.role == "assistant"
    assert ch.message.content.strip()
    assert ch.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 10
    # streaming gives the same text, role first
    deltas, roles = [], []
    for chunk in c.chat.completions.create(model=server.model_id, messages=msgs, max_tokens=16, temperature=0,
                                           stream=True):
        for d in chunk.choices:
            if d.delta.role:
                roles.append(d.delta.role)
            if d.delta.content:
                deltas.append(d.delta.content)
    assert roles == ["assistant"]
    assert "".join(deltas) == ch.message.content


def test_chat_template_prompt_tokens(server):
    """The chat prompt is the model's template rendered (SmolLM2: <|im_start|>role\\n...<|im_end|>)."""
    from conftest import SMOLLM2_GGUF
    c = server.client()
    msgs = [{"role": "user", "content": "Hi"}]
    r = c.chat.completions.create(model=server.model_id, messages=msgs, max_tokens=1, temperature=0)
    # Same text through /v1/completions (no BOS for SmolLM2) must count the same prompt tokens.
    text = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n" \
           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    r2 = c.completions.create(model=server.model_id, prompt=text, max_tokens=1, temperature=0)
    assert r.usage.prompt_tokens == r2.usage.prompt_tokens
    assert r.choices[0].message.content == r2.choices[0].text


def test_max_tokens_and_max_completion_tokens(server):
    c = server.client()
    r = c.chat.completions.create(model=server.model_id, messages=[{"role": "user", "content": "Count to 50"}],
                                  max_completion_tokens=3, temperature=0)
    assert r.usage.completion_tokens <= 3
    r = greedy(server, n_tokens=7, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 7 and r.choices[0].finish_reason == "length"


def test_stop_strings_spanning_tokens(server):
    base = greedy(server, n_tokens=30, extra_body={"ignore_eos": True}).choices[0].text
    assert len(base) > 20
    stop = base[8:14]  # a few characters that straddle token boundaries
    cut = base.index(stop)
    for stream in (False, True):
        c = server.client()
        if stream:
            text, finish = "", None
            for chunk in c.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=30, temperature=0,
                                              stop=[stop, "zzzz-never"], stream=True):
                for ch in chunk.choices:
                    text += ch.text
                    finish = ch.finish_reason or finish
        else:
            r = c.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=30, temperature=0,
                                     stop=stop)
            text, finish = r.choices[0].text, r.choices[0].finish_reason
        assert text == base[:cut], (stream, stop, text, base)
        assert finish == "stop"


def test_seed_reproducible(server):
    c = server.client()
    kw = dict(model=server.model_id, prompt="Once upon a time", max_tokens=20, temperature=1.0, top_p=0.95)
    a = c.completions.create(seed=1234, **kw).choices[0].text
    b = c.completions.create(seed=1234, **kw).choices[0].text
    outs = {c.completions.create(seed=s, **kw).choices[0].text for s in range(5)}
    assert a == b
    assert len(outs) > 1


def test_n_choices(server):
    c = server.client()
    r = c.completions.create(model=server.model_id, prompt="Once upon a time", max_tokens=8, temperature=1.0,
                             n=3, seed=5)
    assert sorted(ch.index for ch in r.choices) == [0, 1, 2]
    assert r.usage.completion_tokens == sum(1 for _ in range(0)) + r.usage.completion_tokens
    g = greedy(server, n_tokens=8, n=2)
    assert g.choices[0].text == g.choices[1].text
    r = c.chat.completions.create(model=server.model_id, messages=[{"role": "user", "content": "Hi"}],
                                  max_tokens=4, n=2, temperature=0)
    assert len(r.choices) == 2


def test_penalties_follow_openai_formula(server):
    """Greedy + penalty: each chosen token maximises logprob - f*count - p*(count>0) over the
    top candidates (counts over the tokens generated so far); on a repeating pattern that changes
    the output."""
    prompt = "a b a b a b a b a b a b a b a b"
    plain = greedy(server, prompt, n_tokens=16, extra_body={"ignore_eos": True}).choices[0].text
    for f, p in ((1.5, 0.0), (0.0, 1.5), (0.5, 0.5)):
        r = greedy(server, prompt, n_tokens=16, logprobs=5, frequency_penalty=f, presence_penalty=p,
                   extra_body={"ignore_eos": True})
        lp = r.choices[0].logprobs
        counts: dict[str, int] = {}
        for tok, top in zip(lp.tokens, lp.top_logprobs):
            score = lambda t: top[t] - f * counts.get(t, 0) - p * (counts.get(t, 0) > 0)
            best = max(top, key=score)
            if tok in top:
                assert score(tok) >= score(best) - 1e-4, (f, p, tok, best, top, counts)
            counts[tok] = counts.get(tok, 0) + 1
        assert r.choices[0].text != plain, (f, p)


def test_completion_logprobs(server):
    r = greedy(server, n_tokens=6, logprobs=3, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert "".join(lp.tokens).replace("Ġ", " ") or True
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert l <= 0
        assert len(top) == 3
        # greedy: the chosen token is the most likely one
        assert math.isclose(max(top.values()), l, abs_tol=1e-5)
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-5


def test_chat_logprobs(server):
    c = server.client()
    r = c.chat.completions.create(model=server.model_id, messages=[{"role": "user", "content": "Hi"}],
                                  max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert 1 <= len(content) <= 4
    for e in content:
        assert len(e.top_logprobs) == 2
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
        assert math.isclose(e.top_logprobs[0].logprob, e.logprob, abs_tol=1e-5)
        assert bytes(e.bytes).decode("utf-8", "replace") or e.bytes == []


def test_prompt_as_token_ids_and_batch(server):
    a = greedy(server, n_tokens=5)
    ids_resp = greedy(server, prompt=[1, 504, 1675, 3595, 3955, 359], n_tokens=5)
    assert ids_resp.usage.prompt_tokens == 6
    r = greedy(server, prompt=[PROMPT, PROMPT], n_tokens=5)
    assert [ch.text for ch in sorted(r.choices, key=lambda c: c.index)] == [a.choices[0].text] * 2


@pytest.mark.parametrize("body,status,param", [
    ({"prompt": "x"}, 400, "model"),
    ({"model": "nope", "prompt": "x"}, 404, "model"),
    ({"prompt": "x", "temperature": -1}, 400, "temperature"),
    ({"prompt": "x", "temperature": "hot"}, 400, "temperature"),
    ({"prompt": "x", "top_p": 0}, 400, "top_p"),
    ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": 10**30}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": 10**9}, 400, "max_tokens"),
    ({"prompt": "x", "n": 0}, 400, "n"),
    ({"prompt": "x", "n": 1000}, 400, "n"),
    ({"prompt": "x", "frequency_penalty": 3}, 400, "frequency_penalty"),
    ({"prompt": "x", "presence_penalty": -2.5}, 400, "presence_penalty"),
    ({"prompt": "x", "logprobs": 50}, 400, "logprobs"),
    ({"prompt": "x", "stop": 5}, 400, "stop"),
    ({"prompt": "x", "stop": [""]}, 400, "stop"),
    ({"prompt": 5}, 400, "prompt"),
    ({"prompt": ""}, 400, "prompt"),
    ({"prompt": [10**9]}, 400, "prompt"),
    ({"prompt": "x", "seed": "abc"}, 400, "seed"),
    ({"prompt": "x", "stream": "yes"}, 400, "stream"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
])
def test_completion_errors(server, body, status, param):
    body = {"model": server.model_id, **body} if "model" not in body and status != 400 or param != "model" else body
    r = httpx.post(server.base + "/v1/completions", json=body, timeout=60)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == param
    assert err["message"]


@pytest.mark.parametrize("body,param", [
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 99}, "top_logprobs"),
])
def test_chat_errors(server, body, param):
    r = httpx.post(server.base + "/v1/chat/completions", json={"model": server.model_id, **body}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_errors_through_openai_client(server):
    c = server.client()
    with pytest.raises(openai.NotFoundError):
        c.completions.create(model="missing", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=server.model_id, prompt="x", max_tokens=1, temperature=5)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=server.model_id, prompt="x " * 9000, max_tokens=10)
    assert e.value.body["code"] == "context_length_exceeded"


def test_unknown_fields_refused_and_bad_json(server):
    r = httpx.post(server.base + "/v1/completions", timeout=60,
                   json={"model": server.model_id, "prompt": "x", "max_tokens": 1, "frobnicate": [1, 2]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "frobnicate"
    r = httpx.post(server.base + "/v1/completions", content=b'{"model": ', timeout=60,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(server.base + "/v1/completions", content=b"x" * (2 << 20), timeout=60)
    assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.get(server.base + "/v1/nothing", timeout=60)
    assert r.status_code == 404 and "error" in r.json()


def test_metrics_exposition(server):
    greedy(server, n_tokens=3)
    m = server.metrics()
    for name in ("warden_queue_seconds", "warden_prefill_seconds", "warden_ttft_seconds", "warden_tpot_seconds",
                 "warden_e2e_seconds"):
        assert m[name + '_count{tenant="default"}'] >= 1
        assert m[name + '_bucket{tenant="default",le="+Inf"}'] == m[name + '_count{tenant="default"}']
    assert m['warden_generation_tokens_total{tenant="default"}'] >= 3
    assert m['warden_prompt_tokens_total{tenant="default"}'] >= 1
    for g in ("warden_requests_running", "warden_requests_waiting", "warden_kv_pages_used", "warden_kv_pages_free",
              "warden_kv_bytes_used", "warden_preemptions_total", "warden_integrity_violations_total"):
        assert g in m
    assert m["warden_kv_pages_used"] == 0
