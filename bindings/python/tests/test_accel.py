"""The optional compiled hot path (tensorref._speedups, see tensorref/_accel.py): it is in use
unless TENSORREF_PURE_PYTHON is set (so a build that silently broke fails here), also in the
pip-installed package; it compiles without warnings and links no library; and it behaves as
the pure-ctypes path does, operator by operator: the same results, errors, owners, live handle
counts and refcounts, across threads and scopes, and objects may change path mid-life."""
import gc
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import threading

import numpy as np
import pytest

import tensorref as tr
from tensorref import _accel

PURE = os.environ.get("TENSORREF_PURE_PYTHON", "") not in ("", "0")
SOURCE = pathlib.Path(_accel.__file__).with_name("_speedups.c")
needs_accel = pytest.mark.skipif(PURE or not _accel.FAST, reason="the accelerator is not in use")


def test_the_accelerator_is_in_use_unless_turned_off():
    if PURE:
        assert not tr.accelerated and _accel.reason == "TENSORREF_PURE_PYTHON is set"
    else:
        assert tr.accelerated, (
            f"tensorref._speedups is not in use: {_accel.reason}. Build it: pip install "
            f"bindings/python, or (for this source tree) python3 setup.py build_ext --inplace "
            f"in bindings/python; make test-python does both")
        assert tr.Tensor.__add__ is _accel.FAST["__add__"]


