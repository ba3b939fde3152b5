"""The `tensorref` device in torch: PyTorch modules, unchanged, under the residency manager. On
the simulated device every op runs the CPU's own kernel over the manager's copies, so each
result equals the same module's on the CPU bit for bit, at budgets below its peak."""
import collections
import copy
import gc
import pickle
import time

import pytest
import torch

import tensorref as tr
from tensorref import residency, torch_device

torch_device.register()  # this suite imports tensorref before torch (conftest)

pytestmark = pytest.mark.usefixtures("no_manager_left_and_no_leak")


def _model():
    """An MLP whose largest op (a 64 x 64 layer on 8 rows, about 21 KiB) fits in a quarter of its
    weights (about 27 KiB)."""
    torch.manual_seed(0)
    hidden = [m for _ in range(6) for m in (torch.nn.Linear(64, 64), torch.nn.ReLU())]
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), *hidden,
                               torch.nn.Dropout(0.0), torch.nn.Linear(64, 8))


def _weights(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_the_device_is_torch_s_and_tensors_round_trip():
    assert torch.tensorref.is_available() and torch.tensorref.device_count() == 1
    assert torch.accelerator.current_accelerator() == torch.device("tensorref")
    assert torch.bfloat16 in torch.accelerator.get_device_capability()["supported_dtypes"]
    assert torch.tensorref.get_device_name() == "tensorref (the host's kernels)"
    x = torch.randn(3, 5)
    t = x.to("tensorref")
    assert t.device == torch.device("tensorref", 0) and t.is_tensorref
    assert torch.equal(t.cpu(), x)
    assert torch.equal(t.t().contiguous().cpu(), x.t()) and torch.equal(t[1:, 2].cpu(), x[1:, 2])
    assert torch.equal(torch.zeros(2, 2, device="tensorref").cpu(), torch.zeros(2, 2))
    assert t.sum().item() == pytest.approx(x.sum().item())


def test_model_to_keeps_parameters_and_tied_weights():
    model = _model()
    last = model[-1]
    head = torch.nn.Linear(64, 8, bias=False)
    head.weight = last.weight  # tied, as GPT-2 ties its embedding and head
    holder = torch.nn.ModuleList([model, head])
    before = [id(p) for p in holder.parameters()]
    holder.to("tensorref")
    assert [id(p) for p in holder.parameters()] == before
    assert head.weight is last.weight and head.weight.device.type == "tensorref"
    assert head.weight.untyped_storage().data_ptr() == last.weight.untyped_storage().data_ptr()


@pytest.mark.parametrize("policy", ["genoa", "flow"])
@pytest.mark.parametrize("fraction", [2, 4])
def test_inference_equals_the_cpu_under_a_budget(policy, fraction):
    model = _model()
    x = torch.randn(8, 32)
    with torch.no_grad():
        ref = model(x)
    budget = _weights(model) // fraction
    with residency.session(policy=policy, budget_bytes=budget):
        on = copy.deepcopy(model).to("tensorref")
        for _ in range(3):
            with torch.no_grad():
                assert torch.equal(on(x.to("tensorref")).cpu(), ref)
        s = residency.stats()
        peak = residency.device_memory().peak
    # Each pass: one op per module but the dropout (none at p=0), and the copy out.
    assert s.ops == 3 * len(model), "every op of the forward pass ran through the manager"
    assert s.loads > 0 and s.evictions > 0
    assert s.peak_device_bytes <= budget and peak <= budget


def _trained(model, batches, device, optimizer):
    """A copy of `model` on `device` trained on `batches` for cross-entropy by `optimizer` (of its
    parameters): the losses, and the parameters at the end on the CPU."""
    m = copy.deepcopy(model).to(device)
    opt = optimizer(m.parameters())
    losses = []
    for x, target in batches:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x.to(device)), target.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in m.parameters()]


def _trains_as_on_the_cpu(model, batches, optimizer, budget, **session):
    """`model` trained on the device under a manager at `budget` (`session`: its policy ...):
    its losses and parameters equal the CPU's bit for bit, the budget moved data and held."""
    ref_losses, ref_params = _trained(model, batches, "cpu", optimizer)
    with residency.session(budget_bytes=budget, **session):
        losses, params = _trained(model, batches, "tensorref", optimizer)
        s, peak = residency.stats(), residency.device_memory().peak
    assert losses == ref_losses
    assert all(torch.equal(a, b) for a, b in zip(params, ref_params))
    assert s.evictions > 0 and s.peak_device_bytes <= budget and peak <= budget
    assert s.pageable_copies == 0, s  # on a GPU, no copy would come from pageable memory


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


