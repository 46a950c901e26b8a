"""The glm4 and kimi-k2 GGUF pre-tokenizers against Hugging Face `tokenizers`.

tests/golden/tokenizer/pre-<name>.json (scripts/make_pretokenizer_golden.py) holds a byte-level
BPE vocabulary trained by `tokenizers` behind the model's own pre-tokenizer regex (GLM-4.5's
tokenizer.json Split pattern; Kimi-K2's tiktoken pat_str) and the ids `tokenizers` gives for
a set of texts. The test writes that vocabulary into a vocab-only GGUF with
tokenizer.ggml.pre = <name>, as llama.cpp's converter labels these models, and compares
`warden tokenize` -- whose regexes are PCRE2, not the Rust engine that made the ids.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import GOLDEN, ROOT, TIMEOUT_S, require_warden

TOKENIZER_GOLDEN = GOLDEN.parent / "tokenizer"


def write_vocab_gguf(path: Path, g: dict) -> None:
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(g["pre"])
    w.add_token_list(g["tokens"])
    w.add_token_types([1] * len(g["tokens"]))
    w.add_token_merges(g["merges"])
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("name", ["glm4", "kimi-k2"])
def test_pretokenizer_matches_hf_tokenizers(name, tmp_path):
    g = json.loads((TOKENIZER_GOLDEN / f"pre-{name}.json").read_text(encoding="utf-8"))
    path = tmp_path / f"{name}.gguf"
    write_vocab_gguf(path, g)
    texts = [c["text"] for c in g["cases"]]
    p = subprocess.run([str(require_warden()), "tokenize", "-m", str(path), "--no-bos", "--no-special", "--json"],
                       input=json.dumps(texts).encode(), capture_output=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert p.returncode == 0, p.stderr.decode()
    got = json.loads(p.stdout)
    bad = [(c["text"], c["ids"], ids) for c, ids in zip(g["cases"], got) if ids != c["ids"]]
    assert not bad, f"{name}: {len(bad)} of {len(texts)} differ, first: {bad[0]!r}"
