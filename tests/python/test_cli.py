"""The `warden` CLI contract: subcommands, help, determinism, and bad input.

Every bad input must end with a one-line error naming the problem and a non-zero exit,
never a crash (signal), a hang (timeout) or a traceback-like dump.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import GOLDEN, ROOT, SMOLLM2_GGUF, WARDEN_BIN, require_warden

TINY_LLAMA = GOLDEN / "tiny-llama"


def warden(*args, stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    require_warden()
    cmd = [str(WARDEN_BIN), *[a if isinstance(a, (bytes, str)) else str(a) for a in args]]
    return subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout, cwd=ROOT)


def need_model() -> Path:
    if not SMOLLM2_GGUF.is_file():
        pytest.skip(f"default model missing at {SMOLLM2_GGUF} (scripts/fetch_model.sh installs it)")
    return SMOLLM2_GGUF


def assert_clean_error(p: subprocess.CompletedProcess, *needles: str) -> str:
    """Non-zero exit without a signal, exactly one stderr line naming the problem. The load report
    ("warden: weights FORMAT (...): layers ...", printed once a quantized model has loaded) may
    come before it."""
    err = p.stderr.decode("utf-8", "replace").strip()
    lines = err.splitlines()
    while len(lines) > 1 and lines[0].startswith("warden: weights ") and "error" not in lines[0]:
        lines = lines[1:]
    err = "\n".join(lines)
    assert p.returncode > 0, f"expected failure, got rc={p.returncode}, stderr={err!r}"
    assert p.returncode < 128, f"killed by a signal? rc={p.returncode} stderr={err!r}"
    assert len(err.splitlines()) == 1, f"error must be one line, got:\n{err}"
    assert "error" in err.lower(), err
    assert "internal error" not in err, err
    for n in needles:
        assert n.lower() in err.lower(), f"{n!r} not in {err!r}"
    return err


# ---------------------------------------------------------------- contract / happy paths

@pytest.mark.parametrize("sub", ["run", "info", "tokenize", "logits", "batch"])
def test_help_on_every_subcommand(sub):
    p = warden(sub, "--help")
    assert p.returncode == 0
    out = p.stdout.decode()
    assert "--model" in out and ("--threads" in out)


def test_info_describes_default_model():
    m = need_model()
    p = warden("info", "-m", m)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    for needle in ["architecture:   llama", "49152", "30", "Q4_1", "context length: 8192",
                   "byte-level", "<|im_end|>"]:
        assert needle in out, f"{needle!r} missing from info output:\n{out}"


def test_info_reports_kernel_isa_and_amx_override():
    """`warden info` names the kernel family in use and why AMX is or is not available;
    WARDEN_ISA=amx runs AMX where the CPU and kernel allow it and otherwise warns (with the reason)
    and runs the best supported family, as the other WARDEN_ISA values do."""
    m = need_model()
    require_warden()
    env = dict(os.environ)

    def info(isa: str) -> subprocess.CompletedProcess:
        env["WARDEN_ISA"] = isa
        return subprocess.run([str(WARDEN_BIN), "info", "-m", str(m)], capture_output=True,
                              timeout=120, cwd=ROOT, env=env)

    p = info("scalar")
    assert p.returncode == 0, p.stderr
    assert "kernels:        isa=scalar (AMX: " in p.stdout.decode()
    p = info("amx")
    assert p.returncode == 0, p.stderr
    out, err = p.stdout.decode(), p.stderr.decode()
    if "(AMX: available" in out:
        assert "isa=amx" in out and "WARDEN_ISA" not in err
    else:
        assert "isa=amx" not in out
        assert "WARDEN_ISA=amx is not supported here (" in err, err


def test_run_greedy_is_deterministic_and_reports_timings():
    m = need_model()
    a = warden("run", "-m", m, "-p", "The capital of France is", "-n", "12", "--temp", "0")
    b = warden("run", "-m", m, "-p", "The capital of France is", "-n", "12", "--temp", "0", "--threads", "1")
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    assert a.stdout == b.stdout  # greedy: same text with 1 or all threads
    assert "Paris" in a.stdout.decode()
    assert b"timings: prompt_tokens=" in a.stderr


def test_run_same_seed_same_output():
    m = need_model()
    args = ("run", "-m", m, "-p", "Once upon a time", "-n", "24", "--temp", "1.0", "--top-k", "0",
            "--top-p", "1", "--min-p", "0")
    a = warden(*args, "--seed", "1234")
    b = warden(*args, "--seed", "1234")
    c = warden(*args, "--seed", "99")
    assert a.returncode == b.returncode == c.returncode == 0
    assert a.stdout == b.stdout
    assert a.stdout != c.stdout  # 24 tokens at T=1: a collision would be astronomically unlikely


def test_run_output_is_valid_utf8_for_multibyte_text():
    m = need_model()
    p = warden("run", "-m", m, "-p", "日本語の文章: 東京は", "-n", "16", "--temp", "0")
    assert p.returncode == 0, p.stderr
    p.stdout.decode("utf-8")  # raises if the streaming detokenizer emitted broken UTF-8


def test_tokenize_matches_reference_ids():
    m = need_model()
    golden = ROOT / "tests" / "golden" / "tokenizer" / "smollm2_strings.jsonl"
    if not golden.is_file():
        pytest.skip("tokenizer golden file not generated")
    rows = [json.loads(l) for l in golden.read_text().splitlines() if l.startswith('{"text"')][:20]
    assert rows
    for r in rows:
        p = warden("tokenize", "-m", m, "--no-bos", stdin=r["text"].encode())
        assert p.returncode == 0, p.stderr
        got = [int(x) for x in p.stdout.split()]
        assert got == r["ids"], r["text"]


# ---------------------------------------------------------------- bad input

def test_unknown_flag():
    assert_clean_error(warden("run", "-m", "x.gguf", "-p", "hi", "--bogus-flag"), "bogus")


def test_unknown_subcommand():
    assert_clean_error(warden("frobnicate"))


def test_missing_model_file(tmp_path):
    assert_clean_error(warden("info", "-m", tmp_path / "nope.gguf"), "does not exist")


def test_n_zero():
    m = need_model()
    assert_clean_error(warden("run", "-m", m, "-p", "hi", "-n", "0"), "-n")


def test_invalid_utf8_prompt():
    m = need_model()
    assert_clean_error(warden("run", "-m", m, "-p", b"abc\xff\xfe", "-n", "4"), "utf-8")


def test_invalid_utf8_stdin():
    m = need_model()
    assert_clean_error(warden("tokenize", "-m", m, stdin=b"ok \xc3\x28 bad"), "utf-8")


def test_prompt_longer_than_context():
    m = need_model()
    prompt = "hello world " * 5000  # ~10k tokens > 8192
    assert_clean_error(warden("run", "-m", m, "-p", prompt, "-n", "4", timeout=300), "context")


def test_bad_sampling_values():
    m = need_model()
    assert_clean_error(warden("run", "-m", m, "-p", "hi", "--top-p", "0"), "top-p")
    assert_clean_error(warden("run", "-m", m, "-p", "hi", "--temp", "-1"), "temperature")
    assert_clean_error(warden("run", "-m", m, "-p", "hi", "--threads", "-4"))


def test_bad_token_lists():
    m = need_model()
    assert_clean_error(warden("logits", "-m", m, "--tokens", "1,x,3"), "x")
    assert_clean_error(warden("logits", "-m", m, "--tokens", ""), "token")
    assert_clean_error(warden("logits", "-m", m, "--tokens", "1,999999"), "vocabulary")


@pytest.mark.parametrize("cut", [0, 3, 8, 24, 1000, 100_000, 5_000_000, -1])
def test_truncated_gguf(tmp_path, cut):
    m = need_model()
    data = m.read_bytes()
    f = tmp_path / "trunc.gguf"
    f.write_bytes(data[:cut] if cut >= 0 else data[:-1])
    assert_clean_error(warden("run", "-m", f, "-p", "hi", "-n", "2"))


def test_corrupt_gguf_magic_and_garbage(tmp_path):
    f = tmp_path / "bad.gguf"
    f.write_bytes(b"NOPE" + os.urandom(4096))
    assert_clean_error(warden("info", "-m", f), "magic")
    f.write_bytes(b"GGUF" + struct.pack("<I", 7) + os.urandom(64))
    assert_clean_error(warden("info", "-m", f), "version")


def _copy_tiny(tmp_path) -> Path:
    if not (TINY_LLAMA / "config.json").is_file():
        pytest.skip("tiny-llama golden model not generated")
    d = tmp_path / "m"
    shutil.copytree(TINY_LLAMA, d)
    return d


def _rewrite_safetensors(path: Path, edit) -> None:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    header, data = edit(header, data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)


def test_unknown_architecture(tmp_path):
    d = _copy_tiny(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "gpt_neox"
    (d / "config.json").write_text(json.dumps(cfg))
    assert_clean_error(warden("logits", "-m", d, "--tokens", "1,2"), "architecture")


def test_missing_tensor(tmp_path):
    d = _copy_tiny(tmp_path)
    victim = "model.layers.1.mlp.up_proj.weight"

    def drop(h, data):
        h.pop(victim)
        return h, data
    _rewrite_safetensors(d / "model.safetensors", drop)
    assert_clean_error(warden("logits", "-m", d, "--tokens", "1,2"), victim)


def test_wrong_shape(tmp_path):
    d = _copy_tiny(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = cfg["intermediate_size"] + 32
    (d / "config.json").write_text(json.dumps(cfg))
    assert_clean_error(warden("logits", "-m", d, "--tokens", "1,2"), "shape")


def test_truncated_safetensors(tmp_path):
    d = _copy_tiny(tmp_path)
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    assert_clean_error(warden("logits", "-m", d, "--tokens", "1,2"))


def test_directory_without_config(tmp_path):
    assert_clean_error(warden("info", "-m", tmp_path), "config.json")
