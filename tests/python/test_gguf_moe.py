"""GGUF for the MoE / MLA architectures in llama.cpp's conventions: qwen3moe, glm4moe,
deepseek2 (DeepSeek-V2/V3, Kimi-K2), plus YaRN rope scaling from GGUF metadata.

The tiny HF checkpoints under tests/golden/models/ are converted at test time by gguf_convert.py
(gguf-py's TensorNameMap + GGUFWriter: names and keys from an independent source; stacked
experts, split attn_k_b / attn_v_b or legacy attn_kv_b). warden then has to produce, from the
GGUF, the same logits as from the safetensors directory (max |diff| <= GGUF_VS_DIR_REL x spread
over the full vocabulary) and match the transformers goldens exactly as the directory does: top-1
at every position and the 64-token greedy continuation.

The YaRN models' goldens (tiny-qwen2-yarn, tiny-deepseek-v3-yarn; scripts/make_yarn_reference.py)
use positions far beyond original_max_position_embeddings; test_yarn_scaling_is_exercised checks
that dropping rope_scaling from their config breaks the match, so the goldens do test the scaling.
"""
from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import GOLDEN, REPORT, ROOT, TIMEOUT_S, WARDEN_BIN, record, require_warden, run_logits

gguf = pytest.importorskip("gguf")
pytest.importorskip("safetensors")
from gguf_convert import convert  # noqa: E402

GREEDY = 64
PROMPTS = [0, 1, 2]  # prompt 1 is the 40-token one
TINY_F32_REL = 1e-3
GGUF_VS_DIR_REL = 1e-5

# (variant id, model dir, converter options)
VARIANTS = [
    ("qwen3-moe", "tiny-qwen3-moe", {}),
    ("glm4-moe", "tiny-glm4-moe", {}),
    ("deepseek-v3", "tiny-deepseek-v3", {}),
    ("deepseek-v3-kvb-merged", "tiny-deepseek-v3", {"kv_b": "merged"}),
    ("deepseek-v3-qproj", "tiny-deepseek-v3-qproj", {}),
    ("deepseek-v3-yarn", "tiny-deepseek-v3-yarn", {}),
    ("qwen2-yarn", "tiny-qwen2-yarn", {}),
]
BF16_VARIANTS = [("glm4-moe-bf16", "tiny-glm4-moe"), ("deepseek-v3-bf16", "tiny-deepseek-v3")]


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("gguf_moe")
    paths = {}
    for vid, model, opts in VARIANTS:
        if (GOLDEN / model / "config.json").is_file():
            paths[vid] = out / f"{vid}.gguf"
            convert(GOLDEN / model, paths[vid], **opts)
    for vid, model in BF16_VARIANTS:
        paths[vid] = out / f"{vid}.gguf"
        convert(GOLDEN / model, paths[vid], dtype="bf16")
    return paths


def _golden(name: str) -> dict:
    p = GOLDEN / f"{name}.golden.json"
    if not p.is_file():
        pytest.skip(f"{p} missing")
    return json.loads(p.read_text())


def _max_rel(a, b, spreads, vocab) -> float:
    worst = 0.0
    for pos, spread in enumerate(spreads):
        da, db = a.as_dict(pos), b.as_dict(pos)
        assert len(da) == len(db) == vocab
        assert all(math.isfinite(v) for v in db.values())
        worst = max(worst, max(abs(da[i] - db[i]) for i in range(vocab)) / spread)
    return worst


