# Sourced by bench/weights_speed.sh and bench/weights_batch.sh (not run on its own).
# warden_file FORMAT[+qe|+h8|+hb]: the file warden loads for a format, written once by
# `warden quantize` into OUT_DIR when missing (imported bit-exactly at load, so loading skips the
# slow load-time quantization; decode reads the same packed bytes as `--weights X` on MODEL).
# +qe = --quantize-embeddings (written into the file); +h8 / +hb = --head-weights int8 / bf16
# at load, +h8 from the plain FORMAT file (whose float head `warden quantize` writes as int8 beside
# int4 layers), +hb from a file written with `--head-weights keep`, so its bf16 head is the
# source's and not the int8 one widened. auto@TYPE: llama-quantize's TYPE file of MODEL (e.g.
# auto@Q8_0, written by weights_speed.sh for LLAMA_TYPES), loaded in its own format (--weights
# auto), so warden and llama.cpp read the same file. Needs MODEL, OUT_DIR, WARDEN_BIN, THREADS
# and log().
warden_file() {
  local fmt="${1%%+*}" qe="" keep="" base
  base="$(basename "$MODEL" .gguf)"
  [[ "$fmt" == auto@* ]] && { echo "$OUT_DIR/$base-${fmt#auto@}.gguf"; return; }
  [[ "$1" == *+qe ]] && qe="-qe"
  [[ "$1" == *+hb ]] && keep="-keep"
  [[ "$fmt" == bf16 && -z "$qe" ]] && { echo "$MODEL"; return; }
  # fp8 has no GGUF type to write: it is quantized at load from the bf16 file (slower start,
  # the same packed bytes at decode).
  [[ "$fmt" == fp8 ]] && { echo "$MODEL"; return; }
  local f="$OUT_DIR/$base-warden-$fmt$qe$keep.gguf"
  if [[ ! -f "$f" ]]; then
    log "warden quantize $1"
    # A failed quantize leaves no file and fails the caller (weights_speed.sh runs under set -e),
    # so a run never goes on with a path to nothing.
    local qlog="$OUT_DIR/warden-quantize-$fmt$qe$keep.log"
    if ! "$WARDEN_BIN" quantize -m "$MODEL" -o "$f" --weights "$fmt" ${qe:+--quantize-embeddings} \
      ${keep:+--head-weights keep} -t "$THREADS" > "$qlog" 2>&1; then
      log "warden quantize $1 failed: $qlog"
      rm -f "$f"
      return 1
    fi
  fi
  echo "$f"
}
