"""The scope operations beyond the numbered facts (TorchSharp's DisposeScope API), as the
Python binding exposes them: dispose_everything(_but), attach/detach/move_to_outer on several
tensors, out-of-order disposal, disposed scopes, current_scope, and which object owns a handle."""
import gc
import threading

import pytest

import tensorref as tr


def test_scope_captures_handles_created_while_current():
    with tr.scope() as s:
        a, b = tr.ones(2), tr.zeros(2)
        c = a + b
        assert len(s) == 3
        assert all(t in s for t in (a, b, c))
        assert c.scope == s and tr.current_scope() == s
    assert tr.current_scope() is None
    assert not any(t.is_valid() for t in (a, b, c))


def test_dispose_everything_keeps_the_scope_open_and_capturing():
    with tr.scope() as s:
        a = tr.ones(2)
        s.dispose_everything()
        assert len(s) == 0 and not a.is_valid()
        b = tr.ones(2)
        assert b in s and tr.current_scope() == s
    assert not b.is_valid()


def test_dispose_everything_but_keeps_only_listed_owned_handles():
    outside = tr.ones(1)
    with tr.scope() as s:
        keep1, keep2, drop = tr.ones(1), tr.ones(1), tr.ones(1)
        s.dispose_everything_but(keep1, keep2, outside)
        assert keep1.is_valid() and keep2.is_valid() and not drop.is_valid()
        assert outside not in s  # not adopted
        s.dispose_everything_but([keep2])  # one iterable works too
        assert not keep1.is_valid() and keep2.is_valid()
    assert not keep2.is_valid()
    assert outside.is_valid()
    outside.close()


def test_attach_detach_move_accept_several_tensors_and_return_them():
    a, b = tr.ones(1), tr.ones(1)
    with tr.scope() as outer:
        with tr.scope() as inner:
            assert inner.attach(a, b) == (a, b)
            assert len(inner) == 2
            assert inner.move_to_outer(a) is a
            assert a in outer and b in inner
            assert inner.detach([b]) is b  # one iterable of tensors works too
            assert b.scope is None
        assert a.is_valid() and b.is_valid()
    assert not a.is_valid()
    assert b.is_valid()
    b.close()


def test_move_to_outer_scope_chains_and_survives_the_inner_scope():
    with tr.scope() as outer:
        with tr.scope():
            y = (tr.ones(3) * 2.0).move_to_outer_scope()
        assert y.scope == outer
        assert y.numpy().tolist() == [2.0, 2.0, 2.0]
    assert not y.is_valid()


def test_out_of_order_dispose_relinks_inner_scopes():
    a = tr.scope()
    b = tr.scope()
    c = tr.scope()
    b.dispose()  # not the innermost
    assert tr.current_scope() == c
    t = tr.ones(1)
    assert t in c
    c.dispose()
    assert tr.current_scope() == a
    u = tr.ones(1)
    assert u in a
    a.dispose()
    assert tr.current_scope() is None
    assert not t.is_valid() and not u.is_valid()


def test_disposed_scope_refuses_mutation_and_ignores_second_dispose():
    s = tr.scope()
    s.dispose()
    assert s.disposed
    s.dispose()  # no-op
    t = tr.ones(1)
    with pytest.raises(tr.ScopeError) as e:
        s.attach(t)
    assert e.value.status_name == "TR_ERR_SCOPE_DISPOSED" and "disposed" in e.value.message
    with pytest.raises(tr.ScopeError):
        t.move_to_scope(s)
    assert t.scope is None
    t.close()


def test_moving_to_own_scope_is_a_no_op():
    with tr.scope() as s:
        t = tr.ones(1)
        t.move_to_scope(s)
        assert t in s and len(s) == 1
    assert not t.is_valid()


