//! Per-op overhead as ratios, robust to a busy machine: raw tch, TensorRef through Rust and
//! TensorRef through the C ABI run the same small op in alternating rounds, so all three see the
//! same noise. Printed: each variant's median time per op, and the median over the rounds of
//! each round's ratio to raw tch (paired, so that a slow stretch of the machine slows both sides
//! of a ratio). The sample (benches/common/op_sample.rs): the table's `add` and ops generated from
//! libtorch's schema, each variant's whole output checked against raw tch's before the clock
//! starts. The run exits 1 if a timed call fails or the worst C ABI ratio is over the bar.
//! `benches/instructions.rs` counts the same sample in instructions, which no noise moves.
//!
//!     cargo bench --bench ratios

#[path = "common/op_sample.rs"]
mod op_sample;

use std::time::Instant;

const ROUNDS: usize = 41;
const OPS: usize = 10_000;
/// The per-op bar: the C ABI at most this much slower than raw tch.
const BAR: f64 = 1.15;

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

/// Times the three variants of one op in alternating rounds; prints their medians and the
/// median paired ratios to raw tch; returns the C ABI's.
fn compare(op: &mut op_sample::Op) -> f64 {
    let mut times: Vec<Vec<f64>> = vec![vec![]; 3];
    for _ in 0..ROUNDS {
        for (i, f) in op.variants.iter_mut().enumerate() {
            times[i].push(round(f.as_mut()));
        }
    }
    let ratio = |i: usize| median(times[i].iter().zip(&times[0]).map(|(t, raw)| t / raw).collect());
    let (rust, c) = (ratio(1), ratio(2));
    let m: Vec<f64> = times.iter().cloned().map(median).collect();
    println!("{:<34} {:>8.1} {:>8.1} {:>8.1}   {rust:>6.3}x {c:>6.3}x", op.name, m[0], m[1], m[2]);
    c
}

fn main() {
    let mut keep = vec![];
    let mut ops = op_sample::sample(&mut keep);
    println!("Small ops on the CPU, op + release: median ns per op, and the median of each round's ratio to raw tch,");
    println!("over {ROUNDS} interleaved rounds of {OPS} ops");
    let [raw, rust, c] = op_sample::VARIANTS;
    println!("{:<34} {raw:>8} {rust:>8} {c:>8}   {rust:>7} {c:>7}", "op");
    let worst = ops.iter_mut().map(compare).fold(0.0, f64::max);
    println!("worst C ABI ratio: {worst:.3}x raw tch (bar {BAR}x)");
    let failed = op_sample::failed();
    if failed > 0 || worst > BAR {
        eprintln!("ratios: {failed} timed calls failed; worst C ABI ratio {worst:.3}x against the bar {BAR}x");
        std::process::exit(1);
    }
}
