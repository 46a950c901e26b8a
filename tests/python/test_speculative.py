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
