"""Test-only converter: tiny Hugging Face checkpoints (tests/golden/models/) -> GGUF in llama.cpp's
conventions, written with the `gguf` package (gguf-py, the library llama.cpp's own
convert_hf_to_gguf.py uses), so tensor names and metadata keys come from an independent source:

  * tensor names: gguf.get_tensor_name_map(arch, n_layers) (TensorNameMap, HF name -> GGUF name);
    every written name is checked against gguf.MODEL_TENSORS[arch] (the tensors llama.cpp knows
    for that architecture). Exception: a qwen3moe layer without experts (tiny-qwen3-moe's
    mlp_only_layers) gets the generic dense ffn_gate/ffn_up/ffn_down names -- llama.cpp's qwen3moe
    has no dense layers, warden treats a layer without ffn_gate_inp as dense.
  * metadata: GGUFWriter's add_* helpers, with the values llama.cpp's converter writes
    (TextModel.set_gguf_parameters + Qwen3Moe / Glm4Moe / DeepseekV2 model classes):
      qwen3moe   expert_count, expert_used_count, expert_feed_forward_length (no
                 expert_weights_norm: llama.cpp always renormalizes qwen3moe's top-k)
      glm4moe    + expert_shared_count, leading_dense_block_count, expert_gating_func = sigmoid,
                 expert_weights_scale, expert_weights_norm, expert_group_count / _used_count,
                 rope.dimension_count = head_dim * partial_rotary_factor
      deepseek2  head_count_kv = 1 (MLA as MQA), q_lora_rank, kv_lora_rank, key_length =
                 kv_lora_rank + rope, value_length = kv_lora_rank, key_length_mla = nope + rope,
                 value_length_mla = v_head_dim, rope.dimension_count = qk_rope_head_dim, MoE keys
                 as glm4moe, expert_weights_norm only when true; yarn:
                 rope.scaling.yarn_log_multiplier = 0.1 * mscale_all_dim
      yarn (all) rope.scaling.type = yarn, .factor, .original_context_length,
                 .yarn_beta_fast / .yarn_beta_slow when given, .yarn_attn_factor = attention_factor
  * tensors: routed experts stacked per layer into [n_expert, rows, cols] (ffn_*_exps);
    e_score_correction_bias -> exp_probs_b.bias; deepseek2's kv_b_proj split into
    attn_k_b [H, kv_lora_rank, nope] (transposed per head) and attn_v_b [H, v, kv_lora_rank]
    (kv_b="split", current llama.cpp) or kept as attn_kv_b (kv_b="merged", older GGUFs, which also
    lack the *_mla keys). No Q/K permutation: qwen3moe / glm4moe rotate NeoX halves and deepseek2
    rotates adjacent pairs, as the HF checkpoints (rope_interleave) already are.
  * MTP (nextn) layers the checkpoint holds (layer index num_hidden_layers, num_nextn_predict_layers
    in config.json) are written after the decoder layers as llama.cpp's Glm4MoeModel writes them:
    block_count counts them, <arch>.nextn_predict_layers says how many, blk.N.nextn.* names from
    TensorNameMap (deepseek2 too: llama.cpp drops its MTP layers and has no names of its own).
  * dtype "f32": every tensor F32; "bf16": 2-D+ weights BF16 except the router (ffn_gate_inp,
    kept F32 like llama.cpp does), 1-D tensors F32; "q8_0": the same with Q8_0 (gguf-py's port of
    llama.cpp's quantize_row_q8_0: a scale per 32 weights) instead of BF16.
  * tokenizer: the same minimal gpt2 vocabulary as tests/golden/models/tiny-llama.gguf.

Usage (python -m / import): convert(model_dir, out_path, kv_b="split", dtype="f32",
drop_keys=(), drop_tensors=()). drop_* remove metadata keys / tensors (for error tests).

Also shared by the synthetic-GGUF tests (test_gguf_kquant.py, test_gguf_block_types.py,
test_gguf_block_moe.py): add_toy_tokenizer, blocks_and_f32_twin and write_tensors_and_close to
write a model and its f32 reference,
warden_logits / parse_logits / compare_logits to run it against its f32 reference.
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

ARCHS = {
    "qwen3_moe": gguf.MODEL_ARCH.QWEN3MOE,
    "glm4_moe": gguf.MODEL_ARCH.GLM4_MOE,
    "deepseek_v3": gguf.MODEL_ARCH.DEEPSEEK2,
    "kimi_k2": gguf.MODEL_ARCH.DEEPSEEK2,
    "qwen2": gguf.MODEL_ARCH.QWEN2,
}


def _load_state(model_dir: Path) -> dict[str, np.ndarray]:
    sd: dict[str, np.ndarray] = {}
    index = model_dir / "model.safetensors.index.json"
    files = (sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file()
             else ["model.safetensors"])
    for f in files:
        for k, v in load_file(str(model_dir / f)).items():
            if v.dtype != np.float32:
                raise ValueError(f"{k}: only F32 checkpoints are converted (got {v.dtype})")
            sd[k] = v
    return sd


class _Writer:
    """GGUFWriter that can leave out chosen keys / tensors."""

    def __init__(self, path: Path, arch_name: str, drop_keys, drop_tensors):
        self.w = gguf.GGUFWriter(str(path), arch_name)
        self.drop_keys = set(drop_keys)
        self.drop_tensors = set(drop_tensors)
        self.dropped: set[str] = set()
        # Route every typed add_* of GGUFWriter through the key filter.
        for kind in ("uint32", "int32", "float32", "bool", "string", "array", "uint64"):
            orig = getattr(self.w, f"add_{kind}")

            def add(key, val, *a, _orig=orig, **kw):
                if key in self.drop_keys:
                    self.dropped.add(key)
                    return
                _orig(key, val, *a, **kw)

            setattr(self.w, f"add_{kind}", add)

    def tensor(self, name: str, arr: np.ndarray, dtype: str) -> None:
        if name in self.drop_tensors:
            self.dropped.add(name)
            return
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if dtype in ("bf16", "q8_0") and arr.ndim >= 2 and ".ffn_gate_inp." not in name:
            qt = gguf.GGMLQuantizationType.BF16 if dtype == "bf16" else gguf.GGMLQuantizationType.Q8_0
            q = gguf.quants.quantize(arr, qt)
            self.w.add_tensor(name, q, raw_dtype=qt)
        else:
            self.w.add_tensor(name, arr)


def convert(model_dir, out_path, *, kv_b: str = "split", dtype: str = "f32", drop_keys=(),
            drop_tensors=()) -> dict:
    """Writes out_path; returns {"arch": name, "tensors": [names], "dropped": [...]}."""
    model_dir, out_path = Path(model_dir), Path(out_path)
    assert kv_b in ("split", "merged") and dtype in ("f32", "bf16", "q8_0")
    cfg = json.loads((model_dir / "config.json").read_text())
    arch = ARCHS[cfg["model_type"]]
    arch_name = gguf.MODEL_ARCH_NAMES[arch]
    n_layers = cfg["num_hidden_layers"]
    sd = _load_state(model_dir)
    # MTP (nextn) layers present in the checkpoint are written after the decoder layers, as
    # llama.cpp's Glm4MoeModel does: block_count counts them, nextn_predict_layers says how many.
    n_mtp = cfg.get("num_nextn_predict_layers") or 0
    if not any(k.startswith(f"model.layers.{n_layers}.") for k in sd):
        n_mtp = 0
    W = _Writer(out_path, arch_name, drop_keys, drop_tensors)
    w = W.w
    deepseek = arch == gguf.MODEL_ARCH.DEEPSEEK2

    # ---- metadata
    n_head = cfg["num_attention_heads"]
    w.add_name(model_dir.name)
    w.add_block_count(n_layers + n_mtp)
    if n_mtp:
        w.add_nextn_predict_layers(n_mtp)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(1 if deepseek else cfg.get("num_key_value_heads", n_head))
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "bf16": gguf.LlamaFileType.MOSTLY_BF16,
                     "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[dtype])
    if "num_experts" in cfg or "n_routed_experts" in cfg:
        w.add_expert_count(cfg.get("num_experts", cfg.get("n_routed_experts")))
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if cfg.get("n_group") is not None:
        w.add_expert_group_count(cfg["n_group"])
    if cfg.get("topk_group") is not None:
        w.add_expert_group_used_count(cfg["topk_group"])
    # transformers' Glm4Moe / DeepseekV3 always score with sigmoid; real DeepSeek-V3 / Kimi-K2
    # config.json files say scoring_func "sigmoid" (the tiny ones, saved by transformers, do not).
    sigmoid_default = "sigmoid" if arch in (gguf.MODEL_ARCH.GLM4_MOE, gguf.MODEL_ARCH.DEEPSEEK2) else None
    if cfg.get("scoring_func", sigmoid_default) == "sigmoid":
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if arch in (gguf.MODEL_ARCH.GLM4_MOE, gguf.MODEL_ARCH.DEEPSEEK2):
        w.add_expert_shared_count(cfg.get("n_shared_experts", 0))
        w.add_leading_dense_block_count(cfg.get("first_k_dense_replace", 0))
        if cfg.get("routed_scaling_factor") is not None:
            w.add_expert_weights_scale(float(cfg["routed_scaling_factor"]))
        norm = cfg.get("norm_topk_prob")
        if norm is not None and (norm or not deepseek):
            w.add_expert_weights_norm(bool(norm))
    if arch == gguf.MODEL_ARCH.GLM4_MOE:
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
        w.add_rope_dimension_count(int(head_dim * cfg.get("partial_rotary_factor", 0.5)))
    elif cfg.get("head_dim") is not None and not deepseek:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    if deepseek:
        if not cfg.get("rope_interleave", True):
            raise ValueError("deepseek2 GGUF expects interleaved rope dims (rope_interleave)")
        L, R = cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
        nope, v = cfg["qk_nope_head_dim"], cfg["v_head_dim"]
        w.add_vocab_size(cfg["vocab_size"])
        if cfg.get("q_lora_rank"):
            w.add_q_lora_rank(cfg["q_lora_rank"])
        w.add_kv_lora_rank(L)
        if kv_b == "split":
            w.add_key_length(L + R)
            w.add_value_length(L)
            w.add_key_length_mla(nope + R)
            w.add_value_length_mla(v)
        else:  # older converters: per-head sizes in key_length / value_length
            w.add_key_length(nope + R)
            w.add_value_length(v)
        w.add_rope_dimension_count(R)
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(float(rs["factor"]))
        w.add_rope_scaling_orig_ctx_len(int(rs["original_max_position_embeddings"]))
        if rs.get("beta_fast") is not None:
            w.add_rope_scaling_yarn_beta_fast(float(rs["beta_fast"]))
        if rs.get("beta_slow") is not None:
            w.add_rope_scaling_yarn_beta_slow(float(rs["beta_slow"]))
        if rs.get("attention_factor") is not None:
            w.add_rope_scaling_yarn_attn_factor(float(rs["attention_factor"]))
        if deepseek and rs.get("mscale_all_dim") is not None:
            w.add_rope_scaling_yarn_log_mul(0.1 * float(rs["mscale_all_dim"]))
    elif rs:
        raise ValueError(f"rope_scaling {rs} not handled by this converter")
    V = cfg["vocab_size"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"t{i}" for i in range(V)])
    w.add_token_types([int(gguf.TokenType.NORMAL)] * V)
    w.add_token_merges(["t 0"])
    w.add_bos_token_id(int(cfg.get("bos_token_id", 1)))
    w.add_eos_token_id(int(cfg.get("eos_token_id", 2)))
    w.add_add_bos_token(False)

    # ---- tensors
    n_blocks = n_layers + n_mtp
    tmap = gguf.get_tensor_name_map(arch, n_blocks)
    dense_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, n_blocks)
    nextn_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GLM4_MOE, n_blocks)
    allowed = {gguf.TENSOR_NAMES[t].format(bid=b) for t in gguf.MODEL_TENSORS[arch] for b in range(n_blocks)}
    # llama.cpp's deepseek2 drops MTP layers; its glm4moe names (blk.N.nextn.*) are used for them
    allowed |= {gguf.TENSOR_NAMES[t].format(bid=b) for t in gguf.MODEL_TENSORS[gguf.MODEL_ARCH.GLM4_MOE]
                for b in range(n_layers, n_blocks) if "nextn" in gguf.TENSOR_NAMES[t]}
    written: list[str] = []

    def emit(hf_name: str, arr: np.ndarray, bid: int | None) -> None:
        if hf_name.endswith("e_score_correction_bias"):
            hf_name = hf_name.replace("e_score_correction_bias", "e_score_correction.bias")
        new = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        base_ok = True
        if new is None and arch == gguf.MODEL_ARCH.QWEN3MOE and ".mlp." in hf_name:
            new = dense_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
            base_ok = False  # dense qwen3moe layer, see the module docstring
        if new is None and bid is not None and bid >= n_layers:  # deepseek2 MTP: glm4moe's names
            new = nextn_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
            if new is not None and ".nextn." not in new:
                new = None
        if new is None:
            raise ValueError(f"no GGUF name for {hf_name} in {arch_name}")
        if base_ok:
            base = new.rsplit(".", 1)[0]
            assert base in allowed, f"{new} is not a {arch_name} tensor in gguf.MODEL_TENSORS"
        W.tensor(new, arr, dtype)
        written.append(new)

    experts: dict[int, dict[str, np.ndarray]] = {}
    n_exp = cfg.get("num_experts", cfg.get("n_routed_experts", 0))
    for name in sorted(sd):
        arr = sd[name]
        m = re.match(r"model\.layers\.(\d+)\.", name)
        bid = int(m.group(1)) if m else None
        if bid is not None and bid >= n_blocks:
            continue  # MTP layers beyond num_nextn_predict_layers
        if ".mlp.experts." in name:
            experts.setdefault(bid, {})[name] = arr
            if len(experts[bid]) == 3 * n_exp:
                for wn in ("down_proj", "gate_proj", "up_proj"):
                    stack = np.stack([experts[bid].pop(f"model.layers.{bid}.mlp.experts.{e}.{wn}.weight")
                                      for e in range(n_exp)])
                    emit(f"model.layers.{bid}.mlp.experts.{wn}.weight", stack, bid)
            continue
        if deepseek and name.endswith("kv_b_proj.weight") and kv_b == "split":
            nope, v, L = cfg["qk_nope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
            kvb = arr.reshape(n_head, nope + v, L)
            emit(name.replace("kv_b_proj", "k_b_proj"), kvb[:, :nope, :].transpose(0, 2, 1), bid)
            emit(name.replace("kv_b_proj", "v_b_proj"), kvb[:, nope:, :], bid)
            continue
        if name == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        emit(name, arr, bid)
    leftover = [k for d in experts.values() for k in d]
    if leftover:
        raise ValueError(f"unmerged experts: {leftover[:4]}")

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    missing = (set(drop_keys) | set(drop_tensors)) - W.dropped
    if missing:
        raise ValueError(f"asked to drop {sorted(missing)}, which were never written")
    return {"arch": arch_name, "tensors": written, "dropped": sorted(W.dropped)}


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--kv-b", default="split", choices=["split", "merged"])
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16", "q8_0"])
    a = ap.parse_args()
    print(json.dumps(convert(a.model_dir, a.out, kv_b=a.kv_b, dtype=a.dtype)))


def add_toy_tokenizer(w: gguf.GGUFWriter, vocab: int) -> None:
    """A byte-level BPE vocabulary of `vocab` placeholder tokens ("t0", "t1", ...), one merge,
    BOS 1 and EOS 2: enough for warden to load a synthetic model and run token ids."""
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"t{i}" for i in range(vocab)])
    w.add_token_types([int(gguf.TokenType.NORMAL)] * vocab)
    w.add_token_merges(["t 0"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)


def write_tensors_and_close(w: gguf.GGUFWriter,
                            tensors: dict[str, tuple[object, np.ndarray]]) -> None:
    """Adds each tensor (qtype None: the array's own dtype; else raw blocks of that GGUF type) and
    writes the file."""
    for name, (qtype, arr) in tensors.items():
        if qtype is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_tiny_llama(path: Path, tensors: dict[str, tuple[object, np.ndarray]], *, name: str, layers: int,
                     d: int, ff: int, heads: int, kv_heads: int, vocab: int) -> None:
    """A synthetic llama GGUF (context 256, RoPE base 10000, RMS eps 1e-5, add_toy_tokenizer's
    vocabulary) with `tensors` as write_tensors_and_close takes them."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    add_toy_tokenizer(w, vocab)
    write_tensors_and_close(w, tensors)


def blocks_and_f32_twin(matrices: dict, make_blocks) -> tuple[dict, dict]:
    """For {name: (qtype, shape)}: the tensors of a block-type file, {name: (qtype, blocks)} with
    blocks = make_blocks(qtype, shape), and of its exact f32 twin, {name: (None, gguf-py's
    dequantization of those blocks)}, for write_tensors_and_close. Blocks are made in the order
    of `matrices`."""
    quant: dict[str, tuple[object, np.ndarray]] = {}
    exact: dict[str, tuple[object, np.ndarray]] = {}
    for name, (qt, shape) in matrices.items():
        b = make_blocks(qt, shape)
        quant[name] = (qt, b)
        deq = gguf.quants.dequantize(b, qt)
        assert deq.shape == tuple(shape) and deq.dtype == np.float32
        exact[name] = (None, deq)
    return quant, exact


# Prompt ids of the synthetic models' logit comparisons (below add_toy_tokenizer's vocabularies).
TOY_IDS = [5, 17, 99, 3, 250, 41, 8, 300, 77, 12]


def warden_logits(path: Path, *extra: str, top: int, ids=TOY_IDS, ok: bool = True) -> subprocess.CompletedProcess:
    """`warden logits --dtype f32 [extra]` of `ids` through the model at `path`, the `top` logits of
    every position on stdout. ok: the run must succeed."""
    from conftest import ROOT, TIMEOUT_S, WARDEN_BIN, require_warden
    require_warden()
    cmd = [str(WARDEN_BIN), "logits", "-m", str(path), "--tokens", ",".join(map(str, ids)), "--top", str(top),
           "--dtype", "f32", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    if ok:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


def parse_logits(text: str) -> list[dict[int, float]]:
    """`warden logits` stdout -> per position {token: logit}."""
    rows: list[dict[int, float]] = []
    for line in text.splitlines():
        if line.strip().startswith("{"):
            obj = json.loads(line)
            if "pos" in obj:
                rows.append({int(i): float(v) for i, v in obj["top"]})
    return rows


def compare_logits(got_stdout: str, want_stdout: str, positions: int = len(TOY_IDS)) -> float:
    """Asserts both `warden logits` outputs have `positions` positions with the same top-1 at each;
    returns the largest |got - want| over a position's spread of reference logits (max - min)."""
    got, want = parse_logits(got_stdout), parse_logits(want_stdout)
    assert len(got) == positions and len(want) == positions
    worst = 0.0
    for pos, (g, e) in enumerate(zip(got, want)):
        assert max(g, key=g.get) == max(e, key=e.get), pos
        spread = max(e.values()) - min(e.values())
        worst = max(worst, max(abs(g[i] - e[i]) for i in e) / spread)
    return worst
