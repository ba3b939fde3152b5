"""Storage shared under the residency manager, as a PyTorch user meets it: a view sees its base's
writes and the other way round under every policy and at tight budgets, a view costs no device
bytes, memory shared with torch (from_torch, to_torch) is never served stale and never
overwritten, handles over one memory are one memory to an op, and a bad budget is refused
instead of wrapping around."""
import numpy as np
import pytest

import tensorref as tr

torch = pytest.importorskip("torch")

POLICIES = ["resident", "genoa", "flow"]


pytestmark = pytest.mark.usefixtures("no_manager_left_and_no_leak")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("budget", [32, 1 << 20])
def test_a_view_sees_writes_to_its_base_and_back(policy, budget):
    with tr.no_grad(), tr.residency.session(policy=policy, budget_bytes=budget):
        with tr.scope():
            x = tr.zeros([4])
            v = x.view([2, 2])
            x.add_(tr.ones([4]))
            assert v.numpy().ravel().tolist() == [1.0] * 4
            v.mul_scalar_(3.0)
            assert x.numpy().tolist() == [3.0] * 4


@pytest.mark.parametrize("policy", POLICIES)
def test_writes_through_a_view_survive_evictions(policy):
    n = 64 * 64 * 4
    with tr.no_grad(), tr.residency.session(policy=policy, budget_bytes=4 * n):
        with tr.scope():
            x = tr.ones([64, 64])
            v = x.transpose(0, 1)
            for step in range(2, 6):
                v.add_(tr.ones([64, 64]))
                churn = [tr.ones([64, 64]) * 2.0 for _ in range(3)]  # results that push x out
                assert x.sum().item() == 4096.0 * step
                assert v.sum().item() == x.sum().item()
                del churn


@pytest.mark.parametrize("policy", ["genoa", "flow"])
def test_a_view_costs_no_device_bytes(policy):
    with tr.no_grad(), tr.residency.session(policy=policy, budget_bytes=70_000):
        with tr.scope():
            x = tr.randn([128, 128])  # 65536 bytes
            t = x.transpose(0, 1)  # refused before: "needs 131072 bytes at once"
            assert t.shape == (128, 128)
            assert tr.residency.stats().peak_device_bytes <= 65536


@pytest.mark.parametrize("policy", POLICIES)
def test_a_torch_buffer_refilled_between_batches_is_read_fresh(policy):
    buf = torch.zeros(4)
    with tr.no_grad(), tr.residency.session(policy=policy, budget_bytes=64):
        with tr.scope():
            shared = tr.from_torch(buf)
            acc = tr.zeros([4])
            seen = []
            for batch in (1.0, 2.0, 3.0):
                buf.fill_(batch)  # torch refills its buffer
                acc.add_(shared)
                seen.append(acc.numpy()[0])
            assert seen == [1.0, 3.0, 6.0]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_torch_write_is_never_overwritten(policy):
    with tr.no_grad(), tr.residency.session(policy=policy, budget_bytes=64):
        with tr.scope():
            a = tr.zeros([4])
            a.add_(tr.ones([4]))  # the manager's copy is the newer one
            t = a.to_torch()
            assert t.tolist() == [1.0] * 4, "torch reads the current values"
            t.fill_(200.0)  # torch writes
            (tr.ones([4]) * 2.0).close()  # ops that evict
            assert a.numpy().tolist() == [200.0] * 4
            assert t.tolist() == [200.0] * 4


@pytest.mark.parametrize("budget", [-1, 2 ** 64, 1.5])
def test_a_bad_budget_is_refused(budget):
    with pytest.raises(ValueError, match="budget_bytes"):
        tr.residency.configure(policy="flow", budget_bytes=budget)


def test_a_result_dropped_to_be_recomputed_is_exported_with_its_values():
    # Genoa drops a result that can be made again as soon as it is made.
    with tr.no_grad(), tr.residency.session(policy="genoa", budget_bytes=48, recompute="always"):
        with tr.scope():
            x = tr.tensor([1.0, 2.0, 3.0, 4.0])
            y = x.mul_scalar(2.0)
            assert not y.is_resident and tr.residency.stats().drops == 1
            t = y.to_torch()
            assert t.tolist() == [2.0, 4.0, 6.0, 8.0]
            x.add_scalar_(1.0)  # y no longer depends on x: exported memory is never made again
            assert t.tolist() == y.numpy().tolist() == [2.0, 4.0, 6.0, 8.0]



