"""The op table, src/ops/ops.def: its parser, and the one table of its parameter and return types
with a column per language. Every emitter (tools/emit_*.py) writes a type through its own column
of these tables and nothing else, so a type without a cell for a language is an error in that
emitter (`cell`), never a guess.

    name | params | returns | body | doc [| attributes]    (one line per op; see ops.def's header)

The optional attributes are flags (`FLAGS`) and the operator expressions the op stands for
(`BINARY_OPERATORS`, `UNARY_OPERATORS`: a row per symbol with a column per language; each
language's operators are generated from the ops that name them).

In a cell, `{n}` is the parameter's name as the language spells it (a keyword escaped) and
`{name}` its name as ops.def writes it.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "src/ops/ops.def"
# Where the ops come from, as generated files say.
SOURCES = "src/ops/ops.def and libtorch's schema (tools/schema.py)"


# The receivers an op's name may start with, besides a tensor (tr_tensor_*).
RECEIVERS = {"optim"}

# The flags an op's attribute column may hold.
#   random  the result depends on the random generator: the body (src/ops/random.rs) draws and,
#           given `keep` (the residency manager keeps recipes), returns a replay that draws the
#           same numbers again from a snapshot of the generator, which becomes the result's recipe
#           (see emit_rust); such an op is never recomputed from its inputs alone.
#   seeded  the result depends on the random generator, and the body cannot replay its draw (an
#           op generated from the schema's `nondeterministic_seeded` ops): never recomputed.
FLAGS = {"random", "seeded"}


# Rust's keywords, which a name from libtorch's schema may be.
RUST_KEYWORDS = set("""as async await break const continue crate dyn else enum extern false fn for if impl in let loop
match mod move mut pub ref return self static struct super trait true type unsafe use where while abstract become
box do final macro override priv try typeof unsized virtual yield""".split())


@dataclass(frozen=True)
class Param:
    name: str
    ty: str


@dataclass(frozen=True)
class Op:
    name: str
    params: tuple[Param, ...]
    ret: str
    body: str
    doc: str
    flags: frozenset[str] = frozenset()
    operators: tuple["Operator", ...] = ()
    # The schema overload an op generated from libtorch's schema stands for (tools/schema.py).
    schema: object = None

    @property
    def random(self) -> bool:
        return "random" in self.flags

    @property
    def runs_kernel(self) -> bool:
        """Its body is one call of the runner of the schema's kernels (src/ops/aten/run.rs): an op
        generated from the schema, or an ops.def op with the body `schema`."""
        return self.body.startswith("run::")

    @property
    def is_method(self) -> bool:
        """The first param is a plain tensor: `self` in Rust, the receiver in the bindings."""
        return bool(self.params) and self.params[0].ty == "T"

    @property
    def creates(self) -> bool:
        """No tensor input: the op makes a tensor from nothing but its arguments."""
        return not any(cell(p.ty, "tensor") for p in self.params)

    @property
    def replayable(self) -> bool:
        """The op makes a new tensor from its inputs and values alone, so the residency manager
        may drop its result and run it again (src/residency/training/recompute.rs)."""
        return (self.ret == "T" and not self.creates and not self.random and "seeded" not in self.flags
                and all(self._kept(p) for p in self.params))

    def _kept(self, p: "Param") -> bool:
        """A recipe can hold the argument: the runner of the schema's ops keeps any value and a
        recipe names single tensors (src/ops/aten/run.rs); ops.def's bodies say it per type."""
        if self.schema is not None:
            return not (cell(p.ty, "tensor") and p.ty.endswith("[]"))
        return bool(cell(p.ty, "replay"))

    @property
    def dtype_defaults(self) -> bool:
        """The bindings give a trailing dtype parameter the default float32, as PyTorch's creation
        ops do: ops.def's ops (a dtype the schema requires has no default)."""
        return self.schema is None and bool(self.params) and self.params[-1].ty == "dtype"

    @property
    def rust_name(self) -> str:
        """Its name in Rust: a keyword (`where`) as a raw identifier."""
        return f"r#{self.name}" if self.name in RUST_KEYWORDS else self.name

    @property
    def c_name(self) -> str:
        """`tr_tensor_<name>`; an op whose name starts with a receiver other than a tensor keeps
        it (`optim_sgd_step`, whose receiver is a list of parameters: `tr_optim_sgd_step`)."""
        receiver = self.name.split("_", 1)[0]
        return f"tr_{self.name}" if receiver in RECEIVERS else f"tr_tensor_{self.name}"


