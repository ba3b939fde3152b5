"""The comparison with pytorch-optimem 0.0.5, printed as ratios in one run (`make bench-model`).

Reads what benches/minilm_compare.rs measured for libtensorref (page and chunk under Flow, budget
= weights / 4) and the same batches' token ids, then runs the same model in PyTorch: plain eager
CPU, optimem.page and optimem.chunk. optimem moves modules with blocking `Module.to(device)` and
its device defaults to CUDA; on a machine without CUDA it runs with device=cpu, where every `.to`
is a no-op. So its time here is PyTorch CPU plus its wrappers, and the bytes it would move on a
GPU are counted from its own code path: page calls `layer.to(device)` before and
`layer.to('cpu')` after every leaf module, each moving that module's parameters; chunk keeps the
first modules (up to max_capacity parameters) on the device, runs the rest on the CPU, and moves
activations where consecutive wrapped modules sit on different devices.

    python3 benches/minilm_compare.py target/minilm-compare.json
"""
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/model"))
import optimem  # noqa: E402
from optimem import main as om  # noqa: E402
from minilm_torch import MiniLM  # noqa: E402

MIB = 1 << 20


def param_bytes(module):
    return sum(p.numel() * p.element_size() for p in module.parameters())


class Counter:
    """Counts the bytes optimem's wrappers would copy between host and device."""

    def __init__(self):
        self.h2d = self.d2h = 0
        self.peak_params = 0
        self.resident = 0
        self.last_target = None

    def install(self):
        counter = self
        to_dev, off_dev, data_to = om.LayerToDevice.forward, om.LayerOffDevice.forward, om.DataToDevice.forward

        def to_device(self, *args):
            b = param_bytes(self.layer[0])
            counter.h2d += b
            counter.peak_params = max(counter.peak_params, b)
            return to_dev(self, *args)

        def off_device(self, *args):
            counter.d2h += param_bytes(self.layer[0])
            return off_dev(self, *args)

        def data_to_device(self, *args):
            # chunk: activations cross when this module's device differs from the previous one's
            target = "device" if self.device != om.CPU_DEVICE or getattr(self, "_stored", False) else "host"
            if counter.last_target is not None and target != counter.last_target:
                moved = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
                if target == "device":
                    counter.h2d += moved
                else:
                    counter.d2h += moved
            counter.last_target = target
            return data_to(self, *args)

        om.LayerToDevice.forward, om.LayerOffDevice.forward, om.DataToDevice.forward = to_device, off_device, data_to_device


def batches(spec):
    for b in spec["batches"]:
        ids = torch.tensor(b["ids"]).view(b["batch"], b["len"])
        mask = torch.tensor(b["mask"]).view(b["batch"], b["len"])
        yield ids, mask


def time_per_batch(model, spec, passes):
    with torch.no_grad():
        for ids, mask in batches(spec):  # warm-up
            model(ids, mask)
        best = float("inf")
        for _ in range(passes):
            start = time.perf_counter()
            for ids, mask in batches(spec):
                model(ids, mask)
            best = min(best, time.perf_counter() - start)
    return best * 1e3 / len(spec["batches"])


