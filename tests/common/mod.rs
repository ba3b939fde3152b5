//! Helpers shared by the Rust integration tests.
#![allow(dead_code)]

use tensorref::{DType, Result, Stats, Tensor};

/// This thread's statistics as the spec's tuple:
/// (created_outside, disposed_outside, created_in, disposed_in, attached, detached, live).
pub fn tuple() -> (u64, u64, u64, u64, u64, u64, i64) {
    let s = Stats::get();
    (
        s.created_outside_scope,
        s.disposed_outside_scope,
        s.created_in_scope,
        s.disposed_in_scope,
        s.attached_to_scope,
        s.detached_from_scope,
        s.live(),
    )
}

pub fn small() -> Result<Tensor> {
    Tensor::zeros(&[2, 2], DType::F32)
}

/// Runs `f` and asserts that this thread created and released as many handles as before.
pub fn leak_free(f: impl FnOnce() -> Result<()>) {
    let before = Stats::get().live();
    f().unwrap();
    assert_eq!(Stats::get().live(), before, "handles leaked");
}
