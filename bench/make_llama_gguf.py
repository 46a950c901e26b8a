#!/usr/bin/env python3
"""Write a Llama-shaped GGUF with random BF16 weights for speed benchmarks.

Default shape is TinyLlama-1.1B (hidden 2048, 22 layers, ffn 5632, 32 heads,
4 kv heads, vocab 32000, rope theta 10000, rms eps 1e-5, ctx 2048). Matrices
are BF16 (round-to-nearest-even from float32 N(0, std)), norm weights are F32
ones. The SentencePiece vocab (every tokenizer.ggml.* key) is copied from a
reference GGUF so that llama.cpp and warden both tokenize and load it.

The weights are random: the file is for measuring speed, never quality.
Tensors are generated and written one at a time, in row chunks, so peak memory
stays near the size of the largest tensor (~131 MB), not the file (~2.2 GB).

Usage (from the repo root):
    .venv/bin/python bench/make_llama_gguf.py \
        --vocab-gguf VOCAB.gguf --out models/llama-1b-bf16.gguf
VOCAB.gguf is any GGUF with a Llama SentencePiece vocab (llama.cpp's
models/ggml-vocab-llama-spm.gguf). Small smoke-test file:
    .venv/bin/python bench/make_llama_gguf.py --vocab-gguf VOCAB.gguf --layers 2 --out tiny.gguf
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import gguf

ARCH = "llama"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="models/llama-1b-bf16.gguf")
    p.add_argument("--vocab-gguf", required=True,
                   help="GGUF whose tokenizer.ggml.* metadata is copied")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=22)
    p.add_argument("--ffn", type=int, default=5632)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--std", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--tied", action="store_true",
                   help="omit output.weight (llama.cpp/warden then reuse token_embd)")
    p.add_argument("--chunk-elems", type=int, default=1 << 24,
                   help="float32 elements generated per chunk (default 16M = 64 MB)")
    return p.parse_args()


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bf16 bit pattern (uint16). No NaNs expected."""
    u = x.view(np.uint32)
    u = u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
    return (u >> np.uint32(16)).astype(np.uint16)


def random_bf16(rng: np.random.Generator, shape: tuple[int, ...], std: float, chunk_elems: int) -> np.ndarray:
    out = np.empty(shape, dtype=np.uint16)
    flat = out.reshape(-1)
    n = flat.size
    for start in range(0, n, chunk_elems):
        stop = min(n, start + chunk_elems)
        x = rng.standard_normal(stop - start, dtype=np.float32)
        x *= np.float32(std)
        flat[start:stop] = f32_to_bf16_bits(x)
    return out


def copy_tokenizer_kv(writer: gguf.GGUFWriter, vocab_path: str) -> int:
    reader = gguf.GGUFReader(vocab_path)
    n_vocab = None
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.ggml."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            values = field.contents()
            writer.add_key_value(key, values, vtype, sub_type=sub)
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(values)
        else:
            writer.add_key_value(key, field.contents(), vtype)
    if n_vocab is None:
        sys.exit(f"{vocab_path}: no tokenizer.ggml.tokens")
    return n_vocab


def main() -> None:
    a = parse_args()
    if a.hidden % a.heads or a.heads % a.kv_heads:
        sys.exit("hidden must divide by heads, heads by kv-heads")
    head_dim = a.hidden // a.heads
    kv_dim = head_dim * a.kv_heads

    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    w = gguf.GGUFWriter(a.out, ARCH)
    w.add_name("warden-bench-llama-random")
    w.add_description("random N(0,%g) BF16 weights, TinyLlama shape; for speed benchmarks only" % a.std)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.hidden)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(a.rope_theta)
    w.add_layer_norm_rms_eps(a.eps)
    n_vocab = copy_tokenizer_kv(w, a.vocab_gguf)
    w.add_vocab_size(n_vocab)

    # (name, numpy shape = reversed ggml ne, kind). Linear weights are [out, in].
    plan: list[tuple[str, tuple[int, ...], str]] = [("token_embd.weight", (n_vocab, a.hidden), "w")]
    for i in range(a.layers):
        b = f"blk.{i}."
        plan += [
            (b + "attn_norm.weight", (a.hidden,), "norm"),
            (b + "attn_q.weight", (a.hidden, a.hidden), "w"),
            (b + "attn_k.weight", (kv_dim, a.hidden), "w"),
            (b + "attn_v.weight", (kv_dim, a.hidden), "w"),
            (b + "attn_output.weight", (a.hidden, a.hidden), "w"),
            (b + "ffn_norm.weight", (a.hidden,), "norm"),
            (b + "ffn_gate.weight", (a.ffn, a.hidden), "w"),
            (b + "ffn_up.weight", (a.ffn, a.hidden), "w"),
            (b + "ffn_down.weight", (a.hidden, a.ffn), "w"),
        ]
    plan.append(("output_norm.weight", (a.hidden,), "norm"))
    if not a.tied:
        plan.append(("output.weight", (n_vocab, a.hidden), "w"))

    total_params = 0
    total_bytes = 0
    for name, shape, kind in plan:
        n = int(np.prod(shape))
        total_params += n
        if kind == "norm":
            w.add_tensor_info(name, shape, np.dtype(np.float32), n * 4)
            total_bytes += n * 4
        else:
            w.add_tensor_info(name, shape, np.dtype(np.uint16), n * 2, raw_dtype=gguf.GGMLQuantizationType.BF16)
            total_bytes += n * 2

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    rng = np.random.default_rng(a.seed)
    t0 = time.time()
    done = 0
    for name, shape, kind in plan:
        if kind == "norm":
            data = np.ones(shape, dtype=np.float32)
        else:
            data = random_bf16(rng, shape, a.std, a.chunk_elems)
        w.write_tensor_data(data)
        done += data.nbytes
        del data
        if name.endswith("ffn_down.weight") or name.startswith("output"):
            print(f"\r{done / 1e9:6.2f} / {total_bytes / 1e9:.2f} GB  {time.time() - t0:5.1f}s",
                  end="", file=sys.stderr, flush=True)
    w.close()
    print(file=sys.stderr)
    print(f"wrote {a.out}: {len(plan)} tensors, {total_params / 1e9:.3f} B params, "
          f"{total_bytes / 1e9:.3f} GB tensor data, vocab {n_vocab}")


if __name__ == "__main__":
    main()
