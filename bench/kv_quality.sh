#!/usr/bin/env bash
# KV quality bench: text from Python's bundled pydoc topics (no downloads), default model.
#   bench/kv_quality.sh [BUILD_DIR] [extra bench_kv_quality args...]
# e.g. nice -n 19 bench/kv_quality.sh build-kvqual --threads 2
# The text depends on the Python version (the results in docs/KV_QUANT.md used Python 3.11.7).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}; shift || true
model=${KVQ_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
text=$(mktemp /tmp/kvq_text.XXXXXX)
trap 'rm -f "$text"' EXIT
python3 -c "from pydoc_data.topics import topics; import sys; sys.stdout.write('\n\n'.join(topics[k] for k in sorted(topics)))" > "$text"
echo "python $(python3 -c 'import sys; print(sys.version.split()[0])'), text $(wc -c < "$text") bytes, model $model"
"$build/bench_kv_quality" -m "$model" --text "$text" "$@"
