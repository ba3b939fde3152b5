"""The GPU bundle's summary: which steps passed, then per benchmark shape one table of
milliseconds per pass, ours (bench-SHAPE.json, from benches/residency.rs) and the PyTorch peers'
(peers-SHAPE.json, from benches/residency_peers.py) side by side, each row with its output check,
its bound and its peak device memory where the JSON has them, then the bars of the Flow issue,
each judged `ok` or `MISSED`:

- Flow / max(resident, PCIe bound for Flow's loads) <= 1.10, every shape;
- Flow / PyTorch stream (the strong hand-written loop at the same budget) <= 1.05, every shape;
- PyTorch accelerate / Flow >= 8, on the linear stack at batch <= 2048 (at 8192 both are
  compute-bound: the ratio is printed, not judged);
- PCIe bound for all weights / Flow >= 0.90, the OPT-30B-like shape (printed elsewhere);
- our Resident / PyTorch resident <= 1.05, every shape;
- no row faster than its own bound (`bound_ms`: the link's time for the bytes it loaded): such a
  row is SUSPECT, a measurement or accounting error.

It exits 1 when a step failed, a bar was missed, a row is SUSPECT, a row's output check failed
(`ok` false in either JSON) or a benchmark says it failed (a top-level `ok` false), so that
run.sh fails with it.

    python3 summary.py RESULTS_DIR
"""
import json
import sys
from pathlib import Path


def load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def mib(b):
    return "-" if b is None else f"{b / 2**20:.0f} MiB"


def num(x, width, spec):
    return f"{'-':>{width}}" if x is None else f"{x:{width}{spec}}"


class Verdicts:
    """Counts what fails, and prints each judged line with its verdict."""

    def __init__(self):
        self.failed = []

    def fail(self, what):
        self.failed.append(what)

    def bar(self, label, value, op, limit, judged=True):
        met = value <= limit if op == "<=" else value >= limit
        verdict = ("ok" if met else "MISSED") if judged else "(not judged at this shape)"
        if judged and not met:
            self.fail(label)
        print(f"  {label:<44} {value:8.3f}   (bar {op} {limit:.2f})  {verdict}")


def rows_of(ours, peers):
    """Every row as {name: fields}: the peers' (ms in `rows`, the rest in `details`) and ours."""
    rows = {}
    details = (peers or {}).get("details") or {}
    for name, ms in ((peers or {}).get("rows") or {}).items():
        d = details.get(name) or {}
        rows[f"PyTorch {name}"] = {"ms": ms, "max_diff": d.get("max_diff"), "tolerance": d.get("tolerance"),
                                   "ok": d.get("ok"), "peak_device": d.get("peak_allocated"),
                                   "peak_reserved": d.get("peak_reserved"), "resident_layers": d.get("resident_layers")}
    for name, d in details.items():  # rows that failed or could not run have no time
        if name not in (peers or {}).get("rows", {}):
            rows[f"PyTorch {name}"] = {"ms": None, "ok": False, "error": d.get("missing") or d.get("error")}
    for r in (ours or {}).get("rows") or []:
        rows[f"libtensorref {r['name']}"] = r
    return rows


