//! Per-op overhead as ratios, robust to a busy machine: raw tch, TensorRef through Rust and
//! TensorRef through the C ABI run the same small op in alternating rounds, so all three see the
//! same noise. Each variant's median time per op is printed, and the median over the rounds of
//! each round's ratio to raw tch (paired, so that a slow stretch of the machine slows both sides
//! of a ratio). The sample (benches/common/op_sample.rs): the table's `add` and ops generated from
//! libtorch's schema, each variant's whole output checked against raw tch's before the clock
//! starts.
//!
//! A process's address layout (randomised at each start) moves its ratios by up to 0.04 against
//! another's, more than pairing can remove: which code and data share cache sets changes with
//! it. So the bench runs itself in PROCESSES processes and reports, per op, the median over them
//! and their range. It exits 1 if a timed call fails or the worst median C ABI ratio is over the
//! bar. `benches/instructions.rs` counts the same sample in instructions, which no noise moves.
//!
//!     cargo bench --bench ratios

#[path = "common/op_sample.rs"]
mod op_sample;

use std::process::Command;
use std::time::Instant;

const PROCESSES: usize = 5;
const ROUNDS: usize = 15;
const OPS: usize = 10_000;
/// The per-op bar: the C ABI at most this much slower than raw tch.
const BAR: f64 = 1.15;
/// The argument a process of the bench is started with.
const CHILD: &str = "--one-process";

fn round(f: &mut dyn FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..OPS {
        f();
    }
    start.elapsed().as_secs_f64() * 1e9 / OPS as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times the three variants of one op in alternating rounds; prints a line for the parent:
/// the op's index, the variants' median times and the median paired ratios to raw tch.
fn compare(k: usize, op: &mut op_sample::Op) {
    let mut times: Vec<Vec<f64>> = vec![vec![]; 3];
    for _ in 0..ROUNDS {
        for (i, f) in op.variants.iter_mut().enumerate() {
            times[i].push(round(f.as_mut()));
        }
    }
    let ratio = |i: usize| median(times[i].iter().zip(&times[0]).map(|(t, raw)| t / raw).collect());
    let m: Vec<f64> = times.iter().cloned().map(median).collect();
    println!("{k} {} {} {} {} {}", m[0], m[1], m[2], ratio(1), ratio(2));
}

/// One process's measurement of the whole sample.
fn one_process() {
    let mut keep = vec![];
    for (k, op) in op_sample::sample(&mut keep).iter_mut().enumerate() {
        compare(k, op);
    }
    if op_sample::failed() > 0 {
        eprintln!("ratios: {} timed calls failed", op_sample::failed());
        std::process::exit(1);
    }
}

fn main() {
    if std::env::args().any(|a| a == CHILD) {
        return one_process();
    }
    let mut keep = vec![];
    let names: Vec<&str> = op_sample::sample(&mut keep).iter().map(|op| op.name).collect();
    // rows[op][process] = [raw ns, Rust ns, C ns, Rust ratio, C ratio]
    let mut rows: Vec<Vec<[f64; 5]>> = vec![vec![]; names.len()];
    let exe = std::env::current_exe().expect("the bench's own path");
    for p in 0..PROCESSES {
        eprintln!("ratios: process {} of {PROCESSES}", p + 1);
        let out = Command::new(&exe).arg(CHILD).output().expect("a process of the bench");
        if !out.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&out.stderr));
            std::process::exit(1);
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let v: Vec<f64> = line.split(' ').map(|x| x.parse().expect("a number")).collect();
            rows[v[0] as usize].push([v[1], v[2], v[3], v[4], v[5]]);
        }
    }
    if let Some((name, row)) = names.iter().zip(&rows).find(|(_, row)| row.len() != PROCESSES) {
        eprintln!("ratios: {name} measured in {} of {PROCESSES} processes", row.len());
        std::process::exit(1);
    }
    println!("Small ops on the CPU, op + release: median ns per op, and the median of each round's ratio to raw tch");
    println!("({ROUNDS} interleaved rounds of {OPS} ops in each of {PROCESSES} processes: the median over the processes, and their range)");
    let [raw, rust, c] = op_sample::VARIANTS;
    println!("{:<34} {raw:>8} {rust:>8} {c:>8}   {rust:>7} {c:>7}   C ABI range", "op");
    let mut worst: f64 = 0.0;
    for (name, row) in names.iter().zip(&rows) {
        let col = |i: usize| row.iter().map(|r| r[i]).collect::<Vec<f64>>();
        let cs = col(4);
        let (lo, hi) = cs.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        let c = median(cs);
        worst = worst.max(c);
        println!(
            "{name:<34} {:>8.1} {:>8.1} {:>8.1}   {:>6.3}x {c:>6.3}x   {lo:.3}-{hi:.3}",
            median(col(0)), median(col(1)), median(col(2)), median(col(3))
        );
    }
    println!("worst C ABI ratio: {worst:.3}x raw tch (bar {BAR}x)");
    if worst > BAR {
        eprintln!("ratios: worst C ABI ratio {worst:.3}x against the bar {BAR}x");
        std::process::exit(1);
    }
}