@pytest.mark.skipif(PURE, reason="checks the accelerated install")
def test_the_installed_package_is_accelerated(tmp_path):
    # -I: neither this source tree (PYTHONPATH, the current directory) nor user site-packages.
    env = {k: v for k, v in os.environ.items() if k != "TENSORREF_PURE_PYTHON"}
    env["TENSORREF_LIB"] = os.path.abspath(tr.LIB_PATH)  # the library this run tests
    probe = "import importlib.util as u; s = u.find_spec('tensorref'); print(s.origin if s else '')"
    where = subprocess.run([sys.executable, "-I", "-c", probe], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60).stdout.strip()
    if not where:
        pytest.skip("tensorref is not installed (pip install bindings/python)")
    check = "import tensorref as tr; print(tr.accelerated, tr._accel.reason)"
    r = subprocess.run([sys.executable, "-I", "-c", check], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "True", f"the installed package ({where}) is not accelerated: {r.stdout}"


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_the_extension_compiles_without_warnings(tmp_path):
    include = sysconfig.get_paths()["include"]
    header = pathlib.Path(__file__).resolve().parents[3] / "include"  # tensorref.h, as setup.py
    r = subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", "-O2", "-fPIC", "-c", f"-I{include}", f"-I{header}",
                        str(SOURCE), "-o", str(tmp_path / "speedups.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@needs_accel
@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf")
def test_the_extension_links_no_library_of_this_project():
    from tensorref import _speedups
    r = subprocess.run(["readelf", "-d", _speedups.__file__], capture_output=True, text=True)
    assert r.returncode == 0 and "tensorref" not in r.stdout.replace(_speedups.__file__, "")


# ---------------------------------------------------------------- the same behaviour both ways

RNG = np.random.default_rng(3)
A = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((3, 4)).astype(np.float32)
P = np.abs(B) + 0.5
ROW = RNG.standard_normal(4).astype(np.float32)
SQ = RNG.standard_normal((4, 4)).astype(np.float32)


class Sub(tr.Tensor):
    """A subclass operand: not the exact class, so the operators go to the pure methods."""
    __slots__ = ()


def outcome(fn):
    """What an expression gives: its values and owner, or its error (class and text)."""
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001
        return ("raises", type(e).__name__, re.sub(r"0x[0-9a-f]+", "0x..", str(e)))
    if isinstance(r, tr.Tensor):
        return (type(r).__name__, r.numpy().tolist(), r.dtype.name, r._own)
    return ("value", repr(r))


def expressions(a, b, p, row, sq, sub, ints):
    """Every routed operator with every kind of operand, and the cases the pure methods keep."""
    stale = tr.ones(1)
    stale.close()
    return {
        "a + b": lambda: a + b, "a + row": lambda: a + row, "a - b": lambda: a - b,
        "a * b": lambda: a * b, "a / p": lambda: a / p, "a @ sq": lambda: a @ sq,
        "p ** b": lambda: p ** b, "-a": lambda: -a,
        "a + 2": lambda: a + 2, "a + 2.5": lambda: a + 2.5, "a - 1.5": lambda: a - 1.5,
        "a * 3": lambda: a * 3, "a / 4.0": lambda: a / 4.0, "a ** 2.0": lambda: a ** 2.0,
        "a ** 2": lambda: a ** 2, "2 + a": lambda: 2 + a, "2.5 * a": lambda: 2.5 * a,
        "1.5 - a": lambda: 1.5 - a, "2.0 / p": lambda: 2.0 / p,
        "a + True": lambda: a + True, "a * np.float64": lambda: a * np.float64(1.5),
        "a + sub": lambda: a + sub,
        "sub + a": lambda: sub + a, "sub * 2.0": lambda: sub * 2.0, "-sub": lambda: -sub,
        "ints + 1": lambda: ints + 1, "ints * ints": lambda: ints * ints,
        "ints / 2": lambda: ints / 2,
        # errors: from the library, and from Python
        "a @ a": lambda: a @ a, "a + sq (shape)": lambda: a + sq, "stale + a": lambda: stale + a,
        "a + stale": lambda: a + stale, "stale * 2.0": lambda: stale * 2.0, "-stale": lambda: -stale,
        "a + 'x'": lambda: a + "x", "'x' + a": lambda: "x" + a, "a @ 2": lambda: a @ 2,
        "2 @ a": lambda: 2 @ a, "2 ** a": lambda: 2 ** a, "pow(a, 2.0, 3)": lambda: pow(a, 2.0, 3),
        "a + 10**400": lambda: a + 10 ** 400, "a + None": lambda: a + None,
        # the operators generated from ops.def beyond those above
        "a % p": lambda: a % p, "a % 2": lambda: a % 2, "7.5 % p": lambda: 7.5 % p,
        "a // p": lambda: a // p, "a // 0.5": lambda: a // 0.5, "3 // p": lambda: 3 // p,
        "ints % 3": lambda: ints % 3, "ints // 2": lambda: ints // 2, "abs(a)": lambda: abs(a),
        "abs(stale)": lambda: abs(stale), "1 - ints": lambda: 1 - ints, "a % 'x'": lambda: a % "x",
        "2 ** p": lambda: 2 ** p, "a % sub": lambda: a % sub,
    }


def in_place(a, b, fresh):
    """The in-place operators: in place for a Tensor (and *= scalar), a new object otherwise."""
    seen = []
    for op, operand in (("+=", b), ("-=", b), ("*=", b), ("*=", 0.5), ("+=", 1.0), ("-=", 2),
                        ("/=", b), ("+=", "x"), ("+=", a.narrow(0, 0, 1)), ("%=", b), ("%=", 0.75),
                        ("//=", 0.5), ("//=", b), ("**=", 2), ("**=", 3.0), ("%=", "x")):
        x = fresh()
        before = x
        try:
            if op == "+=":
                x += operand
            elif op == "-=":
                x -= operand
            elif op == "*=":
                x *= operand
            elif op == "/=":
                x /= operand
            elif op == "%=":
                x %= operand
            elif op == "//=":
                x //= operand
            else:
                x **= operand
        except Exception as e:  # noqa: BLE001
            seen.append((op, "raises", type(e).__name__, re.sub(r"0x[0-9a-f]+", "0x..", str(e))))
            continue
        seen.append((op, x is before, x.numpy().tolist(), x._own))
    return seen


def run_everything():
    """The whole behaviour of the operators, outside and inside a scope, and the counters."""
    tr.flush_releases()
    live, stats = tr.live_handles(), tr.stats()
    a, b, p = tr.from_numpy(A), tr.from_numpy(B), tr.from_numpy(P)
    row, sq = tr.from_numpy(ROW), tr.from_numpy(SQ)
    sub, ints = Sub(), tr.tensor([[1, 2], [3, 4]])
    st = tr.ones(4)  # a handle to view as the subclass
    sub.value, sub._own = st.value, False
    seen = {}
    for where in ("outside", "scope"):
        if where == "scope":
            s = tr.scope()
        for name, fn in expressions(a, b, p, row, sq, sub, ints).items():
            seen[where, name] = outcome(fn)
        seen[where, "in place"] = in_place(a, b, lambda: a + 0.0)
        if where == "scope":
            tr.flush_releases()  # what the program dropped leaves the scope with its handle
            seen[where, "scope len"] = len(s)
            s.dispose()
    for t in (a, b, p, row, sq, ints, st):
        t.close()
    del sub
    gc.collect()
    after = tr.stats()
    seen["live"] = tr.live_handles() - live
    seen["stats"] = tuple(x - y for x, y in zip(after, stats))
    return seen


@needs_accel
def test_both_paths_give_the_same_results_errors_owners_and_counts():
    prev = _accel.use(False)
    try:
        pure = run_everything()
        _accel.use(True)
        fast = run_everything()
    finally:
        _accel.use(prev)
    assert pure.keys() == fast.keys()
    for k in pure:
        assert fast[k] == pure[k], k
    assert fast["live"] == 0


def test_results_match_numpy_and_errors_carry_the_library_message():
    with tr.scope():
        a, b = tr.from_numpy(A), tr.from_numpy(B)
        np.testing.assert_allclose((a + b).numpy(), A + B, rtol=1e-6)
        np.testing.assert_allclose((a - 2).numpy(), A - 2, rtol=1e-6)
        np.testing.assert_allclose((2.0 - a).numpy(), 2.0 - A, rtol=1e-6)
        np.testing.assert_allclose((a * b / 3).numpy(), A * B / 3, rtol=1e-5)
        np.testing.assert_allclose((-(a @ tr.from_numpy(SQ))).numpy(), -(A @ SQ), rtol=1e-5, atol=1e-6)
        with pytest.raises(tr.ShapeDtypeError) as e:
            a @ a
        assert e.value.function == "tr_tensor_matmul" and "3x4" in e.value.message
        c = a + 0.0
        c.close()
        with pytest.raises(tr.HandleError) as e:
            c * 2.0
        assert e.value.function == "tr_tensor_mul_scalar" and e.value.status_name == "TR_ERR_STALE_HANDLE"
        with pytest.raises(tr.HandleError) as e:
            c += b
        assert e.value.function == "tr_tensor_add_"


def named_ops():
    """Every routed named op, as a method and as a function, on Tensors and on a bad operand:
    results, errors (class and message), owners, and the live count afterwards."""
    out = {}
    before = tr.live_handles()
    a, b, sq = tr.from_numpy(A), tr.from_numpy(B), tr.from_numpy(SQ)
    for name in _accel.NAMED:
        x = tr.from_numpy(P if name.startswith("pow") else A)  # no NaN (NaN != NaN in the comparison)
        rhs = sq if name == "matmul" else b
        for how, call in (("method", lambda: getattr(x, name)(rhs)), ("function", lambda: getattr(tr, name)(x, rhs))):
            r = call()
            out[name, how] = (r.numpy().tolist(), r is x, r._own)
            if r is not x:
                r.close()
        with pytest.raises(Exception) as e:
            getattr(x, name)("two")  # a number is taken (by the op's scalar twin), a string is not
        out[name, "str"] = (type(e.value).__name__, str(e.value))
        if name != "matmul":
            r = getattr(x, name)(2.0)
            out[name, "float"] = r.numpy().tolist()
            if r is not x:
                r.close()
        with pytest.raises(Exception) as e:
            getattr(tr, name)(x, a if name == "matmul" else sq)  # a shape error from the library
        out[name, "shape"] = (type(e.value).__name__, str(e.value))
        x.close()
    for t in (a, b, sq):
        t.close()
    out["live"] = tr.live_handles() - before
    return out


@needs_accel
def test_named_ops_are_routed_and_behave_as_generated():
    assert tr.Tensor.add is tr.add is _accel.FAST_NAMED["add"] and tr.add.__doc__ == _accel.PURE_NAMED["add"].__doc__
    fast = named_ops()
    _accel.use(False)
    try:
        assert tr.Tensor.add is tr.add is _accel.PURE_NAMED["add"]
        pure = named_ops()
    finally:
        _accel.use(True)
    assert fast == pure
    assert fast["live"] == 0


@needs_accel
def test_objects_may_change_path_mid_life():
    before = tr.live_handles()
    a = tr.ones(4)
    try:
        made_fast = [a + a for _ in range(100)]
        _accel.use(False)
        made_pure = [a * 2.0 for _ in range(100)]
        del made_fast  # released by the pure finalizer
        _accel.use(True)
        del made_pure  # by the compiled one
        with tr.scope():
            kept = (a + a).detach_from_scope()
        _accel.use(False)
        del kept
    finally:
        _accel.use(True)
        a.close()
    assert tr.live_handles() == before


@needs_accel
def test_errors_leave_refcounts_and_objects_as_they_were():
    a, b = tr.ones([2, 3]), tr.ones(3)
    stale = tr.ones(1)
    stale.close()

    def failing():
        for fn in (lambda: a @ a, lambda: a + "x", lambda: stale + a, lambda: a * stale,
                   lambda: pow(a, 2.0, 3), lambda: a + 10 ** 400, lambda: -stale):
            try:
                fn()
            except Exception:  # noqa: BLE001
                pass

    failing()
    gc.collect()
    counts = [sys.getrefcount(x) for x in (a, b, stale)]
    objects = sum(type(o) is tr.Tensor for o in gc.get_objects())
    live = tr.live_handles()
    for _ in range(200):
        failing()
    gc.collect()
    assert [sys.getrefcount(x) for x in (a, b, stale)] == counts
    assert sum(type(o) is tr.Tensor for o in gc.get_objects()) == objects
    assert tr.live_handles() == live
    for t in (a, b):
        t.close()


@pytest.mark.parametrize("fast", [True, False], ids=["compiled", "pure"])
def test_results_hold_their_handles_and_dropped_ones_leave_their_scope(fast):
    """Every result object holds its handle, in a scope or not, on any thread: dropped, it
    releases it (out of its scope); kept, its scope releases it at the end."""
    if fast and (PURE or not _accel.FAST):
        pytest.skip("the accelerator is not in use")
    prev = _accel.use(fast) if _accel.FAST else False
    a = tr.ones(2)
    seen = {}

    def other():
        with tr.scope() as s:
            kept = a + a
            for _ in range(10):
                a * 2.0  # dropped at once
            tr.flush_releases()
            seen["other"] = (kept._own, len(s), kept in s)

    try:
        th = threading.Thread(target=other)
        th.start()
        th.join(30)
        with tr.scope() as s:
            kept = [a - a, -a, a / 2, a * 3]
            for _ in range(10):
                a + 1.0
            tr.flush_releases()
            seen["main"] = ([k._own for k in kept], len(s))
        seen["after"] = [k.is_valid() for k in kept]
        outside = a + a
        seen["outside"] = (outside._own, outside.scope)
        outside.close()
    finally:
        if _accel.FAST:
            _accel.use(prev)
        a.close()
    assert seen == {"other": (True, 1, True), "main": ([True] * 4, 4), "after": [False] * 4,
                    "outside": (True, None)}


@needs_accel
def test_library_calls_release_the_gil(tmp_path):
    # A residency event callback runs on the op's thread with the manager locked and needs the
    # GIL; ops (compiled) and scope disposals (ctypes) on three threads. An op that kept the
    # GIL while waiting for the manager would deadlock (most runs of this without the release).
    script = textwrap.dedent("""
        import threading, tensorref as tr
        assert tr.accelerated
        ws = [tr.randn([64, 64]) for _ in range(4)]
        events = []
        def work():
            for _ in range(500):
                with tr.scope():
                    h = ws[0] + ws[1]
                    for w in ws[2:]:
                        h = h @ w + h
        with tr.residency.session(policy="flow", budget_bytes=1 << 20):
            tr.residency.set_callback(lambda e: events.append(e.kind))
            threads = [threading.Thread(target=work) for _ in range(3)]
            for t in threads: t.start()
            for t in threads: t.join()
            tr.residency.set_callback(None)
        for w in ws: w.close()
        print("ok", len(events) > 0, tr.live_handles())
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("deadlock: an op held the GIL while waiting for a library lock")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ok", "True", "0"]
