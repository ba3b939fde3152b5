"""The peers of `cargo bench --bench residency`, on the same stack in PyTorch, in one run:

- resident: every weight on the GPU (the speed a model that fits gets);
- stream: the best streaming loop a PyTorch user would write by hand, at the benchmark's budget
  (the weights' bytes / --budget-div, as benches/residency.rs): the last layers that fit beside
  its working set stay resident, the others stream through two device buffers per weight shape
  from page-locked memory, the next one copied on a side stream while this one computes (ordered
  by two events per buffer: copy done, compute done), and the next pass's first streamed layer
  copied while this pass's resident tail computes;
- naive stream: the same double buffering with nothing resident and no budget, each pass
  starting with an exposed load of its first layer;
- accelerate: accelerate's `cpu_offload(model, execution_device="cuda")`;
- optimem: pytorch-optimem's `page` (each module to the GPU and back around its forward);
- cpu: PyTorch on the host's cores.

    python3 benches/residency_peers.py --width 8192 --layers 16 --batch 2048 [--dtype f16]
        [--shape linear|opt30b] [--passes 5] [--budget-div 4] [--device cuda|cpu]
        [--peers resident,stream,naive-stream,accelerate,optimem,cpu] [--json PATH]

Each row prints milliseconds per pass (median of the timed passes after a warm-up) and its whole
output's largest difference from a reference computed once beforehand, independently of every
row: the plain module with all weights on the device. On CUDA it prints the peaks of allocated
and of reserved device memory too, and the run measures host-to-device bandwidth from page-locked
memory. A row whose output is off, which fails, or a requested peer that cannot run (not
installed) makes the script exit 1. With --device cpu the stream peers run on the host with inert
stand-ins for streams and events, so that CI runs every check on small shapes; accelerate and
optimem need CUDA and are skipped there. The model is the benchmark's: square layers
`relu(x @ W^T)`, or OPT-30B-like blocks of four weights, each layer's weights drawn apart.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
import traceback

import torch
import torch.nn as nn


def linear(w: torch.Tensor) -> nn.Linear:
    """An nn.Linear holding `w` (made on the meta device, so nothing is drawn for it)."""
    lin = nn.Linear(w.shape[1], w.shape[0], bias=False, device="meta")
    lin.weight = nn.Parameter(w, requires_grad=False)
    return lin


class Block(nn.Module):
    """One layer of the benchmark: one square weight, or an OPT-style block of four."""

    def __init__(self, width: int, weights: list[torch.Tensor]):
        super().__init__()
        self.linears = nn.ModuleList(linear(w) for w in weights)
        self.width = width

    def forward(self, x):
        if len(self.linears) == 1:
            return torch.relu(self.linears[0](x))
        qkv, o, fc1, fc2 = self.linears
        h1 = x + o(qkv(x)[:, : self.width])
        return h1 + fc2(torch.relu(fc1(h1)))


def model(args, dtype, draw: str, pin: bool) -> nn.Sequential:
    """The stack with its weights in host memory (page-locked when `pin`), every layer its own:
    drawn from a generator seeded with the layer's index on `draw` (tens of GiB drawn on the
    host take minutes) and copied home. Scaled as the Rust benchmark: 1/sqrt(fan-in), and in the
    OPT shape o and fc2 (the products added to the residual) by 1/sqrt(2 layers) more."""
    h = args.width
    shapes = [(3 * h, h), (h, h), (4 * h, h), (h, 4 * h)] if args.opt30b else [(h, h)]
    blocks = []
    for layer in range(args.layers):
        gen = torch.Generator(draw).manual_seed(layer)
        weights = []
        for i, shape in enumerate(shapes):
            residual = (2 * args.layers) ** -0.5 if args.opt30b and i % 2 == 1 else 1.0
            w = torch.randn(shape, generator=gen, device=draw, dtype=dtype).mul_(residual * shape[1] ** -0.5)
            weights.append(torch.empty(shape, dtype=dtype, pin_memory=pin).copy_(w))
        blocks.append(Block(h, weights))
    return nn.Sequential(*blocks).eval()


def copy_to(m: nn.Sequential, device) -> nn.Sequential:
    """A new stack with a copy of every weight of `m` on `device` (pageable on the host)."""
    return nn.Sequential(*(Block(b.width, [lin.weight.to(device, copy=True) for lin in b.linears]) for b in m)).eval()


def layer_bytes(m: nn.Sequential) -> int:
    return sum(lin.weight.numel() * lin.weight.element_size() for lin in m[0].linears)


def block(ws: list[torch.Tensor], h, width: int):
    """One layer computed by hand from its weights, as Block.forward, the relu in place."""
    if len(ws) == 1:
        return torch.relu_(h @ ws[0].t())
    qkv, o, fc1, fc2 = ws
    h1 = h + (h @ qkv.t())[:, :width] @ o.t()
    return h1 + torch.relu_(h1 @ fc1.t()) @ fc2.t()


class Inert:
    """A CUDA stream, event and stream context where there is no device: on the host every copy
    and op runs in program order, so waiting and recording have nothing to do."""

    def wait_event(self, event):
        pass

    def record(self, stream=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def streams(cuda: bool):
    """A side stream, the compute stream, the event type and the stream context: CUDA's, or
    inert stand-ins on the host."""
    if cuda:
        return torch.cuda.Stream(), torch.cuda.current_stream(), torch.cuda.Event, torch.cuda.stream
    return Inert(), Inert(), Inert, lambda s: s


def timed(step, passes: int, cuda: bool):
    """Milliseconds per pass (median of `passes` after one warm-up) and the last pass's output."""
    step()
    times, out = [], None
    for _ in range(passes):
        out = None  # the previous output is not held through the pass
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = step()
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), out


