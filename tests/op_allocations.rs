//! A warm op under the manager allocates nothing on the Rust heap: its ticket, the entries of
//! its inputs' device views and its result's entry take allocations earlier ops let go of, and
//! an iteration that repeats the recorded one records into the last one's room (the manager's
//! hot path, docs/residency.md). libtorch's own allocations (the result's tensor and storage)
//! are not counted; only the Rust heap is. (Its own test binary: the counting allocator and the
//! manager are process-wide.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use tensorref::residency::{self, Config, Device, Policy};
use tensorref::{DType, Result, Tensor};

/// The system allocator, counting each thread's allocations.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocated() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Ops in an iteration of the loop below, which marks each.
const ITERATION: usize = 64;

/// Rust heap allocations of `iterations` iterations of adds over `live` tensors (each result
/// released at once, as a temporary is), after as many uncounted ones.
fn allocations(live: &[Tensor], iterations: usize) -> Result<u64> {
    let run = || -> Result<()> {
        for i in 0..iterations * ITERATION {
            let (a, b) = (&live[i % live.len()], &live[(i * 7 + 3) % live.len()]);
            drop(a.add(b)?);
            if i % ITERATION == ITERATION - 1 && residency::enabled() {
                residency::mark_iteration()?;
            }
        }
        Ok(())
    };
    run()?;
    let before = allocated();
    run()?;
    Ok(allocated() - before)
}

/// Resident and Flow under a budget nothing is evicted under: no data moves. Flow plans its
/// prefetch window as it follows the recorded iteration, a few allocations an iteration, none an
/// op. (Genoa moves data on every op, its result written back and its inputs let go of, and
/// each transfer has a record of its own.)
#[test]
fn a_warm_op_allocates_nothing_on_the_rust_heap() -> Result<()> {
    const ITERATIONS: usize = 32;
    let live: Vec<Tensor> = (0..ITERATION).map(|i| Tensor::full(&[4], i as f64, DType::F32)).collect::<Result<_>>()?;
    assert_eq!(allocations(&live, ITERATIONS)?, 0, "without a manager");
    for (policy, most) in [(Policy::Resident, 0), (Policy::Flow, 8 * ITERATIONS as u64)] {
        residency::configure(Config::new(Device::Simulated, policy, 1 << 30))?;
        let managed = allocations(&live, ITERATIONS);
        let stats = residency::stats().expect("configured");
        residency::disable()?;
        let managed = managed?;
        assert!(managed <= most, "{policy:?}: {managed} Rust heap allocations in {} ops", ITERATIONS * ITERATION);
        assert_eq!(stats.ops, 2 * (ITERATIONS * ITERATION) as u64, "{policy:?}: every op ran through the manager");
    }
    Ok(())
}