OPTIMIZERS = {
    "sgd": _sgd,
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-2, foreach=False),
    "adamw-foreach": lambda params: torch.optim.AdamW(params, lr=1e-2, foreach=True),
    "adamw-fused": lambda params: torch.optim.AdamW(params, lr=1e-2, fused=True),
}


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_training_equals_the_cpu_under_a_budget(optimizer):
    model = _model()
    torch.manual_seed(1)
    batches = [(torch.randn(8, 32), torch.randint(0, 8, (8,))) for _ in range(4)]
    # Weights, gradients and AdamW's two moments do not fit at once: a fused step runs once per
    # parameter on the device.
    _trains_as_on_the_cpu(model, batches, OPTIMIZERS[optimizer], 3 * _weights(model), policy="flow")


def _convnet():
    """Convolutions of every kind `_convolution` takes: 2-d with padding, grouped and strided,
    transposed, 1-d; with batch norm and pooling."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, stride=2, groups=2), torch.nn.ReLU(), torch.nn.ConvTranspose2d(8, 4, 2, stride=2),
        torch.nn.Flatten(2), torch.nn.Conv1d(4, 6, 3, bias=False), torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(),
        torch.nn.Linear(6, 3))


@pytest.mark.parametrize("policy", ["genoa", "flow"])
@pytest.mark.parametrize("recompute", ["off", "always"])
def test_a_convolutional_network_trains_as_on_the_cpu(policy, recompute):
    """libtorch's convolution asks a device of its own for `convolution_overrideable`: the device
    runs the compute device's convolution and its backward for it."""
    model = _convnet()
    torch.manual_seed(1)
    batches = [(torch.randn(16, 3, 8, 8), torch.randint(0, 3, (16,))) for _ in range(3)]
    # The largest op needs 141 KiB at once (recomputed inputs and scratch included).
    _trains_as_on_the_cpu(model, batches, _sgd, 150 * 1024, policy=policy, recompute=recompute)


