#!/usr/bin/env bash
# Creates a gitignored venv from a pinned requirements file, reinstalling only when the file
# changes. Default: .venv with the Python test tooling (requirements-test.txt).
#   scripts/setup_venv.sh [VENV_DIR REQUIREMENTS_FILE]   (both relative to the repository root)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/${1:-.venv}"
reqs="$root/${2:-requirements-test.txt}"
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
stamp="$venv/.$(basename "$reqs" .txt).sha256"
want="$(sha256sum "$reqs" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -r "$reqs"
  echo "$want" > "$stamp"
fi