# ---------------------------------------------------------------- parameter types
#
# Columns:
#   doc            what the type is, for ops.def's readers
#   tensor         a tensor input (looked up in the registry, placed by the residency manager)
#   each           a list the op runs over one element at a time (the core loops; see emit_rust)
#   rust_core      the core function's parameter type
#   rust_fetch     how the core gets it from the op: "get" (batched with the other plain tensors),
#                  a statement, or None (passed as it is)
#   rust_bind      the statement that makes the body's view of it, or None
#   rust_method    the `Tensor` method's parameter type
#   rust_arg       how the method passes it to the core function
#   ffi_params     the C function's Rust parameters
#   ffi_pre        the statement that checks it on entry, or None
#   ffi_arg        how the C function passes it to the core function
#   cpp_type       the C++ parameter type ({tensor}: the tensor class)
#   cpp_args       the C arguments it becomes
#   cs_type        the C# wrapper's parameter type
#   cs_pre         a statement before the call, or None; `using (...)` ones open a block
#   cs_args        the P/Invoke arguments it becomes
#   py_hint        the Python type in docstrings
#   py_pre         a statement before the call, or None
#   py_args        the C arguments it becomes
#   sweep          the meta-device sweep's default argument (tools/emit_device_sweep.py)
#   replay         how an op's replay function (an op the residency manager may recompute; see
#                  emit_rust) has it: "tensor", "optional" (a tensor or none), "owned" (a copy of
#                  a list it holds), "copy" (a value it holds), or None: an op taking it is never
#                  recomputed

_COLUMNS = ("doc tensor each rust_core rust_fetch rust_bind rust_method rust_arg ffi_params ffi_pre "
            "ffi_arg cpp_type cpp_args cs_type cs_pre cs_args py_hint py_pre py_args sweep replay").split()

# A list of tensors (also the base of "T[]!", the same list written in place).
PARAMS_T_LIST: dict = dict(
    doc="a list of tensors", tensor=True, each=False,
    rust_core="&[TensorId]", rust_fetch="let {n} = op.get_many({n})?;",
    rust_bind="let {n} = &{n}.iter().map(|e| &**e).collect::<Vec<_>>()[..];",
    rust_method="&[&Tensor]", rust_arg="&{n}.iter().map(|t| t.id()).collect::<Vec<_>>()",
    ffi_params="{n}: *const TrTensor, {n}_len: usize",
    ffi_pre='let {n} = handles_arg({n}, {n}_len, "{name}")?;', ffi_arg="&{n}",
    cpp_type="const TensorList&", cpp_args=["{n}.data()", "{n}.size()"],
    cs_type="Tensor[]", cs_pre='using (var __{name} = new HandleList({n}, "{name}"))',
    cs_args=["__{name}.Ids", "__{name}.Length"],
    # `{n}` stays bound to the list of Tensors until the call returns: the C array holds
    # only their handle values, and a temporary must not be collected (and its handle
    # released) before the library has used it.
    py_hint="Sequence[Tensor]", py_pre="{n}, _{n}, _{n}_len = _handles({n}, {name!r})",
    py_args=["_{n}", "_{n}_len"],
    sweep="&[m(&[4, 4], F32), m(&[4, 4], F32)]", replay=None)

