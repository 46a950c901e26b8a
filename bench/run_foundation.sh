#!/usr/bin/env bash
# Foundation benchmark: batch-1 prefill and decode of a BF16 Llama GGUF, warden vs
# llama.cpp on the same file and thread count, as a fraction of the memory roofline
# (see docs/BENCHMARKS.md and docs/DESIGN.md, How we measure speed).
#
# Builds nothing of llama.cpp and commits nothing of it: point LLAMA_CPP_DIR at a
# CPU build made elsewhere (its source dir with build/bin/, or the build dir itself).
# Each half is skipped, with a note, when its binary is missing or does not work.
#
# Environment (defaults in brackets):
#   MODEL          GGUF to run [<repo>/models/llama-1b-bf16.gguf, bench/make_llama_gguf.py writes it]
#                  (make it: .venv/bin/python bench/make_llama_gguf.py --out "$MODEL")
#   THREADS        threads for both engines and membw [2]
#   LLAMA_CPP_DIR  llama.cpp checkout or build dir [unset: llama.cpp half skipped]
#   WARDEN_BIN     warden binary [<repo>/build/warden]
#   PP, TG         prompt tokens for llama-bench pp / generated tokens for both [128, 64]
#   REPS           repetitions per engine; medians are reported [3]
#   PROMPT_FILE    fixed warden prompt, ~PP tokens with BOS [bench/foundation_prompt.txt]
#   MEMBW_MIB      membw buffer [1024]
#   PYTHON         python with gguf + numpy [<repo>/.venv/bin/python]
#   OUT_DIR        raw outputs and foundation.json [bench/out]
#   SKIP_LLAMA=1 / SKIP_WARDEN=1 / SKIP_MEMBW=1   skip a part (SKIP_MEMBW reuses $OUT_DIR/membw.json)
#
# Usage: LLAMA_CPP_DIR=../llama.cpp bench/run_foundation.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${MODEL:-$REPO/models/llama-1b-bf16.gguf}"
THREADS="${THREADS:-2}"
WARDEN_BIN="${WARDEN_BIN:-$REPO/build/warden}"
LLAMA_CPP_DIR="${LLAMA_CPP_DIR:-}"
PP="${PP:-128}"
TG="${TG:-64}"
REPS="${REPS:-3}"
PROMPT_FILE="${PROMPT_FILE:-$REPO/bench/foundation_prompt.txt}"
MEMBW_MIB="${MEMBW_MIB:-1024}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
OUT_DIR="${OUT_DIR:-$REPO/bench/out}"

