#!/usr/bin/env python3
"""Writes the quality-benchmark text: Python's bundled pydoc topics, generated at bench time
(deterministic: sorted topic names). Usage: weights_text.py OUT [MAX_CHARS]"""
import sys

from pydoc_data.topics import topics

out = sys.argv[1]
max_chars = int(sys.argv[2]) if len(sys.argv) > 2 else 400_000
text = "\n\n".join(topics[k] for k in sorted(topics))[:max_chars]
with open(out, "w", encoding="utf-8") as f:
    f.write(text)
print(f"{out}: {len(text)} chars from {len(topics)} topics", file=sys.stderr)
