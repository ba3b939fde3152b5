"""The binding against the C ABI it wraps: every function of include/tensorref.h has ctypes
argtypes and restype matching its C prototype, the generated constants equal the header's,
and a library of another ABI version (or no libtensorref at all) is refused on import with a
clear message."""
import os
import pathlib
import re
import shutil
import subprocess
import sys
from ctypes import POINTER, c_bool, c_char, c_char_p, c_double, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p

import pytest

import tensorref as tr
from tensorref import _abi_generated, _lib, _scalar

ROOT = pathlib.Path(__file__).resolve().parents[3]
# tensorref.h and the ops header it includes.
HEADER = (ROOT / "include/tensorref.h").read_text() + (ROOT / "include/tensorref_ops.h").read_text()
PACKAGE_DIR = str(pathlib.Path(tr.__file__).resolve().parents[1])

# What each C type of the header must be declared as.
C_TO_CTYPES = {
    "struct tr_tensor": tr.Tensor, "struct tr_tensor *": POINTER(tr.Tensor),
    "const struct tr_tensor *": POINTER(c_uint64), "struct tr_scope": _abi_generated.ScopeHandle,
    "struct tr_scope *": POINTER(_abi_generated.ScopeHandle), "struct tr_stats *": POINTER(_abi_generated.Stats),
    "bool": c_bool, "bool *": POINTER(c_bool), "size_t": c_size_t, "size_t *": POINTER(c_size_t),
    "int64_t": c_int64, "int64_t *": POINTER(c_int64), "const int64_t *": POINTER(c_int64),
    "double": c_double, "double *": POINTER(c_double), "int32_t": c_int32, "tr_dtype": c_int32,
    "tr_dtype *": POINTER(c_int32), "tr_device": c_int32, "tr_device *": POINTER(c_int32),
    "uint32_t": c_uint32, "uint64_t": c_uint64,
    "char *": POINTER(c_char), "const char *": c_char_p, "void *": c_void_p,
    "void **": POINTER(c_void_p), "const uint8_t *": c_void_p, "uint8_t *": c_void_p,
    "tr_event_fn": _abi_generated.EventFn, "struct tr_residency_config *": POINTER(_abi_generated.ResidencyConfig),
    "const struct tr_residency_config *": POINTER(_abi_generated.ResidencyConfig),
    "struct tr_residency_stats *": POINTER(_abi_generated.ResidencyStats),
    "struct tr_device_memory *": POINTER(_abi_generated.DeviceMemory),
    "struct tr_schedule_model *": POINTER(_abi_generated.ScheduleModel),
    "uint64_t *": POINTER(c_uint64), "float *": c_void_p, "const char const **": POINTER(c_char_p),
    "tr_status": c_int32, "int32_t *": POINTER(c_int32), "struct tr_scalar": _scalar.Scalar,
    "struct tr_scalar *": POINTER(_scalar.Scalar),
    # The ops header (cbindgen on src/ffi/ops_generated/ alone) names the structs by their typedefs.
    "tr_tensor": tr.Tensor, "tr_tensor *": POINTER(tr.Tensor), "const tr_tensor *": POINTER(c_uint64),
    "tr_scalar": _scalar.Scalar, "const tr_scalar *": POINTER(_scalar.Scalar), "const tr_dtype *": POINTER(c_int32),
    "const double *": POINTER(c_double), "const bool *": POINTER(c_bool),
}


def c_type(decl: str, named: bool = True) -> str:
    """A C type in one spelling: "const int64_t *shape" -> "const int64_t *", "void **out" ->
    "void **". `named`: the declaration ends with a parameter name."""
    words = re.sub(r"\*", " ", decl).split()
    if named:
        words = words[:-1]
    stars = decl.count("*")
    return " ".join(words) + (" " + "*" * stars if stars else "")


def expected(t: str):
    if t in C_TO_CTYPES:
        return C_TO_CTYPES[t]
    raise AssertionError(f"C type {t!r} has no ctypes mapping in this test")


# `extern` prototypes are functions the library imports (from its own C++ shims), which it does
# not export: they are not part of the ABI (and should not be in the header at all).
PROTOTYPES = [(m.group(2), " ".join(m.group(1).split()), m.group(3))
              for m in re.finditer(r"^([A-Za-z_][\w \*]*?)\b(tr_\w+)\(([^)]*)\);", HEADER, re.M)
              if not m.group(1).startswith("extern")]


def test_header_was_parsed():
    names = {p[0] for p in PROTOTYPES}
    assert {"tr_tensor_add", "tr_scope_new", "tr_last_error", "tr_tensor_from_dlpack"} <= names
    assert len(names) == len(PROTOTYPES) > 100


def test_library_exports_every_declared_function():
    assert _lib.missing == []


@pytest.mark.parametrize("name,ret,params", PROTOTYPES, ids=[p[0] for p in PROTOTYPES])
def test_every_function_has_matching_argtypes_and_restype(name, ret, params):
    fn = getattr(_lib.lib, name)
    assert fn.argtypes is not None, f"{name} has no argtypes"
    want_args = tuple(expected(c_type(p)) for p in params.split(",") if p.strip() != "void")
    assert tuple(fn.argtypes) == want_args
    want_ret = None if ret == "void" else expected(c_type(ret, named=False))
    assert fn.restype == want_ret


