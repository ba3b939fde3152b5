//! The ops that call a kernel generated from libtorch's schema (tools/schema.py,
//! tools/emit_aten.py): every public overload the generator takes, and the ops of ops.def with the
//! body `schema`. Their core functions name the op and its arguments, tensors as handles, and
//! hand them to the runner (run.rs), which passes them to the C++ kernel (generated/*.cpp) as an
//! array of `Arg`s; the kernel calls the schema's overload through libtorch's dispatcher and hands
//! its tensors back through `Results`. args.h is the C++ side of both.

pub(crate) mod kernels_generated;
pub(crate) mod run;

pub(crate) use kernels_generated as kernels;

use crate::dtype::DType;
use crate::ops::scalars::Scalar;
use crate::registry::TensorId;
use crate::shim::{Result, ERR_LEN};
use smallvec::SmallVec;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::marker::PhantomData;
use tch::TchError;

/// The tags of args.h.
#[repr(i32)]
#[derive(Clone, Copy)]
enum Tag {
    None = 0,
    Tensor = 1,
    Tensors = 2,
    Int = 3,
    Ints = 4,
    Float = 5,
    Floats = 6,
    Bool = 7,
    Scalar = 9,
    DType = 10,
    Str = 11,
    // Handles, which the runner (run.rs) replaces with the tensors above before a kernel sees
    // them: `i` the handle, or `p` and `len` a list of them (`TensorId`s).
    Handle = 100,
    HandleMut = 101,
    OptHandle = 102,
    Handles = 103,
    OptHandles = 104,
}

/// One argument of a kernel, borrowing what it points to for `'a`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Arg<'a> {
    tag: Tag,
    i: i64,
    f: f64,
    p: *const c_void,
    len: usize,
    _borrows: PhantomData<&'a ()>,
}

impl<'a> Arg<'a> {
    fn new(tag: Tag, i: i64, f: f64, p: *const c_void, len: usize) -> Self {
        Arg { tag, i, f, p, len, _borrows: PhantomData }
    }
    fn slice<T>(tag: Tag, s: &'a [T]) -> Self {
        Arg::new(tag, 0, 0.0, s.as_ptr().cast(), s.len())
    }
    fn none() -> Self {
        Arg::new(Tag::None, 0, 0.0, std::ptr::null(), 0)
    }
    fn opt<T>(v: Option<T>, some: impl FnOnce(T) -> Self) -> Self {
        v.map_or(Arg::none(), some)
    }
    pub(crate) fn tensor(t: &'a tch::Tensor) -> Self {
        Arg::new(Tag::Tensor, 0, 0.0, t.as_ptr().cast(), 0)
    }
    /// The tensor the op reads as `id` (run.rs looks it up).
    pub(crate) fn handle(id: TensorId) -> Self {
        Arg::new(Tag::Handle, id.0 as i64, 0.0, std::ptr::null(), 0)
    }
    /// The tensor an in-place op writes, as `id`.
    pub(crate) fn handle_mut(id: TensorId) -> Self {
        Arg::new(Tag::HandleMut, id.0 as i64, 0.0, std::ptr::null(), 0)
    }
    /// An optional tensor: handle 0 for none.
    pub(crate) fn opt_handle(id: TensorId) -> Self {
        Arg::new(Tag::OptHandle, id.0 as i64, 0.0, std::ptr::null(), 0)
    }
    pub(crate) fn handles(ids: &'a [TensorId]) -> Self {
        Arg::slice(Tag::Handles, ids)
    }
    /// A list of optional tensors: handle 0 for none.
    pub(crate) fn opt_handles(ids: &'a [TensorId]) -> Self {
        Arg::slice(Tag::OptHandles, ids)
    }
    pub(crate) fn int(i: i64) -> Self {
        Arg::new(Tag::Int, i, 0.0, std::ptr::null(), 0)
    }
    pub(crate) fn opt_int(i: Option<i64>) -> Self {
        Arg::opt(i, Arg::int)
    }
    pub(crate) fn ints(v: &'a [i64]) -> Self {
        Arg::slice(Tag::Ints, v)
    }
    pub(crate) fn opt_ints(v: Option<&'a [i64]>) -> Self {
        Arg::opt(v, Arg::ints)
    }
    pub(crate) fn float(f: f64) -> Self {
        Arg::new(Tag::Float, 0, f, std::ptr::null(), 0)
    }
    pub(crate) fn opt_float(f: Option<f64>) -> Self {
        Arg::opt(f, Arg::float)
    }
    pub(crate) fn floats(v: &'a [f64]) -> Self {
        Arg::slice(Tag::Floats, v)
    }
    pub(crate) fn opt_floats(v: Option<&'a [f64]>) -> Self {
        Arg::opt(v, Arg::floats)
    }
    pub(crate) fn bool(b: bool) -> Self {
        Arg::new(Tag::Bool, i64::from(b), 0.0, std::ptr::null(), 0)
    }
    pub(crate) fn opt_bool(b: Option<bool>) -> Self {
        Arg::opt(b, Arg::bool)
    }
    pub(crate) fn scalar(s: Scalar) -> Self {
        let (kind, i, f) = s.tagged();
        Arg::new(Tag::Scalar, i, f, std::ptr::null(), kind as usize)
    }
    pub(crate) fn opt_scalar(s: Option<Scalar>) -> Self {
        Arg::opt(s, Arg::scalar)
    }
    /// DType codes are c10's ScalarType numbers.
    pub(crate) fn dtype(d: DType) -> Self {
        Arg::new(Tag::DType, d as i64, 0.0, std::ptr::null(), 0)
    }
    pub(crate) fn opt_dtype(d: Option<DType>) -> Self {
        Arg::opt(d, Arg::dtype)
    }
    pub(crate) fn str(s: &'a str) -> Self {
        Arg::new(Tag::Str, 0, 0.0, s.as_ptr().cast(), s.len())
    }
    pub(crate) fn opt_str(s: Option<&'a str>) -> Self {
        Arg::opt(s, Arg::str)
    }
}

