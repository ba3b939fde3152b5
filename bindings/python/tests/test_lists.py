"""List-taking ops (cat, stack, optim_sgd_step, optim_adam_step) given temporaries the way users write them:
inline expressions in a list or a tuple, a generator. The Tensors must stay alive through the
call: when releases are immediate (a batch of one, or any residency manager) a temporary
collected before the call would be a stale handle in the library's hands."""
import numpy as np
import pytest

import tensorref as tr

POLICIES = ["resident", "genoa", "flow"]


@pytest.fixture
def immediate():
    """Each collected object's handle is released at once: a lost temporary fails every time."""
    prev = tr.set_release_batch(1)
    yield
    tr.set_release_batch(prev)


def check_cat_and_stack():
    a = tr.tensor([1.0, 2.0])
    for _ in range(50):
        assert tr.stack([a + 1, a * 2], 0).tolist() == [[2.0, 3.0], [2.0, 4.0]]
        assert tr.stack((a + 1, a * 2), 1).tolist() == [[2.0, 2.0], [3.0, 4.0]]
        assert tr.stack((a + i for i in range(3)), 0).tolist() == [[1.0 + i, 2.0 + i] for i in range(3)]
        assert tr.cat([a - 1, a.neg()], 0).tolist() == [0.0, 1.0, -1.0, -2.0]
        assert tr.cat((a * float(i) for i in range(2)), 0).tolist() == [0.0, 0.0, 1.0, 2.0]
    a.close()


def test_cat_and_stack_keep_their_temporaries(immediate):
    before = tr.live_handles()
    check_cat_and_stack()
    assert tr.live_handles() == before


@pytest.mark.parametrize("policy", POLICIES)
def test_cat_and_stack_keep_their_temporaries_under_a_manager(policy):
    before = tr.live_handles()
    with tr.residency.session(policy=policy, budget_bytes=1 << 20):
        check_cat_and_stack()
    assert tr.live_handles() == before


def test_sgd_step_on_a_generator_of_temporary_aliases(immediate):
    w = tr.randn([3]).requires_grad_(True)
    (w * w).sum().backward()
    before, grad = w.numpy(), w.grad().numpy()
    tr.optim_sgd_step((p.alias() for p in [w]), 0.1)  # each alias is dropped by the generator
    assert np.allclose(w.numpy(), before - 0.1 * grad)
    w.close()


def test_adam_step_with_inline_moment_buffers(immediate):
    w = tr.randn([4]).requires_grad_(True)
    (w * w).sum().backward()
    before = w.numpy()
    # First step with fresh zero moments written inline, as a quick script does.
    tr.optim_adam_step([w], [tr.zeros_like(w)], (tr.zeros_like(p) for p in [w]), 1, 0.01, 0.9, 0.999,
                 1e-8, 0.0)
    # Adam's first step moves each element by lr * sign(grad) (up to eps).
    assert np.allclose(w.numpy(), before - 0.01 * np.sign(2 * before), atol=1e-6)
    w.close()


def test_a_single_tensor_or_an_empty_list_is_refused_with_what_to_write():
    a = tr.ones(2)
    with pytest.raises(TypeError, match=r"write \[t\]"):
        tr.cat(a, 0)
    with pytest.raises(tr.ArgumentError, match="at least one tensor"):
        tr.cat([], 0)
    with pytest.raises(tr.ArgumentError, match="at least one tensor"):
        tr.stack((), 0)
    with pytest.raises(TypeError, match="sequence of tensorref.Tensor"):
        tr.stack([a, 1.0], 0)
    a.close()
