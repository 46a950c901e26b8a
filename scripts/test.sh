#!/usr/bin/env bash
# README "test" command: installs what is needed, then runs every test:
#   0. the layer check (no include from a lower folder to a higher one, no folder cycle),
#   1. unit tests (GoogleTest via ctest) in a Release build,
#   2. the end-to-end tests (pytest: CLI contract, reference logits, bad input),
#   3. the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer,
#   4. a clang++ build (the code must compile with both compilers),
#   5. a bounded libFuzzer run of the GGUF and safetensors parsers.
# Set WARDEN_QUICK=1 to run only steps 1-2.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="$(nproc)"
section() { echo; echo "=== $* ==="; }

section "dependencies"
scripts/setup_deps.sh
scripts/fetch_model.sh
scripts/setup_venv.sh

section "layers (every include points downward; scripts/check_layers.py)"
python3 scripts/check_layers.py --self-test
python3 scripts/check_layers.py

section "build (g++, Release)"
scripts/build.sh build -DWARDEN_TESTS=ON

section "unit tests (Release)"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600

section "end-to-end tests (pytest)"
WARDEN_BIN="$root/build/warden" .venv/bin/python -m pytest -q tests/python

if [ "${WARDEN_QUICK:-0}" = "1" ]; then exit 0; fi

section "unit tests under ASan + UBSan"
scripts/build.sh build-asan -DWARDEN_TESTS=ON -DWARDEN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 1200

section "clang++ build"
scripts/build.sh build-clang -DCMAKE_CXX_COMPILER=clang++

section "fuzzing (bounded)"
scripts/fuzz.sh "${WARDEN_FUZZ_SECONDS:-60}"

# Reached only if every stage above succeeded (set -e).
echo
echo "test stages: 5 passed, 0 failed"
