#!/usr/bin/env python3
"""Replaces fuzz/corpus/<target>/ by its seeds plus a capped minimized corpus, to keep the
committed corpora small (CI replays them all). Usage, from the repository root, after a
campaign:

    fuzz/target/.../release/<target> -merge=1 MIN_DIR fuzz/corpus/<target>   # per target
    python3 fuzz/trim.py MIN_ROOT                                           # MIN_ROOT/<target>/

Keeps every `seed-*` file (fuzz/seed.py) and, smallest first, the merged inputs (libFuzzer's
-merge=1 output: inputs that add coverage) up to BUDGET bytes per target."""

import hashlib
import os
import sys

BUDGET = 384 * 1024

root = sys.argv[1]
for target in sorted(os.listdir(root)):
    merged = os.path.join(root, target)
    corpus = os.path.join("fuzz", "corpus", target)
    if not os.path.isdir(merged) or not os.path.isdir(corpus):
        continue
    seeds = {}
    for name in os.listdir(corpus):
        path = os.path.join(corpus, name)
        if name.startswith("seed-"):
            with open(path, "rb") as f:
                seeds[hashlib.sha1(f.read()).hexdigest()] = name
        else:
            os.remove(path)
    files = sorted(
        (os.path.getsize(os.path.join(merged, n)), n) for n in os.listdir(merged)
    )
    used, kept = 0, 0
    for size, name in files:
        with open(os.path.join(merged, name), "rb") as f:
            data = f.read()
        digest = hashlib.sha1(data).hexdigest()
        if digest in seeds:
            continue
        if used + size > BUDGET:
            break
        with open(os.path.join(corpus, digest), "wb") as f:
            f.write(data)
        used += size
        kept += 1
    print(f"{target}: {len(seeds)} seeds + {kept} of {len(files)} merged inputs ({used} bytes)")
