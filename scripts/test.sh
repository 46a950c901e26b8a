#!/usr/bin/env bash
# README "test" command: installs what is needed, then runs every test:
#   0. the layer check (no include from a lower folder to a higher one, no folder cycle),
#   1. unit tests (GoogleTest via ctest) in a Release build,
#   2. the end-to-end tests (pytest: CLI contract, reference logits, bad input),
#   3. the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer,
#   4. a clang++ build of every target, the benchmarks included (the code must compile with both
#      compilers),
#   5. a bounded libFuzzer run of the GGUF and safetensors parsers.
# Set WARDEN_QUICK=1 to run only steps 1-2.
#
# Builds are shared where they can be: the clang++ build of step 4 is the libFuzzer build of
# step 5 (clang++, every target, instrumented), so clang compiles the library once; step 3
# builds only the test binary. ccache is used when installed. Each stage's wall time is printed
# as it ends, and all of them at the end.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="$(nproc)"
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null 2>&1; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi

stage_names=()
stage_secs=()
stage_start=0
current=""
tests_passed=0
section() {
  end_section
  current="$*"
  stage_start=$SECONDS
  echo; echo "=== $* ==="
}
end_section() {
  if [ -n "$current" ]; then
    local t=$((SECONDS - stage_start))
    stage_names+=("$current")
    stage_secs+=("$t")
    echo "--- $current: ${t} s"
    current=""
  fi
}
summary() {
  echo
  echo "stage times:"
  local i
  for i in "${!stage_names[@]}"; do
    printf '  %6d s  %s\n' "${stage_secs[$i]}" "${stage_names[$i]}"
  done
  printf '  %6d s  total\n' "$SECONDS"
}
# On a failure (set -e), the stage that failed is reported with the times so far.
on_exit() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    [ -n "$current" ] && echo "--- $current: FAILED after $((SECONDS - stage_start)) s"
    current=""
    summary
    echo "test stages: $tests_passed passed, 1 failed"
  fi
}
trap on_exit EXIT

section "dependencies"
scripts/setup_deps.sh
scripts/fetch_model.sh
scripts/fetch_vocab_tests.sh
scripts/setup_venv.sh
# lm-evaluation-harness in a venv of its own: its dependencies (datasets, pandas, scikit-learn)
# are large and the test tooling does not need them.
scripts/setup_venv.sh .venv-lmeval requirements-lmeval.txt

section "layers (every include points downward; scripts/check_layers.py)"
python3 scripts/check_layers.py --self-test
python3 scripts/check_layers.py

section "formatting (clang-format --dry-run --Werror, .clang-format)"
git ls-files '*.cpp' '*.h' | xargs clang-format --dry-run --Werror

section "build (g++, Release)"
scripts/build.sh build -DWARDEN_TESTS=ON

section "unit tests (Release)"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600
tests_passed=$((tests_passed + 1))

section "end-to-end tests (pytest)"
WARDEN_BIN="$root/build/warden" WARDEN_LM_EVAL="$root/.venv-lmeval/bin/lm_eval" \
  .venv/bin/python -m pytest -q tests/python
tests_passed=$((tests_passed + 1))

if [ "${WARDEN_QUICK:-0}" = "1" ]; then
  end_section
  summary
  echo "test stages: $tests_passed passed, 0 failed"
  exit 0
fi

section "unit tests under ASan + UBSan (build)"
# Only the test binary: the sanitizers check what the tests run. WARDEN_SANITIZE compiles at -O1
# (CMakeLists.txt); -g1 (line tables) is enough for file:line in the sanitizers' stack traces and
# compiles faster than full debug info.
cmake -S . -B build-asan -G Ninja -DWARDEN_TESTS=ON -DWARDEN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-g1 -DNDEBUG" >/dev/null
ninja -C build-asan -j "$jobs" warden_tests

section "unit tests under ASan + UBSan"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 1200
tests_passed=$((tests_passed + 1))

section "clang++ build (every target, the benchmarks included; shared with fuzzing)"
# The benchmark programs are built here only, so they stay buildable without a stage of their own.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release \
  -DWARDEN_FUZZ=ON -DWARDEN_TESTS=ON -DWARDEN_BENCH=ON >/dev/null
ninja -C build-fuzz -j "$jobs"
tests_passed=$((tests_passed + 1))

section "fuzzing (bounded)"
scripts/fuzz.sh "${WARDEN_FUZZ_SECONDS:-60}"
tests_passed=$((tests_passed + 1))

end_section
summary
# Reached only if every stage above succeeded (set -e).
echo
echo "test stages: $tests_passed passed, 0 failed"
