"""Residency event callbacks that do what callbacks do: allocate (so Python's garbage collector
runs inside them and finalizes Tensors there, while the library holds the manager's lock), drop
tensors, and call back into the library. None of it may hang.

Each scenario runs in a child process under a watchdog (faulthandler.dump_traceback_later): a
deadlock dumps every thread's stack and fails the test, rather than running into the test
runner's timeout or hanging the suite.
"""
import os
import subprocess
import sys
import textwrap

import pytest

POLICIES = ["resident", "genoa", "flow"]
WATCHDOG_S = 240


def run(body: str, *args: str, watchdog_s: int = WATCHDOG_S) -> subprocess.CompletedProcess:
    script = "import faulthandler, sys\n" \
             f"faulthandler.dump_traceback_later({watchdog_s}, exit=True)\n" + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True,
                       text=True, timeout=watchdog_s + 60)
    assert "Timeout (0:" not in r.stderr, f"watchdog: no progress in {watchdog_s} s:\n{r.stderr[-6000:]}"
    assert r.returncode == 0, r.stdout + r.stderr[-6000:]
    return r


STRESS = """
    import gc
    import tensorref as tr
    from tensorref import _ownership

    policy = sys.argv[1]
    a = tr.ones([16])
    base = tr.live_handles()

    class Owner:
        def __init__(self):
            self.me = self                     # a cycle: only the collector frees it
            self.t = tr.ones([16]) * 2.0       # ... and the tensors it owns

    collections_in_callbacks = [0]
    def watch(phase, info):
        if phase == "start" and _ownership.in_callback:
            collections_in_callbacks[0] += 1
    gc.callbacks.append(watch)

    events = [0]
    def callback(event):
        junk = [[] for _ in range(20)]
        junk.append(junk)                      # cyclic garbage, made inside the callback
        events[0] += 1

    with tr.no_grad(), tr.residency.session(policy=policy, budget_bytes=1 << 20):
        tr.residency.set_callback(callback)
        for i in range(10_000):
            Owner()
            b = a + 1
        errors = tr.residency.callback_errors()
        tr.residency.set_callback(None)
    del b
    gc.collect()
    gc.callbacks.remove(watch)
    assert errors == [], errors
    assert tr.live_handles() == base, (tr.live_handles(), base)
    print(events[0], collections_in_callbacks[0])
"""


@pytest.mark.parametrize("policy", POLICIES)
def test_ten_thousand_steps_allocating_garbage_in_the_callback_never_hang(policy):
    out = run(STRESS, policy).stdout.split()
    events, collections = int(out[0]), int(out[1])
    assert events >= 10_000
    assert collections > 0, "the collector never ran inside a callback: the test proves nothing"


def test_tensors_dropped_inside_a_callback_are_released_after_it():
    out = run("""
        import tensorref as tr
        a = tr.ones([16])
        base = tr.live_handles()
        held = [tr.ones([4]) for _ in range(50)]
        def callback(event):
            if held:
                held.pop()                     # the last reference goes, inside the callback
        with tr.no_grad(), tr.residency.session(policy="flow", budget_bytes=1 << 20):
            tr.residency.set_callback(callback)
            for _ in range(100):
                (a + 1).close()
            tr.residency.set_callback(None)
            assert tr.residency.callback_errors() == []
        assert not held
        print(tr.live_handles() - base)
    """).stdout.split()
    assert out == ["0"]


# The core's re-entrancy guard (src/residency) makes the callback's call an error; without it the
# call deadlocks on the manager's lock, and the watchdog fails this test.
def test_a_callback_that_calls_the_library_gets_an_error_not_a_hang():
    out = run("""
        import tensorref as tr
        a = tr.ones([16])
        def callback(event):
            tr.ones([1])                       # the manager is busy with this very op
        with tr.no_grad(), tr.residency.session(policy="flow", budget_bytes=1 << 20):
            tr.residency.set_callback(callback)
            b = a + 1
            errors = tr.residency.callback_errors()
            tr.residency.set_callback(None)
        assert b.tolist() == [2.0] * 16
        assert errors and all(isinstance(e, tr.TensorRefError) for e in errors), errors
        print(type(errors[0]).__name__, errors[0].status_name)
    """, watchdog_s=60)
    assert out.stdout.split()[0].endswith("Error"), out.stdout
