#!/usr/bin/env python3
"""Reference outputs from Hugging Face transformers (CPU, float32) for warden's forward pass.

Run through scripts/make_reference.sh, which creates the pinned venv .venv-ref with exactly:

    torch==2.9.1 (default PyPI wheel)   transformers==4.57.6   safetensors==0.6.2
    numpy==2.2.6                        gguf==0.17.1           accelerate==1.11.0
    (Python 3.11; transformers needs accelerate for GGUF loading)

What it writes (everything under tests/golden/models/):

  <name>/config.json + model.safetensors   tiny random models (seeded, deterministic):
      tiny-llama               LlamaForCausalLM, f32, GQA 8q/2kv, untied, llama3 rope scaling
      tiny-llama-bf16-sharded  LlamaForCausalLM, bf16, tied, sharded (model.safetensors.index.json)
      tiny-qwen2               Qwen2ForCausalLM, f32, QKV bias, tied
      tiny-qwen3               Qwen3ForCausalLM, f32, q_norm/k_norm, head_dim 32 != 64/4, tied
      tiny-qwen3-moe           Qwen3MoeForCausalLM, f32, 8 experts top-3 softmax router,
                               norm_topk_prob, layer 1 dense (mlp_only_layers), tied
      tiny-glm4-moe            Glm4MoeForCausalLM, f32, partial rotary 0.5, QK-norm, QKV bias,
                               layer 0 dense, sigmoid router + e_score_correction_bias,
                               grouped top-k (4 groups, top-2 groups, top-2 experts),
                               routed_scaling_factor 2.5, 1 shared expert, untied
      tiny-deepseek-v3         DeepseekV3ForCausalLM, f32, MLA (q_lora_rank 24, kv_lora_rank 32,
                               rope 8 interleaved, nope 16, v 16), layer 0 dense, noaux_tc
                               grouped routing, 1 shared expert, no rope_scaling
      tiny-deepseek-v3-qproj   the same family with plain q_proj (no q_lora_rank), v_head_dim
                               24 != nope 16, 2 shared experts, norm_topk_prob false
      <moe model>-fp8          tiny-qwen3-moe / tiny-glm4-moe / tiny-deepseek-v3 with every layer
                               linear weight (not embeddings, lm_head, norms, router) stored as
                               F8_E4M3 + F32 weight_scale_inv per 32x32 block, quantization_config
                               {quant_method fp8, fmt e4m3, weight_block_size [32, 32]}. Reference:
                               the dequantized weights (code * scale_inv) as an f32 model.
  tiny-llama.gguf                          tiny-llama as GGUF (F32), llama.cpp tensor names,
                                           q/k rows permuted like convert_hf_to_gguf.py,
                                           rope_freqs.weight for the llama3 rope scaling
  <name>.golden.json                       per prompt: ids, full logits per position (6 sig.
                                           digits), 64-token greedy continuation + margins
  smollm2.golden.json                      SmolLM2-135M-Instruct Q4_1 GGUF dequantized to f32:
                                           per prompt: text, ids, top-16 (id, logit) per
                                           position, max/min logit per position, greedy 64

All reference numbers are computed by reloading what was saved (from_pretrained on the
written directory, dtype=float32, eager attention, one thread), so the files on disk
are what is checked. The greedy continuations are a manual argmax loop (ties -> lowest id,
torch.argmax), 64 tokens, no stop at EOS.

Conventions a loader must match:
  * Init: 2-D weights ~ N(0, 0.25^2), biases ~ N(0, 0.1^2), every RMSNorm weight (incl.
    Qwen3 q_norm/k_norm) ~ 1 + N(0, 0.2^2). Tied models have no lm_head.weight tensor.
    config.json carries both "dtype" (what transformers 4.57 writes) and "torch_dtype".
  * Prompts of random ids are redrawn (seeded) until every prompt position and every greedy
    step has top1-top2 margin >= MIN_REL_MARGIN x (max - min logit), so greedy paths do not
    hinge on rounding ("redrawn_prompts" in each golden counts the redraws).
  * tiny-llama.gguf: tensors F32, shapes as GGUF ne (= reversed numpy shape); attn_q/attn_k
    rows permuted per head from HF's half-split rope layout to GGML's interleaved one:
    gguf_row[h*d + 2i] = hf_row[h*d + i], gguf_row[h*d + 2i + 1] = hf_row[h*d + d/2 + i]
    (llama.cpp's LlamaModel.permute; for attn_k with n_head_kv heads). So a GGUF loader
    either un-permutes, or applies rope to adjacent pairs (x[2i], x[2i+1]) -- NEOX-style
    half-split rope is for the HF directory layout only. rope_freqs.weight [d/2] holds
    llama3 divisors: inv_freq_i = rope_theta^(-2i/d) / rope_freqs[i] (here [1, 7.667, 8, 8]);
    it is computed with original_max_position_embeddings from rope_scaling (HF semantics;
    llama.cpp's converter reads a top-level key, default 8192 -- same for real Llama 3.x).
    Tokenizer: gpt2 model, pre "default", tokens "t0".."t319", one dummy merge "t 0",
    bos 1 / eos 2, add_bos_token false.
  * SmolLM2: no BOS. ids = tokenizer(text, add_special_tokens=False); the GGUF says
    tokenizer.ggml.add_bos_token=false (transformers' GGUF-built tokenizer would otherwise
    prepend <|im_start|> = id 1). The vocab has no multi-digit tokens, so digits are single
    tokens as with SmolLM2's own tokenizer.

Usage:  scripts/make_reference.sh [--only NAME ...] [--skip-smollm2] [--check]
  --check   do not write anything; recompute everything and compare with the files on disk.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "models"
SMOLLM2_GGUF = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

N_PROMPTS = 8
GREEDY_TOKENS = 64
SMOLLM2_TOPK = 16
# A prompt of random ids is re-drawn (deterministically) when any greedy step of the
# reference has a top1-top2 margin below this fraction of that step's logit spread, so the
# golden continuations never hinge on rounding.
MIN_REL_MARGIN = 5e-4

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


def versions() -> dict:
    import gguf  # noqa: F401
    import safetensors
    import transformers
    from importlib.metadata import version

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
        "gguf": version("gguf"),
    }


def sig6(x: float) -> float:
    """Round to 6 significant digits (as a float that prints short in JSON)."""
    return float(f"{x:.6g}")


# ----------------------------------------------------------------------------- tiny models

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def tiny_specs() -> list[dict]:
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    return [
        dict(
            name="tiny-llama",
            seed=1001,
            save_dtype=torch.float32,
            shard=None,
            config=LlamaConfig(
                vocab_size=320, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
                rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                rope_scaling=dict(LLAMA3_ROPE), hidden_act="silu", attention_bias=False,
                mlp_bias=False, bos_token_id=1, eos_token_id=2, initializer_range=0.25,
                torch_dtype="float32",
            ),
        ),
        dict(
            name="tiny-llama-bf16-sharded",
            seed=1002,
            save_dtype=torch.bfloat16,
            shard="64KB",
            config=LlamaConfig(
                vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                hidden_act="silu", bos_token_id=1, eos_token_id=2, initializer_range=0.25,
                torch_dtype="bfloat16",
            ),
        ),
        dict(
            name="tiny-qwen2",
            seed=1003,
            save_dtype=torch.float32,
            shard=None,
            config=Qwen2Config(
                vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                use_sliding_window=False, hidden_act="silu", bos_token_id=1, eos_token_id=2,
                initializer_range=0.25, torch_dtype="float32",
            ),
        ),
        dict(
            name="tiny-qwen3",
            seed=1004,
            save_dtype=torch.float32,
            shard=None,
            config=Qwen3Config(
                vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                max_position_embeddings=256, rope_theta=1000000.0, rms_norm_eps=1e-6,
                tie_word_embeddings=True, use_sliding_window=False, attention_bias=False,
                hidden_act="silu", bos_token_id=1, eos_token_id=2, initializer_range=0.25,
                torch_dtype="float32",
            ),
        ),
    ]


def moe_specs() -> list[dict]:
    """Tiny mixture-of-experts models. Kept out of tiny_specs() so the draws of
    the dense models above are untouched."""
    from transformers import DeepseekV3Config, Glm4MoeConfig, Qwen3MoeConfig

    return [
        dict(
            name="tiny-qwen3-moe",
            seed=1005,
            save_dtype=torch.float32,
            shard=None,
            # 3 layers: 0 and 2 sparse (8 experts, top-3, softmax router, norm_topk_prob),
            # 1 dense through mlp_only_layers; q_norm/k_norm as in Qwen3.
            config=Qwen3MoeConfig(
                vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=256, rope_theta=1000000.0, rms_norm_eps=1e-6,
                tie_word_embeddings=True, use_sliding_window=False, attention_bias=False,
                hidden_act="silu", bos_token_id=1, eos_token_id=2, initializer_range=0.25,
                num_experts=8, num_experts_per_tok=3, moe_intermediate_size=32,
                norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                torch_dtype="float32",
            ),
        ),
        dict(
            name="tiny-glm4-moe",
            seed=1006,
            save_dtype=torch.float32,
            shard=None,
            # GLM-4.5 shape in miniature: partial rotary (half of head_dim 16), QK-norm,
            # attention bias, layer 0 dense (first_k_dense_replace=1), then sigmoid router with
            # e_score_correction_bias, 8 experts in 4 groups (top-2 groups, top-2 experts),
            # norm_topk_prob, routed_scaling_factor 2.5 and one shared expert.
            config=Glm4MoeConfig(
                vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, partial_rotary_factor=0.5,
                max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=False, attention_bias=True, use_qk_norm=True,
                hidden_act="silu", bos_token_id=1, eos_token_id=2, initializer_range=0.25,
                moe_intermediate_size=32, num_experts_per_tok=2, n_shared_experts=1,
                n_routed_experts=8, routed_scaling_factor=2.5, n_group=4, topk_group=2,
                first_k_dense_replace=1, norm_topk_prob=True, torch_dtype="float32",
            ),
        ),
        dict(
            name="tiny-deepseek-v3",
            seed=1007,
            save_dtype=torch.float32,
            shard=None,
            # DeepSeek-V3 / Kimi K2 in miniature: MLA with q_lora_rank (q_a_proj, q_a_layernorm,
            # q_b_proj), kv_lora_rank 32 latent + 8-dim decoupled rope key (rope_interleave, the
            # transformers default), nope 16 / v 16 per head; layer 0 dense, then noaux_tc routing
            # (sigmoid + correction bias, 4 groups, top-2 groups, top-2 of 8 experts),
            # routed_scaling_factor 2.5, 1 shared expert. No rope_scaling (no yarn).
            config=DeepseekV3Config(
                vocab_size=320, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                n_shared_experts=1, n_routed_experts=8, routed_scaling_factor=2.5,
                kv_lora_rank=32, q_lora_rank=24, qk_rope_head_dim=8, v_head_dim=16,
                qk_nope_head_dim=16, n_group=4, topk_group=2, num_experts_per_tok=2,
                first_k_dense_replace=1, norm_topk_prob=True, hidden_act="silu",
                max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                rope_theta=10000.0, rope_scaling=None, rope_interleave=True, attention_bias=False,
                bos_token_id=1, eos_token_id=2, initializer_range=0.25, torch_dtype="float32",
            ),
        ),
        dict(
            name="tiny-deepseek-v3-qproj",
            seed=1008,
            save_dtype=torch.float32,
            shard=None,
            # The same without q_lora_rank (plain q_proj, as DeepSeek-V2-Lite), 2 layers, both MoE.
            config=DeepseekV3Config(
                vocab_size=320, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                n_shared_experts=2, n_routed_experts=8, routed_scaling_factor=1.5,
                kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=8, v_head_dim=24,
                qk_nope_head_dim=16, n_group=2, topk_group=1, num_experts_per_tok=3,
                first_k_dense_replace=0, norm_topk_prob=False, hidden_act="silu",
                max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
                rope_theta=10000.0, rope_scaling=None, rope_interleave=True, attention_bias=False,
                bos_token_id=1, eos_token_id=2, initializer_range=0.25, torch_dtype="float32",
            ),
        ),
    ]


# FP8 block-scaled variants: the base model's layer weights quantized blockwise to
# float8_e4m3fn with one f32 `weight_scale_inv` per block (DeepSeek-V3 / GLM-4.5-FP8 / Qwen3-FP8
# checkpoint layout; dequantized weight = e4m3 value * weight_scale_inv of its block). Block size
# 32x32 instead of the real 128x128 so that the tiny matrices have several blocks, some partial;
# config.json says so in quantization_config.weight_block_size.
FP8_BLOCK = [32, 32]
FP8_BASES = ["tiny-qwen3-moe", "tiny-glm4-moe", "tiny-deepseek-v3"]


def fp8_quantizable(name: str, t: torch.Tensor) -> bool:
    """Layer linear weights, as in the real checkpoints: not embeddings, lm_head, norms, biases,
    the MoE router (mlp.gate.weight) or its correction bias."""
    return (t.dim() == 2 and name.startswith("model.layers.") and name.endswith(".weight")
            and not name.endswith("mlp.gate.weight"))


def quantize_fp8_block(w: torch.Tensor, br: int, bc: int):
    """Returns (e4m3 codes, f32 scale_inv [ceil(rows/br), ceil(cols/bc)], dequantized f32)."""
    w = w.float()
    rows, cols = w.shape
    nr, nc = -(-rows // br), -(-cols // bc)
    scale = torch.empty(nr, nc, dtype=torch.float32)
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    deq = torch.empty(rows, cols, dtype=torch.float32)
    for i in range(nr):
        for j in range(nc):
            sl = (slice(i * br, (i + 1) * br), slice(j * bc, (j + 1) * bc))
            blk = w[sl]
            s = (blk.abs().max() / 448.0).clamp(min=1e-12)
            qb = (blk / s).to(torch.float8_e4m3fn)
            scale[i, j] = s
            q[sl] = qb
            deq[sl] = qb.float() * s
    return q, scale, deq


def build_fp8(base_dir: Path, out_dir: Path, deq_dir: Path) -> None:
    """Writes the FP8 checkpoint to out_dir and its dequantized f32 twin (the reference's input,
    not committed) to deq_dir."""
    from safetensors.torch import load_file, save_file

    sd = load_file(str(base_dir / "model.safetensors"))
    q_sd, deq_sd = {}, {}
    for name in sorted(sd):
        t = sd[name]
        if fp8_quantizable(name, t):
            q, sc, deq = quantize_fp8_block(t, *FP8_BLOCK)
            q_sd[name] = q
            q_sd[name[: -len("weight")] + "weight_scale_inv"] = sc
            deq_sd[name] = deq
        else:
            q_sd[name] = t.contiguous()
            deq_sd[name] = t.float().contiguous()
    cfg = json.loads((base_dir / "config.json").read_text())
    for d in (out_dir, deq_dir):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    save_file(q_sd, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    save_file(deq_sd, str(deq_dir / "model.safetensors"), metadata={"format": "pt"})
    (deq_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                  "weight_block_size": list(FP8_BLOCK)}
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Seeded init, larger than HF's default so top-1 margins are comfortable.

    2-D weights ~ N(0, 0.25^2); biases ~ N(0, 0.1^2); norm weights ~ 1 + N(0, 0.2^2)
    (norm weights != 1 so a missing/misapplied norm weight shows up).
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if p.dim() == 2:
                v = torch.randn(p.shape, generator=g, dtype=torch.float32) * 0.25
            elif name.endswith("bias"):
                v = torch.randn(p.shape, generator=g, dtype=torch.float32) * 0.1
            else:  # RMSNorm weights (input/post-attn/final norm, q_norm, k_norm)
                v = 1.0 + torch.randn(p.shape, generator=g, dtype=torch.float32) * 0.2
            p.copy_(v.to(p.dtype))
        # Sigmoid routers (GLM-4 MoE, DeepSeek-V3) carry a persistent buffer
        # e_score_correction_bias; make it non-zero (and >= 0, so that the grouped top-k's
        # masked-to-zero experts never tie with selected ones) so that its use is checked.
        for name, b in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("e_score_correction_bias"):
                b.copy_((torch.randn(b.shape, generator=g, dtype=torch.float32).abs() * 0.1).to(b.dtype))


def build_tiny(spec: dict, out_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(spec["seed"])
    model = AutoModelForCausalLM.from_config(spec["config"], dtype=torch.float32)
    randomize(model, spec["seed"])
    if spec["config"].tie_word_embeddings:
        model.tie_weights()
    model = model.to(spec["save_dtype"])
    if out_dir.exists():
        shutil.rmtree(out_dir)
    kw = {"safe_serialization": True}
    if spec["shard"]:
        kw["max_shard_size"] = spec["shard"]
    model.save_pretrained(out_dir, **kw)
    # generation_config.json is noise for warden; keep config.json + safetensors only.
    gc = out_dir / "generation_config.json"
    if gc.exists():
        gc.unlink()
    # transformers >= 4.56 writes "dtype"; most published checkpoints carry the older
    # "torch_dtype". Write both so either spelling is found.
    cfg_path = out_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["torch_dtype"] = cfg.get("dtype", cfg.get("torch_dtype"))
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def load_f32(path: Path, **kw):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(
        str(path), dtype=torch.float32, attn_implementation="eager", **kw
    )
    m.eval()
    return m


@torch.no_grad()
def forward_logits(model, ids: list[int]) -> torch.Tensor:
    out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].float()


@torch.no_grad()
def greedy(model, ids: list[int], n: int) -> tuple[list[int], list[float], list[float]]:
    """Manual argmax loop with a KV cache. Returns (tokens, margins, spreads) per step."""
    from transformers import DynamicCache

    cache = DynamicCache()
    inp = torch.tensor([ids], dtype=torch.long)
    toks, margins, spreads = [], [], []
    for _ in range(n):
        out = model(input_ids=inp, past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        last = out.logits[0, -1].float()
        top2 = torch.topk(last, 2)
        t = int(torch.argmax(last))
        toks.append(t)
        margins.append(float(top2.values[0] - top2.values[1]))
        spreads.append(float(last.max() - last.min()))
        inp = torch.tensor([[t]], dtype=torch.long)
    return toks, margins, spreads


def pos_margins(logits: torch.Tensor) -> list[float]:
    top2 = torch.topk(logits, 2, dim=-1).values
    return (top2[:, 0] - top2[:, 1]).tolist()


def golden_tiny(name: str, model_dir: Path, seed: int, vocab: int) -> dict:
    model = load_f32(model_dir)
    rng = np.random.default_rng(seed)
    prompts = []
    redrawn = 0
    lengths = [3, 40] + [int(x) for x in rng.integers(4, 40, size=N_PROMPTS - 2)]
    for k in range(N_PROMPTS):
        while True:
            ids = [int(x) for x in rng.integers(0, vocab, size=lengths[k])]
            logits = forward_logits(model, ids)
            toks, gm, gs = greedy(model, ids, GREEDY_TOKENS)
            spread = (logits.max(-1).values - logits.min(-1).values).tolist()
            pm = pos_margins(logits)
            rel = min(min(a / s for a, s in zip(gm, gs)), min(a / s for a, s in zip(pm, spread)))
            if rel >= MIN_REL_MARGIN:
                break
            redrawn += 1
        prompts.append({
            "ids": ids,
            "logits": [[sig6(v) for v in row] for row in logits.tolist()],
            "spread": [sig6(v) for v in spread],
            "top1_margin": [sig6(v) for v in pm],
            "greedy": toks,
            "greedy_margin": [sig6(v) for v in gm],
            "greedy_spread": [sig6(v) for v in gs],
        })
    all_pm = [m for p in prompts for m in p["top1_margin"]]
    all_gm = [m for p in prompts for m in p["greedy_margin"]]
    all_sp = [s for p in prompts for s in p["spread"]]
    return {
        "model": name,
        "path": f"tests/golden/models/{model_dir.name}",
        "reference": "transformers, CPU, float32 weights+compute, eager attention",
        "versions": versions(),
        "vocab_size": vocab,
        "greedy_tokens": GREEDY_TOKENS,
        "prompt_seed": seed,
        "redrawn_prompts": redrawn,
        "stats": {
            "median_top1_margin": sig6(float(np.median(all_pm))),
            "min_top1_margin": sig6(float(np.min(all_pm))),
            "median_greedy_margin": sig6(float(np.median(all_gm))),
            "min_greedy_margin": sig6(float(np.min(all_gm))),
            "median_spread": sig6(float(np.median(all_sp))),
        },
        "prompts": prompts,
    }


# ----------------------------------------------------------------------------- GGUF writer

def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF (rotate_half) row order -> GGML/Meta interleaved rope row order.

    Within each head the rows [0 .. d/2) and [d/2 .. d) (the two halves that HF's
    rotate_half pairs) become interleaved: new row 2i = old row i, new row 2i+1 = old row
    i + d/2. Same transform as convert_hf_to_gguf.py LlamaModel.permute.
    """
    rows = w.shape[0]
    d = rows // n_head
    return (
        w.reshape(n_head, 2, d // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def llama3_rope_factors(cfg) -> np.ndarray:
    """Per-frequency divisors for llama3 rope scaling (llama.cpp's rope_freqs.weight).

    llama.cpp uses theta_i = pos * base^(-2i/d) / rope_freqs[i]. This matches HF's
    _compute_llama3_parameters. NOTE: original_max_position_embeddings is taken from
    rope_scaling (HF semantics); llama.cpp's converter reads it from the top-level
    hparams with default 8192, which coincides for real Llama 3.x checkpoints.
    """
    rs = cfg.rope_scaling
    base = float(cfg.rope_theta)
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor = float(rs.get("factor", 8.0))
    lo = float(rs.get("low_freq_factor", 1.0))
    hi = float(rs.get("high_freq_factor", 4.0))
    old_ctx = float(rs.get("original_max_position_embeddings", 8192))
    lo_wl = old_ctx / lo
    hi_wl = old_ctx / hi
    out = []
    for f in freqs.tolist():
        wl = 2 * math.pi / f
        if wl < hi_wl:
            out.append(1.0)
        elif wl > lo_wl:
            out.append(factor)
        else:
            smooth = (old_ctx / wl - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def write_llama_gguf(model_dir: Path, out_path: Path) -> None:
    import gguf
    from safetensors.numpy import load_file
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(model_dir))
    sd = load_file(str(model_dir / "model.safetensors"))
    n_head = cfg.num_attention_heads
    n_kv = cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head

    tmp = out_path.with_suffix(".gguf.part")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(model_dir.name)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(float(cfg.rope_theta))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(cfg.vocab_size)
    w.add_rope_dimension_count(head_dim)
    # Minimal loadable tokenizer: gpt2-style, tokens "t0".."t{V-1}", one dummy merge
    # (llama.cpp requires the merges key; the merged token "t0" exists).
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"t{i}" for i in range(cfg.vocab_size)])
    w.add_token_types([int(gguf.TokenType.NORMAL)] * cfg.vocab_size)
    w.add_token_merges(["t 0"])
    w.add_bos_token_id(int(cfg.bos_token_id))
    w.add_eos_token_id(int(cfg.eos_token_id))
    w.add_add_bos_token(False)

    def add(name: str, arr: np.ndarray) -> None:
        w.add_tensor(name, np.ascontiguousarray(arr.astype(np.float32)))

    add("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        add(b + "attn_norm.weight", sd[p + "input_layernorm.weight"])
        add(b + "attn_q.weight", llama_permute(sd[p + "self_attn.q_proj.weight"], n_head))
        add(b + "attn_k.weight", llama_permute(sd[p + "self_attn.k_proj.weight"], n_kv))
        add(b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        add(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        add(b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        add(b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        add(b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        add(b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    add("output_norm.weight", sd["model.norm.weight"])
    if "lm_head.weight" in sd:
        add("output.weight", sd["lm_head.weight"])
    rs = cfg.rope_scaling or {}
    if str(rs.get("rope_type", rs.get("type", ""))).lower() == "llama3":
        add("rope_freqs.weight", llama3_rope_factors(cfg))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out_path)


@torch.no_grad()
def check_gguf(model_dir: Path, gguf_path: Path) -> dict:
    """Independent check of the GGUF: gguf-py reader + transformers' own GGUF loader
    (which un-permutes q/k itself) must give the same logits as the directory model."""
    import gguf
    from transformers import AutoConfig

    r = gguf.GGUFReader(str(gguf_path))
    names = {t.name for t in r.tensors}
    assert all(t.tensor_type == gguf.GGMLQuantizationType.F32 for t in r.tensors)
    ref = load_f32(model_dir)
    cfg = AutoConfig.from_pretrained(str(model_dir))
    # rope_freqs must equal HF's scaled/unscaled inverse-frequency ratio.
    if "rope_freqs.weight" in names:
        rf = next(t for t in r.tensors if t.name == "rope_freqs.weight").data
        rot = ref.model.rotary_emb
        dim = cfg.hidden_size // cfg.num_attention_heads
        base_inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        hf_factors = (base_inv / rot.inv_freq).numpy()
        np.testing.assert_allclose(rf, hf_factors, rtol=1e-6)
    # transformers does not map rope_freqs from GGUF; give it the directory's config so
    # that only the weights come from the GGUF file.
    gm = load_f32(gguf_path.parent, gguf_file=gguf_path.name, config=cfg)
    worst = 0.0
    rng = np.random.default_rng(7)
    for n in (5, 33):
        ids = [int(x) for x in rng.integers(0, cfg.vocab_size, size=n)]
        a = forward_logits(ref, ids)
        b = forward_logits(gm, ids)
        worst = max(worst, float((a - b).abs().max()))
    assert worst < 1e-4, f"GGUF logits differ from directory model: {worst}"
    return {"tensors": len(names), "max_abs_diff_vs_dir": worst,
            "rope_freqs": None if "rope_freqs.weight" not in names
            else [float(x) for x in next(t for t in r.tensors if t.name == "rope_freqs.weight").data]}


# ----------------------------------------------------------------------------- SmolLM2

SMOLLM2_PROMPTS = [
    # chat template text (what warden's chat template should produce for one user turn)
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    # code
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n",
    "#include <stdio.h>\n\nint main(void) {\n    for (int i = 0; i < 10; ++i)",
    # prose
    "The old lighthouse keeper climbed the spiral stairs every evening, and on that night",
    "Photosynthesis is the process by which plants",
    # numbers
    "1, 2, 3, 5, 8, 13, 21, 34,",
    "The year 1969 was remarkable: on July 20, at 20:17 UTC, Apollo 11 landed with 3.14159",
]


def smollm2(gguf_path: Path) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d, f = str(gguf_path.parent), gguf_path.name
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(
        d, gguf_file=f, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    sha = hashlib.sha256(gguf_path.read_bytes()).hexdigest()
    prompts = []
    for text in SMOLLM2_PROMPTS:
        # No BOS: the GGUF says tokenizer.ggml.add_bos_token=false (as does SmolLM2's own
        # HF tokenizer). transformers' GGUF-built LlamaTokenizerFast would prepend the GGUF's
        # bos (<|im_start|>, id 1) by default, so special tokens are not added here;
        # <|im_start|>/<|im_end|> written in the text still map to ids 1/2.
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert ids and ids[0] != tok.bos_token_id or text.startswith("<|im_start|>")
        with torch.no_grad():
            logits = forward_logits(model, ids)
        top = torch.topk(logits, SMOLLM2_TOPK, dim=-1)
        toks, gm, gs = greedy(model, ids, GREEDY_TOKENS)
        prompts.append({
            "text": text,
            "ids": ids,
            "top": [[[int(i), sig6(float(v))] for i, v in zip(ri.tolist(), rv.tolist())]
                    for ri, rv in zip(top.indices, top.values)],
            "max": [sig6(v) for v in logits.max(-1).values.tolist()],
            "min": [sig6(v) for v in logits.min(-1).values.tolist()],
            "greedy": toks,
            "greedy_text": tok.decode(toks),
            "greedy_margin": [sig6(v) for v in gm],
            "greedy_spread": [sig6(v) for v in gs],
        })
    all_pm = [p["top"][i][0][1] - p["top"][i][1][1] for p in prompts for i in range(len(p["ids"]))]
    all_gm = [m for p in prompts for m in p["greedy_margin"]]
    return {
        "model": "smollm2",
        "path": str(gguf_path.relative_to(ROOT)),
        "gguf_sha256": sha,
        "reference": "transformers GGUF loader (Q4_1 dequantized to float32), CPU, float32, eager attention",
        "bos": "none: ids = tok(text, add_special_tokens=False) (GGUF tokenizer.ggml.add_bos_token=false); "
               "<|im_start|>/<|im_end|> in the text are the special ids 1/2",
        "versions": versions(),
        "vocab_size": int(model.config.vocab_size),
        "top_k": SMOLLM2_TOPK,
        "greedy_tokens": GREEDY_TOKENS,
        "stats": {
            "median_top1_margin": sig6(float(np.median(all_pm))),
            "min_top1_margin": sig6(float(np.min(all_pm))),
            "median_greedy_margin": sig6(float(np.median(all_gm))),
            "min_greedy_margin": sig6(float(np.min(all_gm))),
        },
        "prompts": prompts,
    }


# ----------------------------------------------------------------------------- driver

def dump(obj: dict, path: Path) -> None:
    path.write_text(json.dumps(obj, separators=(",", ":")) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None, help="tiny model names and/or smollm2")
    ap.add_argument("--skip-smollm2", action="store_true")
    ap.add_argument("--check", action="store_true", help="recompute into a temp dir and compare")
    args = ap.parse_args()
    want = set(args.only) if args.only else None

    out_root = Path(tempfile.mkdtemp(prefix="warden-ref-")) if args.check else GOLDEN
    out_root.mkdir(parents=True, exist_ok=True)
    produced: list[str] = []
    summary = {}

    for spec in tiny_specs() + moe_specs():
        name = spec["name"]
        if want is not None and name not in want:
            continue
        d = out_root / name
        build_tiny(spec, d)
        g = golden_tiny(name, d, spec["seed"] + 7, spec["config"].vocab_size)
        dump(g, out_root / f"{name}.golden.json")
        produced += [name, f"{name}.golden.json"]
        summary[name] = g["stats"] | {"redrawn_prompts": g["redrawn_prompts"]}
        if name == "tiny-llama":
            write_llama_gguf(d, out_root / "tiny-llama.gguf")
            produced.append("tiny-llama.gguf")
            summary["tiny-llama.gguf"] = check_gguf(d, out_root / "tiny-llama.gguf")

    for base in FP8_BASES:
        name = base + "-fp8"
        if want is not None and name not in want:
            continue
        spec = next(sp for sp in moe_specs() if sp["name"] == base)
        base_dir = out_root / base if (out_root / base).is_dir() else GOLDEN / base
        deq_dir = Path(tempfile.mkdtemp(prefix="warden-fp8-deq-"))
        build_fp8(base_dir, out_root / name, deq_dir)
        g = golden_tiny(name, deq_dir, spec["seed"] + 7, spec["config"].vocab_size)
        shutil.rmtree(deq_dir)
        g["path"] = f"tests/golden/models/{name}"
        g["reference"] = ("transformers, CPU, float32 compute, eager attention, on the FP8 weights "
                          "dequantized (e4m3 value * weight_scale_inv of its block), loaded as a plain "
                          "f32 checkpoint")
        g["fp8_block"] = list(FP8_BLOCK)
        dump(g, out_root / f"{name}.golden.json")
        produced += [name, f"{name}.golden.json"]
        summary[name] = g["stats"] | {"redrawn_prompts": g["redrawn_prompts"]}

    if not args.skip_smollm2 and (want is None or "smollm2" in want):
        if SMOLLM2_GGUF.exists():
            g = smollm2(SMOLLM2_GGUF)
            dump(g, out_root / "smollm2.golden.json")
            produced.append("smollm2.golden.json")
            summary["smollm2"] = g["stats"]
        else:
            print(f"note: {SMOLLM2_GGUF} missing (run scripts/fetch_model.sh); smollm2 skipped",
                  file=sys.stderr)

    print(json.dumps(summary, indent=1))
    if args.check:
        bad = 0
        for rel in produced:
            a, b = out_root / rel, GOLDEN / rel
            files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file()) if a.is_dir() else [Path("")]
            for f in files:
                x, y = (a / f if a.is_dir() else a), (b / f if b.is_dir() else b)
                same = y.exists() and x.read_bytes() == y.read_bytes()
                if not same and x.suffix == ".json" and y.exists():
                    jx, jy = json.loads(x.read_text()), json.loads(y.read_text())
                    jx.pop("versions", None), jy.pop("versions", None)
                    same = jx == jy
                print(("same  " if same else "DIFF  ") + str(Path(rel) / f))
                bad += not same
        shutil.rmtree(out_root)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
