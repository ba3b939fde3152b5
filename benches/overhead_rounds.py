"""The per-op overhead under criterion, as a median over alternated runs (`make bench-overhead`).

Runs the three functions of the criterion group `add_4_elements` (benches/overhead.rs: raw tch,
TensorRef through Rust, TensorRef through the C ABI) each in its own process, alternately, for a
number of rounds, and prints each round's ratio to raw tch and the median ratio. One criterion
run of one function moves by several percent on a shared machine, and running the three in one
process biases the third; alternating processes and taking the median damps both (on a shared
machine the rounds still spread by several percent: the interleaved `ratios` program is steadier).

    python3 benches/overhead_rounds.py [rounds]
"""
import json
import re
import statistics
import subprocess
import sys

FUNCTIONS = ["raw_tch", "tensorref_rust", "tensorref_c_abi"]
ESTIMATE = re.compile(r"time:\s+\[[\d.]+ \S+ ([\d.]+) (ns|µs|us)")


def bench_binary():
    out = subprocess.run(
        ["cargo", "bench", "--bench", "overhead", "--no-run", "--message-format=json"],
        check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "overhead" and msg.get("executable"):
            return msg["executable"]
    sys.exit("overhead_rounds: cargo built no `overhead` bench binary")


def run(binary, function):
    out = subprocess.run([binary, "--bench", f"add_4_elements/{function}", "--noplot"],
                         check=True, capture_output=True, text=True).stdout
    m = ESTIMATE.search(out)
    if not m:
        sys.exit(f"overhead_rounds: no estimate in criterion's output for {function}:\n{out}")
    return float(m.group(1)) * (1 if m.group(2) == "ns" else 1000)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    binary = bench_binary()
    times = {f: [] for f in FUNCTIONS}
    for r in range(rounds):
        for f in FUNCTIONS:
            times[f].append(run(binary, f))
        print(f"round {r + 1}/{rounds}: " + "  ".join(f"{f} {times[f][-1]:.1f} ns" for f in FUNCTIONS), flush=True)
    print(f"\n4-element f32 add + release under criterion, {rounds} alternated rounds")
    width = 6 * rounds
    print(f"{'function':<18}{'median':>10}   {'ratio to raw tch, per round':<{width}} median ratio")
    for f in FUNCTIONS:
        ratios = [t / raw for t, raw in zip(times[f], times["raw_tch"])]
        per_round = " ".join(f"{x:.3f}" for x in ratios)
        print(f"{f:<18}{statistics.median(times[f]):>7.1f} ns   {per_round:<{width}} {statistics.median(ratios):.3f}x")


if __name__ == "__main__":
    main()
