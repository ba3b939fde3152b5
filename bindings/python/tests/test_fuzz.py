"""The fuzzer of issue 22 (fuzz_api.py) over a fixed set of seeds, a bounded number of steps each:
random call sequences over the public API (tensors from NumPy, torch and factories; ops, every
view kind, in-place writes through views; release out of order; scopes disposed out of order,
moved and detached; DLPack in and out with writes from outside; configure and disable with a
random policy, budget and recompute mode; mark_iteration, pin and unpin), each checked bit for
bit against plain PyTorch at every step. A failure prints the seed, the step and the last calls;
``python fuzz_api.py --seed S --steps N [--policy P] --shrink`` replays and minimises it.

Each test runs one seed in-process (about 0.5 s per 300 steps); the whole file takes ~30 s. Six
seeds run with the simulated device's kernels allocating as CUDA's (``--cuda-allocator``).
"""
import pytest

import fuzz_api

# (seed, steps, policies): every policy mixed, then each policy alone.
MIXED = [(s, 400, fuzz_api.POLICIES) for s in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)]
SINGLE = [(s, 400, (p,)) for p, seeds in (("flow", (101, 102, 103, 104, 105, 106)),
                                          ("genoa", (201, 202, 203, 204)),
                                          ("resident", (301, 302, 303)))
          for s in seeds]
# Seeds that found the binding's differences from PyTorch's habits (indexing, setitem, `s / t`).
HABITS = [(s, 300, fuzz_api.POLICIES) for s in (1001, 1002, 1003, 1004, 1005, 1006)]
# Seeds where the simulated device's allocator counted a remake's scratch over the budget.
ALLOCATOR = [(s, 400, fuzz_api.POLICIES) for s in (5023098, 5023295, 5023387, 5023406, 5023429, 5023446)]
# A pin of a dropped result that the remakes it starts with bring back and evict again (whether it
# was resident was asked before them: a load of a storage without a home, a panic).
PINS = [(6103561, 400, fuzz_api.POLICIES)]
# Two handles over one memory of the outside's (an import twice, an exported view imported back)
# read and written by one op: their device copies were apart, where libtorch sees one memory.
EXTERNAL = [(s, 400, fuzz_api.POLICIES) for s in (7311877, 7313208, 5023428, 5023237, 6103168, 200675)]
# An import at an odd alignment: its simulated copy computed a product 1 ulp apart while it was
# 64-byte aligned (1479199), then refused ops at tight budgets while its padding was counted.
ALIGNMENT = [(s, 400, fuzz_api.POLICIES) for s in (1479199, 3352401, 3352466)]
SEEDS = MIXED + SINGLE + HABITS + ALLOCATOR + PINS + EXTERNAL + ALIGNMENT


@pytest.mark.parametrize("seed,steps,policies", SEEDS, ids=[f"{s}-{'+'.join(p)}" for s, _, p in SEEDS])
def test_fuzz(seed, steps, policies):
    fz, failure, _ = fuzz_api.run_seed(seed, steps, policies, quiet=True)
    if failure is not None:
        pytest.fail(fz.report(failure), pytrace=False)
    assert fz.step == steps


# The simulated device's kernels allocating as CUDA's do, without asking the manager: each op
# reserves room for its outputs first (ops of the table, the schema's, views, scalars beside
# tensors); boolean-mask indexing (sizes from the data) and dropout (no reservation) come unreserved.
AS_ON_CUDA = [(s, 400, fuzz_api.POLICIES) for s in (1, 3, 7, 25, 41, 46)]


@pytest.mark.parametrize("seed,steps,policies", AS_ON_CUDA, ids=[f"{s}-cuda-allocator" for s, _, _ in AS_ON_CUDA])
def test_fuzz_with_kernels_allocating_as_on_cuda(seed, steps, policies):
    fz, failure, _ = fuzz_api.run_seed(seed, steps, policies, quiet=True, cuda_allocator=True)
    if failure is not None:
        pytest.fail(fz.report(failure), pytrace=False)
    assert fz.step == steps


def test_a_seed_replays_exactly():
    a = fuzz_api.run_seed(7, 200, quiet=True)[0].history
    b = fuzz_api.run_seed(7, 200, quiet=True)[0].history
    assert a == b
