#!/usr/bin/env bash
# Installs llama.cpp's tokenizer test vectors into .cache/llama-vocab/ (gitignored): the
# models/ggml-vocab-*.gguf vocab-only files with their .inp/.out pairs, src/llama-vocab.cpp
# (its pre-tokenizer table) and tests/test-tokenizer-0.cpp (the .inp/.out format), taken from
# the llama_cpp_python sdist on PyPI, which vendors llama.cpp. The sdist's sha256 is pinned in
# models.sha256; a mismatch aborts. Used by tests/python/test_llama_vocab.py and
# tests/python/test_pretokenizer_table.py (which skip without it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=0.3.36
dest="$root/.cache/llama-vocab"
[ -f "$dest/llama.cpp-$version.done" ] && exit 0
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# pip prepares the sdist's metadata, which installs its build backend into a throwaway
# environment; nothing is built or installed.
python3 -m pip download --quiet --no-deps --no-binary :all: -d "$tmp" "llama_cpp_python==$version"
(cd "$tmp" && grep "llama_cpp_python-$version.tar.gz" "$root/scripts/models.sha256" | sha256sum -c --quiet -) \
  || { echo "fetch_vocab_tests: checksum mismatch for llama_cpp_python-$version.tar.gz" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest.part"
tar -xzf "$tmp/llama_cpp_python-$version.tar.gz" -C "$dest.part" --strip-components=3 --wildcards \
  "llama_cpp_python-$version/vendor/llama.cpp/models/ggml-vocab-*" \
  "llama_cpp_python-$version/vendor/llama.cpp/src/llama-vocab.cpp" \
  "llama_cpp_python-$version/vendor/llama.cpp/tests/test-tokenizer-0.cpp" \
  "llama_cpp_python-$version/vendor/llama.cpp/LICENSE"
mv "$dest.part" "$dest"
touch "$dest/llama.cpp-$version.done"
echo "fetch_vocab_tests: installed llama.cpp $version tokenizer tests in $dest"