def main():
    spec = json.loads(Path(sys.argv[1]).read_text())
    torch.set_num_threads(1)
    passes, n_batches = spec["passes"], len(spec["batches"])
    ours = {r["name"]: r for r in spec["runs"]}
    budget = spec["budget"]

    eager_ms = time_per_batch(MiniLM.load(), spec, passes)

    counter = Counter()
    counter.install()
    page_model = MiniLM.load()
    optimem.page(page_model, device=torch.device("cpu"))
    counter.h2d = counter.d2h = 0
    page_ms = time_per_batch(page_model, spec, passes)
    calls = passes + 1
    page_h2d, page_d2h, page_peak = counter.h2d / (calls * n_batches), counter.d2h / (calls * n_batches), counter.peak_params

    chunk_model = MiniLM.load()
    capacity_params = spec["chunk_capacity"] // 4  # optimem counts parameters, not bytes (f32)
    # optimem.chunk moves the first modules to the device and leaves the rest; mark which, as
    # on a CPU-only machine both "devices" are the CPU.
    optimem.chunk(chunk_model, device=torch.device("cpu"), max_capacity=capacity_params)
    stored, running = 0, 0
    for m in chunk_model.modules():
        if isinstance(m, om.OptimemChunkLayer):
            inner = m[1]
            running += om._layer_size(inner)
            m[0]._stored = running <= capacity_params
            if m[0]._stored:
                stored += param_bytes(inner)
    counter.h2d = counter.d2h = 0
    counter.last_target = None
    chunk_ms = time_per_batch(chunk_model, spec, passes)
    chunk_h2d, chunk_d2h = counter.h2d / (calls * n_batches), counter.d2h / (calls * n_batches)

    mib = lambda b: f"{b / MIB:8.2f} MiB"
    print()
    print(f"pytorch-optimem {getattr(optimem, '__version__', '0.0.5')} on the same model and batches ({n_batches} batches of {spec['batch_size']}, one thread)")
    print("  optimem's device defaults to CUDA; this machine has none, so it ran with device=cpu (every .to() a no-op):")
    print("  its times are PyTorch CPU plus its wrappers; its bytes are those its code path moves on a GPU, counted per call.")
    print(f"{'run':<46} {'ms / batch':>10} {'host->device':>14} {'device->host':>14} {'peak device (weights)':>24}")
    print(f"{'PyTorch eager, CPU':<46} {eager_ms:>10.2f} {mib(0):>14} {mib(0):>14} {'-':>24}")
    print(f"{'optimem.page (device=cpu)':<46} {page_ms:>10.2f} {mib(page_h2d):>14} {mib(page_d2h):>14} {mib(page_peak) + ' (largest module)':>24}")
    print(f"{'optimem.chunk (device=cpu)':<46} {chunk_ms:>10.2f} {mib(chunk_h2d):>14} {mib(chunk_d2h):>14} {mib(stored) + ' stored':>24}")
    for name in ["no manager (CPU)", "Genoa page", "Flow page", "Flow chunk"]:
        r = ours[name]
        peak = "-" if name.startswith("no manager") else mib(r["peak"])
        print(f"{'libtensorref ' + name + ' (' + spec['device'] + ')':<46} {r['ms_per_batch']:>10.2f} {mib(r['loaded']):>14} {mib(r['written']):>14} {peak:>24}")

    page, chunk = ours["Flow page"], ours["Flow chunk"]
    moved = lambda r: r["loaded"] + r["written"]
    print()
    print(f"budget {mib(budget).strip()} (weights / 4); our peak device bytes: page {mib(page['peak']).strip()}, chunk {mib(chunk['peak']).strip()} (both within it)")
    print("ratios (ours / theirs):")
    print(f"  bytes moved per batch, page:   {moved(page) / (page_h2d + page_d2h):.3f}  ({mib(moved(page)).strip()} vs {mib(page_h2d + page_d2h).strip()})")
    print(f"  host->device per batch, page:  {page['loaded'] / page_h2d:.3f}")
    if chunk_h2d + chunk_d2h > 0:
        print(f"  bytes moved per batch, chunk:  {moved(chunk) / (chunk_h2d + chunk_d2h):.3f}")
    else:
        print(f"  bytes moved per batch, chunk:  optimem moves no weights in chunk mode (the unstored modules compute on the CPU); ours {mib(moved(chunk)).strip()}")
    print(f"  time per batch, page:          {page['ms_per_batch'] / page_ms:.3f}  (ours on the {spec['device']} device vs optimem on CPU with no copies)")
    print(f"  time per batch, chunk:         {chunk['ms_per_batch'] / chunk_ms:.3f}")
    print(f"  time per batch, ours without a manager vs PyTorch eager: {ours['no manager (CPU)']['ms_per_batch'] / eager_ms:.3f}")
    print(f"optimem.page's peak device bytes are at least its largest module, {mib(page_peak).strip()} "
          f"(the word embeddings), {page_peak / budget:.2f}x our budget: it cannot run under it.")
    if stored == 0:
        print(f"optimem.chunk stored nothing at max_capacity = {capacity_params} parameters (our chunk capacity, "
              f"{mib(spec['chunk_capacity']).strip()}): its first module, the word embeddings, is larger, and it only "
              "stores a prefix of the modules; so it ran everything on the host.")
    ok = moved(page) < page_h2d + page_d2h
    print(f"our page mode moves fewer bytes per batch than optimem's page: {ok}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
