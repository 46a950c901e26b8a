"""MoE expert tensors in GGUF block types run natively: a tiny qwen3moe written with gguf-py whose
stacked [n_expert, rows, cols] expert tensors (ffn_gate_exps / ffn_up_exps / ffn_down_exps) are
random but valid K-quant / IQ4_XS blocks, per tensor as the big MoE uploads mix them (Q4_K experts
with Q6_K down projections, IQ4_XS and Q2_K in another layer), attention in Q4_K / Q6_K, the
router in f32 as llama.cpp keeps it.

Independent reference: gguf-py's numpy dequantization of the same blocks, written as an f32 GGUF.
The native load must name every block format in its report and give the reference's top-1 at
every position with logits within the int8 activation quantization's error; --weights f32 must
give the reference's logits bit for bit (warden's dequantization is gguf-py's).
"""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from conftest import record
from gguf_convert import (add_toy_tokenizer, blocks_and_f32_twin, compare_logits, warden_logits,
                          write_tensors_and_close)

Q = gguf.GGMLQuantizationType
D, FF_EXP, LAYERS, HEADS, KV_HEADS, VOCAB, EXPERTS, TOP_K = 256, 256, 2, 4, 2, 320, 4, 2
HEAD_DIM = D // HEADS

# Byte offset of each block's f16 scales and magnitudes that give weights of ~0.05.
SCALES = {
    Q.Q4_K: (0, [2e-4, 3e-4]),
    Q.Q5_K: (0, [1e-4, 3e-4]),
    Q.Q6_K: (208, [1.5e-5]),
    Q.Q2_K: (80, [1e-3, 1.5e-3]),
    Q.Q3_K: (108, [4e-4]),
    Q.IQ4_XS: (0, [1.5e-5]),
}


def blocks(rng: np.random.Generator, qtype, shape: tuple[int, ...]) -> np.ndarray:
    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    n = int(np.prod(shape))
    b = rng.integers(0, 256, size=(n // block, nbytes), dtype=np.uint8)
    at, mags = SCALES[qtype]
    for i, m in enumerate(mags):
        d = (rng.uniform(0.3, 1.0, n // block) * m).astype(np.float16)
        b[:, at + 2 * i:at + 2 * i + 2] = d.view(np.uint8).reshape(-1, 2)
    return b.reshape(*shape[:-1], shape[-1] // block * nbytes)


def _matrices() -> dict[str, tuple[object, tuple[int, ...]]]:
    out = {"token_embd.weight": (Q.Q4_K, (VOCAB, D)), "output.weight": (Q.Q6_K, (VOCAB, D))}
    exp_types = [(Q.Q4_K, Q.Q4_K, Q.Q6_K), (Q.IQ4_XS, Q.Q2_K, Q.Q3_K)]
    for i in range(LAYERS):
        p = f"blk.{i}."
        out[p + "attn_q.weight"] = (Q.Q4_K, (HEADS * HEAD_DIM, D))
        out[p + "attn_k.weight"] = (Q.Q4_K, (KV_HEADS * HEAD_DIM, D))
        out[p + "attn_v.weight"] = (Q.Q6_K, (KV_HEADS * HEAD_DIM, D))
        out[p + "attn_output.weight"] = (Q.Q5_K, (D, HEADS * HEAD_DIM))
        g, u, d = exp_types[i]
        out[p + "ffn_gate_exps.weight"] = (g, (EXPERTS, FF_EXP, D))
        out[p + "ffn_up_exps.weight"] = (u, (EXPERTS, FF_EXP, D))
        out[p + "ffn_down_exps.weight"] = (d, (EXPERTS, D, FF_EXP))
    return out


def write_model(path: Path, tensors: dict[str, tuple[object, np.ndarray]]) -> None:
    w = gguf.GGUFWriter(str(path), "qwen3moe")
    w.add_name("tiny-block-moe")
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(D)
    w.add_feed_forward_length(FF_EXP)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(TOP_K)
    w.add_expert_feed_forward_length(FF_EXP)
    add_toy_tokenizer(w, VOCAB)
    write_tensors_and_close(w, tensors)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    rng = np.random.default_rng(45)
    d = tmp_path_factory.mktemp("blockmoe")
    quant, exact = blocks_and_f32_twin(_matrices(), lambda qt, shape: blocks(rng, qt, shape))
    for i in range(LAYERS):
        p = f"blk.{i}."
        router = (0.5 * rng.standard_normal((EXPERTS, D))).astype(np.float32)
        quant[p + "ffn_gate_inp.weight"] = exact[p + "ffn_gate_inp.weight"] = (None, router)
        for n, size in (("attn_norm", D), ("ffn_norm", D), ("attn_q_norm", HEAD_DIM), ("attn_k_norm", HEAD_DIM)):
            v = (1.0 + 0.1 * rng.standard_normal(size)).astype(np.float32)
            quant[p + n + ".weight"] = exact[p + n + ".weight"] = (None, v)
    quant["output_norm.weight"] = exact["output_norm.weight"] = (None, np.ones(D, np.float32))
    write_model(d / "moe.gguf", quant)
    write_model(d / "moe-exact-f32.gguf", exact)
    return d / "moe.gguf", d / "moe-exact-f32.gguf"


def test_dequantization_matches_gguf_py_exactly(files):
    f, ref = files
    exact = ("--weights", "f32")
    assert warden_logits(f, *exact, top=VOCAB).stdout == warden_logits(ref, *exact, top=VOCAB).stdout


def test_native_experts_match_f32_reference(files):
    f, ref = files
    native = warden_logits(f, top=VOCAB)
    assert "weights iq4_xs+q2_k+q3_k+q4_k+q5_k+q6_k (auto: layer matrices" in native.stderr, native.stderr
    reference = warden_logits(ref, "--weights", "f32", top=VOCAB)
    worst = compare_logits(native.stdout, reference.stdout)
    record("gguf block types", "tiny qwen3moe block-type experts native vs its f32 dequantization, "
           "max |diff| / spread", worst)
    assert worst <= 0.05, worst