PARAMS: dict[str, dict] = {
    "T": dict(
        doc="a tensor", tensor=True, each=False,
        rust_core="TensorId", rust_fetch="get", rust_bind="let {n}: &tch::Tensor = &{n};",
        rust_method="&Tensor", rust_arg="{n}.id()",
        ffi_params="{n}: TrTensor", ffi_pre=None, ffi_arg="{n}.into()",
        cpp_type="const {tensor}&", cpp_args=["{n}.raw()"],
        cs_type="Tensor", cs_pre=None, cs_args=['TensorRef.Tensor.Arg({n}, "{name}")'],
        py_hint="Tensor", py_pre=None, py_args=["{n}"],
        sweep="m(&[4, 4], F32)", replay="tensor"),
    "T?": dict(
        doc="an optional tensor (handle 0 in C)", tensor=True, each=False,
        rust_core="TensorId", rust_fetch="let {n} = op.get_opt({n})?;", rust_bind="let {n} = {n}.as_deref();",
        rust_method="Option<&Tensor>", rust_arg="{n}.map_or(TensorId(0), Tensor::id)",
        ffi_params="{n}: TrTensor", ffi_pre=None, ffi_arg="{n}.into()",
        cpp_type="OptionalTensor", cpp_args=["{n}.raw()"],
        cs_type="Tensor", cs_pre=None, cs_args=["TensorRef.Tensor.OptArg({n})"],
        py_hint="Tensor | None", py_pre=None, py_args=["_NONE if {n} is None else {n}"],
        sweep="m(&[4], F32)", replay="optional"),
    "T[]": PARAMS_T_LIST,
    # The op runs once per index (so the device holds one element's tensors at a time: an
    # optimizer step over a model larger than the budget), with one-element lists.
    "T[]!": {**PARAMS_T_LIST, "doc": "a list of tensors, each modified in place by its own op", "each": True,
             "rust_fetch": "let {n} = op.get_many_mut({n})?;"},
    "i64[]": dict(
        doc="a list of integers", tensor=False, each=False,
        rust_core="&[i64]", rust_fetch=None, rust_bind=None, rust_method="&[i64]", rust_arg="{n}",
        ffi_params="{n}: *const i64, {n}_len: usize",
        ffi_pre='let {n} = slice_arg({n}, {n}_len, "{name}")?;', ffi_arg="{n}",
        cpp_type="IntList", cpp_args=["{n}.data()", "{n}.size()"],
        cs_type="long[]", cs_pre='if ({n} == null) throw new ArgumentNullException("{name}");',
        cs_args=["{n}", "(UIntPtr){n}.Length"],
        py_hint="int | Sequence[int]", py_pre="{n}, {n}_len = _i64s({n}, {name!r})", py_args=["{n}", "{n}_len"],
        sweep="&[1]", replay="owned"),
    "scalar": dict(
        doc="a typed scalar (tr_scalar: integer, float or bool)", tensor=False, each=False,
        rust_core="Scalar", rust_fetch=None, rust_bind=None, rust_method="impl Into<Scalar>", rust_arg="{n}.into()",
        ffi_params="{n}: TrScalar", ffi_pre='let {n} = {n}.parse("{name}")?;', ffi_arg="{n}",
        cpp_type="Scalar", cpp_args=["{n}.raw()"],
        cs_type="Scalar", cs_pre=None, cs_args=["{n}"],
        py_hint="int | float | bool", py_pre=None, py_args=["_scalar({n}, {name!r})"],
        sweep="Scalar::Float(0.5)", replay="copy"),
    "f64": dict(
        doc="a double", tensor=False, each=False,
        rust_core="f64", rust_fetch=None, rust_bind=None, rust_method="f64", rust_arg="{n}",
        ffi_params="{n}: f64", ffi_pre=None, ffi_arg="{n}",
        cpp_type="double", cpp_args=["{n}"],
        cs_type="double", cs_pre=None, cs_args=["{n}"],
        py_hint="float", py_pre=None, py_args=["{n}"],
        sweep="0.5", replay="copy"),
    "i64": dict(
        doc="a 64-bit integer", tensor=False, each=False,
        rust_core="i64", rust_fetch=None, rust_bind=None, rust_method="i64", rust_arg="{n}",
        ffi_params="{n}: i64", ffi_pre=None, ffi_arg="{n}",
        cpp_type="int64_t", cpp_args=["{n}"],
        cs_type="long", cs_pre=None, cs_args=["{n}"],
        py_hint="int", py_pre=None, py_args=["{n}"],
        sweep="1", replay="copy"),
    "bool": dict(
        doc="a bool", tensor=False, each=False,
        rust_core="bool", rust_fetch=None, rust_bind=None, rust_method="bool", rust_arg="{n}",
        ffi_params="{n}: bool", ffi_pre=None, ffi_arg="{n}",
        cpp_type="bool", cpp_args=["{n}"],
        cs_type="bool", cs_pre=None, cs_args=["{n}"],
        py_hint="bool", py_pre=None, py_args=["{n}"],
        sweep="false", replay="copy"),
    "dtype": dict(
        doc="an element type (tr_dtype; defaults to float32 where it is the last parameter)", tensor=False, each=False,
        rust_core="DType", rust_fetch=None, rust_bind=None, rust_method="DType", rust_arg="{n}",
        ffi_params="{n}: TrDtype", ffi_pre="let {n} = DType::try_from({n})?;", ffi_arg="{n}",
        cpp_type="DType", cpp_args=["static_cast<tr_dtype>({n})"],
        cs_type="DType", cs_pre=None, cs_args=["{n}"],
        py_hint="DType", py_pre=None, py_args=["_code({n})"],
        sweep="DType::F32", replay="copy"),
}


def _value(doc: str, rust: str, ffi_params: str, ffi_pre: str | None, sweep: str, replay: str | None,
           cpp: tuple, cs: tuple, py: tuple) -> dict:
    """A value type of the ops generated from the schema (an optional number, a list, a string):
    `rust` is the core's and the method's type, the C function passes what `ffi_pre` made, and
    `cpp`, `cs`, `py` are each binding's (type, pre, args) cells."""
    return dict(
        doc=doc, tensor=False, each=False, rust_core=rust, rust_fetch=None, rust_bind=None,
        rust_method=rust, rust_arg="{n}", ffi_params=ffi_params, ffi_pre=ffi_pre, ffi_arg="{n}",
        cpp_type=cpp[0], cpp_args=cpp[2], cs_type=cs[0], cs_pre=cs[1], cs_args=cs[2],
        py_hint=py[0], py_pre=py[1], py_args=py[2], sweep=sweep, replay=replay)


def _optional(doc: str, rust: str, c: str, ffi_pre: str, cpp: str, cs: str, py: str, py_arg: str) -> dict:
    """An optional value, passed in C as a pointer to it or NULL (and in C# as an array of one
    or null)."""
    return _value(doc, f"Option<{rust}>", f"{{n}}: *const {c}", ffi_pre, "None", "copy",
                  (f"std::optional<{cpp}>", None, ["detail::c_opt({n}).ptr()"]),
                  (f"{cs}?", None, ["{n}.HasValue ? new[] {{ {n}.Value }} : null"]),
                  (f"{py} | None", None, [py_arg]))