def test_a_foreach_optimizer_step_is_a_few_ops_unless_the_budget_is_small():
    model, x = _model(), torch.randn(8, 32)

    def two_steps(device):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.Adam(m.parameters(), lr=1e-2, foreach=True)
        ops = []
        for _ in range(2):
            m(x.to(device)).square().mean().backward()
            before = residency.stats().ops if residency.enabled() else 0
            opt.step()
            ops.append(residency.stats().ops - before if residency.enabled() else 0)
        return ops, [p.detach().cpu() for p in m.parameters()]

    _, ref = two_steps("cpu")
    # Adam's foreach step is seven foreach ops (lerp_, mul_, addcmul_, sqrt, div_, add_,
    # addcdiv_), each one op over every parameter; the first step also makes the state.
    n = len(list(model.parameters()))
    weights = _weights(model)
    # Under Flow an op over lists reads at most a quarter of the budget: one op each where that
    # holds every list of the largest op (four of the weights' size: addcdiv_ reads parameters,
    # two moments and a quotient), more where it does not, never one per parameter.
    for policy, budget, most in [("resident", None, 7), ("flow", 64 * weights, 7), ("flow", 4 * weights, 7 * n // 2)]:
        with residency.session(policy=policy, **({"budget_bytes": budget} if budget else {})):
            ops, params = two_steps("tensorref")
        assert all(torch.equal(a, b) for a, b in zip(params, ref)), (policy, budget)
        assert 7 <= ops[1] <= most < 7 * n, f"{policy}, budget {budget}: {ops[1]} ops for a step over {n} parameters"


def test_the_schedule_model_prices_the_last_logged_training_step_from_what_it_moved():
    """The schedule model replays the last iteration the manager logged: it moved what the
    counters say that iteration moved, and it takes at least its own bound and the same step with
    everything resident, which it equals where nothing moved."""
    model = _model()
    torch.manual_seed(1)
    x, y = torch.randn(8, 32), torch.randint(0, 8, (8,))

    def steps(**session):
        m = copy.deepcopy(model)
        with residency.session(**session):
            m.to("tensorref")
            opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
            residency.schedule_log_start()
            with pytest.raises(tr.ArgumentError, match="no iteration was logged"):
                residency.schedule_model()
            marks = []
            for _ in range(4):
                torch.nn.functional.cross_entropy(m(x.to("tensorref")), y.to("tensorref")).backward()
                opt.step()
                opt.zero_grad()
                residency.mark_iteration()
                marks.append(residency.stats())
            with pytest.raises(tr.ArgumentError, match="element_bytes is 3"):
                residency.schedule_model(3)
            return residency.schedule_model(), marks[-1], marks[-2]

    resident, _, _ = steps(policy="resident")
    # Resident loads a step's batch, made on the host, and nothing else.
    assert resident.loaded_bytes == x.nbytes + y.nbytes and resident.written_bytes == 0
    # ... which the kernels wait for: 1 KiB, 20 ns at an H100's link.
    assert resident.step_s == pytest.approx(resident.unmanaged_s, rel=1e-4) and resident.unmanaged_s > 0
    flow, last, before = steps(policy="flow", budget_bytes=3 * _weights(model))
    assert flow.loaded_bytes == last.load_bytes - before.load_bytes > 0
    assert flow.written_bytes == last.write_back_bytes - before.write_back_bytes > 0
    assert flow.step_s >= flow.bound_s * (1 - 1e-9) and flow.step_s > flow.unmanaged_s
    with pytest.raises(tr.ArgumentError, match="no residency manager"):
        residency.schedule_model()


def test_a_tensor_the_device_makes_is_never_loaded_and_nothing_written_is_lost():
    x = torch.randn(64, 64)
    with residency.session(policy="flow", budget_bytes=4 * x.nbytes):
        t = x.to("tensorref")  # written on the host, before the manager sees it
        loads = residency.stats().load_bytes
        # contiguous() and zeros(): memory the device makes, then fills on the device. Neither
        # is loaded: only t, read here for the first time.
        y, z = t.t().contiguous(), torch.zeros(64, 64, device="tensorref")
        assert residency.stats().load_bytes - loads == x.nbytes
        e = torch.empty(4, device="tensorref")
        e.copy_(torch.arange(4.0))  # written on the host: the manager must load it
        assert torch.equal((e + 1).cpu(), torch.arange(1.0, 5.0))
        # Written on the device only, then pushed out by larger tensors: written back, not lost.
        pushed = [torch.ones(64, 64, device="tensorref") * i for i in range(6)]
        assert residency.stats().write_backs > 0
        assert torch.equal(y.cpu(), x.t()) and torch.equal(z.cpu(), torch.zeros(64, 64))
        assert [p[0, 0].item() for p in pushed] == [float(i) for i in range(6)]


def test_a_tensor_the_device_makes_gets_page_locked_memory_only_when_written_home():
    # 32 MiB and a little: a size class (64 MiB) of the page-locked cache no other test uses, so
    # that pinning it at registration would count a new allocation.
    n = 2**23 + 16
    with residency.session(policy="resident"):
        before = residency.stats().page_locked_allocs
        z = torch.zeros(n, device="tensorref")
        assert (z + 1).sum().item() == n
        assert residency.stats().page_locked_allocs == before
    # Written on the device, then evicted: its home gets page-locked memory then, and the data.
    with residency.session(policy="flow", budget_bytes=3 * n * 4):
        z = torch.zeros(n, device="tensorref")
        z += 2
        pushed = [torch.ones(n, device="tensorref") for _ in range(3)]
        assert residency.stats().write_backs > 0
        assert z[-1].item() == 2 and pushed[0][0].item() == 1


def test_without_a_manager_ops_run_on_the_host_homes():
    model = _model()
    x = torch.randn(4, 32)
    with torch.no_grad():
        assert torch.equal(copy.deepcopy(model).to("tensorref")(x.to("tensorref")).cpu(), model(x))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit, which models still ship as
def test_a_torchscript_module_runs_unchanged(tmp_path):
    path = tmp_path / "model.pt"
    torch.jit.save(torch.jit.script(_model().eval()), str(path))
    scripted = torch.jit.load(str(path))
    x = torch.randn(5, 32)
    with torch.no_grad():
        ref = scripted(x)
    with residency.session(policy="flow", budget_bytes=_weights(_model()) // 2):
        on = torch.jit.load(str(path), map_location="cpu").to("tensorref")
        with torch.no_grad():
            assert torch.equal(on(x.to("tensorref")).cpu(), ref)
        assert residency.stats().ops > 0


def test_a_state_dict_saved_from_the_device_loads_back_onto_it_and_onto_the_cpu(tmp_path):
    path, model = tmp_path / "weights.pt", _model()
    with residency.session(policy="flow", budget_bytes=_weights(model) // 2):
        torch.save(copy.deepcopy(model).to("tensorref").state_dict(), path)
        back, on_cpu = torch.load(path), torch.load(path, map_location="cpu")
        assert {t.device.type for t in back.values()} == {"tensorref"}
        for name, t in model.state_dict().items():
            assert torch.equal(back[name].cpu(), t) and torch.equal(on_cpu[name], t)
        fresh = _model().to("tensorref")
        with torch.no_grad():
            for p in fresh.parameters():
                p.zero_()
        fresh.load_state_dict(back)
        x = torch.randn(5, 32)
        with torch.no_grad():
            assert torch.equal(fresh(x.to("tensorref")).cpu(), model(x))
        # pickle copies a storage through a tensor over its data pointer, which holds no bytes
        with pytest.raises(RuntimeError, match="move the tensor to the CPU first"):
            pickle.dumps(back["0.weight"])
        del back, fresh


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointing_keeps_the_generator_the_device_draws_from(reentrant):
    """Activation checkpointing keeps the state of the device's generator for the region's
    recomputation in backward (dropout draws there what it drew in forward), as
    `torch.random.fork_rng` does around a block: the compute device's generator, here the CPU's."""
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 16))
    x = torch.randn(4, 16, requires_grad=True)

    def grads(checkpointed):
        torch.manual_seed(1)
        m, xd = copy.deepcopy(block).to("tensorref"), x.detach().to("tensorref").requires_grad_()
        run = (lambda t: torch.utils.checkpoint.checkpoint(m, t, use_reentrant=reentrant)) if checkpointed else m
        run(xd).square().sum().backward()
        return [t.grad.cpu() for t in (xd, *m.parameters())]

    with residency.session(policy="flow", budget_bytes=1 << 16):
        assert all(torch.equal(a, b) for a, b in zip(grads(True), grads(False)))
        assert torch.equal(torch.tensorref.get_rng_state(), torch.get_rng_state())
        with torch.random.fork_rng(device_type="tensorref"):
            torch.rand(3, device="tensorref")
            inside = torch.tensorref.get_rng_state()
        assert not torch.equal(inside, torch.tensorref.get_rng_state())


def test_autograd_s_checks_and_torch_func_hold_on_the_device_in_a_session():
    """The device's ops save for backward as any device's do (the manager's saved-tensor hooks
    are pushed only while the library's own calls run): an in-place write to a saved tensor is
    caught at backward, and torch.func's transforms, which refuse to run under such hooks,
    compute what they compute on the CPU."""
    torch.manual_seed(0)
    w, x = torch.randn(8, 8), torch.randn(4, 8)

    def loss(w, x):
        return torch.tanh(x @ w).square().sum()

    want = torch.func.grad(loss)(w, x), torch.func.jacrev(lambda w: torch.tanh(x @ w))(w)
    with residency.session(policy="flow", budget_bytes=1 << 16):
        wd, xd = w.to("tensorref"), x.to("tensorref")
        got = torch.func.grad(loss)(wd, xd), torch.func.jacrev(lambda w: torch.tanh(xd @ w))(wd)
        assert all(g.device.type == "tensorref" and torch.equal(g.cpu(), e) for g, e in zip(got, want))
        y = wd.detach().requires_grad_().sigmoid()  # sigmoid saves its result
        y.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
        assert residency.stats().ops > 0


@pytest.mark.parametrize("recompute", ["off", "always"])
def test_forward_mode_autograd_runs_on_zeros_with_no_memory(recompute):
    """Forward-mode AD makes its zero tangents as libtorch's ZeroTensor (`_efficientzerotensor`):
    on the device, as on CUDA, zeros with no memory, which no op loads (they had a null home,
    read at the next op: a crash)."""
    torch.manual_seed(0)
    x, t = torch.randn(6), torch.randn(6)

    def f(x):
        return (x.sin() * x).exp().sum()

    def all_of(x, t):
        import torch.autograd.forward_ad as fwAD
        with fwAD.dual_level():  # forward over backward, as `hessian` composes them
            d = fwAD.make_dual(x.clone().requires_grad_(), t)
            g, = torch.autograd.grad(f(d), d, create_graph=True)
            tangent = fwAD.unpack_dual(g).tangent
        return (torch.func.hessian(f)(x), torch.func.jacfwd(torch.sin)(x), torch.func.jvp(f, (x,), (t,))[1], tangent)

    want = all_of(x, t)
    with residency.session(policy="flow", budget_bytes=1 << 16, recompute=recompute):
        got = all_of(x.to("tensorref"), t.to("tensorref"))
        assert all(g.device.type == "tensorref" and torch.equal(g.cpu(), w) for g, w in zip(got, want))
        before = residency.stats().device_bytes
        z = torch._efficientzerotensor(1 << 20, device="tensorref")  # 4 MiB of zeros, under 64 KiB
        assert z._is_zerotensor() and z[2:].view(-1, 2)._is_zerotensor()
        assert torch.dot(z[:6], x.to("tensorref")).item() == 0 and torch.equal((z[:6] + 1).cpu(), torch.ones(6))
        assert torch.equal(z[:6].cpu(), torch.zeros(6)) and residency.stats().device_bytes == before


LAZY_BITS = {  # ops on tensors with a conjugate or negative bit: a lazy conj() or neg view
    "mm": lambda a, b: a @ b.conj(), "adjoint": lambda a, b: a @ b.mH, "addmm": lambda a, b: torch.addmm(a, a, b.conj()),
    "vdot": lambda a, b: torch.vdot(a[0], b[1].conj()), "dot": lambda a, b: torch.dot(a[0], b[1].conj()),
    "mul": lambda a, b: a.conj() * 2, "resolve_conj": lambda a, b: a.conj().resolve_conj(),
    "copy_ into a conj view": lambda a, b: (lambda t: (t.conj().copy_(b), t)[1])(a.clone()),
    "copy_ from a conj view": lambda a, b: a.clone().copy_(b.conj()), "in place on a conj view": lambda a, b: a.conj().mul_(2),
    "copy_ from the host into a conj view": lambda a, b: (a.conj().copy_(b.cpu()), a)[1],
    "neg view": lambda a, b: torch.mm(a, torch._neg_view(b)),
    "gradient": lambda a, b: (lambda x: torch.autograd.grad((x @ b.conj()).abs().sum(), x)[0])(a.detach().requires_grad_()),
}


@pytest.mark.parametrize("op", list(LAZY_BITS))
def test_complex_tensors_with_lazy_conjugation_compute_as_on_the_cpu(op):
    """libtorch's `conj()` and negative views only set a bit, which the kernels of `mm`, `dot`,
    `copy_` ... read: the device hands the bits on to its kernels and keeps those of the results
    (`vdot` returns a conjugate view). Before, a copy from a conj view looped until the stack ran
    out, and `vdot` lost its result's bit."""
    torch.manual_seed(0)
    a, b = torch.randn(3, 3, dtype=torch.cfloat), torch.randn(3, 3, dtype=torch.cfloat)
    with residency.session(policy="flow", budget_bytes=1 << 16):
        got = LAZY_BITS[op](a.to("tensorref"), b.to("tensorref"))
        assert got.device.type == "tensorref"
        got = got.cpu()
    assert torch.equal(got.resolve_conj(), LAZY_BITS[op](a, b).resolve_conj())


def test_torch_compile_with_an_eager_backend_runs_through_the_device():
    """Dynamo traces the model with fake tensors of the device (attention asks the device for its
    kernel as it traces) and the graph's ops run through the manager. Inductor generates code only
    for devices it knows (docs/residency.md)."""
    torch.manual_seed(0)
    proj = torch.nn.Linear(16, 48)

    def attend(x):
        q, k, v = proj(x).view(2, 8, 3, 16).unbind(2)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    x = torch.randn(2, 8, 16)
    with torch.no_grad():
        want = attend(x)
        with residency.session(policy="flow", budget_bytes=1 << 16):
            proj.to("tensorref")
            torch._dynamo.reset()
            got = torch.compile(attend, backend="aot_eager")(x.to("tensorref")).cpu()
            assert residency.stats().ops > 0
            proj.cpu()
    assert torch.equal(got, want)


def test_code_that_waits_for_the_device_runs_unchanged():
    """Timing code waits for the device before it stops a timer: `torch.tensorref.synchronize()`,
    `torch.accelerator.synchronize()`, an event recorded after the work; or times the work between
    two events. On CUDA they are CUDA's events on the stream the device's kernels run on
    (tools/gpu/torch_device_cuda.py); here the work is done, and the events read the host's clock."""
    with residency.session(policy="flow", budget_bytes=1 << 20):
        a = torch.randn(64, 64).to("tensorref")
        start, end = torch.Event(device="tensorref", enable_timing=True), torch.Event(device="tensorref", enable_timing=True)
        start.record()
        b = a @ a
        time.sleep(0.02)
        end.record()
        torch.tensorref.synchronize()
        torch.accelerator.synchronize()
        end.synchronize()
        assert end.query() and torch.accelerator.current_stream().query()
        assert 20 <= start.elapsed_time(end) < 10_000
        torch.tensorref.current_stream().wait_event(end)
        assert torch.equal(b.cpu(), a.cpu() @ a.cpu())
        del a, b


def test_memory_functions_read_the_manager_s_memory():
    """Code written for an accelerator reads its memory through `torch.accelerator` (or the
    device's module, as `torch.cuda`): on the device, the manager's device copies against its
    budget. Before, libtorch asserted that the device's allocator was no device allocator."""
    budget = 1 << 20
    assert torch.accelerator.memory_allocated() == 0  # no manager: nothing on the device
    with residency.session(policy="flow", budget_bytes=budget):
        torch.tensorref.reset_peak_memory_stats()
        x = torch.randn(64, 1024).to("tensorref") * 2  # 256 KiB made on the device
        held = residency.stats().device_bytes
        assert held >= x.nbytes and torch.tensorref.memory_allocated() == held
        assert torch.accelerator.max_memory_allocated() == residency.stats().peak_device_bytes >= held
        assert torch.accelerator.memory_stats()["allocated_bytes.all.current"] == held
        assert torch.tensorref.mem_get_info() == (budget - held, budget)
        torch.tensorref.empty_cache()
        del x
        torch.tensorref.reset_peak_memory_stats()
        assert torch.tensorref.max_memory_allocated() == torch.tensorref.memory_allocated() < held


def test_errors_from_kernels_keep_their_type_and_words():
    a, b = torch.randn(2, 3).to("tensorref"), torch.randn(4, 5).to("tensorref")
    with residency.session(policy="flow", budget_bytes=1 << 20):
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            a @ b
        with pytest.raises(IndexError):
            a[5]
        assert torch.equal((a * 2).cpu(), a.cpu() * 2)  # the manager carries on


def test_a_host_tensor_beside_the_device_s_is_refused_as_cuda_refuses_it():
    """The simulated device runs the CPU's kernels, which would take a tensor of the host; code
    that mixes devices fails here as it would on a GPU, but for what CUDA's kernels take too."""
    x = torch.arange(4.0)
    with residency.session(policy="flow", budget_bytes=1 << 16):
        t = x.to("tensorref")
        for mixed in (lambda: t + x, lambda: torch.cat([t, x]), lambda: torch.where(x > 1, t, 0.0)):
            with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
                mixed()
        assert torch.equal((t * torch.tensor(2.0)).cpu(), x * 2)  # a 0-dim tensor is a number
        assert torch.equal(t[torch.tensor([3, 0])].cpu(), x[[3, 0]])  # indices may be the host's
        t[torch.tensor([1])] = 7.0
        assert t.cpu().tolist() == [0.0, 7.0, 2.0, 3.0]
        del t


def test_out_tensors_of_another_size_are_resized():
    a = torch.randn(3, 4)
    with residency.session(policy="flow", budget_bytes=1 << 20):
        out = torch.empty(0, device="tensorref")
        torch.add(a.to("tensorref"), 1, out=out)
        assert out.shape == (3, 4) and torch.equal(out.cpu(), a + 1)


def test_flow_learns_the_order_of_a_model_that_never_marks_an_iteration():
    model = _model()
    x = torch.randn(8, 32)
    with torch.no_grad():
        ref = model(x)
    with residency.session(policy="flow", budget_bytes=_weights(model) // 4):
        on = copy.deepcopy(model).to("tensorref")
        for _ in range(4):
            with torch.no_grad():
                assert torch.equal(on(x.to("tensorref")).cpu(), ref)
        s = residency.stats()
    assert s.prefetch_hits > 0, s


def test_the_iteration_marks_hook_modules_only_while_a_manager_runs():
    """The hooks that mark iterations are global (every module's calls): outside a session no
    module pays for them, and torch.compile, which warns of global hooks, finds none."""
    import warnings

    def ours():
        hooks = torch.nn.modules.module._global_forward_pre_hooks.values()
        return [h for h in hooks if h is torch_device._before_forward]

    assert not ours()
    with residency.session(policy="flow", budget_bytes=1 << 20):
        assert len(ours()) == 1
        with residency.session(policy="genoa", budget_bytes=1 << 20):
            assert len(ours()) == 1
        assert len(ours()) == 1
    assert not ours()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.randn(2, 4)
        linear = torch.nn.Linear(4, 4)
        assert torch.equal(torch.compile(linear, backend="eager")(x), linear(x))
    assert not [w for w in caught if "global hooks" in str(w.message)], [str(w.message) for w in caught]


def test_flow_learns_the_order_of_code_with_no_module_and_no_mark():
    """No module call marks an iteration here: the manager finds the passes in the repeating op
    sequence itself, as it does for C and C++ programs (examples/cpp/aten_device.cpp)."""
    torch.manual_seed(0)
    weights = [torch.randn(64, 64) / 8 for _ in range(8)]
    x = torch.randn(16, 64)

    def forward(ws, h):
        for w in ws:
            h = (h @ w).relu()
        return h

    ref = forward(weights, x)
    with torch.no_grad(), residency.session(policy="flow", budget_bytes=sum(w.nbytes for w in weights) // 4):
        ws, tx = [w.to("tensorref") for w in weights], x.to("tensorref")
        for _ in range(4):
            assert torch.equal(forward(ws, tx).cpu(), ref)
        s = residency.stats()
    assert s.prefetch_hits > 0 and s.evictions > 0, s


def _flow_steps(train, steps, warmup):
    """Runs `train(device, steps, learned)` on the CPU and on the device under Flow at half of
    Resident's peak; returns the CPU's and the device's results, the counters at `warmup` and at
    the end, and the manager's events from `warmup` on, each with its step."""
    ref = train("cpu", steps, lambda step: None)
    with residency.session(policy="resident"):
        train("tensorref", steps, lambda step: None)
        peak = residency.stats().peak_device_bytes
    marks, events, step_now = [], [], [0]

    def learned(step):
        step_now[0] = step
        if step == warmup:
            marks.append(residency.stats())

    with residency.session(policy="flow", budget_bytes=peak // 2):
        residency.set_callback(lambda e: step_now[0] >= warmup and events.append((step_now[0], e)))
        got = train("tensorref", steps, learned)
        residency.set_callback(None)
        s = residency.stats()
    return ref, got, marks[0], s, events


def _tanh_layers(weights, x, optimizer, copy=False):
    """A training step's loop: tanh layers over `weights` (each reading a contiguous copy of a
    transposed view of its input where `copy`), `optimizer`, the loss a step."""
    def train(device, steps, learned):
        ws = [w.clone().to(device).requires_grad_(True) for w in weights]
        opt = optimizer(ws)
        tx, losses = x.to(device), []
        for step in range(steps):
            learned(step)
            h = tx
            for w in ws:
                h = torch.tanh((h.t().contiguous().t() if copy else h) @ w)
            loss = h.square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [w.detach().cpu() for w in ws]
    return train


def test_flow_learns_the_order_of_a_training_step_with_no_module_and_no_mark():
    """A training step is found as one iteration, though a weight is read in forward, again in
    backward (transposed) and by the optimizer, and the optimizer's foreach ops over 20
    parameters each make 20 results: had these been taken for the step repeating, the step
    would have been found as several iterations, none like the one before, and Flow would have
    followed none (no prefetch at all, as in benches/training_peers.py until 2026-12-07)."""
    torch.manual_seed(0)
    weights = [torch.randn(32, 32) / 6 for _ in range(20)]
    x = torch.randn(16, 32)
    train = _tanh_layers(weights, x, lambda ws: torch.optim.Adam(ws, lr=1e-2, foreach=True))
    ref_losses, ref_weights = train("cpu", 6, lambda step: None)
    marks = []
    # Weights, gradients and Adam's two moments fill the budget: nothing else fits beside them.
    with residency.session(policy="flow", budget_bytes=4 * sum(w.nbytes for w in weights)):
        losses, trained = train("tensorref", 6, lambda step: step == 3 and marks.append(residency.stats()))
        s = residency.stats()
    assert losses == ref_losses and all(torch.equal(a, b) for a, b in zip(trained, ref_weights))
    hits, misses = s.prefetch_hits - marks[0].prefetch_hits, s.prefetch_misses - marks[0].prefetch_misses
    # The survivors of each iteration found (gradients, Adam's moments) are followed too: with
    # them named by an iteration gone, they would be loaded on demand, never prefetched.
    assert s.evictions > marks[0].evictions and hits > 0 and misses == 0, (hits, misses)


def test_flow_follows_the_copies_a_step_makes_from_nothing():
    """`contiguous()` of a transposed view copies into a storage made from nothing (`empty`, then
    `copy_`), a new one each step, which autograd saves for backward. Named in the trace by the
    op that first wrote it, as a result is named by the op that made it, each step's copy takes
    the place of the last one's: Flow prefetches it for backward. Named by its own id, new each
    step, it read as never used again: evicted first, and loaded at its op in backward."""
    torch.manual_seed(0)
    weights = [torch.randn(64, 64) / 8 for _ in range(8)]
    x = torch.randn(32, 64)
    train = _tanh_layers(weights, x, lambda ws: torch.optim.SGD(ws, lr=1e-2), copy=True)
    (ref_losses, ref_weights), (losses, trained), mark, s, events = _flow_steps(train, steps=7, warmup=4)
    assert losses == ref_losses and all(torch.equal(a, b) for a, b in zip(trained, ref_weights))
    # The copies and the activations are x's size; weights and gradients are larger.
    back = [e.kind for _, e in events if e.kind in ("load", "prefetch") and e.bytes == x.nbytes]
    assert "prefetch" in back, "the budget evicts what backward reads"
    assert "load" not in back, f"{back.count('load')} of {len(back)} loads of copies and activations at their op"


def test_flow_writes_a_storage_back_once_a_step_when_ops_in_a_row_write_it():
    """Adam's foreach step scales its second moments in place (`_foreach_mul_`), then adds to
    them in place (`_foreach_addcmul_`); written ahead of their eviction after the first, they
    would be written back twice a step."""
    torch.manual_seed(0)
    weights = [torch.randn(48, 48) / 7 for _ in range(12)]
    x = torch.randn(24, 48)
    train = _tanh_layers(weights, x, lambda ws: torch.optim.Adam(ws, lr=1e-2, foreach=True))
    (ref_losses, ref_weights), (losses, trained), mark, s, events = _flow_steps(train, steps=8, warmup=5)
    assert losses == ref_losses and all(torch.equal(a, b) for a, b in zip(trained, ref_weights))
    written = collections.Counter((step, e.entry) for step, e in events if e.kind == "write_back")
    assert written, "the budget writes back"
    twice = [key for key, n in written.items() if n > 1]
    assert not twice, f"{len(twice)} storages written back more than once in a step"


def test_an_op_with_several_outputs_is_one_op():
    x = torch.randn(16)
    with residency.session(policy="flow", budget_bytes=1 << 20):
        t = x.to("tensorref")
        before = residency.stats().ops
        values, indices = torch.topk(t, 3)
        assert residency.stats().ops - before == 1
        want = torch.topk(x, 3)
        assert torch.equal(values.cpu(), want.values) and torch.equal(indices.cpu(), want.indices)


@pytest.mark.parametrize("learned_bias", [False, True])
def test_attention_takes_the_kernel_the_cpu_takes_for_what_requires_grad(learned_bias):
    """The CPU's flash kernel has no gradient for a mask, so attention over a learned bias (Swin's
    relative positions) takes the math path, as on the CPU; without one, the flash kernel."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16, requires_grad=True) for _ in range(3))
    bias = torch.randn(1, 4, 8, 8, requires_grad=learned_bias)

    def attention(q, k, v, bias):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        out.square().sum().backward()
        return out.detach()

    want = attention(q, k, v, bias)
    with residency.session(policy="flow", budget_bytes=1 << 18):
        on = [t.detach().to("tensorref").requires_grad_(t.requires_grad) for t in (q, k, v, bias)]
        assert torch.equal(attention(*on).cpu(), want)
        for t, mine in zip((q, k, v, bias), on):
            assert (t.grad is None) == (mine.grad is None) and (t.grad is None or torch.equal(mine.grad.cpu(), t.grad))
        del on


def test_autocast_on_the_device_casts_as_cuda_s_autocast():
    """A product in the lower precision, softmax and layer norm in float (CUDA's lists), the
    weights' gradients in float through the casts: equal to the same casts written out on the
    CPU."""
    F = torch.nn.functional
    torch.manual_seed(0)
    x, w, b = torch.randn(8, 32), torch.randn(16, 32, requires_grad=True), torch.randn(16, requires_grad=True)

    def layer(x, w, b, cast):
        y = F.linear(*(t.bfloat16() if cast else t for t in (x, w, b)))
        p = torch.softmax(y, -1, dtype=torch.float32) if cast else torch.softmax(y, -1)
        n = F.layer_norm(y.float() if cast else y, (16,))
        (p * n).sum().backward()
        return y.detach(), p.detach(), n.detach()

    want = layer(x, w, b, cast=True)
    with residency.session(policy="flow", budget_bytes=1 << 16):
        wd, bd = (t.detach().to("tensorref").requires_grad_() for t in (w, b))
        with torch.autocast("tensorref", dtype=torch.bfloat16):
            got = layer(x.to("tensorref"), wd, bd, cast=False)
            with pytest.raises(RuntimeError, match="unsafe to autocast"):
                F.binary_cross_entropy(torch.sigmoid(got[0]), torch.ones(8, 16, device="tensorref"))
        assert [t.dtype for t in got] == [torch.bfloat16, torch.float32, torch.float32]
        assert all(torch.equal(g.cpu(), v) for g, v in zip(got, want))
        assert wd.grad.dtype == torch.float32 and torch.equal(wd.grad.cpu(), w.grad)
        assert torch.equal(bd.grad.cpu(), b.grad)
        del got, wd, bd


@pytest.fixture
def op_with_an_output_elsewhere():
    """`tensorref_test::elsewhere(x) -> (x + 1, a 0-dim long on meta)`: a kernel that returns one of
    its outputs on another device than the one it computed on, as CUDA's efficient attention
    returns its random seed and offset on the CPU."""
    lib = torch.library.Library("tensorref_test", "DEF")
    lib.define("elsewhere(Tensor x) -> (Tensor, Tensor)")
    lib.impl("elsewhere", lambda x: (x + 1, torch.zeros((), dtype=torch.long, device="meta")), "CPU")
    yield torch.ops.tensorref_test.elsewhere
    lib._destroy()


@pytest.mark.parametrize("policy", ["flow", "genoa"])
def test_an_output_a_kernel_makes_on_another_device_stays_there(op_with_an_output_elsewhere, policy):
    x = torch.arange(6.0)
    with residency.session(policy=policy, budget_bytes=1 << 16):
        here, there = op_with_an_output_elsewhere(x.to("tensorref"))
        assert here.is_tensorref and torch.equal(here.cpu(), x + 1)
        assert there.device.type == "meta" and there.dtype == torch.long and there.dim() == 0
        del here, there
    # the session ended without writing home a storage it could not read


def test_a_device_tensor_and_its_handle_are_one_storage():
    x = torch.arange(12.0).reshape(3, 4)
    with residency.session(policy="flow", budget_bytes=1 << 20):
        t = x.to("tensorref")
        view = t[1:, ::2]
        h = tr.from_torch(view)
        assert h.shape == (2, 2) and h.numpy().tolist() == x[1:, ::2].tolist()
        h.mul_(10)  # through the library's op table ...
        assert torch.equal(t.cpu()[1:, ::2], x[1:, ::2] * 10)  # ... seen by the torch tensor
        t.add_(1)  # and the other way
        assert h.numpy().tolist() == (x[1:, ::2] * 10 + 1).tolist()
        assert residency.stats().device_bytes == x.numel() * 4  # one copy on the device
        h.dispose()


def test_a_handle_as_a_torch_tensor_of_the_device_lives_as_long_as_either():
    x = torch.arange(6.0)
    with residency.session(policy="flow", budget_bytes=1 << 20):
        h = tr.from_numpy(x.numpy().copy())
        t = h.to_torch_device()
        assert t.device.type == "tensorref" and torch.equal(t.cpu(), x)
        t.mul_(2)  # through torch, seen through the handle
        assert h.numpy().tolist() == (x * 2).tolist()
        h.dispose()  # the storage lives on in the torch tensor ...
        assert torch.equal((t + 1).cpu(), x * 2 + 1)
        assert residency.stats().device_bytes > 0
        del t  # ... and dies with it: nothing holds it any more
        gc.collect()
        assert residency.stats().device_bytes == 0
