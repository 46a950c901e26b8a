#!/usr/bin/env bash
# Batch-1 decode speed per weight format, best-of-N over interleaved rounds: every round runs
# every configuration once (warden formats, then llama-bench on Q4_0/Q8_0/BF16 of the same
# weights), so a noisy minute hits all configurations of that round alike. The summary
# (bench/weights_speed_summary.py) reports per configuration the best tok/s, the bytes read per
# token, the fraction of the memory roofline (membw / bytes per token), and the per-round
# ratios to warden bf16.
#
# warden runs on quantized GGUF copies written once by `warden quantize` (imported bit-exactly
# at load, so loading skips the slow load-time quantization; decode reads the same packed bytes
# as `--weights X` on the bf16 file).
#
# Every round also measures the read bandwidth (bench/membw.cpp, built into OUT_DIR when
# missing), so the roofline is taken in the same minutes as the decode figures: the summary uses
# the highest bandwidth any round saw (the strictest roofline). That reading is the best of three
# ~35 ms bursts; every round also takes one reading over a SUSTAIN_S-second window (membw --seconds),
# the time scale of one decode run, and the summary gives each configuration's fraction of the highest
# such window too (on a Zen 4 VM the burst maximum ran up to 12% above the highest second-long
# window; docs/BENCHMARKS.md, Batch-1 decode per weight format, gives both). With BRACKET=1 (the
# default) every configuration's run is also bracketed by a short membw reading just before and
# just after it, and the summary gives each run's draw against the mean of its two brackets (the
# bandwidth of the seconds it ran in; this VM's moves by 30% or more within a minute).
#
# Env: MODEL [<repo>/models/llama-1b-bf16.gguf, bench/make_llama_gguf.py writes it], THREADS [2], TG [32], ROUNDS [5],
#      FORMATS ["bf16 fp8 int8 int4-g32 int4-g128 int4-g32+hb int4-g32+qe"] (+qe: --quantize-embeddings,
#      i.e. int4 output head; +h8: --head-weights int8; +hb: --head-weights bf16, int4's old default;
#      auto@Q8_0: llama.cpp's own Q8_0 file, loaded as it is: int8-g32),
#      LLAMA_TYPES ["Q4_0 Q8_0 BF16"], PROMPT ["Once upon a time"],
#      WARDEN_BIN [build-int4/warden], LLAMA_BIN [required: a llama.cpp build/bin],
#      OUT_DIR [bench/out/weights], MEMBW_JSON [bench/out/membw.json] (used only when no round
#      measured the bandwidth), BRACKET [1]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${MODEL:-$REPO/models/llama-1b-bf16.gguf}"
THREADS="${THREADS:-2}"
TG="${TG:-32}"
ROUNDS="${ROUNDS:-5}"
FORMATS="${FORMATS:-bf16 fp8 int8 int4-g32 int4-g128 int4-g32+hb int4-g32+qe}"
LLAMA_TYPES="${LLAMA_TYPES:-Q4_0 Q8_0 BF16}"
PROMPT="${PROMPT:-Once upon a time}"
WARDEN_BIN="${WARDEN_BIN:-$REPO/build-int4/warden}"
LLAMA_BIN="${LLAMA_BIN:?set LLAMA_BIN to a llama.cpp build/bin}"
OUT_DIR="${OUT_DIR:-$REPO/bench/out/weights}"
BRACKET="${BRACKET:-1}"
SUSTAIN_S="${SUSTAIN_S:-1}"
MEMBW_JSON="${MEMBW_JSON:-$REPO/bench/out/membw.json}"
mkdir -p "$OUT_DIR"
log() { printf '[weights %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
for fmt in $FORMATS; do  # auto@TYPE loads llama-quantize's TYPE file, made only for LLAMA_TYPES
  [[ "$fmt" != auto@* ]] && continue
  [[ "$fmt" == *+* ]] && { log "$fmt: auto@TYPE takes no +suffix (the file decides its head)"; exit 2; }
  [[ " $LLAMA_TYPES " == *" ${fmt#auto@} "* && "${fmt#auto@}" != BF16 ]] ||
    { log "$fmt: ${fmt#auto@} must be a quantized type in LLAMA_TYPES ($LLAMA_TYPES)"; exit 2; }
done
base="$(basename "$MODEL" .gguf)"
for q in $LLAMA_TYPES; do
  [[ $q == BF16 ]] && continue
  f="$OUT_DIR/$base-$q.gguf"
  [[ -f "$f" ]] || { log "llama-quantize $q"; "$LLAMA_BIN/llama-quantize" "$MODEL" "$f" "$q" > "$OUT_DIR/quantize-$q.log" 2>&1; }
done
# warden_file FORMAT: the file to load (written by `warden quantize` when missing).
source "$REPO/bench/weights_files.sh"
declare -A files
for fmt in $FORMATS; do files[$fmt]="$(warden_file "$fmt")"; done
membw="$OUT_DIR/membw"
[[ -x "$membw" && "$membw" -nt "$REPO/bench/membw.cpp" ]] || g++ -O3 -march=native -pthread -o "$membw" "$REPO/bench/membw.cpp"
results="$OUT_DIR/results.tsv"
: > "$results"
# bracket ROUND CONFIG pre|post: a short read-bandwidth reading next to one configuration's run.
bracket() {
  [[ "$BRACKET" == 1 ]] || return 0
  printf 'bracket\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$("$membw" --threads "$THREADS" --mib 512 --reps 3 --json 2>/dev/null | head -1)" >> "$results"
}
for round in $(seq 1 "$ROUNDS"); do
  log "round $round membw"
  printf 'membw\t%s\t%s\n' "$round" "$("$membw" --threads "$THREADS" --reps 3 --json 2>/dev/null | head -1)" >> "$results"
  if [[ "$SUSTAIN_S" != 0 ]]; then
    printf 'membw_sustained\t%s\t%s\n' "$round" \
      "$("$membw" --threads "$THREADS" --reps 1 --seconds "$SUSTAIN_S" --json 2>/dev/null | head -1)" >> "$results"
  fi
  for fmt in $FORMATS; do
    args=(--weights "${fmt%%+*}")
    [[ "$fmt" == auto@* ]] && args=(--weights auto)
    [[ "$fmt" == *+qe ]] && args+=(--quantize-embeddings)
    [[ "$fmt" == *+h8 ]] && args+=(--head-weights int8)
    [[ "$fmt" == *+hb ]] && args+=(--head-weights bf16)
    log "round $round warden $fmt"
    bracket "$round" "warden $fmt" pre
    "$WARDEN_BIN" run -m "${files[$fmt]}" -p "$PROMPT" -n "$TG" --threads "$THREADS" --ignore-eos --temp 0 "${args[@]}" \
      > /dev/null 2> "$OUT_DIR/warden-$fmt-$round.log" || { log "warden $fmt failed"; continue; }
    bracket "$round" "warden $fmt" post
    mem="$(grep '^warden: weights' "$OUT_DIR/warden-$fmt-$round.log" || true)"
    tim="$(grep '^timings:' "$OUT_DIR/warden-$fmt-$round.log")"
    printf 'warden\t%s\t%s\t%s\t%s\t%s\n' "$round" "$fmt" "$tim" "$mem" "${files[$fmt]}" >> "$results"
  done
  for q in $LLAMA_TYPES; do
    f="$OUT_DIR/$base-$q.gguf"; [[ $q == BF16 ]] && f="$MODEL"
    log "round $round llama-bench $q"
    bracket "$round" "llama.cpp $q" pre
    "$LLAMA_BIN/llama-bench" -m "$f" -t "$THREADS" -p 0 -n "$TG" -r 3 -o csv 2>/dev/null | tail -n +2 | \
      awk -v r="$round" -v q="$q" -v f="$f" '{print "llama\t" r "\t" q "\t" $0 "\t\t" f}' >> "$results" || log "llama-bench $q failed"
    bracket "$round" "llama.cpp $q" post
  done
done
log "results in $results"
"$REPO/.venv/bin/python" "$REPO/bench/weights_speed_summary.py" "$results" "$MEMBW_JSON" "$THREADS"
