#!/usr/bin/env python3
"""check_layout.py -- the source tree's layers: every #include "..." of a
file under src/ names a header of its own folder or of a folder below it, in
the order docs/layout.md gives (LAYERS below); header names are unique.
Prints each include that runs up a layer and exits 1 if there is one.

  tests/tools/check_layout.py [TOP]     (TOP: the source tree; default .)
"""
import os
import re
import sys

# bottom to top; a folder may include its own headers and those of any
# folder before it in this list (cuda: the kernels' launchers, which the
# CUDA backends call; ddp_build.h: configure's)
LAYERS = ["ground", "guards", "config", "comm", "compute", "data", "model", "train", "watch",
          ".", "prep", "plot"]

top = sys.argv[1] if len(sys.argv) > 1 else "."
src = os.path.join(top, "src")
where = {}  # header basename -> layer
files = []
for root, _, names in os.walk(src):
    rel = os.path.relpath(root, src)
    layer = rel.split(os.sep)[0]
    for n in names:
        if not n.endswith((".c", ".h")):
            continue
        files.append((os.path.join(root, n), layer))
        if n.endswith(".h"):
            if n in where:
                print(f"check_layout: header name {n} is used twice (in {where[n]} and {layer})")
                sys.exit(1)
            where[n] = layer
bad = 0
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
for path, layer in sorted(files):
    if layer not in LAYERS:
        print(f"check_layout: {os.path.relpath(path, top)}: folder '{layer}' is not in the layer list")
        bad += 1
        continue
    for h in inc.findall(open(path, errors="replace").read()):
        hl = where.get(os.path.basename(h))
        if hl is None:
            continue  # cuda/, the emulation's, configure's ddp_build.h
        if LAYERS.index(hl) > LAYERS.index(layer):
            print(f"check_layout: {os.path.relpath(path, top)} ({layer}) includes {h} ({hl}), a layer above it")
            bad += 1
print(f"check_layout: {len(files)} files in {len(set(l for _, l in files))} folders, {bad} include(s) running up a layer")
sys.exit(1 if bad else 0)
