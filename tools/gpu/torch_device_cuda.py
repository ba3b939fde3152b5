"""The `tensorref` torch device on CUDA: correctness against plain PyTorch on the same GPU, then
a Llama-shaped fp16 decoder through a quarter of its weights beside its peers.

Checks (each against the same model run by plain PyTorch on CUDA, which runs the same kernels,
so outputs must be equal bit for bit; the training reference in a process of its own, since a
process with a PrivateUse1 backend cannot run a plain CUDA backward): an MLP's inference under Flow at a quarter of its weights,
its training with AdamW under Flow, a small Llama's forward pass and greedy generation. Then the
benchmark: a decoder of --layers Llama layers of width --width in fp16, a prefill of --prompt
tokens and --decode greedy steps, as
- resident: plain PyTorch, every weight on the GPU;
- tensorref Flow: the unchanged model on device `tensorref` under Flow at a quarter of its weights;
- accelerate: `cpu_offload` (weights copied in as each module runs);
- PCIe bound: the bytes Flow loaded over the measured host-to-device bandwidth.
Each row's generated tokens must equal the resident row's. Exits 1 on any failure.

    python3 torch_device_cuda.py [--width 4096 --layers 8 --prompt 2048 --decode 16]
"""
from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time

import torch

failed: list[str] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"  {name:<58} {'ok' if ok else 'FAILED'} {detail}")
    if not ok:
        failed.append(name)


