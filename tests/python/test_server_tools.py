"""Tool calling and reasoning through `warden serve`, driven by the official `openai` client.

The default model (SmolLM2-135M) has a chat template without tools and never calls tools by
itself, so these tests run it under other chat templates (`--chat-template`):
  - Qwen2.5's real template (tests/golden/chat_templates; Hermes-style <tool_call> format),
  - a small ChatML template with <think> written here (reasoning).
Greedy decoding with a few-shot history (earlier turns that made the same kind of call) makes
the small model write a real tool call / think block. What is tested: the server's parse of the
model's actual output, checked against an independent parse (Python, below) of the raw text the
same prompt produces on /v1/completions; streaming reassembled by the SDK equals the
non-streamed response; the request fields and their errors; the null-content round trip.
What is not tested here: whether a model chooses tools well (a 135M model does not).
The C++ unit tests (tests/chat_output) cover every family's format on its real template.
"""
from __future__ import annotations

import json
import re
import subprocess

import httpx
import openai
import pytest

from conftest import ROOT, WARDEN_BIN, WardenServer

QWEN25 = ROOT / "tests" / "golden" / "chat_templates" / "qwen2.5.jinja"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object"}}}

THINK_TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
    "{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is not defined or enable_thinking %}<think>{% endif %}{% endif %}")


