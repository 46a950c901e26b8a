#!/usr/bin/env bash
# Regenerate the transformers 5.x golden files (tests/golden/models/tiny5-*; see the header of
# scripts/make_reference5.py) with a pinned venv at .venv-ref5 (gitignored), created on first
# use. The 4.57 goldens stay with scripts/make_reference.sh.
#
#   scripts/make_reference5.sh              # set up venv (if needed) and regenerate
#   scripts/make_reference5.sh --setup-only # only create/update the venv
#   scripts/make_reference5.sh --check      # recompute in a temp dir and compare; writes nothing
#
# Needs network access to PyPI only (the default torch wheel from PyPI; it is big).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${WARDEN_REF5_VENV:-$ROOT/.venv-ref5}"
PY="${PYTHON:-python3}"

PINS=(
  "torch==2.15.0"
  "transformers==5.23.0"
  "safetensors==0.8.0"
  "numpy==2.4.6"
)

if [[ ! -x "$VENV/bin/python" ]]; then
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" - "${PINS[@]}" <<'PYEOF'
import sys
from importlib.metadata import version, PackageNotFoundError
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        sys.exit(1)
    if have.split("+")[0] != want:
        sys.exit(1)
PYEOF
then
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q "${PINS[@]}"
fi

if [[ "${1:-}" == "--setup-only" ]]; then
  exit 0
fi
cd "$ROOT"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "$VENV/bin/python" "$ROOT/scripts/make_reference5.py" "$@"
