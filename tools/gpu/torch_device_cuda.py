"""The `tensorref` torch device on CUDA: correctness against plain PyTorch on the same GPU, then
a Llama-shaped fp16 decoder through a quarter of its weights beside its peers.

Checks (each against the same model run by plain PyTorch on CUDA, which runs the same kernels,
so outputs must be equal bit for bit; the training reference in a process of its own, since a
process with a PrivateUse1 backend cannot run a plain CUDA backward): an MLP's inference under
Flow at a quarter of its weights (and under autocast), its training with AdamW under Flow, a
small Llama's forward pass and greedy generation, a CNN's forward pass (cuDNN), waiting for the
device (its kernels done on CUDA's stream), attention with dropout (CUDA's efficient kernel) and
over a learned bias, with their backward, a checkpointed region with dropout (its gradients those
without checkpointing), and an LSTM and a GRU (close to cuDNN's, not equal: the device takes
CUDA's fused cells). Then the
benchmark: a decoder of --layers Llama layers of width --width in fp16, a prefill of --prompt
tokens and --decode greedy steps, as
- resident: plain PyTorch, every weight on the GPU;
- tensorref Flow: the unchanged model on device `tensorref` under Flow at a quarter of its weights;
- accelerate: `cpu_offload` (weights copied in as each module runs);
- diffusers: `apply_group_offloading` with `use_stream=True` (the next group copied in on a side
  stream while one runs), at block level (one decoder layer per group) and at leaf level, each
  followed by tensorref Flow again within that level's peak of allocated device memory;
- PCIe bound: the bytes Flow loaded over the measured host-to-device bandwidth.
Each row prints its peaks of allocated and reserved device memory, and its generated tokens must
equal the resident row's. Exits 1 on any failure: a differing row, a peer that did not run, Flow
faster than its own bound, or a missed bar of the issue (Flow within 1.10x of max(resident,
bound); each diffusers level 1.2x slower than Flow at its peak, accelerate 8x slower than Flow).

    python3 torch_device_cuda.py [--width 4096 --layers 8 --prompt 2048 --decode 16] [--skip-checks] [--skip-peers]
    python3 torch_device_cuda.py --simulated --width 256 --layers 8 --vocab 2000 --prompt 64 --decode 8   # no GPU:
        the decoder on the simulated device, its bytes moved and waits
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
    torch.cuda.reset_peak_memory_stats()
    with residency.session(policy="flow", device="cuda", budget_bytes=budget):
        on = copy.deepcopy(model).to("tensorref")
        with torch.no_grad():
            outs = [on(x.to("tensorref")).cpu() for _ in range(3)]
        s = residency.stats()
    check("MLP inference, Flow at 1/4 of the weights", all(torch.equal(o, ref) for o in outs),
          f"peak {s.peak_device_bytes} of {budget}, loads {s.loads}, prefetch hits {s.prefetch_hits}")
    check("  its peak within the budget", s.peak_device_bytes <= budget)
    # Kernels' workspaces (cuBLAS's) are allocated too, outside the budget: printed, not checked.
    check("  room for every output made before its kernel", s.output_bytes_unreserved == 0,
          f"unreserved {s.output_bytes_unreserved}; CUDA allocated at the peak {torch.cuda.max_memory_allocated()}")

    # Autocast on the device casts as CUDA's does: the same casts, the same kernels.
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
        ref = copy.deepcopy(model).cuda()(x.cuda()).cpu()
    with residency.session(policy="flow", device="cuda", budget_bytes=budget):
        on = copy.deepcopy(model).to("tensorref")
        with torch.no_grad(), torch.autocast("tensorref", dtype=torch.float16):
            out = on(x.to("tensorref")).cpu()
    check("MLP inference under autocast (fp16), Flow at 1/4", out.dtype == ref.dtype and torch.equal(out, ref),
          f"{out.dtype} vs {ref.dtype}")

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
        unreserved = residency.stats().output_bytes_unreserved
    check("small Llama forward pass, Flow at 1/2", torch.equal(logits, ref_logits),
          f"max |diff| {(logits - ref_logits).abs().max().item():.3g}")
    check("small Llama greedy generation (16 tokens)", torch.equal(tokens, ref_tokens))
    check("  room for every output made before its kernel", unreserved == 0, f"unreserved {unreserved}")

    # Convolution: libtorch asks the device for convolution_overrideable, which runs CUDA's own
    # (cuDNN's) convolution over the device copies.
    torch.backends.cudnn.deterministic = True
    torch.manual_seed(0)
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 64, 3, stride=2, groups=2), torch.nn.ReLU(),
                              torch.nn.ConvTranspose2d(64, 16, 2, stride=2), torch.nn.AdaptiveAvgPool2d(1)).eval()
    images = torch.randn(8, 3, 32, 32)  # its largest op (batch norm) holds 2 MiB at once
    with torch.no_grad():
        ref = copy.deepcopy(cnn).cuda()(images.cuda()).cpu()
    with residency.session(policy="flow", device="cuda", budget_bytes=4 << 20):
        on = copy.deepcopy(cnn).to("tensorref")
        with torch.no_grad():
            out = on(images.to("tensorref")).cpu()
        s = residency.stats()
    check("CNN forward pass (cuDNN), Flow at 4 MiB", torch.equal(out, ref),
          f"max |diff| {(out - ref).abs().max().item():.3g}; evictions {s.evictions}")
    check("  room for every output made before its kernel", s.output_bytes_unreserved == 0,
          f"unreserved {s.output_bytes_unreserved}")

    # Attention with dropout in f32 takes CUDA's efficient kernel, which returns its dropout seed and
    # offset as CPU tensors; its backward reads them there.
    q, k, v = (torch.randn(2, 4, 128, 64) for _ in range(3))
    torch.manual_seed(5)
    ref = torch.nn.functional.scaled_dot_product_attention(q.cuda(), k.cuda(), v.cuda(), dropout_p=0.3).cpu()
    with residency.session(policy="flow", device="cuda", budget_bytes=64 << 20):
        qd, kd, vd = (t.to("tensorref").requires_grad_() for t in (q, k, v))
        torch.manual_seed(5)
        out = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, dropout_p=0.3)
        got = out.detach().cpu()
        out.sum().backward()
        grads_finite = all(bool(t.grad.isfinite().all().item()) for t in (qd, kd, vd))
    check("attention with dropout (CUDA's efficient kernel)", torch.equal(got, ref),
          f"max |diff| {(got - ref).abs().max().item():.3g}")
    check("  its backward, reading the seed it returned", grads_finite)

    # Waiting for the device waits for CUDA's stream, where the device's kernels run.
    # Events on the device are CUDA's, on that stream: they time the kernels between them. The
    # device's memory functions read the manager's.
    with residency.session(policy="flow", device="cuda", budget_bytes=1 << 30):
        a = torch.randn(4096, 4096).to("tensorref")
        start, end = torch.Event(device="tensorref", enable_timing=True), torch.Event(device="tensorref", enable_timing=True)
        start.record()
        for _ in range(8):
            a = a @ a / 64
        end.record()
        torch.tensorref.synchronize()
        done = torch.cuda.current_stream().query()
        ms = start.elapsed_time(end)
        memory = torch.tensorref.memory_allocated() == residency.stats().device_bytes > 0
        reserved = torch.tensorref.memory_reserved() == torch.cuda.memory_reserved()
        del a
    check("torch.tensorref.synchronize() waits for the kernels queued", done)
    check("  two events time them on CUDA", 0.1 < ms < 10_000, f"{ms:.3f} ms for 8 products of 4096^2")
    check("  memory_allocated is the manager's, memory_reserved CUDA's", memory and reserved)

    # A learned attention bias (Swin's relative positions) requires grad: the device's choice of
    # kernel sees that, as CUDA's own does, and the kernel it takes gives the bias a gradient.
    bias = torch.randn(1, 4, 128, 128)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(t.cuda().requires_grad_() for t in (q, k, v, bias))).detach().cpu()
    with residency.session(policy="flow", device="cuda", budget_bytes=64 << 20):
        qd, kd, vd, bd = (t.to("tensorref").requires_grad_() for t in (q, k, v, bias))
        out = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, attn_mask=bd)
        got = out.detach().cpu()
        out.square().sum().backward()
        bias_grad = bd.grad is not None and bool(bd.grad.isfinite().all().item())
    check("attention over a learned bias", torch.equal(got, ref), f"max |diff| {(got - ref).abs().max().item():.3g}")
    check("  its backward, the bias's gradient among its outputs", bias_grad)

    # Activation checkpointing keeps the device's generator (CUDA's) for the region's
    # recomputation in backward: dropout there draws the mask it drew in forward, and the
    # gradients equal those without checkpointing.
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Dropout(0.5), torch.nn.Linear(256, 256))
    x = torch.randn(64, 256)

    def grads(checkpointed):
        torch.manual_seed(1)
        m, xd = copy.deepcopy(block).to("tensorref"), x.to("tensorref").requires_grad_()
        run = (lambda t: torch.utils.checkpoint.checkpoint(m, t, use_reentrant=False)) if checkpointed else m
        run(xd).square().sum().backward()
        return [t.grad.cpu() for t in (xd, *m.parameters())]

    with residency.session(policy="flow", device="cuda", budget_bytes=64 << 20):
        same = all(torch.equal(a, b) for a, b in zip(grads(True), grads(False)))
        cuda_state = torch.equal(torch.tensorref.get_rng_state(), torch.cuda.get_rng_state())
    check("checkpointed dropout: the gradients without checkpointing", same)
    check("  the device's generator is CUDA's", cuda_state)

    # LSTM and GRU on the device take CUDA's fused cells, plain CUDA tensors cuDNN's RNN: close, not
    # equal. The cells' outputs and their backward's find room by rule before their kernels.
    for layer in (torch.nn.LSTM, torch.nn.GRU):
        torch.manual_seed(0)
        rnn, seq = layer(256, 256, num_layers=2), torch.randn(32, 8, 256)
        with torch.no_grad():
            ref = copy.deepcopy(rnn).cuda()(seq.cuda())[0].cpu()
        with residency.session(policy="flow", device="cuda", budget_bytes=16 << 20):
            on = copy.deepcopy(rnn).to("tensorref")
            out = on(seq.to("tensorref"))[0]
            out.square().sum().backward()
            s = residency.stats()
            out = out.detach().cpu()
        check(f"{layer.__name__} (CUDA's fused cells) close to cuDNN's", torch.allclose(out, ref, rtol=1e-4, atol=1e-5),
              f"max |diff| {(out - ref).abs().max().item():.3g}")
        check("  its backward; room for every output made before its kernel", s.output_bytes_unreserved == 0,
              f"unreserved {s.output_bytes_unreserved}")

    # Forward-mode AD's zero tangents are ZeroTensors of the device, which CUDA's kernels read
    # as zeros (with no memory); an in-place write to a saved tensor is caught at backward.
    torch.manual_seed(0)
    x = torch.randn(64)

    def f(x):
        return (x.sin() * x).exp().sum()

    ref = torch.func.hessian(f)(x.cuda()).cpu()
    with residency.session(policy="flow", device="cuda", budget_bytes=1 << 20):
        got = torch.func.hessian(f)(x.to("tensorref")).cpu()
        y = x.to("tensorref").requires_grad_().sigmoid()
        y.mul_(2)
        try:
            y.sum().backward()
            caught = False
        except RuntimeError as e:
            caught = "modified by an inplace operation" in str(e)
    check("torch.func.hessian (forward over reverse) equal to CUDA's", torch.equal(got, ref),
          f"max |diff| {(got - ref).abs().max().item():.3g}")
    check("an in-place write to a saved tensor is caught at backward", caught)


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


def group_offloaded(model, level: str, run, ref):
    """diffusers' group offloading (`level`: "block" or "leaf") of a copy of `model` with streams,
    at its fastest settings (`record_stream`, page-locked copies made up front), run once to warm
    up and once timed. At block level each decoder layer is a group, the next one copied in on the
    side stream while one runs: block level groups the ModuleLists among the children of the
    modules it is given, and a causal LM's layers are `model.layers`, so it is given `model`
    (`block_modules`); without it the whole model is one group, copied in without a stream before
    every forward."""
    from diffusers.hooks import apply_group_offloading
    off = copy.deepcopy(model)
    per_group = dict(num_blocks_per_group=1, block_modules=["model"]) if level == "block" else {}
    apply_group_offloading(off, onload_device=torch.device("cuda"), offload_device=torch.device("cpu"),
                           offload_type=f"{level}_level", use_stream=True, record_stream=True, **per_group)
    if level == "block":
        groups = offloading_groups(off)
        check("diffusers block level: a group of its own for each decoder layer",
              all(f"model.layers.{i}" in groups for i in range(len(off.model.layers))), f"{len(groups)} groups")
    run(off)
    torch.cuda.reset_peak_memory_stats()
    s, out = timed(lambda: run(off))
    return (f"diffusers {level}, streams", s, peaks(), torch.equal(out, ref))


def offloading_groups(model) -> dict:
    """The modules that lead a group of diffusers' group offloading (each module with a hook of
    one), by name: where the groups begin."""
    leaders = {}
    for name, module in model.named_modules():
        registry = getattr(module, "_diffusers_hook", None)
        for hook in (registry.hooks.values() if registry is not None else ()):
            group = getattr(hook, "group", None)
            if group is not None and group.onload_leader is module:
                leaders[name] = group
    return leaders


def llama_decoder(args, dtype):
    """The benchmark's model (seeded random weights), its prompt and its attention mask."""
    import transformers
    torch.manual_seed(0)
    heads = max(1, args.width // 128)
    cfg = transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=args.width, intermediate_size=args.width * 11 // 4,
                                   num_hidden_layers=args.layers, num_attention_heads=heads,
                                   num_key_value_heads=heads, max_position_embeddings=4096, torch_dtype=dtype)
    with torch.device("cpu"):
        model = transformers.LlamaForCausalLM(cfg).to(dtype).eval()
    ids = torch.randint(3, args.vocab, (1, args.prompt))
    weights = weights_of(model)
    print(f"decoder: {args.layers} Llama layers, width {args.width}, {dtype}, {weights / 2**30:.3f} GiB of weights; "
          f"prefill {args.prompt} tokens, {args.decode} greedy steps; budget {weights / 4 / 2**30:.3f} GiB (1/4)")
    return model, ids, torch.ones_like(ids), weights // 4


