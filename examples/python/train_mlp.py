"""Trains a small MLP (1 -> 32 -> 1, tanh) to fit y = sin(x) with tensorref, one dispose scope
per step: every temporary of the step (activations, loss, gradients read back) is released when
the step's scope ends, so the number of live handles stays flat. It prints the count per step
and exits non-zero if it ever grows or the loss does not fall.

    TENSORREF_LIB=target/debug/libtensorref.so python3 examples/python/train_mlp.py
"""
import math
import sys

import numpy as np

import tensorref as tr

STEPS, LR = 50, 0.1


def main() -> int:
    print(f"tensorref {tr.__version__} ({tr.__file__}), library {tr.LIB_PATH}")
    tr.manual_seed(0)
    xs = np.linspace(-math.pi, math.pi, 64, dtype=np.float32).reshape(-1, 1)
    x, y = tr.from_numpy(xs), tr.from_numpy(np.sin(xs))

    # Parameters live outside any scope: their Python objects own them.
    w1 = (tr.randn([32, 1]) * 0.5).requires_grad_(True)
    b1 = tr.zeros(32).requires_grad_(True)
    w2 = (tr.randn([1, 32]) * 0.2).requires_grad_(True)
    b2 = tr.zeros(1).requires_grad_(True)
    params = [w1, b1, w2, b2]

    live_at_start = tr.live_handles()
    first_loss = loss_value = None
    for step in range(1, STEPS + 1):
        with tr.scope():
            loss = tr.mse_loss(x.linear(w1, b1).tanh().linear(w2, b2), y)
            loss.backward()
            grad_norm = math.sqrt(sum((p.grad() ** 2.0).sum().item() for p in params))
            tr.optim_sgd_step(params, LR)
            for p in params:
                p.zero_grad()
            loss_value = loss.item()
        live = tr.live_handles()
        first_loss = first_loss if first_loss is not None else loss_value
        print(f"step {step:3d}  loss {loss_value:.5f}  |grad| {grad_norm:.4f}  live handles {live}")
        if live != live_at_start:
            print(f"FAIL: {live} live handles after step {step}, {live_at_start} before training")
            return 1

    print(f"loss {first_loss:.4f} -> {loss_value:.4f}; live handles flat at {live_at_start}; "
          f"stats {tuple(tr.stats())}")
    if not loss_value < first_loss / 5:
        print("FAIL: the loss did not fall")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
