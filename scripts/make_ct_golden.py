#!/usr/bin/env python3
"""compressed-tensors "pack-quantized" goldens, made with the compressed-tensors package itself.

Run with the reference venv (transformers 4.57.6, torch 2.9.1 CPU) plus the pinned package:

    .venv-ref/bin/pip install --no-deps compressed-tensors==0.20.0 && .venv-ref/bin/pip install pydantic loguru
    .venv-ref/bin/python scripts/make_ct_golden.py [--warden build-x/warden]

(compressed-tensors 0.20.0 declares torch>=2.10 but the compressor/decompressor code used here
runs on 2.9.1.) What it writes under tests/golden/models/:

  tiny-llama-ct-int4/          tiny-llama cast to bf16 (as real checkpoints are), every layer
                               Linear as int4 symmetric group 32 with bf16 scales; lm_head dense
  tiny-llama-ct-int4-asym/     tiny-llama (f32), int4 ASYMMETRIC group 32, f16 scales, packed
                               int32 zero points
  tiny-qwen3-moe-ct-int4/      tiny-qwen3-moe (f32; experts, attention, dense layer 1), int4
                               symmetric group 32, f16 scales; the router (mlp.gate) dense
  <name>.golden.json           logits of transformers (f32, eager) on the checkpoint as
                               decompressed by the package (PackedQuantizationCompressor.decompress,
                               scales upcast to f32 so that w = (q - zp) * scale is exact)
  tiny-llama-warden-ct.golden.json
                               with --warden: `warden quantize tiny-llama -o DIR --weights int4-g32`
                               decompressed by the package, the same logits; plus the sha256 of
                               the model.safetensors warden wrote (the quantizer is deterministic)

Per-module compression is the package's own: scales/zero points from
compressed_tensors.quantization.utils.calculate_qparams (min-max), codes and packing from
PackedQuantizationCompressor.compress (quantize + pack_to_int32). The quantization_config is
QuantizationConfig(...).model_dump(), as ModelCompressor.update_config writes it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "models"
PROMPT_LENGTHS = [3, 24, 11, 17]
PROMPT_SEED = 1234

torch.set_num_threads(1)


def sig6(x: float) -> float:
    return float(f"{x:.6g}")


def load_dir(d: Path) -> tuple[dict, dict]:
    from safetensors.torch import load_file

    cfg = json.loads((d / "config.json").read_text())
    sd = {}
    for f in sorted(d.glob("*.safetensors")):
        sd.update(load_file(str(f)))
    return cfg, sd


def is_layer_linear(name: str) -> bool:
    return name.startswith("model.layers.") and name.endswith("_proj.weight")


def quant_config(num_bits: int, symmetric: bool, group: int, ignore: list[str]):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme

    args = QuantizationArgs(num_bits=num_bits, type="int", symmetric=symmetric, strategy="group",
                            group_size=group)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    return QuantizationConfig(config_groups={"group_0": scheme}, ignore=ignore, format="pack-quantized",
                              quantization_status="compressed")


def compress(src: Path, out: Path, *, symmetric: bool, weight_dtype, scale_dtype, group: int = 32) -> None:
    """src (HF dir) -> out: pack-quantized by the package's compressor."""
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization.utils import calculate_qparams
    from safetensors.torch import save_file

    cfg, sd = load_dir(src)
    ignore = ["lm_head", "re:.*mlp\\.gate$"]
    qc = quant_config(4, symmetric, group, ignore)
    scheme = qc.config_groups["group_0"]
    args = scheme.weights
    out_sd = {}
    for name, t in sd.items():
        t = t.to(weight_dtype)
        if not is_layer_linear(name):
            out_sd[name] = t.contiguous()
            continue
        rows, cols = t.shape
        g = t.float().reshape(rows, cols // group, group)
        scale, zp = calculate_qparams(g.amin(-1), g.amax(-1), args)
        scale = scale.to(scale_dtype)
        local = {"weight": t, "weight_scale": scale}
        if not symmetric:
            local["weight_zero_point"] = zp.to(torch.int8)
        comp = PackedQuantizationCompressor.compress(local, scheme)
        mod = name[: -len(".weight")]
        for k, v in comp.items():
            out_sd[f"{mod}.{k}"] = v.contiguous()
    out.mkdir(parents=True, exist_ok=True)
    for f in out.glob("*"):
        f.unlink()
    save_file(out_sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg["quantization_config"] = {
        "version": __import__("compressed_tensors").__version__,
        "quant_method": "compressed-tensors",
        "sparsity_config": {},
        **qc.model_dump(exclude=["quant_method"]),
    }
    cfg["dtype"] = cfg["torch_dtype"] = str(weight_dtype).removeprefix("torch.")
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def decompressed_state_dict(d: Path) -> tuple[dict, dict]:
    """The package's decompression of a pack-quantized dir, f32 (scales upcast: exact)."""
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationConfig

    cfg, sd = load_dir(d)
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    assert qc.format == "pack-quantized", qc.format
    assert len(qc.config_groups) == 1
    scheme = next(iter(qc.config_groups.values()))
    out = {}
    mods = sorted({k[: -len(".weight_packed")] for k in sd if k.endswith(".weight_packed")})
    for mod in mods:
        local = {k[len(mod) + 1:]: v for k, v in sd.items() if k.startswith(mod + ".weight_")}
        local["weight_scale"] = local["weight_scale"].float()
        res = PackedQuantizationCompressor.decompress(local, scheme)
        w = res["weight"]
        assert w.dtype == torch.float32 and list(w.shape) == local["weight_shape"].tolist(), (mod, w.dtype, w.shape)
        out[mod + ".weight"] = w
    for k, v in sd.items():
        if not any(k.startswith(m + ".weight_") for m in mods):
            out[k] = v.float()
    cfg = {k: v for k, v in cfg.items() if k != "quantization_config"}
    return cfg, out


@torch.no_grad()
def reference_logits(d: Path, vocab: int) -> dict:
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg, sd = decompressed_state_dict(d)
    cfg["dtype"] = cfg["torch_dtype"] = "float32"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(cfg))
        hf_cfg = AutoConfig.from_pretrained(tmp)
    model = AutoModelForCausalLM.from_config(hf_cfg, torch_dtype=torch.float32, attn_implementation="eager")
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert set(missing) <= {"lm_head.weight"} and (not missing or hf_cfg.tie_word_embeddings), missing
    if missing:
        model.tie_weights()
    model.eval()
    rng = np.random.default_rng(PROMPT_SEED)
    prompts = []
    for n in PROMPT_LENGTHS:
        ids = [int(x) for x in rng.integers(0, vocab, size=n)]
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
        spread = (logits.max(-1).values - logits.min(-1).values).tolist()
        top2 = torch.topk(logits, 2, dim=-1).values
        prompts.append({
            "ids": ids,
            "logits": [[sig6(v) for v in row] for row in logits.tolist()],
            "spread": [sig6(v) for v in spread],
            "top1_margin": [sig6(v) for v in (top2[:, 0] - top2[:, 1]).tolist()],
        })
    import compressed_tensors
    import transformers

    return {
        "reference": "transformers f32 eager on the compressed-tensors PackedQuantizationCompressor.decompress "
                     "output (scales upcast to f32)",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "compressed_tensors": compressed_tensors.__version__},
        "vocab_size": vocab,
        "prompts": prompts,
    }


