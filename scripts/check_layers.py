#!/usr/bin/env python3
"""Fails when a source file under src/ includes a header from a higher layer.

The folders of src/ form layers; a file may include headers of its own folder and of folders
in LOWER layers only. Folders in the same layer are independent of each other. Because every
allowed include points strictly downward, no folder cycle can form.

Usage: scripts/check_layers.py [--root DIR]   check the tree (default: the repository)
       scripts/check_layers.py --self-test    check the checker on made-up trees
"""

import argparse
import os
import re
import sys
import tempfile

# The one declaration of the layer order, lowest first. Each entry is one layer: a list of
# folders of src/ that may include every folder of the entries before it.
LAYERS = [
    ["util"],  # errors, logging, threads, mapped files
    ["tensor"],  # dtypes, float conversion, ggml block types, weight/KV format descriptors
    ["kernels"],  # matmul, attention, ops per ISA
    ["formats"],  # GGUF / safetensors / compressed-tensors readers and writers
    ["quant"],  # quantization algorithms, imatrix files
    ["tokenizer", "chat_template", "chat_output"],  # text <-> tokens; the Jinja chat-template renderer; parsing chat output (reasoning, tool calls)
    ["constrain"],  # structured outputs: grammars, their compilers, token masks
    ["model", "kv"],  # forward passes and loaders; the paged KV cache
    ["engine", "convert"],  # scheduling and sampling; whole-checkpoint quantization
    ["transfer"],  # KV pages between prefill and decode servers (UCX), the disaggregated roles
    ["server"],  # the OpenAI-compatible HTTP front end
    ["router"],  # `warden router`: forwards completions to decode servers (reuses server/ pieces)
    ["launch"],  # the CLI option structs and the engine assembly, shared by cli/ and tools/
    ["tools"],  # the load generator and the evaluation harness
    ["cli"],  # the `warden` subcommands
]

# Folders that must not include one another even where the order above allows it: the text side
# (tokens, chat templates, chat output, structured outputs) and the tensor side (forward passes,
# KV cache) meet only above them (engine/, launch/: the tokenizer is loaded beside the model).
INDEPENDENT = [(["tokenizer", "chat_template", "chat_output", "constrain"], ["model", "kv"])]

# Includes still going upward, as (including file or folder prefix, included header) with the
# reason. An entry here is debt to pay, not a rule.
KNOWN_EXCEPTIONS: set[tuple[str, str]] = set()


def is_known_exception(rel, inc):
    return any(rel.startswith(prefix) and inc == header for prefix, header in KNOWN_EXCEPTIONS)

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
SOURCE_EXTS = (".h", ".hpp", ".cpp", ".cc", ".inc")


def layer_of():
    out = {}
    for level, folders in enumerate(LAYERS):
        for f in folders:
            out[f] = level
    return out


def independent(a, b):
    return any((a in x and b in y) or (a in y and b in x) for x, y in INDEPENDENT)


def check(root):
    """Returns a list of violation lines for the tree at root (empty: clean)."""
    levels = layer_of()
    src = os.path.join(root, "src")
    problems = []
    for folder in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, folder)):
            continue
        if folder not in levels:
            problems.append(f"src/{folder}/: folder not declared in LAYERS (scripts/check_layers.py)")
            continue
        for dirpath, _, files in os.walk(os.path.join(src, folder)):
            for name in sorted(files):
                if not name.endswith(SOURCE_EXTS):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                for inc in INCLUDE_RE.findall(text):
                    target = inc.split("/", 1)[0] if "/" in inc else None
                    if target is None or target == folder or target not in levels:
                        continue  # same folder, or not a src/ folder (tests/, system)
                    apart = independent(folder, target)
                    if levels[target] < levels[folder] and not apart:
                        continue
                    if is_known_exception(rel, inc):
                        continue
                    if apart:
                        how = "independent sides"
                    elif levels[target] == levels[folder]:
                        how = "same layer"
                    else:
                        how = "upward"
                    problems.append(f"{rel}: includes \"{inc}\" ({how}: {folder} may not depend on {target})")
    return problems


def self_test():
    """The checker must pass a clean tree and fail an upward, a same-layer, an undeclared and an
    independent-sides include."""

    def make_tree(files):
        d = tempfile.mkdtemp(prefix="check_layers_")
        for rel, text in files.items():
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as fh:
                fh.write(text)
        return d

    clean = {
        "src/util/error.h": "#pragma once\n",
        "src/kernels/ops.h": '#include "util/error.h"\n#include <vector>\n',
        "src/model/m.cpp": '#include "kernels/ops.h"\n#include "model/m.h"\n',
    }
    cases = [
        ("clean", clean, 0),
        ("upward", dict(clean, **{"src/util/bad.h": '#include "kernels/ops.h"\n'}), 1),
        ("same layer", dict(clean, **{"src/kv/bad.cpp": '  #  include "model/m.h"\n'}), 1),
        ("undeclared folder", dict(clean, **{"src/newdir/x.cpp": "\n"}), 1),
        ("independent", dict(clean, **{"src/tokenizer/t.h": "\n",
                                       "src/model/t.cpp": '#include "tokenizer/t.h"\n'}), 1),
    ]
    ok = True
    for name, files, want in cases:
        got = check(make_tree(files))
        if len(got) != want:
            ok = False
            print(f"self-test '{name}': expected {want} violation(s), got {got}")
    print("check_layers self-test: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    problems = check(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} include(s) against the layer order", file=sys.stderr)
        return 1
    print("check_layers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
