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

/// A tensor whose memory is also `outside`'s (a plain tch tensor the library does not know):
/// exported through DLPack and imported back, as PyTorch's from_torch / to_torch do.
pub fn shared_with_outside(outside: &tch::Tensor) -> Result<Tensor> {
    use tensorref::ffi::{tr_tensor_from_dlpack, tr_tensor_to_dlpack, TrTensor};
    let exported = Tensor::from_tch(outside.shallow_clone());
    let mut managed = std::ptr::null_mut();
    assert_eq!(tr_tensor_to_dlpack(TrTensor::from(exported.id()), &mut managed), tensorref::Status::TR_OK);
    let mut imported = TrTensor { id: 0 };
    assert_eq!(tr_tensor_from_dlpack(managed, &mut imported), tensorref::Status::TR_OK);
    Ok(Tensor::from_raw(imported.into()))
}

/// Every policy, and Flow with recomputation too: the runs a test of the manager covers.
pub fn policy_runs() -> [(tensorref::residency::Policy, tensorref::residency::Recompute); 4] {
    use tensorref::residency::{Policy, Recompute};
    [(Policy::Resident, Recompute::Off), (Policy::Genoa, Recompute::Off), (Policy::Flow, Recompute::Off), (Policy::Flow, Recompute::Always)]
}
