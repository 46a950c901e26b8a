#!/usr/bin/env bash
# Weight-format speed, side by side in one run (interleaved rounds; the CPU is shared, so
# compare ratios within a round): warden batch-1 decode and prefill tok/s per --weights format
# (and int4 with --prefill-weights bf16), llama.cpp llama-bench on Q4_0/Q8_0/BF16 of the same
# weights, and each warden format as a fraction of its memory roofline
# (roofline tok/s = membw / bytes read per token = layer matrices + output head).
#
# Env: MODEL [/work/bench-models/llama-1b-bf16.gguf], THREADS [2], TG [32], ROUNDS [2],
#      FORMATS ["bf16 fp8 int8 int4-g32 int4-g128"], WARDEN_BIN [build-wq/warden],
#      LLAMA_BIN [/work/llama.cpp/build/bin], OUT_DIR [bench/out/weights], MEMBW_GBPS [bench/out/membw.json]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${MODEL:-/work/bench-models/llama-1b-bf16.gguf}"
THREADS="${THREADS:-2}"
TG="${TG:-32}"
ROUNDS="${ROUNDS:-2}"
FORMATS="${FORMATS:-bf16 fp8 int8 int4-g32 int4-g128}"
WARDEN_BIN="${WARDEN_BIN:-$REPO/build-wq/warden}"
LLAMA_BIN="${LLAMA_BIN:-/work/llama.cpp/build/bin}"
OUT_DIR="${OUT_DIR:-$REPO/bench/out/weights}"
mkdir -p "$OUT_DIR"
log() { printf '[weights %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
base="$(basename "$MODEL" .gguf)"
for q in Q4_0 Q8_0; do
  f="$OUT_DIR/$base-$q.gguf"
  [[ -f "$f" ]] || { log "llama-quantize $q"; "$LLAMA_BIN/llama-quantize" "$MODEL" "$f" "$q" > "$OUT_DIR/quantize-$q.log" 2>&1; }
done
prompt="$(cat "$REPO/bench/foundation_prompt.txt")"
results="$OUT_DIR/results.tsv"
: > "$results"
for round in $(seq 1 "$ROUNDS"); do
  for fmt in $FORMATS "int4-g32+prefill-bf16"; do
    args=(--weights "${fmt%%+*}")
    [[ "$fmt" == *+prefill-bf16 ]] && args+=(--prefill-weights bf16)
    log "round $round warden $fmt"
    "$WARDEN_BIN" run -m "$MODEL" -p "$prompt" -n "$TG" --threads "$THREADS" --ignore-eos --temp 0 "${args[@]}" \
      > /dev/null 2> "$OUT_DIR/warden-$fmt-$round.log" || { log "warden $fmt failed"; continue; }
    mem="$(grep '^warden: weights' "$OUT_DIR/warden-$fmt-$round.log" || true)"
    tim="$(grep '^timings:' "$OUT_DIR/warden-$fmt-$round.log")"
    printf 'warden\t%s\t%s\t%s\t%s\n' "$round" "$fmt" "$tim" "$mem" >> "$results"
  done
  for q in Q4_0 Q8_0 BF16; do
    f="$OUT_DIR/$base-$q.gguf"; [[ $q == BF16 ]] && f="$MODEL"
    log "round $round llama-bench $q"
    "$LLAMA_BIN/llama-bench" -m "$f" -t "$THREADS" -p 128 -n "$TG" -r 1 -o csv 2>/dev/null | tail -n +2 | \
      awk -v r="$round" -v q="$q" '{print "llama\t" r "\t" q "\t" $0}' >> "$results" || log "llama-bench $q failed"
  done
done
log "results in $results"
cat "$results"