def test_an_object_holds_its_handle_whichever_scope_owns_it():
    """The object releases its handle (on close or collection) wherever the handle belongs; the
    scope it belongs to changes with the moves."""
    with tr.scope() as s:
        t = tr.ones(1)
        assert t._own is True and t.scope == s
        t.detach_from_scope()
        assert t._own is True and t.scope is None
        s.attach(t)
        assert t._own is True and t.scope == s
        t.move_to_outer_scope()
        assert t._own is True and t.scope is None
    assert type(t) is tr.Tensor and t.is_valid()
    t.close()
    assert t._own is None and "closed" in repr(t)


def test_dropping_an_object_in_a_scope_releases_its_handle_and_leaves_the_scope():
    with tr.scope() as s:
        t = tr.ones(1)
        kept = tr.ones(1)
        h = t.handle
        del t
        tr.flush_releases()  # collected objects' handles are released in batches
        assert len(s) == 1 and kept in s
        assert not tr.Tensor(h).is_valid()
    assert not kept.is_valid()


def test_a_loop_in_one_scope_keeps_a_constant_live_count():
    """Python frees on the last reference, also inside a scope: 1000 steps, each dropping the
    previous step's results, hold the same number of live handles at every step."""
    w = tr.randn([16, 16])
    x = tr.randn([4, 16])
    counts = set()
    with tr.scope() as s:
        for step in range(1000):
            h = (x @ w).relu()
            y = (h * 0.5 + 1.0).sum()
            if step % 50 == 0:
                counts.add((tr.live_handles(), len(s)))
        assert y.item() > 0
    assert len(counts) == 1, counts
    w.close()
    x.close()


def test_dropping_an_owning_object_releases_its_handle():
    before = tr.live_handles()
    t = tr.ones(1)
    h = t.handle
    assert tr.live_handles() == before + 1
    del t
    assert tr.live_handles() == before
    assert not tr.Tensor(h).is_valid()


def test_scopes_are_per_thread():
    seen = {}

    def worker():
        seen["current"] = tr.current_scope()
        t = tr.ones(1)
        seen["owned_by"] = t.scope
        seen["stats"] = tr.stats()
        t.close()

    with tr.scope():
        th = threading.Thread(target=worker)
        th.start()
        th.join()
    assert seen["current"] is None and seen["owned_by"] is None
    assert seen["stats"].created_outside_scope >= 1


def test_a_scope_disposed_from_another_thread_stops_capturing_on_its_own():
    s = tr.scope()
    t = tr.ones(1)
    th = threading.Thread(target=s.dispose)
    th.start()
    th.join()
    assert not t.is_valid()
    assert tr.current_scope() is None
    u = tr.ones(1)
    assert u._own is True and u.scope is None
    u.close()


def test_threads_each_with_their_own_scopes_share_the_registry():
    """Eight threads run ops on shared inputs inside their own scopes; each thread's counters
    see only its own handles, and nothing is left alive."""
    shared = tr.ones([8, 8])
    before = tr.live_handles()
    results, errors = {}, []

    def worker(i):
        try:
            tr.reset_stats()  # (each release counts on its own thread: the batch size is 1)
            for _ in range(20):
                with tr.scope():
                    y = (shared @ shared + float(i)).relu().sum()
                    results[i] = y.item()
            results[(i, "stats")] = tr.stats()
        except Exception as e:  # reported below: an assert here would be lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    prev = tr.set_release_batch(1)
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        tr.set_release_batch(prev)
    assert not errors
    for i in range(8):
        assert results[i] == 64 * (8.0 + i)
        assert results[(i, "stats")] == (0, 0, 80, 80, 0, 0, 0)  # 4 handles x 20 steps
    assert tr.live_handles() == before
    shared.close()


def test_owned_tensors_may_die_on_another_thread():
    ts = [tr.ones(1) for _ in range(10)]
    before = tr.live_handles()
    th = threading.Thread(target=ts.clear)  # the last references go on the other thread
    th.start()
    th.join()
    assert tr.live_handles() == before - 10
