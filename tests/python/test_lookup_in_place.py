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


@pytest.fixture(scope="module")
def bf16_glm_gguf(tmp_path_factory):
    """tiny-glm4-moe (untied; every row length a multiple of 32, so int4 layers load) as BF16."""
    out = tmp_path_factory.mktemp("lookup-int4") / "tiny-glm4-moe-bf16.gguf"
    convert(GOLDEN / "tiny-glm4-moe", out, dtype="bf16")
    return out


def test_bf16_table_beside_int4_layers_stays_bf16_and_is_written_so(bf16_glm_gguf, tmp_path):
    """Beside int4 layers the head becomes int8, but a bf16 table that is only looked up is kept as
    stored (read in place: no conversion at start-up, exact values) unless --head-weights names a
    format; `warden quantize` copies it, so its file loads to the same logits."""
    gguf = pytest.importorskip("gguf")
    mapped = logits(bf16_glm_gguf, "--weights", "int4")
    assert "token_embd BF16 as bf16 without loss" in load_line(mapped), load_line(mapped)
    assert IN_PLACE in load_line(mapped), load_line(mapped)
    assert mapped.stdout == logits(bf16_glm_gguf, "--weights", "int4", "--no-mmap").stdout
    named = logits(bf16_glm_gguf, "--weights", "int4", "--head-weights", "int8")
    assert named.stdout != mapped.stdout  # the int8 table rounds the embeddings

    out = tmp_path / "q.gguf"
    p = subprocess.run([str(WARDEN_BIN), "quantize", "-m", str(bf16_glm_gguf), "-o", str(out), "--weights", "int4"],
                       capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "output as int8" in p.stdout and "token_embd" not in p.stdout, p.stdout
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(out)).tensors}
    assert types["token_embd.weight"] == "BF16" and types["output.weight"] == "Q8_0", types
    assert logits(out, "--weights", "int4").stdout == mapped.stdout
    assert logits(out).stdout == mapped.stdout  # the file's own format, no flags