def few_shot_calls(cities, ask):
    msgs = []
    for i, city in enumerate(cities):
        msgs += [{"role": "user", "content": f"Weather in {city}?"},
                 {"role": "assistant", "content": None, "tool_calls": [
                     {"id": f"call_{i}", "type": "function",
                      "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}]}]
    msgs.append({"role": "user", "content": f"Weather in {ask}?"})
    return msgs


FEW_SHOT = few_shot_calls(["Paris", "Rome", "Oslo", "Lima"], "Madrid")


@pytest.fixture(scope="module")
def hermes_server():
    s = WardenServer("--chat-template", str(QWEN25), "--kv-cache-bytes", "64M")
    yield s
    assert s.stop() == 0, "".join(s.stderr_lines)[-2000:]


@pytest.fixture(scope="module")
def think_server(tmp_path_factory):
    path = tmp_path_factory.mktemp("tpl") / "think.jinja"
    path.write_text(THINK_TEMPLATE, encoding="utf-8")
    s = WardenServer("--chat-template", str(path), "--kv-cache-bytes", "64M")
    s.template_path = path
    yield s
    assert s.stop() == 0, "".join(s.stderr_lines)[-2000:]


def raw_completion(server, template, messages, tmp_path, tools=None, extra=None, max_tokens=48):
    """The text the model writes for this conversation, unparsed: the prompt rendered by
    `warden chat-template` (the server's renderer; keys sorted and arguments as objects, as the
    server passes them), continued greedily on /v1/completions."""
    msgs = []
    for m in messages:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        if "tool_calls" in m:
            m["tool_calls"] = [dict(tc, function=dict(tc["function"], arguments=json.loads(tc["function"]["arguments"])))
                               for tc in m["tool_calls"]]
        msgs.append(m)
    (tmp_path / "m.json").write_text(json.dumps(msgs, sort_keys=True), encoding="utf-8")
    cmd = [str(WARDEN_BIN), "chat-template", "--template", str(template), "--messages", str(tmp_path / "m.json"),
           "--add-generation-prompt", "--extra", json.dumps({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                                                              **(extra or {})})]
    if tools:
        (tmp_path / "t.json").write_text(json.dumps(tools, sort_keys=True), encoding="utf-8")
        cmd += ["--tools", str(tmp_path / "t.json")]
    prompt = subprocess.run(cmd, capture_output=True, check=True, timeout=60).stdout.decode()
    r = server.client().completions.create(model=server.model_id, prompt=prompt, max_tokens=max_tokens,
                                           temperature=0, stop=["<|im_end|>"])
    return r.choices[0].text, r.usage.prompt_tokens


def reference_hermes(text):
    """Independent parse of Hermes-format output: (content, [(name, arguments dict)])."""
    calls = [json.loads(m) for m in re.findall(r"<tool_call>\s*(.*?)\s*</tool_call>", text, re.S)]
    content = text.split("<tool_call>")[0].strip()
    return content, [(c["name"], c["arguments"]) for c in calls]


def test_tool_call_parsed_from_the_models_output(hermes_server, tmp_path):
    c = hermes_server.client()
    r = c.chat.completions.create(model=hermes_server.model_id, messages=FEW_SHOT, tools=[WEATHER],
                                  max_tokens=48, temperature=0)
    raw, prompt_tokens = raw_completion(hermes_server, QWEN25, FEW_SHOT, tmp_path, tools=[WEATHER])
    assert r.usage.prompt_tokens == prompt_tokens  # the same prompt, so the same greedy output
    content, calls = reference_hermes(raw)
    assert calls == [("get_weather", {"city": "Madrid"})], raw  # the model did call
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content == (content or None)
    got = [(tc.function.name, json.loads(tc.function.arguments)) for tc in ch.message.tool_calls]
    assert got == calls
    tc = ch.message.tool_calls[0]
    assert tc.type == "function" and re.fullmatch(r"call_[A-Za-z0-9]{24}", tc.id)


def test_streamed_tool_call_reassembled_by_the_sdk(hermes_server):
    c = hermes_server.client()
    full = c.chat.completions.create(model=hermes_server.model_id, messages=FEW_SHOT, tools=[WEATHER],
                                     max_tokens=48, temperature=0)
    chunks = list(c.chat.completions.create(model=hermes_server.model_id, messages=FEW_SHOT, tools=[WEATHER],
                                            max_tokens=48, temperature=0, stream=True))
    # vLLM's delta shape: the first delta of a call has id, type and name; then argument pieces.
    deltas = [tc for ch in chunks for d in [ch.choices[0].delta] for tc in (d.tool_calls or [])]
    assert deltas[0].id and deltas[0].type == "function" and deltas[0].function.name == "get_weather"
    assert all(d.id is None and d.function.name is None for d in deltas[1:])
    assert len(deltas) > 2  # the arguments arrived in pieces
    assert not any("<tool_call>" in (ch.choices[0].delta.content or "") for ch in chunks)
    with c.beta.chat.completions.stream(model=hermes_server.model_id, messages=FEW_SHOT, tools=[WEATHER],
                                        max_tokens=48, temperature=0) as s:
        for _ in s:
            pass
        streamed = s.get_final_completion().choices[0]
    want = full.choices[0]
    assert streamed.finish_reason == want.finish_reason == "tool_calls"
    assert (streamed.message.content or None) == want.message.content  # the first delta has content ""
    assert [(t.function.name, t.function.arguments) for t in streamed.message.tool_calls] == \
        [(t.function.name, t.function.arguments) for t in want.message.tool_calls]


def test_round_trip_with_null_content_and_tool_message(hermes_server, server):
    """The standard round trip: the assistant's tool_calls with content null, then the tool's
    result. Renders with Qwen2.5's template (arguments reach it as an object) and with the
    default model's template, which has no tools and concatenates content as a string (null
    renders as "", as in vLLM; this request used to fail with a template error)."""
    msgs = FEW_SHOT[-3:] + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Madrid\"}"}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "{\"temp_c\": 31}"}]
    for s, tools in ((hermes_server, [WEATHER]), (server, None)):
        kw = {"tools": tools} if tools else {}
        r = s.client().chat.completions.create(model=s.model_id, messages=msgs, max_tokens=8, temperature=0, **kw)
        assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_parallel_tool_calls_false_keeps_one(hermes_server):
    msgs = []
    for i, (a, b) in enumerate([("Paris", "Rome"), ("Oslo", "Lima"), ("Bonn", "Kyiv")]):
        msgs += [{"role": "user", "content": f"Weather in {a} and {b}?"},
                 {"role": "assistant", "content": None, "tool_calls": [
                     {"id": f"c{i}a", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": a})}},
                     {"id": f"c{i}b", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": b})}}]}]
    msgs.append({"role": "user", "content": "Weather in Madrid and Berlin?"})
    c = hermes_server.client()
    both = c.chat.completions.create(model=hermes_server.model_id, messages=msgs, tools=[WEATHER],
                                     max_tokens=64, temperature=0)
    assert len(both.choices[0].message.tool_calls) == 2, both.choices[0].message
    one = c.chat.completions.create(model=hermes_server.model_id, messages=msgs, tools=[WEATHER],
                                    max_tokens=64, temperature=0, parallel_tool_calls=False)
    assert [t.function.arguments for t in one.choices[0].message.tool_calls] == \
        [both.choices[0].message.tool_calls[0].function.arguments]


def test_tool_choice_none_returns_the_text(hermes_server, tmp_path):
    c = hermes_server.client()
    r = c.chat.completions.create(model=hermes_server.model_id, messages=FEW_SHOT, tools=[WEATHER],
                                  tool_choice="none", max_tokens=48, temperature=0)
    raw, _ = raw_completion(hermes_server, QWEN25, FEW_SHOT, tmp_path, tools=[WEATHER])
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content == raw and r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("body,param", [
    ({"tools": {"type": "function"}}, "tools"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0].function"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice"),
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs"),
    # (response_format itself is refused until the allow-list lists it as supported)
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}},
     ("tool_choice", "response_format")),
    ({"tools": [WEATHER], "skip_special_tokens": True}, "skip_special_tokens"),
])
def test_bad_tool_fields_are_refused(hermes_server, body, param):
    req = {"model": hermes_server.model_id, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **body}
    r = httpx.post(hermes_server.base + "/v1/chat/completions", json=req, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] in ((param,) if isinstance(param, str) else param)


def test_tools_refused_where_the_template_has_no_format(server):
    with pytest.raises(openai.BadRequestError) as e:
        server.client().chat.completions.create(model=server.model_id, messages=[{"role": "user", "content": "hi"}],
                                                tools=[WEATHER], max_tokens=4)
    assert "--tool-call-parser" in str(e.value)


THINK_SHOT = []
for q, why, a in [("Capital of France?", "France is in Europe. Its capital is Paris.", "Paris."),
                  ("Capital of Italy?", "Italy is in Europe. Its capital is Rome.", "Rome."),
                  ("Capital of Peru?", "Peru is in South America. Its capital is Lima.", "Lima.")]:
    THINK_SHOT += [{"role": "user", "content": q}, {"role": "assistant", "reasoning_content": why, "content": a}]
THINK_SHOT.append({"role": "user", "content": "Capital of Spain?"})


def test_reasoning_content_split(think_server, tmp_path):
    c = think_server.client()
    r = c.chat.completions.create(model=think_server.model_id, messages=THINK_SHOT, max_tokens=40, temperature=0)
    raw, prompt_tokens = raw_completion(think_server, think_server.template_path, THINK_SHOT, tmp_path)
    assert r.usage.prompt_tokens == prompt_tokens
    assert "</think>" in raw, raw  # the prompt opened the block; the model closed it
    reasoning, content = raw.split("</think>", 1)
    m = r.choices[0].message
    assert m.model_extra["reasoning_content"] == reasoning
    assert m.content == content.strip()
    # Streamed: reasoning_content deltas, then content deltas; both reassemble to the same.
    parts = {"reasoning_content": "", "content": ""}
    for ch in c.chat.completions.create(model=think_server.model_id, messages=THINK_SHOT, max_tokens=40,
                                        temperature=0, stream=True):
        d = ch.choices[0].delta
        parts["content"] += d.content or ""
        parts["reasoning_content"] += (d.model_extra or {}).get("reasoning_content") or ""
    assert parts == {"reasoning_content": reasoning, "content": content.strip()}


def test_chat_template_kwargs_reach_the_template(think_server, tmp_path):
    c = think_server.client()
    on = c.chat.completions.create(model=think_server.model_id, messages=THINK_SHOT, max_tokens=40, temperature=0)
    off = c.chat.completions.create(model=think_server.model_id, messages=THINK_SHOT, max_tokens=40, temperature=0,
                                    extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    raw, prompt_tokens = raw_completion(think_server, think_server.template_path, THINK_SHOT, tmp_path,
                                        extra={"enable_thinking": False})
    assert off.usage.prompt_tokens == prompt_tokens < on.usage.prompt_tokens
    # Without the opening tag in the prompt, output that does not open a block is all answer.
    if not raw.lstrip().startswith("<think>"):
        assert off.choices[0].message.model_extra["reasoning_content"] is None
        assert off.choices[0].message.content == raw.strip()


@pytest.mark.parametrize("template", ["qwen2.5", "qwen3", "glm-4.5", "deepseek-v3.1", "kimi-k2", "llama-3.1",
                                      "llama-3.2"])
def test_round_trip_renders_with_each_family_template(template):
    """The tool-call round trip renders with every family's real template, whose tool-call
    format is picked automatically (a tools request is not refused). GLM-4.5's iterates the
    arguments as an object; DeepSeek-V3.1's concatenates them as text (rendered again with the
    strings); Llama's prints them with tojson."""
    s = WardenServer("--chat-template", str(ROOT / "tests" / "golden" / "chat_templates" / f"{template}.jinja"),
                     "--kv-cache-bytes", "32M")
    try:
        msgs = [{"role": "user", "content": "Weather in Madrid?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_9", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Madrid\"}"}}]},
                {"role": "tool", "tool_call_id": "call_9", "content": "{\"temp_c\": 31}"}]
        r = s.client().chat.completions.create(model=s.model_id, messages=msgs, tools=[WEATHER], max_tokens=2,
                                               temperature=0)
        assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    finally:
        assert s.stop() == 0