def decoder_simulated(args) -> None:
    """The decoder on the simulated device (the CPU's kernels, f32): what the GPU run's times come
    from, in bytes and waits, and the schedule model of its last decode step. Flow at 1/4 after a
    first generate that teaches it the order; the tokens must equal the CPU's."""
    from tensorref import residency
    model, ids, mask, budget = llama_decoder(args, torch.float32)
    gen = dict(max_new_tokens=args.decode, do_sample=False, min_new_tokens=args.decode)
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, **gen)
        with residency.session(policy="flow", budget_bytes=budget):
            residency.schedule_log_start()
            on = copy.deepcopy(model).to("tensorref")
            on.generate(ids.to("tensorref"), attention_mask=mask.to("tensorref"), **gen)
            before = residency.stats()
            out = on.generate(ids.to("tensorref"), attention_mask=mask.to("tensorref"), **gen).cpu()
            s, step = residency.stats(), residency.schedule_model(4)
    check("Flow 1/4 on the simulated device: the tokens equal the CPU's", torch.equal(out, ref))
    check("the peak of device bytes stayed within the budget", s.peak_device_bytes <= budget,
          f"{s.peak_device_bytes} of {budget}")
    d = {f: getattr(s, f) - getattr(before, f) for f in (
        "ops", "load_bytes", "prefetch_bytes", "write_back_bytes", "prefetch_hits", "prefetch_misses",
        "load_wait_ns", "read_waits", "needless_write_backs")}
    print(f"  one generate after the first: {d['ops']} ops; loaded {d['load_bytes'] / 2**30:.3f} GiB "
          f"({d['prefetch_bytes'] / 2**30:.3f} GiB prefetched ahead), written back {d['write_back_bytes'] / 2**30:.3f} GiB; "
          f"prefetch hits {d['prefetch_hits']}, misses {d['prefetch_misses']}; "
          f"loads waited for {d['load_wait_ns'] / 1e6:.1f} ms, reads waited {d['read_waits']} times; "
          f"needless write-backs {d['needless_write_backs']}")
    print(f"  schedule model of the last decode step at an H100's rates: {step.step_s * 1e3:.3f} ms, "
          f"{step.step_s / max(step.unmanaged_s, step.bound_s):.2f}x max(the step all resident {step.unmanaged_s * 1e3:.3f} ms, "
          f"its bound {step.bound_s * 1e3:.3f} ms); loaded {step.loaded_bytes / 2**20:.1f} MiB")


