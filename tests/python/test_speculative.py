"""Speculative decoding end to end through `warden batch` on the default model: greedy output is
token-for-token the output of `--spec off` for the n-gram proposer and the int4 self-draft of a
bf16 target, with several sequences batched (some drafting, some not), preemption from a small
KV budget and fp8 KV; and bad speculative flags are refused with a clear error."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, SMOLLM2_GGUF, WARDEN_BIN, require_warden

TEXT = ("The committee met on Tuesday to review the budget. It approved the new library, "
        "postponed the road repairs until spring, and asked the treasurer to publish the "
        "accounts online before the end of the month.")
PROMPTS = [
    f"<|im_start|>user\nRepeat this text word for word: {TEXT}<|im_end|>\n<|im_start|>assistant\n",
    f"<|im_start|>user\nQuote the first sentence of: {TEXT}<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n",
    f"<|im_start|>user\nSummarize: {TEXT}<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nCount from one to twelve in words.<|im_end|>\n<|im_start|>assistant\n",
]


def batch(tmp_path, *args) -> tuple[list[list[int]], dict]:
    require_warden()
    if not SMOLLM2_GGUF.is_file():
        pytest.skip(f"default model missing at {SMOLLM2_GGUF}")
    f = tmp_path / "prompts.jsonl"
    f.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    p = subprocess.run([str(WARDEN_BIN), "batch", "-m", str(SMOLLM2_GGUF), "--prompts", str(f),
                        "-n", "40", "--temp", "0", "-t", "2", *map(str, args)],
                       capture_output=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr.decode()
    lines = [json.loads(x) for x in p.stdout.decode().splitlines() if x.strip()]
    summary = lines[-1]
    assert summary["integrity_violations"] == 0 and summary["kv_pages_used_after"] == 0
    return [x["tokens"] for x in lines[:-1]], summary


@pytest.mark.parametrize("kv", [[], ["--kv-dtype", "fp8_e4m3", "--kv-cache-bytes", "2M"]],
                         ids=["bf16-kv", "fp8-kv-small-pool"])
def test_ngram_greedy_equals_spec_off(tmp_path, kv):
    ref, _ = batch(tmp_path, "--max-seqs", "4", *kv)
    got, s = batch(tmp_path, "--max-seqs", "4", "--spec", "ngram", "--spec-tokens", "4",
                   "--spec-fixed", *kv)
    assert got == ref
    assert s["spec"]["proposed"] > 0 and 0 < s["spec"]["accepted"] < s["spec"]["proposed"]
    if kv:
        assert s["preemptions"] > 0


def test_int4_self_draft_of_bf16_target_equals_spec_off(tmp_path):
    ref, _ = batch(tmp_path, "--weights", "bf16", "--max-seqs", "3")
    got, s = batch(tmp_path, "--weights", "bf16", "--max-seqs", "3", "--spec", "draft",
                   "--draft-weights", "int4-g32-asym", "--spec-tokens", "3", "--spec-fixed")
    assert got == ref
    assert s["spec"]["proposer"] == "draft" and s["spec"]["accepted"] > 0


@pytest.mark.parametrize("args,needle", [
    (["--spec", "bogus"], "--spec"),
    (["--spec", "ngram", "--spec-tokens", "0"], "--spec-tokens"),
    (["--draft-model", "x.gguf"], "--spec draft"),
    (["--spec", "draft", "--draft-model", "/nonexistent/draft.gguf"], "draft.gguf"),
])
def test_bad_speculative_flags_are_refused(tmp_path, args, needle):
    require_warden()
    if not SMOLLM2_GGUF.is_file():
        pytest.skip(f"default model missing at {SMOLLM2_GGUF}")
    p = subprocess.run([str(WARDEN_BIN), "run", "-m", str(SMOLLM2_GGUF), "-p", "hi", "-n", "2",
                        *args], capture_output=True, timeout=120, cwd=ROOT)
    err = p.stderr.decode()
    assert 0 < p.returncode < 128, err
    assert needle in err, err


def test_serve_ngram_equals_plain_and_reports_acceptance():
    """`warden serve --spec ngram`: concurrent greedy completions equal `warden run --spec off`,
    warden_timing carries the request's draft counts, /metrics the counters and histogram."""
    from concurrent.futures import ThreadPoolExecutor

    from conftest import WardenServer
    s = WardenServer("--spec", "ngram", "--spec-tokens", "4", "--spec-fixed", "--max-seqs", "4")
    try:
        c = s.client()

        def complete(p):
            return c.completions.create(model=s.model_id, prompt=p, max_tokens=24, temperature=0,
                                        extra_body={"ignore_eos": True})

        with ThreadPoolExecutor(3) as ex:
            rs = list(ex.map(complete, PROMPTS[:3]))
        proposed = 0
        for p, r in zip(PROMPTS[:3], rs):
            ref = subprocess.run([str(WARDEN_BIN), "run", "-m", str(SMOLLM2_GGUF), "-p", p, "-n",
                                  "24", "--temp", "0", "--ignore-eos", "-t", "2"],
                                 capture_output=True, timeout=120, cwd=ROOT)
            assert r.choices[0].text == ref.stdout.decode()[:-1]
            t = r.model_extra["warden_timing"]
            proposed += t.get("spec_proposed", 0)
            assert t.get("spec_accepted", 0) <= t.get("spec_proposed", 0)
        assert proposed > 0
        m = s.metrics()
        assert m["warden_spec_proposed_tokens_total"] == proposed
        assert m["warden_spec_acceptance_rate_count"] >= 1
    finally:
        assert s.stop() == 0
