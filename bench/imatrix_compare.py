"""Compares two llama.cpp importance matrices entry by entry (GGUF or legacy imatrix.dat, each read
as llama-quantize reads it: in_sum2 / count, or values / ncall): per entry the relative L2
difference |a - b| / |b| and the correlation, then their median and worst over all entries.

    .venv/bin/python bench/imatrix_compare.py A B
"""
import struct
import sys

import numpy as np


def read(path: str) -> dict[str, np.ndarray]:
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        import gguf

        r = gguf.GGUFReader(path)
        sums, counts = {}, {}
        for t in r.tensors:
            if t.name.endswith(".in_sum2"):
                sums[t.name[:-8]] = np.asarray(t.data, dtype=np.float64).reshape(-1, int(t.shape[0]))
            elif t.name.endswith(".counts"):
                counts[t.name[:-7]] = np.asarray(t.data, dtype=np.float64).reshape(-1)
        out = {}
        for n, s in sums.items():
            c = counts[n]
            out[n] = np.where(c[:, None] > 0, s / np.maximum(c[:, None], 1e-300), 1.0).reshape(-1)
        return out
    b = open(path, "rb").read()
    (n,), o, out = struct.unpack_from("<i", b, 0), 4, {}
    for _ in range(n):
        (ln,) = struct.unpack_from("<i", b, o)
        name = b[o + 4:o + 4 + ln].decode()
        o += 4 + ln
        ncall, nval = struct.unpack_from("<ii", b, o)
        o += 8
        v = np.frombuffer(b, dtype="<f4", count=nval, offset=o).astype(np.float64)
        o += 4 * nval
        out[name] = v / ncall if ncall > 0 else v
    return out


def main() -> None:
    a, b = read(sys.argv[1]), read(sys.argv[2])
    common = sorted(set(a) & set(b))
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    rel, cor = [], []
    worst = ("", 0.0)
    for n in common:
        x, y = a[n], b[n]
        if x.shape != y.shape:
            print(f"{n}: shapes differ {x.shape} vs {y.shape}")
            continue
        r = float(np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-30))
        rel.append(r)
        cor.append(float(np.corrcoef(x, y)[0, 1]) if x.std() > 0 and y.std() > 0 else 1.0)
        if r > worst[1]:
            worst = (n, r)
    print(f"entries: {len(common)} common, {len(only_a)} only in A {only_a[:4]}, {len(only_b)} only in B {only_b[:4]}")
    print(f"relative L2 difference: median {np.median(rel):.4f}, mean {np.mean(rel):.4f}, max {worst[1]:.4f} ({worst[0]})")
    print(f"correlation: median {np.median(cor):.5f}, min {np.min(cor):.5f}")


if __name__ == "__main__":
    main()
