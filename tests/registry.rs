//! Handles and bad input: reference counting, aliases, generation checks after slot reuse,
//! wrong handle kinds, and each error with its status and a message that says what was wrong.
//! Every test ends with this thread's live count where it began.

mod common;
use common::{leak_free, small};
use tensorref::ffi::{self, TrScope, TrTensor};
use tensorref::{DType, Error, Scope, Status, Tensor, TensorId};

#[test]
fn retain_release_alias() {
    leak_free(|| {
        let t = small()?;
        let extra = t.retain()?;
        assert_eq!(extra.id(), t.id());
        drop(extra);
        assert!(t.is_valid(), "one reference left");
        let alias = t.alias()?;
        assert_ne!(alias.id(), t.id());
        t.add_scalar_inplace_check(&alias)?;
        drop(t);
        assert!(alias.is_valid(), "disposing one alias leaves the other");
        Ok(())
    });
}

trait InplaceCheck {
    fn add_scalar_inplace_check(&self, alias: &Tensor) -> tensorref::Result<()>;
}

impl InplaceCheck for Tensor {
    /// Aliases share storage: an in-place write through one is seen through the other.
    fn add_scalar_inplace_check(&self, alias: &Tensor) -> tensorref::Result<()> {
        self.add_(&Tensor::ones(&[2, 2], DType::F32)?)?;
        assert_eq!(alias.to_vec::<f32>()?, [1.0; 4]);
        Ok(())
    }
}

#[test]
fn stale_after_release_and_after_slot_reuse() {
    leak_free(|| {
        let t = small()?;
        let id = t.id();
        t.dispose()?;
        let err = Tensor::from_raw(id).dispose().unwrap_err();
        assert_eq!(err.status(), Status::TR_ERR_STALE_HANDLE);
        assert!(err.to_string().contains("stale tensor handle"), "{err}");
        // Reuse the slot: the slab hands back the most recently freed slot first, though a test
        // on another thread may take it for a while; hold what we make until it comes back.
        let mut fresh = Vec::new();
        while !fresh.iter().any(|f: &Tensor| f.id().0 as u32 == id.0 as u32) {
            assert!(fresh.len() < 100_000, "the slot never came back");
            fresh.push(small()?);
        }
        let stale = std::mem::ManuallyDrop::new(Tensor::from_raw(id));
        assert!(matches!(stale.shape(), Err(Error::StaleHandle { .. })));
        Ok(())
    });
}

#[test]
fn wrong_kind_and_garbage_handles_are_invalid() {
    leak_free(|| {
        let s = Scope::new();
        let as_tensor = std::mem::ManuallyDrop::new(Tensor::from_raw(TensorId(s.id().0)));
        let err = as_tensor.numel().unwrap_err();
        assert_eq!(err.status(), Status::TR_ERR_INVALID_HANDLE);
        assert!(err.to_string().contains("scope handle, not a tensor"), "{err}");
        for garbage in [0u64, 1, u64::MAX, 0x7fff_ffff_0000_0001] {
            let g = std::mem::ManuallyDrop::new(Tensor::from_raw(TensorId(garbage)));
            assert_eq!(g.numel().unwrap_err().status(), Status::TR_ERR_INVALID_HANDLE, "{garbage:#x}");
        }
        Ok(())
    });
}

#[test]
fn shape_and_dtype_errors_name_the_problem() {
    leak_free(|| {
        let a = Tensor::ones(&[2, 3], DType::F32)?;
        let b = Tensor::ones(&[4, 5], DType::F32)?;
        let err = a.matmul(&b).unwrap_err();
        assert_eq!(err.status(), Status::TR_ERR_SHAPE);
        assert!(err.to_string().contains("2x3 and 4x5"), "{err}");

        let wrong = Tensor::from_bytes(&[0u8; 7], &[2], DType::F32).unwrap_err();
        assert_eq!(wrong.status(), Status::TR_ERR_SHAPE);
        assert!(wrong.to_string().contains("needs 8 bytes, 7 were given"), "{wrong}");

        let ints = Tensor::ones(&[3], DType::I64)?;
        let err = ints.to_vec::<f32>().unwrap_err();
        assert_eq!(err.status(), Status::TR_ERR_DTYPE);
        let idx = Tensor::ones(&[2], DType::F32)?;
        let err = Tensor::ones(&[4, 2], DType::F32)?.index_select(0, &idx).unwrap_err();
        assert!(matches!(err.status(), Status::TR_ERR_DTYPE | Status::TR_ERR_TORCH), "{err:?}");
        assert!(DType::from_code(42).is_err());
        Ok(())
    });
}

