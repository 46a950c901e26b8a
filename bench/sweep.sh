#!/usr/bin/env bash
# Format sweep under load: starts `warden serve` once per configuration (weights x KV x
# integrity), drives it with `warden bench` at each concurrency, then the same against
# llama.cpp's llama-server on a Q4_0 copy of the model (when present), and renders one
# comparison table + plot into $DOC (docs/BENCHMARKS.md, Server against llama.cpp's llama-server,
# quotes one such table).
#
# Environment (defaults in brackets):
#   MODEL        GGUF to serve [<repo>/models/llama-1b-bf16.gguf, bench/make_llama_gguf.py writes it]
#   CONFIGS      space-separated configurations, each KEY=VAL,... with keys weights, kv,
#                integrity [weights=bf16,kv=bf16,integrity=step weights=int4,kv=bf16,integrity=step
#                weights=bf16,kv=fp8_e4m3,integrity=step weights=int4,kv=fp8_e4m3,integrity=step
#                weights=bf16,kv=bf16,integrity=off]; optional key head (--head-weights, e.g.
#                head=int8); a config whose flag `warden serve --help`
#                does not list is skipped with a note
#   CONCURRENCY  levels [1,8,32]       REQUESTS  per level [32]
#   INPUT_LEN    prompt tokens [170]   OUTPUT_LEN  max_tokens [64]
#   THREADS      server threads [2]    TIMEOUT_S  per request [600]   MAX_S  per bench run [1800]
#   WARDEN_BIN   [<repo>/build/warden] LLAMA_DIR  llama.cpp build/bin [unset: llama.cpp half skipped]
#   SKIP_LLAMA=1 skip llama-server     OUT_DIR  raw results [bench/out/sweep]
#   LLAMA_MODEL  a GGUF llama-server serves as it is (e.g. the same K-quant file warden serves)
#                [unset: a Q4_0 copy of MODEL made with llama-quantize]; results under
#                llama-server-<file name>
#   REUSE_LLAMA  a llama-server bench.json from an earlier run of the same workload, used instead
#   DOC          markdown output, the plot beside it [$OUT_DIR/table.md]
#   PYTHON       [<repo>/.venv/bin/python]
#   SWEEP_MOCK=1 serve bench/mock_openai_server.py instead (tests the script itself)
#   RENDER_ONLY=1 run nothing: render $DOC from the results already in $OUT_DIR (e.g. after
#                rerunning one level into it)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${MODEL:-$REPO/models/llama-1b-bf16.gguf}"
CONFIGS="${CONFIGS:-weights=bf16,kv=bf16,integrity=step weights=int4,kv=bf16,integrity=step weights=bf16,kv=fp8_e4m3,integrity=step weights=int4,kv=fp8_e4m3,integrity=step weights=bf16,kv=bf16,integrity=off}"
CONCURRENCY="${CONCURRENCY:-1,8,32}"
REQUESTS="${REQUESTS:-32}"
INPUT_LEN="${INPUT_LEN:-170}"
OUTPUT_LEN="${OUTPUT_LEN:-64}"
THREADS="${THREADS:-2}"
TIMEOUT_S="${TIMEOUT_S:-600}"
MAX_S="${MAX_S:-1800}"
WARDEN_BIN="${WARDEN_BIN:-$REPO/build/warden}"
LLAMA_DIR="${LLAMA_DIR:-}"
OUT_DIR="${OUT_DIR:-$REPO/bench/out/sweep}"
DOC="${DOC:-$OUT_DIR/table.md}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
MAXCTX=$(( (INPUT_LEN + OUTPUT_LEN + 64) ))
mkdir -p "$OUT_DIR"
LLAMA_LABEL="llama-server-q4_0"
[ -z "${LLAMA_MODEL:-}" ] || LLAMA_LABEL="llama-server-$(basename "${LLAMA_MODEL%.gguf}")"
SERVER_PID=""
cleanup() { if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi; }
trap cleanup EXIT
note() { echo "sweep: $*" >&2; echo "$*" >> "$OUT_DIR/notes.txt"; }
[ "${RENDER_ONLY:-0}" = "1" ] || : > "$OUT_DIR/notes.txt"

# Waits for "http://127.0.0.1:PORT" (warden) or "PORT n" (mock) in $1; prints the URL.
wait_url() {
  local log="$1" i
  for i in $(seq 1 600); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then return 1; fi
    local u; u=$(grep -oE 'http://127\.0\.0\.1:[0-9]+' "$log" | head -1 || true)
    [ -n "$u" ] && { echo "$u"; return 0; }
    local p; p=$(grep -oE '^PORT [0-9]+' "$log" | head -1 | cut -d' ' -f2 || true)
    [ -n "$p" ] && { echo "http://127.0.0.1:$p"; return 0; }
    sleep 0.5
  done
  return 1
}

