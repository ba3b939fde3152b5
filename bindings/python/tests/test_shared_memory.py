"""Storage shared under the residency manager, as a PyTorch user meets it: a view sees its base's
writes and the other way round under every policy and at tight budgets, a view costs no device
bytes, memory shared with torch (from_torch, to_torch) is never served stale and never
overwritten, and a bad budget is refused instead of wrapping around."""
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
