"""The manifest of the C ABI: every function, struct, enum, callback type and constant of the
committed header include/tensorref.h (and the headers it includes), read by a real C parser.

    build(header: Path, features: dict[str, Path]) -> dict
        # what tools/gen.py writes to include/tensorref_abi.json

A Cargo feature's add-on has a header of its own that includes tensorref.h (the `models`
feature: include/tensorref_minilm.h). Its declarations are not the core's: they are listed
apart, under `features` -> the feature's name, with the same keys plus `header`, so that each
binding declares them in the add-on's own package and the core never names them. The core's keys
hold the core alone.

The header is preprocessed by the system's C compiler (`cc -E`, C11) against the stand-in
standard headers of tools/c_std, so that every type keeps the name the header gives it
(`uint64_t`, `bool`, `tr_dtype`), and parsed by pycparser. Object-like macros are listed by the
preprocessor itself (`cc -dM`) and evaluated by parsing one declaration per macro. Doc comments,
which a C parser discards, are taken from the lines right above each declaration the parser
located.

Types are spelled canonically: `struct tr_tensor`, `const int64_t *`, `const char *const *`.
The fields of tr_residency_stats say whether each is a gauge (a level now: bytes held, the budget)
rather than a counter (`gauge`, from GAUGES below), so the bindings' `since` keeps gauges as they
are and subtracts counters. The status groups (`status_groups`: name, first and last code, doc) are the list items of
tr_status's doc comment (`- 200-299 handle: ...`), checked to hold every code but TR_OK once.
Every binding's declarations are generated from this manifest, never from the header's text.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from pycparser import c_ast, c_parser

C_STD = Path(__file__).resolve().parent / "c_std"


def _preprocess(source: str, include_dir: Path, *flags: str) -> str:
    cmd = ["cc", "-E", "-std=c11", "-nostdinc", "-isystem", str(C_STD), "-I", str(include_dir),
           *flags, "-x", "c", "-"]
    run = subprocess.run(cmd, input=source, capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(f"abi_manifest: the C preprocessor failed:\n{run.stderr}")
    return run.stdout


def _macros(source: str, include_dir: Path) -> dict[str, str]:
    """Object-like macros `source` defines, beyond the compiler's and the standard headers'."""
    def defined(src):
        out = {}
        for line in _preprocess(src, include_dir, "-dM").splitlines():
            _, name, *value = line.split(" ", 2)
            if "(" not in name:
                out[name] = value[0] if value else ""
        return out
    base = defined("".join(f"#include <{h}>\n" for h in ("stdbool.h", "stddef.h", "stdint.h")))
    return {k: v for k, v in defined(source).items() if k not in base and v}


# Typedef names that stand for a struct (`typedef struct tr_tensor {...} tr_tensor;`): a type
# written with one is spelled `struct tr_tensor`, however the header wrote it.
_struct_typedefs: set[str] = set()


def type_name(node) -> str:
    """A declarator's type, canonically spelled: `const int64_t *`, `const char *const *`,
    `struct tr_tensor`."""
    if isinstance(node, c_ast.TypeDecl):
        base = node.type
        if isinstance(base, c_ast.IdentifierType):
            name = " ".join(base.names)
            if name in _struct_typedefs:
                name = f"struct {name}"
        elif isinstance(base, (c_ast.Struct, c_ast.Enum)):
            name = f"{'struct' if isinstance(base, c_ast.Struct) else 'enum'} {base.name}"
        else:
            raise SystemExit(f"abi_manifest: unsupported type {base!r}")
        return " ".join(node.quals + [name])
    if isinstance(node, c_ast.PtrDecl):
        inner = type_name(node.type)
        return inner + ("*" if inner.endswith("*") else " *") + "".join(node.quals)
    raise SystemExit(f"abi_manifest: unsupported declarator {node!r} (a function type needs a typedef)")


def _params(func: c_ast.FuncDecl) -> list[dict]:
    out = []
    for p in (func.args.params if func.args else []):
        t = type_name(p.type)
        if t == "void":
            continue
        out.append({"name": p.name, "type": t})
    return out


def _value(expr) -> int:
    if isinstance(expr, c_ast.Constant) and expr.type in ("int", "unsigned int", "long int", "unsigned long int", "long long int", "unsigned long long int"):
        return int(expr.value.rstrip("uUlL"), 0)
    if isinstance(expr, c_ast.UnaryOp) and expr.op == "-":
        return -_value(expr.expr)
    raise SystemExit(f"abi_manifest: a constant that is not an integer literal: {expr!r}")


class _Docs:
    """Doc comments above declarations, by the file and line the parser reports."""

    def __init__(self):
        self.files: dict[str, list[str]] = {}

    def above(self, coord) -> str:
        if coord is None or not coord.file or not Path(coord.file).is_file():
            return ""
        lines = self.files.setdefault(coord.file, Path(coord.file).read_text().splitlines())
        i = coord.line - 2
        if i < 0 or not lines[i].strip().endswith("*/"):
            return ""
        block = []
        while i >= 0:
            block.append(lines[i].strip())
            if lines[i].strip().startswith("/*"):
                break
            i -= 1
        text = []
        for line in reversed(block):
            for cut in ("/**", "/*", "*/"):
                line = line.replace(cut, "") if cut != "*/" else line.removesuffix("*/")
            line = line.strip()
            line = line[1:] if line.startswith("*") else line
            text.append(line.strip())
        return "\n".join(text).strip()


# The gauges of each statistics struct: every other field counts events since the manager was
# configured. A new field is a counter unless listed here.
GAUGES = {"tr_residency_stats": {"budget", "device_bytes", "peak_device_bytes", "pinned_bytes",
                                 "reserved_bytes", "peak_reserved_bytes"}}


def _name(item) -> str:
    return item if isinstance(item, str) else item["name"]


def build(header: Path, features: dict[str, Path] | None = None) -> dict:
    """The core's declarations (`header` and what it includes) and, under `features`, each
    feature header's own: those it adds to the core's."""
    out = _parse(header)
    out["features"] = {}
    for feature, feature_header in (features or {}).items():
        whole = _parse(feature_header)
        section: dict = {"header": feature_header.name}
        for key, items in whole.items():
            core = {_name(i) for i in out[key]}
            section[key] = [i for i in items if _name(i) not in core]
        out["features"][feature] = section
    return out


def _parse(header: Path) -> dict:
    include_dir = header.parent
    source = f'#include "{header.name}"\n'
    macros = _macros(source, include_dir)
    probes = "".join(f"static const long long __manifest_{k} = {k};\n" for k in sorted(macros))
    text = _preprocess(source + probes, include_dir)
    ast = c_parser.CParser().parse(text, "<manifest>")
    _struct_typedefs.clear()
    _struct_typedefs.update(n.name for n in ast.ext if isinstance(n, c_ast.Typedef)
                            and isinstance(n.type, c_ast.TypeDecl) and isinstance(n.type.type, c_ast.Struct)
                            and n.name == n.type.type.name)
    docs = _Docs()
    out: dict = {"functions": [], "inline_functions": [], "structs": [], "opaque": [], "enums": [],
                 "callbacks": [], "constants": []}
    enum_types: dict[str, str] = {}

    for node in ast.ext:
        if isinstance(node, c_ast.FuncDef):
            out["inline_functions"].append(node.decl.name)
        elif isinstance(node, c_ast.Typedef):
            t = node.type
            if isinstance(t, c_ast.TypeDecl) and isinstance(t.type, c_ast.Struct) and t.type.decls is not None:
                out["structs"].append(_struct(t.type, docs, docs.above(node.coord) or docs.above(t.type.coord)))
            elif isinstance(t, c_ast.TypeDecl) and isinstance(t.type, c_ast.Struct):
                # An opaque struct (`typedef struct tr_minilm tr_minilm;`): only ever behind a pointer.
                out["opaque"].append({"name": node.name, "doc": docs.above(node.coord)})
            elif isinstance(t, c_ast.PtrDecl) and isinstance(t.type, c_ast.FuncDecl):
                f = t.type
                out["callbacks"].append({"name": node.name, "doc": docs.above(node.coord),
                                         "return": type_name(f.type), "params": _params(f)})
            elif isinstance(t, c_ast.TypeDecl) and isinstance(t.type, c_ast.IdentifierType):
                enum_types[node.name] = " ".join(t.type.names)
        elif isinstance(node, c_ast.Decl):
            if node.name and node.name.startswith("__manifest_"):
                name = node.name.removeprefix("__manifest_")
                out["constants"].append({"name": name, "value": _value(node.init)})
            elif isinstance(node.type, c_ast.FuncDecl):
                f = node.type
                out["functions"].append({"name": node.name, "header": Path(node.coord.file).name,
                                         "doc": docs.above(node.coord),
                                         "return": type_name(f.type), "params": _params(f)})
            elif isinstance(node.type, c_ast.Enum) and node.type.values is not None:
                out["enums"].append(_enum(node.type, docs, docs.above(node.coord)))
            elif isinstance(node.type, c_ast.Struct) and node.type.decls is not None:
                out["structs"].append(_struct(node.type, docs, docs.above(node.coord)))
    for e in out["enums"]:
        e["type"] = enum_types.get(e["name"], "int")
    for st in out["structs"]:
        if st["name"] in GAUGES:
            names = {f["name"] for f in st["fields"]}
            if not GAUGES[st["name"]] <= names:
                raise SystemExit(f"abi_manifest: {st['name']} has no fields {sorted(GAUGES[st['name']] - names)}")
            for f in st["fields"]:
                f["gauge"] = f["name"] in GAUGES[st["name"]]
    out["status_groups"] = _status_groups(next(e for e in out["enums"] if e["name"] == "tr_status"))
    return out


def _status_groups(status: dict) -> list[dict]:
    """The groups of tr_status, from the list that ends its doc comment (an item runs on to the
    next `- `); every code but TR_OK is in exactly one, and groups do not overlap."""
    groups = [{"name": m[3], "first": int(m[1]), "last": int(m[2]), "doc": " ".join(m[4].split())}
              for m in re.finditer(r"^- (\d+)-(\d+) (\w+): (.*(?:\n(?!- ).*)*)", status["doc"], re.M)]
    if not groups:
        raise SystemExit("abi_manifest: tr_status's doc comment lists no groups (`- 100-199 name: doc`)")
    for g, h in zip(groups, groups[1:]):
        if not g["first"] <= g["last"] < h["first"]:
            raise SystemExit(f"abi_manifest: status groups {g['name']} and {h['name']} overlap or are out of order")
    for v in status["values"]:
        within = [g["name"] for g in groups if g["first"] <= v["value"] <= g["last"]]
        if len(within) != (0 if v["name"] == "TR_OK" else 1):
            raise SystemExit(f"abi_manifest: {v['name']} is in the status groups {within or 'none'}")
    return groups


def _struct(s: c_ast.Struct, docs: _Docs, doc: str) -> dict:
    return {"name": s.name, "doc": doc,
            "fields": [{"name": d.name, "type": type_name(d.type), "doc": docs.above(d.coord)}
                       for d in s.decls]}


def _enum(e: c_ast.Enum, docs: _Docs, doc: str) -> dict:
    values, last = [], -1
    for v in e.values.enumerators:
        last = _value(v.value) if v.value is not None else last + 1
        values.append({"name": v.name, "value": last, "doc": docs.above(v.coord)})
    return {"name": e.name, "doc": doc, "values": values}


if __name__ == "__main__":
    import json
    import sys
    print(json.dumps(build(Path(sys.argv[1] if len(sys.argv) > 1 else "include/tensorref.h"),
                           {"models": Path("include/tensorref_minilm.h")}), indent=1))
