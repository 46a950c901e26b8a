"""GGUF layers of the other llama.cpp block types run natively (kernels/matmul_kquant.h): Q2_K,
Q3_K, IQ4_XS (super-blocks of 256) and Q5_0, Q5_1, IQ4_NL (blocks of 32), mixed per tensor as
llama.cpp's low-bit mixes mix them, and one file of a single type. Tiny llamas written with gguf-py
(GGUFWriter, raw_dtype): Q5_0 / Q5_1 blocks from gguf-py's own quantizer, the others random but
valid blocks (gguf-py has no quantizer for them). The 32-block model has rows of 11 and 13 blocks,
so the kernels' tails (block counts not a multiple of 8) are exercised.

Independent reference: gguf-py's numpy dequantization (gguf.quants.dequantize) of the same block
bytes, written as an f32 GGUF.
  * warden's dequantization of every block is exactly gguf-py's (--weights f32: the f32 file's
    logits bit for bit);
  * the native load runs every matrix in its own block type (the load report says so) and its
    logits match the f32 reference within the int8 activation quantization's error, with the
    same top-1 at every position;
  * a file with a type warden cannot run (IQ2_XXS) is refused by name, with what to do instead.
"""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from conftest import record
from gguf_convert import blocks_and_f32_twin, compare_logits, warden_logits, write_tiny_llama

Q = gguf.GGMLQuantizationType
LAYERS, HEADS, KV_HEADS, VOCAB = 2, 4, 2, 320


def _f16(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float16).view(np.uint8).reshape(-1, 2)


# Byte offset of each block's f16 scales (d, then dmin where there is one) and scale magnitudes
# that give weights of ~0.05.
SCALES = {
    Q.Q2_K: (80, [1e-3, 1.5e-3]),
    Q.Q3_K: (108, [4e-4]),
    Q.IQ4_XS: (0, [1.5e-5]),
    Q.IQ4_NL: (0, [4e-4]),
}


