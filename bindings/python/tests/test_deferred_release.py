"""Deferred releases: a garbage-collected owning Tensor's handle waits in a buffer and is
released in a batch (one tr_tensor_release_many call) when the batch fills, on scope exit,
before live-handle and stats queries, on flush_releases(), and at interpreter exit; close()
still releases at once. Raw views (Tensor(handle)) observe when the handle really dies."""
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import tensorref as tr
from tensorref import _ownership


@pytest.fixture
def batch():
    """Restores the release batch size after a test changes it."""
    prev = tr.set_release_batch(_ownership.RELEASE_BATCH)
    yield
    tr.set_release_batch(prev)


def test_collected_handle_waits_until_flush(batch):
    tr.flush_releases()
    t = tr.ones(2)
    view = tr.Tensor(t.handle)
    del t
    assert view.is_valid(), "released before the batch filled"
    assert tr.flush_releases() == 1
    assert not view.is_valid()
    assert tr.flush_releases() == 0


def test_a_full_batch_is_released_without_a_flush(batch):
    tr.set_release_batch(4)
    ts = [tr.ones(1) for _ in range(4)]
    views = [tr.Tensor(t.handle) for t in ts]
    for _ in range(3):
        ts.pop()
    assert all(v.is_valid() for v in views)
    ts.pop()  # the fourth fills the batch
    assert not any(v.is_valid() for v in views)


def test_batch_of_one_releases_each_at_once(batch):
    tr.set_release_batch(1)
    t = tr.ones(1)
    view = tr.Tensor(t.handle)
    del t
    assert not view.is_valid()
    with pytest.raises(ValueError):
        tr.set_release_batch(0)


def test_close_is_not_deferred():
    t = tr.ones(1)
    view = tr.Tensor(t.handle)
    t.close()
    assert not view.is_valid()


def test_scope_exit_and_queries_flush(batch):
    t = tr.ones(1)
    view = tr.Tensor(t.handle)
    with tr.scope():
        del t
    assert not view.is_valid()
    before = tr.live_handles()
    u = tr.ones(1)
    del u
    assert tr.live_handles() == before  # the query flushed it


def test_stats_count_collected_releases(batch):
    tr.reset_stats()
    t = tr.ones(1)
    del t
    s = tr.stats()
    assert s.created_outside_scope == 1 and s.disposed_outside_scope == 1


def test_threads_dropping_tensors_leak_nothing(batch):
    tr.set_release_batch(8)
    before = tr.live_handles()

    def work():
        for _ in range(300):
            a = tr.ones(2)
            b = a + a
            del a, b

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert tr.live_handles() == before


def test_interpreter_exit_releases_what_waits():
    # atexit runs handlers last-in first-out: this check, registered before tensorref is
    # imported, runs after tensorref's flush and reads the library's raw count.
    script = textwrap.dedent("""
        import atexit, os, sys
        def check():
            n = tr._cdll.tr_live_handles()
            sys.stdout.write(f"live {n - base}\\n"); sys.stdout.flush()
        atexit.register(check)
        import tensorref as tr
        base = tr._cdll.tr_live_handles()
        for _ in range(10):
            t = tr.ones(3) + 1.0          # collected; waits in the buffer
        del t
        print("pending", len(tr._ownership._pending))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = r.stdout.split()
    assert lines[:2] == ["pending", "20"]  # 10 results and 10 temporaries
    assert lines[2:] == ["live", "0"]
