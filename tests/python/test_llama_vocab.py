"""llama.cpp's tokenizer test vectors against `warden tokenize`.

Every models/ggml-vocab-*.gguf of llama.cpp that comes with a .gguf.inp/.gguf.out pair must
tokenize exactly as the .out says (the ids Hugging Face tokenizers produced for the .inp texts,
llama.cpp's tests/test-tokenizer-0.cpp: no BOS/EOS, special-token text not parsed). The GGUFs are
vocab-only and most name an architecture warden cannot run: tokenizing needs only the tokenizer
metadata. Tokenizer models warden does not implement must fail with a clear error instead.

The files come from the llama_cpp_python sdist (scripts/fetch_vocab_tests.sh, into
.cache/llama-vocab/); the tests skip when it is not installed. WARDEN_LLAMA_VOCAB overrides the
directory.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, TIMEOUT_S, require_warden

VOCAB_DIR = Path(os.environ.get("WARDEN_LLAMA_VOCAB", ROOT / ".cache" / "llama-vocab"))
MODELS = VOCAB_DIR / "models"

# tokenizer.ggml.model values warden does not implement, and the vocab files that use them
# (docs/: tokenizers). Their test must be a clear error naming the tokenizer model.
UNSUPPORTED = {
    "ggml-vocab-bert-bge.gguf": "unsupported tokenizer model 'bert'",
    "ggml-vocab-gemma-4.gguf": "unsupported tokenizer model 'gemma4'",
}
SEP = "\n__ggml_vocab_test__\n"


def _pairs() -> list[str]:
    if not MODELS.is_dir():
        return []
    return sorted(p.name[: -len(".inp")] for p in MODELS.glob("ggml-vocab-*.gguf.inp")
                  if (MODELS / (p.name[: -len(".inp")] + ".out")).is_file())


def read_tests(inp: Path, out: Path) -> list[tuple[str, list[int]]]:
    """The .inp/.out pair as tests/test-tokenizer-0.cpp reads it."""
    raw = inp.read_bytes().decode("utf-8")
    texts = []
    pos = 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    lines = out.read_bytes().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # std::getline: no empty line after the final newline
    assert len(texts) == len(lines), f"{inp.name}: {len(texts)} inputs, {len(lines)} outputs"
    return [(t, [int(x) for x in line.strip().split(" ") if x]) for t, line in zip(texts, lines)]


def tokenize_all(gguf: Path, texts: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(require_warden()), "tokenize", "-m", str(gguf), "--no-bos", "--no-special", "--json"],
        input=json.dumps(texts).encode(), capture_output=True, timeout=TIMEOUT_S, cwd=ROOT)


@pytest.mark.parametrize("vocab", _pairs() or ["(llama.cpp vocab tests not installed)"])
def test_llama_cpp_vocab_vectors(vocab: str):
    if not MODELS.is_dir():
        pytest.skip(f"{VOCAB_DIR} missing: run scripts/fetch_vocab_tests.sh")
    tests = read_tests(MODELS / f"{vocab}.inp", MODELS / f"{vocab}.out")
    p = tokenize_all(MODELS / vocab, [t for t, _ in tests])
    if vocab in UNSUPPORTED:
        assert p.returncode != 0
        assert UNSUPPORTED[vocab] in p.stderr.decode(), p.stderr.decode()
        assert b"Traceback" not in p.stderr and b"terminate" not in p.stderr
        return
    assert p.returncode == 0, p.stderr.decode()
    got = json.loads(p.stdout)
    bad = [(text, want, ids) for (text, want), ids in zip(tests, got) if ids != want]
    assert not bad, f"{vocab}: {len(bad)} of {len(tests)} differ, first: {bad[0]!r}"


def test_every_pair_is_covered():
    """A new vocab file in llama.cpp is either tokenized exactly or listed as unsupported here;
    this fails if the suite ran on nothing."""
    if not MODELS.is_dir():
        pytest.skip(f"{VOCAB_DIR} missing: run scripts/fetch_vocab_tests.sh")
    pairs = _pairs()
    assert len(pairs) >= 14
    assert set(UNSUPPORTED) <= set(pairs)


def test_decode_and_chat_template_need_only_tokenizer_metadata(tmp_path):
    """command-r is an architecture warden cannot run; its vocab file still decodes and renders
    its chat template."""
    if not MODELS.is_dir():
        pytest.skip(f"{VOCAB_DIR} missing: run scripts/fetch_vocab_tests.sh")
    gguf = MODELS / "ggml-vocab-command-r.gguf"
    text = "Hello world, 3333 ÿ 🦙\n\tindent"
    p = tokenize_all(gguf, [text])
    assert p.returncode == 0, p.stderr.decode()
    ids = json.loads(p.stdout)[0]
    d = subprocess.run([str(require_warden()), "tokenize", "-m", str(gguf), "--decode"],
                       input=" ".join(map(str, ids)).encode(), capture_output=True, timeout=TIMEOUT_S)
    assert d.returncode == 0, d.stderr.decode()
    assert d.stdout.decode() == text
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    c = subprocess.run([str(require_warden()), "chat-template", "-m", str(gguf), "--messages", str(msgs),
                        "--add-generation-prompt"], capture_output=True, timeout=TIMEOUT_S)
    assert c.returncode == 0, c.stderr.decode()
    assert "hi" in c.stdout.decode() and "<|START_OF_TURN_TOKEN|>" in c.stdout.decode()
