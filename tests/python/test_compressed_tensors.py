"""compressed-tensors "pack-quantized" INT4 checkpoints: loading and `warden quantize` output.

The independent reference is the compressed-tensors package itself (0.20.0): the checkpoints
under tests/golden/models/*-ct-int4* were compressed by its PackedQuantizationCompressor and
their goldens are transformers (f32) on what its decompressor returns
(scripts/make_ct_golden.py). So this file needs only the warden binary and the committed goldens:

  (a) loading a package-compressed checkpoint: logits match the reference -- top-1 identical at
      every position and max |diff| <= REL x spread with --weights f32 (exact dequantization)
      and with the native bit-exact import run as W4A16; the default load (native int4, W4A8
      activations) agrees on top-1 at >= DEFAULT_TOP1_MIN of positions.
  (b) `warden quantize --weights int4-g32` output: decompressed by the package (live, when torch
      and compressed_tensors import, e.g. under .venv-ref; else through the committed golden made
      from the same deterministic output, whose sha256 is checked) gives the logits warden
      computes from its own file.
  (c) corrupt / unsupported checkpoints fail with one clear line naming the tensor or field.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import GOLDEN, ROOT, TIMEOUT_S, WARDEN_BIN, record, require_warden

REL = 1e-3            # f32 paths: max |warden - ref| <= REL x logit spread at every position
DEFAULT_TOP1_MIN = 0.9  # W4A8 default: fraction of positions whose top-1 matches
DEFAULT_REL = 0.1

# name -> (the native format the checkpoint loads as by default, whether that import is exact)
CHECKPOINTS = {
    "tiny-llama-ct-int4": ("int4-g32-bf16s", True),        # bf16 scales -> bf16-scale int4
    "tiny-llama-ct-int4-asym": ("int4-g32-asym", False),   # zero points: f16 offsets re-derived
    "tiny-qwen3-moe-ct-int4": ("int4-g32", True),          # f16 scales, MoE experts
}


def golden(name: str) -> dict:
    p = GOLDEN / f"{name}.golden.json"
    if not p.is_file():
        pytest.skip(f"golden {p} missing (scripts/make_ct_golden.py)")
    return json.loads(p.read_text())


def warden(*args, check=True) -> subprocess.CompletedProcess:
    require_warden()
    p = subprocess.run([str(WARDEN_BIN), *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT_S,
                       cwd=ROOT)
    if check and p.returncode != 0:
        pytest.fail(f"warden {' '.join(map(str, args))} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return p


def logits(model: Path, ids: list[int], vocab: int, weights: str | None,
           head: str | None = None) -> tuple[list[dict], str]:
    args = ["logits", "-m", model, "--tokens", ",".join(map(str, ids)), "--dtype", "f32", "--top", vocab]
    if weights:
        args += ["--weights", weights]
        if weights.startswith("int4") and head is None:  # int4 defaults to an int8 head; compare the layers
            head = "f32"
    if head:
        args += ["--head-weights", head]
    p = warden(*args)
    rows = {}
    for line in p.stdout.splitlines():
        if line.startswith("{") and '"pos"' in line:
            o = json.loads(line)
            rows[int(o["pos"])] = {int(i): float(v) for i, v in o["top"]}
    assert sorted(rows) == list(range(len(ids)))
    return [rows[i] for i in range(len(ids))], p.stderr


def compare(model: Path, g: dict, weights: str | None, head: str | None = None) -> tuple[float, float, str]:
    """(max |diff| / spread, top-1 agreement fraction, stderr of the last run)."""
    worst, agree, n, err = 0.0, 0, 0, ""
    for p in g["prompts"]:
        rows, err = logits(model, p["ids"], g["vocab_size"], weights, head)
        for ref, spread, got in zip(p["logits"], p["spread"], rows):
            assert len(got) == len(ref)
            worst = max(worst, max(abs(got[i] - v) for i, v in enumerate(ref)) / spread)
            ref_top = max(range(len(ref)), key=lambda i: ref[i])
            agree += int(max(got, key=lambda i: got[i]) == ref_top)
            n += 1
    return worst, agree / n, err


def bf16_lookup_table(model: Path) -> bool:
    """Whether the checkpoint's embedding table is bf16 and only looked up (a separate lm_head), read
    from its safetensors headers."""
    dtypes = {}
    for f in model.glob("*.safetensors"):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            dtypes.update({k: v["dtype"] for k, v in json.loads(fh.read(n)).items() if k != "__metadata__"})
    tied = json.loads((model / "config.json").read_text()).get("tie_word_embeddings", False)
    return dtypes.get("model.embed_tokens.weight") == "BF16" and "lm_head.weight" in dtypes and not tied


@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_load_package_compressed_checkpoint(name: str):
    g = golden(name)
    model = GOLDEN / name
    native, exact = CHECKPOINTS[name]
    # Exact dequantization through f32.
    rel, top1, _ = compare(model, g, "f32")
    record("compressed-tensors load", f"{name} --weights f32 max|diff|/spread", rel)
    assert top1 == 1.0 and rel <= REL, (name, rel, top1)
    # Native import run with f32 activations (W4A16: exactly the f32 matmul of its dequantized
    # weights) -- identical to the reference when the import is bit-exact.
    if exact:
        rel, top1, err = compare(model, g, native + "-a16")
        record("compressed-tensors load", f"{name} --weights {native}-a16 max|diff|/spread", rel)
        assert "requantized" not in err, err
        assert top1 == 1.0 and rel <= REL, (name, rel, top1)
    # Default layers: the checkpoint's own format (W4A8); the head pinned to f32 to measure them.
    rel, top1, err = compare(model, g, None, head="f32")
    assert f"weights {native} (auto: the compressed-tensors 4-bit checkpoint's own format; --weights" in err, err
    if not exact:
        assert "requantized through f32" in err, err
    record("compressed-tensors load", f"{name} default ({native}, W4A8) top-1", top1)
    record("compressed-tensors load", f"{name} default ({native}, W4A8) max|diff|/spread", rel)
    assert top1 >= DEFAULT_TOP1_MIN and rel <= DEFAULT_REL, (name, rel, top1)
    # No flags at all: int4 layers' default head, int8, as with GGUF and with --weights int4, and the
    # bf16 embedding table (untied: only looked up) as stored -- the same logits, bit for bit, as
    # naming the layers' format; naming int8 for the head quantizes the table too, which differs.
    ids, vocab = g["prompts"][0]["ids"], g["vocab_size"]
    rows, err = logits(model, ids, vocab, None)
    stays = bf16_lookup_table(model)
    heads = "embeddings bf16 as stored, head as int8" if stays else "embeddings/head as int8"
    assert f"weights {native} (auto: the compressed-tensors 4-bit checkpoint's own format; {heads}" in err, err
    assert rows == logits(model, ids, vocab, native, head="")[0]  # "": no --head-weights
    assert (rows == logits(model, ids, vocab, native, head="int8")[0]) == (not stays)
    assert rows != logits(model, ids, vocab, native, head="f32")[0]


@pytest.mark.parametrize("name", [n for n, (_, exact) in CHECKPOINTS.items() if exact])
def test_symmetric_checkpoint_starts_in_place_with_the_panels_logits(name: str):
    """A symmetric checkpoint whose scales are its layout's dtype starts by reading its packed codes and
    scales where the file maps them, while a background thread builds its int4 panels: the logits equal,
    bit for bit, those of the panels built while loading (--no-mmap), over every prompt of the golden and
    six greedy one-token steps after each."""
    g = golden(name)
    model = GOLDEN / name
    for prompt in g["prompts"]:
        ids = ",".join(map(str, prompt["ids"]))
        default = warden("logits", "-m", model, "--tokens", ids, "--top", "8", "--greedy", "6")
        assert "read in place from the file" in default.stderr, default.stderr
        assert "then in panels, built in the background" in default.stderr, default.stderr
        nommap = warden("logits", "-m", model, "--tokens", ids, "--top", "8", "--greedy", "6", "--no-mmap")
        assert "built in the background" not in nommap.stderr, nommap.stderr
        assert default.stdout == nommap.stdout


def _package_available() -> bool:
    try:
        import compressed_tensors  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


def test_warden_quantize_output_decompresses_to_its_weights(tmp_path: Path):
    require_warden()
    out = tmp_path / "q"
    p = warden("quantize", "-m", GOLDEN / "tiny-llama", "-o", out, "--weights", "int4-g32")
    assert "21 tensors quantized" in p.stdout, p.stdout
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    cfg = json.loads((out / "config.json").read_text())
    q = cfg["quantization_config"]
    assert q["quant_method"] == "compressed-tensors" and q["format"] == "pack-quantized"
    w = q["config_groups"]["group_0"]["weights"]
    assert (w["num_bits"], w["symmetric"], w["strategy"], w["group_size"]) == (4, True, "group", 32)
    assert "lm_head" in q["ignore"]
    if _package_available():
        sys.path.insert(0, str(ROOT / "scripts"))
        import make_ct_golden  # the package's decompressor + transformers

        from compressed_tensors.quantization import QuantizationConfig

        QuantizationConfig.model_validate(q)  # the package accepts warden's config
        g = make_ct_golden.reference_logits(out, cfg["vocab_size"])
        mode = "live (compressed_tensors imported)"
    else:
        g = golden("tiny-llama-warden-ct")
        sha = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
        assert sha == g["warden_output_sha256"], (
            "warden quantize output changed since tests/golden/models/tiny-llama-warden-ct.golden.json "
            "was made; rerun scripts/make_ct_golden.py --warden BIN (or run this test where torch and "
            "compressed-tensors are installed)")
        mode = "golden (sha256 of the output matches)"
    record("compressed-tensors quantize", "mode", mode)
    for weights in ("f32", "int4-g32-a16"):
        rel, top1, err = compare(out, g, weights)
        record("compressed-tensors quantize", f"warden output --weights {weights} max|diff|/spread", rel)
        assert "requantized" not in err, err
        assert top1 == 1.0 and rel <= REL, (weights, rel, top1)


def _copy(name: str, tmp: Path) -> Path:
    src = GOLDEN / name
    if not src.is_dir():
        pytest.skip(f"{src} missing")
    d = tmp / name
    shutil.copytree(src, d)
    return d


def _edit_config(d: Path, fn) -> None:
    cfg = json.loads((d / "config.json").read_text())
    fn(cfg["quantization_config"])
    (d / "config.json").write_text(json.dumps(cfg))


def _assert_clean_error(d: Path, *needles: str) -> None:
    p = warden("logits", "-m", d, "--tokens", "1,2,3", check=False)
    assert p.returncode == 1, (p.returncode, p.stderr)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    msg = lines[-1] if lines else ""
    for n in needles:
        assert n in msg, (n, p.stderr)


@pytest.mark.parametrize("field,value,needle", [
    ("num_bits", 3, "num_bits is 3"),
    ("strategy", "channel", "strategy 'channel'"),
    ("strategy", "tensor", "strategy 'tensor'"),
    ("actorder", "group", "actorder"),
    ("type", "float", "type is 'float'"),
])
def test_unsupported_scheme_is_a_clear_error(tmp_path: Path, field: str, value, needle: str):
    d = _copy("tiny-llama-ct-int4", tmp_path)
    _edit_config(d, lambda q: q["config_groups"]["group_0"]["weights"].__setitem__(field, value))
    _assert_clean_error(d, needle)


def test_unknown_format_and_group_mismatch(tmp_path: Path):
    d = _copy("tiny-llama-ct-int4", tmp_path)
    _edit_config(d, lambda q: q.__setitem__("format", "float-quantized"))
    _assert_clean_error(d, "format 'float-quantized'")
    d2 = tmp_path / "g64"
    shutil.copytree(GOLDEN / "tiny-llama-ct-int4", d2)
    # The config says group 64 but the scales are per 32 (and 64 does not divide the MLP's 160
    # columns): an error naming the packed tensor / scale and the group size.
    _edit_config(d2, lambda q: q["config_groups"]["group_0"]["weights"].__setitem__("group_size", 64))
    _assert_clean_error(d2, "model.layers.", "group_size 64")


def test_corrupt_tensors_are_clear_errors(tmp_path: Path):
    np = pytest.importorskip("numpy")
    st = pytest.importorskip("safetensors.numpy")
    src = GOLDEN / "tiny-llama-ct-int4-asym"  # f32 / f16 tensors (numpy has no bfloat16)
    if not src.is_dir():
        pytest.skip("golden missing")
    cases = {
        "packed": ("model.layers.1.mlp.up_proj.weight_packed", lambda a: a[:, :-1], "expected"),
        "scale": ("model.layers.0.self_attn.o_proj.weight_scale", lambda a: a[:-1], "weight_scale"),
        "shape": ("model.layers.2.mlp.down_proj.weight_shape", lambda a: a * 2, "weight_shape"),
    }
    for case, (tensor, fn, needle) in cases.items():
        d = tmp_path / case
        shutil.copytree(src, d)
        tensors = st.load_file(str(d / "model.safetensors"))
        tensors[tensor] = np.ascontiguousarray(fn(tensors[tensor]))
        st.save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
        _assert_clean_error(d, tensor.rsplit(".", 1)[0], needle)


def test_quantize_bad_requests(tmp_path: Path):
    p = warden("quantize", "-m", GOLDEN / "tiny-llama", "-o", tmp_path / "o", "--weights", "int4-asym", check=False)
    assert p.returncode == 1 and "symmetric int4 only" in p.stderr, p.stderr
    p = warden("quantize", "-m", GOLDEN / "tiny-llama.gguf", "-o", tmp_path / "o2.safetensors", "--weights", "int4",
               check=False)
    assert p.returncode == 1 and "Hugging Face model directory" in p.stderr, p.stderr
    p = warden("quantize", "-m", GOLDEN / "tiny-llama", "-o", tmp_path / "o3", "--weights", "int4-g128",
               check=False)
    assert p.returncode == 1 and "does not divide" in p.stderr, p.stderr


def test_quantize_shards_a_large_output(tmp_path: Path):
    """--max-shard-size: a directory output larger than it is written as Hugging Face shards. The
    safetensors package reads every shard; the index's weight_map names each tensor's shard and
    its total_size their bytes, as transformers reads them; the shards hold the single file's
    tensors bit for bit; warden gives the same logits from either."""
    np = pytest.importorskip("numpy")
    from safetensors.numpy import load_file

    one, many = tmp_path / "one", tmp_path / "many"
    warden("quantize", "-m", GOLDEN / "tiny-llama", "-o", one, "--weights", "int4-g32")
    warden("quantize", "-m", GOLDEN / "tiny-llama", "-o", many, "--weights", "int4-g32", "--max-shard-size", "32K")
    assert not (many / "model.safetensors").exists()
    index = json.loads((many / "model.safetensors.index.json").read_text())
    shards = sorted(many.glob("model-*-of-*.safetensors"))
    assert len(shards) > 2 and {f.name for f in shards} == set(index["weight_map"].values())
    assert all(f.name.endswith(f"-of-{len(shards):05d}.safetensors") for f in shards)
    single = load_file(str(one / "model.safetensors"))
    seen: dict[str, np.ndarray] = {}
    for f in shards:
        part = load_file(str(f))
        assert all(index["weight_map"][name] == f.name for name in part)
        assert not seen.keys() & part.keys()
        seen.update(part)
        if len(part) > 3:  # more than one weight (three tensors when quantized): within the limit
            assert sum(a.nbytes for a in part.values()) <= 32 * 1024, f.name
    assert seen.keys() == single.keys() == index["weight_map"].keys()
    assert index["metadata"]["total_size"] == sum(a.nbytes for a in single.values())
    for name, a in single.items():
        assert a.dtype == seen[name].dtype and np.array_equal(a, seen[name]), name
    assert (logits(one, [1, 17, 42, 99], 320, None)[0] == logits(many, [1, 17, 42, 99], 320, None)[0])
    # Quantized again into the same directory as one file: the shards and index are removed (a
    # loader would read a stale model.safetensors first, or shards beside it).
    warden("quantize", "-m", GOLDEN / "tiny-llama", "-o", many, "--weights", "int4-g32")
    assert sorted(f.name for f in many.iterdir()) == ["config.json", "model.safetensors"]
    for args, needle in ((["-o", tmp_path / "x.safetensors", "--max-shard-size", "1M"], "needs a directory output"),
                         (["-o", many, "--max-shard-size", "0"], "not a positive byte count"),
                         (["-o", many, "--max-shard-size", "5T"], "unknown unit 'T'")):
        p = warden("quantize", "-m", GOLDEN / "tiny-llama", "--weights", "int4-g32", *args, check=False)
        assert p.returncode == 1 and needle in p.stderr, (args, p.stderr)
    assert sorted(f.name for f in many.iterdir()) == ["config.json", "model.safetensors"]
    p = warden("quantize", "-m", GOLDEN / "tiny-llama.gguf", "-o", tmp_path / "x.gguf", "--weights", "int4",
               "--max-shard-size", "1M", check=False)
    assert p.returncode == 1 and "GGUF is one file" in p.stderr, p.stderr
    # A source that fails part way (a NaN in layer 1, after earlier shards are written): one clear
    # error, and the directory's earlier output is left as it was, with no partial shard.
    bad = tmp_path / "nan-src"
    shutil.copytree(GOLDEN / "tiny-llama", bad)
    f = bad / "model.safetensors"
    raw = bytearray(f.read_bytes())
    hlen = int.from_bytes(raw[:8], "little")
    entry = json.loads(raw[8:8 + hlen])["model.layers.1.mlp.down_proj.weight"]
    assert entry["dtype"] == "F32"
    start = 8 + hlen + entry["data_offsets"][0]
    raw[start:start + 4] = np.array([np.nan], dtype="<f4").tobytes()
    f.write_bytes(bytes(raw))
    before = (many / "model.safetensors").read_bytes()
    p = warden("quantize", "-m", bad, "-o", many, "--weights", "int4-g32", "--max-shard-size", "32K", check=False)
    assert p.returncode == 1 and "'model.layers.1.mlp.down_proj.weight' as int4-g32" in p.stderr, p.stderr
    assert "non-finite" in p.stderr, p.stderr
    assert sorted(f.name for f in many.iterdir()) == ["config.json", "model.safetensors"]
    assert (many / "model.safetensors").read_bytes() == before


def safetensors_param_count(model_dir: Path) -> int:
    """Elements of every tensor of a safetensors directory, read from the file headers (8-byte
    length + JSON), independently of warden."""
    n = 0
    for f in sorted(model_dir.glob("*.safetensors")):
        with f.open("rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(size))
        for name, t in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for d in t["shape"]:
                count *= d
            n += count
    return n


@pytest.mark.parametrize("name,source", [("tiny-llama-ct-int4", "tiny-llama"),
                                         ("tiny-llama-ct-int4-asym", "tiny-llama"),
                                         ("tiny-qwen3-moe-ct-int4", "tiny-qwen3-moe")])
def test_info_counts_packed_weights_as_their_parameters(name: str, source: str):
    """`warden info` on a pack-quantized checkpoint reports the parameters of the model it was
    quantized from (each int32 word of `weight_packed` holds 8 int4 weights; scales, zero points
    and shapes are not parameters), not the element count of its stored tensors."""
    ct_dir, src_dir = GOLDEN / name, GOLDEN / source
    if not ct_dir.is_dir() or not src_dir.is_dir():
        pytest.skip("golden model missing")
    p = warden("info", "-m", ct_dir)
    line = next(ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("parameters:"))
    got = int(line.split()[1])
    assert got == safetensors_param_count(src_dir)
    assert got != safetensors_param_count(ct_dir)  # the stored element count is not the answer


def test_checkpoint_with_a_non_finite_scale_is_refused(tmp_path: Path):
    """A NaN among a packed weight's scales refuses the load, naming the tensor (each scale is
    checked once, by the lookup whose weight is loaded; shape and existence lookups skip it)."""
    bad = tmp_path / "nan-scale"
    shutil.copytree(GOLDEN / "tiny-llama-ct-int4", bad)
    f = bad / "model.safetensors"
    raw = bytearray(f.read_bytes())
    hlen = int.from_bytes(raw[:8], "little")
    name = "model.layers.1.self_attn.o_proj.weight_scale"
    entry = json.loads(raw[8:8 + hlen])[name]
    assert entry["dtype"] == "BF16", entry
    end = 8 + hlen + entry["data_offsets"][1]
    raw[end - 2:end] = (0x7fc0).to_bytes(2, "little")  # the last scale: a bf16 NaN
    f.write_bytes(bytes(raw))
    p = warden("logits", "-m", bad, "--tokens", "1,2,3", check=False)
    assert p.returncode == 1 and f"'{name}' holds a non-finite scale" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "Segmentation" not in p.stderr
