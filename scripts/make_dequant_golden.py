#!/usr/bin/env python3
"""Writes the golden files for tests/tensor/test_dequant.cpp.

For every type T in TYPES this writes tests/golden/dequant/T.bin (raw ggml blocks, exactly as
they would sit in a GGUF file) and T.f32 (the little-endian float32 values that the `gguf`
PyPI package's numpy dequantizer produces for them). The C++ test dequantizes T.bin with
tensor::dequantize_row and compares bit for bit.

Blocks come from two sources:
  * gguf.quants.quantize() of random floats, for the types the package can quantize
    (F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0);
  * random block bytes with finite f16 scales (including zero, negative and subnormal
    scales), for every quantized type. This is the only source for Q4_K/Q5_K/Q6_K, which the
    package cannot quantize, and it also covers codes a quantizer never emits (e.g. -128 in
    Q8_0).

The reference values never go through warden code. Run from the repository root with
    .venv/bin/python scripts/make_dequant_golden.py
Generated with gguf 0.19.0 and numpy 2.4.6; the output is deterministic (fixed seeds).
"""
import importlib.metadata
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden", "dequant")

# type -> (number of quantized blocks, number of random-byte blocks)
TYPES = {
    "F16": (0, 0),
    "BF16": (0, 0),
    "Q4_0": (8, 8),
    "Q4_1": (8, 8),
    "Q5_0": (8, 8),
    "Q5_1": (8, 8),
    "Q8_0": (8, 8),
    "Q4_K": (0, 8),
    "Q5_K": (0, 8),
    "Q6_K": (0, 8),
}

# Byte offsets of the f16 scale fields inside one block (ggml-common.h layouts).
SCALE_OFFSETS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
}


def random_scales(rng, n):
    """Finite f16 values: mostly ordinary magnitudes, plus 0, -0, subnormals, max."""
    v = (rng.standard_normal(n) * rng.choice([1e-3, 1e-2, 0.1, 1.0], n)).astype(np.float16)
    special = np.array([0.0, -0.0, 6e-8, -6e-8, 3e-5, 65504.0, -65504.0, 1.0], dtype=np.float16)
    k = min(n, len(special))
    idx = rng.choice(n, k, replace=False)
    v[idx] = special[:k]
    return v


def random_blocks(rng, name, n_blocks):
    qtype = T[name]
    _, type_size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in SCALE_OFFSETS[name]:
        blocks[:, off:off + 2] = random_scales(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(-1)


def half_values(rng, n):
    """f16 bit patterns: every exponent, subnormals, zeros, infinities, quiet NaNs."""
    codes = [0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x7bff, 0xfbff, 0x3c00,
             0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7fff]
    codes += list(rng.integers(0, 0x7c00, size=n - len(codes) - n // 4))  # finite positives
    codes += list(rng.integers(0, 0x7c00, size=n // 4) | 0x8000)         # finite negatives
    return np.array(codes[:n], dtype=np.uint16)


def bf16_values(rng, n):
    codes = [0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0x7f80,
             0xff80, 0x7fc0, 0xffc0, 0x7fff]
    codes += list(rng.integers(0, 0x7f80, size=n - len(codes) - n // 4))
    codes += list(rng.integers(0, 0x7f80, size=n // 4) | 0x8000)
    return np.array(codes[:n], dtype=np.uint16)


def main():
    os.makedirs(OUT, exist_ok=True)
    total = 0
    for i, (name, (n_quant, n_random)) in enumerate(TYPES.items()):
        rng = np.random.default_rng(1234 + i)
        qtype = T[name]
        if name == "F16":
            raw = half_values(rng, 512).view(np.uint8)
        elif name == "BF16":
            raw = bf16_values(rng, 512).view(np.uint8)
        else:
            block_elems, _ = GGML_QUANT_SIZES[qtype]
            parts = []
            if n_quant:
                x = rng.standard_normal(n_quant * block_elems).astype(np.float32)
                x *= np.repeat(rng.choice([1e-3, 0.05, 1.0, 30.0], n_quant), block_elems).astype(np.float32)
                x[:block_elems] = 0.0  # one all-zero block (d == 0 path)
                parts.append(gguf.quants.quantize(x.reshape(1, -1), qtype).reshape(-1))
            if n_random:
                parts.append(random_blocks(rng, name, n_random))
            raw = np.concatenate(parts).astype(np.uint8)
        ref = gguf.quants.dequantize(raw.reshape(1, -1), qtype).astype(np.float32).reshape(-1)
        assert ref.dtype == np.float32
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(raw.tobytes())
        with open(os.path.join(OUT, name + ".f32"), "wb") as f:
            f.write(ref.astype("<f4").tobytes())
        total += raw.nbytes + ref.nbytes
        print(f"{name}: {raw.nbytes} bytes -> {ref.size} floats")
    print(f"total {total} bytes; gguf {importlib.metadata.version('gguf')}, numpy {np.__version__}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
