"""Training through the residency manager, as a PyTorch user writes it: a seeded MLP, with
dropout off and on, with SGD and Adam, gives the same losses and parameters bit for bit under
every policy as without a manager, never over the budget; without dropout it matches torch. What
autograd saves goes through the manager, whichever engine runs backward."""
import subprocess
import sys
import threading

import numpy as np
import pytest

import tensorref as tr

torch = pytest.importorskip("torch")

# The largest op holds 64 KiB of activations, a 16 KiB weight and a 64 KiB result; backward's
# largest node holds as much and the 64 KiB gradient it receives, and while it makes a dropped
# input again (dropout: its noise and its result), 273 KiB in all.
BUDGET = 320 << 10


pytestmark = pytest.mark.usefixtures("no_manager_left_and_no_leak")


def data():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((256, 16), dtype=np.float32)
    y = np.tanh(x[:, :1] * x[:, 1:2]).astype(np.float32)
    shapes = [(16, 64), (64,), (64, 64), (64,), (64, 1), (1,)]
    params = [(rng.standard_normal(s, dtype=np.float32) * 0.2 if len(s) == 2 else np.zeros(s, np.float32)) for s in shapes]
    return x, y, params


def train(dropout, adam, steps=5):
    """Losses and final parameters of a 16-64-64-1 MLP trained with the library."""
    tr.manual_seed(11)
    x_np, y_np, p_np = data()
    with tr.scope():
        x, y = tr.from_numpy(x_np), tr.from_numpy(y_np)
        params = [tr.from_numpy(p).requires_grad_(True) for p in p_np]
        moments = [(tr.zeros_like(p), tr.zeros_like(p)) for p in params]
        losses = []
        for step in range(1, steps + 1):
            with tr.scope():
                w1, b1, w2, b2, w3, b3 = params
                h = (x @ w1 + b1).relu()
                if dropout:
                    h = h.dropout(0.2, True)
                loss = ((h @ w2 + b2).tanh() @ w3 + b3).mse_loss(y)
                loss.backward()
                losses.append(loss.item())
                if adam:
                    tr.optim_adam_step(params, [m for m, _ in moments], [v for _, v in moments], step, 1e-2, 0.9, 0.999, 1e-8, 0.0)
                else:
                    tr.optim_sgd_step(params, 0.02)
                for p in params:
                    # Both ways: dropped with Adam (torch.optim's default), zeroed with SGD.
                    if adam:
                        p.clear_grad()
                    else:
                        p.zero_grad()
            if tr.residency.enabled():
                tr.residency.mark_iteration()
        return losses, [p.numpy().copy() for p in params]


def train_torch(steps=5):
    x_np, y_np, p_np = data()
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    params = [torch.from_numpy(p.copy()).requires_grad_(True) for p in p_np]
    sgd = torch.optim.SGD(params, lr=0.02)
    losses = []
    for _ in range(steps):
        w1, b1, w2, b2, w3, b3 = params
        loss = torch.nn.functional.mse_loss((torch.relu(x @ w1 + b1) @ w2 + b2).tanh() @ w3 + b3, y)
        sgd.zero_grad()
        loss.backward()
        losses.append(loss.item())
        sgd.step()
    return losses, [p.detach().numpy() for p in params]


@pytest.mark.parametrize("dropout,adam", [(False, False), (True, True)])
@pytest.mark.parametrize("policy,recompute", [("resident", "off")] + [(p, r) for p in ("genoa", "flow") for r in ("off", "always")])
def test_training_is_the_same_under_every_policy(policy, recompute, dropout, adam):
    plain_losses, plain_params = train(dropout, adam)
    assert plain_losses[-1] < plain_losses[0]
    budget = {} if policy == "resident" else {"budget_bytes": BUDGET}  # Resident has no budget
    with tr.residency.session(policy=policy, recompute=recompute, **budget):
        tr.residency.device_memory(reset_peak=True)
        losses, params = train(dropout, adam)
        stats = tr.residency.stats()
        memory = tr.residency.device_memory()
    assert losses == plain_losses
    for a, b in zip(plain_params, params):
        assert (a == b).all()
    if policy != "resident":
        assert stats.peak_device_bytes <= BUDGET
        assert memory.peak <= BUDGET, "the simulated device's allocator counted more alive at once"
        assert stats.evictions > 0
    assert (stats.drops > 0 and stats.recomputations > 0) == (recompute == "always")