_NULL_CHECK = 'if ({n} == null) throw new ArgumentNullException("{name}");'
PARAMS.update({
    "T?[]": {**PARAMS_T_LIST, "doc": "a list of optional tensors (handle 0 for none)",
             "rust_fetch": "let {n} = op.get_many_opt({n})?;",
             "rust_bind": "let {n} = &{n}.iter().map(|e| e.as_deref()).collect::<Vec<_>>()[..];",
             "rust_method": "&[Option<&Tensor>]",
             "rust_arg": "&{n}.iter().map(|t| t.map_or(TensorId(0), Tensor::id)).collect::<Vec<_>>()",
             "cpp_type": "const std::vector<OptionalTensor>&", "cpp_args": ["detail::raw_ids({n}).data()", "{n}.size()"],
             "cs_pre": 'using (var __{name} = new HandleList({n}, "{name}", true))',
             "py_hint": "Sequence[Tensor | None]", "py_pre": "{n}, _{n}, _{n}_len = _opt_handles({n}, {name!r})",
             "sweep": "&[m(&[4], I64)]"},
    "i64?": _optional("an optional integer (NULL for none)", "i64", "i64", "let {n} = opt_arg({n});",
                      "int64_t", "long", "int", "_opt({n}, _c_int64)"),
    "f64?": _optional("an optional double (NULL for none)", "f64", "f64", "let {n} = opt_arg({n});",
                      "double", "double", "float", "_opt({n}, _c_double)"),
    "bool?": _optional("an optional bool (NULL for none)", "bool", "bool", "let {n} = opt_arg({n});",
                       "bool", "bool", "bool", "_opt({n}, _c_bool)"),
    "dtype?": _optional("an optional element type (NULL for none)", "DType", "TrDtype",
                        "let {n} = opt_arg({n}).map(DType::try_from).transpose()?;", "DType", "DType", "DType",
                        "_opt_dtype({n})"),
    "scalar?": _optional("an optional scalar (NULL for none)", "Scalar", "TrScalar",
                         'let {n} = opt_arg({n}).map(|s| s.parse("{name}")).transpose()?;', "Scalar", "Scalar",
                         "int | float | bool", "_opt_scalar({n}, {name!r})"),
    "i64[]?": _value("an optional list of integers (NULL for none)", "Option<&[i64]>",
                     "{n}: *const i64, {n}_len: usize", "let {n} = opt_slice_arg({n}, {n}_len);", "None", None,
                     ("const std::optional<IntList>&", None, ["{n} ? {n}->data() : nullptr", "{n} ? {n}->size() : 0"]),
                     ("long[]", None, ["{n}", "(UIntPtr)({n} == null ? 0 : {n}.Length)"]),
                     ("int | Sequence[int] | None", "{n}, {n}_len = _opt_i64s({n}, {name!r})", ["{n}", "{n}_len"])),
    "f64[]": _value("a list of doubles", "&[f64]", "{n}: *const f64, {n}_len: usize",
                    'let {n} = slice_arg({n}, {n}_len, "{name}")?;', "&[0.5]", "owned",
                    ("const std::vector<double>&", None, ["{n}.data()", "{n}.size()"]),
                    ("double[]", _NULL_CHECK, ["{n}", "(UIntPtr){n}.Length"]),
                    ("float | Sequence[float]", "{n}, {n}_len = _f64s({n}, {name!r})", ["{n}", "{n}_len"])),
    "f64[]?": _value("an optional list of doubles (NULL for none)", "Option<&[f64]>",
                     "{n}: *const f64, {n}_len: usize", "let {n} = opt_slice_arg({n}, {n}_len);", "None", None,
                     ("const std::optional<std::vector<double>>&", None,
                      ["{n} ? {n}->data() : nullptr", "{n} ? {n}->size() : 0"]),
                     ("double[]", None, ["{n}", "(UIntPtr)({n} == null ? 0 : {n}.Length)"]),
                     ("float | Sequence[float] | None", "{n}, {n}_len = _opt_f64s({n}, {name!r})", ["{n}", "{n}_len"])),
    "str": _value("a string (NUL-terminated UTF-8)", "&str", "{n}: *const c_char", 'let {n} = str_arg({n}, "{name}")?;',
                  '"none"', "owned",
                  ("const std::string&", None, ['detail::c_string({n}, "{name}")']),
                  ("string", _NULL_CHECK, ["Native.Utf8Z({n})"]),
                  ("str", None, ["_c_str({n}, {name!r})"])),
    "str?": _value("an optional string (NULL for none)", "Option<&str>", "{n}: *const c_char",
                   'let {n} = opt_str_arg({n}, "{name}")?;', "None", None,
                   ("const std::optional<std::string>&", None, ['{n} ? detail::c_string(*{n}, "{name}") : nullptr']),
                   ("string", None, ["{n} == null ? null : Native.Utf8Z({n})"]),
                   ("str | None", None, ["None if {n} is None else _c_str({n}, {name!r})"])),
})

