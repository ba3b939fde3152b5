#!/usr/bin/env python3
"""libtorch's own op schema, as the op table will be generated from it (the every-op issue):
native_functions.yaml of the installed PyTorch wheel (torchgen/packaged/ATen/native), read at
generation time. This module parses each entry's `func:` line and sorts every overload into
the ops to generate or one exclusion group, each with its reason.

    python3 tools/schema.py                 # the counts, per group
    python3 tools/schema.py --list GROUP    # the overloads of one group (or `generate`)
    python3 tools/schema.py --check         # exit 1 if an entry does not parse, if fewer than
                                            # MIN_GENERATED overloads would be generated, or if
                                            # two would get one C name (`Overload.c_name`)

An overload is generated when it is public (no leading `_`), functional or in place on `self`,
positional (no `Dimname`), not a backward formula, not tied to one backend or to sparse or
quantized tensors, and does not place a tensor itself. The first group that matches wins, in the
order of `GROUPS`. `make gen` fails on an overload to generate (and not left to ops.def or a
hand-written function, tools/emit_aten.py) with an argument or return type the generator does
not handle (`ARGS`, `DEFAULTED`, `RETURNS`): never a silently dropped op.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

# The bar: at least this many op functions generated.
MIN_GENERATED = 1150

# Each argument type the generator handles (`?`: optional; alias annotations and list sizes taken
# off, so `Tensor?[]` is a list of optional tensors): the op table's type for it
# (tools/optable.py) and the accessor of `Arg` (src/ops/aten/args.h) the kernel reads it with.
ARGS = {
    "Tensor": ("T", "tensor"), "Tensor?": ("T?", "opt_tensor"), "Tensor[]": ("T[]", "tensors"),
    "Tensor?[]": ("T?[]", "opt_tensors"),
    "int": ("i64", "int_"), "int?": ("i64?", "opt_int"), "int[]": ("i64[]", "ints"), "int[]?": ("i64[]?", "opt_ints"),
    "SymInt": ("i64", "sym_int"), "SymInt?": ("i64?", "opt_sym_int"), "SymInt[]": ("i64[]", "sym_ints"),
    "SymInt[]?": ("i64[]?", "opt_sym_ints"),
    "float": ("f64", "float_"), "float?": ("f64?", "opt_float"), "float[]": ("f64[]", "floats"),
    "float[]?": ("f64[]?", "opt_floats"),
    "bool": ("bool", "bool_"), "bool?": ("bool?", "opt_bool"),
    "Scalar": ("scalar", "scalar"), "Scalar?": ("scalar?", "opt_scalar"),
    "ScalarType": ("dtype", "dtype"), "ScalarType?": ("dtype?", "opt_dtype"),
    "str": ("str", "str"), "str?": ("str?", "opt_str"),
    # A list of scalars (`gradient`'s spacing) as doubles: the table passes lists as values.
    "Scalar[]": ("f64[]", "scalars"),
}
# Optional arguments the C function does not take: the kernel passes none, libtorch's default.
# Where a tensor lives and how its memory is laid out is the residency manager's to decide
# (an op makes its tensors where its inputs are, a creation op in host memory, as the table's
# do), and random ops draw from the default generator (reproducible after `manual_seed`).
DEFAULTED = {"Layout?", "Device?", "MemoryFormat?", "Generator?", "MemoryFormat"}
DEFAULTED_NAMES = {"pin_memory"}  # a `bool?` beside layout and device

# Return types, as the op table writes them: one tensor (or `self` of an in-place op: T!),
# several (a tuple, N handles), a list, a value or nothing.
RETURNS = {
    ("Tensor",): "T", ("Tensor", "Tensor"): "T,T", ("Tensor", "Tensor", "Tensor"): "T,T,T",
    ("Tensor", "Tensor", "Tensor", "Tensor"): "T,T,T,T", ("Tensor[]",): "T[]",
    ("bool",): "bool", ("SymBool",): "bool", ("int",): "i64", ("SymInt",): "i64",
    ("ScalarType",): "dtype", (): "()",
    # `histogramdd`'s histogram and its bin edges, one per dimension: one list, the histogram first.
    ("Tensor", "Tensor[]"): "T[]",
}
# Ops with these tags draw random numbers: never recomputed from their inputs alone.
RANDOM_TAG = "nondeterministic_seeded"

# Ops tied to one backend or to sparse or quantized tensors: by the start of their name, or by
# name (the accessors of sparse layouts).
BACKEND_PREFIXES = (
    "sparse_", "to_sparse", "quantize", "quantized_", "dequantize", "q_", "fake_quantize", "mkldnn", "to_mkldnn",
    "cudnn", "miopen", "fbgemm", "vulkan", "is_vulkan", "mps", "xnnpack", "nested", "to_padded_tensor",
    "fused_moving_avg_obs_fake_quant", "empty_quantized", "resize_as_sparse", "copy_sparse", "int_repr", "qscheme",
)
SPARSE_ACCESSORS = {
    "indices", "values", "crow_indices", "col_indices", "ccol_indices", "row_indices", "coalesce", "is_coalesced",
    "to_dense", "sparse_dim", "dense_dim", "hspmm",
}
# Dispatch keys of those backends: an op whose kernels are all under such keys (and that has no
# structured CPU/CUDA kernel to delegate to) is one of them.
BACKEND_KEYS = re.compile(r"Sparse|Quantized|Mkldnn|NestedTensor|MPS|XPU|Vulkan")


def schema_path() -> Path:
    """native_functions.yaml of the torchgen that the installed PyTorch wheel ships."""
    try:
        import torchgen
    except ImportError:
        sys.exit("schema.py: torchgen (PyTorch's wheel) is not installed: run make setup")
    return Path(torchgen.__file__).parent / "packaged/ATen/native/native_functions.yaml"


@dataclass
class Arg:
    type: str  # as written, alias annotation included
    name: str
    default: str | None
    keyword_only: bool

    @property
    def base(self) -> str:
        """The type without alias annotation, list size and optionality."""
        t = re.sub(r"\([^)]*\)", "", self.type)
        t = re.sub(r"\[\d+\]", "[]", t)
        return t.removesuffix("?")

    @property
    def key(self) -> str:
        """The type as ARGS and DEFAULTED name it: its base, `?` if optional."""
        t = re.sub(r"\([^)]*\)", "", self.type)
        return re.sub(r"\[\d+\]", "[]", t)

    @property
    def size(self) -> int | None:
        """A list's fixed size (`int[2] stride`), if it has one."""
        m = re.search(r"\[(\d+)\]", self.type)
        return int(m.group(1)) if m else None

    @property
    def defaulted(self) -> bool:
        """Not an argument of the C function (DEFAULTED)."""
        return self.key in DEFAULTED or (self.name in DEFAULTED_NAMES and self.key == "bool?")

    @property
    def mutable(self) -> bool:
        return "!" in self.type


