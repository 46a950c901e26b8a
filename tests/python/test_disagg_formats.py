"""Prefill and decode servers that differ in KV format or weights (disaggregation).

Pages travel in the decode server's KV format: a prefill server whose pool differs rewrites
the prompt's K/V into it (kv::convert_kv_pages: each stored row read back as f32 and stored
again the way the decode pool's own write_kv stores it). What is guaranteed, and asserted:
- a page size that differs changes no number: greedy text equal to `--role both`, token for
  token;
- bf16 prefill into an fp8 decode pool: the bytes moved are fp8 pages (about half), the first
  token and its logprobs are exactly the bf16 `--role both` server's (they come from the prefill
  server's logits), every later token is decoded from fp8 pages; how far the text stays with
  an fp8 `--role both` server is printed, not asserted (the prompt's KV was computed reading
  bf16 history, not fp8 history, so bit equality with fp8 colocated is not a property of the
  design);
- other weights on the prefill server (`--weights bf16 --head-weights H` prefill, `--weights
  int4` decode, H the int4 server's head format): accepted (the pages' identity is the
  checkpoint, not its weight format); greedy text equal to `--role both --weights int4
  --prefill-weights bf16`, which computes prompts with a bf16 copy of the layers and decodes
  with int4 alike (the first token's logits come from the prefill server's head, hence H);
- the checkpoint's identity is its content: the same file under another name is accepted;
  another checkpoint with the same name and size is refused with "model mismatch", the
  request fails with 503 and the decode server's pages return to zero.
"""
from __future__ import annotations

import math
import re

import httpx
import pytest

from conftest import SMOLLM2_GGUF, WardenServer
from test_disagg import complete, kv_port, metrics, wait_pages_zero

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time in a small village, there lived an old clockmaker who",
]
KV = ("--kv-cache-bytes", "64M")
# SmolLM2-135M: 30 layers, 3 KV heads of 64. A 16-token fp8 page (token-head scales): per
# layer K and V blocks of 16*3*64 code bytes + 16*3 bf16 scales, each padded to 16 bytes.
FP8_PAGE_BYTES = 30 * 2 * (16 * 3 * 64 + 16 * 3 * 2)


def start_pair(pre_args, dec_args):
    pre = WardenServer(*KV, "--role", "prefill", *pre_args)
    try:
        dec = WardenServer(*KV, "--role", "decode", "--prefill-kv",
                           f"127.0.0.1:{kv_port(pre)}", *dec_args)
    except BaseException:
        pre.stop()
        raise
    return pre, dec


def assert_same_greedy_text(dec, ref):
    """Every prompt through the decode server (its KV moved from the prefill server) gives ref's
    greedy text; the decode server's pages return to zero afterwards."""
    for p in PROMPTS:
        got = greedy(dec.base, p)
        assert got["warden_timing"]["kv_transfer_bytes"] > 0
        assert got["choices"][0]["text"] == greedy(ref.base, p)["choices"][0]["text"], p
    assert wait_pages_zero(dec.base) == 0


def stop_all(*servers):
    for s in servers:
        if s is not None:
            s.stop()