# ---------------------------------------------------------------- return types
#
# Columns:
#   doc          what the op gives back, for ops.def's readers
#   rust_core    the core function's result type
#   rust_first   how the core gets its first tensor, when not as the parameter type says, or None
#   rust_run     how the core runs the body ({body}; {first}: the first parameter)
#   rust_method  the `Tensor` method's result type
#   rust_wrap    how the method turns the core's result into its own ({call}: the call with `?`,
#                {bare}: without)
#   ffi_out      the C function's output parameters, or None
#   ffi_out_pre  the statement that checks them on entry, or None
#   ffi_store    how the C function stores the core's result ({call})
#   c_doc        what the header says of the result, beyond the ops header's conventions
#   cpp_type     the C++ result type ({tensor}: the tensor class)
#   cpp_out      the declaration of the C output, or None
#   cpp_return   the statement returning it
#   cpp_call     the statement that calls and returns, where a plain `detail::call` cannot
#                ({fn}: the C function, {args}: its arguments, each followed by ", "), or None
#   cs_type      the C# result type
#   cs_out       the declaration of the C output, or None
#   cs_out_args  the P/Invoke arguments the output becomes
#   cs_call      the statements that call and check, where a plain `Native.Check` cannot ({call}:
#                the P/Invoke call, {fn}: the C function), or None
#   cs_return    the statement returning it
#   py_hint      the Python result type in docstrings
#   py_out       the statements making the C output, or []
#   py_out_args  the C arguments the output becomes
#   py_retry     the statements that make room for a result that did not fit, before the call
#                is made again, or None
#   py_return    the statement returning it
#   sweep        how the sweep collects the tensors it made ({call})
#
# (The last five columns of bindings are set below for the rows that do not need them.)

OUT = 'let out = out_arg(out, "out")?;'

RETURNS: dict[str, dict] = {
    "T": dict(
        doc="a new handle",
        rust_core="TensorId", rust_first=None, rust_run="op.output(|| {body})",
        rust_method="Tensor", rust_wrap="Ok(Tensor::from_raw({call}))",
        ffi_out="out: *mut TrTensor", ffi_out_pre=OUT, ffi_store="*out = {call}.into();", c_doc=None,
        cpp_type="{tensor}", cpp_out="tr_tensor out{{0}};", cpp_return="return {tensor}::adopt(out);",
        cs_type="Tensor", cs_out="ulong __result;", cs_return="return new Tensor(__result);",
        py_hint="Tensor", py_out=["out = _T()", "out._own = True"], py_return="return out",
        sweep="Ok(vec![{call}])"),
    "T!": dict(
        doc="in place: the first input, modified; nothing new is registered",
        rust_core="TensorId", rust_first="let handle = {first};\n    let {first} = op.get_mut({first})?;",
        rust_run="op.value(|| {body}).map(|_| handle)",
        rust_method="&Tensor", rust_wrap="{call};\n        Ok(self)",
        ffi_out=None, ffi_out_pre=None, ffi_store="{call};", c_doc="In place: modifies `{first}`; no new handle.",
        cpp_type=None, cpp_out=None, cpp_return=None,
        cs_type="Tensor", cs_out=None, cs_return="return this;",
        py_hint="Tensor", py_out=[], py_return="return {first}",
        sweep="Ok(vec![{call}])"),
    "T?": dict(
        doc="a new handle, or none",
        rust_core="Option<TensorId>", rust_first=None, rust_run="op.output_opt(|| {body})",
        rust_method="Option<Tensor>", rust_wrap="Ok({call}.map(Tensor::from_raw))",
        ffi_out="out: *mut TrTensor", ffi_out_pre=OUT, ffi_store="*out = {call}.map_or(TrTensor {{ id: 0 }}, TrTensor::from);",
        c_doc="`*out` receives the handle 0 when there is none.",
        cpp_type="std::optional<{tensor}>", cpp_out="tr_tensor out{{0}};",
        cpp_return="return out.id == 0 ? std::optional<{tensor}>() : std::optional<{tensor}>({tensor}::adopt(out));",
        cs_type="Tensor", cs_out="ulong __result;", cs_return="return __result == 0 ? null : new Tensor(__result);",
        py_hint="Tensor | None", py_out=["out = _T()", "out._own = True"], py_return="return out if out.value else None",
        sweep="Ok({call}.into_iter().collect())"),
    "()": dict(
        doc="nothing",
        rust_core="()", rust_first=None, rust_run="op.value(|| {body})",
        rust_method="()", rust_wrap="{bare}",
        ffi_out=None, ffi_out_pre=None, ffi_store="{call};", c_doc="Returns nothing but the status.",
        cpp_type="void", cpp_out=None, cpp_return="",
        cs_type="void", cs_out=None, cs_return="",
        py_hint="None", py_out=[], py_return="return None",
        sweep="{{\n            {call};\n            Ok(vec![])\n        }}"),
    "f64": dict(
        doc="a double",
        rust_core="f64", rust_first=None, rust_run="op.value(|| {body})",
        rust_method="f64", rust_wrap="{bare}",
        ffi_out="out: *mut f64", ffi_out_pre=OUT, ffi_store="*out = {call};", c_doc="`*out` receives the value.",
        cpp_type="double", cpp_out="double out = 0;", cpp_return="return out;",
        cs_type="double", cs_out="double __result;", cs_return="return __result;",
        py_hint="float", py_out=["out = _c_double()"], py_return="return out.value",
        sweep="{{\n            {call};\n            Ok(vec![])\n        }}"),
    "bool": dict(
        doc="a bool",
        rust_core="bool", rust_first=None, rust_run="op.value(|| {body})",
        rust_method="bool", rust_wrap="{bare}",
        ffi_out="out: *mut bool", ffi_out_pre=OUT, ffi_store="*out = {call};", c_doc="`*out` receives the value.",
        cpp_type="bool", cpp_out="bool out = false;", cpp_return="return out;",
        cs_type="bool", cs_out="bool __result;", cs_return="return __result;",
        py_hint="bool", py_out=["out = _c_bool()"], py_return="return out.value",
        sweep="{{\n            {call};\n            Ok(vec![])\n        }}"),
}



