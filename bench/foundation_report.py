#!/usr/bin/env python3
"""Combine the foundation benchmark's raw outputs into bench/out/foundation.json
and a markdown table. Called by bench/run_foundation.sh; usable on its own:

    .venv/bin/python bench/foundation_report.py --model FILE --threads 2 \
        --membw bench/out/membw.json [--llama-bench bench/out/llama-bench.json] \
        [--warden-log bench/out/warden-run-1.log ...] --out bench/out/foundation.json

Roofline: batch-1 decode reads every weight once per token, except the token
embedding table, of which only one row is gathered (unless the output head is
tied to it, then all of it is read). Plus the KV cache of the current context:
tokens/s <= bandwidth / (weight bytes + KV bytes). Bandwidth is membw's best
read rate with the same thread count as the engines.
"""
from __future__ import annotations


def _is_number(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

TIMINGS_RE = re.compile(r"^timings:\s+(.*)$", re.M)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--membw", required=True, help="membw --json output")
    p.add_argument("--llama-bench", help="llama-bench -o json output")
    p.add_argument("--warden-log", action="append", default=[], help="stderr of one `warden run` (repeatable)")
    p.add_argument("--pp", type=int, default=128)
    p.add_argument("--tg", type=int, default=64)
    p.add_argument("--kv-bytes", type=int, default=2, help="bytes per KV element (f16/bf16 = 2)")
    p.add_argument("--meta", action="append", default=[], help="key=value recorded in the json (repeatable)")
    p.add_argument("--out", required=True)
    return p.parse_args()


def model_bytes(path: str) -> dict:
    try:
        import gguf  # noqa: PLC0415
    except ImportError:
        sys.exit("foundation_report.py needs the `gguf` package (use the repo .venv)")
    r = gguf.GGUFReader(path)

    def scalar(key: str):
        f = r.fields.get(key)
        return None if f is None else f.contents()

    arch = scalar("general.architecture")
    n_layer = int(scalar(f"{arch}.block_count"))
    n_embd = int(scalar(f"{arch}.embedding_length"))
    n_head = int(scalar(f"{arch}.attention.head_count"))
    n_head_kv = int(scalar(f"{arch}.attention.head_count_kv") or n_head)
    head_dim = n_embd // n_head
    sizes = {t.name: int(t.n_bytes) for t in r.tensors}
    params = {t.name: int(t.n_elements) for t in r.tensors}
    types = sorted({t.tensor_type.name for t in r.tensors})
    total = sum(sizes.values())
    emb = sizes.get("token_embd.weight", 0)
    tied = "output.weight" not in sizes
    if tied:
        read = total  # the embedding table doubles as the output head: read in full
    else:
        emb_rows = params["token_embd.weight"] // n_embd
        read = total - emb + emb // emb_rows  # one gathered row
    return {
        "file_bytes": Path(path).stat().st_size,
        "tensor_bytes": total,
        "params": sum(params.values()),
        "tensor_types": types,
        "token_embd_bytes": emb,
        "tied_output": tied,
        "weight_bytes_read_per_token": read,
        "n_layer": n_layer,
        "n_embd": n_embd,
        "n_head": n_head,
        "n_head_kv": n_head_kv,
        "head_dim": head_dim,
    }


def kv_bytes_per_ctx_token(m: dict, elem_bytes: int) -> int:
    return 2 * m["n_layer"] * m["n_head_kv"] * m["head_dim"] * elem_bytes  # K and V


def llama_results(path: str, pp: int, tg: int) -> dict:
    rows = json.loads(Path(path).read_text())
    out: dict = {}
    for row in rows:
        kind = None
        if row["n_prompt"] == pp and row["n_gen"] == 0:
            kind = "prefill"
        elif row["n_prompt"] == 0 and row["n_gen"] == tg:
            kind = "decode"
        if kind is None:
            continue
        samples = row.get("samples_ts") or [row["avg_ts"]]
        out[kind] = {
            "tok_s": statistics.median(samples),
            "samples_tok_s": samples,
            "avg_tok_s": row["avg_ts"],
            "stddev_tok_s": row["stddev_ts"],
            "test": f"pp{pp}" if kind == "prefill" else f"tg{tg}",
        }
        out["build_commit"] = row.get("build_commit")
        out["build_number"] = row.get("build_number")
        out["cpu_info"] = row.get("cpu_info")
        out["n_threads"] = row.get("n_threads")
        out["type_k"] = row.get("type_k")
    return out


def warden_results(logs: list[str]) -> dict | None:
    runs = []
    for log in logs:
        text = Path(log).read_text(errors="replace")
        found = TIMINGS_RE.findall(text)
        if not found:
            continue
        kv = dict(item.split("=", 1) for item in found[-1].split())
        runs.append({k: float(v) for k, v in kv.items() if _is_number(v)})
    if not runs:
        return None

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    return {
        "runs": runs,
        "prefill": {"tok_s": med("prefill_tok_s"), "samples_tok_s": [r["prefill_tok_s"] for r in runs],
                    "prompt_tokens": med("prompt_tokens")},
        "decode": {"tok_s": med("decode_tok_s"), "samples_tok_s": [r["decode_tok_s"] for r in runs],
                   "gen_tokens": med("gen_tokens")},
    }


def fmt(x, nd=2):
    return "pending" if x is None else f"{x:.{nd}f}"


def main() -> None:
    a = parse_args()
    m = model_bytes(a.model)
    bw = json.loads(Path(a.membw).read_text())
    gbps = bw["read_gbps"].get(str(a.threads))
    if gbps is None:
        sys.exit(f"membw has no {a.threads}-thread figure")
    bandwidth = gbps * 1e9
    kv_tok = kv_bytes_per_ctx_token(m, a.kv_bytes)

    engines: dict = {}
    if a.llama_bench and Path(a.llama_bench).exists():
        engines["llama.cpp"] = llama_results(a.llama_bench, a.pp, a.tg)
        # llama-bench tg starts from an empty context: mean context during decode ~ tg/2
        engines["llama.cpp"]["decode_mean_ctx"] = a.tg / 2
    w = warden_results(a.warden_log)
    if w is not None:
        # warden decodes after its prompt: mean context ~ prompt + gen/2
        w["decode_mean_ctx"] = w["prefill"]["prompt_tokens"] + w["decode"]["gen_tokens"] / 2
        engines["warden"] = w

    for name, e in engines.items():
        dec = e.get("decode")
        if not dec:
            continue
        bytes_tok = m["weight_bytes_read_per_token"] + kv_tok * e["decode_mean_ctx"]
        roof = bandwidth / bytes_tok
        e["roofline"] = {"bytes_per_token": bytes_tok, "tok_s": roof, "fraction": dec["tok_s"] / roof}

    ratios = {}
    if "llama.cpp" in engines and "warden" in engines:
        for k in ("prefill", "decode"):
            if k in engines["llama.cpp"] and k in engines["warden"]:
                ratios[k] = engines["warden"][k]["tok_s"] / engines["llama.cpp"][k]["tok_s"]

    meta = dict(kv.split("=", 1) for kv in a.meta)
    result = {
        "meta": meta,
        "model": {"path": a.model, **m, "kv_bytes_per_ctx_token": kv_tok},
        "threads": a.threads,
        "membw": bw,
        "bandwidth_gbps": gbps,
        "roofline_tok_s_weights_only": bandwidth / m["weight_bytes_read_per_token"],
        "engines": engines,
        "ratio_warden_over_llama_cpp": ratios,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")

    print(f"model: {a.model} ({m['params'] / 1e9:.3f} B params, {', '.join(m['tensor_types'])}; "
          f"{m['weight_bytes_read_per_token'] / 1e9:.3f} GB read per decoded token + {kv_tok} B KV per context token)")
    print(f"read bandwidth, {a.threads} threads: {gbps:.2f} GB/s -> decode roofline "
          f"{result['roofline_tok_s_weights_only']:.2f} tok/s (weights only)")
    print()
    print(f"| engine | prefill pp{a.pp} tok/s | decode tg{a.tg} tok/s | decode roofline tok/s | decode fraction of roofline |")
    print("|---|---:|---:|---:|---:|")
    for name in ("llama.cpp", "warden"):
        e = engines.get(name)
        if e is None:
            print(f"| {name} | pending | pending | pending | pending |")
            continue
        pre = e.get("prefill", {}).get("tok_s")
        dec = e.get("decode", {}).get("tok_s")
        roof = e.get("roofline", {})
        frac = roof.get("fraction")
        print(f"| {name} | {fmt(pre)} | {fmt(dec)} | {fmt(roof.get('tok_s'))} | "
              f"{'pending' if frac is None else f'{frac * 100:.1f}%'} |")
    if ratios:
        print()
        print("warden / llama.cpp: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
