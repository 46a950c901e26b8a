"""K-quant GGUF layers run natively (kernels/matmul_kquant.h): a tiny llama written with gguf-py
(GGUFWriter, raw_dtype) whose matrices are random-but-valid Q4_K / Q5_K / Q6_K blocks, mixed per
tensor as llama.cpp's Q4_K_M mixes them (Q6_K for attn_v, ffn_down and the head).

Independent reference: gguf-py's numpy dequantization (gguf.quants.dequantize) of the same block
bytes, written as an f32 GGUF.
  * warden's dequantization of every block is exactly gguf-py's: the K-quant file loaded at
    --weights f32 gives the f32 file's logits bit for bit (same text);
  * the native load (no --weights) runs every matrix in its own block type (the load report says
    so) and its logits match the f32 reference within the int8 activation quantization's error,
    with the same top-1 at every position;
  * --weights bf16 still forces the dequantized path;
  * the native load reads the blocks where the file maps them (no copy, the load report says so),
    yet still checks every block: a NaN scale in the last row of one matrix is refused, naming it.
"""
from __future__ import annotations

from pathlib import Path

import shutil

import gguf
import numpy as np
import pytest

from conftest import record
from gguf_convert import blocks_and_f32_twin, compare_logits, warden_logits, write_tiny_llama

Q = gguf.GGMLQuantizationType
D, FF, LAYERS, HEADS, KV_HEADS, VOCAB = 256, 512, 2, 4, 2, 320
HEAD_DIM = D // HEADS


def _f16(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float16).view(np.uint8).reshape(-1, 2)


def random_blocks(rng: np.random.Generator, qtype, rows: int, cols: int) -> np.ndarray:
    """[rows, row_bytes] uint8 of valid blocks: random codes and scales, weights of ~0.05."""
    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    b = rng.integers(0, 256, size=(nb, nbytes), dtype=np.uint8)
    if qtype == Q.Q6_K:  # w = d * sc * (q - 32), sc int8
        b[:, 208:210] = _f16(rng.uniform(0.3, 1.0, nb) * 1.5e-5)
    else:  # w = d * sc * q - dmin * m, sc and m 6-bit
        b[:, 0:2] = _f16(rng.uniform(0.3, 1.0, nb) * 2e-4)
        b[:, 2:4] = _f16(rng.uniform(0.3, 1.0, nb) * 3e-4)
    return b.reshape(rows, cols // block * nbytes)


# Q4_K_M's choices: Q6_K for attn_v, ffn_down and output, Q4_K elsewhere; one layer's up in Q5_K.
def _matrices():
    out = {"token_embd.weight": (Q.Q4_K, VOCAB, D), "output.weight": (Q.Q6_K, VOCAB, D)}
    for i in range(LAYERS):
        p = f"blk.{i}."
        out[p + "attn_q.weight"] = (Q.Q4_K, D, D)
        out[p + "attn_k.weight"] = (Q.Q4_K, KV_HEADS * HEAD_DIM, D)
        out[p + "attn_v.weight"] = (Q.Q6_K, KV_HEADS * HEAD_DIM, D)
        out[p + "attn_output.weight"] = (Q.Q4_K, D, D)
        out[p + "ffn_gate.weight"] = (Q.Q4_K, FF, D)
        out[p + "ffn_up.weight"] = (Q.Q5_K if i == 1 else Q.Q4_K, FF, D)
        out[p + "ffn_down.weight"] = (Q.Q6_K, D, FF)
    return out


def write_model(path: Path, tensors: dict[str, tuple[object, np.ndarray]]) -> None:
    write_tiny_llama(path, tensors, name="tiny-kquant", layers=LAYERS, d=D, ff=FF, heads=HEADS, kv_heads=KV_HEADS,
                     vocab=VOCAB)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    """(the K-quant file, its exact f32 dequantization by gguf-py)."""
    rng = np.random.default_rng(44)
    d = tmp_path_factory.mktemp("kquant")
    matrices = {name: (qt, (rows, cols)) for name, (qt, rows, cols) in _matrices().items()}
    quant, exact = blocks_and_f32_twin(matrices, lambda qt, shape: random_blocks(rng, qt, *shape))
    for i in range(LAYERS):
        for n in ("attn_norm", "ffn_norm"):
            v = (1.0 + 0.1 * rng.standard_normal(D)).astype(np.float32)
            quant[f"blk.{i}.{n}.weight"] = exact[f"blk.{i}.{n}.weight"] = (None, v)
    quant["output_norm.weight"] = exact["output_norm.weight"] = (None, np.ones(D, np.float32))
    write_model(d / "kquant.gguf", quant)
    write_model(d / "exact-f32.gguf", exact)
    return d / "kquant.gguf", d / "exact-f32.gguf"


def test_dequantization_matches_gguf_py_exactly(files):
    kq, ref = files
    exact = ("--weights", "f32")
    assert warden_logits(kq, *exact, top=VOCAB).stdout == warden_logits(ref, *exact, top=VOCAB).stdout


def test_native_layers_match_f32_reference(files):
    kq, ref = files
    native = warden_logits(kq, top=VOCAB)
    assert "weights q4_k+q5_k+q6_k (auto: layer matrices Q4_K x9, Q5_K x1, Q6_K x4, each imported without loss" \
        in native.stderr, native.stderr
    assert "token_embd Q4_K as q4_k without loss" in native.stderr, native.stderr
    assert "output Q6_K as q6_k without loss" in native.stderr, native.stderr
    assert "read in place from the file" in native.stderr, native.stderr
    reference = warden_logits(ref, "--weights", "f32", top=VOCAB)
    worst = compare_logits(native.stdout, reference.stdout)
    record("gguf k-quants", "tiny llama Q4_K/Q5_K/Q6_K native vs its f32 dequantization, max |diff| / spread", worst)
    assert worst <= 0.05, worst


def test_no_mmap_copies_the_blocks_with_the_same_logits(files):
    """--no-mmap copies the blocks into warden's own memory instead of reading the mapping: the
    load line says nothing is read in place, and the logits are the same bits."""
    kq, _ = files
    mapped = warden_logits(kq, top=VOCAB)
    copied = warden_logits(kq, "--no-mmap", top=VOCAB)
    assert "read in place from the file" in mapped.stderr, mapped.stderr
    assert "read in place" not in copied.stderr, copied.stderr
    assert copied.stdout == mapped.stdout


def test_bf16_still_forces_dequantized_path(files):
    kq, _ = files
    p = warden_logits(kq, "--weights", "bf16", top=1)
    assert "q4_k" not in p.stderr.split("weights", 1)[1].split("\n", 1)[0], p.stderr


def test_in_place_load_still_checks_every_block_scale(files, tmp_path):
    kq, _ = files
    bad = tmp_path / "nan-scale.gguf"
    shutil.copy(kq, bad)
    name = "blk.1.ffn_down.weight"  # Q6_K: [ql 128][qh 64][scales 16][f16 d]
    t = next(t for t in gguf.GGUFReader(kq).tensors if t.name == name)
    assert t.tensor_type == Q.Q6_K
    last_block = int(t.data_offset) + int(t.n_bytes) - 210
    with open(bad, "r+b") as f:
        f.seek(last_block + 208)
        f.write(np.array([0x7E00], np.uint16).tobytes())  # f16 NaN
    p = warden_logits(bad, top=1, ok=False)
    assert p.returncode != 0, p.stderr
    assert "corrupt quantized tensor" in p.stderr and name in p.stderr, p.stderr
