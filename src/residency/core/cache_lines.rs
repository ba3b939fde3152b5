//! Hints that bring what an op will read of its inputs into the cache ahead of time. An op
//! follows pointers from each input (its entry, libtorch's tensor, the TensorImpl, the manager's
//! storage record) one after another; with many live tensors each is a cache miss, and the
//! misses of one input wait on each other. Asked for every input first, one level at a time, the
//! misses of all inputs overlap. A hint never faults and changes nothing but the cache, so a
//! stale address costs at most a useless fetch.

/// Asks the CPU to fetch the cache line holding `p` (no effect on other architectures).
#[inline(always)]
pub(crate) fn fetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch hint reads nothing and never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// `fetch` for each of the `lines` cache lines from `p` on.
#[inline(always)]
pub(crate) fn fetch_lines(p: *const u8, lines: usize) {
    for k in 0..lines {
        fetch(p.wrapping_add(64 * k));
    }
}

#[allow(unused_doc_comments)]
/// cbindgen:ignore
extern "C" {
    fn tr_native_fetch_tensors(tensors: *const *const std::ffi::c_void, n: usize);
    fn tr_native_fetch_storage(storage: usize);
}

/// Fetches the TensorImpls of libtorch's `tensors` (at::Tensor pointers), then the version
/// counters they point at.
pub(crate) fn tensors(tensors: impl Iterator<Item = *const std::ffi::c_void>) {
    let tensors: smallvec::SmallVec<[_; 4]> = tensors.collect();
    // SAFETY: each pointer is a live at::Tensor (the caller's entries hold them); the shim reads
    // them and their TensorImpls.
    unsafe { tr_native_fetch_tensors(tensors.as_ptr(), tensors.len()) }
}

/// Fetches the StorageImpl at address `storage`.
pub(crate) fn storage(storage: usize) {
    // SAFETY: a hint; the shim reads nothing.
    unsafe { tr_native_fetch_storage(storage) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_on_any_tensor_or_address_change_nothing() {
        let t = tch::Tensor::f_arange(6, tch::kind::FLOAT_CPU).unwrap();
        let view = t.f_narrow(0, 2, 3).unwrap();
        let undefined = tch::Tensor::new(); // its TensorImpl is libtorch's undefined one, no counter
        tensors([&t, &view, &undefined].into_iter().map(|x| x.as_ptr().cast()));
        storage(0);
        fetch(std::ptr::null());
        fetch_lines(usize::MAX as *const u8, 2);
        assert_eq!(Vec::<f32>::try_from(&view).unwrap(), [2.0, 3.0, 4.0]);
        assert_eq!(t.f_sum(tch::Kind::Float).unwrap().double_value(&[]), 15.0);
        assert!(!undefined.defined());
    }
}
