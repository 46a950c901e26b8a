#!/usr/bin/env python3
"""A llama GGUF -> a Hugging Face checkpoint directory (config.json, model.safetensors, tokenizer),
for the safetensors rows of the start-up benchmark (bench/startup_bench.py).

  --dtype bf16  every weight BF16 (the norms too, as published bf16 checkpoints store them);
  --dtype fp8   the layers' linear weights as float8_e4m3fn codes plus `weight_scale_inv` (F32) per
                128x128 block and config.json's quantization_config {quant_method "fp8", fmt
                "e4m3", weight_block_size [128, 128], activation_scheme "dynamic"}, the layout of
                DeepSeek-V3 / Qwen3-*-FP8 (src/formats/fp8_block.h); embeddings and norms BF16.
An INT4 compressed-tensors (pack-quantized) checkpoint is then `warden quantize -m BF16_DIR -o
OUT_DIR --weights int4-g32` (docs/WEIGHT_QUANT.md).

The GGUF's tensors are dequantized with gguf-py (gguf.quants.dequantize); Q and K get back the
row order of the Hugging Face checkpoint (llama.cpp's converter permutes them for its RoPE
layout; this undoes LlamaModel.permute). Only numpy and gguf are needed; the safetensors file is
written directly (8-byte little-endian header length, JSON header, data). The tokenizer files are
copied from --tokenizer-dir (default: the default model's, tests/golden/tokenizer/smollm2).

Usage: python3 bench/make_hf_checkpoint.py --gguf models/SmolLM2-135M-Instruct.Q4_1.gguf \
           --out /tmp/ststartup/smollm2-bf16 --dtype bf16
"""
from __future__ import annotations

import argparse
import json
import shutil
import struct
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BLOCK = 128
E4M3_MAX = 448.0


def field(r: gguf.GGUFReader, key: str):
    f = r.fields.get(key)
    return None if f is None else f.contents()


def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """f32 -> bf16 bit patterns, round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def e4m3_values() -> np.ndarray:
    """The 127 non-negative finite float8_e4m3fn values, codes 0x00..0x7E (0x7F is NaN)."""
    vals = []
    for code in range(0x7F):
        e, m = code >> 3, code & 7
        vals.append(m / 8.0 * 2.0**-6 if e == 0 else (1.0 + m / 8.0) * 2.0 ** (e - 7))
    return np.array(vals, dtype=np.float64)


E4M3 = e4m3_values()


def to_e4m3(x: np.ndarray) -> np.ndarray:
    """f32 -> float8_e4m3fn codes, nearest value (saturating at 448)."""
    a = np.minimum(np.abs(x).astype(np.float64), E4M3_MAX)
    hi = np.clip(np.searchsorted(E4M3, a), 1, len(E4M3) - 1)
    lo = hi - 1
    idx = np.where(a - E4M3[lo] <= E4M3[hi] - a, lo, hi).astype(np.uint8)
    return idx | (np.signbit(x).astype(np.uint8) << 7)


def fp8_block(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes [rows, cols] uint8, scale_inv [ceil(rows/128), ceil(cols/128)] f32)."""
    rows, cols = w.shape
    nbr, nbc = -(-rows // BLOCK), -(-cols // BLOCK)
    scale = np.zeros((nbr, nbc), dtype=np.float32)
    codes = np.empty((rows, cols), dtype=np.uint8)
    for i in range(nbr):
        for j in range(nbc):
            blk = w[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK]
            amax = float(np.max(np.abs(blk)))
            s = np.float32(amax / E4M3_MAX if amax > 0 else 1.0)
            scale[i, j] = s
            codes[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = to_e4m3(blk / s)
    return codes, scale


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's LlamaModel.permute (Q / K rows back into Hugging Face order)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_safetensors(path: Path, tensors: list[tuple[str, str, tuple, np.ndarray]]) -> None:
    """tensors: (name, safetensors dtype, shape, raw array) in file order."""
    header, offset = {}, 0
    for name, dtype, shape, arr in tensors:
        n = arr.nbytes
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for _, _, _, arr in tensors:
            f.write(np.ascontiguousarray(arr).tobytes())


HF_LAYER = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--dtype", choices=("bf16", "fp8"), default="bf16")
    ap.add_argument("--tokenizer-dir", type=Path, default=ROOT / "tests/golden/tokenizer/smollm2")
    a = ap.parse_args()

    r = gguf.GGUFReader(str(a.gguf))
    arch = field(r, "general.architecture")
    if arch != "llama":
        raise SystemExit(f"{a.gguf}: architecture {arch!r}; this script writes llama checkpoints only")
    p = lambda k: field(r, f"llama.{k}")  # noqa: E731
    n_head, n_kv = int(p("attention.head_count")), int(p("attention.head_count_kv"))
    d_model = int(p("embedding_length"))
    names = {t.name for t in r.tensors}
    tied = "output.weight" not in names
    vocab = next(t for t in r.tensors if t.name == "token_embd.weight").shape[-1]
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": d_model, "intermediate_size": int(p("feed_forward_length")),
        "num_hidden_layers": int(p("block_count")), "num_attention_heads": n_head,
        "num_key_value_heads": n_kv, "head_dim": d_model // n_head,
        "max_position_embeddings": int(p("context_length")),
        "rms_norm_eps": float(p("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(p("rope.freq_base") or 10000.0), "vocab_size": int(vocab),
        "tie_word_embeddings": tied, "bos_token_id": field(r, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field(r, "tokenizer.ggml.eos_token_id"), "torch_dtype": "bfloat16",
        "attention_bias": False, "mlp_bias": False,
    }
    if a.dtype == "fp8":
        config["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                         "weight_block_size": [BLOCK, BLOCK]}

    out = []
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)])  # outermost first
        parts = t.name.split(".")
        if t.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        elif t.name == "output_norm.weight":
            name = "model.norm.weight"
        elif t.name == "output.weight":
            name = "lm_head.weight"
        elif parts[0] == "blk" and parts[2] in HF_LAYER:
            name = f"model.layers.{parts[1]}.{HF_LAYER[parts[2]]}.weight"
            if parts[2] == "attn_q":
                w = unpermute(w, n_head)
            elif parts[2] == "attn_k":
                w = unpermute(w, n_kv)
        elif t.name == "rope_freqs.weight":
            continue
        else:
            raise SystemExit(f"{a.gguf}: tensor {t.name} has no Hugging Face name here")
        linear = parts[0] == "blk" and w.ndim == 2
        if a.dtype == "fp8" and linear:
            codes, scale = fp8_block(w)
            out.append((name, "F8_E4M3", w.shape, codes))
            out.append((name + "_scale_inv", "F32", scale.shape, scale))
        else:
            out.append((name, "BF16", w.shape, to_bf16_bits(w)))

    a.out.mkdir(parents=True, exist_ok=True)
    write_safetensors(a.out / "model.safetensors", out)
    (a.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if (a.tokenizer_dir / f).exists():
            shutil.copy(a.tokenizer_dir / f, a.out / f)
    print(f"{a.out}: {len(out)} tensors, {(a.out / 'model.safetensors').stat().st_size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
