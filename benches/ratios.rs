//! Per-op overhead as ratios, robust to a busy machine: raw tch, TensorRef through Rust and
//! TensorRef through the C ABI run the same small op in alternating rounds, so all three see the
//! same noise; the medians of the per-round times are printed side by side. The sample: the
//! table's hand-written `add`, and ops generated from libtorch's schema, one of each kind of
//! argument and result (a scalar argument, an optional float and tensor, a string, an optional
//! int list and dtype, a tuple of results). Each variant's whole output is checked against raw
//! tch's before the clock starts; the run exits 1 if a timed call fails or the worst C ABI
//! ratio is over the bar.
//!
//!     cargo bench --bench ratios

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tensorref::ffi::*;
use tensorref::{DType, Scalar, Status, Tensor};

const ROUNDS: usize = 31;
/// The per-op bar: the C ABI at most this much slower than raw tch.
const BAR: f64 = 1.15;
/// Timed C calls that did not return TR_OK (the run then fails).
static FAILED: AtomicUsize = AtomicUsize::new(0);

fn ok(status: Status) {
    if status != Status::TR_OK {
        FAILED.fetch_add(1, Ordering::Relaxed);
    }
}
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

/// A result through the C ABI, as a Tensor that releases it.
fn adopt(out: TrTensor) -> Tensor {
    Tensor::from_raw(out.into())
}

/// Checks that each of `ours` (one op's result through each variant) equals raw tch's, whole.
fn check(name: &str, raw: &tch::Tensor, ours: &[Tensor]) {
    for o in ours {
        let o = o.with_tch(|t| t.shallow_clone()).unwrap();
        assert_eq!(raw.size(), o.size(), "{name}: shape");
        assert!(raw.equal(&o), "{name}: values differ from raw tch");
    }
}

/// Times the three variants of one op and prints their medians and ratios to raw tch.
fn compare(name: &str, variants: [&mut dyn FnMut(); 3]) -> f64 {
    let mut variants = variants;
    let mut times: Vec<Vec<f64>> = vec![vec![]; 3];
    for _ in 0..ROUNDS {
        for (i, f) in variants.iter_mut().enumerate() {
            times[i].push(round(*f));
        }
    }
    let m: Vec<f64> = times.into_iter().map(median).collect();
    println!("{name:<34} {:>8.1} {:>8.1} {:>8.1}   {:>6.3}x {:>6.3}x", m[0], m[1], m[2], m[1] / m[0], m[2] / m[0]);
    m[2] / m[0]
}

