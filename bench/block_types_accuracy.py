#!/usr/bin/env python3
"""Accuracy of warden's native GGUF block kernels on llama.cpp-quantized files: for each type,
`llama-quantize` writes the source model in that type (llama.cpp's own per-tensor mix for it:
K-quant files keep a few tensors in other types, and rows not a multiple of 256 fall back to
Q5_0 / Q5_1 / Q8_0 ...), then warden's logits of the native load are compared with those of the
exact f32 dequantization of the same file (`--weights f32`: warden's dequantization equals
gguf-py's bit for bit, tests/python/test_gguf_block_types.py). Reported per type: top-1
agreement over the positions and the largest |logit difference| (absolute and / logit spread).

Not a CI test (needs llama.cpp's llama-quantize). Usage (from the repo root):
    .venv/bin/python bench/block_types_accuracy.py --src models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --quantize /path/to/llama-quantize [--types Q4_K_M Q2_K ...] [--tokens 64]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TYPES = ["Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS"]


def logits(warden: str, model: Path, ids: list[int], extra: list[str]) -> tuple[list[dict[int, float]], str]:
    cmd = [warden, "logits", "-m", str(model), "--tokens", ",".join(map(str, ids)), "--top", "100000",
           "--dtype", "f32", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    rows = []
    for line in p.stdout.splitlines():
        if line.strip().startswith("{"):
            obj = json.loads(line)
            if "pos" in obj:
                rows.append({int(i): float(v) for i, v in obj["top"]})
    load = next((ln for ln in p.stderr.splitlines() if "weights " in ln), "")
    return rows, load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", required=True, help="source GGUF (float, or quantized: --allow-requantize is passed)")
    ap.add_argument("--quantize", required=True, help="llama.cpp's llama-quantize")
    ap.add_argument("--warden", default=str(ROOT / "build" / "warden"))
    ap.add_argument("--types", nargs="*", default=TYPES)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    ids = [(i * 7919 + 13) % 20000 + 100 for i in range(a.tokens)]
    print("| type | load line | top-1 agreement | max abs logit error | max error / spread |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for t in a.types:
            out = Path(d) / f"m.{t}.gguf"
            subprocess.run([a.quantize, "--allow-requantize", a.src, str(out), t, str(a.threads)],
                           check=True, capture_output=True)
            nat, load = logits(a.warden, out, ids, [])
            ref, _ = logits(a.warden, out, ids, ["--weights", "f32"])
            agree = sum(max(g, key=g.get) == max(e, key=e.get) for g, e in zip(nat, ref))
            err = max(max(abs(g[i] - e[i]) for i in e) for g, e in zip(nat, ref))
            rel = max(max(abs(g[i] - e[i]) for i in e) / (max(e.values()) - min(e.values())) for g, e in zip(nat, ref))
            fmt = load.split("weights ", 1)[1].split(" (", 1)[0] if "weights " in load else "?"
            print(f"| {t} | {fmt} | {agree}/{len(ref)} | {err:.4f} | {rel:.4f} |", flush=True)
            out.unlink()


if __name__ == "__main__":
    main()
