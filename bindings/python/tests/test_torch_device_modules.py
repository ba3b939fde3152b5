"""torch.nn's modules, unchanged, on the `tensorref` device: the forward pass and the gradients of
the parameters and the input equal the CPU's bit for bit, under Flow at a budget that holds each
op. What libtorch computes otherwise on an accelerator is listed in docs/residency.md ("What does
not run on the device"); LSTM's error is checked here."""
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


def test_an_lstm_on_the_simulated_device_names_the_fused_cell_it_lacks():
    lstm = nn.LSTM(8, 5, batch_first=True)
    with residency.session(policy="flow", budget_bytes=1 << 22):
        on = lstm.to("tensorref")
        with pytest.raises(NotImplementedError, match="_thnn_fused_lstm_cell"):
            on(_sequence().to("tensorref"))