SEARCH = {"type": "function", "function": {
    "name": "web_search", "description": "Search the web",
    "parameters": {"properties": {"query": {"type": "string", "maxLength": 40}}, "required": ["query"],
                   "type": "object"}}}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "web_search"}}])
def test_required_and_named_tool_choice_are_enforced(hermes_server, choice):
    """tool_choice required / named: constrained decoding makes even a model that would not call
    a tool (no few-shot history here) write a call, to the named tool, with arguments valid
    against its schema."""
    c = hermes_server.client()
    msgs = [{"role": "user", "content": "Tell me a joke."}]
    for stream, parallel in [(False, False), (True, False), (False, True), (True, True)]:
        kw = dict(model=hermes_server.model_id, messages=msgs, tools=[WEATHER, SEARCH], tool_choice=choice,
                  max_tokens=80, temperature=0)
        if not parallel:
            kw["parallel_tool_calls"] = False
        if stream:
            try:
                with c.beta.chat.completions.stream(**kw) as s:
                    for _ in s:
                        pass
                    ch = s.get_final_completion().choices[0]
            except openai.LengthFinishReasonError as e:  # the SDK's helper raises on "length"
                ch = e.completion.choices[0]
        else:
            ch = c.chat.completions.create(**kw).choices[0]
        if parallel:
            # One call or more: a small model may keep calling until max_tokens ends it, and every
            # call it finished is reported.
            assert ch.finish_reason in ("tool_calls", "length"), ch
            assert len(ch.message.tool_calls) >= 1
        else:
            # Exactly one call, then the grammar ends the message.
            assert ch.finish_reason == "tool_calls", ch
            assert len(ch.message.tool_calls) == 1
        for tc in ch.message.tool_calls:
            if isinstance(choice, dict):
                assert tc.function.name == "web_search"
            args = json.loads(tc.function.arguments)
            # the schemas: one required string property, no others
            key = {"get_weather": "city", "web_search": "query"}[tc.function.name]
            assert list(args) == [key] and isinstance(args[key], str), args
            if key == "query":
                assert len(args[key]) <= 40



