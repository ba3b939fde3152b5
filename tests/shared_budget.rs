//! Threads sharing one tight budget: 8 threads × 10,000 ops under every policy, on private
//! tensors and on shared read-only ones, with room for the working sets of only a few ops at
//! once. No op that fits the budget by itself may fail, none may deadlock, each thread's results
//! equal the same work run alone, and the budget holds at every event and of the device memory
//! the simulated device's allocator counts. Prints the evictions per op against the same work on
//! one thread. (Its own test binary: the
//! manager is process-wide.)

mod common;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tensorref::residency::{self, Device, Config};
use tensorref::{no_grad, with_scope, DType, Result, Tensor};

const THREADS: usize = 8;
const OPS: usize = 10_000;
/// Elements of every tensor: 16 KiB of f32.
const N: i64 = 64;

/// One thread's work: OPS ops, each reading its running tensor and a shared one (read-only, also
/// read by every other thread) or a private one; returns the running tensor's values.
fn work(thread: usize, shared: &[Tensor]) -> Result<Vec<f32>> {
    let private = Tensor::full(&[N, N], 0.5 + thread as f64, DType::F32)?.mul_scalar(1.0 / 64.0)?;
    let mut x = Tensor::full(&[N, N], thread as f64 / 8.0, DType::F32)?;
    for block in 0..OPS / 5 {
        x = with_scope(|_| -> Result<Tensor> {
            let s = &shared[(thread + block) % shared.len()];
            let y = x.matmul(&private)?.add(s)?.tanh()?.mul_scalar(0.5)?.sub(&private)?;
            y.move_to_outer_scope()?;
            Ok(y)
        })?;
    }
    x.to_vec()
}

/// Runs `f` once per thread, all at once or one after another; returns each thread's result.
fn threads(together: bool, f: impl Fn(usize) -> Result<Vec<f32>> + Sync) -> Vec<Vec<f32>> {
    if !together {
        return (0..THREADS).map(|t| f(t).unwrap()).collect();
    }
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..THREADS).map(|t| s.spawn(move || no_grad(|| f(t)))).collect();
        handles.into_iter().map(|h| h.join().expect("no panic").expect("no error")).collect()
    })
}

#[test]
fn threads_share_a_tight_budget_without_spurious_errors() -> Result<()> {
    no_grad(|| -> Result<()> {
        let shared: Vec<Tensor> = (0..4).map(|i| Tensor::full(&[N, N], i as f64 / 4.0, DType::F32)).collect::<Result<_>>()?;
        let tensor = (N * N * 4) as u64;
        // Room for the inputs and results of about three ops at once.
        let budget = 10 * tensor;
        for (policy, recompute) in common::policy_runs() {
            let mut evictions_per_op = vec![];
            let mut seconds = vec![];
            let mut peaks = vec![];
            let mut results = vec![];
            for together in [false, true] {
                residency::configure(Config { recompute, ..Config::new(Device::Simulated, policy, budget) })?;
                let peak = Arc::new(AtomicU64::new(0));
                let seen = peak.clone();
                residency::set_callback(Some(Box::new(move |e| {
                    seen.fetch_max(e.device_bytes, Ordering::Relaxed);
                })))?;
                residency::device_memory(true);
                let started = std::time::Instant::now();
                results.push(threads(together, |t| work(t, &shared)));
                seconds.push(started.elapsed().as_secs_f64());
                let stats = residency::stats().expect("configured");
                let memory = residency::device_memory(false);
                residency::disable()?;
                let what = format!("{policy:?}, recompute {recompute:?}, {}", if together { "8 threads at once" } else { "one thread" });
                assert!(peak.load(Ordering::Relaxed) <= stats.budget, "{what}: over budget");
                assert!(memory.peak <= stats.budget, "{what}: the allocator saw {} device bytes alive at once, budget {}", memory.peak, stats.budget);
                evictions_per_op.push(stats.evictions as f64 / stats.ops as f64);
                peaks.push(memory.peak as f64 / stats.budget as f64);
            }
            assert_eq!(results[0], results[1], "{policy:?}, {recompute:?}: a thread's results differ from the same work alone");
            println!(
                "{policy:?}, recompute {recompute:?}: evictions per op {:.3} on one thread ({:.1} s), {:.3} with 8 threads at once ({:.1} s); \
                 the allocator's peak {:.3} and {:.3} of the budget",
                evictions_per_op[0], seconds[0], evictions_per_op[1], seconds[1], peaks[0], peaks[1]
            );
        }
        Ok(())
    })
}