log() { printf '[foundation %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

[[ -f "$MODEL" ]] || { log "model $MODEL missing; make it with: $PYTHON $REPO/bench/make_llama_gguf.py --out $MODEL"; exit 1; }
[[ -x "$PYTHON" ]] || PYTHON=python3
mkdir -p "$OUT_DIR"

meta=(--meta "date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
      --meta "cpu=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
      --meta "nproc=$(nproc)"
      --meta "load_before=$(cut -d' ' -f1-3 /proc/loadavg)")

# Page the model in once so neither engine pays for the first disk read.
cat "$MODEL" > /dev/null

# --- memory bandwidth (roofline denominator) -------------------------------------
MEMBW="$OUT_DIR/membw"
if [[ "${SKIP_MEMBW:-0}" != 1 ]]; then
  if [[ ! -x "$MEMBW" || "$REPO/bench/membw.cpp" -nt "$MEMBW" ]]; then
    log "building membw"
    g++ -O3 -march=native -pthread -o "$MEMBW" "$REPO/bench/membw.cpp"
  fi
  threads_list=1
  [[ "$THREADS" != 1 ]] && threads_list="1,$THREADS"
  log "membw --mib $MEMBW_MIB --threads $threads_list"
  "$MEMBW" --mib "$MEMBW_MIB" --reps 7 --threads "$threads_list" --json > "$OUT_DIR/membw.json"
  cat "$OUT_DIR/membw.json" >&2
fi

# --- llama.cpp ---------------------------------------------------------------------
llama_args=()
LLAMA_BENCH=""
if [[ "${SKIP_LLAMA:-0}" != 1 && -n "$LLAMA_CPP_DIR" ]]; then
  for c in "$LLAMA_CPP_DIR/build/bin/llama-bench" "$LLAMA_CPP_DIR/bin/llama-bench" "$LLAMA_CPP_DIR/llama-bench"; do
    [[ -x "$c" ]] && { LLAMA_BENCH="$c"; break; }
  done
  [[ -n "$LLAMA_BENCH" ]] || log "no llama-bench under LLAMA_CPP_DIR=$LLAMA_CPP_DIR; llama.cpp half skipped"
elif [[ "${SKIP_LLAMA:-0}" != 1 ]]; then
  log "LLAMA_CPP_DIR unset; llama.cpp half skipped"
fi
if [[ -n "$LLAMA_BENCH" ]]; then
  # llama-bench reports "build: unknown" outside a git checkout: record the commit here
  # (LLAMA_CPP_COMMIT, else git, else a .warden-source-commit note beside the sources).
  commit="${LLAMA_CPP_COMMIT:-}"
  [[ -n "$commit" ]] || commit="$(git -C "$LLAMA_CPP_DIR" rev-parse HEAD 2>/dev/null || true)"
  [[ -n "$commit" || ! -f "$LLAMA_CPP_DIR/.warden-source-commit" ]] || commit="$(cut -d' ' -f1 "$LLAMA_CPP_DIR/.warden-source-commit")"
  meta+=(--meta "llama_cpp_commit=${commit:-unknown}")
  cmd=("$LLAMA_BENCH" -m "$MODEL" -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" -o json)
  log "${cmd[*]}"
  "${cmd[@]}" > "$OUT_DIR/llama-bench.json" 2> "$OUT_DIR/llama-bench.stderr"
  llama_args=(--llama-bench "$OUT_DIR/llama-bench.json")
fi

# --- warden ------------------------------------------------------------------------
warden_args=()
if [[ "${SKIP_WARDEN:-0}" != 1 ]]; then
  if [[ ! -x "$WARDEN_BIN" ]]; then
    log "no warden binary at $WARDEN_BIN; warden half pending"
  else
    prompt="$(cat "$PROMPT_FILE")"
    ok=1
    for i in $(seq 1 "$REPS"); do
      cmd=("$WARDEN_BIN" run -m "$MODEL" -p "$prompt" -n "$TG" --threads "$THREADS" --ignore-eos --temp 0)
      log "warden run $i/$REPS: $WARDEN_BIN run -m $MODEL -p \"\$(cat $PROMPT_FILE)\" -n $TG --threads $THREADS --ignore-eos --temp 0"
      wlog="$OUT_DIR/warden-run-$i.log"
      rc=0
      "${cmd[@]}" > "$OUT_DIR/warden-run-$i.stdout" 2> "$wlog" || rc=$?
      if [[ $rc != 0 ]]; then
        log "warden run failed (rc=$rc); see $wlog; warden half pending"; ok=0; break
      fi
      if ! grep -q '^timings:' "$wlog"; then
        log "warden printed no 'timings:' line on stderr; warden half pending"; ok=0; break
      fi
      grep '^timings:' "$wlog" >&2
      warden_args+=(--warden-log "$wlog")
    done
    [[ $ok == 1 ]] || warden_args=()
  fi
fi

meta+=(--meta "load_after=$(cut -d' ' -f1-3 /proc/loadavg)")
"$PYTHON" "$REPO/bench/foundation_report.py" --model "$MODEL" --threads "$THREADS" \
  --membw "$OUT_DIR/membw.json" --pp "$PP" --tg "$TG" \
  "${llama_args[@]}" "${warden_args[@]}" "${meta[@]}" --out "$OUT_DIR/foundation.json"