def peaks() -> tuple[int, int]:
    """The caching allocator's peaks since the last reset: allocated and reserved bytes."""
    return torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()


def measured(row: tuple) -> tuple:
    """`row` (name, seconds, peaks, output equal), printed as soon as it is measured: a run cut
    short keeps the rows it had."""
    name, seconds, (allocated, reserved), ok = row
    print(f"  measured: {name}: {seconds:.3f} s, peak allocated {allocated / 2**30:.2f} GiB, reserved "
          f"{reserved / 2**30:.2f} GiB, output {'equal' if ok else 'DIFFERS'}", flush=True)
    return row


def attempt(what: str, fn):
    """`fn()`, or None where it raised: a failed check naming `what`. The device's cache is emptied
    after it either way, so that the next row starts as this one did."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        check(f"{what} ran ({type(e).__name__}: {str(e)[:120]})", False)
        return None
    finally:
        torch.cuda.empty_cache()


def accelerate_row(model, run, ref) -> tuple:
    """accelerate's `cpu_offload`: weights copied in as each module runs."""
    import accelerate
    off = copy.deepcopy(model)
    accelerate.cpu_offload(off, execution_device=torch.device("cuda"))
    torch.cuda.reset_peak_memory_stats()
    s, out = timed(lambda: run(off))
    return measured(("accelerate cpu_offload", s, peaks(), torch.equal(out, ref)))


