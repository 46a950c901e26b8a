#!/usr/bin/env bash
# README "run" command: installs what is needed, builds warden and runs it on the default model.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup_deps.sh"
"$root/scripts/fetch_model.sh"
"$root/scripts/build.sh" "$root/build" -DWARDEN_TESTS=OFF
exec "$root/build/warden" run -m "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
  -p "${WARDEN_PROMPT:-The three primary colors are}" -n "${WARDEN_N:-48}" --temp 0 "$@"
