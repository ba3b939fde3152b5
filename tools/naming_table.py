#!/usr/bin/env python3
"""Checks the README's naming table (`make test`, test-structure): every C name it gives is in the
ABI manifest, and every Rust, C++, C# and Python name is defined in that language's sources, so the
table cannot drift from the code.

A cell lists names in backquotes. A C name is looked up among the manifest's functions, structs,
struct fields, enums, enum values, callbacks and constants (and the add-ons' sections); a name with a `_*` or a
trailing `_` is a prefix. In the other columns each segment of a name's path (`residency::Config`:
`residency` and `Config`) must be defined in the language's sources: a function,
type, variant, property, method or module of that name (a word of the code, comments left out). Quoted strings (`"cuda"`) and cells of
plain words are not names.

    python3 tools/naming_table.py
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {
    "Rust": (["src"], ["*.rs"]),
    "C++": (["include"], ["*.hpp"]),
    "C#": (["bindings/dotnet/src", "bindings/dotnet/minilm"], ["*.cs"]),
    "Python": (["bindings/python/tensorref", "bindings/python/tensorref_minilm"], ["*.py"]),
}


def table(readme: str) -> tuple[list[str], list[list[str]]]:
    lines = readme.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("| concept | C |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return header, rows


def manifest_names() -> set[str]:
    manifest = json.loads((ROOT / "include/tensorref_abi.json").read_text())
    sections = [manifest, *manifest.get("features", {}).values()]
    names = set()
    for s in sections:
        for key in ("functions", "structs", "callbacks", "constants", "opaque"):
            names |= {item["name"] for item in s.get(key, [])}
        for st in s.get("structs", []):
            names |= {f["name"] for f in st.get("fields", [])}
        for e in s.get("enums", []):
            names.add(e["name"])
            names |= {v["name"] for v in e["values"]}
    return names


def words(language: str) -> set[str]:
    folders, patterns = SOURCES[language]
    found = set()
    for folder in folders:
        for pattern in patterns:
            for path in (ROOT / folder).rglob(pattern):
                code = re.sub(r"//[^\n]*" if pattern != "*.py" else r"#[^\n]*", "", path.read_text())
                found |= set(re.findall(r"[A-Za-z_]\w*", code))
    return found


def names_in(cell: str) -> list[str]:
    return [n for n in re.findall(r"`([^`]+)`", cell) if not n.startswith('"')]


def main() -> int:
    header, rows = table((ROOT / "README.md").read_text())
    c_names = manifest_names()
    defined = {language: words(language) for language in SOURCES}
    problems = []
    for row in rows:
        concept = row[0]
        for column, cell in zip(header[1:], row[1:]):
            for name in names_in(cell):
                if column == "C":
                    prefix = name.rstrip("*").rstrip("_")
                    ok = name in c_names or (name != prefix and any(n.startswith(prefix) for n in c_names))
                    # `tr_residency_timeline_start`, `_write`: a suffix of the name before it.
                    ok = ok or (name.startswith("_") and any(n.endswith(name) for n in c_names))
                elif column in defined:
                    segments = [seg.split("(")[0].split(" ")[0] for seg in re.split(r"::|\.", name)]
                    # `tr` is how Python programs import the package (`import tensorref as tr`).
                    ok = all(not seg or seg == "tr" or seg in defined[column] for seg in segments)
                else:
                    continue
                if not ok:
                    problems.append(f"{concept}: {column} `{name}`")
    for p in problems:
        print("README naming table names what the code does not define:", p)
    if not problems:
        print(f"naming_table: {len(rows)} rows, every name defined")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
