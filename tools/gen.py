#!/usr/bin/env python3
"""Generates everything that is written from the op table and the C ABI, in one pass:

    python3 tools/gen.py          # rewrite what changed (make gen)
    python3 tools/gen.py --check  # exit 1 if any generated file is stale, or not marked generated
                                  # in .gitattributes (make header-check, CI)

1. The op table src/ops/ops.def (tools/optable.py) -> the Rust core functions, `Tensor`
   methods and operators (emit_rust.py), the C functions (emit_ffi.py), the meta-device sweep's
   cases (emit_device_sweep.py).
2. The Rust sources -> the headers, by the pinned cbindgen: include/tensorref.h from the crate
   (cbindgen.toml; it includes the next one), include/tensorref_ops.h from the C functions of
   step 1 alone (cbindgen_ops.toml), and the demonstration model's add-on header
   include/tensorref_minilm.h from src/ffi/models.rs alone (cbindgen_minilm.toml; feature
   `models`).
3. The headers -> the ABI manifest include/tensorref_abi.json (abi_manifest.py, pycparser): the
   core, and the model's declarations apart under features -> models.
4. The manifest and the op table -> each binding's declarations and wrappers, its operators
   (from the ops' operator attributes) and its residency statistics (from the manifest's
   tr_residency_stats): C++ (emit_cpp.py), C# (emit_csharp.py), Python (emit_python.py, the
   compiled accelerator's operator table included).

Every output is made in memory (the headers in a temporary folder) before anything is written,
so one run is enough and --check sees exactly what a run would write.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import abi_manifest  # noqa: E402
import emit_aten  # noqa: E402
import emit_cpp  # noqa: E402
import emit_csharp  # noqa: E402
import emit_device_sweep  # noqa: E402
import emit_ffi  # noqa: E402
import emit_python  # noqa: E402
import emit_rust  # noqa: E402
import optable  # noqa: E402

ROOT = optable.ROOT
CBINDGEN_VERSION = "0.29.4"


def cbindgen(*args: str) -> None:
    version = subprocess.run(["cbindgen", "--version"], capture_output=True, text=True).stdout.strip()
    if version != f"cbindgen {CBINDGEN_VERSION}":
        sys.exit(f"gen: the headers are made by cbindgen {CBINDGEN_VERSION}, found {version or 'none'} "
                 f"(make setup installs it)")
    run = subprocess.run(["cbindgen", "--quiet", *args], cwd=ROOT, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"gen: cbindgen {' '.join(args)} failed:\n{run.stderr}")


def outputs() -> dict[Path, str]:
    table = optable.load()
    overloads, excluded = emit_aten.select(ROOT, table)
    table, named_kernels = emit_aten.schema_bodies(table, excluded["named"])
    ops = table + [emit_aten.table_op(o) for o in overloads]
    files: dict[Path, str] = emit_aten.outputs(overloads + named_kernels, ROOT)
    for emitter in (emit_rust, emit_ffi, emit_device_sweep):
        files.update(emitter.outputs(ops, ROOT))

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ffi_ops = tmp / "ops.rs"
        ffi_ops.write_text(emit_ffi.for_cbindgen(ops))
        cbindgen("--config", "cbindgen.toml", "--output", str(tmp / "tensorref.h"))
        cbindgen("--config", "cbindgen_ops.toml", "--output", str(tmp / "tensorref_ops.h"), str(ffi_ops))
        cbindgen("--config", "cbindgen_minilm.toml", "--output", str(tmp / "tensorref_minilm.h"),
                 str(ROOT / "src/ffi/models.rs"))
        for name in ("tensorref.h", "tensorref_ops.h", "tensorref_minilm.h"):
            files[ROOT / "include" / name] = (tmp / name).read_text()
        files[ROOT / "include/tensorref_ops.h"] = emit_aten.grouped_header(files[ROOT / "include/tensorref_ops.h"], ops)
        manifest = abi_manifest.build(tmp / "tensorref.h", {"models": tmp / "tensorref_minilm.h"})
    files[ROOT / "include/tensorref_abi.json"] = json.dumps(manifest, indent=1) + "\n"

    files.update(emit_cpp.outputs(ops, manifest, ROOT))
    files.update(emit_csharp.outputs(ops, manifest, ROOT))
    files.update(emit_python.outputs(ops, manifest, ROOT))
    print(emit_aten.report(overloads, excluded))
    print(f"gen: {len(named_kernels)} ops of ops.def run their schema overload's kernel (body `schema`)")
    print(f"gen: {len(ops)} op functions ({len(table)} of ops.def, {len(overloads)} from the schema), "
          f"each in C, Rust, C++, C# and Python")
    return files


def generated_attribute(path: Path) -> bool:
    """Whether .gitattributes marks `path` generated (so reviews and GitHub fold it)."""
    run = subprocess.run(["git", "check-attr", "linguist-generated", "--", str(path)], cwd=ROOT,
                         capture_output=True, text=True)
    return run.stdout.strip().endswith(": true")


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    files = outputs()
    for path, text in files.items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path.relative_to(ROOT))
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    unmarked = [p.relative_to(ROOT) for p in files if not generated_attribute(p.relative_to(ROOT))]
    if check and unmarked:
        print("generated files that .gitattributes does not mark linguist-generated:", *unmarked, sep="\n  ")
        return 1
    if check and stale:
        print("stale generated files (run `make gen` and commit them):", *stale, sep="\n  ")
        return 1
    if not check:
        print(f"generated {len(stale)} file(s)" if stale else "generated files are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
