"""Prompt logprobs for evaluation: /v1/completions with echo + logprobs, max_tokens 0 and vLLM's
prompt_logprobs give the log-softmax of `warden logits` (every position, the same model and
weights) for each prompt token; chunked prefill and batching change nothing; and the exact
requests lm-evaluation-harness' `local-completions` model sends for loglikelihood and
loglikelihood_rolling (lm_eval/models/openai_completions.py: prompt as token ids, echo, max_tokens
1, logprobs 1, temperature 0; the answer is sum(token_logprobs[ctxlen:-1]) and whether each of
those tokens is the top one) give the loglikelihoods computed from `warden logits`.
"""
from __future__ import annotations

import json
import math
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from conftest import ROOT, SMOLLM2_GGUF, WARDEN_BIN

VOCAB = 49152
TOL = 2e-3  # float32 log-softmax of the same logits, summed over a few tokens


def tokenize(server, text, special=False):
    r = httpx.post(server.base + "/tokenize", json={"prompt": text, "add_special_tokens": special}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def reference_logprobs(ids: list[int]) -> list[list[float]]:
    """Full log-softmax at every position from `warden logits --top VOCAB` (the server's own
    weight and activation formats: no --dtype/--weights, as `warden serve` was started)."""
    p = subprocess.run([str(WARDEN_BIN), "logits", "-m", str(SMOLLM2_GGUF), "--tokens", ",".join(map(str, ids)),
                        "--top", str(VOCAB), "--threads", "2"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = []
    for line in p.stdout.splitlines():
        if not line.startswith("{"):
            continue
        obj = json.loads(line)
        logits = [0.0] * VOCAB
        for i, v in obj["top"]:
            logits[i] = v
        m = max(logits)
        lse = m + math.log(sum(math.exp(v - m) for v in logits))
        rows.append([v - lse for v in logits])
    assert len(rows) == len(ids)
    return rows


def completion(server, **body):
    r = httpx.post(server.base + "/v1/completions", json={"model": server.model_id, **body}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


TEXT = "The capital of France is Paris, and the capital of Italy is Rome."


@pytest.fixture(scope="module")
def text_ids(server):
    return tokenize(server, TEXT)


@pytest.fixture(scope="module")
def ref(text_ids):
    return reference_logprobs(text_ids)


def test_echo_logprobs_equal_warden_logits(server, text_ids, ref):
    out = completion(server, prompt=text_ids, max_tokens=1, logprobs=1, echo=True, temperature=0)
    ch = out["choices"][0]
    lp = ch["logprobs"]
    n = len(text_ids)
    assert len(lp["token_logprobs"]) == n + 1  # the prompt, then the generated token
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert ch["text"].startswith(TEXT)
    for i in range(1, n):
        want = ref[i - 1][text_ids[i]]
        assert abs(lp["token_logprobs"][i] - want) < TOL, (i, lp["token_logprobs"][i], want)
        # the top alternative is the reference's argmax
        best = max(range(VOCAB), key=lambda t: ref[i - 1][t])
        assert abs(max(lp["top_logprobs"][i].values()) - ref[i - 1][best]) < TOL
    # the generated token is the greedy one after the prompt, with its logprob
    assert abs(lp["token_logprobs"][n] - max(ref[n - 1])) < TOL
    assert out["usage"]["completion_tokens"] == 1


def test_max_tokens_zero_finishes_by_length_even_on_a_stop_token(server):
    # The engine computes one token the answer never shows; a stop token sampled there (forced
    # here by logit_bias on the end-of-text tokens) must not turn the finish into "stop".
    for _ in range(3):
        out = completion(server, prompt=TEXT, max_tokens=0, logprobs=0, echo=True,
                         logit_bias={"0": 100, "2": 100})
        ch = out["choices"][0]
        assert ch["text"] == TEXT and ch["finish_reason"] == "length", ch
        assert out["usage"]["completion_tokens"] == 0


def test_max_tokens_zero_and_prompt_logprobs(server, text_ids, ref):
    out = completion(server, prompt=TEXT, max_tokens=0, logprobs=0, echo=True)
    ch = out["choices"][0]
    assert ch["text"] == TEXT and ch["finish_reason"] == "length"
    assert out["usage"]["completion_tokens"] == 0
    assert len(ch["logprobs"]["token_logprobs"]) == len(text_ids)
    # vLLM's prompt_logprobs: [None, {id: {logprob, rank, decoded_token}}, ...]
    out = completion(server, prompt=text_ids, max_tokens=0, prompt_logprobs=2)
    pl = out["choices"][0]["prompt_logprobs"]
    assert out["choices"][0]["text"] == ""
    assert pl[0] is None and len(pl) == len(text_ids)
    for i in range(1, len(text_ids)):
        e = pl[i][str(text_ids[i])]
        want = ref[i - 1][text_ids[i]]
        assert abs(e["logprob"] - want) < TOL
        above, near = (sum(1 for v in ref[i - 1] if v > want + d) for d in (1e-4, -1e-4))
        assert 1 + above <= e["rank"] <= near, (i, e, above, near)
        assert len(pl[i]) in (2, 3)  # the top 2, plus the prompt token when it is not among them
    # chat: at the response's top level
    r = httpx.post(server.base + "/v1/chat/completions", timeout=120,
                   json={"model": server.model_id, "messages": [{"role": "user", "content": "Hi"}],
                         "max_tokens": 1, "prompt_logprobs": 0})
    assert r.status_code == 200, r.text
    assert r.json()["prompt_logprobs"][0] is None and len(r.json()["prompt_logprobs"]) > 5
    # max_tokens 0 without asking for the prompt's logprobs is still refused
    r = httpx.post(server.base + "/v1/completions", json={"model": server.model_id, "prompt": "x", "max_tokens": 0})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"


def test_echo_streaming_equals_non_streaming(server, text_ids):
    full = completion(server, prompt=TEXT, max_tokens=6, logprobs=1, echo=True, temperature=0)
    text, lps = "", []
    with httpx.stream("POST", server.base + "/v1/completions", timeout=120,
                      json={"model": server.model_id, "prompt": TEXT, "max_tokens": 6, "logprobs": 1, "echo": True,
                            "temperature": 0, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                ch = json.loads(line[6:])["choices"][0]
                text += ch["text"]
                lps += ch["logprobs"]["token_logprobs"] if ch["logprobs"] else []
    assert text == full["choices"][0]["text"]
    assert lps == full["choices"][0]["logprobs"]["token_logprobs"]


def test_prompt_logits_keep_batch_invariance_and_chunking(server):
    """A long prompt (two prefill chunks) with echo: every position's top token is `warden
    logits`' argmax, and greedy text is the same with and without echo, alone or beside other
    requests."""
    words = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma "
             "tau upsilon phi chi psi omega ").split()
    text = " ".join(words[i % len(words)] + str(i) for i in range(150))
    ids = tokenize(server, text)
    assert len(ids) > 300
    p = subprocess.run([str(WARDEN_BIN), "logits", "-m", str(SMOLLM2_GGUF), "--tokens", ",".join(map(str, ids)),
                        "--top", "2", "--threads", "2"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    tops = [json.loads(l)["top"] for l in p.stdout.splitlines() if l.startswith("{")]
    plain = completion(server, prompt=ids, max_tokens=8, temperature=0)["choices"][0]["text"]

    def echo():
        return completion(server, prompt=ids, max_tokens=8, temperature=0, echo=True, logprobs=1, prompt_logprobs=1)

    def other():
        return completion(server, prompt="Once upon a time", max_tokens=16, temperature=0)

    with ThreadPoolExecutor(4) as ex:
        futs = [ex.submit(echo), ex.submit(other), ex.submit(other), ex.submit(echo)]
        outs = [f.result() for f in futs]
    for out in (outs[0], outs[3]):
        ch = out["choices"][0]
        assert ch["text"][len(ch["text"]) - len(plain):] == plain
        assert len(ch["logprobs"]["token_logprobs"]) == len(ids) + 8
        pl = ch["prompt_logprobs"]
        assert len(pl) == len(ids)
        for i in range(1, len(ids)):
            (t1, l1), (t2, l2) = tops[i - 1]
            if l1 - l2 > 1e-3:  # not a near tie: the server's top token is the reference's
                (top,) = [int(t) for t, e in pl[i].items() if e["rank"] == 1]
                assert top == t1, (i, pl[i], tops[i - 1])


# ------------------------------------------------ lm-evaluation-harness' local-completions shape

def lmeval_loglikelihood(server, context_ids, continuation_ids):
    """What lm-eval does for one loglikelihood request (tokenized_requests=True)."""
    ids = context_ids + continuation_ids
    out = completion(server, prompt=[ids], temperature=0, max_tokens=1, logprobs=1, seed=1234, echo=True)
    ctxlen = len(context_ids)
    (choice,) = out["choices"]
    tl = choice["logprobs"]["token_logprobs"][ctxlen:-1]
    tops = choice["logprobs"]["top_logprobs"][ctxlen:-1]
    greedy = all(t == max(top.values()) for t, top in zip(tl, tops))
    return sum(tl), greedy


def test_lmeval_loglikelihood_shape(server):
    """Multiple choice from tests/data/lmeval_tiny: the summed continuation logprobs equal the
    reference's, and the model prefers the right answer where the reference does."""
    docs = [json.loads(l) for l in (ROOT / "tests/data/lmeval_tiny/tiny_mc.jsonl").read_text().splitlines() if l]
    for doc in docs[:2]:
        ctx = tokenize(server, doc["question"] + "\nAnswer:")
        scores, wants = [], []
        for choice in doc["choices"]:
            cont = tokenize(server, " " + choice)
            got, greedy = lmeval_loglikelihood(server, ctx, cont)
            ref = reference_logprobs(ctx + cont)
            want = sum(ref[len(ctx) + j - 1][t] for j, t in enumerate(cont))
            want_greedy = all(ref[len(ctx) + j - 1][t] == max(ref[len(ctx) + j - 1]) for j, t in enumerate(cont))
            assert abs(got - want) < TOL * len(cont), (doc["question"], choice, got, want)
            assert greedy == want_greedy
            scores.append(got)
            wants.append(want)
        assert scores.index(max(scores)) == wants.index(max(wants))


def prefix_token(server):
    """lm-eval's prefix_token_id with the remote tokenizer: the BOS token's id, else EOS's."""
    info = httpx.get(server.base + "/tokenizer_info", timeout=30).json()
    return tokenize(server, info["bos_token"] or info["eos_token"])[0]


def test_lmeval_loglikelihood_rolling_shape(server):
    """loglikelihood_rolling on a short document: one window after lm-eval's prefix token,
    every document token scored."""
    eot = prefix_token(server)
    doc = tokenize(server, "Warden serves language models to agents on one machine.")
    got, _ = lmeval_loglikelihood(server, [eot], doc)
    ref = reference_logprobs([eot] + doc)
    want = sum(ref[j][t] for j, t in enumerate(doc))
    assert abs(got - want) < TOL * len(doc)
    assert got < -5  # a real loglikelihood, not the 0 an ignored echo gave


def test_lmeval_itself(server, tmp_path):
    """lm-evaluation-harness itself (`local-completions`, the remote tokenizer backend through
    /tokenizer_info and /tokenize) on tests/data/lmeval_tiny: every loglikelihood and rolling
    loglikelihood it records equals the one computed from `warden logits`. lm-eval lives in its
    own venv (datasets, pandas, scikit-learn: ~760 MB): scripts/test.sh installs it
    (requirements-lmeval.txt, lm-eval 0.4.13) and sets WARDEN_LM_EVAL to its `lm_eval`; run
    alone, this test skips unless WARDEN_LM_EVAL is set."""
    import os
    exe = os.environ.get("WARDEN_LM_EVAL")
    if not exe:
        pytest.skip("WARDEN_LM_EVAL not set (scripts/test.sh installs lm-eval into .venv-lmeval and sets it)")
    data = ROOT / "tests/data/lmeval_tiny"
    args = (f"base_url={server.base}/v1/completions,model={server.model_id},tokenizer_backend=remote,"
            "num_concurrent=1,max_retries=1")
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    p = subprocess.run([exe, "run", "--model", "local-completions", "--model_args", args, "--tasks",
                        f"{data}/tiny_mc.yaml,{data}/tiny_rolling.yaml", "--output_path", str(tmp_path),
                        "--log_samples"], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    checked = 0
    for f in tmp_path.glob("*/samples_*.jsonl"):
        for line in f.read_text().splitlines():
            s = json.loads(line)
            for k, arg in enumerate(s["arguments"].values()):
                resp = s["resps"][k][0]
                got = float(resp[0] if isinstance(resp, list) else resp)
                if "arg_1" in arg:  # loglikelihood(context, continuation), lm-eval's token split
                    ctx, cont = arg["arg_0"], arg["arg_1"]
                    n_space = len(ctx) - len(ctx.rstrip())
                    ctx, cont = ctx[:len(ctx) - n_space], ctx[len(ctx) - n_space:] + cont
                    whole, c = tokenize(server, ctx + cont), tokenize(server, ctx)
                    ids, start = whole, len(c)
                else:  # loglikelihood_rolling: one window after the end-of-text token
                    ids, start = [prefix_token(server)] + tokenize(server, arg["arg_0"]), 1
                ref = reference_logprobs(ids)
                want = sum(ref[j - 1][ids[j]] for j in range(start, len(ids)))
                assert abs(got - want) < TOL * (len(ids) - start), (arg, got, want)
                checked += 1
    assert checked == 16 + 4
