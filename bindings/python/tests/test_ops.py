"""The generated op wrappers checked numerically against PyTorch: the same inputs go through
tensorref (ops of src/ops/ops.def) and through torch, and the results must agree. Also the
operators, in-place ops, autograd and the optimizer steps."""
import numpy as np
import pytest

import tensorref as tr

torch = pytest.importorskip("torch")
F = torch.nn.functional

RNG = np.random.default_rng(1)


def arr(*shape, positive=False):
    a = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.1 if positive else a


def check(tr_result, torch_result, rtol=1e-5, atol=1e-6):
    if isinstance(torch_result, torch.Tensor):
        assert isinstance(tr_result, tr.Tensor)
        got = tr_result.numpy()
        want = torch_result.detach().numpy()
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        assert tr_result == pytest.approx(torch_result)


A, B, P = arr(3, 4), arr(3, 4), arr(3, 4, positive=True)
ROW = arr(4)
SQ = arr(4, 4)
I64 = np.array([2, 0, 1], dtype=np.int64)
COND = RNG.integers(0, 2, (3, 4)).astype(np.bool_)

# name: (tensorref call, torch call, inputs as NumPy arrays)
CASES = {
    "add": (lambda a, b: tr.add(a, b), torch.add, [A, B]),
    "add_broadcast": (lambda a, b: a + b, torch.add, [A, ROW]),
    "sub": (lambda a, b: a - b, torch.sub, [A, B]),
    "mul": (lambda a, b: a * b, torch.mul, [A, B]),
    "div": (lambda a, b: a / b, torch.div, [A, P]),
    "add_scalar": (lambda a: a + 2.5, lambda a: a + 2.5, [A]),
    "radd_scalar": (lambda a: 2.5 + a, lambda a: 2.5 + a, [A]),
    "sub_scalar": (lambda a: a - 1.5, lambda a: a - 1.5, [A]),
    "rsub_scalar": (lambda a: 1.5 - a, lambda a: 1.5 - a, [A]),
    "mul_scalar": (lambda a: a * 3, lambda a: a * 3, [A]),
    "rmul_scalar": (lambda a: 3 * a, lambda a: 3 * a, [A]),
    "div_scalar": (lambda a: a / 4.0, lambda a: a / 4.0, [A]),
    "rdiv_scalar": (lambda a: 2.0 / a, lambda a: 2.0 / a, [P]),
    "pow": (lambda a, b: a ** b, torch.pow, [P, B]),
    "pow_scalar": (lambda a: a ** 2.0, lambda a: a ** 2.0, [A]),
    "neg": (lambda a: -a, torch.neg, [A]),
    "exp": (tr.exp, torch.exp, [A]),
    "log": (tr.log, torch.log, [P]),
    "sqrt": (tr.sqrt, torch.sqrt, [P]),
    "abs": (tr.abs, torch.abs, [A]),
    "relu": (tr.relu, torch.relu, [A]),
    "gelu": (tr.gelu, F.gelu, [A]),
    "silu": (tr.silu, F.silu, [A]),
    "sigmoid": (tr.sigmoid, torch.sigmoid, [A]),
    "tanh": (tr.tanh, torch.tanh, [A]),
    "clamp": (lambda a: a.clamp(-0.5, 0.5), lambda a: a.clamp(-0.5, 0.5), [A]),
    "where_self": (lambda a, c, b: a.where_self(c, b), lambda a, c, b: torch.where(c, a, b), [A, COND, B]),
    "eq": (tr.eq, torch.eq, [A, A]),
    "ne": (tr.ne, torch.ne, [A, B]),
    "lt": (tr.lt, torch.lt, [A, B]),
    "le": (tr.le, torch.le, [A, B]),
    "gt": (tr.gt, torch.gt, [A, B]),
    "ge": (tr.ge, torch.ge, [A, B]),
    "sum": (tr.sum, torch.sum, [A]),
    "sum_dim": (lambda a: a.sum_dim([1], True), lambda a: a.sum(dim=[1], keepdim=True), [A]),
    "mean": (tr.mean, torch.mean, [A]),
    "mean_dim": (lambda a: a.mean_dim([0], False), lambda a: a.mean(dim=[0]), [A]),
    "max": (tr.max, torch.max, [A]),
    "max_dim": (lambda a: a.max_dim(1, False), lambda a: a.max(dim=1).values, [A]),
    "min": (tr.min, torch.min, [A]),
    "min_dim": (lambda a: a.min_dim(0, True), lambda a: a.min(dim=0, keepdim=True).values, [A]),
    "argmax": (lambda a: a.argmax(1, False), lambda a: a.argmax(dim=1), [A]),
    "argmin": (lambda a: a.argmin(0, False), lambda a: a.argmin(dim=0), [A]),
    "softmax": (lambda a: a.softmax(1), lambda a: a.softmax(dim=1), [A]),
    "log_softmax": (lambda a: a.log_softmax(1), lambda a: a.log_softmax(dim=1), [A]),
    "matmul": (lambda a, b: a @ b, torch.matmul, [A, SQ]),
    "matmul_vec": (lambda a, b: a @ b, torch.matmul, [A, ROW]),
    "bmm": (tr.bmm, torch.bmm, [arr(2, 3, 4), arr(2, 4, 5)]),
    "linear": (tr.linear, F.linear, [A, arr(5, 4), arr(5)]),
    "linear_no_bias": (lambda x, w: tr.linear(x, w), F.linear, [A, arr(5, 4)]),
    "reshape": (lambda a: a.reshape([2, -1]), lambda a: a.reshape(2, -1), [A]),
    "view": (lambda a: a.view([4, 3]), lambda a: a.view(4, 3), [A]),
    "transpose": (lambda a: a.transpose(0, 1).contiguous(), lambda a: a.t(), [A]),
    "permute": (lambda a: a.permute([2, 0, 1]), lambda a: a.permute(2, 0, 1), [arr(2, 3, 4)]),
    "squeeze": (lambda a: a.squeeze(1), lambda a: a.squeeze(1), [arr(3, 1, 4)]),
    "unsqueeze": (lambda a: a.unsqueeze(0), lambda a: a.unsqueeze(0), [A]),
    "cat": (lambda a, b: tr.cat([a, b], 0), lambda a, b: torch.cat([a, b], 0), [A, B]),
    "stack": (lambda a, b: tr.stack([a, b], 1), lambda a, b: torch.stack([a, b], 1), [A, B]),
    "narrow": (lambda a: a.narrow(1, 1, 2), lambda a: a.narrow(1, 1, 2), [A]),
    "index_select": (lambda a, i: a.index_select(0, i), lambda a, i: a.index_select(0, i), [A, I64]),
    "to_dtype": (lambda a: a.to_dtype(tr.float64), lambda a: a.double(), [A]),
    "embedding": (tr.embedding, lambda w, i: F.embedding(i, w), [arr(5, 3), I64]),
    "layer_norm": (lambda a, w, b: a.layer_norm([4], w, b, 1e-5),
                   lambda a, w, b: F.layer_norm(a, [4], w, b, 1e-5), [A, ROW, arr(4)]),
    "dropout_eval": (lambda a: a.dropout(0.5, False), lambda a: F.dropout(a, 0.5, False), [A]),
    "conv2d": (lambda x, w, b: tr.conv2d(x, w, b, [1, 1], [1, 1], [1, 1], 1),
               lambda x, w, b: F.conv2d(x, w, b, 1, 1, 1, 1), [arr(2, 3, 5, 5), arr(4, 3, 3, 3), arr(4)]),
    "max_pool2d": (lambda x: x.max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], False),
                   lambda x: F.max_pool2d(x, 2, 2), [arr(2, 3, 4, 4)]),
    "mse_loss": (tr.mse_loss, F.mse_loss, [A, B]),
    "cross_entropy": (tr.cross_entropy, F.cross_entropy, [arr(3, 5), I64]),
}


