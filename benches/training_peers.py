"""The encoder of benches/training.rs trained in PyTorch, the peers of training under a budget:
unmanaged, activations offloaded to page-locked host memory (torch.autograd.graph.save_on_cpu),
and full activation checkpointing (torch.utils.checkpoint per layer). Prints time per step and,
on CUDA, the peak of allocated and of reserved device memory.

With --tensorref, the same PyTorch code runs unchanged on the `tensorref` device instead, its
manager computing on --device (cuda, or the simulated device for cpu): under Resident (whose peak
of device bytes is the unmanaged peak the budgets are fractions of), under Flow at 1/2 of it, and
at 1/4 with recomputation ("cheaper"). Run it in a process of its own: once the device is
registered, libtorch takes it for the process's accelerator and a plain CUDA backward fails
(pytorch/pytorch#161129); the GPU bundle runs the peers, then these rows, and compares. Each of
these rows also prints the schedule model of its last step (`residency.schedule_model`: its
copies and kernels on a GPU with a copy engine each way, at an H100's rates on the simulated
device): a lower bound of that step on the GPU, against the same step with everything resident.

    python3 benches/training_peers.py [--device cpu|cuda] [--width 256] [--layers 4] [--heads 4]
        [--tokens 64] [--batch 16] [--steps 6] [--warmup 3] [--dropout 0.1] [--tensorref] [--json PATH] [--profile]

Time per step is over the steps after --warmup steps (timed apart: on the tensorref device the
order is learnt and the caches fill then, each new page-locked block costing milliseconds on
CUDA), the same for every row.

--profile prints where each row's last step spends its time (torch.profiler: the ops by their own
host time, and the device's kernels and copies), after the timed steps.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def build(a, device):
    torch.manual_seed(3)
    w = a.width

    def weight(i, o):
        return (torch.randn(i, o) / i ** 0.5).to(device).requires_grad_(True)

    def ones():
        return torch.ones(w, device=device, requires_grad=True)

    def zeros():
        return torch.zeros(w, device=device, requires_grad=True)

    layers = [[weight(w, w), weight(w, w), weight(w, w), weight(w, w), ones(), zeros(),
               weight(w, 4 * w), weight(4 * w, w), ones(), zeros()] for _ in range(a.layers)]
    return layers, weight(w, 8)


def layer(x, p, a):
    b, t, w, h = a.batch, a.tokens, a.width, a.heads

    def heads(y):
        return y.view(b, t, h, w // h).transpose(1, 2)

    q, k, v = heads(x @ p[0]), heads(x @ p[1]), heads(x @ p[2])
    scores = torch.softmax(q @ k.transpose(2, 3) / (w // h) ** 0.5, -1)
    mixed = (F.dropout(scores, a.dropout) @ v).transpose(1, 2).contiguous().view(b, t, w)
    x = F.layer_norm(x + mixed @ p[3], [w], p[4], p[5])
    ff = F.dropout(F.gelu(x @ p[6]) @ p[7], a.dropout)
    return F.layer_norm(x + ff, [w], p[8], p[9])


def step_once(layers, classifier, opt, x, labels, a, mode, cuda) -> float:
    """One training step; returns its loss."""
    h = x
    if mode == "save_on_cpu":
        with torch.autograd.graph.save_on_cpu(pin_memory=cuda):
            for p in layers:
                h = layer(h, p, a)
            loss = F.cross_entropy(h.mean(1) @ classifier, labels)
    else:
        for p in layers:
            h = checkpoint(layer, h, p, a, use_reentrant=False) if mode == "checkpoint" else layer(h, p, a)
        loss = F.cross_entropy(h.mean(1) @ classifier, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def profile_step(step, mode, cuda) -> None:
    """Prints where one more step spends its time: the ops by their own host time and, on CUDA,
    the kernels and copies by their device time."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        step()
        if cuda:
            torch.cuda.synchronize()
    print(f"-- {mode}: one step, by host time")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
    if cuda:
        print(f"-- {mode}: one step, by device time")
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=8))


def train(a, device, mode, sync=None, timing_starts=lambda: None):
    layers, classifier = build(a, device)
    params = [p for l in layers for p in l] + [classifier]
    opt = torch.optim.Adam(params, lr=1e-3)
    x = torch.randn(a.batch, a.tokens, a.width, device=device)
    labels = (torch.arange(a.batch) % 8).to(device)
    cuda = device == "cuda" or sync == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    losses, started, warmup_ms = [], time.perf_counter(), 0.0
    for step in range(a.steps):
        if step == a.warmup:
            if cuda:
                torch.cuda.synchronize()
            timing_starts()
            warmup_ms = (time.perf_counter() - started) * 1e3
            started = time.perf_counter()
        losses.append(step_once(layers, classifier, opt, x, labels, a, mode, cuda))
    if cuda:
        torch.cuda.synchronize()
    ms = (time.perf_counter() - started) * 1e3 / (a.steps - a.warmup)
    if a.profile:
        profile_step(lambda: step_once(layers, classifier, opt, x, labels, a, mode, cuda), mode, cuda)
    peak = torch.cuda.max_memory_allocated() if cuda else None
    reserved = torch.cuda.max_memory_reserved() if cuda else None
    return {"mode": mode, "ms_per_step": ms, "timed_steps": a.steps - a.warmup, "warmup_ms": warmup_ms, "peak_allocated": peak, "peak_reserved": reserved, "losses": losses}


