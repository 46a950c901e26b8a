#!/usr/bin/env bash
# Creates the gitignored .venv-lmeval with lm-evaluation-harness (pinned in
# requirements-lmeval.txt), which the end-to-end tests drive against a live server; a venv of its
# own because its dependencies (datasets, pandas, scikit-learn) are large and the test tooling
# does not need them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -x "$root/.venv-lmeval/bin/python" ]; then python3 -m venv "$root/.venv-lmeval"; fi
stamp="$root/.venv-lmeval/.requirements-lmeval.sha256"
want="$(sha256sum "$root/requirements-lmeval.txt" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$root/.venv-lmeval/bin/python" -m pip install --quiet --upgrade pip
  "$root/.venv-lmeval/bin/python" -m pip install --quiet -r "$root/requirements-lmeval.txt"
  echo "$want" > "$stamp"
fi
