"""Reference tokenizations for the glm4 and kimi-k2 GGUF pre-tokenizers, from Hugging Face
`tokenizers` (its Rust regex engine, not warden's PCRE2).

For each name a byte-level BPE tokenizer is trained (tokenizers' BpeTrainer, ~1500 tokens, on
the corpus below) behind the model's own pre-tokenizer regex -- GLM-4.5/4.6's tokenizer.json
Split pattern, and Kimi-K2's tiktoken pat_str (tokenization_kimi.py) -- and the test texts are
encoded with it. tests/golden/tokenizer/pre-<name>.json keeps the vocabulary, merges and
ids; tests/python/test_pretokenizer_models.py writes them into a vocab-only GGUF with
tokenizer.ggml.pre = <name> (as llama.cpp's converter does for these models) and compares
`warden tokenize`.

Usage: .venv-ref5/bin/python scripts/make_pretokenizer_golden.py   (tokenizers==0.23.3)
"""
from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "golden" / "tokenizer"

PATTERNS = {
    # GLM-4.5 / 4.6 / 4.7 tokenizer.json: Split(pattern, Isolated) then ByteLevel(use_regex=false).
    "glm4": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    # Kimi-K2 tokenization_kimi.py pat_str.
    "kimi-k2": "|".join([
        r"""[\p{Han}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]),
}
# llama.cpp sets ignore_merges for glm4, not for kimi-k2 (src/llama-vocab.cpp).
IGNORE_MERGES = {"glm4": True, "kimi-k2": False}

CORPUS = [
    "The quick brown fox jumps over the lazy dog. I'M sure they'LL say it's fine, WE'VE DONE it.",
    "def main(argv):\n    for i in range(1234567):\n        print(f\"{i:08d}\")  # count\n\treturn 0\n",
    "机器学习是人工智能的一个分支。我们今天讨论大语言模型的分词器，以及中文和English混合的文本。",
    "日本語のテキストも少し：こんにちは、世界！カタカナとひらがな。",
    "Ελληνικά κείμενα, русский текст, العربية, हिन्दी भाषा, 한국어 문장입니다.",
    "Numbers: 3.14159, 2718281828, 1,000,000 and 42nd; dates 2026-12-06 12:30:00.",
    "CamelCaseWords and snake_case_words, HTTPServerError, iPhone, McDonald's, O'Neil.",
    "Whitespace   runs\n\n\nand\r\nwindows line ends \u00a0non-breaking\u3000ideographic space",
    "Emoji 🦙🚀👍🏽 and symbols ∑∫√ ±×÷ → ← ™ © ® … “quotes” ‘single’ «guillemets»",
]
TESTS = [
    "", " ", "  ", "\n", "\n\n\t  \n", "Hello world", " Hello World!", "I'M HERE, you'RE there, they'd've",
    "3333 33333 1234567890", "中文分词测试：我们的模型，很好。", "混合mixed文本text，和Numbers123",
    "日本語のテキスト、カタカナ", "    indented code():\n\treturn x**2  # comment\n",
    "CamelCaseHTTPServer iPhone McDonald's", "Ελληνικά и русский", "🦙 emoji 🚀 👍🏽",
    "a\u00a0b\u3000c", "\u0301combining e\u0301 ", "tabs\t\tand  spaces   end   ",
    "The quick brown fox jumps over the lazy dog.", "「引用」『二重』（括弧）", "ǅungla ǈ ǋ Ǆ",
]


def build(name: str) -> Tokenizer:
    tok = Tokenizer(models.BPE(ignore_merges=IGNORE_MERGES[name]))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERNS[name]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    return tok


def main() -> None:
    import tokenizers

    OUT.mkdir(parents=True, exist_ok=True)
    for name in PATTERNS:
        tok = build(name)
        j = json.loads(tok.to_str())
        vocab = j["model"]["vocab"]
        tokens = [None] * len(vocab)
        for t, i in vocab.items():
            tokens[i] = t
        assert all(t is not None for t in tokens)
        merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
        cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in TESTS + CORPUS]
        for c in cases:
            assert tok.decode(c["ids"]) == c["text"]
        out = {"pre": name, "reference": f"tokenizers {tokenizers.__version__}", "pattern": PATTERNS[name],
               "ignore_merges": IGNORE_MERGES[name], "tokens": tokens, "merges": merges, "cases": cases}
        (OUT / f"pre-{name}.json").write_text(json.dumps(out, ensure_ascii=False, indent=0) + "\n")
        print(name, len(tokens), "tokens", len(merges), "merges", len(cases), "cases")


if __name__ == "__main__":
    main()