def blocks(rng: np.random.Generator, qtype, rows: int, cols: int) -> np.ndarray:
    """[rows, row_bytes] uint8 of valid blocks of qtype."""
    if qtype in (Q.Q5_0, Q.Q5_1):  # gguf-py quantizes these itself
        return gguf.quants.quantize((0.05 * rng.standard_normal((rows, cols))).astype(np.float32), qtype)
    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    b = rng.integers(0, 256, size=(nb, nbytes), dtype=np.uint8)
    at, mags = SCALES[qtype]
    for i, m in enumerate(mags):
        b[:, at + 2 * i:at + 2 * i + 2] = _f16(rng.uniform(0.3, 1.0, nb) * m)
    return b.reshape(rows, cols // block * nbytes)


def plan(kind: str) -> tuple[int, int, dict[str, tuple[object, int, int]]]:
    """(hidden, ffn, {name: (type, rows, cols)}) of one test model."""
    if kind == "kmix":  # a Q2_K / Q3_K-style low-bit mix with IQ4_XS
        d, ff = 256, 512
        t = {"q": Q.Q3_K, "k": Q.Q2_K, "v": Q.IQ4_XS, "o": Q.Q3_K, "gate": Q.Q2_K, "up": Q.IQ4_XS,
             "down": Q.Q3_K, "embd": Q.Q2_K, "out": Q.IQ4_XS}
    elif kind == "b32mix":  # 11- and 13-block rows
        d, ff = 352, 416
        t = {"q": Q.Q5_0, "k": Q.Q5_1, "v": Q.IQ4_NL, "o": Q.Q5_0, "gate": Q.Q5_1, "up": Q.IQ4_NL,
             "down": Q.Q5_0, "embd": Q.Q5_1, "out": Q.IQ4_NL}
    else:  # every matrix IQ4_XS
        d, ff = 256, 512
        t = dict.fromkeys(["q", "k", "v", "o", "gate", "up", "down", "embd", "out"], Q.IQ4_XS)
    kv = KV_HEADS * (d // HEADS)
    out = {"token_embd.weight": (t["embd"], VOCAB, d), "output.weight": (t["out"], VOCAB, d)}
    for i in range(LAYERS):
        p = f"blk.{i}."
        out[p + "attn_q.weight"] = (t["q"], d, d)
        out[p + "attn_k.weight"] = (t["k"], kv, d)
        out[p + "attn_v.weight"] = (t["v"], kv, d)
        out[p + "attn_output.weight"] = (t["o"], d, d)
        out[p + "ffn_gate.weight"] = (t["gate"], ff, d)
        out[p + "ffn_up.weight"] = (t["up"], ff, d)
        out[p + "ffn_down.weight"] = (t["down"], d, ff)
    return d, ff, out


def write_model(path: Path, d: int, ff: int, tensors: dict[str, tuple[object, np.ndarray]]) -> None:
    write_tiny_llama(path, tensors, name="tiny-blocks", layers=LAYERS, d=d, ff=ff, heads=HEADS, kv_heads=KV_HEADS,
                     vocab=VOCAB)


def make_files(d_out: Path, kind: str, seed: int, override: dict | None = None) -> tuple[Path, Path]:
    """(the block-type file, its exact f32 dequantization by gguf-py)."""
    rng = np.random.default_rng(seed)
    d, ff, matrices = plan(kind)
    matrices.update(override or {})
    shapes = {name: (qt, (rows, cols)) for name, (qt, rows, cols) in matrices.items()}
    quant, exact = blocks_and_f32_twin(shapes, lambda qt, shape: blocks(rng, qt, *shape))
    for i in range(LAYERS):
        for n in ("attn_norm", "ffn_norm"):
            v = (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32)
            quant[f"blk.{i}.{n}.weight"] = exact[f"blk.{i}.{n}.weight"] = (None, v)
    quant["output_norm.weight"] = exact["output_norm.weight"] = (None, np.ones(d, np.float32))
    write_model(d_out / f"{kind}.gguf", d, ff, quant)
    write_model(d_out / f"{kind}-exact-f32.gguf", d, ff, exact)
    return d_out / f"{kind}.gguf", d_out / f"{kind}-exact-f32.gguf"


KINDS = {"kmix": ("iq4_xs+q2_k+q3_k", "IQ4_XS x4, Q2_K x4, Q3_K x6"),
         "b32mix": ("iq4_nl+q5_0+q5_1", "IQ4_NL x4, Q5_0 x6, Q5_1 x4"),
         "iq4xs": ("iq4_xs", None)}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("blocks")
    return {k: make_files(d, k, 44 + i) for i, k in enumerate(KINDS)}


@pytest.mark.parametrize("kind", list(KINDS))
def test_dequantization_matches_gguf_py_exactly(files, kind):
    f, ref = files[kind]
    exact = ("--weights", "f32")
    assert warden_logits(f, *exact, top=VOCAB).stdout == warden_logits(ref, *exact, top=VOCAB).stdout


@pytest.mark.parametrize("kind", list(KINDS))
def test_native_layers_match_f32_reference(files, kind):
    f, ref = files[kind]
    native = warden_logits(f, top=VOCAB)
    formats, counts = KINDS[kind]
    assert f"weights {formats} (auto: layer matrices" in native.stderr, native.stderr
    if counts:
        assert f"layer matrices {counts}, each imported without loss" in native.stderr, native.stderr
    reference = warden_logits(ref, "--weights", "f32", top=VOCAB)
    worst = compare_logits(native.stdout, reference.stdout)
    record("gguf block types", f"tiny llama {kind} native vs its f32 dequantization, max |diff| / spread", worst)
    assert worst <= 0.05, worst


def test_unsupported_iq_type_refused_by_name(tmp_path):
    # The kmix model with one layer matrix in IQ2_XXS (a lattice-codebook type warden does not run).
    rng = np.random.default_rng(3)
    d, ff, matrices = plan("kmix")
    tensors = {name: (qt, blocks(rng, qt, rows, cols)) for name, (qt, rows, cols) in matrices.items()}
    tensors["blk.1.ffn_up.weight"] = (Q.IQ2_XXS, rng.integers(0, 256, size=(ff, d // 256 * 66), dtype=np.uint8))
    for i in range(LAYERS):
        for n in ("attn_norm", "ffn_norm"):
            tensors[f"blk.{i}.{n}.weight"] = (None, np.ones(d, np.float32))
    tensors["output_norm.weight"] = (None, np.ones(d, np.float32))
    bad = tmp_path / "iq2.gguf"
    write_model(bad, d, ff, tensors)
    p = warden_logits(bad, top=1, ok=False)
    assert p.returncode != 0
    assert "IQ2_XXS" in p.stderr and "blk.1.ffn_up.weight" in p.stderr, p.stderr[-2000:]
    assert "re-quantize" in p.stderr, p.stderr[-2000:]
