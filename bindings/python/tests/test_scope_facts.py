"""The numbered statistics facts 1-14 of docs/dispose-scopes.md, through the Python
binding. Tuples are (created_outside, disposed_outside, created_in, disposed_in, attached,
detached, live), starting from reset_stats() with no scope open."""
import gc

import numpy as np
import pytest

import tensorref as tr


@pytest.fixture(autouse=True)
def fresh_stats():
    gc.collect()
    tr.reset_stats()


def test_fact01_create_in_scope_then_attach_to_same_scope():
    with tr.scope() as s:
        t = tr.zeros(1)
        assert tr.stats() == (0, 0, 1, 0, 0, 0, 1)
        s.attach(t)
        assert tr.stats() == (0, 0, 1, 0, 0, 0, 1)


def test_fact02_detach_then_dispose_scope_keeps_handle():
    with tr.scope():
        t = tr.zeros(1)
        t.detach_from_scope()
        assert tr.stats() == (0, 0, 1, 0, 0, 1, 1)
    assert tr.stats() == (0, 0, 1, 0, 0, 1, 1)
    assert t.is_valid()
    t.close()


def test_fact03_dispose_handle_in_scope_twice():
    with tr.scope():
        t = tr.zeros(1)
        t.close()
        assert tr.stats() == (0, 0, 1, 1, 0, 0, 0)
        t.close()
        assert tr.stats() == (0, 0, 1, 1, 0, 0, 0)
        # The C call itself reports the dead handle and still changes nothing.
        assert tr._lib.lib.tr_tensor_release(t) == 200
        assert tr.stats() == (0, 0, 1, 1, 0, 0, 0)


def test_fact04_dispose_scope_disposes_its_handle():
    with tr.scope():
        t = tr.zeros(1)
    assert tr.stats() == (0, 0, 1, 1, 0, 0, 0)
    assert not t.is_valid()


def test_fact05_create_and_dispose_outside_scope():
    t = tr.zeros(1)
    assert tr.stats() == (1, 0, 0, 0, 0, 0, 1)
    t.close()
    assert tr.stats() == (1, 1, 0, 0, 0, 0, 0)


def test_fact05_garbage_collection_disposes_outside_scope():
    t = tr.zeros(1)
    del t
    gc.collect()
    assert tr.stats() == (1, 1, 0, 0, 0, 0, 0)


@pytest.mark.parametrize("end", ["dispose handle", "dispose scope"])
def test_fact06_attach_outside_handle_then_dispose(end):
    t = tr.zeros(1)
    s = tr.scope()
    s.attach(t)
    assert tr.stats() == (1, 0, 0, 0, 1, 0, 1)
    if end == "dispose handle":
        t.close()
        s.dispose()
    else:
        s.dispose()
        assert not t.is_valid()
    assert tr.stats() == (1, 0, 0, 1, 1, 0, 0)


def test_fact07_attach_detach_then_dispose_scope():
    t = tr.zeros(1)
    with tr.scope() as s:
        s.attach(t)
        s.detach(t)
        assert tr.stats() == (1, 0, 0, 0, 1, 1, 1)
    assert tr.stats() == (1, 0, 0, 0, 1, 1, 1)
    assert t.is_valid()
    t.close()


def test_fact08_detaching_an_unowned_handle_changes_nothing():
    t = tr.zeros(1)
    t.detach_from_scope()
    assert tr.stats() == (1, 0, 0, 0, 0, 0, 1)
    with tr.scope() as s:
        s.detach(t)
        assert tr.stats() == (1, 0, 0, 0, 0, 0, 1)
    t.close()


def test_fact09_unrelated_scope_does_not_touch_attached_handle():
    t = tr.zeros(1)
    with tr.scope() as a:
        a.attach(t)
        before = tr.stats()
        with tr.scope():
            pass
        assert tr.stats() == before == (1, 0, 0, 0, 1, 0, 1)
        assert t in a
    assert not t.is_valid()


def test_fact10_four_handles_kept_detached_moved_out_disposed():
    with tr.scope():
        kept, detached, moved, disposed = (tr.zeros(1) for _ in range(4))
        detached.detach_from_scope()
        moved.move_to_outer_scope()  # no outer scope: it becomes detached
        disposed.close()
    s = tr.stats()
    assert (s.live, s.created_in_scope, s.disposed_in_scope, s.detached_from_scope) == (2, 4, 2, 2)
    assert not kept.is_valid() and detached.is_valid() and moved.is_valid()
    detached.close()
    moved.close()


def test_fact11_temporaries_of_an_expression_die_with_the_scope():
    """In Python the temporaries die even earlier: once their objects are collected (their
    releases wait in the deferred batch until a flush), so the scope ends with only `y`."""
    x = tr.from_numpy(np.array([1.0, -2.0, 3.0], dtype=np.float32))
    with tr.scope() as s:
        y = ((x * 2.0 + 1.0).relu() - x).sum()
        assert len(s) == 5  # mul_scalar, add_scalar, relu, sub, sum: 4 waiting for the flush
        live_after_flush = tr.stats().live
        assert len(s) == 1
        assert y.item() == pytest.approx(3.0 + 0.0 + 7.0 - 2.0)
    assert tr.stats() == (1, 0, 5, 5, 0, 0, 1)
    assert live_after_flush == 2  # x and y
    assert not y.is_valid()
    assert x.numpy().tolist() == [1.0, -2.0, 3.0]
    x.close()


def test_fact12_live_returns_after_inner_and_outer_scope():
    with tr.scope():
        a = tr.ones([2, 2])
        b = a + a
        live_before_inner = tr.stats().live
        with tr.scope():
            c = (b @ b).relu()
            assert c.numel() == 4
            assert tr.stats().live > live_before_inner
        assert tr.stats().live == live_before_inner
    assert tr.stats().live == 0


def test_fact13_training_loop_in_one_scope_ends_with_nothing_live():
    tr.manual_seed(0)
    with tr.scope():
        x = tr.randn([16, 4])
        target = tr.randn([16, 1])
        w1 = tr.randn([8, 4]).mul_scalar_(0.5).requires_grad_(True)
        b1 = tr.zeros(8).requires_grad_(True)
        w2 = tr.randn([1, 8]).mul_scalar_(0.5).requires_grad_(True)
        b2 = tr.zeros(1).requires_grad_(True)
        losses = []
        for _ in range(10):
            loss = tr.mse_loss(x.linear(w1, b1).relu().linear(w2, b2), target)
            losses.append(loss.item())
            loss.backward()
            grads = [p.grad() for p in (w1, b1, w2, b2)]
            assert all(g is not None for g in grads)
            tr.optim_sgd_step([w1, b1, w2, b2], 0.05)
            for p in (w1, b1, w2, b2):
                p.zero_grad()
        assert losses[-1] < losses[0]
    assert tr.stats().live == 0


def test_fact14_move_to_scope_of_unowned_handle_and_across_nested_scopes():
    owner_less = tr.zeros(1)
    with tr.scope():
        t = tr.zeros(1)
        t.move_to_scope(owner_less.scope)  # that scope is None: detached
        assert t.scope is None
    assert t.is_valid()
    t.close()
    owner_less.close()

    with tr.scope() as first:
        with tr.scope():
            with tr.scope():
                u = tr.zeros(1)
                u.move_to_scope(first)
            assert u.is_valid()
        assert u.is_valid()
        assert u in first
    assert not u.is_valid()
