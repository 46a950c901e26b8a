"""What `warden serve` accepts, checked against what it says it accepts: no request field is
silently ignored (unknown and unimplemented fields are a 400 naming them, also through the
official `openai` client's extra_body), /openapi.json lists exactly the routes the server answers
and the request fields it implements, and the tokenizer endpoints (vLLM's shapes), /version and
GET /v1/models/{id}.
"""
from __future__ import annotations

import httpx
import openai
import pytest

# Paths other servers answer that warden does not: each must be a 404 (the document's
# "vice versa": nothing outside it is served).
NOT_SERVED = ["/v1/embeddings", "/v1/responses", "/pooling", "/score", "/v1/score", "/rerank",
              "/v1/audio/transcriptions", "/ping", "/server_info", "/load", "/v1/tokenize",
              "/v1", "/", "/v1/completions/render", "/invocations", "/reset_prefix_cache"]


def post(server, path, body, status=None):
    r = httpx.post(server.base + path, json=body, timeout=60)
    if status is not None:
        assert r.status_code == status, r.text
    return r


@pytest.fixture(scope="module")
def openapi(server):
    r = httpx.get(server.base + "/openapi.json", timeout=30)
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"].startswith("3.")
    return doc


def request_schema(doc, path):
    return doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]


def test_openapi_routes_are_the_served_routes(server, openapi):
    for path, ops in openapi["paths"].items():
        (method,) = ops
        url = server.base + path.replace("{model}", server.model_id)
        r = httpx.request(method.upper(), url, json={} if method == "post" else None, timeout=60)
        assert r.status_code != 404 or "no such endpoint" not in r.text, (method, path, r.text)
        assert r.status_code != 405, (method, path)
        other = "GET" if method == "post" else "POST"
        assert httpx.request(other, url, timeout=60).status_code == 405, (other, path)
    for path in NOT_SERVED:
        for method in ("GET", "POST"):
            r = httpx.request(method, server.base + path, timeout=60)
            assert r.status_code == 404, (method, path, r.status_code)


@pytest.mark.parametrize("path,base", [
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 1}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}),
    ("/tokenize", {"prompt": "Hi"}),
    ("/detokenize", {"tokens": [1, 2]}),
])
def test_schema_fields_are_the_allow_list(server, openapi, path, base):
    """Each field the schema lists is accepted (null = absent), each refused one is a 400 naming
    it, and a field the schema does not list is a 400 naming it."""
    schema = request_schema(openapi, path)
    assert schema["additionalProperties"] is False
    base = {"model": server.model_id, **base}
    fields = schema["properties"]
    for f in base:
        assert f in fields, f
    for f in fields:
        if f in base:
            continue
        r = post(server, path, {**base, f: None})
        assert r.status_code == 200, (f, r.text)
    for f in schema.get("x-warden-refused-fields", []):
        r = post(server, path, {**base, f: {"surely": "not the no-op value"}})
        assert r.status_code == 400, (f, r.text)
        err = r.json()["error"]
        assert err["param"] == f and err["code"] == "unsupported_field", err
        assert f in fields or f not in err["message"] or True
    for f in ("frobnicate", "temprature", "max_token", "Temperature"):
        r = post(server, path, {**base, f: 1})
        assert r.status_code == 400, (f, r.text)
        err = r.json()["error"]
        assert err["param"] == f and err["code"] == "unknown_field", err


def test_refused_field_noop_values_are_accepted(server):
    """A known, unimplemented field with the value that asks for nothing is fine (e.g. what
    clients send by default); any other value is refused."""
    base = {"model": server.model_id, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    for f, noop, other in [("tools", [], [{"type": "function", "function": {"name": "f"}}]),
                           ("store", False, True), ("service_tier", "auto", "priority")]:
        post(server, "/v1/chat/completions", {**base, f: noop}, 200)
        r = post(server, "/v1/chat/completions", {**base, f: other}, 400)
        assert r.json()["error"]["param"] == f


def test_openai_client_extra_body_is_not_ignored(server):
    c = server.client()
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=server.model_id, prompt="Hi", max_tokens=1, extra_body={"typical_p": 0.5})
    assert e.value.body["param"] == "typical_p"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=server.model_id, messages=[{"role": "user", "content": "Hi"}],
                                  max_tokens=1, extra_body={"use_beam_search": True})
    assert e.value.body["param"] == "use_beam_search"
    # a vLLM extra warden implements goes through
    r = c.completions.create(model=server.model_id, prompt="Hi", max_tokens=2, temperature=0,
                             extra_body={"ignore_eos": True, "top_k": 1})
    assert r.usage.completion_tokens == 2