@pytest.mark.parametrize("name", CASES)
def test_op_matches_torch(name):
    tr_fn, torch_fn, inputs = CASES[name]
    with tr.scope():
        got = tr_fn(*[tr.from_numpy(x) for x in inputs])
        want = torch_fn(*[torch.from_numpy(x) for x in inputs])
        check(got, want, rtol=1e-4, atol=1e-5)


def test_creation_ops():
    with tr.scope():
        assert tr.zeros([2, 3]).numpy().tolist() == [[0.0] * 3] * 2
        assert tr.ones(3, dtype=tr.int32).numpy().tolist() == [1, 1, 1]
        assert tr.full([2], 7.5, tr.float64).numpy().tolist() == [7.5, 7.5]
        check(tr.arange(0, 5, 1.5, tr.float32), torch.arange(0, 5, 1.5))
        check(tr.eye(3, tr.float32), torch.eye(3))
        x = tr.from_numpy(A)
        check(tr.zeros_like(x), torch.zeros(3, 4))
        check(tr.ones_like(x), torch.ones(3, 4))
        tr.manual_seed(42)
        r1 = tr.rand([100]).numpy()
        tr.manual_seed(42)
        r2, n = tr.rand([100]).numpy(), tr.randn([1000]).numpy()
        assert (r1 == r2).all() and 0 <= r1.min() and r1.max() < 1
        assert abs(n.mean()) < 0.15 and 0.85 < n.std() < 1.15


