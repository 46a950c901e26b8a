#!/usr/bin/env python3
"""Reference for warden's multi-token-prediction (MTP / nextn) layer: tiny checkpoints with an
MTP layer and its logits from transformers' own decoder-layer modules (CPU, float32).

Run with the pinned reference venv of scripts/make_reference.sh:

    scripts/make_reference.sh --setup-only
    OMP_NUM_THREADS=1 .venv-ref/bin/python scripts/make_mtp_reference.py

What it writes (tests/golden/models/):

  tiny-deepseek-v3-mtp/   config.json: tiny-deepseek-v3's plus num_nextn_predict_layers 1;
                          mtp.safetensors: only layer 3, the MTP layer (the base weights stay in
                          tiny-deepseek-v3/; mtp_checkpoint() below and the tests put both
                          files in a two-shard directory): enorm, hnorm,
                          eh_proj, shared_head.norm, its own shared_head.head and embed_tokens,
                          and a DeepseekV3DecoderLayer (MLA + MoE: index 3 >= first_k_dense_replace)
  tiny-glm4-moe-mtp/      the same over tiny-glm4-moe: its MTP layer 3 without embed_tokens /
                          shared_head.head (the target's embeddings and lm_head are used), and a
                          Glm4MoeDecoderLayer (partial rotary, QK-norm, QKV bias, MoE)
  <name>.mtp.json         per prompt: ids, the MTP logits of every row (6 significant digits) and
                          the greedy chain, see below

The MTP forward (vLLM's deepseek_mtp.py, which SGLang's nextn models share for GLM-4.5):
  h[p]   the target's final hidden state at position p, after model.norm (what its head reads;
         transformers' last_hidden_state)
  row p  e = embed(t[p+1]) (zero at position 0, as vLLM masks it);
         x = eh_proj(cat([enorm(e), hnorm(h[p])])); y = decoder_layer(x) at position p (causal
         over the rows); logits = head(shared_head.norm(y))
  chain  after the last prompt row (p = n-2, predicting t[n]), K_CHAIN more rows: row n-1+j takes
         the argmax d_j of the previous row and the previous row's y (before shared_head.norm).
The MTP layer's random weights follow make_reference.py's init (2-D N(0, 0.25^2), biases
N(0, 0.1^2), norms 1 + N(0, 0.2^2), e_score_correction_bias |N(0, 0.1^2)|).
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "models"
K_CHAIN = 3
PROMPTS = [1, 2]  # of the base model's golden prompts (40 and 25 tokens)

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


def sig6(x: float) -> float:
    return float(f"{x:.6g}")


def init_(name: str, shape, g) -> torch.Tensor:
    if len(shape) == 2:
        return torch.randn(shape, generator=g, dtype=torch.float32) * 0.25
    if name.endswith("bias"):
        return torch.randn(shape, generator=g, dtype=torch.float32) * 0.1
    return 1.0 + torch.randn(shape, generator=g, dtype=torch.float32) * 0.2


def build(base: str, out: str, seed: int, own_head: bool) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    src, dst = GOLDEN / base, GOLDEN / out
    cfg_json = json.loads((src / "config.json").read_text())
    cfg_json["num_nextn_predict_layers"] = 1
    config = AutoConfig.from_pretrained(str(src))
    L = config.num_hidden_layers
    d, V = config.hidden_size, config.vocab_size
    # A model one layer deeper makes the MTP block's decoder layer with transformers' own names.
    config.num_hidden_layers = L + 1
    deeper = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    sd = load_file(str(src / "model.safetensors"))
    pre = f"model.layers.{L}."
    with torch.no_grad():
        for name, p in sorted(deeper.named_parameters(), key=lambda kv: kv[0]):
            if name.startswith(pre):
                sd[name] = init_(name, p.shape, g)
        for name, b in sorted(deeper.named_buffers(), key=lambda kv: kv[0]):
            if name.startswith(pre) and name.endswith("e_score_correction_bias"):
                sd[name] = torch.randn(b.shape, generator=g, dtype=torch.float32).abs() * 0.1
    extra = {"enorm.weight": (d,), "hnorm.weight": (d,), "eh_proj.weight": (d, 2 * d),
             "shared_head.norm.weight": (d,)}
    if own_head:
        extra["shared_head.head.weight"] = (V, d)
        extra["embed_tokens.weight"] = (V, d)
    for n, shape in extra.items():
        sd[pre + n] = init_(n, shape, g)
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in sorted(sd.items()) if k.startswith(pre)},
              str(dst / "mtp.safetensors"), metadata={"format": "pt"})
    (dst / "config.json").write_text(json.dumps(cfg_json, indent=2, sort_keys=True) + "\n")


def mtp_checkpoint(name: str, base: str, out: Path) -> Path:
    """A loadable directory: the MTP config, the base weights and the MTP layer as two shards
    (symbolic links)."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(GOLDEN / name / "config.json", out / "config.json")
    shards = {"model-00001-of-00002.safetensors": GOLDEN / base / "model.safetensors",
              "model-00002-of-00002.safetensors": GOLDEN / name / "mtp.safetensors"}
    weight_map = {}
    for shard, src in shards.items():
        (out / shard).unlink(missing_ok=True)
        (out / shard).symlink_to(src.resolve())
        weight_map.update({k: shard for k in load_file(str(src))})
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1, sort_keys=True))
    return out


