#!/usr/bin/env python3
"""Writes the SmolLM2 tokenizer golden files for tests/tokenizer/test_tokenizer_smollm2.cpp.

  tests/golden/tokenizer/smollm2/tokenizer.json         Hugging Face reference tokenizer
  tests/golden/tokenizer/smollm2/tokenizer_config.json  (built from the GGUF by transformers)
  tests/golden/tokenizer/smollm2_strings.jsonl          line 1: {"meta": {...}} (versions, notes)
                                                        then one {"text": ..., "ids": [...]} per string

Steps:
 (a) transformers' GGUF loader (AutoTokenizer.from_pretrained(dir, gguf_file=...)) builds the
     reference tokenizer from models/SmolLM2-135M-Instruct.Q4_1.gguf; its tokenizer.json and
     tokenizer_config.json are saved (the 98 MB tokenizer.model it also writes is not kept).
     Two fixes, both recorded in the meta line:
       * transformers' GGUF converter ignores tokenizer.ggml.pre and gives every "gpt2" GGUF a
         plain ByteLevel pre-tokenizer. SmolLM2's own tokenizer.json (the one llama.cpp hashed to
         name the pre-tokenizer "smollm") is Sequence[Digits(individual_digits=true),
         ByteLevel]; we restore that. The meta line counts how many generated strings the
         unpatched converter output would tokenize differently.
       * the converter writes add_bos_token=true although the GGUF says
         tokenizer.ggml.add_bos_token=false, and eos_token="<|im_start|>" although the GGUF's
         eos_token_id is 2 (<|im_end|>); the saved config follows the GGUF for add_bos_token,
         add_eos_token and the bos/eos/unk/pad token texts.
 (b) 2,000+ strings are generated deterministically (random.Random(SEED)): whitespace runs,
     tabs/newlines, digits (ASCII and other \\p{N}), code, CJK, emoji, mixed scripts,
     contractions, chat special tokens (<|im_start|> ...), random code points.
 (c) they are encoded with the `tokenizers` library loaded from the saved tokenizer.json, with
     add_special_tokens=False (no BOS/EOS/template additions; special tokens in the text are
     still matched, as warden's encode(text, add_bos=false, parse_special=true) does).
 (d) results go to smollm2_strings.jsonl.

transformers' GGUF loader insists on torch being importable even when only metadata is read
(return_tensors=False never touches torch); we patch that check instead of installing torch.

Run from the repository root:
    .venv/bin/pip install transformers==4.57.6 tokenizers==0.22.2 gguf==0.19.0 sentencepiece protobuf
    .venv/bin/python scripts/make_tokenizer_golden.py
Generated with transformers 4.57.6, tokenizers 0.22.2, gguf 0.19.0 (Python 3.11); the output
is deterministic.
"""
import importlib.metadata
import json
import os
import random
import shutil
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODEL_DIR = os.path.join(ROOT, "models")
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT_DIR = os.path.join(ROOT, "tests", "golden", "tokenizer")
TOK_DIR = os.path.join(OUT_DIR, "smollm2")
SEED = 20261129
N_STRINGS = 2400

SMOLLM_PRE_TOKENIZER = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    ],
}


def versions():
    return {p: importlib.metadata.version(p) for p in ("transformers", "tokenizers", "gguf")}


