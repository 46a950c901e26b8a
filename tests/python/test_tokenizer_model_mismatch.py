"""A tokenizer with more tokens than the model has embedding rows (a mismatched pair): the load
warns once, and a prompt that tokenizes to such an id is refused as that request's own error,
naming the id, in `warden run` and over HTTP, while other requests are served."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from conftest import GOLDEN, WARDEN_BIN, WardenServer, gpt2_byte_decoder, require_warden


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory) -> Path:
    """tiny-llama (vocabulary 320) with a byte-level BPE tokenizer whose merge "the" is id 400."""
    src = GOLDEN / "tiny-llama"
    if not src.is_dir():
        pytest.skip(f"{src} missing")
    d = tmp_path_factory.mktemp("mismatch") / "tiny-llama-big-tokenizer"
    shutil.copytree(src, d)
    assert json.loads((d / "config.json").read_text())["vocab_size"] == 320
    vocab = gpt2_byte_decoder()  # the 256 byte tokens, ids = their bytes
    vocab["th"], vocab["the"] = 300, 400
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    (d / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": bl,
        "post_processor": None, "decoder": bl,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": ["t h", "th e"]}}))
    return d


NEEDLE = "the prompt holds token id 400, outside the model's vocabulary of 320"


def test_run_warns_and_refuses_the_prompt(mismatched: Path):
    require_warden()
    p = subprocess.run([str(WARDEN_BIN), "run", "-m", str(mismatched), "-p", "the cat", "-n", "2"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "the tokenizer has 401 tokens but the model's vocabulary is 320" in p.stderr
    assert NEEDLE in p.stderr.strip().splitlines()[-1], p.stderr
    ok = subprocess.run([str(WARDEN_BIN), "run", "-m", str(mismatched), "-p", "a cat", "-n", "2"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr


def test_server_refuses_the_prompt_and_serves_the_rest(mismatched: Path):
    s = WardenServer(model=mismatched)
    try:
        body = {"model": s.model_id, "max_tokens": 4, "temperature": 0}
        with httpx.Client(timeout=120) as c:
            bad = c.post(s.base + "/v1/completions", json={**body, "prompt": "the cat"})
            assert bad.status_code == 400, bad.text
            assert NEEDLE in bad.json()["error"]["message"], bad.text
            good = c.post(s.base + "/v1/completions", json={**body, "prompt": "a cat"})
            assert good.status_code == 200, good.text
            assert good.json()["usage"]["completion_tokens"] == 4
    finally:
        assert s.stop() == 0, "".join(s.stderr_lines)[-2000:]
