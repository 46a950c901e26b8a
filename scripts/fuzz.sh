#!/usr/bin/env bash
# Builds the libFuzzer target (clang, -DWARDEN_FUZZ=ON) into build-fuzz and fuzzes the GGUF,
# safetensors and llama.cpp imatrix parsers for a bounded time.
#
#   scripts/fuzz.sh [SECONDS]      (default 60)
#
# The seed corpus is generated on the fly (a small GGUF with every metadata type and several
# tensor types, a small safetensors file, an imatrix.dat and a GGUF imatrix); inputs the fuzzer finds interesting accumulate
# in build-fuzz/corpus between runs. Exits non-zero if the fuzzer finds a crash, a leak, an
# out-of-memory or a timeout; the reproducer is left in build-fuzz/artifacts/.
# Environment: FUZZ_JOBS (parallel fuzzing processes, default 1), FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail

SECS="${1:-60}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-fuzz"
JOBS="${FUZZ_JOBS:-1}"

# A build directory configured before (scripts/test.sh's clang++ stage builds every target here,
# tests included) keeps its WARDEN_TESTS, so that nothing is rebuilt; a new one skips the tests.
tests_opt=()
[ -f "$BUILD/CMakeCache.txt" ] || tests_opt=(-DWARDEN_TESTS=OFF)
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release \
    -DWARDEN_FUZZ=ON "${tests_opt[@]}" >/dev/null
ninja -C "$BUILD" -j2 fuzz_gguf

SEEDS="$BUILD/seeds"
CORPUS="$BUILD/corpus"
ARTIFACTS="$BUILD/artifacts"
rm -rf "$SEEDS"
mkdir -p "$SEEDS" "$CORPUS" "$ARTIFACTS"

python3 - "$SEEDS" <<'PY'
import json, os, struct, sys

out = sys.argv[1]

def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b

# (type id, pack format) of the GGUF scalar types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
       U64: "<Q", I64: "<q", F64: "<d"}

def val(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(val(et, i) for i in items)
    return struct.pack(FMT[t], v)

def gguf(version, kvs, tensors, alignment=32):
    # tensors: (name, dims, type id, n_bytes[, bytes]); without bytes, a fixed pattern
    head = struct.pack("<IIQQ", 0x46554747, version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += s(k) + struct.pack("<I", t) + val(t, v)
    off, data = 0, b""
    for name, dims, tt, nb, *given in tensors:
        head += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", tt, off)
        blob = given[0] if given else bytes((i * 37 + 11) & 0xFF for i in range(nb))
        pad = (-nb) % alignment
        data += blob + b"\0" * pad
        off += nb + pad
    head += b"\0" * ((-len(head)) % alignment)
    return head + data

kvs = [
    ("general.architecture", STR, "llama"),
    ("general.alignment", U32, 32),
    ("llama.block_count", U32, 2), ("llama.context_length", U64, 2048),
    ("k.u8", U8, 7), ("k.i8", I8, -7), ("k.u16", U16, 700), ("k.i16", I16, -700),
    ("k.i32", I32, -70000), ("k.f32", F32, 0.5), ("k.bool", BOOL, 1), ("k.i64", I64, -1), ("k.f64", F64, 2.5),
    ("tokenizer.ggml.tokens", ARR, (STR, ["<s>", "</s>", "a", "b"])),
    ("tokenizer.ggml.scores", ARR, (F32, [0.0, -1.0, -2.0, -3.0])),
    ("tokenizer.ggml.token_type", ARR, (I32, [3, 3, 1, 1])),
    ("nested", ARR, (ARR, [(U8, [1, 2]), (STR, ["x"])])),
]
tensors = [
    ("token_embd.weight", [32, 4], 2, 4 * 18),     # Q4_0
    ("blk.0.attn_norm.weight", [8], 0, 32),        # F32
    ("blk.0.ffn_down.weight", [256, 1], 12, 144),  # Q4_K
    ("blk.0.ffn_up.weight", [256, 1], 14, 210),    # Q6_K
    ("output.weight", [32, 1], 8, 34),             # Q8_0
    ("x.bf16", [4, 2], 30, 16), ("x.f16", [4], 1, 8), ("x.q5_1", [32], 7, 24),
]
with open(os.path.join(out, "seed_v3.gguf"), "wb") as f:
    f.write(gguf(3, kvs, tensors))
with open(os.path.join(out, "seed_v2.gguf"), "wb") as f:
    f.write(gguf(2, kvs[:4], tensors[:2]))
with open(os.path.join(out, "seed_a64.gguf"), "wb") as f:
    f.write(gguf(3, [("general.alignment", U32, 64)], tensors[1:3], alignment=64))

def safetensors(entries, meta):
    header, data = {}, b""
    if meta:
        header["__metadata__"] = meta
    for name, dtype, shape, size in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + size]}
        data += bytes((i * 13 + 5) & 0xFF for i in range(size))
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data

