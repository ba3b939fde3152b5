"""torch.nn's modules, unchanged, on the `tensorref` device: the forward pass and the gradients of
the parameters and the input equal the CPU's bit for bit, under Flow at a budget that holds each
op. What libtorch computes otherwise on an accelerator is listed in docs/residency.md ("What does
not run on the device"); recurrent layers, which take another path there, are checked here."""
import copy

import pytest
import torch
import torch.nn as nn

from tensorref import residency, torch_device

torch_device.register()  # this suite imports tensorref before torch (conftest)

pytestmark = pytest.mark.usefixtures("no_manager_left_and_no_leak")


def _sequence():
    return torch.randn(4, 6, 8)


def _image():
    return torch.randn(2, 4, 8, 8)


def _indices():
    return torch.randint(0, 10, (3, 4))


# name: (the module, its input, how it is called)
MODULES = {
    "Conv3d": (lambda: nn.Conv3d(4, 3, 3, padding=1), lambda: torch.randn(1, 4, 4, 5, 5)),
    "ConvTranspose1d": (lambda: nn.ConvTranspose1d(6, 3, 3, stride=2), _sequence),
    "MaxPool2d ceil_mode": (lambda: nn.MaxPool2d(3, 2, ceil_mode=True), _image),
    "AvgPool2d": (lambda: nn.AvgPool2d(2), _image),
    "AdaptiveMaxPool2d": (lambda: nn.AdaptiveMaxPool2d(3), _image),
    "LPPool2d": (lambda: nn.LPPool2d(2, 2), _image),
    "GroupNorm": (lambda: nn.GroupNorm(2, 4), _image),
    "InstanceNorm2d": (lambda: nn.InstanceNorm2d(4, affine=True), _image),
    "BatchNorm2d eval": (lambda: nn.BatchNorm2d(4).eval(), _image),
    "LayerNorm, RMSNorm": (lambda: nn.Sequential(nn.LayerNorm(8), nn.RMSNorm(8)), _sequence),
    "Upsample nearest": (lambda: nn.Upsample(scale_factor=2), _image),
    "Upsample bilinear": (lambda: nn.Upsample(scale_factor=2, mode="bilinear"), _image),
    "Upsample bicubic": (lambda: nn.Upsample(scale_factor=2, mode="bicubic"), _image),
    "PixelShuffle": (lambda: nn.PixelShuffle(2), _image),
    "Unfold": (lambda: nn.Unfold(3), _image),
    "activations": (lambda: nn.Sequential(nn.PReLU(), nn.Softplus(), nn.ELU(), nn.SELU(), nn.Mish(), nn.Hardswish(), nn.SiLU()),
                    _image),
    "EmbeddingBag": (lambda: nn.EmbeddingBag(10, 4, mode="mean"), _indices),
    "Embedding max_norm": (lambda: nn.Embedding(10, 4, max_norm=1.0), _indices),
    "MultiheadAttention": (lambda: nn.MultiheadAttention(8, 2, batch_first=True), _sequence, lambda m, x: m(x, x, x)[0]),
    "TransformerEncoderLayer": (lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), _sequence),
    "TransformerEncoderLayer eval": (lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval(),
                                     _sequence),
    "Bilinear": (lambda: nn.Bilinear(8, 8, 3), _sequence, lambda m, x: m(x, x)),
}


def _forward_and_grads(module, x, call):
    """The output, and the gradients of the parameters and of a floating-point input, of the sum
    of the output, all on the CPU."""
    x = x.detach().requires_grad_(x.dtype.is_floating_point)
    out = call(module, x)
    out.sum().backward()
    grads = [p.grad for p in module.parameters()] + ([x.grad] if x.requires_grad else [])
    return out.detach().cpu(), [g.cpu() for g in grads]


@pytest.mark.parametrize("name", list(MODULES))
def test_a_module_runs_as_on_the_cpu(name):
    make, inputs, *how = MODULES[name]
    call = how[0] if how else (lambda m, x: m(x))
    torch.manual_seed(0)
    module, x = make(), inputs()
    on = copy.deepcopy(module)
    out, grads = _forward_and_grads(module, x, call)
    with residency.session(policy="flow", budget_bytes=1 << 22):
        got, got_grads = _forward_and_grads(on.to("tensorref"), x.to("tensorref"), call)
        ops = residency.stats().ops
    assert ops > 0
    assert torch.equal(got, out)
    assert len(got_grads) == len(grads) and all(torch.equal(a, b) for a, b in zip(got_grads, grads))


RECURRENT = {
    "LSTM, 2 layers, batch first": lambda: nn.LSTM(8, 16, num_layers=2, batch_first=True),
    "LSTM, bidirectional": lambda: nn.LSTM(8, 16, bidirectional=True),
    "LSTM, projections": lambda: nn.LSTM(8, 16, proj_size=4),
    "LSTM, no bias": lambda: nn.LSTM(8, 16, bias=False),
    "GRU, 2 layers, bidirectional": lambda: nn.GRU(8, 16, num_layers=2, bidirectional=True),
    "GRU, no bias": lambda: nn.GRU(8, 16, bias=False),
    "LSTMCell": lambda: nn.LSTMCell(8, 16),
    "GRUCell": lambda: nn.GRUCell(8, 16),
}


@pytest.mark.parametrize("name", list(RECURRENT))
def test_a_recurrent_layer_runs_the_fused_cell_as_cuda_computes_it(name):
    """On any device but the CPU, libtorch's recurrent layers take a fused cell, which the
    simulated device computes as CUDA's kernels do (src/torch_device/recurrent.cpp): equal to the
    CPU's own path but in the last bits, since that path adds the biases inside its products."""
    torch.manual_seed(0)
    module = RECURRENT[name]()
    x = torch.randn(3, 8) if "Cell" in name else torch.randn(5, 3, 8)

    def call(m, x):  # the output sequence, or the cell's hidden state
        out = m(x)
        return out if isinstance(out, torch.Tensor) else out[0]

    out, grads = _forward_and_grads(copy.deepcopy(module), x, call)
    with residency.session(policy="resident"):
        _forward_and_grads(copy.deepcopy(module).to("tensorref"), x.to("tensorref"), call)
        budget = residency.stats().peak_device_bytes // 2
    with residency.session(policy="flow", budget_bytes=budget):
        got, got_grads = _forward_and_grads(module.to("tensorref"), x.to("tensorref"), call)
        s = residency.stats()
        assert all(p.grad.device.type == "tensorref" for p in module.parameters())  # made by the cells' backward
    assert s.evictions > 0 and s.peak_device_bytes <= budget, s
    assert s.pageable_copies == 0, s  # on a GPU, no copy would come from pageable memory
    assert len(got_grads) == len(grads)
    for mine, cpu in zip([got, *got_grads], [out, *grads]):
        torch.testing.assert_close(mine, cpu, rtol=1e-5, atol=1e-6)
