"""bf16 weights in the AMX-BF16 tile layout, end to end on any CPU.

WARDEN_BF16_TILE_MODEL=1 makes the loader keep every bf16 matmul matrix in the tile layout alone
(panels freed, kernels/matmul_bf16_tiles.h), as it does on AMX-BF16 hosts; without AMX the matmuls
then run the AMX-BF16 kernel on the software tile model. On a tiny random llama, with a separate
head and with a tied one (the embedding rows then come from the tile layout), the logits must
agree with the panel kernels' within the two contracts' rounding, with the same top-1 everywhere,
and the load line must say how many matrices are in the tile layout."""
import os
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import record
from gguf_convert import compare_logits, warden_logits, write_tiny_llama

D, FF, LAYERS, HEADS, KV_HEADS, VOCAB = 96, 160, 2, 4, 2, 320  # 96: not a multiple of 64


def _tensors(rng: np.random.Generator, tied: bool) -> dict:
    def mat(rows: int, cols: int) -> tuple[None, np.ndarray]:
        return None, (rng.standard_normal((rows, cols)) * 0.08).astype(np.float32)

    kv = KV_HEADS * (D // HEADS)
    t = {"token_embd.weight": mat(VOCAB, D), "output_norm.weight": (None, np.ones(D, np.float32))}
    if not tied:
        t["output.weight"] = mat(VOCAB, D)
    for i in range(LAYERS):
        p = f"blk.{i}."
        t |= {p + "attn_q.weight": mat(D, D), p + "attn_k.weight": mat(kv, D), p + "attn_v.weight": mat(kv, D),
              p + "attn_output.weight": mat(D, D), p + "ffn_gate.weight": mat(FF, D),
              p + "ffn_up.weight": mat(FF, D), p + "ffn_down.weight": mat(D, FF)}
        for n in ("attn_norm", "ffn_norm"):
            t[p + n + ".weight"] = (None, (1.0 + 0.1 * rng.standard_normal(D)).astype(np.float32))
    return t


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    rng = np.random.default_rng(49)
    d = tmp_path_factory.mktemp("bf16tiles")
    out = {}
    for kind in ("separate", "tied"):
        out[kind] = d / f"{kind}.gguf"
        write_tiny_llama(out[kind], _tensors(rng, kind == "tied"), name=f"tiny-bf16-{kind}", layers=LAYERS, d=D,
                         ff=FF, heads=HEADS, kv_heads=KV_HEADS, vocab=VOCAB)
    return out


@pytest.mark.parametrize("kind", ["separate", "tied"])
def test_tile_layout_logits_match_the_panel_kernels(models, kind, monkeypatch):
    args = ("--weights", "bf16", "--head-weights", "bf16")
    monkeypatch.delenv("WARDEN_BF16_TILE_MODEL", raising=False)
    panels = warden_logits(models[kind], *args, top=VOCAB)
    assert "tile layout" not in panels.stderr, panels.stderr
    monkeypatch.setenv("WARDEN_BF16_TILE_MODEL", "1")
    tiles = warden_logits(models[kind], *args, top=VOCAB)
    # Every layer matrix and the head (the embedding table itself when tied).
    m = re.search(r"(\d+) bf16 matrices in the AMX-BF16 tile layout \(padding (\d+) MiB\)", tiles.stderr)
    assert m, tiles.stderr
    assert int(m.group(1)) == LAYERS * 7 + 1
    worst = compare_logits(tiles.stdout, panels.stdout)
    record("amx-bf16 tile layout", f"tiny llama ({kind} head), tile model vs panels, max |diff| / spread", worst)
    # Both sum exact bf16 x (f32 or hi+lo) products in f32, in different orders: a few ulps.
    assert 0 < worst <= 1e-4, worst
