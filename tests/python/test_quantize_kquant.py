"""`warden quantize --weights q4_k_m` (and Q5_K_M, Q6_K): llama.cpp's K-quant file types written
by warden's own block search (quant/ggml_block_quantizer.h, convert/gguf_type_mix.h).

Independent references:
  * gguf-py reads the file and dequantizes every block (its numpy code, not warden's): each
    tensor has the block type llama-quantize's rules give it (re-derived here from llama.cpp's
    llama_tensor_get_type), and its values are the source's within each type's error;
  * warden's logits of the file run natively (each matrix in its block type) match those of the
    file's exact f32 dequantization, and stay close to the f32 source's;
  * an importance matrix (llama.cpp's legacy .dat format, written here) lowers the error of the
    columns it marks important;
  * where llama.cpp's tools are present (not in CI): llama-quantize of the same source gives every
    tensor the same block type, with no less error per type than warden's; llama-cli loads and
    runs warden's Q4_K_M of the default model.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest

from conftest import ROOT, TIMEOUT_S, WARDEN_BIN, require_warden
from gguf_convert import write_tiny_llama

Q = gguf.GGMLQuantizationType
# FF = 320 is 32-divisible but not 256-divisible: ffn_down falls back (Q4_K -> Q5_0, Q5_K -> Q5_1,
# Q6_K -> Q8_0), as llama-quantize does.
D, FF, LAYERS, HEADS, KV_HEADS, VOCAB = 256, 320, 8, 4, 2, 320
KV = KV_HEADS * D // HEADS


def _source_tensors(rng: np.random.Generator) -> dict[str, tuple[object, np.ndarray]]:
    """f32 weights of ~0.05 with a spread of per-column scales (so an importance matrix matters)."""
    col = np.exp(0.5 * rng.standard_normal(D)).astype(np.float32)
    col_ff = np.exp(0.5 * rng.standard_normal(FF)).astype(np.float32)

    def mat(rows: int, cols: int) -> np.ndarray:
        c = col if cols == D else col_ff
        return (0.05 * rng.standard_normal((rows, cols)) * c).astype(np.float32)

    t: dict[str, tuple[object, np.ndarray]] = {"token_embd.weight": (None, mat(VOCAB, D))}
    for i in range(LAYERS):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = (None, (1 + 0.1 * rng.standard_normal(D)).astype(np.float32))
        t[p + "attn_q.weight"] = (None, mat(D, D))
        t[p + "attn_k.weight"] = (None, mat(KV, D))
        t[p + "attn_v.weight"] = (None, mat(KV, D))
        t[p + "attn_output.weight"] = (None, mat(D, D))
        t[p + "ffn_norm.weight"] = (None, (1 + 0.1 * rng.standard_normal(D)).astype(np.float32))
        t[p + "ffn_gate.weight"] = (None, mat(FF, D))
        t[p + "ffn_up.weight"] = (None, mat(FF, D))
        t[p + "ffn_down.weight"] = (None, mat(D, FF))
    t["output_norm.weight"] = (None, np.ones(D, np.float32))
    t["output.weight"] = (None, mat(VOCAB, D))
    return t


def _write_model(path: Path, tensors) -> None:
    write_tiny_llama(path, tensors, name="tiny-kquant-source", layers=LAYERS, d=D, ff=FF, heads=HEADS,
                     kv_heads=KV_HEADS, vocab=VOCAB)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("kquant_src") / "src-f32.gguf"
    _write_model(path, _source_tensors(np.random.default_rng(7)))
    return path


def _more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def expected_type(mix: str, name: str, cols: int) -> Q:
    """llama.cpp's llama_tensor_get_type for a dense llama, restated for these file types."""
    if name == "output.weight":
        return Q.Q6_K if cols % 256 == 0 else Q.Q8_0
    base = {"Q4_K_M": Q.Q4_K, "Q5_K_M": Q.Q5_K, "Q6_K": Q.Q6_K}[mix]
    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    t = base
    if (name.endswith("attn_v.weight") or name.endswith("ffn_down.weight")) and mix != "Q6_K" \
            and _more_bits(layer, LAYERS):
        t = Q.Q6_K
    if cols % 256:
        t = {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0}[t]
    return t


