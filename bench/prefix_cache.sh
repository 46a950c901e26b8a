#!/usr/bin/env bash
# Prefix cache on against off, on the agent workload of `warden bench` (sessions of TURNS
# chat requests; each carries a long shared system prompt with a tool list plus its whole
# history so far). One `warden serve` with the cache, one with --no-prefix-cache, the same
# requests at each concurrency; prints a table of TTFT, throughput and cached prompt tokens
# and writes it (markdown) to $OUT_DIR/prefix_cache.md.
#
# Env [defaults]: MODEL [models/SmolLM2-135M-Instruct-Q8_0.gguf or the first models/*.gguf],
#   WARDEN_BIN [build/warden], THREADS [2], CONCURRENCY [1,4,8], REQUESTS [32], TURNS [4],
#   SYSTEM_WORDS [400], INPUT_LEN [40], OUTPUT_LEN [32], KV_BYTES [256M], ROUNDS [1],
#   OUT_DIR [bench/out/prefix_cache], PYTHON [.venv/bin/python],
#   WEIGHTS [bf16: the documented runs; `auto` keeps a Q4_0/Q4_1 file's own format]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${MODEL:-$(ls "$REPO"/models/*.gguf 2>/dev/null | head -1)}"
WARDEN_BIN="${WARDEN_BIN:-$REPO/build/warden}"
THREADS="${THREADS:-2}"
CONCURRENCY="${CONCURRENCY:-1,4,8}"
REQUESTS="${REQUESTS:-32}"
TURNS="${TURNS:-4}"
SYSTEM_WORDS="${SYSTEM_WORDS:-400}"
INPUT_LEN="${INPUT_LEN:-40}"
OUTPUT_LEN="${OUTPUT_LEN:-32}"
KV_BYTES="${KV_BYTES:-256M}"
ROUNDS="${ROUNDS:-1}"
OUT_DIR="${OUT_DIR:-$REPO/bench/out/prefix_cache}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
[ -f "$MODEL" ] || { echo "prefix_cache.sh: no model (set MODEL)" >&2; exit 2; }
mkdir -p "$OUT_DIR"
SERVER_PID=""
cleanup() { if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi; SERVER_PID=""; }
trap cleanup EXIT

wait_url() {  # log -> prints the server URL once it listens
  local log="$1" i u
  for i in $(seq 1 600); do
    kill -0 "$SERVER_PID" 2>/dev/null || return 1
    u=$(grep -oE 'http://127\.0\.0\.1:[0-9]+' "$log" | head -1 || true)
    [ -n "$u" ] && { echo "$u"; return 0; }
    sleep 0.5
  done
  return 1
}

# Every (mode, concurrency) gets a fresh server, so each level starts with a cold cache (a
# server reused across levels would replay the previous level's sessions from its cache).
IFS=',' read -ra LEVELS <<<"$CONCURRENCY"
for round in $(seq 1 "$ROUNDS"); do
  for c in "${LEVELS[@]}"; do
    for mode in off on; do  # alternate, so slow drift of the machine hits both alike
      flags=(); [ "$mode" = off ] && flags+=(--no-prefix-cache)
      log="$OUT_DIR/server-$mode-c$c-$round.log"
      "$WARDEN_BIN" serve -m "$MODEL" --host 127.0.0.1 --port 0 --threads "$THREADS" --kv-cache-bytes "$KV_BYTES" \
        --weights "${WEIGHTS:-bf16}" "${flags[@]}" > "$log" 2>&1 &
      SERVER_PID=$!
      url=$(wait_url "$log") || { echo "server ($mode) did not start: $(tail -c 400 "$log")" >&2; exit 1; }
      echo "prefix_cache: round $round concurrency $c cache $mode at $url (load $(cut -d' ' -f1 /proc/loadavg))" >&2
      "$WARDEN_BIN" bench --url "$url" --workload agent --turns "$TURNS" --shared-prefix "$SYSTEM_WORDS" \
        --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --concurrency "$c" --requests "$REQUESTS" \
        --warmup 0 --timeout-s 600 --max-duration-s 1800 --out "$OUT_DIR/$mode-c$c-$round" --no-plot -q \
        > "$OUT_DIR/$mode-c$c-$round.txt"
      curl -s "$url/metrics" | grep '^warden_prefix_cache' > "$OUT_DIR/metrics-$mode-c$c-$round.txt" || true
      cleanup
    done
  done
done

"$PYTHON" - "$OUT_DIR" "$ROUNDS" <<'PY'
import json, statistics, sys
from pathlib import Path
out, rounds = Path(sys.argv[1]), int(sys.argv[2])
def level(mode, c, r):
    return json.load(open(out / f"{mode}-c{c}-{r}" / "bench.json"))["levels"][0]
rows = ["| concurrency | cache | TTFT p50 ms | TTFT p90 ms | output tok/s | prompt tok/s | cached prompt tokens | TTFT p50 off/on | output tok/s on/off |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
for c in sorted(int(p.name.split("-c")[1].split("-")[0]) for p in out.glob("on-c*-1") if p.is_dir()):
    per = {}
    for mode in ("off", "on"):
        ls = [level(mode, c, r) for r in range(1, rounds + 1)]
        med = lambda f: statistics.median(f(l) for l in ls)
        per[mode] = dict(p50=med(lambda l: l["ttft_ms"]["p50"]), p90=med(lambda l: l["ttft_ms"]["p90"]),
                         otok=med(lambda l: l["output_tok_s"]),
                         itok=med(lambda l: l["input_tokens"] / l["duration_s"]),
                         cached=sum(l["cached_tokens"] for l in ls) / max(1, sum(l["input_tokens"] for l in ls)))
    for mode in ("off", "on"):
        p = per[mode]
        ratio = (f"{per['off']['p50'] / p['p50']:.2f}x", f"{p['otok'] / per['off']['otok']:.2f}x") if mode == "on" else ("", "")
        rows.append(f"| {c} | {mode} | {p['p50']:.0f} | {p['p90']:.0f} | {p['otok']:.1f} | {p['itok']:.0f} | "
                    f"{100 * p['cached']:.0f}% | {ratio[0]} | {ratio[1]} |")
text = "\n".join(rows) + "\n"
(out / "prefix_cache.md").write_text(text)
print(text)
PY
