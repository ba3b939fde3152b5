//! Errors: the one `Error` enum every fallible function returns, the `Status` codes the C ABI
//! reports for them, and the mapping of libtorch's errors (which arrive as text) onto both.

use std::ffi::CStr;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use tensorref_derive::CEnum;

/// Result of every fallible libtensorref call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong. Each variant maps to one [`Status`] code of the C ABI.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("argument `{0}` is NULL")]
    NullArg(&'static str),
    #[error("invalid argument: {0}")]
    InvalidArg(String),
    #[error("output buffer too small: {needed} needed, {given} given")]
    BufferTooSmall { needed: usize, given: usize },
    #[error("stale {kind} handle {id:#x}: it was released or its scope was disposed")]
    StaleHandle { kind: HandleKind, id: u64 },
    #[error("invalid {kind} handle {id:#x}: {why}")]
    InvalidHandle { kind: HandleKind, id: u64, why: String },
    /// A pointer to an object the library hands out (an add-on's model) that is not one of the
    /// live ones: freed already, or never made by the library.
    #[error("{what} {addr:#x} is not live: it was freed, or the library never made it")]
    NotLive { what: &'static str, addr: usize },
    #[error("scope {0:#x} has been disposed")]
    ScopeDisposed(u64),
    #[error("shape mismatch: {0}")]
    Shape(String),
    #[error("dtype mismatch: {0}")]
    Dtype(String),
    #[error("device error: {0}")]
    Device(String),
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    #[error("device budget too small: `{op}` needs {needed} bytes at once, the budget is {budget} bytes")]
    BudgetTooSmall { op: String, needed: u64, budget: u64 },
    /// The op fits the budget by itself, but not beside what other running ops hold: it lets go
    /// of everything and runs again once room is freed (`ops::exec::admitted`), so callers never
    /// see it. `freed`: the count of frees when the op found no room (see `residency::room`).
    #[error("device budget busy: `{op}` waits for room other running ops hold")]
    RoomTaken { op: String, freed: u64 },
    #[error("libtorch: {0}")]
    Torch(String),
    #[error("file error: {0}")]
    Io(String),
    #[error("bad file format: {0}")]
    Format(String),
    #[error("panic inside libtensorref: {0}")]
    Panic(String),
}

/// The two kinds of handle, named in handle errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleKind {
    Tensor,
    Scope,
}

impl fmt::Display for HandleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HandleKind::Tensor => "tensor",
            HandleKind::Scope => "scope",
        })
    }
}

/// Status codes of the C ABI (`tr_status`, an `int32_t`). Grouped by hundreds; a released code
/// is never renumbered. Each code's doc comment is also its `tr_status_str` text. The groups,
/// one error class each in the bindings (tools/abi_manifest.py reads them from these lines into
/// the ABI manifest, from which the bindings' group checks are generated):
/// - 100-199 argument: a NULL pointer, a bad argument value, a buffer too small.
/// - 200-299 handle: a stale (released, disposed) or invalid handle.
/// - 300-399 scope: the scope was already disposed.
/// - 400-499 shape_dtype: the tensors' shapes or dtypes do not fit the operation.
/// - 500-599 device: a device is unavailable, tensors are on different devices, out of memory
///   (host or device), or the residency budget is too small.
/// - 600-699 torch: any other error reported by libtorch.
/// - 700-799 file: a file is missing or unreadable, or its contents are malformed.
/// - 900-999 panic: a bug in libtensorref, caught at the C boundary.
/// cbindgen:prefix-with-name=false
#[repr(i32)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, CEnum)]
#[c_enum(what = "status code")]
pub enum Status {
    /// OK: the call succeeded.
    TR_OK = 0,
    /// A required pointer argument was NULL.
    TR_ERR_NULL_ARG = 100,
    /// Invalid argument: out of range or inconsistent (lengths, codes, dimensions).
    TR_ERR_INVALID_ARG = 101,
    /// An output buffer was too small; the needed size was still reported.
    TR_ERR_BUFFER_TOO_SMALL = 102,
    /// Stale handle: it was released (or its scope disposed), also after its slot was reused.
    TR_ERR_STALE_HANDLE = 200,
    /// Invalid handle: never a handle of this kind (0, garbage, or a scope passed as a tensor).
    TR_ERR_INVALID_HANDLE = 201,
    /// The scope was disposed; only `tr_scope_dispose` accepts it (as a no-op).
    TR_ERR_SCOPE_DISPOSED = 300,
    /// Tensor shapes do not fit the operation.
    TR_ERR_SHAPE = 400,
    /// Tensor dtypes do not fit the operation.
    TR_ERR_DTYPE = 401,
    /// A device is unavailable or the tensors are on different devices.
    TR_ERR_DEVICE = 500,
    /// The allocator (host or device) ran out of memory.
    TR_ERR_OUT_OF_MEMORY = 501,
    /// The residency manager's device budget cannot hold one operation's working set.
    TR_ERR_BUDGET_TOO_SMALL = 502,
    /// Any other error reported by libtorch.
    TR_ERR_TORCH = 600,
    /// A file is missing or cannot be read.
    TR_ERR_IO = 700,
    /// A file's contents are malformed (truncated, corrupt, inconsistent).
    TR_ERR_FORMAT = 701,
    /// A bug: a panic was caught at the C boundary. The message says where.
    TR_ERR_PANIC = 900,
}

