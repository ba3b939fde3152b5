"""Scenario (b) from Python: a stack of linear layers whose weights are 4x the device budget runs
under Flow on the simulated accelerator (CUDA with --device cuda). Each forward pass is marked as an
iteration; from the second pass Flow evicts by the learned order and prefetches ahead. Prints the
manager's statistics per pass and exits non-zero if a result differs from the unmanaged run,
the peak device bytes pass the budget, or a handle leaks. (The Rust version: examples/flow_stack.rs.)

    python3 examples/python/flow_stack.py [--device simulated|cuda]
"""
import sys

import numpy as np

import tensorref as tr

LAYERS, WIDTH, BATCH, PASSES = 8, 256, 64, 5


def forward(weights, x) -> np.ndarray:
    with tr.scope():  # every intermediate is released here
        h = x @ weights[0]
        for w in weights[1:]:
            h = h.relu() @ w
        return h.numpy()


def main() -> int:
    # --device simulated|cuda (--cuda is the same as --device cuda)
    device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "simulated"
    device = "cuda" if "--cuda" in sys.argv else device
    live_at_start = tr.live_handles()
    failures = []
    with tr.no_grad():
        tr.manual_seed(0)
        weights = [tr.randn([WIDTH, WIDTH]) * (1.0 / WIDTH ** 0.5) for _ in range(LAYERS)]
        x = tr.randn([BATCH, WIDTH])
        expected = forward(weights, x)  # without a manager

        weight_bytes = LAYERS * WIDTH * WIDTH * 4
        budget = weight_bytes // 4
        print(f"running on the {device} device")
        print(f"{LAYERS} layers, {weight_bytes >> 10} KiB of weights, budget {budget >> 10} KiB")
        print(f"{'pass':>4} {'loads':>7} {'loaded KiB':>11} {'evictions':>9} {'prefetch hits':>13} "
              f"{'prefetch miss':>13} {'peak KiB':>11}")
        with tr.residency.session(policy="flow", budget_bytes=budget, device=device):
            last = tr.residency.stats()
            for n in range(1, PASSES + 1):
                y = forward(weights, x)
                tr.residency.mark_iteration()
                s = tr.residency.stats()
                print(f"{n:>4} {s.loads - last.loads:>7} {(s.load_bytes - last.load_bytes) >> 10:>11} "
                      f"{s.evictions - last.evictions:>9} {s.prefetch_hits - last.prefetch_hits:>13} "
                      f"{s.prefetch_misses - last.prefetch_misses:>13} {s.peak_device_bytes >> 10:>11}")
                worst = float(np.abs(y - expected).max())
                # Bit for bit on the simulated device; CUDA's kernels round differently.
                if worst > (1e-4 if device == "cuda" else 0.0):
                    failures.append(f"pass {n}: results differ from the unmanaged run by {worst}")
                if s.peak_device_bytes > s.budget:
                    failures.append(f"pass {n}: peak {s.peak_device_bytes} > budget {s.budget}")
                last = s
        for t in weights + [x]:
            t.close()
    if tr.live_handles() != live_at_start:
        failures.append(f"{tr.live_handles() - live_at_start} handle(s) leaked")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    if not failures:
        print("results equal the unmanaged run; peak within the budget")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
