"""The GPU bundle's summary: which steps passed, then per benchmark shape one table of
milliseconds per pass, ours and the peers' side by side, with the bars of the Flow issue.

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


def main(results: Path) -> int:
    failed = 0
    print(f"{'step':<34} {'result':>8} {'seconds':>8}")
    for line in (results / "status.txt").read_text().splitlines():
        name, rc, secs = line.split("|")
        failed += rc != "0"
        print(f"{name:<34} {'ok' if rc == '0' else 'FAILED ' + rc:>8} {secs:>8}")
    for ours_path in sorted(results.glob("bench-*.json")):
        shape = ours_path.stem[len("bench-"):]
        ours, peers = load(ours_path), load(results / f"peers-{shape}.json")
        if not ours:
            continue
        bw = ours.get("bandwidth") or (peers or {}).get("bandwidth")
        print(f"\n{shape}: {ours['layers']} x {ours['shape']} {ours['width']} {ours['dtype']}, batch {ours['batch']}, "
              f"weights {ours['weight_bytes'] / 2**30:.2f} GiB, budget {ours['budget'] / 2**30:.2f} GiB, "
              f"host-to-device {bw / 1e9:.1f} GB/s")
        rows = {f"PyTorch {k}": v for k, v in ((peers or {}).get("rows") or {}).items()}
        flow = None
        for r in ours["rows"]:
            rows[f"libtensorref {r['name']}"] = r["ms"]
            if r["name"] == "Flow":
                flow = r
        if flow and bw:
            rows["PCIe bound (Flow's loads)"] = flow["loaded"] / bw * 1e3
            rows["PCIe bound (all weights)"] = ours["weight_bytes"] / bw * 1e3
        for name, ms in rows.items():
            print(f"  {name:<36} {ms:10.1f} ms")
        if flow:
            f = flow["ms"]
            get = lambda k: rows.get(k)
            target = max(x for x in (get("PyTorch resident"), get("PCIe bound (Flow's loads)")) if x)
            print(f"  Flow / max(resident, PCIe bound)     {f / target:10.3f}   (bar <= 1.10)")
            for peer, bar in (("stream", "<= 1.05"), ("accelerate", "accelerate / Flow >= 8")):
                if get(f"PyTorch {peer}"):
                    print(f"  Flow / PyTorch {peer:<22}{f / get(f'PyTorch {peer}'):10.3f}   ({bar})")
            if get("PCIe bound (all weights)"):
                print(f"  PCIe bound (all weights) / Flow      {get('PCIe bound (all weights)') / f:10.3f}   (30B bar >= 0.90)")
            if flow.get("model_efficiency") is not None:
                print(f"  schedule model: bound / makespan     {flow['model_efficiency']:10.3f}")
        res = next((r for r in ours["rows"] if r["name"].startswith("Resident")), None)
        if res and rows.get("PyTorch resident"):
            print(f"  Resident / PyTorch resident          {res['ms'] / rows['PyTorch resident']:10.3f}   (bar <= 1.05)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
