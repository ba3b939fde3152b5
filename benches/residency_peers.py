"""The peers of `cargo bench --bench residency`, on the same stack in PyTorch, in one run:

- resident: every weight on the GPU (the speed a model that fits gets);
- stream: the best hand-written PyTorch streaming loop, about 40 lines: weights page-locked,
  two device buffers per weight shape, the next layer copied on a side stream while this one
  computes, ordered by two events per buffer (copy done, compute done);
- accelerate: accelerate's `cpu_offload(model, execution_device="cuda")`;
- optimem: pytorch-optimem's `page` (each module to the GPU and back around its forward);
- cpu: PyTorch on the host's cores.

    python3 benches/residency_peers.py --width 8192 --layers 16 --batch 2048 [--dtype f16]
        [--shape linear|opt30b] [--passes 5] [--peers resident,stream,accelerate,optimem,cpu]
        [--json PATH]

Each prints milliseconds per pass (median of the timed passes after a warm-up), and the
host-to-device bandwidth from page-locked memory measured in the same run. The model is the
benchmark's: square layers `relu(x @ W^T)`, or OPT-30B-like blocks of four weights.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn


class Block(nn.Module):
    """One layer of the benchmark: one square weight, or an OPT-style block of four."""

    def __init__(self, width: int, opt30b: bool, dtype: torch.dtype):
        super().__init__()
        h = width
        shapes = [(3 * h, h), (h, h), (4 * h, h), (h, 4 * h)] if opt30b else [(h, h)]
        self.linears = nn.ModuleList(nn.Linear(i, o, bias=False, dtype=dtype) for o, i in shapes)
        self.width = h

    def forward(self, x):
        if len(self.linears) == 1:
            return torch.relu(self.linears[0](x))
        qkv, o, fc1, fc2 = self.linears
        h1 = x + o(qkv(x)[:, : self.width])
        return h1 + fc2(torch.relu(fc1(h1)))


def model(args, dtype) -> nn.Sequential:
    torch.manual_seed(0)
    first = Block(args.width, args.opt30b, dtype)
    with torch.no_grad():
        for lin in first.linears:
            lin.weight.normal_(0, lin.weight.shape[1] ** -0.5)
    blocks = [first]
    for _ in range(1, args.layers):  # copies: drawing tens of GiB at random takes minutes
        b = Block(args.width, args.opt30b, dtype)
        b.load_state_dict(first.state_dict())
        blocks.append(b)
    return nn.Sequential(*blocks)


def timed(step, passes: int, cuda: bool) -> float:
    """Milliseconds per pass: median of `passes` after one warm-up."""
    step()
    times = []
    for _ in range(passes):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def stream(m: nn.Sequential, x, passes: int) -> float:
    """Double buffering by hand: page-locked weights, a side stream, two buffers per shape."""
    cuda = torch.device("cuda")
    host = [[lin.weight.detach().pin_memory() for lin in b.linears] for b in m]
    buffers = [[torch.empty_like(w, device=cuda) for w in host[0]] for _ in range(2)]
    copied = [torch.cuda.Event() for _ in range(2)]
    computed = [torch.cuda.Event() for _ in range(2)]
    side = torch.cuda.Stream()
    compute = torch.cuda.current_stream()

    def load(i):
        slot = i % 2
        with torch.cuda.stream(side):
            side.wait_event(computed[slot])  # the buffer's last reader has finished
            for dst, src in zip(buffers[slot], host[i]):
                dst.copy_(src, non_blocking=True)
            copied[slot].record(side)

    def run_block(i, h):
        b = m[i]
        ws = buffers[i % 2]
        if len(ws) == 1:
            return torch.relu(h @ ws[0].t())
        qkv, o, fc1, fc2 = ws
        h1 = h + (h @ qkv.t())[:, : b.width] @ o.t()
        return h1 + torch.relu(h1 @ fc1.t()) @ fc2.t()

    def step():
        h = x
        load(0)
        for i in range(len(m)):
            if i + 1 < len(m):
                load(i + 1)
            compute.wait_event(copied[i % 2])
            h = run_block(i, h)
            computed[i % 2].record(compute)
        return h.float().mean().item()

    with torch.no_grad():
        return timed(step, passes, True)


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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=8192)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--dtype", default="f32", choices=["f32", "f16"])
    p.add_argument("--shape", default="linear", choices=["linear", "opt30b"])
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--peers", default="resident,stream,accelerate,optimem,cpu")
    p.add_argument("--json")
    args = p.parse_args()
    args.opt30b = args.shape == "opt30b"
    dtype = torch.float16 if args.dtype == "f16" else torch.float32
    peers = args.peers.split(",")
    m = model(args, dtype)
    weight_bytes = sum(w.numel() * w.element_size() for w in m.parameters())
    x_host = torch.randn(args.batch, args.width, dtype=dtype)
    results = {"bandwidth": bandwidth(), "weight_bytes": weight_bytes, "rows": {}}
    print(f"PyTorch {torch.__version__}: {args.layers} x {args.shape} {args.width} {args.dtype}, batch {args.batch}, "
          f"{weight_bytes / 2**30:.2f} GiB of weights; host-to-device {results['bandwidth'] / 1e9:.1f} GB/s")

    def record(name, ms):
        results["rows"][name] = ms
        print(f"  {name:<12} {ms:10.2f} ms / pass", flush=True)

    with torch.no_grad():
        if "cpu" in peers:
            record("cpu", timed(lambda: m(x_host).float().mean().item(), max(2, args.passes // 2), False))
        if "stream" in peers:
            record("stream", stream(m, x_host.cuda(), args.passes))
        if "accelerate" in peers:
            try:
                from accelerate import cpu_offload

                off = model(args, dtype)
                cpu_offload(off, execution_device=torch.device("cuda"))
                x = x_host.cuda()
                record("accelerate", timed(lambda: off(x).float().mean().item(), args.passes, True))
                del off
            except ImportError as e:
                print(f"  accelerate   not installed ({e})")
        if "optimem" in peers:
            try:
                import optimem

                page = model(args, dtype)
                optimem.page(page, device=torch.device("cuda"))
                x = x_host.cuda()
                record("optimem", timed(lambda: page(x).float().mean().item(), max(2, args.passes // 2), True))
                del page
            except ImportError as e:
                print(f"  optimem      not installed ({e})")
        if "resident" in peers:
            m.cuda()
            x = x_host.cuda()
            record("resident", timed(lambda: m(x).float().mean().item(), args.passes, True))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
