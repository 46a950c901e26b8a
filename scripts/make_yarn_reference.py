#!/usr/bin/env python3
"""Reference outputs for YaRN rope scaling, same format and conventions as
scripts/make_reference.py (whose helpers it imports; run it with the same pinned venv):

    .venv-ref/bin/python scripts/make_yarn_reference.py [--check]

  tiny-qwen2-yarn         Qwen2ForCausalLM, f32, tied, rope_theta 1e4, head_dim 16,
                          rope_scaling {yarn, factor 4, original_max_position_embeddings 32,
                          beta_fast 8, beta_slow 0.5} -- a real ramp over the 8 frequencies
                          (low 0, high 3) and transformers' default attention_factor
                          0.1 ln 4 + 1 on cos/sin
  tiny-deepseek-v3-yarn   DeepseekV3ForCausalLM shaped like tiny-deepseek-v3, rope_scaling
                          {yarn, factor 4, original 32, beta_fast 32, beta_slow 1, mscale 1,
                          mscale_all_dim 1} (DeepSeek-V3 / Kimi-K2 style): attention_factor 1,
                          softmax scale x (0.1 ln 4 + 1)^2

Prompts reach 40 tokens plus 64 greedy steps, far past the original 32 positions, so ignoring
the scaling changes the logits (tests/python/test_gguf_moe.py::test_yarn_scaling_is_exercised).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_reference as mr  # noqa: E402
import torch  # noqa: E402


def specs() -> list[dict]:
    from transformers import DeepseekV3Config, Qwen2Config

    return [
        dict(
            name="tiny-qwen2-yarn",
            seed=1011,
            save_dtype=torch.float32,
            shard=None,
            config=Qwen2Config(
                vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                use_sliding_window=False, hidden_act="silu", bos_token_id=1, eos_token_id=2,
                initializer_range=0.25, torch_dtype="float32",
                rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                              "beta_fast": 8.0, "beta_slow": 0.5},
            ),
        ),
        dict(
            name="tiny-deepseek-v3-yarn",
            seed=1012,
            save_dtype=torch.float32,
            shard=None,
            config=DeepseekV3Config(
                vocab_size=320, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                n_shared_experts=1, n_routed_experts=8, routed_scaling_factor=2.5,
                kv_lora_rank=32, q_lora_rank=24, qk_rope_head_dim=8, v_head_dim=16,
                qk_nope_head_dim=16, n_group=4, topk_group=2, num_experts_per_tok=2,
                first_k_dense_replace=1, norm_topk_prob=True, hidden_act="silu",
                max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                rope_theta=10000.0, rope_interleave=True, attention_bias=False,
                rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                              "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
                bos_token_id=1, eos_token_id=2, initializer_range=0.25, torch_dtype="float32",
            ),
        ),
    ]


def print_constants() -> None:
    """The transformers numbers tests/model/test_yarn_gguf_config.cpp compares against
    (kDeepseekRef / kKimiRef): inv_freq at 0, 8, 16, 24, 31, attention_factor, and
    DeepseekV3Attention.scaling * sqrt(qk_head_dim)."""
    import math

    from transformers import DeepseekV3Config
    from transformers.modeling_rope_utils import _compute_yarn_parameters
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    cases = {
        "kDeepseekRef": (10000.0, {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                                   "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}),
        "kKimiRef": (50000.0, {"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                               "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}),
    }
    for name, (theta, rs) in cases.items():
        cfg = DeepseekV3Config(
            vocab_size=320, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24,
            kv_lora_rank=32, qk_rope_head_dim=64, qk_nope_head_dim=16, v_head_dim=16,
            n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2,
            max_position_embeddings=163840, rope_theta=theta, rope_scaling=dict(rs))
        inv, af = _compute_yarn_parameters(cfg, "cpu")
        mult = DeepseekV3Attention(cfg, 0).scaling * math.sqrt(cfg.qk_head_dim)
        vals = ", ".join(f"{float(inv[i]):#.9g}f" for i in (0, 8, 16, 24, 31))
        print(f"constexpr YarnRef {name} = {{{{{vals}}}, {float(af):.9g}, {mult:.9g}}};")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="recompute in a temp dir and compare")
    ap.add_argument("--print-constants", action="store_true", help="print the gtest's reference numbers")
    args = ap.parse_args()
    if args.print_constants:
        print_constants()
        return 0
    bad = 0
    for spec in specs():
        name = spec["name"]
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp) if args.check else mr.GOLDEN
            model_dir = base / name
            mr.build_tiny(spec, model_dir)
            g = mr.golden_tiny(name, model_dir, spec["seed"] + 7, spec["config"].vocab_size)
            g["path"] = f"tests/golden/models/{name}"
            text = json.dumps(g, separators=(",", ":")) + "\n"
            out = mr.GOLDEN / f"{name}.golden.json"
            if args.check:
                same = out.is_file() and json.loads(out.read_text())["prompts"] == g["prompts"]
                print(f"{name}: {'same' if same else 'DIFFERENT'}")
                bad += not same
            else:
                out.write_text(text)
                print(f"{name}: wrote {out} ({len(text)} bytes), redrawn {g['redrawn_prompts']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
