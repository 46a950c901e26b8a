#!/usr/bin/env bash
# Prefill and batched decode per weight format, interleaved rounds (every round runs every
# configuration once, so a noisy minute hits them alike):
#   prefill: `warden run` on a 441-token prompt (the first 1800 bytes of data/eval/text.txt),
#            prefill_tok_s of its timings line;
#   decode at batch B (BATCHES, default 8 and 32): `warden batch` on B copies of a short prompt,
#            TG tokens each, output_tok_s of its summary line (the 5-token prefill is included).
# Files: the warden-quantized copies in OUT_DIR (bench/weights_files.sh, shared with
# bench/weights_speed.sh: written once when missing). FORMAT@P loads MODEL itself, so that the
# prefill copy holds the source's values rather than the int4 file's.
#
# Env: MODEL [<repo>/models/llama-1b-bf16.gguf, bench/make_llama_gguf.py writes it], THREADS [2], TG [64], ROUNDS [2],
#      BATCHES ["8 32"], CONFIGS ["bf16 fp8 int8 int4-g32 int4-g128 int4-g32@bf16 int4-g32@fp8"]
#      (FORMAT@P: --prefill-weights P), WARDEN_BIN [build/warden], OUT_DIR [bench/out/weights]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${MODEL:-$REPO/models/llama-1b-bf16.gguf}"
THREADS="${THREADS:-2}"
TG="${TG:-64}"
ROUNDS="${ROUNDS:-2}"
BATCHES="${BATCHES:-8 32}"
CONFIGS="${CONFIGS:-bf16 fp8 int8 int4-g32 int4-g128 int4-g32@bf16 int4-g32@fp8}"
WARDEN_BIN="${WARDEN_BIN:-$REPO/build/warden}"
OUT_DIR="${OUT_DIR:-$REPO/bench/out/weights}"
mkdir -p "$OUT_DIR"
log() { printf '[weights-batch %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
prompt="$(head -c 1800 "$REPO/data/eval/text.txt")"
for b in $BATCHES; do
  for _ in $(seq 1 "$b"); do echo '{"prompt": "Once upon a time"}'; done > "$OUT_DIR/batch-$b.jsonl"
done
source "$REPO/bench/weights_files.sh"
results="$OUT_DIR/batch-results.tsv"
: > "$results"
for round in $(seq 1 "$ROUNDS"); do
  for cfg in $CONFIGS; do
    fmt="${cfg%%@*}"
    args=(--weights "$fmt" --threads "$THREADS")
    if [[ "$cfg" == *@* ]]; then
      args+=(--prefill-weights "${cfg#*@}")
      f="$MODEL"
    else
      f="$(warden_file "$fmt")"
    fi
    log "round $round $cfg prefill"
    pf="$("$WARDEN_BIN" run -m "$f" "${args[@]}" -p "$prompt" -n 1 --temp 0 2>&1 >/dev/null | grep '^timings:' || true)"
    pf="$(grep -o 'prefill_tok_s=[0-9.]*' <<< "$pf" | cut -d= -f2)"
    printf '%s\t%s\tprefill\t%s\n' "$round" "$cfg" "${pf:-fail}" >> "$results"
    for b in $BATCHES; do
      log "round $round $cfg batch $b"
      out="$("$WARDEN_BIN" batch -m "$f" "${args[@]}" --prompts "$OUT_DIR/batch-$b.jsonl" -n "$TG" --ignore-eos \
             --max-seqs "$b" 2>/dev/null | tail -1 || true)"
      tps="$(grep -o '"output_tok_s":[0-9.]*' <<< "$out" | cut -d: -f2)"
      printf '%s\t%s\tbatch%s\t%s\n' "$round" "$cfg" "$b" "${tps:-fail}" >> "$results"
    done
  done
done
log "results in $results"
# Summary: best of the rounds per configuration and measure, and the per-round ratio to bf16.
python3 - "$results" <<'PY'
import sys
from collections import defaultdict
v = defaultdict(dict)
for line in open(sys.argv[1]):
    rnd, cfg, what, x = line.rstrip("\n").split("\t")
    if x != "fail":
        v[(cfg, what)][int(rnd)] = float(x)
whats = sorted({w for _, w in v}, key=lambda w: (w != "prefill", len(w), w))
cfgs = list(dict.fromkeys(c for c, _ in v))
print("| config | " + " | ".join(f"{w} tok/s (best) | {w} / bf16 per round" for w in whats) + " |")
print("|---|" + "---|---|" * len(whats))
for c in cfgs:
    cells = []
    for w in whats:
        r = v.get((c, w), {})
        base = v.get(("bf16", w), {})
        cells.append(f"{max(r.values()):.1f}" if r else "-")
        cells.append(" ".join(f"{r[i] / base[i]:.2f}" for i in sorted(r) if i in base and base[i] > 0) or "-")
    print(f"| {c} | " + " | ".join(cells) + " |")
PY
