"""The host time the `tensorref` device adds to each op, against plain torch on the same kernel.

Two measurements, each the median of --repeats timed runs after a warm-up, on the host (the
simulated device computes with the CPU's kernels, so the difference is the device's own work):

- one op: `a + b` on 4-element tensors, plain CPU against `tensorref` with no manager, under
  Resident, and under Flow with room for everything (no eviction: the manager's bookkeeping only);
- a model: a small Llama's forward pass (transformers, random weights from a config), whose ops
  reach the device's fallback: (time on the device - time on the CPU) / ops the manager counted.

    python3 benches/torch_device_overhead.py [--repeats 200] [--model-repeats 10]

The output of every device run is checked equal to the CPU's (the script exits 1 otherwise).
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time

import torch

import tensorref  # noqa: F401  (registers the device)
from tensorref import residency


def median_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def one_op(repeats: int) -> list[tuple[str, float]]:
    a, b = torch.randn(4), torch.randn(4)
    ref = a + b
    rows = [("cpu", median_seconds(lambda: a + b, repeats))]
    ta, tb = a.to("tensorref"), b.to("tensorref")
    configs = [("tensorref, no manager", None), ("tensorref, Resident", dict(policy="resident")),
               ("tensorref, Flow (room for all)", dict(policy="flow", budget_bytes=1 << 30))]
    for name, cfg in configs:
        session = residency.session(**cfg) if cfg else None
        if session:
            session.__enter__()
        try:
            if not torch.equal((ta + tb).cpu(), ref):
                sys.exit(f"{name}: a + b differs from the CPU's")
            rows.append((name, median_seconds(lambda: ta + tb, repeats)))
        finally:
            if session:
                session.__exit__(None, None, None)
    return rows


def model_pass(repeats: int):
    try:
        import transformers
    except ImportError:
        return None
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64)).eval()
    ids = torch.randint(3, 96, (1, 8))
    with torch.no_grad():
        ref = model(ids).logits
        cpu = median_seconds(lambda: model(ids), repeats)
        with residency.session(policy="flow", budget_bytes=1 << 30):
            on, on_ids = copy.deepcopy(model).to("tensorref"), ids.to("tensorref")
            if not torch.equal(on(on_ids).logits.cpu(), ref):
                sys.exit("the Llama forward pass on the device differs from the CPU's")
            before = residency.stats().ops
            on(on_ids)
            ops = residency.stats().ops - before
            device = median_seconds(lambda: on(on_ids), repeats)
    return cpu, device, ops


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2000)
    p.add_argument("--model-repeats", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(1)
    rows = one_op(args.repeats)
    print(f"one op, a + b on 4 elements (median of {args.repeats}):")
    print(f"  {'':34} {'us/op':>8} {'added us':>9}")
    for name, s in rows:
        print(f"  {name:34} {s * 1e6:8.2f} {(s - rows[0][1]) * 1e6:9.2f}")
    m = model_pass(args.model_repeats)
    if m is None:
        print("a model: transformers is not installed")
        return
    cpu, device, ops = m
    print(f"a Llama forward pass (2 layers, width 64, 8 tokens; median of {args.model_repeats}), Flow with room for all:")
    print(f"  cpu {cpu * 1e3:.2f} ms, tensorref {device * 1e3:.2f} ms, {ops} ops through the manager: "
          f"{(device - cpu) / ops * 1e6:.2f} us added per op (mean)")


if __name__ == "__main__":
    main()