def stream(m: nn.Sequential, x, args, budget: int, dev: torch.device):
    """The strong loop: the last layers that fit stay resident, the others stream through a
    double buffer, and the copies never stop: while streamed layer i computes, the next streamed
    layer is copied, and after the last one the next pass's first, under the resident tail."""
    cuda = dev.type == "cuda"
    host = [[lin.weight for lin in b.linears] for b in m]  # page-locked on CUDA
    n, lb = len(host), layer_bytes(m)
    a = args.batch * args.width * x.element_size()
    # Activations live at a layer's peak (the relu in place, the pass's input copied in from the
    # host at its start): a linear layer's input and output, 2a; an OPT block's input and h1
    # beside fc2's input (4a) and output (a), 7a. a = batch x width x dtype bytes.
    act = (7 if args.opt30b else 2) * a
    keep = n if n * lb + act <= budget else max(0, (budget - act) // lb - 2)
    streamed = n - keep
    held = keep * lb + (2 * lb if streamed else 0)
    print(f"  stream: budget {budget} B (weights {n * lb} B / {args.budget_div}); keeps the last {keep} of {n} layers "
          f"resident; holds {keep} x {lb} + {2 if streamed else 0} buffers x {lb} = {held} B, activations "
          f"{7 if args.opt30b else 2} x {args.batch} x {args.width} x {x.element_size()} = {act} B; "
          f"{held} + {act} = {held + act} B {'<=' if held + act <= budget else '>'} {budget} B", flush=True)
    assert held + act <= budget, "the stream peer's working set is over the budget"
    resident = [[w.to(dev) for w in ws] for ws in host[streamed:]]
    buffers = [[torch.empty_like(w, device=dev) for w in host[0]] for _ in range(2 if streamed else 0)]
    side, compute, Event, on = streams(cuda)
    copied, computed = [Event() for _ in range(2)], [Event() for _ in range(2)]
    loads = [0]

    def load(i):  # streamed layer i into the other slot than the last load's; returns the slot
        slot = loads[0] % 2
        loads[0] += 1
        with on(side):
            side.wait_event(computed[slot])  # the buffer's last reader has finished
            for dst, src in zip(buffers[slot], host[i]):
                dst.copy_(src, non_blocking=True)
            copied[slot].record(side)
        return slot

    first = [load(0) if streamed else None]  # the slot the next pass's first streamed layer goes to

    def step():
        h = x.to(dev, non_blocking=True)
        slot = first[0]
        for i in range(streamed):
            following = load((i + 1) % streamed)  # after the last streamed layer: the next pass's first
            compute.wait_event(copied[slot])
            h = block(buffers[slot], h, args.width)
            computed[slot].record(compute)
            slot = following
        first[0] = slot
        for ws in resident:
            h = block(ws, h, args.width)
        return h

    ms, out = timed(step, args.passes, cuda)
    return ms, out, {"budget": budget, "resident_layers": keep, "held_bytes": held, "activation_bytes": act}


def naive_stream(m: nn.Sequential, x, args, dev: torch.device):
    """Double buffering by hand: page-locked weights, a side stream, two buffers per shape, every
    layer streamed and each pass starting with its first layer's load."""
    cuda = dev.type == "cuda"
    host = [[lin.weight for lin in b.linears] for b in m]
    buffers = [[torch.empty_like(w, device=dev) for w in host[0]] for _ in range(2)]
    side, compute, Event, on = streams(cuda)
    copied, computed = [Event() for _ in range(2)], [Event() for _ in range(2)]

    def load(i):
        slot = i % 2
        with on(side):
            side.wait_event(computed[slot])  # the buffer's last reader has finished
            for dst, src in zip(buffers[slot], host[i]):
                dst.copy_(src, non_blocking=True)
            copied[slot].record(side)

    def step():
        h = x
        load(0)
        for i in range(len(host)):
            if i + 1 < len(host):
                load(i + 1)
            compute.wait_event(copied[i % 2])
            h = block(buffers[i % 2], h, args.width)
            computed[i % 2].record(compute)
        return h

    ms, out = timed(step, args.passes, cuda)
    return ms, out, {}


def bandwidth() -> float:
    """Host-to-device bytes per second from page-locked memory: a 1 GiB copy, best of four."""
    src = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
    dst = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    best = float("inf")
    for _ in range(4):
        torch.cuda.synchronize()
        start = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return (1 << 30) / best


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=8192)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--dtype", default="f32", choices=["f32", "f16"])
    p.add_argument("--shape", default="linear", choices=["linear", "opt30b"])
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--budget-div", type=int, default=4)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--peers", default="resident,stream,naive-stream,accelerate,optimem,cpu")
    p.add_argument("--json")
    args = p.parse_args()
    args.opt30b = args.shape == "opt30b"
    dtype = torch.float16 if args.dtype == "f16" else torch.float32
    cuda = args.device == "cuda"
    dev = torch.device(args.device)
    peers = args.peers.split(",")
    unknown = set(peers) - {"resident", "stream", "naive-stream", "accelerate", "optimem", "cpu"}
    if unknown:
        p.error(f"unknown peers: {', '.join(sorted(unknown))}")

    m = model(args, dtype, args.device, pin=cuda)
    weight_bytes = sum(w.numel() * w.element_size() for w in m.parameters())
    budget = weight_bytes // args.budget_div
    gen = torch.Generator(args.device).manual_seed(1 << 20)
    x_host = torch.empty(args.batch, args.width, dtype=dtype, pin_memory=cuda)
    x_host.copy_(torch.randn(args.batch, args.width, generator=gen, device=dev, dtype=dtype))
    results = {"device": args.device, "width": args.width, "layers": args.layers, "batch": args.batch,
               "dtype": args.dtype, "shape": args.shape, "bandwidth": bandwidth() if cuda else None,
               "weight_bytes": weight_bytes, "budget": budget, "rows": {}, "details": {}}
    link = f"; host-to-device {results['bandwidth'] / 1e9:.1f} GB/s" if cuda else ""
    print(f"PyTorch {torch.__version__} on {args.device}: {args.layers} x {args.shape} {args.width} {args.dtype}, "
          f"batch {args.batch}, {weight_bytes / 2**30:.3f} GiB of weights, budget {budget / 2**30:.3f} GiB "
          f"(/ {args.budget_div}){link}")

    # The reference, computed once by the plain module with every weight on the device.
    with torch.no_grad():
        ref_model = copy_to(m, dev) if cuda else m
        ref = ref_model(x_host.to(dev)).float().cpu()
        del ref_model
    peak = ref.abs().max().item()
    # The bars: relative to max |reference|. The cpu row's kernels differ from CUDA's.
    rel = 2e-2 if dtype == torch.float16 else 1e-4
    rel_cpu = (5e-2 if dtype == torch.float16 else 1e-3) if cuda else rel
    print(f"  reference: resident on {args.device}, max |output| {peak:.4g}; tolerance {rel:g} x max |output|"
          f"{f', the cpu row {rel_cpu:g} x max |output|' if rel_cpu != rel else ''}")
    print(f"  {'row':<13} {'ms / pass':>10} {'max |diff|':>11} {'tolerance':>10} {'check':>7}"
          + (f" {'peak alloc':>12} {'peak reserved':>14}" if cuda else ""), flush=True)
    failures = []

    def row(name, run, tolerance_rel=rel):
        """Runs one row after freeing what the previous one left on the device, then checks its
        whole output against the reference."""
        gc.collect()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            with torch.no_grad():
                ms, out, extra = run()
                if cuda:
                    torch.cuda.synchronize()
                detail = {"peak_allocated": torch.cuda.max_memory_allocated() if cuda else None,
                          "peak_reserved": torch.cuda.max_memory_reserved() if cuda else None}
                out = out.float().cpu()
        except ImportError as e:
            print(f"  {name:<13} MISSING: {e}")
            results["details"][name] = {"ok": False, "missing": str(e)}
            failures.append(name)
            return
        except Exception as e:  # one row's failure (out of memory, over budget) must not hide the others
            traceback.print_exc()
            print(f"  {name:<13} FAILED: {type(e).__name__}: {e}")
            results["details"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            failures.append(name)
            return
        diff = (out - ref).abs().max().item() if out.shape == ref.shape else float("inf")
        tolerance = tolerance_rel * peak
        ok = diff <= tolerance  # false for a NaN too
        detail.update(max_diff=diff, tolerance=tolerance, ok=ok, **extra)
        results["rows"][name] = ms
        results["details"][name] = detail
        if not ok:
            failures.append(name)
        mem = (f" {detail['peak_allocated'] / 2**20:8.1f} MiB {detail['peak_reserved'] / 2**20:10.1f} MiB"
               if cuda else "")
        print(f"  {name:<13} {ms:10.2f} {diff:11.3g} {tolerance:10.3g} {'ok' if ok else 'FAILED':>7}{mem}", flush=True)

    def pytorch(module, passes):
        """Timing of a module's plain forward on the input on the device."""
        x = x_host.to(dev)
        return (*timed(lambda: module(x), passes, cuda), {})

    def offloaded(name):
        """accelerate's or optimem's module, on its own pageable copy of the weights."""
        def run():
            if name == "accelerate":
                from accelerate import cpu_offload

                off = cpu_offload(copy_to(m, "cpu"), execution_device=dev)
                return pytorch(off, args.passes)
            import optimem

            page = copy_to(m, "cpu")
            optimem.page(page, device=dev)
            return pytorch(page, max(2, args.passes // 2))
        return run

    # Every row frees its device memory before the next; resident, which holds every weight, last.
    if "stream" in peers:
        row("stream", lambda: stream(m, x_host, args, budget, dev))
    if "naive-stream" in peers:
        row("naive stream", lambda: naive_stream(m, x_host.to(dev), args, dev))
    for name in ("accelerate", "optimem"):
        if name in peers:
            if cuda:
                row(name, offloaded(name))
            else:
                print(f"  {name:<13} skipped: needs CUDA")
    if "cpu" in peers:
        row("cpu", lambda: (*timed(lambda: m(x_host), max(2, args.passes // 2), False), {}), rel_cpu)
    if "resident" in peers:
        row("resident", lambda: pytorch(copy_to(m, dev) if cuda else m, args.passes))

    results["ok"] = not failures
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f)
    if failures:
        print(f"FAILED or MISSING: {', '.join(failures)}")
        return 1
    print("every row's output agrees with the reference")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
