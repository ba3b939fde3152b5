//! The views of device copies an op's inputs are, and the homes of its results: each goes back
//! here when it dies, and the next ones are made from those that came back untouched, pointed at
//! another storage (op_views.cpp beside this file has the why and the rules).

use std::ffi::c_void;

#[allow(unused_doc_comments)]
/// cbindgen:ignore
extern "C" {
    fn tr_native_give_back(t: *mut c_void);
}

/// Frees an op's view of a device copy or a result's home, keeping its TensorImpl for a later
/// one where it may (installed as the registry's hook for dying recycled entries:
/// `Entry::recycled`).
pub(crate) fn done(mut view: tch::Tensor) {
    let p = view.as_mut_ptr();
    std::mem::forget(view);
    // SAFETY: `p` is the heap at::Tensor `view` owned, whose ownership passes to the shim.
    unsafe { tr_native_give_back(p.cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::residency::torch_storage::{device_view, tensor_impl, StorageRef};
    use tch::kind::FLOAT_CPU;

    extern "C" {
        fn tr_native_op_views_kept() -> usize;
    }

    /// How many views this thread keeps.
    fn kept() -> usize {
        // SAFETY: reads the length of this thread's list.
        unsafe { tr_native_op_views_kept() }
    }

    /// Empties this thread's kept views (earlier tests on the thread may have left some), as
    /// many as the shim keeps at most.
    fn no_kept_views() {
        let t = tch::Tensor::f_ones([1], FLOAT_CPU).unwrap();
        let r = StorageRef::of(&t).unwrap();
        let taken: Vec<_> = (0..8).map(|_| device_view(&r, &t).unwrap()).collect();
        drop(taken);
        assert_eq!(kept(), 0);
    }

    /// A view an op let go of untouched becomes the next view made, of another storage and
    /// geometry; kept in between, it held no storage.
    #[test]
    fn an_untouched_view_is_made_again_over_the_next_storage() {
        no_kept_views();
        let (a, b) = (tch::Tensor::f_arange(8, FLOAT_CPU).unwrap(), tch::Tensor::f_ones([2, 3], FLOAT_CPU).unwrap());
        let (ra, rb) = (StorageRef::of(&a).unwrap(), StorageRef::of(&b).unwrap());
        let view = device_view(&ra, &a).unwrap();
        let (made, holders) = (tensor_impl(&view), ra.holders());
        done(view);
        assert_eq!(kept(), 1, "the view is kept");
        assert_eq!(ra.holders(), holders - 1, "a kept view holds no storage");
        let mut next = device_view(&rb, &b).unwrap();
        assert_eq!((kept(), tensor_impl(&next)), (0, made), "the kept TensorImpl serves again");
        assert_eq!(next.size(), [2, 3]);
        assert!(next.equal(&b), "it views the new storage's bytes");
        let version = rb.version();
        let _ = next.f_add_(&tch::Tensor::from(1f32)).unwrap();
        assert_eq!(rb.version(), version + 1, "a write through it counts on its storage's counter");
    }

    /// A result's home that dies with its entry is the next result's home; one that a handle
    /// still holds is not taken back.
    #[test]
    fn a_dead_home_is_the_next_home() {
        use crate::registry::Entry;
        use crate::residency::torch_storage::result_home;
        no_kept_views();
        crate::registry::on_recycled(done); // as a manager installs it
        let (a, b) = (tch::Tensor::f_arange(8, FLOAT_CPU).unwrap(), tch::Tensor::f_ones([2, 3], FLOAT_CPU).unwrap());
        let home = result_home(&a).unwrap().home;
        let made = tensor_impl(&home);
        drop(Entry::recycled(home));
        assert_eq!(kept(), 1, "the home is kept");
        let next = result_home(&b).unwrap().home;
        assert_eq!((kept(), tensor_impl(&next)), (0, made), "the kept TensorImpl is the next home");
        assert_eq!(next.size(), [2, 3], "shaped as its result");
        let held = next.shallow_clone();
        drop(Entry::recycled(next));
        assert_eq!(kept(), 0, "a home a handle still holds stays that handle's");
        assert_eq!(held.size(), [2, 3]);
    }

    /// A view anything else still holds, or one an op left autograd state on, is freed, not
    /// made again.
    #[test]
    fn a_view_held_elsewhere_or_touched_is_not_made_again() {
        no_kept_views();
        let a = tch::Tensor::f_arange(8, FLOAT_CPU).unwrap();
        let ra = StorageRef::of(&a).unwrap();
        let view = device_view(&ra, &a).unwrap();
        let (held, elsewhere) = (tensor_impl(&view), view.shallow_clone());
        done(view);
        assert_eq!(kept(), 0, "still held elsewhere");
        assert_ne!(tensor_impl(&device_view(&ra, &a).unwrap()), held);
        drop(elsewhere);
        let view = device_view(&ra, &a).unwrap();
        let touched = view.set_requires_grad(true);
        drop(view);
        done(touched);
        assert_eq!(kept(), 0, "autograd state stays with the op that set it");
        assert!(!device_view(&ra, &a).unwrap().requires_grad());
    }
}
