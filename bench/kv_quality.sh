#!/usr/bin/env bash
# KV quality bench: text from Python's bundled pydoc topics (no downloads), default model.
#   bench/kv_quality.sh [BUILD_DIR] [extra bench_kv_quality args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}; shift || true
text=$(mktemp /tmp/kvq_text.XXXXXX)
python3 -c "from pydoc_data.topics import topics; import sys; sys.stdout.write('\n\n'.join(topics[k] for k in sorted(topics)))" > "$text"
"$build/bench_kv_quality" -m models/SmolLM2-135M-Instruct.Q4_1.gguf --text "$text" "$@"
rm -f "$text"
