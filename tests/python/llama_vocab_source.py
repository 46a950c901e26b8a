"""Reads llama.cpp's pre-tokenizer table out of its source file src/llama-vocab.cpp.

Two things are extracted, independently of warden's own table:
  - the regex list of every LLAMA_VOCAB_PRE_TYPE_* (the `switch` in llm_tokenizer_bpe's
    constructor: `case ...: regex_exprs = { "...", ... }; break;`), as the strings the C++
    compiler makes of the literals;
  - which tokenizer.ggml.pre names select which type, and the flags llama.cpp sets with them
    (the `tokenizer_pre == "..."` chain in llama_vocab::impl::load).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_C_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def c_string_literals(code: str) -> list[str]:
    """The decoded string literals of a C++ fragment, adjacent literals concatenated;
    // comments are skipped."""
    out: list[str] = []
    i, n = 0, len(code)
    pending: str | None = None
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            i = code.index("\n", i) if "\n" in code[i:] else n
            continue
        if c == '"':
            i += 1
            buf = []
            while code[i] != '"':
                if code[i] == "\\":
                    e = code[i + 1]
                    if e not in _C_ESCAPES:
                        raise ValueError(f"unhandled C escape \\{e}")
                    buf.append(_C_ESCAPES[e])
                    i += 2
                else:
                    buf.append(code[i])
                    i += 1
            i += 1
            pending = (pending or "") + "".join(buf)
            continue
        if c == "," and pending is not None:
            out.append(pending)
            pending = None
        i += 1
    if pending is not None:
        out.append(pending)
    return out


def regex_table(src: str) -> dict[str, list[str]]:
    """LLAMA_VOCAB_PRE_TYPE_X (without the prefix, plus "DEFAULT") -> regex list."""
    start = src.index("struct llm_tokenizer_bpe : llm_tokenizer")
    body = src[start:]
    body = body[: body.index("default:", 0) + 2000]
    end = body.index("break;", body.index("default:"))
    body = body[:end]
    table: dict[str, list[str]] = {}
    pending: list[str] = []
    pos = 0
    pat = re.compile(r"case LLAMA_VOCAB_PRE_TYPE_(\w+):|default:|regex_exprs = \{(.*?)\n\s*\};", re.S)
    for m in pat.finditer(body, pos):
        if m.group(0).startswith("case"):
            pending.append(m.group(1))
        elif m.group(0) == "default:":
            pending.append("DEFAULT")
        else:
            regexes = c_string_literals(m.group(2))
            for t in pending:
                table[t] = regexes
            pending = []
    return table


@dataclass
class PreName:
    name: str
    type: str
    ignore_merges: bool = False
    add_bos: bool = False
    flags: list[str] = field(default_factory=list)


def name_table(src: str) -> dict[str, PreName]:
    """tokenizer.ggml.pre value -> PreName (type and flags llama.cpp sets for it)."""
    start = src.index('tokenizer_pre == "default"')
    start = src.rindex("if (tokenizer_pre.empty())", 0, start)
    end = src.index('unknown pre-tokenizer type', start)
    chain = src[start:end]
    out: dict[str, PreName] = {}
    # Each branch: condition (names) { body }.
    for m in re.finditer(r"if \((.*?)\)\s*\{(.*?)\}", chain, re.S):
        names = re.findall(r'tokenizer_pre == "([^"]+)"', m.group(1))
        if not names:
            continue
        body = m.group(2)
        t = re.search(r"pre_type = LLAMA_VOCAB_PRE_TYPE_(\w+);", body)
        if not t:
            continue
        for nm in names:
            out[nm] = PreName(nm, t.group(1), "ignore_merges = true" in body, "add_bos = true" in body,
                              re.findall(r"(\w+) = (?:true|false);", body))
    return out
