"""`warden quantize` end to end and the --weights CLI options:
- quantize -> GGUF -> load in warden gives exactly the logits of quantizing at load time;
- the written file is a valid GGUF with Q4_0/Q4_1/Q8_0 tensors whose dequantized values
  (gguf Python package, independent of warden) match what warden's quantizer chose;
- bad input (unknown format, group not dividing a row, corrupt packed tensor, wrong output
  name) fails with a clear message and exit code, never a crash."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import GOLDEN, ROOT, TIMEOUT_S, require_warden, run_logits

TINY = GOLDEN / "tiny-llama.gguf"
TOKENS = "1,15,27,99,3,200,17,42"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(require_warden()), *args], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)


def logits(path: Path, *extra: str) -> str:
    p = run("logits", "-m", str(path), "--tokens", TOKENS, "--top", "5", *extra)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("fmt,gtype", [("int4", "Q4_0"), ("int4-asym", "Q4_1"), ("int8", "Q8_0"), ("int8-g32", "Q8_0")])
def test_quantize_roundtrip_logits_and_gguf_values(tmp_path: Path, fmt: str, gtype: str):
    out = tmp_path / f"q-{fmt}.gguf"
    p = run("quantize", "-m", str(TINY), "-o", str(out), "--weights", fmt)
    assert p.returncode == 0, p.stderr
    # int4 layers: the float embeddings / head are written as int8 (Q8_0), the head that loading with
    # --weights int4 runs anyway; beside int8 layers they are copied.
    int4 = fmt.startswith("int4")
    heads = 2  # tiny-llama: token_embd and an untied output
    assert f"{21 + (heads if int4 else 0)} tensors quantized" in p.stdout, p.stdout
    assert ("token_embd as int8" in p.stdout) == int4, p.stdout
    # Loading the file back == quantizing at load: identical logits, bit for bit in the text.
    assert logits(out, "--weights", fmt) == logits(TINY, "--weights", fmt)
    # The quantized model is close to, but not the same as, the f32 source.
    assert logits(TINY, "--weights", fmt) != logits(TINY)

    gguf = pytest.importorskip("gguf")
    r_src = gguf.GGUFReader(str(TINY))
    r_out = gguf.GGUFReader(str(out))
    src = {t.name: t for t in r_src.tensors}
    n_q = 0
    for t in r_out.tensors:
        if t.name.startswith("blk.") and t.name.endswith((".attn_q.weight", ".ffn_down.weight", ".ffn_up.weight")):
            assert t.tensor_type.name == gtype, t.name
            deq = gguf.quants.dequantize(t.data, t.tensor_type)
            ref = gguf.quants.dequantize(src[t.name].data, src[t.name].tensor_type)
            assert deq.shape == ref.shape
            # int4 round-to-nearest error per weight is at most half a step of its group range.
            err = np.abs(deq - ref).max()
            assert err < (0.2 if fmt.startswith("int4") else 0.02) * np.abs(ref).max(), (t.name, err)
            assert err > 0, t.name
            n_q += 1
        elif int4 and t.name in ("token_embd.weight", "output.weight"):
            assert t.tensor_type.name == "Q8_0", t.name
            deq = gguf.quants.dequantize(t.data, t.tensor_type)
            ref = gguf.quants.dequantize(src[t.name].data, src[t.name].tensor_type)
            # int8 per row: every block of a row has the row's scale.
            blocks = np.asarray(t.data, dtype=np.uint8).reshape(int(t.shape[1]), -1, 34)
            assert (blocks[:, :, :2] == blocks[:, :1, :2]).all(), t.name
            assert 0 < np.abs(deq - ref).max() < 0.01 * np.abs(ref).max(), t.name
        elif not t.name.startswith("blk.") or t.name.endswith("norm.weight"):
            assert t.tensor_type == src[t.name].tensor_type, t.name  # copied unchanged
    assert n_q == 9


def test_quantize_head_weights(tmp_path: Path):
    """`warden quantize --head-weights`: keep copies token_embd / output unchanged (the file then loads
    with the head quantized at each load, as before this flag existed), a format writes them in it;
    each file loads back to the logits of quantizing the source at load with the same head."""
    gguf = pytest.importorskip("gguf")
    src = {t.name: t for t in gguf.GGUFReader(str(TINY)).tensors}
    for head, gtype, runtime in [("keep", None, "int8"), ("int8-g32", "Q8_0", "int8-g32"), ("int4", "Q4_0", "int4")]:
        out = tmp_path / f"h-{head}.gguf"
        p = run("quantize", "-m", str(TINY), "-o", str(out), "--weights", "int4", "--head-weights", head)
        assert p.returncode == 0, p.stderr
        assert f"{21 if head == 'keep' else 23} tensors quantized" in p.stdout, p.stdout
        types = {t.name: t.tensor_type for t in gguf.GGUFReader(str(out)).tensors}
        for name in ("token_embd.weight", "output.weight"):
            assert types[name] == (src[name].tensor_type if gtype is None else gguf.GGMLQuantizationType[gtype]), name
        assert logits(out, "--weights", "int4", "--head-weights", runtime) == \
            logits(TINY, "--weights", "int4", "--head-weights", runtime), head
    for args, msg in [(["--head-weights", "fp8"], "--head-weights: GGUF output needs an int4 or int8 format"),
                      (["--head-weights", "int8-bf16s"], "--head-weights 'int8-bf16s'"),
                      (["--head-weights", "int9"], "unknown weight format 'int9'"),
                      (["--head-weights", "int8", "--quantize-embeddings"], "use one")]:
        p = run("quantize", "-m", str(TINY), "-o", str(tmp_path / "bad.gguf"), "--weights", "int4", *args)
        assert p.returncode == 1 and msg in p.stderr, (args, p.stderr)
        assert not (tmp_path / "bad.gguf").exists()
    p = run("quantize", "-m", str(GOLDEN / "tiny-llama"), "-o", str(tmp_path / "ct"), "--weights", "int4",
            "--head-weights", "int8")
    assert p.returncode == 1 and "--head-weights is for GGUF output" in p.stderr, p.stderr


def test_named_weights_keep_the_default_models_q8_0_head():
    """The default model's head is Q8_0 with a scale per block. Naming int4 or int8 layers keeps it
    as int8-g32, exactly as in the file (the same logits as naming that head), instead of quantizing
    it again per row (int4's default int8, still available by name) or widening it (int8's bf16)."""
    from conftest import SMOLLM2_GGUF as MODEL
    if not MODEL.is_file():
        pytest.skip("default model not installed (the README's test command installs it)")
    for layers in ("int4", "int8"):
        p = run("logits", "-m", str(MODEL), "--tokens", TOKENS, "--top", "5", "--weights", layers)
        assert p.returncode == 0, p.stderr
        assert "token_embd Q8_0 as int8-g32 without loss" in p.stderr, p.stderr
        assert p.stdout == logits(MODEL, "--weights", layers, "--head-weights", "int8-g32")
        # The head's blocks read in place (q8_0) compute the same logits, bit for bit.
        assert p.stdout == logits(MODEL, "--weights", layers, "--head-weights", "q8_0")
        assert p.stdout != logits(MODEL, "--weights", layers, "--head-weights", "int8" if layers == "int4" else "bf16")


def test_bad_inputs_fail_cleanly(tmp_path: Path):
    p = run("logits", "-m", str(TINY), "--tokens", "1,2", "--weights", "int5")
    assert p.returncode != 0 and "unknown weight format 'int5'" in p.stderr
    p = run("logits", "-m", str(TINY), "--tokens", "1,2", "--weights", "int4-g64")
    assert p.returncode != 0 and "group size must be 32 or 128" in p.stderr
    p = run("logits", "-m", str(TINY), "--tokens", "1,2", "--weights", "int4-g128")
    assert p.returncode == 1 and "does not divide the row length 64" in p.stderr
    p = run("logits", "-m", str(TINY), "--tokens", "1,2", "--weights", "int4", "--prefill-weights", "int8")
    assert p.returncode == 1 and "--prefill-weights must be bf16 or fp8" in p.stderr
    p = run("logits", "-m", str(TINY), "--tokens", "1,2", "--weights", "int4", "--head-weights", "int7")
    assert p.returncode != 0 and "unknown weight format 'int7'" in p.stderr
    p = run("logits", "-m", str(TINY), "--tokens", "1,2", "--weights", "int4", "--head-weights", "int8",
            "--quantize-embeddings")
    assert p.returncode == 1 and "use one" in p.stderr
    p = run("quantize", "-m", str(TINY), "-o", str(tmp_path / "x.gguf"), "--weights", "fp8")
    assert p.returncode == 1 and "GGUF output needs an int4 or int8 format" in p.stderr
    p = run("quantize", "-m", str(TINY), "-o", str(tmp_path / "x.bin"), "--weights", "int4")
    assert p.returncode == 1 and "must end in .gguf" in p.stderr
    # Corrupt packed tensor: a NaN block scale inside a Q4_0 tensor.
    out = tmp_path / "q.gguf"
    assert run("quantize", "-m", str(TINY), "-o", str(out), "--weights", "int4").returncode == 0
    gguf = pytest.importorskip("gguf")
    t = next(t for t in gguf.GGUFReader(str(out)).tensors if t.name == "blk.2.ffn_gate.weight")
    off = int(t.data_offset)
    data = bytearray(out.read_bytes())
    data[off + 18 + 1] = 0x7E  # second block's f16 scale -> NaN
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    p = run("logits", "-m", str(bad), "--tokens", "1,2", "--weights", "int4")
    assert p.returncode == 1, p.stderr
    assert "blk.2.ffn_gate.weight" in p.stderr and "corrupt" in p.stderr
    # The same in a Q8_0 tensor: refused whether its blocks are copied into int8-g32 panels (the
    # default) or read in place (q8_0).
    q8 = tmp_path / "q8.gguf"
    assert run("quantize", "-m", str(TINY), "-o", str(q8), "--weights", "int8-g32").returncode == 0
    t = next(t for t in gguf.GGUFReader(str(q8)).tensors if t.name == "blk.2.ffn_gate.weight")
    q8data = bytearray(q8.read_bytes())
    q8data[int(t.data_offset) + 34 + 1] = 0x7E  # second block's f16 scale -> NaN
    bad8 = tmp_path / "bad8.gguf"
    bad8.write_bytes(bytes(q8data))
    for weights in ("auto", "q8_0"):
        p = run("logits", "-m", str(bad8), "--tokens", "1,2", "--weights", weights)
        assert p.returncode == 1, (weights, p.stderr)
        assert "blk.2.ffn_gate.weight" in p.stderr and "corrupt" in p.stderr, (weights, p.stderr)
    # Truncated file.
    (tmp_path / "trunc.gguf").write_bytes(bytes(data[: len(data) // 2]))
    p = run("logits", "-m", str(tmp_path / "trunc.gguf"), "--tokens", "1,2", "--weights", "int4")
    assert p.returncode == 1 and "error" in p.stderr and "internal" not in p.stderr


def test_head_weights_int8_changes_the_head_and_reports_memory():
    """--head-weights int8 changes the logits (the head really is int8) and the load still prints
    its memory line. The tiny model's head rounds to 0 MiB either way, so the byte counts are
    asserted in QuantGguf.HeadWeightsInt8 (weight_memory.embeddings), not here.
    int4 layers default to an int8 head (as llama.cpp's Q4_0 files get a Q6_K one); every other
    --weights keeps the head at --dtype, and --head-weights bf16 restores that for int4."""
    def head_mib(weights, *args):
        p = run("logits", "-m", str(TINY), "--tokens", TOKENS, "--top", "5", "--weights", weights, *args)
        assert p.returncode == 0, p.stderr
        m = re.search(r"embeddings/head (\d+) MiB", p.stderr)
        assert m, p.stderr
        return p.stdout, int(m.group(1))
    out_default, _ = head_mib("int4")
    out_q8, _ = head_mib("int4", "--head-weights", "int8")
    out_bf16, _ = head_mib("int4", "--head-weights", "bf16")
    assert out_q8 != out_bf16  # the head (and embeddings) really are int8 now
    assert out_default == out_q8  # ... and that is int4's default
    assert head_mib("int4-g32-asym")[0] == head_mib("int4-g32-asym", "--head-weights", "int8")[0]
    # Not for int8 layers: their head stays at --dtype unless asked.
    assert head_mib("int8")[0] == head_mib("int8", "--head-weights", "bf16")[0]
    assert head_mib("int8")[0] != head_mib("int8", "--head-weights", "int8")[0]


@pytest.mark.parametrize("fmt,gtype,native", [("int4", "Q4_0", "int4-g32"), ("int4-asym", "Q4_1", "int4-g32-asym"),
                                               ("int8", "Q8_0", "int8"), ("int8-g32", "Q8_0", "int8-g32")])
def test_without_weights_a_quantized_gguf_runs_in_its_own_format(tmp_path: Path, fmt: str, gtype: str, native: str):
    """No --weights (or --weights auto): a file whose layer matrices are all Q4_0 / Q4_1 / per-channel
    Q8_0 / per-block Q8_0 runs as int4-g32 / int4-g32-asym / int8 / int8-g32 -- the same logits, bit for bit, as naming that
    format -- and says so on load; --weights bf16 still dequantizes; a float file is unchanged;
    --quantize-embeddings, which needs the layers' format by name, asks for --weights."""
    out = tmp_path / f"q-{fmt}.gguf"
    assert run("quantize", "-m", str(TINY), "-o", str(out), "--weights", fmt).returncode == 0
    p = run("logits", "-m", str(out), "--tokens", TOKENS, "--top", "5")
    assert p.returncode == 0, p.stderr
    assert f"weights {native} (auto: layer matrices {gtype} written as {native}, imported without loss" in p.stderr, \
        p.stderr
    assert p.stdout == logits(out, "--weights", native)
    assert p.stdout == logits(out, "--weights", "auto")
    assert p.stdout != logits(out, "--weights", "bf16")
    info = run("info", "-m", str(out))
    assert info.returncode == 0 and f"weights:        {native} (auto:" in info.stdout, info.stdout
    # The float source: nothing to keep, loads at --dtype with no report line.
    src = run("logits", "-m", str(TINY), "--tokens", TOKENS, "--top", "5")
    assert src.returncode == 0 and "auto" not in src.stderr, src.stderr
    assert src.stdout == logits(TINY, "--weights", "bf16")
    bad = run("logits", "-m", str(out), "--tokens", TOKENS, "--quantize-embeddings")
    assert bad.returncode == 1 and "--quantize-embeddings needs --weights" in bad.stderr, bad.stderr


@pytest.mark.parametrize("minus128", [False, True])
def test_llama_cpp_q8_0_runs_as_int8_g32_without_loss(tmp_path: Path, minus128: bool):
    """A Q8_0 file as llama.cpp quantizes it (a scale per 32 weights; here gguf-py's port of
    llama.cpp's quantize_row_q8_0, an implementation independent of warden's) loads with no flags as
    int8-g32, every block imported as it is: the same logits as naming int8-g32, and close to the
    exact dequantized weights (`--weights f32`: the only difference left is W8A8's int8 activations).
    Before int8-g32 such a file had no lossless format and loaded at bf16. minus128: every -127
    code is made -128, which llama.cpp's quantizer never writes but the format allows (another
    tool's file); it imports as it is too, and the kernels compute it exactly."""
    gguf = pytest.importorskip("gguf")
    # Layout and metadata from warden's own int8-g32 file; then every Q8_0 tensor's blocks are
    # replaced by gguf-py's quantization of the f32 source, and warden's format declaration is
    # renamed (same length) so the file is anonymous, as another tool would write it.
    base = tmp_path / "warden-g32.gguf"
    assert run("quantize", "-m", str(TINY), "-o", str(base), "--weights", "int8-g32").returncode == 0
    src = {t.name: t for t in gguf.GGUFReader(str(TINY)).tensors}
    data = bytearray(base.read_bytes())
    n = 0
    for t in gguf.GGUFReader(str(base)).tensors:
        if t.tensor_type != gguf.GGMLQuantizationType.Q8_0:
            continue
        f32 = gguf.quants.dequantize(src[t.name].data, src[t.name].tensor_type).astype(np.float32)
        blocks = gguf.quants.quantize(f32, gguf.GGMLQuantizationType.Q8_0).tobytes()
        assert len(blocks) == int(t.n_bytes), t.name
        if minus128:
            arr = np.frombuffer(blocks, dtype=np.uint8).reshape(-1, 34).copy()
            codes = arr[:, 2:]
            assert (codes == 0x81).any(), t.name
            codes[codes == 0x81] = 0x80
            blocks = arr.tobytes()
        data[int(t.data_offset):int(t.data_offset) + len(blocks)] = blocks
        n += 1
    assert n == 21
    key = b"warden.quantize.weights"
    assert data.count(key) == 1
    data = data.replace(key, b"xxxxxx.quantize.weights")
    q8 = tmp_path / "llama-q8_0.gguf"
    q8.write_bytes(bytes(data))

    p = run("logits", "-m", str(q8), "--tokens", TOKENS, "--top", "5")
    assert p.returncode == 0, p.stderr
    assert "weights int8-g32 (auto: layer matrices Q8_0, imported without loss" in p.stderr, p.stderr
    assert "did not import" not in p.stderr, p.stderr
    assert p.stdout == logits(q8, "--weights", "int8-g32")
    # Start-up reads the blocks in place and builds the panels in the background; the panels
    # built while loading (--no-mmap) give the same logits, bit for bit.
    assert "of it then in panels, built in the background" in p.stderr, p.stderr
    nommap = run("logits", "-m", str(q8), "--tokens", TOKENS, "--top", "5", "--no-mmap")
    assert nommap.returncode == 0 and "built in the background" not in nommap.stderr, nommap.stderr
    assert nommap.stdout == p.stdout
    assert p.stdout != logits(base, "--weights", "int8-g32")  # gguf-py's codes, not warden's
    # The layers read in place as stored (q8_0): the same logits, bit for bit (int8-g32's
    # arithmetic on the file's own blocks), with no layer bytes copied.
    inplace = run("logits", "-m", str(q8), "--tokens", TOKENS, "--top", "5", "--weights", "q8_0")
    assert inplace.returncode == 0, inplace.stderr
    assert "read in place from the file" in inplace.stderr, inplace.stderr
    assert inplace.stdout == p.stdout
    # Per-channel int8 cannot hold these blocks: naming it requantizes them, so the logits move.
    assert logits(q8, "--weights", "int8") != p.stdout

    ids = [int(i) for i in TOKENS.split(",")]
    native = run_logits(q8, ids, dtype="bf16", top=1000000, weights="auto")
    exact = run_logits(q8, ids, dtype="f32", top=1000000, weights="f32")
    worst = 0.0
    for pos in range(len(ids)):
        a, b = native.as_dict(pos), exact.as_dict(pos)
        assert a.keys() == b.keys()
        assert max(a, key=a.get) == max(b, key=b.get)  # same top-1 at every position
        spread = max(b.values()) - min(b.values())
        worst = max(worst, max(abs(a[i] - b[i]) for i in b) / spread)
    assert worst <= 0.05, worst


@pytest.mark.parametrize("gtype,native,inplace_fmt", [("Q4_0", "int4-g32", "q4_0"), ("Q4_1", "int4-g32-asym", "q4_1")])
def test_llama_cpp_q4_blocks_start_in_place_with_the_panels_logits(tmp_path: Path, gtype: str, native: str,
                                                                   inplace_fmt: str):
    """A Q4_0 / Q4_1 file as llama.cpp quantizes it (gguf-py's port of quantize_row_q4_0 / q4_1, independent of
    warden) starts by reading its blocks in place and builds its int4-g32(-asym) panels in the background: the
    logits equal, bit for bit, those of the panels built while loading (--no-mmap), of naming the panel format and
    of the blocks read in place for good (--weights q4_0 / q4_1), and stay close to the exact dequantized weights."""
    gguf = pytest.importorskip("gguf")
    qtype = getattr(gguf.GGMLQuantizationType, gtype)
    base = tmp_path / "warden-q4.gguf"
    fmt = "int4" if gtype == "Q4_0" else "int4-asym"
    assert run("quantize", "-m", str(TINY), "-o", str(base), "--weights", fmt).returncode == 0
    src = {t.name: t for t in gguf.GGUFReader(str(TINY)).tensors}
    data = bytearray(base.read_bytes())
    n = 0
    for t in gguf.GGUFReader(str(base)).tensors:
        if t.tensor_type != qtype:
            continue
        f32 = gguf.quants.dequantize(src[t.name].data, src[t.name].tensor_type).astype(np.float32)
        blocks = gguf.quants.quantize(f32, qtype).tobytes()
        assert len(blocks) == int(t.n_bytes), t.name
        data[int(t.data_offset):int(t.data_offset) + len(blocks)] = blocks
        n += 1
    assert n >= 14
    key = b"warden.quantize.weights"
    assert data.count(key) == 1
    q4 = tmp_path / f"llama-{gtype}.gguf"
    q4.write_bytes(bytes(data.replace(key, b"xxxxxx.quantize.weights")))

    p = run("logits", "-m", str(q4), "--tokens", TOKENS, "--top", "5")
    assert p.returncode == 0, p.stderr
    assert f"weights {native} (auto: layer matrices {gtype}, imported without loss" in p.stderr, p.stderr
    assert "of it then in panels, built in the background" in p.stderr, p.stderr
    nommap = run("logits", "-m", str(q4), "--tokens", TOKENS, "--top", "5", "--no-mmap")
    assert nommap.returncode == 0 and "built in the background" not in nommap.stderr, nommap.stderr
    assert nommap.stdout == p.stdout
    assert logits(q4, "--weights", native) == p.stdout
    inplace = run("logits", "-m", str(q4), "--tokens", TOKENS, "--top", "5", "--weights", inplace_fmt)
    assert inplace.returncode == 0 and "read in place from the file" in inplace.stderr, inplace.stderr
    assert "built in the background" not in inplace.stderr, inplace.stderr
    assert inplace.stdout == p.stdout
    assert p.stdout != logits(base, "--weights", native)  # gguf-py's codes, not warden's
    ids = [int(i) for i in TOKENS.split(",")]
    got = run_logits(q4, ids, dtype="bf16", top=1000000, weights="auto")
    exact = run_logits(q4, ids, dtype="f32", top=1000000, weights="f32")
    for pos in range(len(ids)):
        a, b = got.as_dict(pos), exact.as_dict(pos)
        assert max(a, key=a.get) == max(b, key=b.get)  # same top-1 at every position


def test_prefill_weights_and_memory_report():
    p = run("logits", "-m", str(TINY), "--tokens", TOKENS, "--top", "5", "--weights", "int4", "--prefill-weights", "bf16",
            "--head-weights", "bf16")
    assert p.returncode == 0, p.stderr
    assert "weights int4-g32" in p.stderr and "prefill copy" in p.stderr
    # A named float format reports its memory too (bench/weights_speed.sh reads bf16's from it).
    named = run("logits", "-m", str(TINY), "--tokens", TOKENS, "--top", "5", "--weights", "bf16")
    assert named.returncode == 0 and "warden: weights bf16: layers " in named.stderr, named.stderr
    # Prefill rows use the bf16 copy: the logits equal a pure bf16 run on the prefill positions
    # (the head, which has no prefill copy, at bf16 too: int4's default head is int8).
    assert p.stdout == logits(TINY, "--weights", "bf16")
    assert p.stdout != logits(TINY, "--weights", "int4")


def _imatrix_dat(entries: list[tuple[str, int, list[float]]], chunks: int = 4, dataset: str = "calib.txt") -> bytes:
    """llama.cpp's legacy imatrix.dat, as its save_imatrix writes it (examples/imatrix/imatrix.cpp):
    int32 n; per entry int32 len, name, int32 ncall, int32 nval, f32 values (sums over ncall);
    then int32 chunks, int32 len, dataset name."""
    import struct

    b = struct.pack("<i", len(entries))
    for name, ncall, vals in entries:
        b += struct.pack("<i", len(name)) + name.encode() + struct.pack("<ii", ncall, len(vals))
        b += struct.pack(f"<{len(vals)}f", *vals)
    return b + struct.pack("<ii", chunks, len(dataset)) + dataset.encode()


def test_quantize_with_imatrix(tmp_path: Path):
    """--imatrix FILE (llama-imatrix's format): every layer matrix named in it is quantized with
    its columns weighted, the summary says how many, and the file still loads; a corrupt or
    foreign file is a clear error with nothing written."""
    gguf = pytest.importorskip("gguf")
    linear = [(t.name, int(t.shape[0])) for t in gguf.GGUFReader(str(TINY)).tensors
              if t.name.startswith("blk.") and len(t.shape) == 2]
    assert len(linear) == 21
    skew = tmp_path / "skew.dat"
    skew.write_bytes(_imatrix_dat([(n, 2, [200.0 if c % 8 == 3 else 2.0 for c in range(cols)]) for n, cols in linear]))
    plain, weighted = tmp_path / "plain.gguf", tmp_path / "weighted.gguf"
    assert run("quantize", "-m", str(TINY), "-o", str(plain), "--weights", "int4").returncode == 0
    p = run("quantize", "-m", str(TINY), "-o", str(weighted), "--weights", "int4", "--imatrix", str(skew))
    assert p.returncode == 0, p.stderr
    assert f"imatrix {skew}: 21 of 23 quantized tensors weighted by it (21 entries, 4 chunks of calib.txt)" \
        in p.stdout, p.stdout
    assert plain.read_bytes() != weighted.read_bytes()
    # Lower error where the imatrix points (columns 3, 11, ...), on gguf-py's dequantization.
    src = {t.name: t for t in gguf.GGUFReader(str(TINY)).tensors}
    errs = {}
    for f in (plain, weighted):
        e = 0.0
        for t in gguf.GGUFReader(str(f)).tensors:
            if t.name in dict(linear):
                deq = gguf.quants.dequantize(t.data, t.tensor_type)
                ref = gguf.quants.dequantize(src[t.name].data, src[t.name].tensor_type)
                e += float(((deq - ref)[:, 3::8] ** 2).sum())
        errs[f.name] = e
    assert errs["weighted.gguf"] < 0.8 * errs["plain.gguf"], errs
    assert logits(weighted, "--weights", "int4") != logits(plain, "--weights", "int4")
    # Bad inputs: one line, exit 1, no output file.
    bad = tmp_path / "bad.dat"
    for data, needle in ((_imatrix_dat([(linear[0][0], 1, [1.0] * 5)]), "has 5 values, the tensor has 64 columns"),
                         (_imatrix_dat([(linear[0][0], 1, [float("nan")] * 64)]), "must be finite"),
                         (_imatrix_dat([])[:4] + b"\x00" * 3, "no entries"),
                         (b"GGUF\x03\x00\x00\x00", "not a readable GGUF"),
                         (TINY.read_bytes(), "not an importance matrix")):
        bad.write_bytes(data)
        out = tmp_path / "bad.gguf"
        p = run("quantize", "-m", str(TINY), "-o", str(out), "--weights", "int4", "--imatrix", str(bad))
        assert p.returncode == 1 and needle in p.stderr, (needle, p.stderr)
        assert not out.exists() and not Path(str(out) + ".tmp").exists()
    # The GGUF imatrix of later llama.cpp versions, written here by gguf-py (an independent writer) as
    # llama-imatrix writes it: per matrix NAME.in_sum2 [n_mat, cols] (numpy order) of squared-input
    # sums and NAME.counts [n_mat, 1] of tokens; importance = sums / count. The same importances as
    # skew.dat give the same file, byte for byte.
    import numpy as np

    skew_gguf = tmp_path / "skew.gguf"
    w = gguf.GGUFWriter(str(skew_gguf), "llama")
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["calib.txt"])
    w.add_uint32("imatrix.chunk_count", 4)
    w.add_uint32("imatrix.chunk_size", 512)
    for n, cols in linear:
        w.add_tensor(n + ".in_sum2", np.array([[400.0 if c % 8 == 3 else 4.0 for c in range(cols)]], dtype=np.float32))
        w.add_tensor(n + ".counts", np.array([[4.0]], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    from_gguf = tmp_path / "from_gguf.gguf"
    p = run("quantize", "-m", str(TINY), "-o", str(from_gguf), "--weights", "int4", "--imatrix", str(skew_gguf))
    assert p.returncode == 0, p.stderr
    assert f"imatrix {skew_gguf}: 21 of 23 quantized tensors weighted by it (21 entries, 4 chunks of calib.txt)" \
        in p.stdout, p.stdout
    assert from_gguf.read_bytes() == weighted.read_bytes()
    # A Hugging Face source (compressed-tensors output) finds the same entries by its tensors' GGUF names.
    p = run("quantize", "-m", str(GOLDEN / "tiny-llama"), "-o", str(tmp_path / "ct"), "--weights", "int4",
            "--imatrix", str(skew))
    assert p.returncode == 0, p.stderr
    assert f"imatrix {skew}: 21 of 21 quantized tensors weighted" in p.stdout, p.stdout


def test_imatrix_command(tmp_path: Path):
    """`warden imatrix` writes llama.cpp's GGUF imatrix: gguf-py (independent of warden) reads the
    keys and tensors llama-imatrix writes (imatrix.datasets / chunk_count / chunk_size; per layer
    matrix NAME.in_sum2 [cols] x 1 and NAME.counts of the tokens seen), `warden quantize --imatrix`
    weights every layer matrix with it, and bad arguments fail with one line and nothing written."""
    from conftest import SMOLLM2_GGUF

    gguf = pytest.importorskip("gguf")
    if not SMOLLM2_GGUF.is_file():
        pytest.skip(f"{SMOLLM2_GGUF} missing (scripts/fetch_model.sh)")
    text = ROOT / "data" / "eval" / "text.txt"
    out = tmp_path / "smol.imatrix.gguf"
    p = run("imatrix", "-m", str(SMOLLM2_GGUF), "-f", str(text), "-o", str(out), "--chunk-size", "64", "--chunks", "3",
            "-t", "2")
    assert p.returncode == 0, p.stderr
    assert f"wrote {out}: 210 entries from 3 chunks of 64 tokens" in p.stdout, p.stdout
    r = gguf.GGUFReader(str(out))
    kv = {f.name: f for f in r.fields.values()}
    assert kv["imatrix.chunk_count"].parts[-1][0] == 3 and kv["imatrix.chunk_size"].parts[-1][0] == 64
    assert bytes(kv["imatrix.datasets"].parts[-1]).decode() == str(text)
    t = {x.name: x for x in r.tensors}
    assert len(t) == 2 * 210
    q, c = t["blk.0.attn_q.weight.in_sum2"], t["blk.0.attn_q.weight.counts"]
    assert list(q.shape) == [576, 1] and list(c.shape) == [1, 1]  # ggml order: [cols, n_mat]
    assert float(c.data.reshape(-1)[0]) == 3 * 64
    down = t["blk.29.ffn_down.weight.in_sum2"]
    assert list(down.shape) == [1536, 1] and np.all(np.asarray(down.data) > 0)
    assert np.array_equal(np.asarray(q.data), np.asarray(t["blk.0.attn_k.weight.in_sum2"].data))  # same input
    # quantize with it: all 210 layer matrices weighted (the tied Q8_0 embeddings are copied as they are).
    q4 = tmp_path / "smol-int4.gguf"
    p = run("quantize", "-m", str(SMOLLM2_GGUF), "-o", str(q4), "--weights", "int4", "--imatrix", str(out), "-t", "2")
    assert p.returncode == 0, p.stderr
    assert f"imatrix {out}: 210 of 210 quantized tensors weighted by it (210 entries, 3 chunks of {text})" in p.stdout, p.stdout
    # --process-output: SmolLM2's head is tied to its embeddings, so nothing more is collected, and
    # it says so (ImatrixCollector.ProcessOutputSumsTheHeadsInput covers a head of its own).
    p = run("imatrix", "-m", str(SMOLLM2_GGUF), "-f", str(text), "-o", str(out), "--chunk-size", "64", "--chunks", "1",
            "-t", "2", "--process-output")
    assert p.returncode == 0 and "210 entries" in p.stdout and "tied to the embeddings" in p.stderr, p.stderr
    # Bad arguments: one error line, exit 1, no output.
    short = tmp_path / "short.txt"
    short.write_text("Hello there.")
    for args, needle in (((str(text), str(tmp_path / "x.dat")), "must end in .gguf"),
                         ((str(short), str(tmp_path / "x.gguf")), "fewer than one chunk of 512"),
                         ((str(tmp_path / "missing.txt"), str(tmp_path / "x.gguf")), "cannot open"),
                         ((str(text), str(tmp_path / "x.gguf"), "--chunk-size", "100000"), "exceeds the model's context"),
                         ((str(text), str(tmp_path / "x.gguf"), "--chunks", "0"), "--chunks must be positive")):
        p = run("imatrix", "-m", str(SMOLLM2_GGUF), "-f", args[0], "-o", args[1], *args[2:])
        assert p.returncode == 1 and needle in p.stderr, (needle, p.stderr)
        errors = [ln for ln in p.stderr.splitlines() if "error" in ln]
        assert len(errors) == 1 and needle in errors[0], p.stderr
        assert not Path(args[1]).exists()
