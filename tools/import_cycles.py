#!/usr/bin/env python3
"""Fails when files of the crate import each other in a loop (`make test`, test-structure).

A file imports another when it names an item of the other's module by path: `use
crate::residency::core::manager::Manager`, `crate::shim::make(...)`, `super::trace::Trace`, or
`self::core::...`. A path is resolved to the deepest module that has a file (`a/b.rs` or
`a/b/mod.rs`); a path that stops at a module's re-export (`crate::residency::Config`) is an
import of that module's file, as the compiler reads it. A folder's `mod.rs` naming its own
files (declaring them, re-exporting their items) is the folder's facade, not an import. Methods of a type defined in another
file (`impl Manager` blocks) are not imports: only named paths are.

    python3 tools/import_cycles.py [src]
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_]\w*)+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)((?:::\w+)*)::\{([^;]*)\};", re.S)


def module_of(file: Path, src: Path) -> tuple[str, ...]:
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return tuple(parts)


def is_dir_module(file: Path) -> bool:
    return file.name in ("mod.rs", "lib.rs")


def main() -> int:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "src")
    files = {module_of(f, src): f for f in src.rglob("*.rs")}

    def resolve(start: tuple[str, ...], segments: list[str]) -> tuple[str, ...] | None:
        """The deepest module with a file along `start` + `segments`."""
        module, best = start, (start if start in files else None)
        for name in segments:
            module = module + (name,)
            if module not in files:
                break
            best = module
        return best

    edges: dict[tuple[str, ...], set[tuple[str, ...]]] = {m: set() for m in files}
    for me, file in files.items():
        text = re.sub(r"//[^\n]*", "", file.read_text())
        # The module `self` names (a file's own, a folder's for its mod.rs), and `super` its parent.
        here = me
        paths = list(PATH.findall(text))
        for root, prefix, group in USE_GROUP.findall(text):
            paths += [(root, f"{prefix}::{item.strip().split('::')[0].split(' ')[0]}")
                      for item in group.split(",") if item.strip() not in ("", "self")]
        for root, rest in paths:
            segments = [s for s in rest.split("::") if s]
            start = {"crate": (), "self": here, "super": here[:-1]}[root]
            while segments and segments[0] == "super":
                segments.pop(0)
                start = start[:-1]
            target = resolve(start, segments)
            # A folder's module file declaring and re-exporting its own files is its facade, not
            # an import: its files may still call it.
            facade = is_dir_module(file) and target is not None and target[: len(me)] == me
            if target is not None and target != me and not facade:
                edges[me].add(target)

    # Tarjan's strongly connected components: any of more than one file is a loop.
    index: dict = {}
    low: dict = {}
    stack: list = []
    on: set = set()
    loops: list[list] = []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                loops.append(component)

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    for component in loops:
        names = sorted(str(files[m]) for m in component)
        print("files importing each other in a loop:", *names, sep="\n  ")
        for m in sorted(component):
            inside = sorted(str(files[t]) for t in edges[m] if t in component)
            print(f"  {files[m]} -> {', '.join(inside)}")
    if not loops:
        print(f"import_cycles: {len(files)} files, no loop")
    return 1 if loops else 0


if __name__ == "__main__":
    sys.exit(main())