def _tensors_returned(n: int | None) -> dict:
    """The tuple of `n` tensors, or (None) the list, that an op generated from the schema returns,
    into an output buffer of handles (the C ABI's rule for outputs). The bindings give a list
    room for 64 results first, and where the op made more, run it once more with room for all
    (its results were released); a tuple gets an array of exactly `n`."""
    count = f"the op's {n}" if n else "their number"
    c_doc = (f"`out` (room for `out_len` handles) receives the results' handles, in order, and `*out_written` "
             f"{count}, also when `out_len` is too small (then TR_ERR_BUFFER_TOO_SMALL, and no result is kept).")
    out = "out: *mut TrTensor, out_len: usize, out_written: *mut usize"
    pre = 'let written = out_arg(out_written, "out_written")?;\n        let out = slice_out(out, out_len, "out")?;'
    store = "store_list(out, written, {call})?;"
    room = n or 64
    cs_retry = "" if n else (" if (__st == Status.BufferTooSmall && (int)__written > __out.Length) {{ "
                             "__out = new ulong[(int)__written]; __st = {call}; }}")
    return dict(
        doc=f"{n} new handles" if n else "a list of new handles",
        rust_core="TensorIds", rust_first=None, rust_run="op.outputs(|| {body})",
        rust_method="Vec<Tensor>", rust_wrap="Ok({call}.into_iter().map(Tensor::from_raw).collect())",
        ffi_out=out, ffi_out_pre=pre, ffi_store=store, c_doc=c_doc,
        cpp_type=f"std::array<{{tensor}}, {n}>" if n else "std::vector<{tensor}>", cpp_out=None, cpp_return="",
        cpp_call=("return detail::call_tensors<{tensor}" + (f", {n}" if n else "") + ">([&](tr_tensor* out_, size_t room_, "
                  "size_t* written_) {{ return {fn}({args}out_, room_, written_); }});"),
        cs_type="Tensor[]", cs_out=f"var __out = new ulong[{room}]; UIntPtr __written;",
        cs_out_args="__out, (UIntPtr)__out.Length, out __written",
        cs_call="{{ var __st = {call};" + cs_retry + ' Native.Check(__st, "{fn}"); }}',
        cs_return="return TensorRef.Tensor.AdoptAll(__out, (int)__written);",
        py_hint=f"tuple[{', '.join(['Tensor'] * n)}]" if n else "list[Tensor]",
        py_out=[f"out = (_T * {room})()", "written = _c_size_t()"], py_out_args="out, len(out), _byref(written)",
        py_retry=None if n else "if st == _TOO_SMALL and written.value > len(out):\n    out = (_T * written.value)()",
        py_return=f"return {'tuple' if n else 'list'}(_adopt_all(out, written.value))",
        sweep="Ok({call}.into_vec())")


RETURNS.update({
    "T,T": _tensors_returned(2), "T,T,T": _tensors_returned(3), "T,T,T,T": _tensors_returned(4),
    "T[]": _tensors_returned(None),
    "i64": {**RETURNS["f64"], "doc": "a 64-bit integer", "rust_core": "i64", "rust_method": "i64",
            "ffi_out": "out: *mut i64", "cpp_type": "int64_t", "cpp_out": "int64_t out = 0;",
            "cs_type": "long", "cs_out": "long __result;", "py_hint": "int", "py_out": ["out = _c_int64()"]},
    "dtype": {**RETURNS["f64"], "doc": "an element type", "rust_core": "DType", "rust_method": "DType",
              "ffi_out": "out: *mut TrDtype", "ffi_store": "*out = {call} as TrDtype;", "cpp_type": "DType",
              "cpp_out": "tr_dtype out{{}};", "cpp_return": "return static_cast<DType>(out);",
              "cs_type": "DType", "cs_out": "DType __result;", "py_hint": "DType", "py_out": ["out = _c_int32()"],
              "py_return": "return _from_code(out.value)"},
})
# How the bindings pass an output and call (the tuples and lists above say otherwise).
for _row in RETURNS.values():
    _row.setdefault("cpp_call", None)
    _row.setdefault("cs_out_args", "out __result")
    _row.setdefault("cs_call", None)
    _row.setdefault("py_out_args", "out")
    _row.setdefault("py_retry", None)