# Largest relative RMS error (of the tensor's RMS) per block type on these weights: ~15% above what
# the search gets (Q4_K 0.083, Q5_0 0.053, Q5_K 0.041, Q5_1 0.040, Q6_K 0.021, Q8_0 0.0069; a
# swapped nibble or a wrong scale packing is far above it).
REL_RMS = {Q.Q4_K: 0.095, Q.Q5_0: 0.061, Q.Q5_K: 0.047, Q.Q5_1: 0.046, Q.Q6_K: 0.024, Q.Q8_0: 0.008}


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(require_warden()), *args], capture_output=True, text=True, timeout=TIMEOUT_S,
                          cwd=ROOT)


def _quantize(source: Path, out: Path, mix: str, *extra: str) -> subprocess.CompletedProcess:
    p = run("quantize", "-m", str(source), "-o", str(out), "--weights", mix.lower(), *extra)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.mark.parametrize("weights", ["q4_k_m", "q5_k_m", "q6_k", "int4", "int4-asym"])
def test_same_bytes_for_any_thread_count_and_instruction_set(source: Path, tmp_path: Path, weights: str):
    """Rows are quantized in parallel over --threads and the searches run on SIMD lanes: the file
    must not depend on how the rows are split nor on the instruction set (WARDEN_ISA=scalar runs
    the portable loops)."""
    files = []
    for threads, isa in [("1", None), ("2", None), ("2", "scalar")]:
        out = tmp_path / f"{weights}-t{threads}-{isa or 'native'}.gguf"
        env = dict(os.environ)
        env.pop("WARDEN_ISA", None)
        if isa:
            env["WARDEN_ISA"] = isa
        p = subprocess.run([str(require_warden()), "quantize", "-m", str(source), "-o", str(out), "--weights",
                            weights, "--threads", threads], capture_output=True, text=True, timeout=TIMEOUT_S,
                           cwd=ROOT, env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        files.append(out.read_bytes())
    assert files[0] == files[1], "1 and 2 threads wrote different files"
    assert files[0] == files[2], "the portable loops wrote a different file from the SIMD ones"


@pytest.mark.parametrize("mix", ["Q4_K_M", "Q5_K_M", "Q6_K"])
def test_kquant_mix_types_and_values(source: Path, tmp_path: Path, mix: str):
    out = tmp_path / f"{mix}.gguf"
    p = _quantize(source, out, mix)
    assert f"as {mix}" in p.stdout, p.stdout
    src = {t.name: t for t in gguf.GGUFReader(str(source)).tensors}
    r = gguf.GGUFReader(str(out))
    ftype = r.fields["general.file_type"]
    assert int(ftype.parts[ftype.data[0]][0]) == {"Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18}[mix]
    seen: set[Q] = set()
    for t in r.tensors:
        ref = np.asarray(src[t.name].data, dtype=np.float32)
        if t.name.endswith("norm.weight"):
            assert t.tensor_type == Q.F32 and np.array_equal(np.asarray(t.data), ref), t.name
            continue
        cols = int(t.shape[0])
        want = expected_type(mix, t.name, cols)
        assert t.tensor_type == want, (t.name, t.tensor_type.name, want.name)
        seen.add(want)
        deq = gguf.quants.dequantize(t.data, t.tensor_type)
        assert deq.shape == ref.shape, t.name
        rel = float(np.sqrt(np.mean((deq - ref) ** 2)) / np.sqrt(np.mean(ref ** 2)))
        assert 0 < rel < REL_RMS[want], (t.name, want.name, rel)
    if mix == "Q4_K_M":
        assert seen == {Q.Q4_K, Q.Q5_0, Q.Q6_K, Q.Q8_0}
    elif mix == "Q5_K_M":
        assert seen == {Q.Q5_K, Q.Q5_1, Q.Q6_K, Q.Q8_0}

    # Native execution of every block type against the file's exact f32 dequantization, and the
    # file against its f32 source.
    native = _logits(out)
    assert "auto: layer matrices" in native.stderr, native.stderr[-2000:]
    exact = _logits(out, "--weights", "f32")
    orig = _logits(source, "--weights", "f32")
    spread = max(max(e.values()) - min(e.values()) for e in exact)
    # Near-ties on a random model can swap the top two: the native top-1 must be the reference's
    # up to the allowed error.
    native_err = max(max(abs(g[i] - e[i]) for i in e) for g, e in zip(native, exact))
    assert native_err < 0.02 * spread, (native_err, spread)
    for g, e in zip(native, exact):
        assert e[max(g, key=g.get)] >= max(e.values()) - 2 * native_err
    # The file against its source: the logit error grows with fewer bits (8 random layers amplify
    # it; 1.5-2x what these files give).
    src_err = np.mean([max(abs(e[i] - o[i]) for i in o) for e, o in zip(exact, orig)]) / spread
    assert src_err < {"Q4_K_M": 0.2, "Q5_K_M": 0.1, "Q6_K": 0.05}[mix], src_err


IDS = [5, 17, 99, 3, 250, 41, 8, 300, 77, 12]


def _logits(path: Path, *extra: str) -> list[dict[int, float]]:
    p = subprocess.run([str(require_warden()), "logits", "-m", str(path), "--tokens", ",".join(map(str, IDS)),
                        "--top", str(VOCAB), "--dtype", "f32", *extra], capture_output=True, text=True,
                       timeout=TIMEOUT_S, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = []
    for line in p.stdout.splitlines():
        if line.strip().startswith("{"):
            obj = json.loads(line)
            if "pos" in obj:
                rows.append({int(i): float(v) for i, v in obj["top"]})
    assert len(rows) == len(IDS)
    return _Rows(rows, p.stderr)


class _Rows(list):
    def __init__(self, rows, stderr: str):
        super().__init__(rows)
        self.stderr = stderr


def _write_legacy_imatrix(path: Path, entries: dict[str, np.ndarray]) -> None:
    """llama.cpp's legacy imatrix.dat: per entry its name, ncall and the sums over ncall chunks."""
    with open(path, "wb") as f:
        f.write(struct.pack("<i", len(entries)))
        for name, v in entries.items():
            b = name.encode()
            f.write(struct.pack("<i", len(b)) + b + struct.pack("<ii", 1, v.size))
            f.write(v.astype("<f4").tobytes())
        f.write(struct.pack("<i", 1))


def test_imatrix_weights_the_block_search(source: Path, tmp_path: Path):
    """Columns an importance matrix marks 100x more important come out closer to the source
    (weighted by that importance, the error drops), other columns pay for it."""
    rng = np.random.default_rng(3)
    imp_d = np.where(rng.random(D) < 0.25, 100.0, 1.0).astype(np.float32)
    imp_ff = np.where(rng.random(FF) < 0.25, 100.0, 1.0).astype(np.float32)
    entries = {}
    for i in range(LAYERS):
        for m in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"):
            entries[f"blk.{i}.{m}.weight"] = imp_d
        entries[f"blk.{i}.ffn_down.weight"] = imp_ff
    imat = tmp_path / "imatrix.dat"
    _write_legacy_imatrix(imat, entries)
    plain, weighted = tmp_path / "plain.gguf", tmp_path / "weighted.gguf"
    _quantize(source, plain, "Q4_K_M")
    p = _quantize(source, weighted, "Q4_K_M", "--imatrix", str(imat))
    assert f"{len(entries)} of" in p.stdout, p.stdout
    src = {t.name: np.asarray(t.data, dtype=np.float32) for t in gguf.GGUFReader(str(source)).tensors}
    a = {t.name: t for t in gguf.GGUFReader(str(plain)).tensors}
    b = {t.name: t for t in gguf.GGUFReader(str(weighted)).tensors}
    better = 0
    for name, imp in entries.items():
        ref = src[name]
        ea = (gguf.quants.dequantize(a[name].data, a[name].tensor_type) - ref) ** 2
        eb = (gguf.quants.dequantize(b[name].data, b[name].tensor_type) - ref) ** 2
        wa, wb = float((ea * imp).sum()), float((eb * imp).sum())
        # The importance-weighted error drops for every type (Q4_K, Q6_K, Q5_0, Q8_0 excepted:
        # Q8_0 has no search).
        if b[name].tensor_type != Q.Q8_0:
            assert wb < wa, (name, b[name].tensor_type.name, wa, wb)
            better += 1
    assert better >= 3 * LAYERS
    # Without any entry for a tensor (output), the search is the same with or without the file.
    assert np.array_equal(np.asarray(a["output.weight"].data), np.asarray(b["output.weight"].data))


def test_kquant_bad_input(source: Path, tmp_path: Path):
    out = tmp_path / "x.gguf"
    p = run("quantize", "-m", str(source), "-o", str(tmp_path / "x.safetensors"), "--weights", "q4_k_m")
    assert p.returncode != 0 and "needs a .gguf input and output" in p.stderr, p.stderr
    p = run("quantize", "-m", str(source), "-o", str(out), "--weights", "q4_k_m", "--head-weights", "int8")
    assert p.returncode != 0 and "head's block type" in p.stderr, p.stderr
    bad = tmp_path / "bad.dat"
    _write_legacy_imatrix(bad, {"blk.0.attn_q.weight": np.ones(D + 1, np.float32)})
    p = run("quantize", "-m", str(source), "-o", str(out), "--weights", "q4_k_m", "--imatrix", str(bad))
    assert p.returncode != 0 and "blk.0.attn_q.weight" in p.stderr, p.stderr
    assert not out.exists() and not Path(str(out) + ".tmp").exists()


# llama.cpp's build/bin, named by LLAMA_CPP_BIN (these comparisons run only where it is built).
LLAMA_BIN = Path(os.environ["LLAMA_CPP_BIN"]) if os.environ.get("LLAMA_CPP_BIN") else None
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
needs_llama = pytest.mark.skipif(LLAMA_BIN is None or not (LLAMA_BIN / "llama-quantize").exists()
                                 or not (LLAMA_BIN / "llama-cli").exists(),
                                 reason="llama.cpp's tools absent (LLAMA_CPP_BIN)")


def _rel_rms_by_type(source: Path, out: Path) -> dict[str, tuple[Q, float]]:
    src = {t.name: np.asarray(t.data, dtype=np.float32) for t in gguf.GGUFReader(str(source)).tensors}
    res = {}
    for t in gguf.GGUFReader(str(out)).tensors:
        if not t.name.endswith("norm.weight"):
            ref = src[t.name]
            deq = gguf.quants.dequantize(t.data, t.tensor_type)
            res[t.name] = (t.tensor_type, float(np.sqrt(np.mean((deq - ref) ** 2)) / np.sqrt(np.mean(ref ** 2))))
    return res


@needs_llama
@pytest.mark.parametrize("mix", ["Q4_K_M", "Q5_K_M"])
def test_same_types_as_llama_quantize_and_no_larger_error(source: Path, tmp_path: Path, mix: str):
    """Every tensor gets llama-quantize's block type, and warden's search leaves no more error per
    block type (mean over the tensors of that type) than llama.cpp's own quantizer."""
    ours, theirs = tmp_path / "warden.gguf", tmp_path / "llama.gguf"
    _quantize(source, ours, mix)
    subprocess.run([str(LLAMA_BIN / "llama-quantize"), str(source), str(theirs), mix, "1"], check=True,
                   capture_output=True, timeout=TIMEOUT_S)
    a, b = _rel_rms_by_type(source, ours), _rel_rms_by_type(source, theirs)
    assert {n: t for n, (t, _) in a.items()} == {n: t for n, (t, _) in b.items()}
    for qt in {t for t, _ in a.values()}:
        ea = np.mean([e for t, e in a.values() if t == qt])
        eb = np.mean([e for t, e in b.values() if t == qt])
        assert ea <= eb * 1.001, (qt.name, ea, eb)


@needs_llama
def test_llama_cpp_runs_warden_q4_k_m(tmp_path: Path):
    """llama.cpp loads warden's Q4_K_M of the default model and generates from it."""
    if not DEFAULT_MODEL.exists():
        pytest.skip("default model absent")
    ours = tmp_path / "warden.gguf"
    _quantize(DEFAULT_MODEL, ours, "Q4_K_M", "--threads", "2")
    p = subprocess.run([str(LLAMA_BIN / "llama-cli"), "-m", str(ours), "-p", "The capital of France is", "-n", "8",
                        "--temp", "0", "-no-cnv", "-t", "1"], capture_output=True, text=True, timeout=TIMEOUT_S,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Q4_K - Medium" in p.stderr, p.stderr[-3000:]
    assert len(p.stdout.strip()) > len("The capital of France is"), p.stdout
