"""`--spec mtp` end to end through `warden batch` on the tiny DeepSeek-V3 and GLM-4 MoE checkpoints
with an MTP layer (scripts/make_mtp_reference.py; the layer's forward is checked against
transformers in tests/model/test_mtp.cpp): greedy output is token for token `--spec off`'s, with
several sequences batched, a small KV pool that preempts, and from the GGUF conversion (llama.cpp's
blk.N.nextn.* names) the same drafts as from the safetensors directory. A model without nextn
layers is refused with a clear error.

The tiny models' weights are random, so the MTP layer's drafts are mostly rejected: these tests
check exactness and bookkeeping, not acceptance."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from conftest import GOLDEN, ROOT, TIMEOUT_S, require_warden

gguf = pytest.importorskip("gguf")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
from gguf_convert import convert  # noqa: E402

MODELS = [("tiny-deepseek-v3-mtp", "tiny-deepseek-v3"), ("tiny-glm4-moe-mtp", "tiny-glm4-moe")]


def mtp_checkpoint(name: str, base: str, out):
    """The base model's weights and the MTP layer as a two-shard directory (symbolic links)."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(GOLDEN / name / "config.json", out / "config.json")
    wm = {}
    for shard, src in {"model-00001-of-00002.safetensors": GOLDEN / base / "model.safetensors",
                       "model-00002-of-00002.safetensors": GOLDEN / name / "mtp.safetensors"}.items():
        (out / shard).symlink_to(src.resolve())
        wm.update({k: shard for k in safetensors_numpy.load_file(str(src))})
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("mtp")
    paths = {}
    for name, base in MODELS:
        d = mtp_checkpoint(name, base, out / name)
        paths[name] = d
        paths[name + ".gguf"] = out / f"{name}.gguf"
        convert(d, paths[name + ".gguf"])
    return paths


def prompts(name: str) -> list[list[int]]:
    g = json.loads((GOLDEN / f"{name}.mtp.json").read_text())
    ids = [p["ids"] for p in g["prompts"]]
    return ids + [ids[0][:5], ids[1][3:17]]


def batch(tmp_path, model, name, *args):
    require_warden()
    f = tmp_path / "prompts.jsonl"
    f.write_text("".join(json.dumps({"tokens": p}) + "\n" for p in prompts(name)))
    p = subprocess.run([str(require_warden()), "batch", "-m", str(model), "--prompts", str(f),
                        "-n", "16", "--temp", "0", "-t", "2", "--dtype", "f32", "--ignore-eos",
                        *map(str, args)],
                       capture_output=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    lines = [json.loads(x) for x in p.stdout.decode().splitlines() if x.strip()]
    summary = lines[-1]
    assert summary["integrity_violations"] == 0 and summary["kv_pages_used_after"] == 0
    return [x["tokens"] for x in lines[:-1]], summary


@pytest.mark.parametrize("name", [m[0] for m in MODELS])
def test_mtp_greedy_equals_spec_off(tmp_path, models, name):
    """From the directory and from the GGUF (f32 weights both): the output of `--spec off`, and
    the GGUF's MTP layer (blk.N.nextn.*) drafts what the directory's does (the same counts of
    proposed and accepted drafts at every position)."""
    ref, _ = batch(tmp_path, models[name], name, "--max-seqs", "3")
    spec = ["--max-seqs", "3", "--spec", "mtp", "--spec-tokens", "3", "--spec-fixed"]
    got, d = batch(tmp_path, models[name], name, *spec)
    assert got == ref
    assert d["spec"]["proposer"] == "mtp" and d["spec"]["proposed"] > 0
    assert d["spec"]["accepted"] <= d["spec"]["proposed"]
    got, g = batch(tmp_path, models[name + ".gguf"], name, *spec)
    assert got == ref
    untimed = lambda s: {k: v for k, v in s.items() if not k.endswith("_ms")}  # noqa: E731
    assert untimed(g["spec"]) == untimed(d["spec"])


def test_mtp_with_preemption_equals_spec_off(tmp_path, models):
    name = "tiny-glm4-moe-mtp"
    small = ["--max-seqs", "4", "--kv-cache-bytes", "96K"]
    ref, _ = batch(tmp_path, models[name], name, *small)
    got, s = batch(tmp_path, models[name], name, *small, "--spec", "mtp", "--spec-tokens", "3",
                   "--spec-fixed")
    assert got == ref
    assert s["preemptions"] > 0


@pytest.mark.parametrize("model", ["tiny-deepseek-v3", "tiny-glm4-moe"])
def test_mtp_without_nextn_layers_is_refused(tmp_path, model):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"tokens": [5, 6, 7]}) + "\n")
    p = subprocess.run([str(require_warden()), "batch", "-m", str(GOLDEN / model), "--prompts",
                        str(f), "-n", "4", "--spec", "mtp"], capture_output=True, timeout=TIMEOUT_S,
                       cwd=ROOT)
    err = p.stderr.decode()
    assert 0 < p.returncode < 128, err
    assert "no MTP layers" in err and "--spec mtp" in err, err
