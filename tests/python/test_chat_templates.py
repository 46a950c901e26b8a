"""`warden chat-template` renders real chat templates byte for byte as Hugging Face does.

The reference is Python jinja2 (pinned in requirements-test.txt) configured exactly like
transformers' apply_chat_template (transformers/utils/chat_template_utils.py,
_compile_jinja_template): ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[generation tag, loopcontrols]), a tojson filter that is json.dumps(ensure_ascii=False,
indent, separators, sort_keys), raise_exception and strftime_now globals, and the render
variables messages, tools (None without tools), documents (None), add_generation_prompt plus the
extra keyword arguments. Templates are in tests/golden/chat_templates/ (see its README).

When jinja2 raises for a conversation (a template's raise_exception, or a type error such as
str + None), warden must fail too: a clean one-line error, never a crash.
"""
from __future__ import annotations

import json
import random
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from conftest import ROOT, WARDEN_BIN, require_warden

jinja2 = pytest.importorskip("jinja2")
from jinja2 import nodes  # noqa: E402
from jinja2.ext import Extension, loopcontrols  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

TEMPLATES = ROOT / "tests" / "golden" / "chat_templates"
TEMPLATE_FILES = sorted(p.name for p in TEMPLATES.glob("*.jinja"))


class _Generation(Extension):
    """HF's {% generation %} tag (assistant-mask tracking); renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


def hf_environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def reference_render(source: str, messages, tools, add_generation_prompt: bool, extra: dict) -> str:
    tpl = hf_environment().from_string(source)
    return tpl.render(messages=messages, tools=tools, documents=None, add_generation_prompt=add_generation_prompt,
                      **extra)


def warden_render(tmp_path: Path, template: Path, messages, tools, add_generation_prompt: bool, extra: dict):
    require_warden()
    mpath = tmp_path / "messages.json"
    mpath.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    cmd = [str(WARDEN_BIN), "chat-template", "--template", str(template), "--messages", str(mpath),
           "--extra", json.dumps(extra, ensure_ascii=False)]
    if tools is not None:
        tpath = tmp_path / "tools.json"
        tpath.write_text(json.dumps(tools, ensure_ascii=False), encoding="utf-8")
        cmd += ["--tools", str(tpath)]
    if add_generation_prompt:
        cmd.append("--add-generation-prompt")
    return subprocess.run(cmd, capture_output=True, timeout=60, cwd=ROOT)


# ------------------------------------------------------------------ conversations

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Returns \"sunny\" or 'rainy'.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich or 東京"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {"name": "web_search", "description": "Search the web.",
                 "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": []}},
}


def tool_call(name, args, as_string: bool, call_id="call_1"):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}


def conversations():
    """(id, messages, tools) covering roles, tools, reasoning, unicode and awkward text."""
    convs = [
        ("user", [{"role": "user", "content": "Hello!"}], None),
        ("system_user", [{"role": "system", "content": "You are terse."},
                         {"role": "user", "content": "What is 2+2?"}], None),
        ("multi_turn", [{"role": "system", "content": "Be kind."},
                        {"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "Hello! How can I help?"},
                        {"role": "user", "content": "Tell me a joke."}], None),
        ("multi_turn_no_system", [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                                  {"role": "user", "content": "three"}, {"role": "assistant", "content": "four"}],
         None),
        ("unicode", [{"role": "user", "content": "你好，世界！🌍 Grüße, ¿qué tal? עברית café\u00a0naïve 𝔘𝔫𝔦"},
                     {"role": "assistant", "content": "こんにちは 👋🏽 — «ok»"}], None),
        ("quotes_newlines", [{"role": "system", "content": "Line1\nLine2\r\n\ttabbed \"double\" 'single' \\back\\"},
                             {"role": "user", "content": "  leading and trailing spaces  \n\n"},
                             {"role": "assistant", "content": "{{ not jinja }} {% raw %} <|im_end|>"},
                             {"role": "user", "content": ""}], None),
        ("reasoning", [{"role": "user", "content": "Solve x+1=2"},
                       {"role": "assistant", "content": "<think>\nx = 2-1\n</think>\n\nx = 1"},
                       {"role": "user", "content": "And x+2=5?"}], None),
        ("reasoning_last", [{"role": "user", "content": "Think first"},
                            {"role": "assistant", "content": "<think>hmm</think>done"}], None),
        ("tools_user", [{"role": "system", "content": "You can call tools."},
                        {"role": "user", "content": "Weather in Paris?"}], [WEATHER_TOOL, SEARCH_TOOL]),
        ("tools_no_system", [{"role": "user", "content": "Weather in 東京?"}], [WEATHER_TOOL]),
    ]
    for as_string in (False, True):
        sfx = "_strargs" if as_string else "_dictargs"
        convs.append(("tool_roundtrip" + sfx, [
            {"role": "system", "content": "Use tools."},
            {"role": "user", "content": "Weather in Paris and Tokyo?"},
            {"role": "assistant", "content": "",
             "tool_calls": [tool_call("get_weather", {"city": "Paris", "unit": "celsius"}, as_string),
                            tool_call("get_weather", {"city": "東京", "days": 2}, as_string, "call_2")]},
            {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call_1", "name": "get_weather"},
            {"role": "tool", "content": "{\"temp\": 18}", "tool_call_id": "call_2", "name": "get_weather"},
            {"role": "assistant", "content": "Paris 21°C, Tokyo 18°C."},
        ], [WEATHER_TOOL]))
        convs.append(("single_tool_call" + sfx, [
            {"role": "user", "content": "Search for cats"},
            {"role": "assistant", "content": "Let me search.",
             "tool_calls": [tool_call("web_search", {"query": "cats \"cute\""}, as_string)]},
            {"role": "tool", "content": "Cats are great.", "tool_call_id": "call_1"},
        ], [SEARCH_TOOL]))
        convs.append(("tool_call_none_content" + sfx, [
            {"role": "user", "content": "Search"},
            {"role": "assistant", "content": None, "tool_calls": [tool_call("web_search", {"query": "x"}, as_string)]},
            {"role": "tool", "content": "result"},
        ], [SEARCH_TOOL]))
    return convs


EXTRAS = [
    {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "date_string": "26 Jul 2024"},
    {"bos_token": "<s>", "eos_token": "</s>", "enable_thinking": False, "date_string": "01 Jan 2025"},
    {"bos_token": "", "eos_token": "", "enable_thinking": True},
]


def cases():
    for name in TEMPLATE_FILES:
        for cid, messages, tools in conversations():
            for agp in (False, True):
                for ei, extra in enumerate(EXTRAS):
                    yield pytest.param(name, messages, tools, agp, extra, id=f"{name}-{cid}-agp{int(agp)}-x{ei}")


def test_templates_present():
    required = {"smollm2.jinja", "llama-3.1.jinja", "qwen2.5.jinja", "qwen3.jinja", "glm-4.5.jinja",
                "deepseek-v3.1.jinja", "kimi-k2.jinja"}
    assert required <= set(TEMPLATE_FILES), sorted(required - set(TEMPLATE_FILES))


@pytest.mark.parametrize("name,messages,tools,agp,extra", list(cases()))
def test_matches_jinja2(tmp_path, name, messages, tools, agp, extra):
    path = TEMPLATES / name
    source = path.read_text(encoding="utf-8")
    # jinja2 normalizes \r\n in the template source; read_text with universal newlines would too,
    # so read bytes to keep the file exactly as warden sees it.
    source = path.read_bytes().decode("utf-8")
    try:
        want = reference_render(source, messages, tools, agp, extra)
        ref_error = None
    except Exception as e:  # noqa: BLE001 - any jinja2 failure must be a warden failure too
        want, ref_error = None, f"{type(e).__name__}: {e}"
    p = warden_render(tmp_path, path, messages, tools, agp, extra)
    err = p.stderr.decode("utf-8", "replace").strip()
    assert 0 <= p.returncode < 128, f"crash rc={p.returncode}: {err}"
    if ref_error is not None:
        assert p.returncode != 0, f"jinja2 failed ({ref_error}) but warden rendered:\n{p.stdout.decode()!r}"
        assert len(err.splitlines()) == 1 and "error" in err.lower(), err
        return
    assert p.returncode == 0, f"warden failed: {err}"
    got = p.stdout.decode("utf-8")
    assert got == want, f"\n--- jinja2:\n{want!r}\n--- warden:\n{got!r}"


def test_model_template_from_gguf(tmp_path):
    """--model reads tokenizer.chat_template (+ special tokens) from the default GGUF."""
    from conftest import SMOLLM2_GGUF
    if not SMOLLM2_GGUF.is_file():
        pytest.skip("default model missing")
    require_warden()
    messages = [{"role": "user", "content": "Hi there"}]
    mpath = tmp_path / "m.json"
    mpath.write_text(json.dumps(messages))
    p = subprocess.run([str(WARDEN_BIN), "chat-template", "--model", str(SMOLLM2_GGUF), "--messages", str(mpath),
                        "--add-generation-prompt"], capture_output=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    want = reference_render((TEMPLATES / "smollm2.jinja").read_bytes().decode(), messages, None, True, {})
    assert p.stdout.decode() == want


# ------------------------------------------------------------------ robustness

def _mutations(source: str, rng: random.Random, n: int):
    """Truncations and random byte edits of a real template."""
    out = []
    for _ in range(n):
        kind = rng.randrange(3)
        if kind == 0:
            out.append(source[: rng.randrange(len(source))])
        elif kind == 1:
            k = rng.randrange(len(source))
            out.append(source[:k] + rng.choice(["{{", "{%", "}}", "%}", "(", ")", "[", "'", "\"", "|", "-", " is ",
                                                "{% endfor %}", "{% if %}", "\x00", "é"]) + source[k:])
        else:
            a = rng.randrange(len(source))
            b = min(len(source), a + rng.randrange(1, 40))
            out.append(source[:a] + source[b:])
    return out


def test_mutated_templates_never_crash_or_hang(tmp_path):
    """Random truncations/edits of real templates: warden either renders exactly what jinja2
    renders or fails with a clean error when jinja2 fails; never a signal or a timeout."""
    rng = random.Random(1234)
    messages = conversations()[10][1]  # tool round trip with dict arguments
    tools = [WEATHER_TOOL]
    extra = EXTRAS[1]
    mismatches = []
    n = 0
    for name in TEMPLATE_FILES:
        source = (TEMPLATES / name).read_bytes().decode("utf-8")
        for k, mutated in enumerate(_mutations(source, rng, 12)):
            path = tmp_path / f"m_{name}_{k}.jinja"
            path.write_bytes(mutated.encode("utf-8"))
            try:
                want = reference_render(mutated, messages, tools, True, extra)
            except Exception:  # noqa: BLE001
                want = None
            p = warden_render(tmp_path, path, messages, tools, True, extra)
            n += 1
            assert 0 <= p.returncode < 128, f"crash on mutated {name} #{k}: rc={p.returncode}"
            err = p.stderr.decode("utf-8", "replace").strip()
            if p.returncode != 0:
                assert len(err.splitlines()) == 1 and "error" in err.lower(), err
                assert "internal error" not in err, err
            if want is None:
                if p.returncode == 0:
                    mismatches.append(f"{name} #{k}: jinja2 failed, warden rendered")
            elif p.returncode != 0 or p.stdout.decode("utf-8", "replace") != want:
                mismatches.append(f"{name} #{k}: jinja2 rendered, warden: {err or 'different text'}")
    # Mutations hit corners (e.g. jinja2 accepting odd syntax lazily); require near-total agreement.
    assert len(mismatches) <= n // 20, "\n".join(mismatches)
