#!/usr/bin/env bash
# Creates the gitignored .venv with the Python test tooling (pinned in requirements-test.txt).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -x "$root/.venv/bin/python" ]; then python3 -m venv "$root/.venv"; fi
stamp="$root/.venv/.requirements-test.sha256"
want="$(sha256sum "$root/requirements-test.txt" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$root/.venv/bin/python" -m pip install --quiet --upgrade pip
  "$root/.venv/bin/python" -m pip install --quiet -r "$root/requirements-test.txt"
  echo "$want" > "$stamp"
fi