def greedy(base, prompt, n=16, logprobs=None):
    body = {"model": SMOLLM2_GGUF.name, "prompt": prompt, "max_tokens": n, "temperature": 0}
    if logprobs:
        body["logprobs"] = logprobs
    r = httpx.post(base + "/v1/completions", timeout=120, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_page_size_conversion_changes_no_number():
    ref = pre = dec = None
    try:
        ref = WardenServer(*KV)
        pre, dec = start_pair(("--kv-page-size", "32"), ())
        assert_same_greedy_text(dec, ref)
    finally:
        stop_all(dec, pre, ref)


def test_bf16_prefill_into_fp8_decode():
    ref16 = ref8 = pre = dec = None
    try:
        ref16 = WardenServer(*KV)
        ref8 = WardenServer(*KV, "--kv-dtype", "fp8_e4m3")
        pre, dec = start_pair(("--kv-dtype", "bf16"), ("--kv-dtype", "fp8_e4m3"))
        same8 = total = 0
        for p in PROMPTS:
            got = greedy(dec.base, p, logprobs=5)
            want16 = greedy(ref16.base, p, logprobs=5)
            want8 = greedy(ref8.base, p)
            n_prompt = got["usage"]["prompt_tokens"]
            assert got["warden_timing"]["kv_transfer_bytes"] == \
                math.ceil(n_prompt / 16) * FP8_PAGE_BYTES
            lp, lp16 = got["choices"][0]["logprobs"], want16["choices"][0]["logprobs"]
            assert lp["tokens"][0] == lp16["tokens"][0], p
            assert lp["token_logprobs"][0] == lp16["token_logprobs"][0], p
            assert lp["top_logprobs"][0] == lp16["top_logprobs"][0], p
            toks8 = greedy(ref8.base, p, logprobs=1)["choices"][0]["logprobs"]["tokens"]
            same8 += sum(a == b for a, b in zip(lp["tokens"], toks8))
            total += len(toks8)
            assert want8["choices"][0]["text"]  # the fp8 reference answers too
        m = metrics(dec.base)
        assert m['warden_remote_prefill_total{outcome="ok"}'] == len(PROMPTS)
        assert wait_pages_zero(dec.base) == 0
        print(f"\nbf16 prefill -> fp8 decode: {same8}/{total} greedy tokens equal to an fp8 "
              f"--role both server")
    finally:
        stop_all(dec, pre, ref8, ref16)


def head_format(server) -> str:
    """The output head's format an int4 server chose (the checkpoint's head, converted)."""
    for line in server.stderr_lines:
        m = re.search(r"warden: weights .*token_embd \S+ as (\S+)", line)
        if m:
            return m.group(1)
    pytest.fail("no head format in: " + "".join(server.stderr_lines)[-1500:])


def test_bf16_weights_prefill_int4_weights_decode():
    ref = pre = dec = None
    try:
        # The reference, and the format of its head (which the decode server shares).
        ref = WardenServer(*KV, "--weights", "int4", "--prefill-weights", "bf16")
        head = head_format(ref)
        pre, dec = start_pair(("--weights", "bf16", "--head-weights", head), ("--weights", "int4"))
        assert head_format(dec) == head
        assert_same_greedy_text(dec, ref)
    finally:
        stop_all(dec, pre, ref)


def test_checkpoint_identity_is_content_not_path(tmp_path):
    # The same bytes under another name: the same checkpoint, pages accepted.
    renamed = tmp_path / "renamed" / "other-name.gguf"
    renamed.parent.mkdir()
    renamed.symlink_to(SMOLLM2_GGUF)
    pre = dec = None
    try:
        pre = WardenServer(*KV, "--role", "prefill", model=renamed)
        dec = WardenServer(*KV, "--role", "decode", "--prefill-kv", f"127.0.0.1:{kv_port(pre)}")
        r = complete(dec.base, PROMPTS[0])
        assert r.status_code == 200, r.text
        assert wait_pages_zero(dec.base) == 0
    finally:
        stop_all(dec, pre)


def test_another_checkpoint_is_refused(tmp_path):
    # Another checkpoint with the same file name and size (a fine-tune stand-in: one metadata
    # string changed in place): refused, though name and size match.
    data = bytearray(SMOLLM2_GGUF.read_bytes())
    at = data.find(b"HuggingFaceTB")
    assert at > 0
    data[at:at + 13] = b"SomebodyElse!"
    other = tmp_path / SMOLLM2_GGUF.name
    other.write_bytes(bytes(data))
    assert other.stat().st_size == SMOLLM2_GGUF.stat().st_size
    pre = dec = None
    try:
        pre = WardenServer(*KV, "--role", "prefill", model=other)
        dec = WardenServer(*KV, "--role", "decode", "--prefill-kv", f"127.0.0.1:{kv_port(pre)}")
        r = complete(dec.base, PROMPTS[0])
        assert r.status_code == 503, r.text
        assert "model mismatch" in r.json()["error"]["message"]
        assert wait_pages_zero(dec.base) == 0
    finally:
        stop_all(dec, pre)