def flow_row(model, budget: int, generate, ref, name: str) -> tuple[tuple, int]:
    """The unchanged model on the tensorref device under Flow within `budget`: a first generate
    teaches it the order, the second is timed. The row, and the bytes Flow loaded in it."""
    from tensorref import residency
    with residency.session(policy="flow", device="cuda", budget_bytes=budget):
        on = copy.deepcopy(model).to("tensorref")
        generate(on, "tensorref")
        torch.cuda.reset_peak_memory_stats()
        before = residency.stats()
        s, out = timed(lambda: generate(on, "tensorref"))
        after = residency.stats()
        row = measured((name, s, peaks(), torch.equal(out, ref)))
        loaded = after.load_bytes - before.load_bytes
        print(f"  {name}: loaded {loaded / 2**30:.2f} GiB, prefetch hits {after.prefetch_hits - before.prefetch_hits}, "
              f"misses {after.prefetch_misses - before.prefetch_misses}, peak {after.peak_device_bytes / 2**30:.2f} GiB "
              f"of {budget / 2**30:.2f}, ops {after.ops - before.ops}; the host waited "
              f"{after.freeing_waits - before.freeing_waits} times "
              f"({(after.freeing_wait_ns - before.freeing_wait_ns) / 1e6:.1f} ms) for the device to free memory; "
              f"outputs without room made first {(after.output_bytes_unreserved - before.output_bytes_unreserved) / 2**20:.1f} MiB")
        del on
    torch.cuda.empty_cache()
    return row, loaded


