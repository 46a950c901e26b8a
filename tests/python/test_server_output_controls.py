"""Sampling and output controls through the official `openai` client: logit_bias forces and bans
tokens, min_tokens holds off EOS, stop_token_ids stop, include_stop_str_in_output keeps the stop
string, skip_special_tokens drops special tokens' text, best_of returns the most likely of the
choices n would have given with the same seed, and seeds are per choice.
"""
from __future__ import annotations

import httpx
import pytest

PROMPT = "The three primary colors are"


def tokenize(server, text):
    r = httpx.post(server.base + "/tokenize", json={"prompt": text, "add_special_tokens": False}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def complete(server, **kw):
    c = server.client()
    kw.setdefault("temperature", 0)
    return c.completions.create(model=server.model_id, prompt=kw.pop("prompt", PROMPT), **kw)


def test_logit_bias_forces_and_bans(server):
    (banana,) = tokenize(server, " banana")
    r = complete(server, max_tokens=4, logit_bias={str(banana): 100}, logprobs=0, extra_body={"ignore_eos": True})
    assert r.choices[0].text == " banana" * 4
    base = complete(server, max_tokens=1, logprobs=0)
    first = base.choices[0].logprobs.tokens[0]
    (first_id,) = tokenize(server, first)
    r = complete(server, max_tokens=1, logprobs=0, logit_bias={str(first_id): -100})
    assert r.choices[0].logprobs.tokens[0] != first
    # the reported logprobs stay the model's: the banned token is still the model's top choice
    r = complete(server, max_tokens=1, logprobs=1, logit_bias={str(first_id): -100})
    assert list(r.choices[0].logprobs.top_logprobs[0]) == [first]


def test_min_tokens_suppresses_eos(server):
    c = server.client()
    msgs = [{"role": "user", "content": "Say hi."}]
    r = c.chat.completions.create(model=server.model_id, messages=msgs, max_tokens=64, temperature=0)
    assert r.choices[0].finish_reason == "stop"
    k = r.usage.completion_tokens
    assert k < 50
    r2 = c.chat.completions.create(model=server.model_id, messages=msgs, max_tokens=64, temperature=0,
                                   extra_body={"min_tokens": k + 5})
    assert r2.usage.completion_tokens >= k + 5
    assert r2.choices[0].message.content.startswith(r.choices[0].message.content)


def test_stop_token_ids_and_include_stop_str(server):
    base = complete(server, max_tokens=12, logprobs=0, extra_body={"ignore_eos": True})
    toks = base.choices[0].logprobs.tokens
    k = next(i for i in range(3, len(toks)) if len(tokenize(server, toks[i])) == 1 and toks[i] not in toks[:i])
    (stop_id,) = tokenize(server, toks[k])
    r = complete(server, max_tokens=12, logprobs=0, extra_body={"ignore_eos": True, "stop_token_ids": [stop_id]})
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == "".join(toks[:k])
    text = base.choices[0].text
    stop = text[5:9]
    r = complete(server, max_tokens=12, stop=[stop], extra_body={"ignore_eos": True, "include_stop_str_in_output": True})
    assert r.choices[0].text == text[:text.index(stop) + len(stop)]
    r = complete(server, max_tokens=12, stop=[stop], extra_body={"ignore_eos": True})
    assert r.choices[0].text == text[:text.index(stop)]


def test_skip_special_tokens(server):
    # <|im_start|> (id 1) forced: its text is kept by default and dropped when asked
    body = {"ignore_eos": True}
    r = complete(server, max_tokens=2, logit_bias={"1": 100}, extra_body=body)
    assert r.choices[0].text == "<|im_start|>" * 2
    r = complete(server, max_tokens=2, logit_bias={"1": 100}, extra_body={**body, "skip_special_tokens": True})
    assert r.choices[0].text == "" and r.usage.completion_tokens == 2


def test_best_of_returns_the_most_likely(server):
    kw = dict(max_tokens=8, temperature=1.0, seed=7, extra_body={"ignore_eos": True})
    all3 = complete(server, n=3, logprobs=0, **kw)
    sums = [sum(ch.logprobs.token_logprobs) for ch in all3.choices]
    best = all3.choices[sums.index(max(sums))].text
    r = complete(server, n=1, best_of=3, **kw)
    assert len(r.choices) == 1 and r.choices[0].text == best
    assert r.choices[0].logprobs is None
    assert r.usage.completion_tokens == 24  # every generated choice counts
    r2 = complete(server, n=2, best_of=3, **kw)
    order = sorted(range(3), key=lambda i: -sums[i])[:2]
    assert [ch.text for ch in r2.choices] == [all3.choices[i].text for i in order]
    assert [ch.index for ch in r2.choices] == [0, 1]


def test_seed_per_choice(server):
    kw = dict(max_tokens=8, temperature=1.0, seed=11, n=3, extra_body={"ignore_eos": True})
    a, b = complete(server, **kw), complete(server, **kw)
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert len({c.text for c in a.choices}) > 1
    # choice j runs with seed + j: choice 1 of seed 11 is choice 0 of seed 12
    c = complete(server, **{**kw, "seed": 12, "n": 1})
    assert c.choices[0].text == a.choices[1].text


@pytest.mark.parametrize("body,param", [
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
    ({"logit_bias": {"5": 101}}, "logit_bias"),
    ({"logit_bias": {"999999999": 1}}, "logit_bias"),
    ({"logit_bias": [1]}, "logit_bias"),
    ({"min_tokens": 50, "max_tokens": 10}, "min_tokens"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"stop_token_ids": [10**9]}, "stop_token_ids"),
    ({"stop_token_ids": 5}, "stop_token_ids"),
    ({"best_of": 1, "n": 2}, "best_of"),
    ({"best_of": 3, "stream": True}, "best_of"),
    ({"suffix": "and then"}, "suffix"),
    ({"echo": "yes"}, "echo"),
    ({"prompt_logprobs": 2, "stream": True}, "prompt_logprobs"),
    ({"prompt_logprobs": 50}, "prompt_logprobs"),
])
def test_output_control_errors(server, body, param):
    r = httpx.post(server.base + "/v1/completions", timeout=60,
                   json={"model": server.model_id, "prompt": "x", "max_tokens": 10, **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