#[test]
fn c_boundary_reports_status_message_and_writes_outputs_only_on_success() {
    leak_free(|| {
        let mut out = TrTensor { id: 77 };
        let st = ffi::tr_tensor_matmul(TrTensor { id: 0 }, TrTensor { id: 0 }, &mut out);
        assert_eq!(st, Status::TR_ERR_INVALID_HANDLE);
        assert_eq!(out.id, 77, "untouched on failure");
        assert!(last_error().contains("invalid tensor handle"), "{}", last_error());

        assert_eq!(ffi::tr_tensor_zeros([2i64].as_ptr(), 1, 6, std::ptr::null_mut()), Status::TR_ERR_NULL_ARG);
        assert!(last_error().contains("`out` is NULL"));
        assert_eq!(ffi::tr_tensor_zeros(std::ptr::null(), 1, 6, &mut out), Status::TR_ERR_NULL_ARG);
        assert_eq!(ffi::tr_tensor_zeros([2i64].as_ptr(), 1, 99, &mut out), Status::TR_ERR_INVALID_ARG);
        assert!(last_error().contains("unknown dtype code 99"));

        let t = small()?;
        let mut dims = [0i64; 1];
        let mut ndim = 0usize;
        let st = ffi::tr_tensor_shape(t.id().into(), dims.as_mut_ptr(), 1, &mut ndim);
        assert_eq!((st, ndim), (Status::TR_ERR_BUFFER_TOO_SMALL, 2), "needed size still reported");
        let mut needed = 0usize;
        let st = ffi::tr_last_error(std::ptr::null_mut(), 0, &mut needed);
        assert_eq!(st, Status::TR_ERR_BUFFER_TOO_SMALL);
        assert_eq!(needed, last_error().len());

        assert_eq!(ffi::tr_tensor_release(TrTensor { id: 0 }), Status::TR_OK, "releasing 0 is a no-op");
        assert_eq!(ffi::tr_scope_dispose(TrScope { id: 0 }), Status::TR_OK);
        Ok(())
    });
}

#[test]
fn live_bytes_follow_handles() {
    // The count is the process's, and the other tests of this file run beside this one: 16 MiB,
    // against at most 1 MiB that they may make or free meanwhile.
    const BYTES: u64 = 16 << 20;
    const OTHERS: u64 = 1 << 20;
    leak_free(|| {
        let cpu = tch::Device::Cpu;
        let before = tensorref::live_bytes(cpu);
        let t = Tensor::zeros(&[(BYTES / 8) as i64], DType::F64)?;
        assert_eq!(t.device()?, cpu);
        let held = tensorref::live_bytes(cpu);
        assert!(held + OTHERS >= before + BYTES, "{held} bytes live, {before} before");
        drop(t);
        assert!(tensorref::live_bytes(cpu) + BYTES <= held + OTHERS, "releasing the handle gave its {BYTES} bytes back");
        Ok(())
    });
}

#[test]
fn status_texts_are_static_and_distinct() {
    let codes = [0, 100, 101, 102, 200, 201, 300, 400, 401, 500, 501, 502, 600, 900];
    let texts: std::collections::HashSet<_> = codes.iter().map(|&c| Status::describe(c)).collect();
    assert_eq!(texts.len(), codes.len());
    assert_eq!(Status::describe(12345).to_str().unwrap(), "unknown status code");
}

fn last_error() -> String {
    let mut buf = [0 as std::ffi::c_char; 512];
    let mut len = 0;
    assert_eq!(ffi::tr_last_error(buf.as_mut_ptr(), buf.len(), &mut len), Status::TR_OK);
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

#[test]
fn libtorch_messages_map_to_their_status_group() {
    leak_free(|| {
        let b = Tensor::ones(&[2], DType::Bool)?;
        assert_eq!(b.sub(&b).unwrap_err().status(), Status::TR_ERR_DTYPE, "bool subtraction");
        let idx = Tensor::zeros(&[2, 2], DType::I64)?;
        let err = Tensor::ones(&[4, 2], DType::F32)?.index_select(0, &idx).unwrap_err();
        assert_eq!(err.status(), Status::TR_ERR_SHAPE, "{err}");
        Ok(())
    });
}

#[test]
fn release_many_releases_every_live_handle_and_reports_the_first_bad_one() {
    leak_free(|| {
        let ts: Vec<TrTensor> = (0..4).map(|_| small().map(|t| t.into_raw().into())).collect::<Result<_, _>>()?;
        let stale = ts[0];
        assert_eq!(ffi::tr_tensor_release(stale), Status::TR_OK);
        let mut batch = ts.clone();
        batch.push(TrTensor { id: 0 });
        assert_eq!(ffi::tr_tensor_release_many(batch.as_ptr(), batch.len()), Status::TR_ERR_STALE_HANDLE);
        for t in &ts[1..] {
            assert!(!Tensor::from_raw((*t).into()).is_valid(), "released despite the stale one");
        }
        assert_eq!(ffi::tr_tensor_release_many(std::ptr::null(), 0), Status::TR_OK);
        Ok(())
    });
}
