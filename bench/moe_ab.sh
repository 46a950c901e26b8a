#!/usr/bin/env bash
# A/B of two bench_moe_bench binaries (e.g. a commit and its parent, built side by side),
# alternating which runs first each round so a noisy minute hits both alike. Prints one line per
# measurement: round, binary (old/new), model, batch, tok/s (the bench's median of its rounds),
# then per model and batch the medians and the rounds the new binary led.
#
# Usage: OLD=path/to/old/bench_moe_bench NEW=build/bench_moe_bench bash bench/moe_ab.sh ROUNDS [bench args...]
#   e.g. ... bash bench/moe_ab.sh 6 --threads 2 --batch 1 --steps 32 --rounds 3 --experts int4
set -euo pipefail
: "${OLD:?set OLD to the baseline bench_moe_bench}" "${NEW:?set NEW to the candidate bench_moe_bench}"
rounds="${1:?rounds}"
shift
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for i in $(seq 1 "$rounds"); do
  if ((i % 2)); then order="old new"; else order="new old"; fi
  for b in $order; do
    bin="$OLD"; [[ $b == new ]] && bin="$NEW"
    # "glm-4.5-mini: 4 layers ..." names the model; "  batch  1: 243.7 tok/s ..." one measurement.
    "$bin" "$@" 2>&1 | awk -v b="$b" -v i="$i" '/^[a-z]/{m=$1; sub(":","",m)} /^ +batch/{sub(":","",$2); print i, b, m, $2, $3}' | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
vals = collections.defaultdict(lambda: collections.defaultdict(list))  # (model, batch) -> bin -> [tok/s]
per_round = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    r, b, m, batch, v = line.split()
    vals[(m, batch)][b].append(float(v))
    per_round[(m, batch, r)][b].append(float(v))
for (m, batch), d in sorted(vals.items()):
    rounds = [x for (mm, bb, _), x in per_round.items() if (mm, bb) == (m, batch) and len(x) == 2]
    led = sum(statistics.median(x["new"]) > statistics.median(x["old"]) for x in rounds)
    o, n = statistics.median(d["old"]), statistics.median(d["new"])
    print(f"{m} batch {batch}: old median {o:.1f} tok/s, new {n:.1f} ({n / o - 1:+.0%}), new led {led} of {len(rounds)} rounds")
PY