with open(os.path.join(out, "seed.safetensors"), "wb") as f:
    f.write(safetensors([("a", "F32", [2, 3], 24), ("b", "BF16", [4], 8), ("c", "I8", [0, 2], 0),
                         ("d", "U8", [], 1), ("e", "F8_E4M3", [3], 3)], {"format": "pt"}))

# llama.cpp's imatrix.dat (save_imatrix): n; {len, name, ncall, nval, f32[nval]}; chunks; len, dataset.
def imatrix(entries, chunks, dataset):
    b = struct.pack("<i", len(entries))
    for name, ncall, vals in entries:
        b += struct.pack("<i", len(name)) + name.encode() + struct.pack("<ii", ncall, len(vals))
        b += struct.pack(f"<{len(vals)}f", *vals)
    return b + struct.pack("<ii", chunks, len(dataset)) + dataset.encode()

with open(os.path.join(out, "seed.imatrix.dat"), "wb") as f:
    f.write(imatrix([("blk.0.attn_q.weight", 2, [1.0, 2.0, 0.0, 8.0]), ("output.weight", 0, [3.5])], 2, "calib.txt"))

# The GGUF imatrix of later llama.cpp (save_imatrix, GGUF output): imatrix.* metadata; per matrix
# NAME.in_sum2 F32 [cols, n_mat] and NAME.counts F32 [1, n_mat] (here 2 experts, one never reached).
def f32_tensor(name, dims, vals):
    return (name, dims, 0, 4 * len(vals), struct.pack(f"<{len(vals)}f", *vals))

with open(os.path.join(out, "seed.imatrix.gguf"), "wb") as f:
    f.write(gguf(3, [("general.type", STR, "imatrix"), ("imatrix.datasets", ARR, (STR, ["calib.txt"])),
                       ("imatrix.chunk_count", U32, 4), ("imatrix.chunk_size", U32, 512)],
                      [f32_tensor("blk.0.attn_q.weight.in_sum2", [4, 1], [4.0, 8.0, 0.0, 2.0]),
                       f32_tensor("blk.0.attn_q.weight.counts", [1, 1], [4.0]),
                       f32_tensor("blk.0.ffn_up_exps.weight.in_sum2", [2, 2], [1.0, 2.0, 3.0, 4.0]),
                       f32_tensor("blk.0.ffn_up_exps.weight.counts", [1, 2], [2.0, 0.0])]))
PY

DICT="$BUILD/fuzz.dict"
cat >"$DICT" <<'DICT'
"GGUF"
"general.alignment"
"general.architecture"
"tokenizer.ggml.tokens"
"imatrix.datasets"
"imatrix.chunk_count"
"imatrix.chunk_size"
".in_sum2"
".counts"
"__metadata__"
"\"dtype\""
"\"shape\""
"\"data_offsets\""
"\"F32\""
"\"BF16\""
"\"F8_E4M3\""
"\"U64\""
"\x00\x00\x00\x00\x00\x00\x00\x80"
"\xff\xff\xff\xff\xff\xff\xff\xff"
"18446744073709551615"
"-1"
"1e99"
DICT

echo "fuzzing for ${SECS}s (jobs=$JOBS); corpus $CORPUS"
ARGS=(-max_total_time="$SECS" -max_len=65536 -rss_limit_mb=2048 -timeout=10 -dict="$DICT"
      -artifact_prefix="$ARTIFACTS/" -print_final_stats=1)
if [ "$JOBS" -gt 1 ]; then
    ARGS+=(-fork="$JOBS" -ignore_crashes=0)
fi
# shellcheck disable=SC2086
"$BUILD/fuzz_gguf" "${ARGS[@]}" ${FUZZ_ARGS:-} "$CORPUS" "$SEEDS"
