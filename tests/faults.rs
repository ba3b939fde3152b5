//! Faults injected on the simulated device (`residency::inject_fault`): the k-th device
//! allocation, copy or page-locked allocation fails once. Under every policy, with and without
//! recomputation, for every kind and each k a small training-like program reaches: the failing op
//! reports a clear status, a retry of it succeeds, the budget holds, turning the manager off
//! succeeds, and every tensor ends with the values the program computes without a manager.
//! (One test binary: the manager and the faults are process-wide.)

mod common;
use tensorref::residency::{self, inject_fault, Device, Config, Fault, Policy};
use tensorref::{live_handles, no_grad, Error, Result, Tensor};

/// How many events of each kind the program is faulted at: the first K.
const K: u64 = 24;

/// Runs `op`, and once more if an injected fault failed it (a fault fails once); any other error
/// fails the test. Counts the faults seen.
fn attempt<T>(faults: &mut u32, op: impl Fn() -> Result<T>) -> Result<T> {
    match op() {
        Err(e @ (Error::OutOfMemory(_) | Error::Device(_))) if e.to_string().contains("injected fault") => {
            *faults += 1;
            op()
        }
        other => other,
    }
}

fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 * 0.37 + seed).sin() * 2.0).round() / 4.0).collect()
}

/// Three steps of a one-layer model (matmul, relu, a residual, an in-place update of the weight),
/// each op retried after a fault; returns every tensor the program keeps, as values.
fn program(faults: &mut u32) -> Result<Vec<Vec<f32>>> {
    let w = Tensor::from_slice(&values(256, 0.5), &[16, 16])?;
    let x = Tensor::from_slice(&values(128, 1.5), &[8, 16])?;
    let mut kept = Vec::new();
    for _ in 0..3 {
        let h = attempt(faults, || x.matmul(&w))?;
        let r = attempt(faults, || h.relu())?;
        let y = attempt(faults, || r.add(&x))?;
        let g = attempt(faults, || x.transpose(0, 1)?.matmul(&y))?;
        attempt(faults, || w.sub_(&g.mul_scalar(1.0 / 64.0)?))?;
        kept.push(attempt(faults, || y.sum())?);
        if residency::enabled() {
            attempt(faults, residency::mark_iteration)?;
        }
    }
    kept.push(w);
    // A read makes a dropped result again: it may meet a fault too.
    kept.iter().map(|t| attempt(faults, || t.to_vec::<f32>())).collect()
}

#[test]
fn every_fault_is_a_status_and_loses_nothing() {
    no_grad(|| -> Result<()> {
        let live = live_handles();
        let expected = program(&mut 0)?;
        for (policy, recompute) in common::policy_runs() {
            for kind in [Fault::DeviceAllocation, Fault::Copy, Fault::PageLockedAllocation] {
                let mut faulted = 0;
                for k in 1..=K {
                    let mut cfg = Config::new(Device::Simulated, policy, 3 * 1024);
                    cfg.recompute = recompute;
                    residency::configure(cfg)?;
                    inject_fault(kind, k);
                    let mut faults = 0;
                    let got = program(&mut faults);
                    inject_fault(kind, 0);
                    let stats = residency::stats().expect("configured");
                    let disabled = residency::disable();
                    let what = format!("{policy:?}, recompute {recompute:?}, {kind:?} at event {k}");
                    disabled.unwrap_or_else(|e| panic!("{what}: disable failed: {e}"));
                    assert_eq!(got.unwrap_or_else(|e| panic!("{what}: {e}")), expected, "{what}");
                    assert!(stats.peak_device_bytes <= stats.budget, "{what}: over budget");
                    assert!(faults <= 1, "{what}: a fault fails once");
                    faulted += faults;
                }
                // Each kind happens in each run at least once, so some of its faults reach an op
                // (others are absorbed: an out-of-memory result is retried after evicting).
                assert!(faulted > 0 || policy == Policy::Resident, "{policy:?}, {recompute:?}: no {kind:?} fault reached an op");
            }
        }
        assert_eq!(live_handles(), live, "handles leaked");
        Ok(())
    })
    .unwrap();
}
