"""Kimi's tiktoken tokenizer (tiktoken.model + tokenizer_config.json, no tokenizer.json):
warden against the `tiktoken` package, the implementation tokenization_kimi.py wraps.

The real Kimi tiktoken.model is not on PyPI, so the test builds a rank table from the
SmolLM2 GGUF's byte-level BPE (tokens mapped back to raw bytes, ranks in merge order after the
256 single bytes), writes a Kimi-style model directory to tmp (special tokens laid out as in
Kimi K2: ids len(ranks) .. len(ranks)+257, named from added_tokens_decoder, the rest
"<|reserved_token_{id}|>") and compares, on a varied corpus, the ids of `warden tokenize` with
tiktoken.Encoding(pat_str=Kimi's pat_str verbatim, allowed_special="all") after Kimi's
400,000/25,000-character pre-split, then decodes warden's ids with both.
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import gguf
import pytest
import tiktoken

from conftest import ROOT, SMOLLM2_GGUF, WARDEN_BIN, gpt2_byte_decoder, record, require_warden

# tokenization_kimi.py (moonshotai/Kimi-K2-Instruct), TikTokenTokenizer.pat_str, verbatim.
KIMI_PAT_STR = "|".join(
    [
        r"""[\p{Han}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
NUM_RESERVED = 256 + 2  # num_reserved_special_tokens + 2, as tokenization_kimi.py counts
# Named special ids relative to len(ranks), as in Kimi K2's tokenizer_config.json.
NAMED = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
         6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
         11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>", 13: "<|tool_call_begin|>",
         14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>", 17: "<|im_middle|>",
         254: "[UNK]", 255: "[PAD]"}


def gguf_strings(reader: gguf.GGUFReader, key: str) -> list[str]:
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