def test_an_unknown_recompute_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="off, cheaper, always"):
        tr.residency.configure(policy="flow", budget_bytes=BUDGET, recompute="sometimes")


def test_training_without_dropout_matches_torch():
    losses, params = train(dropout=False, adam=False)
    torch_losses, torch_params = train_torch()
    np.testing.assert_allclose(losses, torch_losses, rtol=1e-5)
    for a, b in zip(params, torch_params):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_saved_tensors_are_managed_where_torch_runs_backward():
    # This process imported torch first, so PyTorch's engine runs backward: the manager's hooks
    # go on its per-thread stack, on the thread that configures the manager.
    seen = []
    with tr.residency.session(policy="flow", budget_bytes=BUDGET):
        assert tr.residency.saved_tensors_managed()
        other = threading.Thread(target=lambda: seen.append(tr.residency.saved_tensors_managed()))
        other.start()
        other.join()
    assert seen == [False]
    assert not tr.residency.saved_tensors_managed()
    # A process that has not imported torch gets libtorch's own engine, with the manager's hooks;
    # importing torch makes PyTorch's the default, which the next configuration follows.
    script = ("import tensorref as tr\n"
              "with tr.residency.session(policy='flow', budget_bytes=1 << 20):\n"
              "    print(tr.residency.saved_tensors_managed())\n"
              "    import torch\n"
              "    print(tr.residency.saved_tensors_managed())\n"
              "    with tr.residency.session(policy='flow', budget_bytes=1 << 20):\n"
              "        print(tr.residency.saved_tensors_managed())\n"
              "print(tr.residency.saved_tensors_managed())\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "True", "False"]


def test_backward_unpacks_what_autograd_saved_through_the_manager():
    ops = []
    with tr.residency.session(policy="flow", budget_bytes=BUDGET):
        tr.residency.set_callback(lambda e: ops.append(e.op) if e.kind == "op_begin" else None)
        losses, _ = train(dropout=True, adam=True, steps=3)
        stats = tr.residency.stats()
        tr.flush_releases()
        left = tr.residency.stats().device_bytes  # the saved dropout masks were forgotten too
    assert losses == train(dropout=True, adam=True, steps=3)[0]
    # Backward brings each saved tensor back through the manager (an "unpack" op).
    assert ops.count("unpack") >= 3 * ops.count("matmul")
    assert stats.peak_device_bytes <= BUDGET
    assert left == 0


def test_an_in_place_write_to_a_saved_tensor_is_caught_at_backward():
    with tr.residency.session(policy="flow", budget_bytes=BUDGET), tr.scope():
        x = tr.from_numpy(np.ones((4, 4), np.float32)).requires_grad_(True)
        y = x.exp()  # exp saves its result
        y.add_(y)
        with pytest.raises(tr.TensorRefError, match="modified by an inplace operation"):
            y.sum().backward()


def test_what_torch_code_saves_in_a_session_is_saved_as_without_it():
    """The manager's hooks are on PyTorch's stack only while a call into the library runs: the
    program's own autograd keeps its saved tensors, its in-place check in its own words, and
    torch.func, which refuses to run under saved-tensor hooks."""
    x = torch.linspace(-1, 1, 64).reshape(8, 8).requires_grad_()

    def f(x):
        return (x.sin() @ x).tanh().sum()

    want = torch.func.grad(f)(x)
    with tr.residency.session(policy="flow", budget_bytes=BUDGET):
        y = x.exp()  # exp saves its result
        assert tr.residency.stats().ops == 0  # the manager took nothing of it
        y.mul_(2)
        with pytest.raises(RuntimeError, match="^one of the variables needed for gradient computation"):
            y.sum().backward()
        assert torch.equal(torch.func.grad(f)(x), want)
        assert torch.equal(torch.func.vjp(f, x)[1](torch.tensor(1.0))[0], want)
        with tr.scope():  # and the library's own ops still hand theirs to the manager
            t = tr.from_numpy(np.ones((4, 4), np.float32)).requires_grad_(True)
            t.exp().sum().backward()
        assert tr.residency.stats().ops > 0


def test_torch_code_in_a_session_still_trains_as_without_it():
    plain = train_torch()
    with tr.residency.session(policy="flow", budget_bytes=BUDGET):
        inside = train_torch()
    assert plain[0] == inside[0]
    for a, b in zip(plain[1], inside[1]):
        assert (a == b).all()
