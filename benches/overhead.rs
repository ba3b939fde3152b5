//! What TensorRef costs on top of libtorch: a 4-element add through TensorRef (Rust API and C
//! ABI) against the same raw tch op; handle lookup from 1 and from 8 threads; and the scope
//! bookkeeping of disposing 150 handles while keeping 5 (aliases of one tensor, so that no
//! libtorch free is timed: only our bookkeeping).
//!
//!     cargo bench --bench overhead

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use std::hint::black_box;
use std::time::{Duration, Instant};
use tensorref::ffi::{tr_tensor_add, tr_tensor_release, TrTensor};
use tensorref::{DType, Scope, Tensor};

fn add_4(c: &mut Criterion) {
    let mut g = c.benchmark_group("add_4_elements");
    let (ta, tb) = (tch::Tensor::ones([4], tch::kind::FLOAT_CPU), tch::Tensor::ones([4], tch::kind::FLOAT_CPU));
    g.bench_function("raw_tch", |b| b.iter(|| black_box(ta.f_add(&tb).unwrap())));
    let (a, bt) = (Tensor::ones(&[4], DType::F32).unwrap(), Tensor::ones(&[4], DType::F32).unwrap());
    g.bench_function("tensorref_rust", |b| b.iter(|| black_box(a.add(&bt).unwrap())));
    let (ca, cb) = (TrTensor::from(a.id()), TrTensor::from(bt.id()));
    g.bench_function("tensorref_c_abi", |b| {
        b.iter(|| {
            let mut out = TrTensor { id: 0 };
            tr_tensor_add(ca, cb, &mut out);
            tr_tensor_release(black_box(out))
        })
    });
    g.finish();
}

fn lookup(c: &mut Criterion) {
    let mut g = c.benchmark_group("handle_lookup");
    let t = Tensor::ones(&[4], DType::F32).unwrap();
    g.bench_function("1_thread", |b| b.iter(|| black_box(t.is_valid())));
    // Latency of one lookup as each of 8 concurrent threads sees it: every thread does
    // iters/8 lookups in wall time T, so each took 8T/iters. On a machine with fewer than 8
    // cores this includes waiting for a core as well as for the registry lock.
    g.bench_function("8_threads", |b| {
        b.iter_custom(|iters| {
            let per_thread = iters.div_ceil(8);
            let start = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..8 {
                    s.spawn(|| (0..per_thread).for_each(|_| assert!(black_box(t.is_valid()))));
                }
            });
            start.elapsed() * 8
        })
    });
    g.finish();
}

fn scope_dispose(c: &mut Criterion) {
    let base = Tensor::ones(&[4], DType::F32).unwrap();
    c.bench_function("scope_dispose_150_keep_5", |b| {
        b.iter_batched(
            || {
                let scope = Scope::new();
                let handles: Vec<Tensor> = (0..150).map(|_| base.alias().unwrap()).collect();
                (scope, handles)
            },
            |(scope, handles)| {
                let keep: Vec<&Tensor> = handles.iter().step_by(30).collect();
                scope.dispose_everything_but(&keep).unwrap();
                handles.into_iter().for_each(std::mem::forget); // released by the scope
                scope
            },
            BatchSize::SmallInput,
        )
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = add_4, lookup, scope_dispose
}
criterion_main!(benches);
