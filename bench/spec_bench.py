#!/usr/bin/env python3
"""Speculative decoding A/B on one machine, the variants interleaved round by round (so a
shared machine's load drifts over all of them alike):

  grounded   batch 1, prompts that quote / edit / summarize a given text: --spec off vs ngram
  chat       batch 1, open-ended chat, bf16 target: --spec off vs an int4 self-draft
  conc8/32   8 / 32 sequences at once (grounded and chat prompts mixed): off vs adaptive ngram

Batch 1 reports `warden run`'s decode tokens/s; concurrency reports `warden batch`'s output
tokens/s. Speculative runs also report acceptance, acceptance per draft position and where the
time went (draft, verify steps, rollback). Prints a markdown table and writes JSON.

  .venv/bin/python bench/spec_bench.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --rounds 2 --out /tmp/spec_bench.json
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT = ("The city council met on Tuesday evening to review next year's budget. After a long "
        "debate it approved funding for the new public library on Elm Street, postponed the "
        "road repairs on the northern bypass until the spring, and asked the treasurer to "
        "publish the full accounts online before the end of the month. Residents who attended "
        "the meeting welcomed the library decision but complained about the potholes.")
CODE = ("def total(items):\n    result = 0\n    for item in items:\n        result = result + "
        "item.price * item.quantity\n    return result\n")


def chat(msg: str) -> str:
    return f"<|im_start|>user\n{msg}<|im_end|>\n<|im_start|>assistant\n"


GROUNDED = [
    chat(f"Repeat the following text exactly:\n\n{TEXT}"),
    chat(f"Rename the function to compute_total and return the code:\n\n{CODE}"),
    chat(f"Quote the sentence about the library from this text:\n\n{TEXT}"),
    chat(f"Summarize this text in two sentences:\n\n{TEXT}"),
]
OPEN = [
    chat("Write a short story about a lighthouse keeper."),
    chat("Explain how rainbows form."),
    chat("Give me some tips for learning to play the guitar."),
]


def run_one(model: str, prompt: str, n: int, threads: int, extra: list[str]) -> dict:
    cmd = [str(ROOT / "build/warden"), "run", "-m", model, "-p", prompt, "-n", str(n), "--temp",
           "0", "--seed", "1", "--ignore-eos", "-t", str(threads), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    m = re.search(r"decode_tok_s=([\d.]+)", p.stderr)
    return {"tok_s": float(m.group(1)), "text": p.stdout}


def run_batch(model: str, prompts: list[str], n: int, threads: int, seqs: int,
              extra: list[str]) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p}) + "\n")
    cmd = [str(ROOT / "build/warden"), "batch", "-m", model, "--prompts", f.name, "-n", str(n),
           "--temp", "0", "--ignore-eos", "-t", str(threads), "--max-seqs", str(seqs), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    Path(f.name).unlink()
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    s = lines[-1]
    return {"tok_s": s["output_tok_s"], "spec": s.get("spec"),
            "tokens": [x["tokens"] for x in lines[:-1]]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--out", default="/tmp/spec_bench.json")
    ap.add_argument("--skip", default="", help="comma-separated workloads to skip")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    k = ["--spec-tokens", str(a.k)]
    variants = {
        "grounded": [("off", ["--spec", "off"]), ("ngram", ["--spec", "ngram", *k])],
        "chat": [("off", ["--weights", "bf16"]),
                 ("int4 self-draft", ["--weights", "bf16", "--spec", "draft", "--draft-weights",
                                      "int4-g32-asym", *k])],
        "conc8": [("off", []), ("ngram", ["--spec", "ngram", *k])],
        "conc32": [("off", []), ("ngram", ["--spec", "ngram", *k])],
    }
    res: dict = {w: {v: [] for v, _ in vs} for w, vs in variants.items() if w not in skip}
    for r in range(a.rounds):
        for w, vs in variants.items():
            if w in skip:
                continue
            for name, extra in (vs if r % 2 == 0 else list(reversed(vs))):
                if w in ("grounded", "chat"):
                    prompts = GROUNDED if w == "grounded" else OPEN
                    for p in prompts:
                        res[w][name].append(run_one(a.model, p, a.n, a.threads, extra))
                else:
                    c = 8 if w == "conc8" else 32
                    mix = [(GROUNDED + OPEN)[i % 7] for i in range(c)]
                    res[w][name].append(run_batch(a.model, mix, a.n // 2, a.threads, c, extra))
                print(f"round {r} {w} {name}: {res[w][name][-1]['tok_s']:.2f} tok/s", flush=True)
    # Acceptance / breakdown: one batch-1 `warden batch` run per speculative variant.
    detail = {}
    if "grounded" not in skip:
        detail["grounded ngram"] = run_batch(a.model, GROUNDED, a.n, a.threads, 1,
                                             ["--spec", "ngram", *k])["spec"]
    if "chat" not in skip:
        detail["chat int4 self-draft"] = run_batch(
            a.model, OPEN, a.n, a.threads, 1,
            ["--weights", "bf16", "--spec", "draft", "--draft-weights", "int4-g32-asym", *k])["spec"]
    print("\n| workload | variant | tokens/s (mean of runs) | speed-up |")
    print("|---|---|---|---|")
    for w, vs in res.items():
        base = None
        for name, runs in vs.items():
            m = statistics.mean(x["tok_s"] for x in runs)
            base = base or m
            print(f"| {w} | {name} | {m:.2f} | {m / base:.2f}x |")
    print("\n| speculative run | acceptance | accepted/proposed by position | draft ms | "
          "verify-step ms | rollback ms |")
    print("|---|---|---|---|---|---|")
    for name, s in detail.items():
        pos = " ".join(f"{acc}/{pro}" for acc, pro in zip(s["accepted_at"], s["proposed_at"]))
        print(f"| {name} | {s['acceptance']:.2f} | {pos} | {s['draft_ms']:.0f} | "
              f"{s['verify_step_ms']:.0f} | {s['rollback_ms']:.1f} |")
    Path(a.out).write_text(json.dumps({"results": res, "detail": detail}, indent=1))


if __name__ == "__main__":
    main()
