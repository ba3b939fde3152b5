//! Per-op overhead as ratios, robust to a busy machine: raw tch, TensorRef through Rust and
//! TensorRef through the C ABI run the same 4-element add in alternating rounds, so all three
//! see the same noise; the medians of the per-round times are printed side by side.
//!
//!     cargo bench --bench ratios

use std::hint::black_box;
use std::time::Instant;
use tensorref::ffi::{tr_tensor_add, tr_tensor_release, TrTensor};
use tensorref::{DType, Tensor};

const ROUNDS: usize = 31;
const OPS: usize = 20_000;

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

fn main() {
    let (ta, tb) = (tch::Tensor::ones([4], tch::kind::FLOAT_CPU), tch::Tensor::ones([4], tch::kind::FLOAT_CPU));
    let (a, b) = (Tensor::ones(&[4], DType::F32).unwrap(), Tensor::ones(&[4], DType::F32).unwrap());
    let (ca, cb) = (TrTensor::from(a.id()), TrTensor::from(b.id()));
    let mut raw = || drop(black_box(ta.f_add(&tb).unwrap()));
    let mut rust = || drop(black_box(a.add(&b).unwrap()));
    let mut c_abi = || {
        let mut out = TrTensor { id: 0 };
        tr_tensor_add(ca, cb, &mut out);
        tr_tensor_release(black_box(out));
    };
    let variants: [(&str, &mut dyn FnMut()); 3] = [("raw tch", &mut raw), ("TensorRef (Rust)", &mut rust), ("TensorRef (C ABI)", &mut c_abi)];
    let mut times: Vec<Vec<f64>> = vec![vec![]; variants.len()];
    let mut variants = variants;
    for _ in 0..ROUNDS {
        for (i, (_, f)) in variants.iter_mut().enumerate() {
            times[i].push(round(*f));
        }
    }
    let medians: Vec<f64> = times.into_iter().map(median).collect();
    println!("4-element f32 add, op + release, median of {ROUNDS} interleaved rounds of {OPS} ops");
    for ((name, _), ns) in variants.iter().zip(&medians) {
        println!("{name:<20} {ns:>8.1} ns   {:>5.3}x raw tch", ns / medians[0]);
    }
}
