"""An embedding table that is only looked up (a separate head exists) is read where the file maps
it, not copied into warden's panels, when the runtime format holds its values exactly: bf16 rows
at --dtype bf16 or f32, f32 rows at --dtype f32 (model/model_loader.cpp, mapped_lookup_table).

The reference is the same file loaded with --no-mmap, which copies the table as before: its
logits are the same bits, and that copy path is checked against transformers by
test_reference_logits.py (tiny-llama, untied). Where the table doubles as the head (tied), or the
runtime format would round it (f32 rows at --dtype bf16), nothing is read in place.
"""
from __future__ import annotations

import subprocess

import pytest

from conftest import GOLDEN, ROOT, TIMEOUT_S, WARDEN_BIN, require_warden
from gguf_convert import convert

IDS = "1,5,9,42,7,300,12,3"
IN_PLACE = "read in place from the file"


def logits(model, *extra: str) -> subprocess.CompletedProcess:
    """`warden logits` of IDS (top 20) with --weights named, so the load line is printed."""
    require_warden()
    p = subprocess.run([str(WARDEN_BIN), "logits", "-m", str(model), "--tokens", IDS, "--top", "20", *extra],
                       capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert '"pos"' in p.stdout, p.stdout[-2000:]
    return p


def load_line(p: subprocess.CompletedProcess) -> str:
    return next(line for line in p.stderr.splitlines() if line.startswith("warden: weights"))


@pytest.fixture(scope="module")
def bf16_gguf(tmp_path_factory):
    """tiny-deepseek-v3 (untied) as a GGUF whose matrices, token_embd included, are BF16."""
    out = tmp_path_factory.mktemp("lookup") / "tiny-deepseek-v3-bf16.gguf"
    convert(GOLDEN / "tiny-deepseek-v3", out, dtype="bf16")
    return out


@pytest.mark.parametrize("case", ["safetensors-f32", "gguf-f32", "gguf-bf16-at-f32", "gguf-bf16-at-bf16"])
def test_untied_table_is_read_in_place_with_the_same_logits(case, bf16_gguf):
    model = {"safetensors-f32": GOLDEN / "tiny-llama",
             "gguf-f32": GOLDEN / "tiny-llama.gguf"}.get(case, bf16_gguf)
    dtype = "bf16" if case.endswith("at-bf16") else "f32"
    args = ("--dtype", dtype, "--weights", dtype)
    mapped = logits(model, *args)
    copied = logits(model, *args, "--no-mmap")
    assert IN_PLACE in load_line(mapped), load_line(mapped)
    assert IN_PLACE not in load_line(copied), load_line(copied)
    assert mapped.stdout == copied.stdout


def test_f32_table_at_bf16_is_copied():
    """bf16 panels round f32 values: the table is copied (rounded) as before, not read in place."""
    p = logits(GOLDEN / "tiny-llama", "--dtype", "bf16", "--weights", "bf16")
    assert IN_PLACE not in load_line(p), load_line(p)


def test_tied_table_is_the_head_and_is_copied():
    """tiny-qwen3 ties its head to the embeddings: a matmul reads the table, so it is packed."""
    p = logits(GOLDEN / "tiny-qwen3", "--dtype", "f32", "--weights", "f32")
    assert IN_PLACE not in load_line(p), load_line(p)