def shape_table(shape, ours, peers, v: Verdicts):
    head = ours or peers or {}
    bw = (ours or {}).get("bandwidth") or (peers or {}).get("bandwidth")
    print(f"\n{shape}: {head.get('layers', '?')} x {head.get('shape', '?')} {head.get('width', '?')} "
          f"{head.get('dtype', '?')}, batch {head.get('batch', '?')}, weights {mib(head.get('weight_bytes'))}, "
          f"budget {mib(head.get('budget'))}, host-to-device {num(bw and bw / 1e9, 1, '.1f')} GB/s")
    for name, data in (("bench", ours), ("peers", peers)):
        if data is None:
            print(f"  {name}-{shape}.json: missing or unreadable  FAILED")
            v.fail(f"{name}-{shape}.json")
        elif data.get("ok") is False:
            print(f"  {name}-{shape}.json says its run failed  FAILED")
            v.fail(f"{name}-{shape}.json")
    rows = rows_of(ours, peers)
    print(f"  {'row':<42} {'ms':>9} {'max|diff|':>10} {'tolerance':>10} {'check':>8} {'bound ms':>9} "
          f"{'peak device':>12} {'peak reserved':>14}")
    for name, r in rows.items():
        ms, bound = r.get("ms"), r.get("bound_ms")
        if r.get("ok") is False:
            check = "FAILED"
            v.fail(name)
        elif r.get("suspect") or (ms is not None and bound is not None and ms < bound):
            check = "SUSPECT"  # faster than the link allows for its own bytes, or for the fewest
            v.fail(f"{name} below its bound")
        else:
            check = "ok" if r.get("ok") else "-"
        label = name + (f" ({r['resident_layers']} resident)" if r.get("resident_layers") is not None else "")
        print(f"  {label:<42} {num(ms, 9, '.1f')} {num(r.get('max_diff'), 10, '.2g')} {num(r.get('tolerance'), 10, '.2g')} "
              f"{check:>8} {num(bound, 9, '.1f')} {mib(r.get('peak_device')):>12} {mib(r.get('peak_reserved')):>14}"
              + (f"  {r['error']}" if r.get("error") else ""))
    flow = rows.get("libtensorref Flow")
    if flow and flow.get("min_bound_ms") is not None:
        print(f"  {'Flow: PCIe time for the fewest bytes a pass must load':<54} {flow['min_bound_ms']:8.1f} ms")
    ms = {name: r["ms"] for name, r in rows.items() if r.get("ms")}
    if bw and flow:
        loads = ms["PCIe bound (Flow's loads)"] = flow.get("bound_ms") or flow["loaded"] / bw * 1e3
        every = ms["PCIe bound (all weights)"] = head["weight_bytes"] / bw * 1e3
        print(f"  {'PCIe bound: Flow loads / all weights':<54} {loads:8.1f} / {every:.1f} ms")
    our_resident = next((r["ms"] for n, r in rows.items() if n.startswith("libtensorref Resident") and r.get("ms")), None)
    if flow and flow.get("ms"):
        f = flow["ms"]
        resident = ms.get("PyTorch resident") or our_resident
        target = max((x for x in (resident, ms.get("PCIe bound (Flow's loads)")) if x), default=None)
        if target:
            v.bar("Flow / max(resident, PCIe bound)", f / target, "<=", 1.10)
        if ms.get("PyTorch stream"):
            v.bar("Flow / PyTorch stream (same budget)", f / ms["PyTorch stream"], "<=", 1.05)
        if ms.get("PyTorch naive stream"):
            print(f"  {'Flow / PyTorch naive stream':<44} {f / ms['PyTorch naive stream']:8.3f}")
        if ms.get("PyTorch accelerate"):
            judged = head.get("shape") == "linear" and (head.get("batch") or 0) <= 2048
            v.bar("PyTorch accelerate / Flow", ms["PyTorch accelerate"] / f, ">=", 8, judged)
        if ms.get("PCIe bound (all weights)"):
            v.bar("PCIe bound (all weights) / Flow (30B bar)", ms["PCIe bound (all weights)"] / f, ">=", 0.90,
                  head.get("shape") == "opt30b")
        if flow.get("peak_reserved") and head.get("reserved_bar"):
            v.bar("Flow peak reserved / (budget + allowance)", flow["peak_reserved"] / head["reserved_bar"], "<=", 1.0)
        if flow.get("model_efficiency") is not None:
            print(f"  {'schedule model: bound / makespan':<44} {flow['model_efficiency']:8.3f}")
    if our_resident and ms.get("PyTorch resident"):
        v.bar("Resident / PyTorch resident", our_resident / ms["PyTorch resident"], "<=", 1.05)