def train_on_tensorref(a):
    """The rows of the `tensorref` device: Resident, Flow at 1/2 of Resident's peak, and Flow at
    1/4 with recomputation. Each row carries the manager's counters over the timed steps, page-locked
    allocations (`cudaHostAlloc` on CUDA where its caching allocator has no free block) among them."""
    import tensorref  # noqa: F401  (registers the device)
    from tensorref import residency

    manager_device = "cuda" if a.device == "cuda" else "simulated"
    rows, peak = [], None
    for mode, fraction, recompute in [("tensorref resident", None, "off"), ("tensorref flow 1/2", 2, "off"),
                                      ("tensorref flow 1/4+rc", 4, "cheaper")]:
        cfg = dict(policy="resident") if fraction is None else dict(policy="flow", budget_bytes=peak // fraction, recompute=recompute)
        timed = []
        with residency.session(device=manager_device, **cfg):
            residency.schedule_log_start()
            row = train(a, "tensorref", mode, sync=a.device, timing_starts=lambda: timed.append(residency.stats()))
            s, model = residency.stats(), residency.schedule_model(4)
        peak = peak or s.peak_device_bytes
        row.update(budget=cfg.get("budget_bytes"), manager_peak=s.peak_device_bytes,
                   model={f: getattr(model, f) for f, _ in model._fields_},
                   **{f: getattr(s, f) - getattr(timed[0], f) for f in ("load_bytes", "write_back_bytes", "recomputed_bytes", "page_locked_allocs", "page_locked_bytes",
                                                                   "loads", "prefetches")})
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    for name, default in [("width", 256), ("layers", 4), ("heads", 4), ("tokens", 64), ("batch", 16), ("steps", 6),
                          ("warmup", 3)]:
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--tensorref", action="store_true", help="the rows of the tensorref device instead of the peers")
    ap.add_argument("--json")
    ap.add_argument("--profile", action="store_true", help="print where each row's last step spends its time")
    a = ap.parse_args()
    if a.warmup < 1 or a.steps < a.warmup + 1:
        ap.error("--warmup: at least 1; --steps: more than --warmup")
    print(f"PyTorch {torch.__version__} on {a.device}: a {a.layers}-layer encoder (width {a.width}, {a.heads} heads, "
          f"{a.batch} sequences of {a.tokens} tokens), Adam, {a.steps} steps, the first {a.warmup} timed apart")
    if a.tensorref:
        rows = train_on_tensorref(a)
    else:
        rows = [train(a, a.device, mode) for mode in ["unmanaged", "save_on_cpu", "checkpoint"]]
    base = rows[0]["ms_per_step"]
    mib = lambda b: "-" if b is None else f"{b / 2**20:.1f} MiB"
    print(f"{'':<22} {'ms/step':>9} {'x first':>9} {'warm-up ms':>11} {'budget':>12} {'peak alloc':>12} {'peak reserved':>14}  losses")
    for r in rows:
        print(f"{r['mode']:<22} {r['ms_per_step']:>9.1f} {r['ms_per_step'] / base:>9.2f} {r['warmup_ms']:>11.0f} {mib(r.get('budget')):>12} "
              f"{mib(r['peak_allocated']):>12} {mib(r['peak_reserved']):>14}  " + " ".join(f"{l:.4f}" for l in r["losses"]))
    for r in rows:
        if "load_bytes" in r:
            per_step = lambda f: r[f] / (a.steps - a.warmup)
            print(f"{r['mode']:<22} per timed step: loads {mib(per_step('load_bytes'))}, write-backs "
                  f"{mib(per_step('write_back_bytes'))}, recomputed {mib(per_step('recomputed_bytes'))}, "
                  f"{per_step('page_locked_allocs'):.1f} page-locked allocations ({mib(per_step('page_locked_bytes'))}), "
                  f"{per_step('prefetches'):.0f} loads prefetched, {per_step('loads') - per_step('prefetches'):.0f} at their op")
    for r in rows:
        if "model" in r:
            m = r["model"]
            print(f"{r['mode']:<22} schedule model of the last step: {m['step_s'] * 1e3:.2f} ms, "
                  f"{m['step_s'] / m['unmanaged_s']:.2f}x the same step unmanaged ({m['unmanaged_s'] * 1e3:.2f} ms), "
                  f"{m['step_s'] / m['bound_s']:.2f}x its bound ({m['bound_s'] * 1e3:.2f} ms); "
                  f"loaded {mib(m['loaded_bytes'])}, written back {mib(m['written_bytes'])}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