def test_models_retrieve(server):
    c = server.client()
    m = c.models.retrieve(server.model_id)
    assert m.id == server.model_id and m.object == "model"
    with pytest.raises(openai.NotFoundError) as e:
        c.models.retrieve("no-such-model")
    assert e.value.body["code"] == "model_not_found"


def test_version(server):
    from conftest import WARDEN_BIN
    import subprocess
    v = httpx.get(server.base + "/version", timeout=30).json()["version"]
    out = subprocess.run([str(WARDEN_BIN), "--version"], capture_output=True, text=True, timeout=60).stdout
    assert out.split() == ["warden", v]


def test_tokenize_detokenize(server):
    """/tokenize gives the ids /v1/completions runs (same usage, same greedy text when sent as
    ids); SmolLM2's special tokens have their known ids; /detokenize inverts it."""
    text = "The three primary colors are"
    t = post(server, "/tokenize", {"model": server.model_id, "prompt": text, "return_token_strs": True}, 200).json()
    assert t["count"] == len(t["tokens"]) and t["max_model_len"] > 0
    assert "".join(t["token_strs"]).replace("\u0120", " ") == text or len(t["token_strs"]) == t["count"]
    c = server.client()
    a = c.completions.create(model=server.model_id, prompt=text, max_tokens=8, temperature=0)
    b = c.completions.create(model=server.model_id, prompt=t["tokens"], max_tokens=8, temperature=0)
    assert a.usage.prompt_tokens == t["count"] == b.usage.prompt_tokens
    assert a.choices[0].text == b.choices[0].text
    assert post(server, "/detokenize", {"tokens": t["tokens"]}, 200).json() == {"prompt": text}
    # SmolLM2: <|im_start|> = 1, <|im_end|> = 2 (its tokenizer.json's added tokens)
    s = post(server, "/tokenize", {"prompt": "<|im_start|>user<|im_end|>", "add_special_tokens": False}, 200).json()
    assert s["tokens"][0] == 1 and s["tokens"][-1] == 2
    # chat messages render through the template, as /v1/chat/completions does
    msgs = [{"role": "user", "content": "Hi"}]
    tc = post(server, "/tokenize", {"messages": msgs}, 200).json()
    r = c.chat.completions.create(model=server.model_id, messages=msgs, max_tokens=1, temperature=0)
    assert tc["count"] == r.usage.prompt_tokens
    no_gen = post(server, "/tokenize", {"messages": msgs, "add_generation_prompt": False}, 200).json()
    assert no_gen["count"] < tc["count"] and tc["tokens"][:no_gen["count"]] == no_gen["tokens"]


@pytest.mark.parametrize("path,body,param", [
    ("/tokenize", {}, "prompt"),
    ("/tokenize", {"prompt": "x", "messages": [{"role": "user", "content": "x"}]}, "prompt"),
    ("/tokenize", {"prompt": 5}, "prompt"),
    ("/tokenize", {"prompt": "x", "add_special_tokens": "yes"}, "add_special_tokens"),
    ("/tokenize", {"prompt": "x", "model": "other"}, "model"),
    ("/detokenize", {"tokens": [10**9]}, "tokens"),
    ("/detokenize", {"tokens": "1,2"}, "tokens"),
    ("/detokenize", {"tokens": [-1]}, "tokens"),
])
def test_tokenizer_endpoint_errors(server, path, body, param):
    r = post(server, path, body)
    assert r.status_code in (400, 404), r.text
    assert r.json()["error"]["param"] == param


def test_tokenizer_info(server):
    info = httpx.get(server.base + "/tokenizer_info", timeout=30).json()
    assert info["eos_token"] == "<|im_end|>"
    assert info["eos_token_id"] == 2
    assert "<|im_start|>" in info["chat_template"]
    assert info["model_max_length"] > 0 and info["vocab_size"] == 49152
