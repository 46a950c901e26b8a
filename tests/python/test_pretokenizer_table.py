"""warden's GGUF pre-tokenizer table against llama.cpp's source, code point for code point.

The regexes and the tokenizer.ggml.pre names are read out of llama.cpp's src/llama-vocab.cpp
(tests/python/llama_vocab_source.py, from the llama_cpp_python sdist that
scripts/fetch_vocab_tests.sh installs) and compared with what `warden pretokenizers` reports:
every name llama.cpp knows must be known to warden, with the same regex list (warden writes
non-ASCII characters as PCRE2 \\x{...} escapes; they are decoded before comparing) and the
same ignore_merges / add_bos flags, or be one of the few names warden documents as
unsupported, which must give a clear error.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, TIMEOUT_S, require_warden
from llama_vocab_source import name_table, regex_table

VOCAB_DIR = Path(os.environ.get("WARDEN_LLAMA_VOCAB", ROOT / ".cache" / "llama-vocab"))
SOURCE = VOCAB_DIR / "src" / "llama-vocab.cpp"

# Pre-tokenizer types warden does not implement (docs: tokenizers): SentencePiece-style BPE on
# raw UTF-8 (gemma4, sarvam-moe, whitespace), digit grouping done in code (afmoe), splitting at
# empty matches (superbpe).
UNSUPPORTED_TYPES = {"GEMMA4", "SARVAM_MOE", "WHITESPACE", "AFMOE", "SUPERBPE"}
# llama.cpp's KIMI_K2 entry is a placeholder regex that selects hand-written code; warden uses
# Kimi's own pattern (tested against Hugging Face tokenizers in test_pretokenizer_models.py).
PLACEHOLDER_TYPES = {"KIMI_K2"}

_ESC = re.compile(r"\\(x\{([0-9A-Fa-f]+)\}|.)", re.S)


def decode_escapes(p: str) -> str:
    """Replaces each PCRE2 \\x{HHHH} escape with its character; every other escape is kept."""
    return _ESC.sub(lambda m: chr(int(m.group(2), 16)) if m.group(2) else m.group(0), p)


@pytest.fixture(scope="module")
def tables():
    if not SOURCE.is_file():
        pytest.skip(f"{SOURCE} missing: run scripts/fetch_vocab_tests.sh")
    src = SOURCE.read_text(encoding="utf-8")
    p = subprocess.run([str(require_warden()), "pretokenizers"], capture_output=True, text=True,
                       timeout=TIMEOUT_S)
    assert p.returncode == 0, p.stderr
    return regex_table(src), name_table(src), json.loads(p.stdout)


def test_source_parsed(tables):
    regexes, names, _ = tables
    # Guards against the parser silently finding nothing after a llama.cpp refactor.
    assert len(regexes) >= 40 and len(names) >= 80
    assert names["glm4"].type == "CHATGLM4" and names["kimi-k2"].type == "KIMI_K2"


def test_every_llama_cpp_name_matches(tables):
    regexes, names, warden = tables
    problems = []
    for name, info in names.items():
        w = warden.get(name)
        if w is None:
            problems.append(f"{name}: unknown to warden")
            continue
        if info.type in UNSUPPORTED_TYPES:
            if "error" not in w or "not supported" not in w["error"]:
                problems.append(f"{name}: expected the unsupported error, got {w}")
            continue
        if "error" in w:
            problems.append(f"{name}: {w['error']}")
            continue
        if info.type not in PLACEHOLDER_TYPES:
            want = regexes[info.type]
            got = [decode_escapes(p) for p in w["patterns"]]
            if got != want:
                problems.append(f"{name} ({info.type}): patterns differ:\n  llama.cpp {want!r}\n  warden    {got!r}")
        if w["ignore_merges"] != info.ignore_merges or w["add_bos"] != info.add_bos:
            problems.append(f"{name}: flags ignore_merges/add_bos {w['ignore_merges']}/{w['add_bos']}, "
                            f"llama.cpp {info.ignore_merges}/{info.add_bos}")
    assert not problems, "\n".join(problems)


def test_patterns_are_ascii_with_escapes(tables):
    """Non-ASCII literals in the C++ source could be Unicode-normalised by a tool without anyone
    noticing; the table writes them as \\x{...} escapes."""
    _, _, warden = tables
    for name, w in warden.items():
        for p in w.get("patterns", []):
            if name in ("kimi-k2",):
                continue
            assert p.isascii(), f"{name}: non-ASCII literal in {p!r}"