free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run_bench() {  # name url  (levels: $CONCURRENCY)
  local name="$1" url="$2"
  "$WARDEN_BIN" bench --url "$url" --concurrency "$CONCURRENCY" --requests "$REQUESTS" \
    --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --warmup 1 --timeout-s "$TIMEOUT_S" \
    --max-duration-s "$MAX_S" --out "$OUT_DIR/$name" --no-plot -q | tee "$OUT_DIR/$name.txt"
  "$PYTHON" - "$OUT_DIR/$name/bench.json" "$name" <<'PY'
import json, sys
p, name = sys.argv[1], sys.argv[2]
r = json.load(open(p)); r["label"] = name; json.dump(r, open(p, "w"), indent=1)
PY
}

HELP=""
[ "${SWEEP_MOCK:-0}" = "1" ] || HELP="$("$WARDEN_BIN" serve --help 2>&1 || true)"
has_flag() { [ "${SWEEP_MOCK:-0}" = "1" ] || grep -q -- "$1" <<<"$HELP"; }

# "weights=int4,kv=bf16,integrity=step" -> "warden-int4-bf16-step" (the results' directory name).
cfg_name() { local name="warden" kv; IFS=',' read -ra kvs <<<"$1"; for kv in "${kvs[@]}"; do name="$name-${kv#*=}"; done; echo "$name"; }

LABELS=()
if [ "${RENDER_ONLY:-0}" = "1" ]; then
  for cfg in $CONFIGS; do
    name=$(cfg_name "$cfg")
    [ -f "$OUT_DIR/$name/bench.json" ] && LABELS+=("$name")
  done
  [ -f "$OUT_DIR/$LLAMA_LABEL/bench.json" ] && LABELS+=("$LLAMA_LABEL")
  CONFIGS_RUN=""
else
  CONFIGS_RUN="$CONFIGS"
fi
for cfg in $CONFIGS_RUN; do
  args=(); ok=1; name=$(cfg_name "$cfg")
  IFS=',' read -ra kvs <<<"$cfg"
  for kv in "${kvs[@]}"; do
    k="${kv%%=*}"; v="${kv#*=}"
    case "$k" in
      weights) if has_flag "--weights"; then args+=(--weights "$v"); elif [[ "$v" =~ ^(bf16|f32)$ ]]; then args+=(--dtype "$v"); else ok=0; fi ;;
      kv) if has_flag "--kv-dtype"; then args+=(--kv-dtype "$v"); elif [ "$v" != bf16 ]; then ok=0; fi ;;
      integrity) if has_flag "--kv-integrity"; then args+=(--kv-integrity "$v"); else ok=0; fi ;;
      head) if has_flag "--head-weights"; then args+=(--head-weights "$v"); else ok=0; fi ;;
      *) note "unknown key $k in $cfg"; ok=0 ;;
    esac
  done
  if [ "$ok" = 0 ]; then note "skipped $cfg: this warden serve has no flag for it"; continue; fi
  log="$OUT_DIR/$name.server.log"
  if [ "${SWEEP_MOCK:-0}" = "1" ]; then
    "$PYTHON" "$REPO/bench/mock_openai_server.py" --port 0 --ttft-ms 20 --itl-ms 2 > "$log" 2>&1 &
  else
    "$WARDEN_BIN" serve -m "$MODEL" --host 127.0.0.1 --port 0 --threads "$THREADS" "${args[@]}" > "$log" 2>&1 &
  fi
  SERVER_PID=$!
  if ! url=$(wait_url "$log"); then note "skipped $cfg: server did not start ($(tail -c 300 "$log"))"; cleanup; SERVER_PID=""; continue; fi
  echo "sweep: $cfg at $url" >&2
  run_bench "$name" "$url" || note "bench failed for $cfg"
  cleanup; SERVER_PID=""
  LABELS+=("$name")
done

if [ "${RENDER_ONLY:-0}" = "1" ]; then
  :
elif [ -n "${REUSE_LLAMA:-}" ]; then
  # A llama-server result of an earlier sweep with the same workload (its bench.json).
  mkdir -p "$OUT_DIR/$LLAMA_LABEL"
  [ "$(realpath "$REUSE_LLAMA")" = "$(realpath -m "$OUT_DIR/$LLAMA_LABEL/bench.json")" ] || cp "$REUSE_LLAMA" "$OUT_DIR/$LLAMA_LABEL/bench.json"
  LABELS+=("$LLAMA_LABEL")
  note "$LLAMA_LABEL results reused from $REUSE_LLAMA"