@pytest.mark.parametrize("k", PROMPTS)
@pytest.mark.parametrize("vid,model,opts", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_gguf_matches_directory_and_reference(ggufs, vid, model, opts, k):
    require_warden()
    prompt = _golden(model)["prompts"][k]
    vocab = len(prompt["logits"][0])
    d = run_logits(GOLDEN / model, prompt["ids"], dtype="f32", top=vocab, greedy=GREEDY)
    g = run_logits(ggufs[vid], prompt["ids"], dtype="f32", top=vocab, greedy=GREEDY)
    rel = _max_rel(d, g, prompt["spread"], vocab)
    cur = REPORT.get(f"gguf {vid} f32", {}).get("max |diff| / spread vs dir", 0.0)
    record(f"gguf {vid} f32", "max |diff| / spread vs dir", max(cur, rel))
    assert rel <= GGUF_VS_DIR_REL, f"{vid} prompt {k}: GGUF vs directory differ by {rel:.3g} x spread"
    # and against transformers
    ref_rel = max(max(abs(g.as_dict(p)[i] - prompt["logits"][p][i]) for i in range(vocab)) / s
                  for p, s in enumerate(prompt["spread"]))
    assert ref_rel <= TINY_F32_REL, f"{vid} prompt {k}: GGUF vs reference {ref_rel:.3g} x spread"
    for p, row in enumerate(prompt["logits"]):
        ref_top1 = max(range(vocab), key=lambda i: (row[i], -i))
        assert g.tops[p][0][0] == ref_top1, f"{vid} prompt {k}: top-1 differs at position {p}"
    assert g.greedy == d.greedy == prompt["greedy"], f"{vid} prompt {k}: greedy continuation differs"


@pytest.mark.parametrize("vid,model", BF16_VARIANTS, ids=[v[0] for v in BF16_VARIANTS])
def test_gguf_bf16_matches_directory_at_bf16(ggufs, vid, model):
    """BF16 GGUF weights (router F32) = the directory's f32 weights rounded to bf16 at load."""
    require_warden()
    for k in PROMPTS:
        prompt = _golden(model)["prompts"][k]
        vocab = len(prompt["logits"][0])
        d = run_logits(GOLDEN / model, prompt["ids"], dtype="bf16", top=vocab, greedy=16)
        g = run_logits(ggufs[vid], prompt["ids"], dtype="bf16", top=vocab, greedy=16)
        rel = _max_rel(d, g, prompt["spread"], vocab)
        assert rel <= GGUF_VS_DIR_REL, f"{vid} prompt {k}: bf16 GGUF vs directory differ by {rel:.3g} x spread"
        assert g.greedy == d.greedy


def test_q8_0_gguf_with_stacked_experts_runs_as_int8_g32(tmp_path):
    """Every 2-D+ weight but the router as llama.cpp's Q8_0 (gguf-py's port of its quantizer: a
    scale per 32 weights). Without --weights the layer matrices, stacked 3-D experts included, load
    as int8-g32 with no row requantized: the same logits as naming int8-g32, the same top-1 as the
    file's exact f32 dequantization at every position, within 0.05 x spread (W8A8's int8
    activations are the difference)."""
    require_warden()
    model = "tiny-qwen3-moe"
    if not (GOLDEN / model / "config.json").is_file():
        pytest.skip(f"{model} missing")
    out = tmp_path / "q8_0.gguf"
    convert(GOLDEN / model, out, dtype="q8_0")
    assert any(t.tensor_type == gguf.GGMLQuantizationType.Q8_0 and len(t.shape) == 3
               for t in gguf.GGUFReader(str(out)).tensors)  # stacked experts are in Q8_0
    prompt = _golden(model)["prompts"][0]
    ids = ",".join(map(str, prompt["ids"]))
    p = subprocess.run([str(WARDEN_BIN), "logits", "-m", str(out), "--tokens", ids, "--top", "1"],
                       capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "weights int8-g32 (auto: layer matrices Q8_0, imported without loss" in p.stderr, p.stderr
    assert "did not import" not in p.stderr, p.stderr
    named = subprocess.run([str(WARDEN_BIN), "logits", "-m", str(out), "--tokens", ids, "--top", "1", "--weights",
                            "int8-g32", "--head-weights", "int8-g32"],  # the Q8_0 head: int8-g32 too
                           capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert named.returncode == 0 and named.stdout == p.stdout, named.stderr
    # Panels built while loading (--no-mmap) instead of in the background: the same logits.
    sync = subprocess.run([str(WARDEN_BIN), "logits", "-m", str(out), "--tokens", ids, "--top", "1", "--no-mmap"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert sync.returncode == 0 and sync.stdout == p.stdout, sync.stderr
    # Read in place as stored (q8_0), the stacked experts included: the same logits, bit for bit.
    inplace = subprocess.run([str(WARDEN_BIN), "logits", "-m", str(out), "--tokens", ids, "--top", "1", "--weights",
                              "q8_0", "--head-weights", "q8_0"], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert inplace.returncode == 0 and inplace.stdout == p.stdout, inplace.stderr
    vocab = len(prompt["logits"][0])
    auto = run_logits(out, prompt["ids"], dtype="f32", top=vocab, weights="auto")
    exact = run_logits(out, prompt["ids"], dtype="f32", top=vocab, weights="f32")
    for pos in range(len(prompt["ids"])):
        a, e = auto.as_dict(pos), exact.as_dict(pos)
        assert max(a, key=a.get) == max(e, key=e.get), pos
    rel = _max_rel(exact, auto, prompt["spread"], vocab)
    record("gguf moe", "qwen3-moe Q8_0 as int8-g32 vs its f32 dequantization, max |diff| / spread", rel)
    assert rel <= 0.05, rel


def test_gguf_layout_read_back_with_gguf_reader(ggufs):
    """The converted files as llama.cpp lays them out, read back by gguf-py's reader."""
    r = gguf.GGUFReader(str(ggufs["deepseek-v3"]))
    t = {x.name: x for x in r.tensors}
    cfg = json.loads((GOLDEN / "tiny-deepseek-v3" / "config.json").read_text())
    E, d, de = cfg["n_routed_experts"], cfg["hidden_size"], cfg["moe_intermediate_size"]
    H, L, nope, v = cfg["num_attention_heads"], cfg["kv_lora_rank"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    # ggml ne order (innermost first)
    assert list(t["blk.1.ffn_gate_exps.weight"].shape) == [d, de, E]
    assert list(t["blk.1.ffn_down_exps.weight"].shape) == [de, d, E]
    assert list(t["blk.1.ffn_gate_inp.weight"].shape) == [d, E]
    assert list(t["blk.1.exp_probs_b.bias"].shape) == [E]
    assert list(t["blk.0.attn_k_b.weight"].shape) == [nope, L, H]
    assert list(t["blk.0.attn_v_b.weight"].shape) == [L, v, H]
    assert "blk.0.attn_kv_b.weight" not in t and "blk.0.ffn_gate_exps.weight" not in t
    kv = {f.name: f for f in r.fields.values()}
    assert "deepseek2.attention.kv_lora_rank" in kv and "deepseek2.attention.key_length_mla" in kv
    assert int(kv["deepseek2.attention.head_count_kv"].parts[-1][0]) == 1
    assert int(kv["deepseek2.expert_gating_func"].parts[-1][0]) == int(gguf.ExpertGatingFuncType.SIGMOID)
    r = gguf.GGUFReader(str(ggufs["glm4-moe"]))
    names = {x.name for x in r.tensors}
    assert "blk.1.post_attention_norm.weight" in names and "blk.1.ffn_norm.weight" not in names
    assert "blk.1.ffn_gate_shexp.weight" in names and "blk.0.ffn_gate.weight" in names


def _warden_fails(path: Path) -> str:
    require_warden()
    cmd = [str(WARDEN_BIN), "logits", "-m", str(path), "--tokens", "1,2,3", "--dtype", "f32"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert p.returncode not in (0, -6, -11, 134, 139), f"expected a clean error, got rc {p.returncode}: {p.stderr}"
    assert p.returncode != 0
    return p.stderr


@pytest.mark.parametrize("model,drop,expect", [
    ("tiny-deepseek-v3", {"drop_keys": ["deepseek2.attention.kv_lora_rank"]}, "deepseek2.attention.kv_lora_rank"),
    ("tiny-deepseek-v3", {"drop_keys": ["deepseek2.expert_gating_func"]}, "deepseek2.expert_gating_func"),
    ("tiny-deepseek-v3", {"drop_keys": ["deepseek2.expert_count"]}, "deepseek2.expert_count"),
    ("tiny-deepseek-v3", {"drop_tensors": ["blk.1.ffn_up_exps.weight"]}, "blk.1.ffn_up_exps.weight"),
    ("tiny-deepseek-v3", {"drop_tensors": ["blk.2.exp_probs_b.bias"]}, "blk.2.exp_probs_b.bias"),
    ("tiny-deepseek-v3", {"drop_tensors": ["blk.0.attn_v_b.weight"]}, "blk.0.attn_v_b.weight"),
    ("tiny-glm4-moe", {"drop_keys": ["glm4moe.expert_feed_forward_length"]}, "glm4moe.expert_feed_forward_length"),
    ("tiny-glm4-moe", {"drop_tensors": ["blk.2.post_attention_norm.weight"]}, "blk.2.post_attention_norm.weight"),
    ("tiny-qwen3-moe", {"drop_keys": ["qwen3moe.expert_used_count"]}, "qwen3moe.expert_used_count"),
    ("tiny-deepseek-v3-yarn", {"drop_keys": ["deepseek2.rope.scaling.original_context_length"]},
     "deepseek2.rope.scaling.original_context_length"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_gguf_missing_metadata_or_tensor_is_a_clear_error(tmp_path, model, drop, expect):
    if not (GOLDEN / model / "config.json").is_file():
        pytest.skip(f"{model} missing")
    out = tmp_path / "bad.gguf"
    convert(GOLDEN / model, out, **drop)
    err = _warden_fails(out)
    assert expect in err, f"error message does not name {expect!r}:\n{err}"


@pytest.mark.parametrize("model", ["tiny-qwen2-yarn", "tiny-deepseek-v3-yarn"])
def test_yarn_scaling_is_exercised(tmp_path, model):
    """Without rope_scaling the same weights must miss the golden: the prompts/continuations reach
    far beyond original_max_position_embeddings, so the test above cannot pass by ignoring yarn."""
    require_warden()
    g = _golden(model)
    cfg = json.loads((GOLDEN / model / "config.json").read_text())
    rs = cfg["rope_scaling"]
    assert rs.get("rope_type", rs.get("type")) == "yarn" and rs["original_max_position_embeddings"] < 40
    plain = tmp_path / model
    plain.mkdir()
    shutil.copy(GOLDEN / model / "model.safetensors", plain / "model.safetensors")
    cfg["rope_scaling"] = None
    (plain / "config.json").write_text(json.dumps(cfg))
    prompt = g["prompts"][1]
    vocab = len(prompt["logits"][0])
    out = run_logits(plain, prompt["ids"], dtype="f32", top=vocab, greedy=GREEDY)
    rel = max(max(abs(out.as_dict(p)[i] - prompt["logits"][p][i]) for i in range(vocab)) / s
              for p, s in enumerate(prompt["spread"]))
    record(f"{model} without rope_scaling", "max |diff| / spread", rel)
    assert rel > 30 * TINY_F32_REL and out.greedy != prompt["greedy"]


@pytest.mark.parametrize("vid", ["qwen3-moe", "glm4-moe"])
def test_quantize_moe_gguf(ggufs, vid, tmp_path):
    """`warden quantize --weights int4` on a MoE GGUF writes as Q4_0 exactly the matrices
    `--weights int4` quantizes at load: stacked routed experts (3-D), shared experts and attention;
    routers and the MTP block stay as they were (gguf-py reads the types; the rule also keeps MLA's
    kv_b, whose tiny checkpoint's 24-wide rows no int format takes, at load or here). Loading the
    file without flags gives the logits of quantizing the source at load, bit for bit in the text."""
    require_warden()
    if vid not in ggufs:
        pytest.skip(f"{vid} missing")
    src, out = ggufs[vid], tmp_path / f"{vid}-int4.gguf"
    p = subprocess.run([str(WARDEN_BIN), "quantize", "-m", str(src), "-o", str(out), "--weights", "int4"],
                       capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    n_layers = next(int(f.parts[-1][0]) for f in gguf.GGUFReader(str(src)).fields.values()
                    if f.name.endswith(".block_count"))
    types = {t.name: (t.tensor_type.name, len(t.shape)) for t in gguf.GGUFReader(str(out)).tensors}
    stacked = [n for n in types if "_exps." in n]
    assert stacked and all(types[n] == ("Q4_0", 3) for n in stacked), types
    for name, (ttype, dims) in types.items():
        if not name.startswith("blk.") or dims < 2:
            continue
        layer = int(name.split(".")[1])
        keep = "ffn_gate_inp" in name or "attn_kv_b" in name or "attn_k_b" in name or "attn_v_b" in name or \
            layer >= n_layers
        assert (ttype != "Q4_0") == keep, (name, ttype)
    model = dict((v, m) for v, m, _ in VARIANTS)[vid]
    ids = ",".join(map(str, _golden(model)["prompts"][0]["ids"]))

    def logits(path: Path, *extra: str) -> str:
        r = subprocess.run([str(WARDEN_BIN), "logits", "-m", str(path), "--tokens", ids, "--top", "5", *extra],
                           capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert logits(out) == logits(src, "--weights", "int4")