def _one_memory_forms():
    """Handles over one memory, each form built twice: on tensorref handles (`lib`) and on torch
    tensors that are storages of their own over one memory, as plain torch has them. `build`
    returns the op that writes and a reader of the memory afterwards (a torch tensor)."""

    def imports(lib, *views):
        return [tr.from_torch(v) if lib else torch.from_dlpack(v) for v in views]

    def twice(lib):  # one torch tensor imported twice (fuzzer seed 7311877)
        e = torch.arange(1.0, 25.0).reshape(4, 6)
        a, b = imports(lib, e, e)
        return (lambda: a.add_(b[2, -2])), (lambda: e)

    def exported_row(lib):  # a library tensor's exported row imported back (seed 6103168)
        values = torch.arange(1.0, 25.0).reshape(4, 6)
        x = tr.from_numpy(values.numpy().copy()) if lib else values.clone()
        row = tr.from_torch(x[0, :].contiguous().to_torch()) if lib else torch.from_dlpack(x[0, :])
        return (lambda: x.add_(row)), (lambda: torch.from_numpy(x.numpy()) if lib else x)

    def transposed(lib):  # a library matrix and its own export imported, transposed (seed 5023428)
        values = torch.arange(1.0, 26.0).reshape(5, 5)
        x = tr.from_numpy(values.numpy().copy()) if lib else values.clone()
        y = tr.from_torch(torch.from_dlpack(x)) if lib else torch.from_dlpack(x)
        return (lambda: x.add_(y.T)), (lambda: torch.from_numpy(x.numpy()) if lib else x)

    def inner_first(lib):  # the inner memory is first used by the same op as the outer one
        e = torch.arange(1.0, 17.0).reshape(4, 4)
        inner, outer = imports(lib, e[1], e[:, 0])
        return (lambda: inner.add_(outer)), (lambda: e)

    def shifted(lib):  # two overlapping imports inside a third: elements read written neighbours
        e = torch.arange(1.0, 66.0)
        whole, ahead, behind = imports(lib, e, e[1:], e[:-1])
        if lib:
            whole.sum().close()  # the manager knows the whole memory (while `whole` lives)
        return (lambda: (ahead.add_(behind), whole)), (lambda: e)

    return {"twice": twice, "exported_row": exported_row, "transposed": transposed,
            "inner_first": inner_first, "shifted": shifted}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("form", list(_one_memory_forms()))
def test_handles_over_one_memory_are_one_memory_to_an_op(policy, form):
    # Each import is a storage of its own over the same bytes; an op reading one while writing
    # another sees its own writes as plain torch does (their device copies were apart before).
    build = _one_memory_forms()[form]
    write, read = build(False)
    write()
    want = read().clone()
    with tr.no_grad(), tr.residency.session(policy=policy, budget_bytes=1 << 16):
        with tr.scope():
            write, read = build(True)
            write()
            assert torch.equal(read(), want), f"{read()} != {want}"


@pytest.mark.parametrize("policy", POLICIES)
def test_an_import_at_any_alignment_computes_as_its_memory_does(policy):
    # A view 24 bytes into torch's memory: the device copy keeps that alignment, so that the
    # matrix product takes the path, and rounds, as it does on the memory itself (fuzzer seed
    # 1479199: 1 ulp apart when the copy was aligned to 64 bytes).
    e = torch.from_numpy(((np.arange(36) * 7 + 4) % 9 - 2).astype(np.float32).reshape((6, 6)))[1:]
    assert e.data_ptr() % 64 != 0
    want = e @ e.T.sigmoid()
    t = tr.from_torch(e)
    with tr.residency.session(policy=policy, budget_bytes=1 << 16):
        got = t @ t.T.sigmoid()
        assert torch.equal(torch.from_numpy(got.numpy()), want)
        got.close()
    t.close()
