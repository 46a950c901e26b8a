#!/usr/bin/env python3
"""warden's speculative decoding side by side with llama.cpp's, same model files, prompts, draft
length and thread count, the runs interleaved prompt by prompt (a shared machine's load drifts
over all of them alike):

  grounded  n-gram / prompt lookup on the default model: `warden run --spec off|ngram` against
            `llama-lookup --draft 0|K` (its n-gram lookup; --draft 0 is its plain decode)
  chat      a draft model sharing the target's vocabulary: warden's bf16 target with an int4
            self-draft (`--weights bf16 --spec draft --draft-weights int4-g32-asym`) against
            `llama-speculative-simple` with the same model as F16 target and Q4_1 draft (both
            made by llama-quantize from the default model; Q4_1 is the same kind of format as
            int4-g32-asym: 4 bits, groups of 32, scale and minimum), baseline
            `llama-lookup --draft 0` on the F16 file

Decode tokens/s of each tool's own report (warden: decode_tok_s; llama.cpp: "decoded N tokens in
T seconds"), greedy, EOS ignored. Acceptance: accepted / proposed draft tokens (warden batch-1
`warden batch`; llama.cpp n_accept / n_drafted). Prints a markdown table, writes JSON.

  .venv/bin/python bench/spec_llama.py --llama-dir LLAMA/build/bin --rounds 2 --threads 1
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

from spec_bench import GROUNDED, OPEN, ROOT, run_batch, run_one


def llama(cmd: list[str]) -> dict:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        raise RuntimeError(out[-3000:])
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", out)
    drafted = re.search(r"n_drafted\s*=\s*(\d+)", out)
    accepted = re.search(r"n_accept\s*=\s*(\d+)", out)
    return {"tok_s": int(m.group(1)) / float(m.group(2)),
            "drafted": int(drafted.group(1)) if drafted else 0,
            "accepted": int(accepted.group(1)) if accepted else 0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--llama-dir", required=True, help="llama.cpp's build/bin")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--out", default="/tmp/spec_llama.json")
    a = ap.parse_args()
    L = Path(a.llama_dir)
    work = Path(tempfile.mkdtemp(prefix="spec_llama_"))
    f16, q4 = work / "target-f16.gguf", work / "draft-q4_1.gguf"
    for src, dst, t in ((a.model, f16, "F16"), (f16, q4, "Q4_1")):
        subprocess.run([str(L / "llama-quantize"), "--allow-requantize", str(src), str(dst), t],
                       check=True, capture_output=True, timeout=600)
    k, t, n = str(a.k), str(a.threads), str(a.n)
    common = ["-n", n, "--temp", "0", "--ignore-eos", "-t", t]
    variants = {
        "grounded": [
            ("warden off", lambda p: run_one(a.model, p, a.n, a.threads, ["--spec", "off"])),
            ("warden ngram", lambda p: run_one(a.model, p, a.n, a.threads,
                                               ["--spec", "ngram", "--spec-tokens", k])),
            ("llama.cpp off", lambda p: llama([str(L / "llama-lookup"), "-m", a.model, "-p", p,
                                               *common, "--draft", "0"])),
            ("llama.cpp lookup", lambda p: llama([str(L / "llama-lookup"), "-m", a.model, "-p", p,
                                                  *common, "--draft", k])),
        ],
        "chat": [
            ("warden off", lambda p: run_one(a.model, p, a.n, a.threads, ["--weights", "bf16"])),
            ("warden int4 self-draft", lambda p: run_one(
                a.model, p, a.n, a.threads, ["--weights", "bf16", "--spec", "draft",
                                             "--draft-weights", "int4-g32-asym",
                                             "--spec-tokens", k])),
            ("llama.cpp off", lambda p: llama([str(L / "llama-lookup"), "-m", str(f16), "-p", p,
                                               *common, "--draft", "0"])),
            ("llama.cpp Q4_1 draft", lambda p: llama([
                str(L / "llama-speculative-simple"), "-m", str(f16), "-md", str(q4), "-p", p,
                *common, "-td", t, "--draft-max", k, "--draft-min", "0", "--draft-p-min", "0"])),
        ],
    }
    res = {w: {name: [] for name, _ in vs} for w, vs in variants.items()}
    for r in range(a.rounds):
        for w, vs in variants.items():
            for p in GROUNDED if w == "grounded" else OPEN:
                for name, fn in vs if r % 2 == 0 else list(reversed(vs)):
                    res[w][name].append(fn(p))
            print(f"round {r} {w}: " + ", ".join(
                f"{name} {statistics.mean(x['tok_s'] for x in runs):.1f}"
                for name, runs in res[w].items()), flush=True)
    # warden's acceptance: one batch-1 `warden batch` pass per speculative variant.
    acc = {
        ("grounded", "warden ngram"): run_batch(a.model, GROUNDED, a.n, a.threads, 1,
                                                ["--spec", "ngram", "--spec-tokens", k])["spec"],
        ("chat", "warden int4 self-draft"): run_batch(
            a.model, OPEN, a.n, a.threads, 1,
            ["--weights", "bf16", "--spec", "draft", "--draft-weights", "int4-g32-asym",
             "--spec-tokens", k])["spec"],
    }
    print(f"\n| workload | variant | decode tokens/s | vs its own off | accepted / proposed |")
    print("|---|---|---|---|---|")
    for w, vs in res.items():
        base = {}
        for name, runs in vs.items():
            m = statistics.mean(x["tok_s"] for x in runs)
            tool = name.split()[0]
            base.setdefault(tool, m)
            if (w, name) in acc:
                s = acc[(w, name)]
                ratio = f"{s['acceptance']:.2f}"
            elif any(x["drafted"] for x in runs if "drafted" in x):
                ratio = f"{sum(x['accepted'] for x in runs) / sum(x['drafted'] for x in runs):.2f}"
            else:
                ratio = "-"
            print(f"| {w} | {name} | {m:.2f} | {m / base[tool]:.2f}x | {ratio} |")
    Path(a.out).write_text(json.dumps({"results": res, "acceptance": {f"{w} {v}": s for (w, v), s in acc.items()}},
                                      indent=1))
    for f in (f16, q4):
        f.unlink()
    work.rmdir()


if __name__ == "__main__":
    main()