def _check_tables() -> None:
    for ty, row in PARAMS.items():
        if set(row) != set(_COLUMNS):
            sys.exit(f"optable: parameter type {ty!r} has columns {sorted(set(row) ^ set(_COLUMNS))} wrong")
    columns = set(next(iter(RETURNS.values())))
    for ty, row in RETURNS.items():
        if set(row) != columns:
            sys.exit(f"optable: return type {ty!r} has columns {sorted(set(row) ^ columns)} wrong")


def cell(ty: str, column: str):
    """The cell of parameter type `ty` in `column`: a type or column the table lacks is an error."""
    row = PARAMS.get(ty)
    if row is None:
        raise SystemExit(f"optable: unknown parameter type {ty!r}")
    if column not in row:
        raise SystemExit(f"optable: no column {column!r} for parameter type {ty!r}")
    return row[column]


def ret_cell(ret: str, column: str):
    """The cell of return type `ret` in `column` (an error when the table lacks it)."""
    row = RETURNS.get(ret)
    if row is None:
        raise SystemExit(f"optable: unknown return type {ret!r}")
    if column not in row:
        raise SystemExit(f"optable: no column {column!r} for return type {ret!r}")
    return row[column]


def fill(template: str, p: Param, n: str | None = None, **extra) -> str:
    """A cell with the parameter's names put in (`n`: as the language spells it)."""
    return template.format(n=n or p.name, name=p.name, **extra)


# ---------------------------------------------------------------- operators
#
# An op's attribute column may list the operator expressions it stands for, written with the
# op's own parameter names, and each language defines the operators its column allows:
#   `a + b`   binary: the op's first parameter (a tensor) on the left, its second (a tensor or a
#             scalar) on the right; the op returns a new tensor (T)
#   `s - a`   reflected: a scalar on the left of the op's tensor (`2 - t`)
#   `a += b`  compound assignment, in place (the op returns T!, its first input)
#   `-a`, `abs(a)`  unary, on the op's one tensor parameter
# A language whose cell is empty (None/False) has no such operator: the op stays a method there.
#
# Columns of a binary symbol:
#   compound   whether `a <sym>= b` exists (not for comparisons)
#   rust       the std::ops trait (`Add`; compound: `AddAssign`), or None
#   cpp        whether C++ defines it (comparisons: no; `if (a < b)` would test Tensor's
#              `explicit operator bool`)
#   cs         whether C# defines it (comparisons: no; `==` must stay reference equality, for
#              null tests); C# has no compound-assignment operators at all (`x += y` is always
#              `x = x + y`), so compound forms are never C# operators
#   py         the Python method's stem (`add`: __add__, __radd__, __iadd__)
#   py_reflected  whether Python has the reflected method (`__radd__`; comparisons reflect into
#              one another instead, which Python does by itself)
#   py_slot    the CPython number slot's stem (`add`: nb_add, nb_inplace_add) the compiled
#              accelerator fills (bindings/python/tensorref/_speedups.c), or None
BINARY_OPERATORS: dict[str, dict] = {
    "+": dict(compound=True, rust="Add", cpp=True, cs=True, py="add", py_reflected=True, py_slot="add"),
    "-": dict(compound=True, rust="Sub", cpp=True, cs=True, py="sub", py_reflected=True, py_slot="subtract"),
    "*": dict(compound=True, rust="Mul", cpp=True, cs=True, py="mul", py_reflected=True, py_slot="multiply"),
    "/": dict(compound=True, rust="Div", cpp=True, cs=True, py="truediv", py_reflected=True,
              py_slot="true_divide"),
    "%": dict(compound=True, rust="Rem", cpp=True, cs=True, py="mod", py_reflected=True, py_slot="remainder"),
    "//": dict(compound=True, rust=None, cpp=False, cs=False, py="floordiv", py_reflected=True,
               py_slot="floor_divide"),
    "@": dict(compound=True, rust=None, cpp=False, cs=False, py="matmul", py_reflected=True,
              py_slot="matrix_multiply"),
    "**": dict(compound=True, rust=None, cpp=False, cs=False, py="pow", py_reflected=True, py_slot="power"),
    "==": dict(compound=False, rust=None, cpp=False, cs=False, py="eq", py_reflected=False, py_slot=None),
    "!=": dict(compound=False, rust=None, cpp=False, cs=False, py="ne", py_reflected=False, py_slot=None),
    "<": dict(compound=False, rust=None, cpp=False, cs=False, py="lt", py_reflected=False, py_slot=None),
    "<=": dict(compound=False, rust=None, cpp=False, cs=False, py="le", py_reflected=False, py_slot=None),
    ">": dict(compound=False, rust=None, cpp=False, cs=False, py="gt", py_reflected=False, py_slot=None),
    ">=": dict(compound=False, rust=None, cpp=False, cs=False, py="ge", py_reflected=False, py_slot=None),
}
# Unary operators (`-a`) and Python builtins (`abs(a)`): the same columns as far as they apply.
UNARY_OPERATORS: dict[str, dict] = {
    "-": dict(rust="Neg", cpp=True, cs=True, py="neg", py_slot="negative"),
    "abs": dict(rust=None, cpp=False, cs=False, py="abs", py_slot="absolute"),
}