def build_reference(tmp):
    import transformers.modeling_gguf_pytorch_utils as mg
    from transformers import AutoTokenizer

    mg.is_torch_available = lambda: True  # metadata only: torch is never used on this path
    tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=MODEL_FILE)
    tok.save_pretrained(tmp)
    with open(os.path.join(tmp, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    with open(os.path.join(tmp, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    return tj, cfg


def gguf_token_config():
    """bos/eos/unk/pad texts and add_bos/add_eos exactly as the GGUF metadata states them."""
    import gguf

    r = gguf.GGUFReader(os.path.join(MODEL_DIR, MODEL_FILE))
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    out = {}
    for key, name in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                      ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id")):
        f = r.fields.get("tokenizer.ggml." + name)
        if f is not None:
            out[key] = tokens[int(f.contents())]
    for key in ("add_bos_token", "add_eos_token"):
        f = r.fields.get("tokenizer.ggml." + key)
        out[key] = bool(f.contents()) if f is not None else False
    return out


# ----------------------------------------------------------------------------- strings

WORDS = ("the quick brown fox jumps over lazy dog Hello world tokenizer server request "
         "inference model cache page token stream batch decode prefill Mr. Dr. U.S.A. e.g. "
         "naïve café résumé Zürich façade coöperate jalapeño").split()
CONTRACTIONS = ["don't", "I'm", "it's", "we've", "they'll", "she'd", "you're", "DON'T", "I'M",
                "It'S", "'s", "'t", "'re", "' ", "''", "rock'n'roll", "o'clock"]
CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "#include <vector>\nint main() { return 0; }",
    "if x == 1 and y != 2:\n        pass",
    "const std::string& s = \"hello\";",
    "SELECT id, name FROM users WHERE age >= 18;",
    "<div class=\"x\">&nbsp;</div>",
    "{\"key\": [1, 2, 3], \"ok\": true}",
    "x <<= 3; y >>= 2; z **= 4 // comment",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "    \t  indented_line = value  # trailing   ",
    "$ ls -la | grep '.cpp' && echo $?",
    "a=b+c-d*e/f%g^h&i|j~k",
    "lambda: [i for i in range(10) if i % 2]",
    "@decorator\nclass A(B, metaclass=M): ...",
]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<file_sep>",
            "<filename>", "<gh_stars>", "<jupyter_code>", "<empty_output>"]
NEAR_SPECIALS = ["<|im_start", "im_start|>", "<|im_end", "<|", "|>", "<|im_start|", "< |im_end|>",
                 "<|IM_START|>", "<<|im_start|>>", "<|im_start|><|im_end|>"]
SCRIPTS = {
    "cjk": (0x4E00, 0x9FFF), "hiragana": (0x3041, 0x3096), "katakana": (0x30A1, 0x30FA),
    "hangul": (0xAC00, 0xD7A3), "cyrillic": (0x0410, 0x044F), "greek": (0x0391, 0x03C9),
    "arabic": (0x0621, 0x064A), "hebrew": (0x05D0, 0x05EA), "devanagari": (0x0905, 0x0939),
    "thai": (0x0E01, 0x0E2E), "latin_ext": (0x0100, 0x017F), "armenian": (0x0531, 0x0556),
}
FIXED_TEXT = ["你好，世界！", "東京は日本の首都です。", "안녕하세요 세계", "Привет, мир!",
              "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
              "Ünïcödé ñ ß ø å", "ﬁ ﬂ ﬀ", "Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ", "①②③ ⅠⅡⅢ ½ ¾ ² ³",
              "٠١٢٣٤٥٦٧٨٩", "१२३४", "〇一二三"]
EMOJI = ["😀", "🚀", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸", "🇯🇵", "❤️", "✨", "🤖", "🦀", "🏳️‍🌈", "☕", "🙂🙃",
         "👩🏻‍💻", "1️⃣", "©", "™", "🀄"]
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\t\t", "\u00a0", "\u3000",
              "\u2009", "\u200b", "\r", "\x0b", "\x0c"]
PUNCT = list(".,;:!?-_()[]{}<>\"'`~@#$%^&*+=/\\|") + ["...", "—", "–", "«", "»", "“", "”", "‘",
                                                        "’", "¿", "¡", "…", "•", "→", "€", "£", "¥"]
NUMBER_FORMS = ["0", "7", "42", "123", "1234", "12345", "1000000", "3.14159", "-2.5e10",
                "1,234,567.89", "0x1F", "2024-06-01", "12:34:56", "+1 (555) 123-4567", "v1.2.3",
                "100%", "$19.99", "1st", "2nd", "3rd", "4th", "007", "１２３", "٣٤", "²", "½"]


def rand_script_text(rng, n):
    lo, hi = SCRIPTS[rng.choice(sorted(SCRIPTS))]
    return "".join(chr(rng.randint(lo, hi)) for _ in range(n))


def rand_codepoint(rng):
    while True:
        cp = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x24F), rng.randint(0x370, 0x1FFF),
                         rng.randint(0x2000, 0x2BFF), rng.randint(0x3000, 0x9FFF),
                         rng.randint(0xAC00, 0xD7A3), rng.randint(0xE000, 0xFFFD),
                         rng.randint(0x10000, 0x1FAFF), rng.randint(0x20000, 0x2A6DF)])
        if not (0xD800 <= cp <= 0xDFFF):
            return chr(cp)