def test_in_place_ops_return_the_same_object_and_register_nothing():
    x = tr.from_numpy(A.copy())
    y = tr.from_numpy(B)
    before = tr.live_handles()
    assert x.add_(y) is x and x.sub_(y) is x and x.mul_(y) is x and x.mul_scalar_(2.0) is x
    np.testing.assert_allclose(x.numpy(), (A + B - B) * B * 2.0, rtol=1e-5)
    x += y
    x *= 0.5
    x -= y
    np.testing.assert_allclose(x.numpy(), ((A + B - B) * B * 2.0 + B) * 0.5 - B, rtol=1e-5, atol=1e-6)
    assert x.copy_(y) is x and (x.numpy() == B).all()
    assert x.zero_() is x and (x.numpy() == 0).all()
    assert tr.live_handles() == before


def test_autograd_matches_torch():
    w_np, x_np = arr(3, 4), arr(5, 4)
    with tr.scope():
        w = tr.from_numpy(w_np).requires_grad_(True)
        assert w.requires_grad() and w.grad() is None
        loss = (tr.from_numpy(x_np).linear(w).tanh() ** 2.0).mean()
        loss.backward()
        g = w.grad()
        tw = torch.from_numpy(w_np).requires_grad_(True)
        tloss = (F.linear(torch.from_numpy(x_np), tw).tanh() ** 2).mean()
        tloss.backward()
        check(loss, tloss)
        check(g, tw.grad)
        w.zero_grad()
        assert (w.grad().numpy() == 0).all()
        assert not w.detach().requires_grad()
        with tr.no_grad():
            assert not (w * 2.0).requires_grad()
        assert (w * 2.0).requires_grad()


def test_sgd_and_adam_steps_match_torch_optim():
    p_np, x_np = arr(4), arr(4)
    with tr.scope():
        p = tr.from_numpy(p_np).requires_grad_(True)
        q = tr.from_numpy(p_np).requires_grad_(True)
        m, v = tr.zeros_like(q), tr.zeros_like(q)
        tp = torch.from_numpy(p_np.copy()).requires_grad_(True)
        tq = torch.from_numpy(p_np.copy()).requires_grad_(True)
        sgd = torch.optim.SGD([tp], lr=0.1)
        adam = torch.optim.Adam([tq], lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        for step in range(1, 4):
            with tr.scope():
                (p * tr.from_numpy(x_np)).sum().backward()
                (q * q).sum().backward()
                tr.optim_sgd_step([p], 0.1)
                tr.optim_adam_step([q], [m], [v], step, 0.01, 0.9, 0.999, 1e-8, 0.01)
                p.zero_grad()
                q.zero_grad()
            sgd.zero_grad()
            (tp * torch.from_numpy(x_np)).sum().backward()
            sgd.step()
            adam.zero_grad()
            (tq * tq).sum().backward()
            adam.step()
        check(p, tp)
        check(q, tq)


def test_every_op_of_the_table_has_a_wrapper():
    import pathlib
    import sys
    root = pathlib.Path(__file__).resolve().parents[3]
    sys.path.insert(0, str(root / "tools"))
    try:
        import optable
    finally:
        sys.path.pop(0)
    ops = optable.parse((root / "src/ops/ops.def").read_text())
    from tensorref import _habits, _ops_generated
    for op in ops:
        generated = getattr(_ops_generated, op.name)  # (or its accelerated route, with the same doc)
        assert op.c_name in generated.__doc__
        # The package's function and method: the generated one, or the PyTorch-style form over it
        # (tr.zeros(2, 3), t.sum(0)).
        public = getattr(_habits, op.name) if op.name in _habits.__all__ else generated
        assert getattr(tr, op.name) is public
        if op.is_method:
            assert getattr(tr.Tensor, op.name) is _habits._METHODS.get(op.name, public)


def test_truth_value_follows_torch():
    with tr.scope():
        assert bool(tr.tensor([1.0])) and not bool(tr.tensor([0]))
        with pytest.raises(ValueError, match="ambiguous"):
            bool(tr.ones(2))