def decoder(args) -> None:
    model, ids, mask, budget = llama_decoder(args, torch.float16)
    gen = dict(max_new_tokens=args.decode, do_sample=False, min_new_tokens=args.decode)

    def generate(m, device):
        return m.generate(ids.to(device), attention_mask=mask.to(device), **gen).cpu()

    rows = []  # (name, seconds, (peak allocated, peak reserved) or None, tokens equal)
    loads = []  # (a Flow row, the bytes it loaded): each checked against its own PCIe bound
    pairs = []  # (a diffusers row, Flow's row within that row's peak of allocated bytes)
    accelerated = None

    def flow(within: int, name: str) -> tuple:
        row, loaded = flow_row(model, within, generate, ref, name)
        rows.append(row)
        loads.append((row, loaded))
        return row

    with torch.no_grad():
        plain = copy.deepcopy(model).cuda()
        plain.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=2, do_sample=False)
        torch.cuda.reset_peak_memory_stats()
        s, ref = timed(lambda: generate(plain, "cuda"))
        rows.append(measured(("resident (PyTorch)", s, peaks(), True)))
        del plain
        torch.cuda.empty_cache()
        main_flow = flow(budget, "tensorref Flow 1/4")
        if not args.skip_peers:
            on_cuda = lambda m: generate(m, "cuda")
            accelerated = attempt("accelerate cpu_offload", lambda: accelerate_row(model, on_cuda, ref))
            rows += [accelerated] if accelerated else []
            # The bar compares diffusers with Flow at the same peak device memory: Flow again, its
            # budget each diffusers level's peak of allocated bytes.
            for level in ("block", "leaf"):
                offloaded = attempt(f"diffusers {level} level", lambda: measured(group_offloaded(model, level, on_cuda, ref)))
                if offloaded:
                    rows.append(offloaded)
                    same = attempt(f"Flow within diffusers {level} level's peak",
                                   lambda: flow(offloaded[2][0], f"Flow at diffusers {level}'s peak"))
                    pairs += [(offloaded, same)] if same else []
    bw = h2d_bandwidth()
    bound = loads[0][1] / bw  # the first Flow row's: the one at a quarter of the weights
    rows.append(("PCIe bound for Flow's loads", bound, None, True))
    print(f"  host-to-device bandwidth {bw / 1e9:.1f} GB/s")
    print(f"  {'row':<34} {'s/generate':>11} {'x resident':>11} {'peak alloc':>11} {'peak reserved':>14}  output")
    gib = lambda b: f"{b / 2**30:.2f} GiB"
    for name, s, peak, ok in rows:
        alloc, reserved = (gib(peak[0]), gib(peak[1])) if peak else ("-", "-")
        print(f"  {name:<34} {s:11.3f} {s / rows[0][1]:11.2f} {alloc:>11} {reserved:>14}  {'equal' if ok else 'DIFFERS'}")
        if not ok:
            failed.append(name)
    for (name, s, _, _), loaded in loads:
        check(f"{name}: not below its own PCIe bound", s >= loaded / bw, f"{s:.3f} s against {loaded / bw:.3f} s")
    flow_s, resident_s = main_flow[1], rows[0][1]
    # The bars (set for an H100; judged on whatever card runs this, named in device.txt).
    check("bar: Flow <= 1.10 x max(resident, its PCIe bound)", flow_s <= 1.10 * max(resident_s, bound),
          f"{flow_s / max(resident_s, bound):.2f}x")
    if pairs:
        ratios = {off[0]: off[1] / same[1] for off, same in pairs}
        detail = ", ".join(f"{name}: {r:.2f}x" for name, r in ratios.items())
        check("bar: diffusers group offloading >= 1.2 x Flow at its peak, every level", min(ratios.values()) >= 1.2, detail)
    if accelerated:
        check("bar: accelerate cpu_offload >= 8 x Flow", accelerated[1] >= 8 * flow_s, f"{accelerated[1] / flow_s:.2f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--prompt", type=int, default=2048)
    p.add_argument("--decode", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--skip-checks", action="store_true")
    p.add_argument("--skip-peers", action="store_true", help="the decoder's resident, Flow and bound rows alone (a short GPU lease)")
    p.add_argument("--simulated", action="store_true", help="the decoder on the simulated device: bytes and waits, no times")
    p.add_argument("--reference-training", action="store_true", help="print plain PyTorch's MLP losses on CUDA (JSON)")
    args = p.parse_args()
    if args.reference_training:
        print(json.dumps(train_mlp("cuda")))
        return
    import tensorref  # noqa: F401  (registers the device)
    if args.simulated:
        decoder_simulated(args)
        sys.exit(f"FAILED: {failed}" if failed else 0)
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