def weights_of(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def mlp():
    torch.manual_seed(0)
    layers = [m for _ in range(8) for m in (torch.nn.Linear(1024, 1024), torch.nn.GELU())]
    return torch.nn.Sequential(*layers, torch.nn.LayerNorm(1024))


def train_mlp(device: str) -> list[float]:
    m = mlp().to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    torch.manual_seed(1)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = m(torch.randn(64, 1024).to(device)).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def checks() -> None:
    from tensorref import residency
    print("checks against plain PyTorch on cuda:")
    model, x = mlp(), torch.randn(64, 1024)
    with torch.no_grad():
        ref = copy.deepcopy(model).cuda()(x.cuda()).cpu()
    budget = weights_of(model) // 4
    with residency.session(policy="flow", device="cuda", budget_bytes=budget):
        on = copy.deepcopy(model).to("tensorref")
        with torch.no_grad():
            outs = [on(x.to("tensorref")).cpu() for _ in range(3)]
        s = residency.stats()
    check("MLP inference, Flow at 1/4 of the weights", all(torch.equal(o, ref) for o in outs),
          f"peak {s.peak_device_bytes} of {budget}, loads {s.loads}, prefetch hits {s.prefetch_hits}")
    check("  its peak within the budget", s.peak_device_bytes <= budget)

    # A process with a PrivateUse1 backend cannot run a plain CUDA backward (PyTorch's engine asks
    # one accelerator for streams: pytorch/pytorch#161129), so the reference runs in another.
    ref = subprocess.run([sys.executable, __file__, "--reference-training"], capture_output=True, text=True)
    ref_losses = json.loads(ref.stdout) if ref.returncode == 0 else [ref.stderr[-300:]]
    with residency.session(policy="flow", device="cuda", budget_bytes=3 * weights_of(model)):
        try:
            got = train_mlp("tensorref")
        except Exception as e:  # noqa: BLE001
            got = [f"{type(e).__name__}: {e}"]
        s = residency.stats()
    check("MLP training with AdamW, Flow at 3x the weights", got == ref_losses,
          f"{got} vs {ref_losses}; evictions {s.evictions}, peak {s.peak_device_bytes} of {3 * weights_of(model)}")

    import transformers
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=4, max_position_embeddings=128)).eval()
    ids = torch.randint(3, 256, (2, 16))
    with torch.no_grad():
        plain = copy.deepcopy(llama).cuda()
        ref_logits = plain(ids.cuda()).logits.cpu()
        ref_tokens = plain.generate(ids.cuda(), attention_mask=torch.ones_like(ids).cuda(), max_new_tokens=16,
                                    do_sample=False).cpu()
    with residency.session(policy="flow", device="cuda", budget_bytes=weights_of(llama) // 2):
        on = copy.deepcopy(llama).to("tensorref")
        with torch.no_grad():
            logits = on(ids.to("tensorref")).logits.cpu()
            tokens = on.generate(ids.to("tensorref"), attention_mask=torch.ones_like(ids).to("tensorref"),
                                 max_new_tokens=16, do_sample=False).cpu()
    check("small Llama forward pass, Flow at 1/2", torch.equal(logits, ref_logits),
          f"max |diff| {(logits - ref_logits).abs().max().item():.3g}")
    check("small Llama greedy generation (16 tokens)", torch.equal(tokens, ref_tokens))


def timed(fn) -> tuple[float, object]:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def h2d_bandwidth() -> float:
    """Host-to-device bytes per second from page-locked memory: the median of 5 timed 1 GiB copies."""
    host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dev.copy_(host, non_blocking=True)
    times = []
    for _ in range(5):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dev.copy_(host, non_blocking=True)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return host.numel() / sorted(times)[2]


def decoder(args) -> None:
    import transformers
    from tensorref import residency
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=args.width, intermediate_size=args.width * 11 // 4,
                                   num_hidden_layers=args.layers, num_attention_heads=args.width // 128,
                                   num_key_value_heads=args.width // 128, max_position_embeddings=4096,
                                   torch_dtype=torch.float16)
    with torch.device("cpu"):
        model = transformers.LlamaForCausalLM(cfg).to(torch.float16).eval()
    ids = torch.randint(3, 32000, (1, args.prompt))
    mask = torch.ones_like(ids)
    weights = weights_of(model)
    budget = weights // 4
    print(f"decoder: {args.layers} Llama layers, width {args.width}, fp16, {weights / 2**30:.2f} GiB of weights; "
          f"prefill {args.prompt} tokens, {args.decode} greedy steps; budget {budget / 2**30:.2f} GiB (1/4)")
    gen = dict(max_new_tokens=args.decode, do_sample=False, min_new_tokens=args.decode)
    rows = []
    with torch.no_grad():
        plain = copy.deepcopy(model).cuda()
        plain.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=2, do_sample=False)
        torch.cuda.reset_peak_memory_stats()
        s, ref = timed(lambda: plain.generate(ids.cuda(), attention_mask=mask.cuda(), **gen).cpu())
        rows.append(("resident (PyTorch)", s, torch.cuda.max_memory_allocated(), True))
        del plain
        torch.cuda.empty_cache()

        with residency.session(policy="flow", device="cuda", budget_bytes=budget):
            on = copy.deepcopy(model).to("tensorref")
            on.generate(ids.to("tensorref"), attention_mask=mask.to("tensorref"), **gen)  # learns the order
            torch.cuda.reset_peak_memory_stats()
            before = residency.stats()
            s, out = timed(lambda: on.generate(ids.to("tensorref"), attention_mask=mask.to("tensorref"), **gen).cpu())
            after = residency.stats()
            loaded = after.load_bytes - before.load_bytes
            rows.append(("tensorref Flow 1/4", s, torch.cuda.max_memory_allocated(), torch.equal(out, ref)))
            print(f"  Flow: loaded {loaded / 2**30:.2f} GiB, prefetch hits {after.prefetch_hits - before.prefetch_hits}, "
                  f"misses {after.prefetch_misses - before.prefetch_misses}, peak {after.peak_device_bytes / 2**30:.2f} GiB "
                  f"of {budget / 2**30:.2f}, ops {after.ops - before.ops}")
            del on
        torch.cuda.empty_cache()

        try:
            import accelerate
            off = copy.deepcopy(model)
            accelerate.cpu_offload(off, execution_device=torch.device("cuda"))
            torch.cuda.reset_peak_memory_stats()
            s, out = timed(lambda: off.generate(ids.cuda(), attention_mask=mask.cuda(), **gen).cpu())
            rows.append(("accelerate cpu_offload", s, torch.cuda.max_memory_allocated(), torch.equal(out, ref)))
        except Exception as e:  # noqa: BLE001
            print(f"  accelerate: {type(e).__name__}: {e}")
    bw = h2d_bandwidth()
    rows.append(("PCIe bound for Flow's loads", loaded / bw, None, True))
    print(f"  host-to-device bandwidth {bw / 1e9:.1f} GB/s")
    print(f"  {'row':<28} {'s/generate':>11} {'x resident':>11} {'peak alloc':>12}  output")
    for name, s, peak, ok in rows:
        print(f"  {name:<28} {s:11.3f} {s / rows[0][1]:11.2f} {'-' if peak is None else f'{peak / 2**30:.2f} GiB':>12}  "
              f"{'equal' if ok else 'DIFFERS'}")
        if not ok:
            failed.append(name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--prompt", type=int, default=2048)
    p.add_argument("--decode", type=int, default=16)
    p.add_argument("--skip-checks", action="store_true")
    p.add_argument("--reference-training", action="store_true", help="print plain PyTorch's MLP losses on CUDA (JSON)")
    args = p.parse_args()
    if args.reference_training:
        print(json.dumps(train_mlp("cuda")))
        return
    import tensorref  # noqa: F401  (registers the device)
    if not args.skip_checks:
        try:
            checks()
        except Exception as e:  # noqa: BLE001
            check(f"checks raised {type(e).__name__}: {str(e)[:200]}", False)
    try:
        decoder(args)
    except Exception as e:  # noqa: BLE001
        check(f"decoder raised {type(e).__name__}: {str(e)[:300]}", False)
    if failed:
        sys.exit(f"FAILED: {failed}")


if __name__ == "__main__":
    main()
