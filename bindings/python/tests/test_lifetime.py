"""Handle lifetime through Python objects: close() / with / garbage collection, aliases, raw
handle views, copies refused, and a process that exits with tensors, scopes and threads still
alive (finalizers run during interpreter shutdown must neither raise nor crash)."""
import copy
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import tensorref as tr


def test_with_block_closes_and_close_is_idempotent():
    before = tr.live_handles()
    with tr.ones(3) as t:
        assert tr.live_handles() == before + 1
    assert tr.live_handles() == before and not t.is_valid()
    t.close()
    t.dispose()
    assert tr.live_handles() == before


def test_alias_has_its_own_life_over_shared_storage():
    a = tr.zeros(2)
    b = a.alias()
    assert b.handle != a.handle
    b.add_(tr.ones(2))
    assert a.numpy().tolist() == [1.0, 1.0]  # same storage
    a.close()
    assert b.is_valid() and b.numpy().tolist() == [1.0, 1.0]
    b.close()


def test_raw_handle_views_do_not_release():
    t = tr.ones(1)
    view = tr.Tensor(t.handle)
    assert view.numel() == 1
    del view
    assert t.is_valid()
    t.close()


def test_copies_share_or_copy_the_data_and_pickles_are_refused():
    t = tr.ones(2)
    shallow, deep = copy.copy(t), copy.deepcopy(t)
    assert shallow.handle != t.handle and deep.handle != t.handle
    t.add_(tr.ones(2))
    assert shallow.tolist() == [2.0, 2.0]  # a new handle to the same storage, as torch's copy
    assert deep.tolist() == [1.0, 1.0]     # its own storage
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(t)
    for x in (t, shallow, deep):
        x.close()


def test_exit_with_live_tensors_scopes_and_threads_is_clean():
    script = textwrap.dedent("""
        import threading, tensorref as tr
        keep = [tr.ones(4) for _ in range(10)]          # owned, alive at exit
        cycle = [tr.zeros(2)]; cycle.append(cycle)      # collected by the cyclic GC at exit
        s = tr.scope(); inner = tr.ones(2)              # a scope left open
        def worker():
            global from_thread
            from_thread = tr.ones(3)                    # made on a thread that has ended
        th = threading.Thread(target=worker); th.start(); th.join()
        dead = tr.ones(1); dead.close()
        print("ok", tr.live_handles())
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok ") and r.stderr == ""