def piece(rng):
    k = rng.randrange(12)
    if k == 0:
        return rng.choice(WORDS)
    if k == 1:
        return rng.choice(CONTRACTIONS)
    if k == 2:
        return rng.choice(NUMBER_FORMS) if rng.random() < 0.6 else str(rng.randint(0, 10 ** rng.randint(1, 12)))
    if k == 3:
        return rng.choice(CODE)
    if k == 4:
        return rng.choice(SPECIALS) if rng.random() < 0.7 else rng.choice(NEAR_SPECIALS)
    if k == 5:
        return rand_script_text(rng, rng.randint(1, 8))
    if k == 6:
        return rng.choice(FIXED_TEXT)
    if k == 7:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))
    if k == 8:
        return "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 6)))
    if k == 9:
        return "".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 4)))
    if k == 10:
        return "".join(rand_codepoint(rng) for _ in range(rng.randint(1, 5)))
    return rng.choice(WORDS).upper() if rng.random() < 0.5 else rng.choice(WORDS).capitalize()


def generate(rng, n):
    out = ["", " ", "  ", "\n", "\t", "Hello", " Hello", "Hello world", "<|im_start|>", "<|im_end|>",
           "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", "1234567890", "   \n\n\t x"]
    seen = set(out)
    while len(out) < n:
        parts = [piece(rng) for _ in range(rng.randint(1, 8))]
        seps = ["", " ", " ", "\n", "\t", "  "]
        text = "".join(p + rng.choice(seps) for p in parts)
        if rng.random() < 0.15:
            text = rng.choice(WHITESPACE) + text
        if rng.random() < 0.15:
            text = text.rstrip()
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def main():
    from tokenizers import Tokenizer

    if not os.path.exists(os.path.join(MODEL_DIR, MODEL_FILE)):
        sys.exit(f"model file {MODEL_FILE} not found in {MODEL_DIR} (scripts/fetch_model.sh)")
    with tempfile.TemporaryDirectory() as tmp:
        tj, cfg = build_reference(tmp)

    raw = Tokenizer.from_str(json.dumps(tj))  # as transformers' converter produced it
    tj["pre_tokenizer"] = SMOLLM_PRE_TOKENIZER
    cfg.update(gguf_token_config())

    if os.path.isdir(TOK_DIR):
        shutil.rmtree(TOK_DIR)
    os.makedirs(TOK_DIR)
    tj_path = os.path.join(TOK_DIR, "tokenizer.json")
    with open(tj_path, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=None, separators=(",", ":"))
    with open(os.path.join(TOK_DIR, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2, sort_keys=True)
    size = os.path.getsize(tj_path)
    assert size < 5 * 1024 * 1024, f"tokenizer.json is {size} bytes (limit 5 MB)"

    ref = Tokenizer.from_file(tj_path)
    texts = generate(random.Random(SEED), N_STRINGS)
    encs = ref.encode_batch(texts, add_special_tokens=False)
    raw_encs = raw.encode_batch(texts, add_special_tokens=False)
    n_diff_raw = sum(1 for a, b in zip(encs, raw_encs) if a.ids != b.ids)

    meta = {
        "versions": versions(),
        "python": sys.version.split()[0],
        "seed": SEED,
        "count": len(texts),
        "model": MODEL_FILE,
        "encode": "tokenizers.Tokenizer.encode(text, add_special_tokens=False)",
        "patches": ["pre_tokenizer := Sequence[Digits(individual_digits=true), ByteLevel] (SmolLM2's own; "
                    "transformers' GGUF converter drops it)",
                    "tokenizer_config bos/eos/unk/pad_token, add_bos/add_eos_token := GGUF metadata "
                    "(converter wrote add_bos_token=true, eos_token=<|im_start|>)"],
        "strings_differing_without_pre_tokenizer_patch": n_diff_raw,
    }
    out_path = os.path.join(OUT_DIR, "smollm2_strings.jsonl")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"meta": meta}, ensure_ascii=False) + "\n")
        for t, e in zip(texts, encs):
            f.write(json.dumps({"text": t, "ids": e.ids}, ensure_ascii=False) + "\n")
    print(f"wrote {len(texts)} strings to {out_path}; tokenizer.json {size} bytes; "
          f"{n_diff_raw} strings differ without the pre-tokenizer patch; versions {meta['versions']}")


if __name__ == "__main__":
    main()