def transformers_loads(d: Path, golden: dict) -> str:
    """Informational: can transformers load the checkpoint itself (run_compressed=False)?"""
    try:
        from transformers import AutoModelForCausalLM
        from transformers.utils.quantization_config import CompressedTensorsConfig

        m = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32, attn_implementation="eager",
                                                 quantization_config=CompressedTensorsConfig(run_compressed=False))
        m.eval()
        worst = 0.0
        for p in golden["prompts"]:
            with torch.no_grad():
                lg = m(input_ids=torch.tensor([p["ids"]]), use_cache=False).logits[0].float()
            ref = torch.tensor(p["logits"])
            worst = max(worst, float(((lg - ref).abs().max(-1).values / torch.tensor(p["spread"])).max()))
        return f"transformers from_pretrained(run_compressed=False): max |diff|/spread {worst:.3g}"
    except Exception as e:  # noqa: BLE001 - informational only
        return f"transformers from_pretrained failed: {type(e).__name__}: {str(e)[:200]}"


def write_golden(name: str, d: Path, vocab: int, extra: dict | None = None) -> dict:
    g = reference_logits(d, vocab)
    g["model"] = name
    g.update(extra or {})
    g["transformers_direct_load"] = transformers_loads(d, g)
    (GOLDEN / f"{name}.golden.json").write_text(json.dumps(g, separators=(",", ":")) + "\n")
    print(f"{name}: {g['transformers_direct_load']}")
    return g


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warden", help="warden binary: also make tiny-llama-warden-ct.golden.json")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    jobs = {
        "tiny-llama-ct-int4": ("tiny-llama", dict(symmetric=True, weight_dtype=torch.bfloat16,
                                                   scale_dtype=torch.bfloat16)),
        "tiny-llama-ct-int4-asym": ("tiny-llama", dict(symmetric=False, weight_dtype=torch.float32,
                                                        scale_dtype=torch.float16)),
        "tiny-qwen3-moe-ct-int4": ("tiny-qwen3-moe", dict(symmetric=True, weight_dtype=torch.float32,
                                                           scale_dtype=torch.float16)),
    }
    for name, (src, kw) in jobs.items():
        if a.only and name not in a.only:
            continue
        out = GOLDEN / name
        compress(GOLDEN / src, out, **kw)
        vocab = json.loads((out / "config.json").read_text())["vocab_size"]
        write_golden(name, out, vocab)
    if a.warden and (not a.only or "tiny-llama-warden-ct" in a.only):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "q"
            subprocess.run([a.warden, "quantize", "-m", str(GOLDEN / "tiny-llama"), "-o", str(out),
                            "--weights", "int4-g32"], check=True)
            sha = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
            write_golden("tiny-llama-warden-ct", out, 320,
                         {"source": "warden quantize -m tests/golden/models/tiny-llama --weights int4-g32",
                          "warden_output_sha256": sha})
    return 0


if __name__ == "__main__":
    sys.exit(main())
