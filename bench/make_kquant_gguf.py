#!/usr/bin/env python3
"""Write a Llama-shaped GGUF of random but valid K-quant blocks in llama.cpp's Q4_K_M mix, for
speed and memory benchmarks of the native K-quant kernels (never quality: the codes and scales are
random, weights of ~N(0, 0.02) scale).

The mix follows llama-quantize's Q4_K_M: token_embd Q4_K, output Q6_K, attn_v and ffn_down Q6_K
in the first and last eighth of the layers and every third layer between (use_more_bits), Q4_K
everywhere else. The shape defaults to TinyLlama-1.1B (bench/make_llama_gguf.py, whose tokenizer
copy it reuses); every row length must be a multiple of 256.

Usage (from the repo root):
    .venv/bin/python bench/make_kquant_gguf.py --vocab-gguf VOCAB.gguf --out llama-1b-q4_k_m.gguf
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_llama_gguf import copy_tokenizer_kv  # noqa: E402

Q = gguf.GGMLQuantizationType


def random_blocks(rng: np.random.Generator, qtype, rows: int, cols: int) -> np.ndarray:
    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    b = rng.integers(0, 256, size=(nb, nbytes), dtype=np.uint8)
    f16 = lambda v: v.astype(np.float16).view(np.uint8).reshape(-1, 2)  # noqa: E731
    if qtype == Q.Q6_K:
        b[:, 208:210] = f16(rng.uniform(0.5, 1.0, nb) * 2e-5)
    else:
        b[:, 0:2] = f16(rng.uniform(0.5, 1.0, nb) * 1e-4)
        b[:, 2:4] = f16(rng.uniform(0.5, 1.0, nb) * 8e-4)
    return b.reshape(rows, cols // block * nbytes)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--vocab-gguf", required=True,
                   help="any GGUF with a Llama SentencePiece vocab (llama.cpp's "
                        "models/ggml-vocab-llama-spm.gguf)")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=22)
    p.add_argument("--ffn", type=int, default=5632)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args()
    head_dim = a.hidden // a.heads
    kv_dim = head_dim * a.kv_heads
    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name("warden-bench-llama-random-q4_k_m")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_context_length(2048)
    w.add_embedding_length(a.hidden)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    n_vocab = copy_tokenizer_kv(w, a.vocab_gguf)
    w.add_vocab_size(n_vocab)

    def more_bits(i: int) -> bool:  # llama.cpp's use_more_bits
        n = a.layers
        return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2

    plan = [("token_embd.weight", Q.Q4_K, n_vocab, a.hidden)]
    for i in range(a.layers):
        b = f"blk.{i}."
        hi = Q.Q6_K if more_bits(i) else Q.Q4_K
        plan += [(b + "attn_norm.weight", None, a.hidden, 0), (b + "attn_q.weight", Q.Q4_K, a.hidden, a.hidden),
                 (b + "attn_k.weight", Q.Q4_K, kv_dim, a.hidden), (b + "attn_v.weight", hi, kv_dim, a.hidden),
                 (b + "attn_output.weight", Q.Q4_K, a.hidden, a.hidden), (b + "ffn_norm.weight", None, a.hidden, 0),
                 (b + "ffn_gate.weight", Q.Q4_K, a.ffn, a.hidden), (b + "ffn_up.weight", Q.Q4_K, a.ffn, a.hidden),
                 (b + "ffn_down.weight", hi, a.hidden, a.ffn)]
    plan += [("output_norm.weight", None, a.hidden, 0), ("output.weight", Q.Q6_K, n_vocab, a.hidden)]
    rng = np.random.default_rng(a.seed)
    for name, qt, rows, cols in plan:
        if qt is None:
            w.add_tensor(name, np.ones(rows, np.float32))
        else:
            w.add_tensor(name, random_blocks(rng, qt, rows, cols), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}: {os.path.getsize(a.out) / 1e9:.3f} GB")


if __name__ == "__main__":
    main()