@torch.no_grad()
def reference(name: str, base: str) -> dict:
    from transformers import AutoModelForCausalLM
    from transformers.masking_utils import create_causal_mask

    import tempfile
    path = mtp_checkpoint(name, base, Path(tempfile.mkdtemp()) / name)
    target = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32,
                                                  attn_implementation="eager")
    target.eval()
    config = target.config
    L, d = config.num_hidden_layers, config.hidden_size
    sd = load_file(str(GOLDEN / base / "model.safetensors"))
    sd.update(load_file(str(GOLDEN / name / "mtp.safetensors")))
    pre = f"model.layers.{L}."
    layer_cls = type(target.model.layers[0])
    block = layer_cls(config, L)
    block.load_state_dict({k[len(pre):]: v for k, v in sd.items() if k.startswith(pre)
                           and not any(k[len(pre):].startswith(x) for x in
                                       ("enorm", "hnorm", "eh_proj", "shared_head",
                                        "embed_tokens"))})
    block.eval()
    embed = sd.get(pre + "embed_tokens.weight", sd["model.embed_tokens.weight"])
    head = sd.get(pre + "shared_head.head.weight", sd["lm_head.weight"])
    eps = config.rms_norm_eps

    def rms(x, w):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * w

    def mtp_rows(toks: list[int], hid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(toks)
        e = embed[torch.tensor(toks)].clone()
        e[0] = 0.0  # row 0 is position 0
        x = torch.cat([rms(e, sd[pre + "enorm.weight"]), rms(hid, sd[pre + "hnorm.weight"])], -1)
        x = (x @ sd[pre + "eh_proj.weight"].T)[None]
        pos = torch.arange(n)[None]
        pe = target.model.rotary_emb(x, pos)
        mask = create_causal_mask(config=config, input_embeds=x, attention_mask=None,
                                  cache_position=torch.arange(n), past_key_values=None,
                                  position_ids=pos)
        out = block(x, attention_mask=mask, position_ids=pos, position_embeddings=pe)
        y = (out[0] if isinstance(out, tuple) else out)[0]
        return y, rms(y, sd[pre + "shared_head.norm.weight"]) @ head.T

    base_golden = json.loads((GOLDEN / f"{base}.golden.json").read_text())
    prompts = []
    for k in PROMPTS:
        ids = base_golden["prompts"][k]["ids"]
        h = target.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        toks, hid = list(ids[1:]), h[:-1]
        # the target's own next token (greedy) ends the prompt rows
        nxt = int(target(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
        toks.append(nxt)
        hid = h
        chain = []
        for _ in range(K_CHAIN + 1):
            y, logits = mtp_rows(toks, hid)
            d_next = int(logits[-1].argmax())
            chain.append(d_next)
            toks = toks + [d_next]
            hid = torch.cat([hid, y[-1:]], 0)
        top = torch.sort(logits, dim=-1, descending=True).values
        prompts.append({
            "ids": ids,
            "target_next": nxt,
            "rows": len(ids),  # rows 0..n-1 from the target's hidden states
            "logits": [[sig6(v) for v in row.tolist()] for row in logits],
            "chain": chain,
            "spread": [sig6(float(r.max() - r.min())) for r in logits],
            "margin": [sig6(float(t[0] - t[1])) for t in top],
        })
    import transformers
    return {"model": name, "base": base, "k_chain": K_CHAIN, "d_model": d,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "python": sys.version.split()[0]},
            "prompts": prompts}


def main() -> int:
    for base, out, seed, own in [("tiny-deepseek-v3", "tiny-deepseek-v3-mtp", 4301, True),
                                 ("tiny-glm4-moe", "tiny-glm4-moe-mtp", 4302, False)]:
        build(base, out, seed, own)
        ref = reference(out, base)
        (GOLDEN / f"{out}.mtp.json").write_text(json.dumps(ref, separators=(",", ":")) + "\n")
        print(out, [p["chain"] for p in ref["prompts"]], min(min(p["margin"]) for p in ref["prompts"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