/// Where a kernel puts its results (args.h's `Results`).
#[repr(C)]
pub(crate) struct Results {
    ctx: *mut c_void,
    push: extern "C" fn(*mut c_void, *mut c_void),
    i: i64,
    first: *mut c_void,
}

/// The tensors an op made, in order: a few, held without a heap allocation.
pub(crate) type Made = SmallVec<[tch::Tensor; 2]>;

/// A kernel's results: its tensors and its value.
struct Collected {
    tensors: Made,
    i: i64,
}

/// Takes a kernel's tensor (a new heap `at::Tensor*`, which tch's Tensor then owns) that did not
/// go to `Results::first`.
type Push = extern "C" fn(*mut c_void, *mut c_void);

extern "C" fn push(ctx: *mut c_void, tensor: *mut c_void) {
    // SAFETY: `ctx` is the `tensors` of the `call` running the kernel, which is waiting for it
    // on this thread; `tensor` is as `Push` says.
    let tensors = unsafe { &mut *ctx.cast::<Made>() };
    tensors.push(unsafe { tch::Tensor::from_ptr(tensor.cast()) });
}

extern "C" fn drop_tensor(_: *mut c_void, tensor: *mut c_void) {
    // SAFETY: as `Push` says.
    drop(unsafe { tch::Tensor::from_ptr(tensor.cast()) });
}

/// A generated kernel (kernels_generated.rs).
pub(crate) type Kernel = unsafe extern "C" fn(*const Arg, *mut Results, *mut c_char, usize) -> c_int;

/// Runs `kernel` (the schema's overload `op`) on `args`, handing its tensors to `push` with `ctx`
/// as `Results` says: its first tensor when `ctx` is null, and its value.
fn run(kernel: Kernel, op: &str, args: &[Arg], ctx: *mut c_void, push: Push) -> Result<(Option<tch::Tensor>, i64)> {
    let mut results = Results { ctx, push, i: 0, first: std::ptr::null_mut() };
    // Only a failed kernel writes (and NUL-terminates) its message, so the buffer is not cleared.
    let mut err = std::mem::MaybeUninit::<[c_char; ERR_LEN]>::uninit();
    let err_ptr = err.as_mut_ptr().cast::<c_char>();
    // SAFETY: the arguments borrow what they point to for the call; `results` and `err` outlive
    // it; the kernel reads as many arguments as the generator gave it (its own overload's).
    let status = unsafe { kernel(args.as_ptr(), &mut results, err_ptr, ERR_LEN) };
    // SAFETY: `first` is null or a new heap `at::Tensor*`, which tch's Tensor then owns.
    let first = (!results.first.is_null()).then(|| unsafe { tch::Tensor::from_ptr(results.first.cast()) });
    if status != 0 {
        // SAFETY: a failed kernel wrote a NUL-terminated message into the buffer (guarded.h).
        let msg = unsafe { CStr::from_ptr(err_ptr) }.to_string_lossy();
        return Err(TchError::Torch(format!("{op}: {msg}")));
    }
    Ok((first, results.i))
}

// The shim is internal: keep it out of the public header.
#[allow(unused_doc_comments)]
/// cbindgen:ignore
extern "C" {
    fn tr_aten_output_bytes(op: *const c_char, len: usize, args: *const Arg, n: usize, bytes: *mut u64, known: *mut c_int, err: *mut c_char, err_len: usize) -> c_int;
}

/// The bytes of the new storages the kernel of the schema's overload `op` will make for its
/// outputs on `args`, told by the op's meta kernel before it runs (outputs.cpp beside this file);
/// None where that cannot be told (sizes that depend on the data), or asking failed.
pub(crate) fn output_bytes(op: &str, args: &[Arg]) -> Option<u64> {
    let (mut bytes, mut known) = (0u64, 0 as c_int);
    // SAFETY: `op` and `args` are borrowed for the call, the outputs live across it.
    let asked = crate::shim::run("the sizes of an op's outputs", |err, len| unsafe {
        tr_aten_output_bytes(op.as_ptr().cast(), op.len(), args.as_ptr(), args.len(), &mut bytes, &mut known, err, len)
    });
    (asked.is_ok() && known != 0).then_some(bytes)
}

/// Runs `kernel` (the schema's overload `op`) on `args`: all it made.
fn call(kernel: Kernel, op: &str, args: &[Arg]) -> Result<Collected> {
    let mut tensors = Made::new();
    let (_, i) = run(kernel, op, args, (&mut tensors as *mut Made).cast(), push)?;
    Ok(Collected { tensors, i })
}

/// Runs `kernel` (the schema's overload `op`) on `args`: the first tensor it made, if any.
fn call_one(kernel: Kernel, op: &str, args: &[Arg]) -> Result<Option<tch::Tensor>> {
    Ok(run(kernel, op, args, std::ptr::null_mut(), drop_tensor)?.0)
}

/// The element type of c10's ScalarType number `code`, which `op` returned.
fn dtype_of(op: &str, code: i64) -> Result<DType> {
    i32::try_from(code).ok().and_then(|c| DType::try_from(c).ok()).ok_or_else(|| {
        TchError::Torch(format!("{op}: element type {code}, which the library does not have"))
    })
}
