"""The prefix cache through `warden serve` and the official `openai` client: agent-style chats
(system prompt + tool list + growing history) from two tenants give the same greedy text with
the cache on as with `--no-prefix-cache`, in a KV pool small enough to force evictions; a tenant
never hits another tenant's prefix (cached_tokens and the hit counters), except the operator's
declared shared prefix; `cache_salt` narrows sharing.
"""
from __future__ import annotations

import concurrent.futures as cf
import random

import httpx
import pytest

from conftest import WardenServer

SYSTEM = ("You are Warden Assistant, a careful agent. Use the tools when they help. Tools: "
          "search(query) finds documents; calc(expr) evaluates arithmetic; weather(city) gives the "
          "forecast; calendar(date) lists meetings. Answer briefly and cite the tool you used.")
# The system turn exactly as SmolLM2's chat template renders it (the shared prefix file).
SHARED_PREFIX = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
OTHER_SYSTEM = "You are a pirate. Answer every question in one short sentence, like a pirate would."
KEYS = {"key-alice": "alice", "key-bob": "bob"}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    d = tmp_path_factory.mktemp("pc")
    keys = d / "keys.txt"
    keys.write_text("".join(f"{k} {t}\n" for k, t in KEYS.items()))
    shared = d / "shared.txt"
    shared.write_text(SHARED_PREFIX)
    # 12 MiB of bf16 KV is ~540 tokens of SmolLM2: a few chats fill it, so cached pages are evicted.
    common = ("--api-keys", str(keys), "--kv-cache-bytes", "12M", "--kv-watermark", "0", "--max-seqs", "8")
    on = WardenServer(*common, "--shared-prefix", str(shared))
    off = WardenServer(*common, "--no-prefix-cache")
    yield on, off
    for s in (on, off):
        assert s.stop() == 0, "".join(s.stderr_lines)[-2000:]


def conversations(seed: int) -> list[tuple[str, list[dict]]]:
    """(api key, messages) for several multi-turn chats; each turn repeats the whole history."""
    rng = random.Random(seed)
    words = "alpha bravo delta echo gamma kilo lima mike oscar papa sierra tango victor zulu".split()
    out = []
    for key in KEYS:
        for system in (SYSTEM, OTHER_SYSTEM):
            msgs = [{"role": "system", "content": system}]
            for turn in range(3):
                q = " ".join(rng.choice(words) for _ in range(rng.randint(3, 9)))
                msgs = msgs + [{"role": "user", "content": f"Turn {turn}: what about {q}?"}]
                out.append((key, list(msgs)))
                msgs = msgs + [{"role": "assistant", "content": f"Noted {q.split()[0]}."}]
    return out


def chat(server, key, msgs, **kw):
    return server.client(api_key=key).chat.completions.create(
        model=server.model_id, messages=msgs, max_tokens=12, temperature=0, **kw)


def cached_tokens(r) -> int:
    return r.usage.prompt_tokens_details.cached_tokens


def test_cache_on_equals_off_with_evictions(servers):
    on, off = servers
    work = conversations(1) + conversations(1)  # every chat twice: the second pass mostly hits
    ref = [chat(off, k, m).choices[0].message.content for k, m in work]
    # The cached server gets the same requests four at a time (batches, evictions, hits mid-run).
    with cf.ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda km: chat(on, *km), work))
    assert [r.choices[0].message.content for r in got] == ref
    assert all(cached_tokens(r) < r.usage.prompt_tokens for r in got)
    assert sum(cached_tokens(r) for r in got) > sum(r.usage.prompt_tokens for r in got) // 4
    m = on.metrics()
    assert m["warden_prefix_cache_evictions_total"] > 0, "12M of KV must force evictions"
    assert m["warden_prefix_cache_hit_tokens_total"] >= sum(cached_tokens(r) for r in got)
    assert m["warden_prefix_cache_pinned_pages"] > 0
    assert "warden_prefix_cache_pages" not in off.metrics()
    assert all(cached_tokens(chat(off, k, m)) == 0 for k, m in work[:2])


def test_tenants_never_hit_each_other(servers):
    on, _ = servers
    # Unique from its first page on (no earlier test sent it).
    secret = [{"role": "system", "content": f"Account {random.randrange(10**12)}. {OTHER_SYSTEM}"},
              {"role": "user", "content": "Summarize my account in one sentence, please, with details."}]

    def hit_tokens(tenant):
        return on.metrics().get(f'warden_prompt_tokens_cached_total{{tenant="{tenant}"}}', 0)

    first = chat(on, "key-alice", secret)
    assert cached_tokens(first) == 0
    bob_before = hit_tokens("bob")
    bob = chat(on, "key-bob", secret)  # the same prompt from another tenant: a miss
    assert cached_tokens(bob) == 0
    assert hit_tokens("bob") == bob_before
    assert bob.choices[0].message.content == first.choices[0].message.content
    again = chat(on, "key-alice", secret)  # the owner hits
    assert cached_tokens(again) > 0
    # cache_salt narrows: alice with a salt misses her unsalted entries, then hits her salted ones.
    salted = chat(on, "key-alice", secret, extra_body={"cache_salt": "user-42"})
    assert cached_tokens(salted) == 0
    assert cached_tokens(chat(on, "key-alice", secret, extra_body={"cache_salt": "user-42"})) > 0
    # ... and never widens: bob with alice's salt still misses.
    assert cached_tokens(chat(on, "key-bob", secret, extra_body={"cache_salt": "user-42"})) == 0


def test_declared_shared_prefix_is_hit_by_every_tenant(servers):
    on, _ = servers
    for key in KEYS:
        msgs = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"First question ever from {key}: {random.randrange(10**9)}"}]
        r = chat(on, key, msgs)
        # Only the operator's prefix (whole pages of it) is shared; the rest is the tenant's own.
        c = cached_tokens(r)
        assert c >= 16
        assert cached_tokens(r) < r.usage.prompt_tokens


def test_bad_cache_salt_is_rejected(servers):
    on, _ = servers
    for salt in ("", 7, ["a"], "x" * 300):
        r = httpx.post(on.base + "/v1/chat/completions", headers={"Authorization": "Bearer key-alice"},
                       json={"model": on.model_id, "messages": [{"role": "user", "content": "hi"}],
                             "max_tokens": 1, "cache_salt": salt}, timeout=60)
        assert r.status_code == 400, (salt, r.text)
        assert r.json()["error"]["param"] == "cache_salt"