fn main() {
    let t = |x: &tch::Tensor| Tensor::from_tch(x.shallow_clone());
    let cpu = tch::kind::FLOAT_CPU;
    let (ta, tb) = (tch::Tensor::ones([4], cpu), tch::Tensor::rand([4], cpu));
    let (a, b) = (t(&ta), t(&tb));
    let (ca, cb) = (TrTensor::from(a.id()), TrTensor::from(b.id()));
    let x = tch::Tensor::rand([2, 8], cpu);
    let (tx, cx) = (t(&x), TrTensor::from(t(&x).into_raw()));
    let w = tch::Tensor::rand([8], cpu);
    let (tw, cw) = (t(&w), TrTensor::from(t(&w).into_raw()));

    // The same calls as the timed ones, once, their outputs compared.
    // alpha 1, libtorch's default: raw tch's `add` has no alpha.
    let one = TrScalar { kind: ScalarKind::Int as TrScalarKind, i: 1, f: 0.0, b: false };
    let mut out = TrTensor { id: 0 };
    assert_eq!(tr_tensor_add(ca, cb, &mut out), Status::TR_OK);
    check("add", &ta.f_add(&tb).unwrap(), &[a.add(&b).unwrap(), adopt(out)]);
    assert_eq!(tr_tensor_add_tensor(ca, cb, one, &mut out), Status::TR_OK);
    check("add.Tensor", &ta.f_add(&tb).unwrap(), &[a.add_tensor(&b, 1).unwrap(), adopt(out)]);
    let eps = 1e-5;
    assert_eq!(tr_tensor_rms_norm(cx, [8i64].as_ptr(), 1, cw, &eps, &mut out), Status::TR_OK);
    check("rms_norm", &x.rms_norm([8], Some(&w), eps), &[tx.rms_norm(&[8], Some(&tw), Some(eps)).unwrap(), adopt(out)]);
    let floor = c"floor";
    assert_eq!(tr_tensor_div_tensor_mode(ca, cb, floor.as_ptr(), &mut out), Status::TR_OK);
    check("div.Tensor_mode", &ta.divide_tensor_mode(&tb, "floor"), &[a.div_tensor_mode(&b, Some("floor")).unwrap(), adopt(out)]);
    let f64_code: TrDtype = DType::F64 as TrDtype;
    assert_eq!(tr_tensor_sum_dim_intlist(cx, [1i64].as_ptr(), 1, false, &f64_code, &mut out), Status::TR_OK);
    let sum = x.sum_dim_intlist([1i64].as_slice(), false, tch::Kind::Double);
    check("sum.dim_IntList", &sum, &[tx.sum_dim_intlist(Some(&[1]), false, Some(DType::F64)).unwrap(), adopt(out)]);
    let mut pair = [TrTensor { id: 0 }; 2];
    let mut written = 0;
    assert_eq!(tr_tensor_topk(cx, 3, -1, true, true, pair.as_mut_ptr(), 2, &mut written), Status::TR_OK);
    let (values, indices) = x.topk(3, -1, true, true);
    let mut ours = tx.topk(3, -1, true, true).unwrap().into_iter();
    let (our_values, our_indices) = (ours.next().unwrap(), ours.next().unwrap());
    check("topk values", &values, &[our_values, adopt(pair[0])]);
    check("topk indices", &indices, &[our_indices, adopt(pair[1])]);

    println!("Small ops on the CPU, op + release, ns per op: median of {ROUNDS} interleaved rounds of {OPS} ops");
    println!("{:<34} {:>8} {:>8} {:>8}   {:>7} {:>7}", "op", "raw tch", "Rust", "C ABI", "Rust", "C ABI");
    let mut worst: f64 = 0.0;
    worst = worst.max(compare("add [4] (ops.def)", [
        &mut || drop(black_box(ta.f_add(&tb).unwrap())),
        &mut || drop(black_box(a.add(&b).unwrap())),
        &mut || {
            let mut out = TrTensor { id: 0 };
            ok(tr_tensor_add(ca, cb, &mut out));
            tr_tensor_release(black_box(out));
        },
    ]));
    worst = worst.max(compare("add.Tensor [4], alpha 1", [
        &mut || drop(black_box(ta.f_add(&tb).unwrap())),
        &mut || drop(black_box(a.add_tensor(&b, Scalar::Int(1)).unwrap())),
        &mut || {
            let mut out = TrTensor { id: 0 };
            ok(tr_tensor_add_tensor(ca, cb, one, &mut out));
            tr_tensor_release(black_box(out));
        },
    ]));
    worst = worst.max(compare("rms_norm [2, 8], weight, eps", [
        &mut || drop(black_box(x.f_rms_norm([8], Some(&w), eps).unwrap())),
        &mut || drop(black_box(tx.rms_norm(&[8], Some(&tw), Some(eps)).unwrap())),
        &mut || {
            let mut out = TrTensor { id: 0 };
            ok(tr_tensor_rms_norm(cx, [8i64].as_ptr(), 1, cw, &eps, &mut out));
            tr_tensor_release(black_box(out));
        },
    ]));
    worst = worst.max(compare("div.Tensor_mode [4], \"floor\"", [
        &mut || drop(black_box(ta.f_divide_tensor_mode(&tb, "floor").unwrap())),
        &mut || drop(black_box(a.div_tensor_mode(&b, Some("floor")).unwrap())),
        &mut || {
            let mut out = TrTensor { id: 0 };
            ok(tr_tensor_div_tensor_mode(ca, cb, floor.as_ptr(), &mut out));
            tr_tensor_release(black_box(out));
        },
    ]));
    worst = worst.max(compare("sum.dim_IntList [2, 8], f64", [
        &mut || drop(black_box(x.f_sum_dim_intlist([1i64].as_slice(), false, tch::Kind::Double).unwrap())),
        &mut || drop(black_box(tx.sum_dim_intlist(Some(&[1]), false, Some(DType::F64)).unwrap())),
        &mut || {
            let mut out = TrTensor { id: 0 };
            ok(tr_tensor_sum_dim_intlist(cx, [1i64].as_ptr(), 1, false, &f64_code, &mut out));
            tr_tensor_release(black_box(out));
        },
    ]));
    worst = worst.max(compare("topk [2, 8], k 3 (two results)", [
        &mut || drop(black_box(x.f_topk(3, -1, true, true).unwrap())),
        &mut || drop(black_box(tx.topk(3, -1, true, true).unwrap())),
        &mut || {
            let mut pair = [TrTensor { id: 0 }; 2];
            let mut written = 0;
            ok(tr_tensor_topk(cx, 3, -1, true, true, pair.as_mut_ptr(), 2, &mut written));
            tr_tensor_release(black_box(pair[0]));
            tr_tensor_release(black_box(pair[1]));
        },
    ]));
    println!("worst C ABI ratio: {worst:.3}x raw tch (bar {BAR}x)");
    tr_tensor_release(cx);
    tr_tensor_release(cw);
    let failed = FAILED.load(Ordering::Relaxed);
    if failed > 0 || worst > BAR {
        eprintln!("ratios: {failed} timed calls failed; worst C ABI ratio {worst:.3}x against the bar {BAR}x");
        std::process::exit(1);
    }
}