def test_generated_constants_equal_the_header():
    define = lambda n: int(re.search(rf"#define {n} (\d+)", HEADER).group(1))  # noqa: E731
    assert _abi_generated.TR_ABI_VERSION == define("TR_ABI_VERSION") == tr.abi_version()
    assert _abi_generated.TR_VERSION == tuple(define(f"TR_VERSION_{p}") for p in ("MAJOR", "MINOR", "PATCH"))
    statuses = {k: int(v) for k, v in re.findall(r"^\s+(TR_(?:OK|ERR_\w+)) = (\d+),", HEADER, re.M)}
    assert _abi_generated.STATUS_CODES == statuses
    for prefix, codes in (("DTYPE", _abi_generated.DTYPE_CODES), ("SCALAR_KIND", _abi_generated.SCALAR_KIND_CODES),
                          ("DEVICE", _abi_generated.DEVICE_CODES), ("POLICY", _abi_generated.POLICY_CODES),
                          ("EVENT_KIND", _abi_generated.EVENT_KIND_CODES)):
        assert codes == {k: int(v) for k, v in re.findall(rf"^\s+TR_{prefix}_(\w+) = (\d+),", HEADER, re.M)}
    assert {d.code for d in tr.dtypes.ALL} == set(_abi_generated.DTYPE_CODES.values())


def test_the_scalar_struct_matches_the_header():
    body = re.search(r"typedef struct tr_scalar \{(.*?)\} tr_scalar;", HEADER, re.S).group(1)
    fields = re.findall(r"^\s*(\w+) (\w+);", body, re.M)
    assert fields == [("tr_scalar_kind", "kind"), ("int64_t", "i"), ("double", "f"), ("bool", "b")]
    assert [f for f, _ in _scalar.Scalar._fields_] == [n for _, n in fields]


def test_version_text():
    text = tr.version()
    assert text.startswith(f"libtensorref {tr.__version__} (ABI {tr.TR_ABI_VERSION};")
    assert os.path.isfile(tr.LIB_PATH)


def test_check_abi_refuses_another_version_with_what_to_do():
    with pytest.raises(tr.AbiMismatchError) as e:
        _lib.check_abi(_lib.lib, "libX.so", expected=tr.TR_ABI_VERSION + 1)
    msg = str(e.value)
    assert f"ABI version {tr.TR_ABI_VERSION}," in msg and f"ABI version {tr.TR_ABI_VERSION + 1}" in msg
    assert "TENSORREF_LIB" in msg and "cargo build" in msg


def import_with(lib_path: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TENSORREF_LIB=lib_path, PYTHONPATH=PACKAGE_DIR)
    return subprocess.run([sys.executable, "-c", "import tensorref; print(tensorref.LIB_PATH)"],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_import_refuses_a_library_of_another_abi_version(tmp_path):
    src = tmp_path / "fake.c"
    src.write_text("unsigned tr_abi_version(void) { return 9999; }\n")
    lib = tmp_path / "libtensorref.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    r = import_with(str(tmp_path))  # a directory works too
    assert r.returncode != 0
    assert "AbiMismatchError" in r.stderr and "ABI version 9999" in r.stderr


def test_import_refuses_a_library_that_is_not_libtensorref():
    maps = pathlib.Path("/proc/self/maps").read_text().split()
    libm = next((w for w in maps if re.search(r"/libm\.so[.\d]*$", w)), None)
    if libm is None:
        pytest.skip("libm is not mapped in this process")
    r = import_with(libm)
    assert r.returncode != 0 and "is not libtensorref" in r.stderr


def test_import_reports_a_missing_file():
    r = import_with("/nonexistent/libtensorref.so")
    assert r.returncode != 0 and "TENSORREF_LIB" in r.stderr and "no such file" in r.stderr


def test_import_with_the_right_library_succeeds():
    r = import_with(tr.LIB_PATH)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == tr.LIB_PATH


@pytest.mark.parametrize("cname,cls", [("tr_residency_config", _abi_generated.ResidencyConfig),
                                       ("tr_residency_stats", _abi_generated.ResidencyStats),
                                       ("tr_event", _abi_generated.Event)])
def test_structs_have_the_headers_fields_in_order(cname, cls, header=HEADER):
    body = re.search(rf"typedef struct {cname} \{{(.*?)\}} {cname};", header, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    fields = re.findall(r"([\w ]+?)\s*(\*?)\s*(\w+);", body)
    names = [f[2] for f in fields]
    assert [f[0] for f in cls._fields_] == names
    ctypes_of = {"int32_t": c_int32, "uint32_t": c_uint32, "uint64_t": c_uint64, "bool": c_bool,
                 "double": c_double, "const char": c_char_p, "tr_device": c_int32, "tr_policy": c_int32,
                 "tr_recompute": c_int32, "tr_event_kind": c_int32, "tr_weight_mode": c_int32}
    assert [f[1] for f in cls._fields_] == [ctypes_of[t.strip()] for t, _, _ in fields]