@dataclass
class Overload:
    name: str
    overload: str
    args: list[Arg]
    returns: list[str]
    dispatch: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    # The `func:` line itself, for the generated code's comments.
    func: str = ""
    # Its kernels are its `out=` variant's (structured): CPU and CUDA have them.
    structured: bool = False
    # The tags of every overload of its name, of its functional form's (`abs` for `abs_`) and of
    # the op it is an alias of (`acos` for `arccos`): what its family is read from
    # (tools/emit_aten.py, `kin`).
    kin_tags: set[str] = field(default_factory=set)

    @property
    def full_name(self) -> str:
        return f"{self.name}.{self.overload}" if self.overload else self.name

    @property
    def in_place(self) -> bool:
        return self.name.endswith("_") and bool(self.args) and self.args[0].name == "self" and self.args[0].mutable

    @property
    def c_name(self) -> str:
        """Its name in the C ABI, after `tr_tensor_` (the rule docs/c-abi.md states): the op's
        name, then its overload's if it has one, in lower case, then `_` if it is in place:
        `add.Tensor` -> `add_tensor`, `add_.Tensor` -> `add_tensor_`, `relu` -> `relu`."""
        base = self.name.removesuffix("_") if self.in_place else self.name
        name = f"{base}_{self.overload}" if self.overload else base
        return name.lower() + "_" if self.in_place else name.lower()


