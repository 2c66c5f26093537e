#!/usr/bin/env python3
"""Checks the layers of the source tree (docs/architecture.md, "Layers"):
runtime/, actors/ and gpu/; the comment and include rules also
apps/actorflow/ and python/src/.

- runtime/: a folder includes only its own headers and those of the
  folders below it in LAYERS (gpu/, the compute layer, sits between core
  and the rest); actors/ may include any of runtime/ and gpu/, runtime/
  and gpu/ never include actors/.
- formats/ and image/ include no CAF.
- A header outside a detail/ folder (installed, cmake/ActorFlowInstall.cmake)
  includes no header under detail/.
- Every source file opens with a comment saying what it holds.
- Every include of ActorFlow's own headers is spelt as installed:
  "actorflow/runtime/...", never a bare "runtime/...".

Prints every violation with its file and line; exits 1 if there is one.
Usage: check_layers.py [SOURCE_ROOT]
"""
import os
import re
import sys

# Lowest first. A folder may include the folders before it.
LAYERS = ["testing", "core", "gpu", "formats", "image", "state", "protocol",
          "net", "stage", "ps", "topology", "job"]
RANK = {name: i for i, name in enumerate(LAYERS)}
# Layers that are plain C++ (file formats and image codecs): no CAF.
NO_CAF = {"formats", "image"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')
OWN = ("runtime/", "actors/", "gpu/", "proto/")


def layer_of(path):
    """The layer of a file or an include target ("runtime/core/x.hpp")."""
    parts = path.split("/")
    if parts[0] == "gpu":
        return "gpu"
    if parts[0] == "runtime" and len(parts) > 2:
        return parts[1]
    return None


def sources(root):
    for top in ("runtime", "actors", "gpu", "apps/actorflow", "python/src"):
        for folder, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith((".hpp", ".cpp", ".cu", ".cuh", ".in")):
                    full = os.path.join(folder, name)
                    yield os.path.relpath(full, root)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")
    problems = []
    checked = 0
    for rel in sources(root):
        checked += 1
        top = rel.split("/")[0]
        public = top in ("runtime", "actors", "gpu")
        mine = layer_of(rel)
        public = public and rel.endswith(".hpp") \
            and "/detail/" not in rel and "/cuda/" not in rel
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            first = f.readline()
            if not first.startswith("//"):
                problems.append(f"{rel}:1: opens without a comment saying "
                                "what the file holds")
            f.seek(0)
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                where = f"{rel}:{number}: {target}"
                if mine in NO_CAF and target.startswith("caf/"):
                    problems.append(f"{where}: layer '{mine}' uses no CAF")
                if target.startswith(OWN):
                    problems.append(f"{where}: include ActorFlow's headers "
                                    f"as \"actorflow/{target}\"")
                    continue
                if not target.startswith("actorflow/"):
                    continue
                target = target[len("actorflow/"):]
                if public and "/detail/" in target:
                    problems.append(f"{where}: an installed header includes "
                                    "an internal one (detail/)")
                if target.startswith("actors/") and top in ("runtime", "gpu"):
                    problems.append(f"{where}: {top}/ must not include "
                                    "actors/")
                theirs = layer_of(target)
                if mine is None or theirs is None or mine == theirs:
                    continue
                if RANK[theirs] > RANK[mine]:
                    problems.append(f"{where}: layer '{mine}' includes the "
                                    f"higher layer '{theirs}' (order: "
                                    + " < ".join(LAYERS) + ")")
    for p in problems:
        print(p)
    print(f"check_layers: {checked} files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