impl Status {
    /// Static English text for a status code (its doc comment); unknown codes get a generic text.
    pub fn describe(code: i32) -> &'static CStr {
        Status::try_from(code).map_or(c"unknown status code", Status::description)
    }
}

impl Error {
    /// The C status code for this error.
    pub fn status(&self) -> Status {
        use Status::*;
        match self {
            Error::NullArg(_) => TR_ERR_NULL_ARG,
            Error::InvalidArg(_) => TR_ERR_INVALID_ARG,
            Error::BufferTooSmall { .. } => TR_ERR_BUFFER_TOO_SMALL,
            Error::StaleHandle { .. } => TR_ERR_STALE_HANDLE,
            Error::InvalidHandle { .. } | Error::NotLive { .. } => TR_ERR_INVALID_HANDLE,
            Error::ScopeDisposed(_) => TR_ERR_SCOPE_DISPOSED,
            Error::Shape(_) => TR_ERR_SHAPE,
            Error::Dtype(_) => TR_ERR_DTYPE,
            Error::Device(_) => TR_ERR_DEVICE,
            Error::OutOfMemory(_) => TR_ERR_OUT_OF_MEMORY,
            Error::BudgetTooSmall { .. } | Error::RoomTaken { .. } => TR_ERR_BUDGET_TOO_SMALL,
            Error::Torch(_) => TR_ERR_TORCH,
            Error::Io(_) => TR_ERR_IO,
            Error::Format(_) => TR_ERR_FORMAT,
            Error::Panic(_) => TR_ERR_PANIC,
        }
    }
}

/// Panics caught and turned into errors (`panic_error`), by the C boundary and by the Rust
/// functions libtorch calls back into (see `tr_panics_caught`).
static PANICS: AtomicU64 = AtomicU64::new(0);

/// A caught panic as an error: the first line of its message. Counted.
#[cold]
pub(crate) fn panic_error(payload: Box<dyn std::any::Any + Send>) -> Error {
    PANICS.fetch_add(1, Ordering::Relaxed);
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".into());
    Error::Panic(text.lines().next().unwrap_or_default().to_string())
}

/// How many panics `panic_error` has counted in this process.
pub(crate) fn panics_caught() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

/// libtorch reports every failure as a `c10::Error` whose type tch flattens into text, so the
/// group is recovered from the message. Phrases come from ATen's checks; anything else stays
/// `Torch`. Only the first line is kept: the rest is a C++ backtrace.
impl From<tch::TchError> for Error {
    fn from(e: tch::TchError) -> Self {
        let text = match e {
            tch::TchError::Torch(m) => m,
            tch::TchError::Shape(m) => return Error::Shape(m),
            tch::TchError::Kind(m) | tch::TchError::Convert(m) => return Error::Dtype(m),
            other => return Error::Torch(other.to_string()),
        };
        let msg = text.lines().next().unwrap_or_default().trim().to_string();
        let lower = msg.to_ascii_lowercase();
        let has = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
        if has(&["out of memory", "failed to allocate", "defaultcpuallocator: can't allocate"]) {
            Error::OutOfMemory(msg)
        } else if has(&["expected all tensors to be on the same device", "cuda", "device"]) {
            Error::Device(msg)
        } else if has(&["dtype", "scalar type", "result type", "expected scalar", "not implemented for", "bool tensor", "must be of type"]) {
            Error::Dtype(msg)
        } else if has(&["size", "shape", "dimension", "dim ", "must match", "cannot be multiplied", "out of range", "invalid for input of size", "supposed to be a vector"]) {
            Error::Shape(msg)
        } else {
            Error::Torch(msg)
        }
    }
}