@dataclass(frozen=True)
class Operator:
    """One operator expression of an op: `symbol` in `form` (binary, reflected, compound,
    unary), the other operand of type `operand` ("T" or "scalar"; None when unary)."""
    symbol: str
    form: str
    operand: str | None
    text: str

    def cell(self, column: str):
        table = UNARY_OPERATORS if self.form == "unary" else BINARY_OPERATORS
        return table[self.symbol][column]


def parse_operator(text: str, params: tuple[Param, ...], ret: str, where: str) -> Operator:
    """The operator expression `text` of an op with `params` and return type `ret`, checked."""
    names = [p.name for p in params]
    types = {p.name: p.ty for p in params}

    def bad(why: str):
        sys.exit(f"{where}: operator `{text}`: {why}")

    m = re.fullmatch(r"(\w+) (\S+) (\w+)", text)
    if m:
        left, sym, right = m.groups()
        if sym in BINARY_OPERATORS:
            form = "binary" if [left, right] == names else "reflected" if [right, left] == names else None
            if form is None:
                bad(f"the operands must be the op's two parameters, {' and '.join(names) or 'none'}")
            if ret != "T":
                bad("a binary operator's op returns a new tensor (T)")
            if types[names[0]] != "T" or types[names[1]] not in ("T", "scalar"):
                bad("the op takes a tensor, then a tensor or a scalar")
            if form == "reflected" and types[names[1]] != "scalar":
                bad("only a scalar goes on the left (a tensor's own operator takes the other side)")
            return Operator(sym, form, types[names[1]], text)
        if sym.endswith("=") and BINARY_OPERATORS.get(sym[:-1], {}).get("compound"):
            if [left, right] != names or ret != "T!" or types[right] not in ("T", "scalar"):
                bad("a compound assignment writes an in-place op (T!) of a tensor and a tensor or scalar, in order")
            return Operator(sym[:-1], "compound", types[right], text)
        bad(f"unknown operator {sym!r} (one of {', '.join(BINARY_OPERATORS)}, or those with = for compound assignment)")
    m = re.fullmatch(r"(\w+)\((\w+)\)", text) or re.fullmatch(r"(\W+)(\w+)", text)
    if m and m.group(1) in UNARY_OPERATORS:
        if names != [m.group(2)] or types[m.group(2)] != "T" or ret != "T":
            bad("a unary operator's op takes one tensor and returns a new one")
        return Operator(m.group(1), "unary", None, text)
    bad(f"not an operator expression (`a + b`, `s - a`, `a += b`, `-a`, {', '.join(f'`{u}(a)`' for u in UNARY_OPERATORS if u.isalpha())})")


def operator_key(o: Operator) -> tuple:
    """What two ops must not both claim."""
    return (o.symbol, o.form, o.operand)


def parse(text: str) -> list[Op]:
    _check_tables()
    ops = []
    claimed: dict[tuple, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cols = [c.strip() for c in line.split(" | ")]
        if len(cols) not in (5, 6):
            sys.exit(f"ops.def:{lineno}: expected 5 columns separated by ' | ' and optional attributes, got {len(cols)}")
        name, params, ret, body, doc = cols[:5]
        attributes = [a.strip() for a in cols[5].split(",")] if len(cols) == 6 else []
        plist = []
        for p in filter(None, (p.strip() for p in params.split(","))):
            pname, _, pty = (x.strip() for x in p.partition(":"))
            if pty not in PARAMS:
                sys.exit(f"ops.def:{lineno}: unknown param type {pty!r} (one of {', '.join(PARAMS)})")
            plist.append(Param(pname, pty))
        if ret not in RETURNS:
            sys.exit(f"ops.def:{lineno}: unknown return type {ret!r} (one of {', '.join(RETURNS)})")
        if ret == "T!" and not (plist and plist[0].ty == "T"):
            sys.exit(f"ops.def:{lineno}: an in-place op needs a tensor first")
        flags, operators = set(), []
        for a in attributes:
            if a in FLAGS:
                flags.add(a)
            elif re.fullmatch(r"\w+", a):
                sys.exit(f"ops.def:{lineno}: unknown flag {a!r} (one of {', '.join(sorted(FLAGS))})")
            else:
                operators.append(parse_operator(a, tuple(plist), ret, f"ops.def:{lineno}"))
        for o in operators:
            if operator_key(o) in claimed:
                sys.exit(f"ops.def:{lineno}: operator `{o.text}` is already op {claimed[operator_key(o)]!r}'s")
            claimed[operator_key(o)] = name
        ops.append(Op(name, tuple(plist), ret, body, doc, frozenset(flags), tuple(operators)))
    return ops


def load() -> list[Op]:
    return parse(TABLE.read_text())