EFFORT_TEMPLATE = (
    "{% if reasoning_effort is defined %}<|im_start|>system\nReasoning: {{ reasoning_effort }}<|im_end|>\n"
    "{% endif %}{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def effort_server(tmp_path_factory):
    path = tmp_path_factory.mktemp("tpl") / "effort.jinja"
    path.write_text(EFFORT_TEMPLATE, encoding="utf-8")
    s = WardenServer("--chat-template", str(path), "--kv-cache-bytes", "64M")
    s.template_path = path
    yield s
    assert s.stop() == 0, "".join(s.stderr_lines)[-2000:]


def test_reasoning_effort_switches_thinking(think_server):
    """As vLLM: effort "none" is enable_thinking=False, any other effort True, and an explicit
    chat_template_kwargs entry wins."""
    c = think_server.client()
    kw = dict(model=think_server.model_id, messages=THINK_SHOT, max_tokens=24, temperature=0)
    on = c.chat.completions.create(**kw)
    off = c.chat.completions.create(**kw, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    none = c.chat.completions.create(**kw, reasoning_effort="none")
    low = c.chat.completions.create(**kw, reasoning_effort="low")
    forced = c.chat.completions.create(**kw, reasoning_effort="none",
                                       extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    assert off.usage.prompt_tokens < on.usage.prompt_tokens
    assert none.usage.prompt_tokens == off.usage.prompt_tokens
    assert none.choices[0].message.content == off.choices[0].message.content
    for r in (low, forced):
        assert r.usage.prompt_tokens == on.usage.prompt_tokens
        assert r.choices[0].message.content == on.choices[0].message.content
        assert r.choices[0].message.model_extra["reasoning_content"] == \
            on.choices[0].message.model_extra["reasoning_content"]


def test_reasoning_effort_reaches_an_effort_template(effort_server, tmp_path):
    c = effort_server.client()
    msgs = [{"role": "user", "content": "Name a color."}]
    for effort in ("low", "high"):
        r = c.chat.completions.create(model=effort_server.model_id, messages=msgs, max_tokens=16, temperature=0,
                                      reasoning_effort=effort)
        raw, prompt_tokens = raw_completion(effort_server, effort_server.template_path, msgs, tmp_path,
                                            extra={"reasoning_effort": effort}, max_tokens=16)
        assert r.usage.prompt_tokens == prompt_tokens
        assert r.choices[0].message.content == raw.strip()
    plain = c.chat.completions.create(model=effort_server.model_id, messages=msgs, max_tokens=1)
    assert plain.usage.prompt_tokens < prompt_tokens  # without the field the template skips it


@pytest.mark.parametrize("body,code", [
    ({"reasoning_effort": "extreme"}, None),
    ({"reasoning_effort": 3}, None),
    ({"reasoning_effort": "high"}, "unsupported_field"),  # this template reads neither variable
    ({"functions": [WEATHER["function"]]}, "unsupported_field"),
    ({"functions": [WEATHER["function"]], "function_call": {"name": "get_weather"}}, "unsupported_field"),
])
def test_reasoning_effort_and_legacy_functions_refused(server, body, code):
    with pytest.raises(openai.BadRequestError) as e:
        server.client().chat.completions.create(model=server.model_id, messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=4, **body)
    err = e.value.body
    assert err["param"] in body, err
    if code:
        assert err["code"] == code, err
    if "functions" in body:
        assert "'tools'" in err["message"], err
