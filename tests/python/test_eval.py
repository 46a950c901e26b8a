"""`warden eval`: identical configurations must give exactly zero difference (every task in
the default set is deterministic), and a bad configuration must fail with a clear error
before any model work."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, SMOLLM2_GGUF, WARDEN_BIN, require_warden


def warden_eval(*args, timeout=600):
    require_warden()
    return subprocess.run([str(WARDEN_BIN), "eval", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_base_equals_test_gives_zero_difference(tmp_path):
    if not SMOLLM2_GGUF.is_file():
        pytest.skip(f"default model missing at {SMOLLM2_GGUF}")
    out = tmp_path / "eval.json"
    p = warden_eval("-m", SMOLLM2_GGUF, "--base", "weights=bf16,kv=bf16", "--test", "kv=bf16,weights=bf16",
                    "--tasks", "kl,json,copy", "--limit", "1", "-t", "2", "--json", out)
    assert p.returncode == 0, p.stderr
    res = json.loads(out.read_text())
    assert [t["task"] for t in res["tasks"]] == ["kl", "json", "copy"]
    for t in res["tasks"]:
        for m in t["metrics"]:
            assert m["n"] == 1
            assert m["diff"] == 0.0 and m["ci95"] == [0.0, 0.0], (t["task"], m)
            assert m["base_items"] == m["test_items"]
    kl = {m["name"]: m for m in res["tasks"][0]["metrics"]}
    assert kl["kl(base||test)/token"]["test"] == 0.0 and kl["top1 agreement"]["test"] == 1.0
    # A real next-token NLL of English prose for a 135M model: between 0.5 and 6 nats.
    assert 0.5 < kl["nll/token"]["base"] < 6.0
    assert "== kl" in p.stdout and "95% CI" in p.stdout


@pytest.mark.parametrize("args,needle", [
    (["--base", "weights=bf16", "--test", "weights=int3"], "--test: weights=int3"),
    (["--base", "kv=fp7", "--test", "weights=bf16"], "--base: kv=fp7 is not supported"),
    (["--base", "colour=red", "--test", "weights=bf16"], "unknown key 'colour'"),
    (["--base", "weights", "--test", "weights=bf16"], "is not KEY=VALUE"),
    (["--base", "weights=bf16", "--test", "weights=bf16", "--tasks", "kl,nope"], "unknown task 'nope'"),
])
def test_bad_config_is_a_clear_error(args, needle):
    p = warden_eval("-m", "/nonexistent.gguf", *args, timeout=60)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert needle in p.stderr and "warden: error:" in p.stderr, p.stderr