def training_table(peers, device, v: Verdicts):
    """The encoder trained as plain PyTorch on the tensorref device against the PyTorch peers, time
    per step after the warm-up (whose steps' time is printed beside), with the issue's bars: at
    1/2 of the peak at most 1.15x the unmanaged step; at 1/4 faster than save_on_cpu and than
    checkpointing. Every row's losses must equal the unmanaged run's."""
    rows = {r["mode"]: r for r in peers + device}
    print("\ntraining on the tensorref device (PyTorch code unchanged) beside the PyTorch peers")
    print(f"  {'':<22} {'ms/step':>9} {'warm-up ms':>11} {'budget':>10} {'peak alloc':>11} {'peak reserved':>14}  losses equal")
    base = rows["unmanaged"]
    for r in peers + device:
        same = r["losses"] == base["losses"]
        if not same:
            v.fail(f"training losses of {r['mode']}")
        print(f"  {r['mode']:<22} {r['ms_per_step']:>9.1f} {r['warmup_ms']:>11.0f} {mib(r.get('budget')):>10} {mib(r['peak_allocated']):>11} "
              f"{mib(r['peak_reserved']):>14}  {'yes' if same else 'NO'}")
    for r in device:
        if "page_locked_allocs" in r:  # cudaHostAlloc calls the caching host allocator did not serve
            steps = r["timed_steps"]
            print(f"  {r['mode']:<22} new page-locked blocks per timed step: {r['page_locked_allocs'] / steps:.1f} "
                  f"({mib(r['page_locked_bytes'] / steps)})")
        if "prefetches" in r:  # loads Flow started ahead, and those an op waited for
            steps = r["timed_steps"]
            print(f"  {r['mode']:<22} loads per timed step: {r['prefetches'] / steps:.0f} prefetched, "
                  f"{(r['loads'] - r['prefetches']) / steps:.0f} at their op")
        if "model" in r:  # the last step replayed at the manager's rates: a lower bound of its time
            m = r["model"]
            print(f"  {r['mode']:<22} schedule model of the last step: {m['step_s'] * 1e3:.1f} ms, "
                  f"{m['step_s'] / m['unmanaged_s']:.2f}x the same step unmanaged")
    half, quarter = rows.get("tensorref flow 1/2"), rows.get("tensorref flow 1/4+rc")
    if half:
        v.bar("flow 1/2 / unmanaged", half["ms_per_step"] / base["ms_per_step"], "<=", 1.15)
    if quarter:
        for peer in ("save_on_cpu", "checkpoint"):
            v.bar(f"{peer} / flow 1/4 with recomputation", rows[peer]["ms_per_step"] / quarter["ms_per_step"], ">=", 1.0)


def main(results: Path) -> int:
    v = Verdicts()
    print(f"{'step':<34} {'result':>9} {'seconds':>8}")
    status = results / "status.txt"
    lines = status.read_text().splitlines() if status.exists() else []
    if not lines:
        print("no steps recorded (status.txt missing or empty)  FAILED")
        v.fail("status.txt")
    for line in lines:
        name, rc, secs = line.split("|")
        if rc != "0":
            v.fail(name)
        result = {"0": "ok", "skipped": "SKIPPED"}.get(rc, f"FAILED {rc}")
        print(f"{name:<34} {result:>9} {secs:>8}")
    # The shapes: every bench JSON, and every peers JSON of the residency peers (the training
    # peers' JSON, a list, is not one).
    shapes = {p.stem[len("bench-"):] for p in results.glob("bench-*.json")}
    shapes |= {p.stem[len("peers-"):] for p in results.glob("peers-*.json")
               if isinstance(load(p), dict) and "weight_bytes" in load(p)}
    for shape in sorted(shapes):
        shape_table(shape, load(results / f"bench-{shape}.json"), load(results / f"peers-{shape}.json"), v)
    peers, device = load(results / "peers-training.json"), load(results / "device-training.json")
    if peers and device:
        training_table(peers, device, v)
    print()
    if v.failed:
        print(f"summary: FAILED ({len(v.failed)}): {', '.join(v.failed)}")
        return 1
    print("summary: every step passed, every check and every judged bar met")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
