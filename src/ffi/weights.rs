//! Model weights through the C ABI: a safetensors file loaded into tensor handles that fill the
//! caller's arrays (no new handle kind: each weight is an ordinary `tr_tensor`; its dtype and
//! shape come from `tr_tensor_dtype` / `tr_tensor_shape`).

use super::boundary::{call, out_arg, slice_out};
use super::handles::TrTensor;
use crate::error::{Error, Result};
use crate::weights::{self, Weights};
use std::ffi::{c_char, CStr};
use std::path::Path;

/// A NUL-terminated UTF-8 path argument.
pub(crate) fn path_arg<'a>(p: *const c_char, name: &'static str) -> Result<&'a Path> {
    if p.is_null() {
        return Err(Error::NullArg(name));
    }
    // SAFETY: the C caller passes a NUL-terminated string (documented on each function).
    let s = unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| Error::InvalidArg(format!("`{name}` is not UTF-8")))?;
    Ok(Path::new(s))
}

/// Loads every tensor of the safetensors file `path` (NUL-terminated UTF-8) into host memory.
///
/// On success `tensors[i]` receives a new handle for the i-th tensor in file order (owned by this
/// thread's current scope, or by the caller: release each), and `names` receives their names in
/// the same order, each NUL-terminated, back to back. `*out_count` and `*out_names_len` always
/// receive the tensor count and the bytes the names need (NULs included), also when a buffer is
/// too small: then nothing is loaded and TR_ERR_BUFFER_TOO_SMALL is returned. Call with
/// `tensors`/`names` NULL and lengths 0 to size the buffers (reads only the header).
///
/// The file is memory-mapped and each tensor copied once into its tensor; no second copy of the
/// file is held. Errors: TR_ERR_NULL_ARG (`path`, `out_count`, `out_names_len`, or a NULL buffer
/// with a nonzero length); TR_ERR_IO (missing or unreadable file); TR_ERR_FORMAT (truncated or
/// corrupt file, or a tensor name with a NUL byte); TR_ERR_DTYPE (a dtype libtensorref has no
/// type for, or an unknown one).
/// Nothing is written to `tensors` or `names` on error. Safe to call from any thread.
#[no_mangle]
pub extern "C" fn tr_weights_load(
    path: *const c_char,
    tensors: *mut TrTensor,
    tensors_len: usize,
    names: *mut c_char,
    names_len: usize,
    out_count: *mut usize,
    out_names_len: *mut usize,
) -> crate::error::Status {
    call(|| {
        let path = path_arg(path, "path")?;
        let out_count = out_arg(out_count, "out_count")?;
        let out_names_len = out_arg(out_names_len, "out_names_len")?;
        let tensors = slice_out(tensors, tensors_len, "tensors")?;
        let names = slice_out(names, names_len, "names")?;
        let info = weights::inspect(path)?;
        if let Some(bad) = info.iter().find(|i| i.name.contains('\0')) {
            return Err(Error::Format(format!(
                "{}: tensor name {:?} contains a NUL byte, which the NUL-separated names cannot carry",
                path.display(),
                bad.name
            )));
        }
        let needed_names: usize = info.iter().map(|i| i.name.len() + 1).sum();
        *out_count = info.len();
        *out_names_len = needed_names;
        if tensors.len() < info.len() {
            return Err(Error::BufferTooSmall { needed: info.len(), given: tensors.len() });
        }
        if names.len() < needed_names {
            return Err(Error::BufferTooSmall { needed: needed_names, given: names.len() });
        }
        let loaded = Weights::load(path)?.into_vec();
        let mut at = 0;
        for ((name, t), slot) in loaded.into_iter().zip(tensors.iter_mut()) {
            for (dst, src) in names[at..].iter_mut().zip(name.bytes().chain([0])) {
                *dst = src as c_char;
            }
            at += name.len() + 1;
            *slot = t.into_raw().into();
        }
        Ok(())
    })
}
