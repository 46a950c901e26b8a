#!/usr/bin/env bash
# Decode tunings (kernels/decode_tuning.h) against each other in the engine: `warden run` batch-1
# decode of one model, ROUNDS rounds, each running every SPEC once (the order rotates), every run
# bracketed by two read-loop windows (bench/membw.cpp --seconds WINDOW_S) so it is set against the
# bandwidth of the seconds it ran in. The summary splits the runs by that bandwidth (the brackets'
# mean under 40 GB/s; at 45 or more), as bench/kernels/bench_tuning_ab.cpp does for the matmuls
# alone, and checks that every tuning generated the same text (they must: same result bits).
#
# Env: MODEL [bench/out/weights/llama-1b-bf16-warden-int4-g32.gguf], SPECS ["- q4avx2=1"] (each
#      a WARDEN_DECODE_TUNING value; "-" is this CPU's own table), ROUNDS [40], TG [64],
#      THREADS [2], WINDOW_S [0.5], WARDEN_BIN [build-int4/warden], OUT [bench/out/tuning_ab.tsv]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${MODEL:-$REPO/bench/out/weights/llama-1b-bf16-warden-int4-g32.gguf}"
SPECS="${SPECS:-- q4avx2=1}"
ROUNDS="${ROUNDS:-40}"
TG="${TG:-64}"
THREADS="${THREADS:-2}"
WINDOW_S="${WINDOW_S:-0.5}"
WARDEN_BIN="${WARDEN_BIN:-$REPO/build-int4/warden}"
OUT="${OUT:-$REPO/bench/out/tuning_ab.tsv}"
[[ -f "$MODEL" ]] || { echo "no model file $MODEL" >&2; exit 2; }
[[ "$ROUNDS" =~ ^[0-9]+$ && "$ROUNDS" -ge 1 && "$ROUNDS" -le 1000 ]] || { echo "ROUNDS must be 1..1000" >&2; exit 2; }
mkdir -p "$(dirname "$OUT")"
membw="$REPO/bench/out/membw"
[[ -x "$membw" && "$membw" -nt "$REPO/bench/membw.cpp" ]] || g++ -O3 -march=native -pthread -o "$membw" "$REPO/bench/membw.cpp"
bw() { "$membw" --threads "$THREADS" --reps 1 --seconds "$WINDOW_S" --json 2>/dev/null | grep -o "\"$THREADS\": [0-9.]*" | cut -d' ' -f2; }
read -r -a specs <<< "$SPECS"
n=${#specs[@]}
log="$(mktemp)"; trap 'rm -f "$log"' EXIT
printf 'round\tspec\ttok_s\tpre_gbps\tpost_gbps\toutput_md5\ttuning\n' > "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for k in $(seq 0 $((n - 1))); do
    spec="${specs[$(( (k + r) % n ))]}"
    env_spec="$spec"; [[ "$spec" == - ]] && env_spec=""
    pre="$(bw)"
    md5="$(WARDEN_DECODE_TUNING="$env_spec" "$WARDEN_BIN" run -m "$MODEL" -p "Once upon a time" -n "$TG" --threads "$THREADS" \
      --ignore-eos --temp 0 2> "$log" | md5sum | cut -c1-12)" || { echo "warden failed under '$spec':" >&2; cat "$log" >&2; exit 1; }
    post="$(bw)"
    tok="$(grep -o 'decode_tok_s=[0-9.]*' "$log" | cut -d= -f2)"
    tun="$(grep -o 'decode_tuning=[a-z0-9-]*' "$log" | cut -d= -f2)"
    # warden ignores a malformed WARDEN_DECODE_TUNING (with a warning) and runs its own table.
    if [[ "$spec" != - && "$tun" != env ]]; then
      echo "warden did not take WARDEN_DECODE_TUNING=$spec:" >&2; grep -i 'DECODE_TUNING' "$log" >&2; exit 2
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$spec" "$tok" "$pre" "$post" "$md5" "$tun" >> "$OUT"
  done
done
python3 - "$OUT" <<'PY'
import collections, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
outs = {r[5] for r in rows}
print(f"{len(rows)} runs; generated text identical across tunings: {'yes' if len(outs) == 1 else 'NO: ' + ' '.join(sorted(outs))}")
by_round = collections.defaultdict(dict)
for r in rows:
    by_round[r[0]][r[1]] = (float(r[2]), (float(r[3]) + float(r[4])) / 2, r[6])
specs = list(dict.fromkeys(r[1] for r in rows))
for name, lo, hi in (("all", 0, 1e9), ("brackets under 40 GB/s", 0, 40), ("brackets at 45 GB/s or more", 45, 1e9)):
    print(name + ":")
    for s in specs:
        v = [x[s] for x in by_round.values() if s in x and lo <= x[s][1] < hi]
        if not v:
            print(f"  {s:24s} no runs"); continue
        wins = sum(1 for x in by_round.values() if s in x and lo <= x[s][1] < hi and max(x, key=lambda k: x[k][0]) == s)
        print(f"  {s:24s} ({v[0][2]}) {len(v)} runs, median {statistics.median(t for t, _, _ in v):.2f} tok/s, "
              f"best {max(t for t, _, _ in v):.2f}, fastest of its round {wins} times")
PY
