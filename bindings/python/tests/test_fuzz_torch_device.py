"""The fuzzer of the `tensorref` torch device (fuzz_torch_device.py) over a fixed set of seeds, a
bounded number of steps each: random torch programs on `tensorref` tensors (factories, seeded
random ops, every kind of view, elementwise ops, reductions, matmuls, multi-output and
data-dependent ops, in-place writes through views, setitem, index_put_, copy_ across devices and
dtypes, out= of the wrong size, resize_, set_, autograd, value reads) against the same lines on
CPU tensors, under the manager's policies at budgets of a few KiB to a few MiB and with none. After
every step: same exceptions, same dtype, shape, strides, storage offset and values bit for bit,
the same storage sharing (views stay views), and the budget held by stats() and device_memory().
A failure prints the seed, the step and the last lines;
``python fuzz_torch_device.py --seed S --steps N [--policy P] --shrink`` replays and minimises it
(with ``--cuda-allocator``, a failure of a seed whose kernels allocate as CUDA's; with
``--convolutions``, ``--complex`` or ``--forward-ad``, of one whose actions include
convolutions, complex tensors and their lazy conj() and negative views, or forward-mode AD).

Each test runs one seed in-process (about 0.4 s per 300 steps on a free core).
"""
import pytest

import fuzz_torch_device as fuzz

pytestmark = pytest.mark.usefixtures("no_manager_left_and_no_leak")

# (seed, steps, policies): every policy mixed (and no manager), then each alone.
MIXED = [(s, 300, fuzz.POLICIES) for s in (1, 3, 5, 6, 7, 8, 9, 11, 13, 15, 17, 20, 22, 26, 27, 31)]
SINGLE = [(s, 300, (p,)) for p, seeds in (("flow", (101, 105, 113, 114)),
                                          ("genoa", (101, 105, 113, 115)),
                                          ("resident", (101, 106, 107, 108)),
                                          ("none", (101, 105, 107, 112)))
          for s in seeds]
# Seeds that found a resize_ or an out= the kernel resized moving one tensor to a storage of its
# own, where libtorch grows the storage every view shares (2, 4, 12, 16); in-place and out= writes
# whose inputs view the written storage, unchecked for overlap (10, 24, 28); resize_ to the size a
# tensor has, which libtorch leaves alone (53); a 0-dim value set into its own storage (18) or of
# another dtype (77): the fuzzer's own mistakes, where the CPU fills from a Scalar.
FOUND = [(s, 300, fuzz.POLICIES) for s in (2, 4, 10, 12, 16, 18, 24, 28, 53)] + [(77, 400, fuzz.POLICIES)]
SEEDS = MIXED + SINGLE + FOUND


@pytest.mark.parametrize("seed,steps,policies", SEEDS, ids=[f"{s}-{'+'.join(p)}" for s, _, p in SEEDS])
def test_fuzz_torch_device(seed, steps, policies):
    fz, failure, _ = fuzz.run_seed(seed, steps, policies)
    if failure is not None:
        pytest.fail(fz.report(failure), pytrace=False)
    assert fz.step == steps + (policies != ("none",))  # the first step configures a manager


# The kernels allocating as CUDA's do, without asking the manager: the room for every op's
# outputs is made before its kernel from their sizes (out= resized, views, data-dependent ops).
AS_ON_CUDA = [(s, 300, fuzz.POLICIES) for s in (1, 3, 9, 11, 20, 53)]


@pytest.mark.parametrize("seed,steps,policies", AS_ON_CUDA, ids=[f"{s}-cuda-allocator" for s, _, _ in AS_ON_CUDA])
def test_fuzz_torch_device_with_kernels_allocating_as_on_cuda(seed, steps, policies):
    fz, failure, _ = fuzz.run_seed(seed, steps, policies, cuda_allocator=True)
    if failure is not None:
        pytest.fail(fz.report(failure), pytrace=False)
    assert fz.step == steps + 1


# The families of actions a run adds where asked (fuzz.EXTRAS), each with its seeds and what a
# run of it must have done, with kernels asking and allocating as on CUDA:
# - convolutions and their gradients (the device runs the compute device's convolution for
#   libtorch's convolution_overrideable);
# - complex tensors and their lazy conj() and negative views: seed 1 found a recipe that made
#   `dot` again over a conj view's home, without its bit; the others, the fuzzer's own mistakes
#   with complex values;
# - forward-mode AD and its ZeroTensors (zeros with no memory): the device once registered a
#   ZeroTensor's null memory as a home, and the next op to read it crashed the process.
FAMILIES = {
    "convolutions": ((3, 6, 7, 9), lambda a: "conv" in a.code and "backward" in a.code),
    "complex": ((1, 2, 6, 21, 33, 50), lambda a: ".conj()" in a.code),
    "forward_ad": ((1, 3, 6), lambda a: "torch.func" in a.code),
}
WITH_FAMILIES = [(f, s, c) for f, (seeds, _) in FAMILIES.items() for s in seeds for c in (False, True)]


@pytest.mark.parametrize("family,seed,as_on_cuda", WITH_FAMILIES,
                         ids=[f"{s}-{f}{'-cuda-allocator' if c else ''}" for f, s, c in WITH_FAMILIES])
def test_fuzz_torch_device_with_a_family_of_actions(family, seed, as_on_cuda):
    fz, failure, actions = fuzz.run_seed(seed, 300, fuzz.POLICIES, cuda_allocator=as_on_cuda, extras=(family,))
    if failure is not None:
        pytest.fail(fz.report(failure), pytrace=False)
    assert any(FAMILIES[family][1](a) for a in actions)


def test_a_seed_replays_exactly():
    a = fuzz.run_seed(7, 100)[0].history
    b = fuzz.run_seed(7, 100)[0].history
    assert a == b
