"""Golden logits from transformers 5.x for tiny models saved in the transformers 5 config layout.

transformers 5 writes config.json differently from 4.x: rope_theta, rope_scaling and
partial_rotary_factor are folded into one `rope_parameters` object, and Qwen3-MoE's expert count
is `num_local_experts`. These models (tests/golden/models/tiny5-*) are built, saved and run by
transformers 5 (CPU, float32, eager attention), with the same prompts, greedy continuations and
golden format as scripts/make_reference.py (whose helpers this script reuses), so
tests/python/test_reference_logits.py checks them the same way. The settings are chosen so a
misread config shows: rope_theta far from 10000, llama3 and YaRN scaling, a partial rotary
factor other than 0.5, and DeepSeek-V3 / GLM-4 MoE correction biases that are all negative
(as in real DeepSeek-V3 checkpoints; a grouped top-k that masks excluded groups with 0 instead
of -inf then picks experts of excluded groups).

Usage:  scripts/make_reference.sh --v5 [--only NAME ...] [--check]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_reference as mr  # noqa: E402


def versions() -> dict:
    import safetensors
    import transformers

    return {"python": sys.version.split()[0], "torch": torch.__version__,
            "transformers": transformers.__version__, "safetensors": safetensors.__version__,
            "numpy": np.__version__}


mr.versions = versions


def specs() -> list[dict]:
    from transformers import DeepseekV3Config, Glm4MoeConfig, LlamaConfig, Qwen3Config, Qwen3MoeConfig

    f32 = dict(save_dtype=torch.float32, shard=None)
    return [
        dict(name="tiny5-llama", seed=2001, **f32, config=LlamaConfig(
            vocab_size=320, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
            rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
            rope_scaling=dict(mr.LLAMA3_ROPE), hidden_act="silu", bos_token_id=1, eos_token_id=2,
            initializer_range=0.25, dtype="float32")),
        dict(name="tiny5-qwen3", seed=2002, **f32, config=Qwen3Config(
            vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
            rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu",
            bos_token_id=1, eos_token_id=2, initializer_range=0.25, dtype="float32")),
        dict(name="tiny5-qwen3-moe", seed=2003, **f32, config=Qwen3MoeConfig(
            vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
            rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu",
            bos_token_id=1, eos_token_id=2, initializer_range=0.25, num_experts=8,
            num_experts_per_tok=3, moe_intermediate_size=32, norm_topk_prob=True,
            decoder_sparse_step=1, mlp_only_layers=[], dtype="float32")),
        dict(name="tiny5-glm4-moe", seed=2004, **f32, config=Glm4MoeConfig(
            vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, partial_rotary_factor=0.25,
            max_position_embeddings=256, rope_theta=50000.0, rms_norm_eps=1e-5,
            tie_word_embeddings=False, attention_bias=True, use_qk_norm=True, hidden_act="silu",
            bos_token_id=1, eos_token_id=2, initializer_range=0.25, moe_intermediate_size=32,
            num_experts_per_tok=2, n_shared_experts=1, n_routed_experts=8,
            routed_scaling_factor=2.5, n_group=4, topk_group=2, first_k_dense_replace=0,
            norm_topk_prob=True, dtype="float32")),
        dict(name="tiny5-deepseek-v3", seed=2005, **f32, config=DeepseekV3Config(
            vocab_size=320, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1,
            n_routed_experts=8, routed_scaling_factor=2.5, kv_lora_rank=32, q_lora_rank=24,
            qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16, n_group=4, topk_group=2,
            num_experts_per_tok=2, first_k_dense_replace=0, norm_topk_prob=True,
            hidden_act="silu", max_position_embeddings=256, rms_norm_eps=1e-6,
            tie_word_embeddings=False, rope_theta=50000.0,
            rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                          "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0},
            rope_interleave=True, attention_bias=False, bos_token_id=1, eos_token_id=2,
            initializer_range=0.25, dtype="float32")),
    ]


_randomize = mr.randomize


def randomize(model: torch.nn.Module, seed: int) -> None:
    _randomize(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, b in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("e_score_correction_bias"):
                v = -(torch.randn(b.shape, generator=g, dtype=torch.float32).abs() * 0.1 + 1.0)
                b.copy_(v.to(b.dtype))


mr.randomize = randomize


def check_layout(d: Path) -> None:
    """The point of these models: config.json really is in the transformers 5 layout."""
    cfg = json.loads((d / "config.json").read_text())
    assert "rope_parameters" in cfg and "rope_theta" not in cfg and "rope_scaling" not in cfg, cfg
    assert "partial_rotary_factor" not in cfg
    if cfg["model_type"] == "qwen3_moe":
        assert "num_local_experts" in cfg and "num_experts" not in cfg, cfg


def main() -> int:
    import transformers

    assert transformers.__version__.startswith("5."), transformers.__version__
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--check", action="store_true", help="recompute into a temp dir and compare")
    args = ap.parse_args()
    out_root = Path(tempfile.mkdtemp(prefix="warden-ref5-")) if args.check else mr.GOLDEN
    bad = 0
    summary = {}
    for spec in specs():
        name = spec["name"]
        if args.only and name not in args.only:
            continue
        d = out_root / name
        mr.build_tiny(spec, d)
        check_layout(d)
        g = mr.golden_tiny(name, d, spec["seed"] + 7, spec["config"].vocab_size)
        g["path"] = f"tests/golden/models/{name}"
        mr.dump(g, out_root / f"{name}.golden.json")
        summary[name] = g["stats"] | {"redrawn_prompts": g["redrawn_prompts"]}
        if args.check:
            a = json.loads((out_root / f"{name}.golden.json").read_text())
            b = json.loads((mr.GOLDEN / f"{name}.golden.json").read_text())
            a.pop("versions"), b.pop("versions")
            same = a == b and (d / "config.json").read_bytes() == (mr.GOLDEN / name / "config.json").read_bytes()
            print(("same  " if same else "DIFF  ") + name)
            bad += not same
    print(json.dumps(summary, indent=1))
    if args.check:
        shutil.rmtree(out_root)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