elif [ "${SKIP_LLAMA:-0}" != "1" ] && [ "${SWEEP_MOCK:-0}" != "1" ] && [ -x "$LLAMA_DIR/llama-server" ]; then
  q4="${LLAMA_MODEL:-$OUT_DIR/$(basename "${MODEL%.gguf}")-q4_0.gguf}"
  [ -f "$q4" ] || "$LLAMA_DIR/llama-quantize" "$MODEL" "$q4" Q4_0 > "$OUT_DIR/quantize.log" 2>&1 || note "llama-quantize failed"
  if [ -f "$q4" ]; then
    # One llama-server per level with as many slots as the level's concurrency (its KV cache is
    # split evenly between the slots, and slots keep their old prompts: one server sized for the
    # largest level, reused across levels, ran out of KV space at 32 with "Input prompt is too big
    # compared to KV size").
    parts=()
    IFS=',' read -ra levels <<<"$CONCURRENCY"
    for c in "${levels[@]}"; do
      port=$(free_port)
      log="$OUT_DIR/llama-server-c$c.log"
      # 1.5x the KV a level needs: with exactly c * MAXCTX cells, llama.cpp's unified cache (this
      # build) fragmented at concurrency 8 and refused 8 of 32 requests ("failed to find free space
      # in the KV cache"); more cells cost it nothing when unused.
      "$LLAMA_DIR/llama-server" -m "$q4" --host 127.0.0.1 --port "$port" -t "$THREADS" -np "$c" -cb \
        -c $(( c * MAXCTX * 3 / 2 )) > "$log" 2>&1 &
      SERVER_PID=$!
      up=0
      for i in $(seq 1 600); do
        if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then up=1; break; fi
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.5
      done
      if [ "$up" = 1 ]; then
        CONCURRENCY="$c" run_bench "$LLAMA_LABEL-c$c" "http://127.0.0.1:$port" && parts+=("$OUT_DIR/$LLAMA_LABEL-c$c/bench.json")
      else
        note "llama-server (-np $c) did not start"
      fi
      cleanup; SERVER_PID=""
    done
    if [ "${#parts[@]}" -gt 0 ]; then
      mkdir -p "$OUT_DIR/$LLAMA_LABEL"
      "$PYTHON" - "$OUT_DIR/$LLAMA_LABEL/bench.json" "$LLAMA_LABEL" "${parts[@]}" <<'PY'
import json, sys
out, label, parts = sys.argv[1], sys.argv[2], [json.load(open(p)) for p in sys.argv[3:]]
r = parts[0]
r["levels"] = [l for p in parts for l in p["levels"]]
r["label"] = label
json.dump(r, open(out, "w"), indent=1)
PY
      LABELS+=("$LLAMA_LABEL")
    fi
  fi
else
  note "llama-server half skipped"
fi

[ "${#LABELS[@]}" -gt 0 ] || { note "nothing was benchmarked"; exit 1; }
jsons=(); for l in "${LABELS[@]}"; do jsons+=("$OUT_DIR/$l/bench.json"); done
png="$(dirname "$DOC")/$(basename "${DOC%.md}" | tr 'A-Z' 'a-z').png"
"$PYTHON" "$REPO/bench/plot_bench.py" "${jsons[@]}" "$png" || note "plot failed"
CMDLINE="MODEL=$MODEL${LLAMA_MODEL:+ LLAMA_MODEL=$LLAMA_MODEL} CONFIGS='$CONFIGS' CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS INPUT_LEN=$INPUT_LEN OUTPUT_LEN=$OUTPUT_LEN THREADS=$THREADS bench/sweep.sh"
"$PYTHON" - "$DOC" "$png" "$CMDLINE" "$OUT_DIR/notes.txt" "${jsons[@]}" <<'PY'
import json, os, sys, time
doc, png, cmd, notes = sys.argv[1:5]
runs = [json.load(open(p)) for p in sys.argv[5:]]
base = {l["label"]: l for l in runs[0]["levels"]}
out = ["# Format sweep under load", "",
       "Produced by `%s` on %s (load average %s)." % (cmd, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                                  " ".join(open("/proc/loadavg").read().split()[:3])),
       "Closed loop per level; latencies in ms; ratios are output tokens/s against the first row's at the same level.",
       "", "| server / config | level | ok/err | out tok/s | x first | req/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | ITL p99 |",
       "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in runs:
    for l in r["levels"]:
        b = base.get(l["label"])
        ratio = l["output_tok_s"] / b["output_tok_s"] if b and b["output_tok_s"] > 0 else float("nan")
        out.append("| %s | %s | %d/%d | %.2f | %.2f | %.3f | %.0f | %.0f | %.1f | %.1f | %.1f |" % (
            r["label"], l["label"], l["ok"], l["errors"], l["output_tok_s"], ratio, l["req_s"],
            l["ttft_ms"]["p50"], l["ttft_ms"]["p99"], l["tpot_ms"]["p50"], l["tpot_ms"]["p99"], l["itl_ms"]["p99"]))
out += ["", "![throughput vs latency](%s)" % os.path.relpath(png, os.path.dirname(os.path.abspath(doc))), ""]
n = open(notes).read().strip()
if n:
    out += ["Notes:", ""] + ["- " + x for x in n.splitlines()] + [""]
open(doc, "w").write("\n".join(out))
print("wrote", doc)
PY