@pytest.fixture(scope="module")
def kimi_dir(tmp_path_factory) -> tuple[Path, tiktoken.Encoding]:
    require_warden()
    if not SMOLLM2_GGUF.is_file():
        pytest.skip(f"default model missing at {SMOLLM2_GGUF} (scripts/fetch_model.sh installs it)")
    reader = gguf.GGUFReader(str(SMOLLM2_GGUF))
    dec = gpt2_byte_decoder()
    ranks: dict[bytes, int] = {bytes([b]): b for b in range(256)}
    for m in gguf_strings(reader, "tokenizer.ggml.merges"):
        a, b = m.split(" ", 1)
        tok = bytes(dec[c] for c in a) + bytes(dec[c] for c in b)
        ranks.setdefault(tok, len(ranks))
    assert len(ranks) > 40000
    n = len(ranks)
    d = tmp_path_factory.mktemp("kimi")
    # Written in rank order like Kimi's file; tiktoken's own loader reads it back below.
    lines = [base64.b64encode(t).decode() + " " + str(r) for t, r in sorted(ranks.items(), key=lambda kv: kv[1])]
    (d / "tiktoken.model").write_text("\n".join(lines) + "\n")
    added = {str(n + off): {"content": text, "lstrip": False, "normalized": False, "rstrip": False,
                            "single_word": False, "special": True} for off, text in NAMED.items()}
    cfg = {"added_tokens_decoder": added, "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
           "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]", "unk_token": "[UNK]",
           "tokenizer_class": "TikTokenTokenizer", "model_max_length": 1048576}
    (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
    # The reference, built the way TikTokenTokenizer.__init__ builds it. (An empty
    # TIKTOKEN_CACHE_DIR keeps tiktoken from caching the file under /tmp by its path.)
    from tiktoken.load import load_tiktoken_bpe
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    try:
        mergeable = load_tiktoken_bpe(str(d / "tiktoken.model"))
    finally:
        if old is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = old
    assert mergeable == ranks
    specials = {added.get(str(i), {}).get("content", f"<|reserved_token_{i}|>"): i for i in range(n, n + NUM_RESERVED)}
    enc = tiktoken.Encoding(name="tiktoken.model", pat_str=KIMI_PAT_STR, mergeable_ranks=mergeable,
                            special_tokens=specials)
    return d, enc


def split_runs(s: str, max_len: int):
    """TikTokenTokenizer._split_whitespaces_or_nonwhitespaces."""
    cur_len, cur_space, start = 0, (s[0].isspace() if s else False), 0
    for i, ch in enumerate(s):
        sp = ch.isspace()
        if cur_space ^ sp:
            cur_len, cur_space = 1, sp
        else:
            cur_len += 1
            if cur_len > max_len:
                yield s[start:i]
                start, cur_len = i, 1
    yield s[start:]


def kimi_encode(enc: tiktoken.Encoding, text: str) -> list[int]:
    """TikTokenTokenizer.encode(text) (allow_special_tokens=True)."""
    out: list[int] = []
    for i in range(0, len(text), 400_000):
        for sub in split_runs(text[i:i + 400_000], 25_000):
            out += enc.encode(sub, allowed_special="all")
    return out


def run(args, stdin: bytes) -> subprocess.CompletedProcess:
    return subprocess.run([str(WARDEN_BIN), *map(str, args)], input=stdin, capture_output=True, timeout=120, cwd=ROOT)


CORPUS = [
    "Hello, world! This is a test of the Kimi tokenizer.",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure we'll see they've done it; don't you think it's what he'd say?",
    "I'M SURE WE'LL SEE THEY'VE DONE IT; DON'T YOU THINK IT'S WHAT HE'D SAY?",
    "iT'S mIxEd'Ll cAsE'Re 'd 's 't",
    "it'ſ the long s, and the Kelvin sign K'K",
    "你好，世界！这是一个测试。",
    "Kimi是一个AI助手，由Moonshot AI开发。它支持中英文混合输入123。",
    "中文English混合Text测试abc中",
    "日本語のテキスト、カタカナとひらがな。漢字々〇",
    "안녕하세요 세계 한국어 텍스트",
    "㐀㐁 𠀀𠀁 ⺀⺁ U+3001、U+3002。U+FF0C，",
    "1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890",
    "3.14159 2026-11-30 10:45:00 $1,234.56 ٣٤٥ ⅷ ½",
    "a  b   c    d",
    "line one\nline two\n\nline four\n\n\n",
    "\r\n\r\nCRLF lines\r\nend\r\n",
    "  leading and trailing  ",
    "\t\ttabs\tand\t spaces \t",
    " \n \n \n",
    "x \u3000 y\u00a0z\u2028w\u2029v",
    "nel\u0085here and\u001cfile sep\u001d",
    "mongolian\u180eseparator \u180e x",
    "x\u180e y \u180e\u180ez",  # U+180E: White_Space for PCRE2's \s, not for Rust's
    "Hello, world!!! ... ??? (a+b)*c = d; x->y != z",
    "<html><body class=\"x\">text</body></html>",
    "email@example.com https://example.com/path?q=1&r=2#frag",
    "def f(x):\n    return x ** 2\n\nprint(f(3))\n",
    "emoji 👍🏽 party 🎉🎉 family 👨‍👩‍👧 flags 🇨🇳🇺🇸",
    "e\u0301 Ünïcödé café naïve ǅungla ʰmod",
    "नमस्ते दुनिया मराठी",
    "مرحبا بالعالم",
    "Привет, мир! ΕΛΛΗΝΙΚΆ ελληνικά",
    "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>"
    "<|im_user|>user<|im_middle|>Hi!<|im_end|><|im_assistant|>assistant<|im_middle|>",
    "[BOS]text[EOS] and [EOT]",
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get:0<|tool_call_argument_begin|>{\"a\":1}"
    "<|tool_call_end|><|tool_calls_section_end|>",
    "",
    " ",
    "a",
    "'s",
]


def long_corpus(n: int) -> list[str]:
    special = f"<|reserved_token_{n + 100}|>"
    return [
        "a" * 25_000 + "b",            # cut after 25,000 non-space characters
        "中" * 26_000,                  # a Han run longer than 25,000
        " " * 25_010 + "x",             # a whitespace run longer than 25,000
        ("word " * 6_000) + "\n" * 30_000 + "z",
        # "[EOS]" straddles the 25,000-character cut (characters 24,998..25,002): not a special token there
        special + "y" * (24_998 - len(special)) + "[EOS]" + "q" * 20,
        special + "y" * (24_990 - len(special)) + "[EOS]" + "q" * 20,
    ]


def test_tiktoken_kimi_matches_tiktoken(kimi_dir):
    d, enc = kimi_dir
    n = enc.n_vocab - NUM_RESERVED
    cases = CORPUS + [f"<|reserved_token_{n + 5}|>x<|reserved_token_{n + 257}|>"] + long_corpus(n)
    total = 0
    for text in cases:
        want = kimi_encode(enc, text)
        p = run(["tokenize", "-m", d], text.encode("utf-8"))
        assert p.returncode == 0, p.stderr.decode()
        got = [int(x) for x in p.stdout.split()]
        assert got == want, f"ids differ for {text[:200]!r}"
        assert enc.decode(got) == text
        back = run(["tokenize", "-m", d, "--decode"], " ".join(map(str, got)).encode())
        assert back.returncode == 0, back.stderr.decode()
        assert back.stdout == text.encode("utf-8"), f"decode round trip failed for {text[:200]!r}"
        total += len(got)
    record("tiktoken (Kimi)", "corpus strings identical to tiktoken", f"{len(cases)} ({total} tokens)")


def test_tiktoken_kimi_special_layout(kimi_dir):
    d, enc = kimi_dir
    n = enc.n_vocab - NUM_RESERVED
    # Kimi K2: [BOS] = len(ranks), [EOS] + 1, <|im_end|> + 2, <|im_middle|> + 17.
    p = run(["tokenize", "-m", d], b"[BOS]<|im_end|><|im_middle|>")
    assert p.returncode == 0, p.stderr.decode()
    assert [int(x) for x in p.stdout.split()] == [n, n + 2, n + 17]
    # No BOS is added by default (Kimi's encode() adds none).
    p = run(["tokenize", "-m", d], b"hi")
    assert [int(x) for x in p.stdout.split()] == enc.encode("hi")


def test_tiktoken_bad_files_are_clean_errors(kimi_dir, tmp_path):
    d, _ = kimi_dir
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tokenizer_config.json").write_text((d / "tokenizer_config.json").read_text())
    lines = (d / "tiktoken.model").read_text().splitlines()
    lines[300] = "not*base64 300"
    (bad / "tiktoken.model").write_text("\n".join(lines) + "\n")
    p = run(["tokenize", "-m", bad], b"x")
    err = p.stderr.decode().strip()
    assert 0 < p.returncode < 128 and len(err.splitlines()) == 1, err
    assert "tiktoken.model:301" in err and "base64" in err, err
    # Out-of-range ids for --decode name the id.
    p = run(["tokenize", "-m", d, "--decode"], b"1 99999999")
    assert 0 < p.returncode < 128 and "99999999" in p.stderr.decode(), p.stderr.decode()