def split_top(text: str, sep: str = ",") -> list[str]:
    """`text` split at `sep` outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    return parts + [last] if last else parts


def parse_func(func: str) -> Overload:
    """One `func:` line: `name[.overload](args) -> returns`."""
    m = re.fullmatch(r"([\w.]+)\((.*)\)\s*->\s*(.+)", func.strip())
    if not m:
        raise ValueError(f"not a schema: {func!r}")
    qualified, args_text, returns_text = m.groups()
    name, _, overload = qualified.partition(".")
    args, keyword_only = [], False
    for part in split_top(args_text):
        if part == "*":
            keyword_only = True
            continue
        decl, _, default = part.partition("=")
        type_, _, arg_name = decl.strip().rpartition(" ")
        if not type_ or not arg_name:
            raise ValueError(f"{qualified}: argument {part!r}")
        args.append(Arg(type_, arg_name, default.strip() or None, keyword_only))
    returns_text = returns_text.strip()
    if returns_text.startswith("("):
        returns = [r.split(" ")[0] for r in split_top(returns_text[1:-1])]
    else:
        returns = [returns_text.split(" ")[0]]
    returns = [re.sub(r"\([^)]*\)", "", r) for r in returns if r]
    return Overload(name, overload, args, returns, func=func.strip())


def load(path: Path | None = None) -> list[Overload]:
    import yaml

    entries = yaml.load((path or schema_path()).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    overloads = []
    for e in entries:
        o = parse_func(e["func"])
        for keys in (e.get("dispatch") or {}):
            o.dispatch.extend(k.strip() for k in keys.split(","))
        o.structured = "structured_delegate" in e
        tags = e.get("tags") or []
        o.tags = [tags] if isinstance(tags, str) else list(tags)
        overloads.append(o)
    return overloads


def unhandled_types(o: Overload) -> list[str]:
    types = [a.key for a in o.args if a.key not in ARGS and not a.defaulted]
    if tuple(o.returns) not in RETURNS:
        types.append("returns " + ", ".join(o.returns))
    return sorted(set(types))


def backend_specific(o: Overload) -> bool:
    if o.name.startswith(BACKEND_PREFIXES) or o.name.removesuffix("_copy") in SPARSE_ACCESSORS:
        return True
    return bool(o.dispatch) and not o.structured and all(BACKEND_KEYS.search(k) for k in o.dispatch)


# (group, reason, test), in the order they are asked.
GROUPS = [
    ("internal", "a `_`-prefixed op (or part, `linalg__powsum`): libtorch's internals, not its public API",
     lambda o: o.name.startswith("_") or "__" in o.name),
    ("out", "an `out=` variant: the functional form covers it, and the manager places results itself",
     lambda o: any(a.keyword_only and a.mutable for a in o.args)),
    ("backward", "a backward formula: autograd calls it, a program calls backward()", lambda o: "backward" in o.name),
    ("dimname", "a named-dimension overload: the positional one covers it",
     lambda o: any("Dimname" in a.type for a in o.args)),
    ("backend", "tied to one backend, or to sparse or quantized tensors, which the manager does not move",
     backend_specific),
    ("mutates", "writes an argument other than `self` (the manager's tickets write `self` or a result)",
     lambda o: any(a.mutable for a in o.args[(1 if o.in_place else 0):])),
    ("placement", "puts a tensor on a device or a storage it names: where tensors live is the manager's to decide",
     lambda o: any(a.base in ("Device", "Storage") and not a.defaulted for a in o.args)),
]


def sort(overloads: list[Overload]) -> dict[str, list[Overload]]:
    """Every overload in the first group it matches, or in `generate`."""
    groups: dict[str, list[Overload]] = {g: [] for g, _, _ in GROUPS}
    groups["generate"] = []
    for o in overloads:
        group = next((g for g, _, test in GROUPS if test(o)), "generate")
        groups[group].append(o)
    return groups


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", metavar="GROUP", help="print the overloads of one group")
    ap.add_argument("--check", action="store_true", help=f"exit 1 below {MIN_GENERATED} generated overloads")
    a = ap.parse_args()
    path = schema_path()
    overloads = load(path)
    groups = sort(overloads)
    if a.list:
        for o in groups[a.list]:
            print(o.full_name)
        return 0
    generated = groups["generate"]
    in_place = sum(o.in_place for o in generated)
    print(f"{path}: {len(overloads)} overloads")
    print(f"{len(generated):>6}  to generate: {len(generated) - in_place} functional, {in_place} in place")
    for g, reason, _ in GROUPS:
        print(f"{len(groups[g]):>6}  {g}: {reason}")
    failed = False
    if a.check and len(generated) < MIN_GENERATED:
        print(f"schema.py: {len(generated)} overloads to generate, fewer than {MIN_GENERATED}", file=sys.stderr)
        failed = True
    names: dict[str, list[str]] = {}
    for o in generated:
        names.setdefault(o.c_name, []).append(o.full_name)
    for name, which in names.items():
        if len(which) > 1:
            print(f"schema.py: {', '.join(which)} would all be tr_tensor_{name}", file=sys.stderr)
            failed = a.check
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
