//! The bytes an op of the table with a body of its own will make, before the body runs, so that
//! room is reserved for them where the device's kernels allocate without asking the manager
//! (CUDA; see `Ticket::reserve`). Such an op has no one overload whose meta kernel to ask, as the
//! other front doors do (residency/core/outputs.cpp): its body runs over meta copies of its inputs
//! (their dtypes, sizes and strides, no data), which allocates nothing and computes nothing, and
//! its result's storage is new memory unless it is an input's (a view). A body that reads its
//! inputs' values cannot run so: it reserves nothing, and its result is counted unreserved.
//!
//! The answer depends on the op, its inputs' dtypes, sizes and strides and its other arguments,
//! never on values, and a model asks for the same ops over the same shapes at every iteration:
//! each answer is kept by that signature, and the body runs on meta once per signature (in a
//! Python process many of PyTorch's meta kernels are Python functions, about 100 us a call).

use crate::dtype::DType;
use crate::ops::kernels::{new_storage_bytes, to_meta};
use crate::ops::scalars::Scalar;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// What an answer depends on, as words: the op's name, its other arguments, then each input.
type Signature = Vec<i64>;

/// An op's argument other than its tensors, as words of the signature.
pub(crate) trait Words {
    fn words(&self, s: &mut Signature);
}

impl Words for i64 {
    fn words(&self, s: &mut Signature) {
        s.push(*self);
    }
}

impl Words for bool {
    fn words(&self, s: &mut Signature) {
        s.push(i64::from(*self));
    }
}

impl Words for f64 {
    fn words(&self, s: &mut Signature) {
        s.push(self.to_bits() as i64);
    }
}

impl Words for &[i64] {
    fn words(&self, s: &mut Signature) {
        s.push(self.len() as i64);
        s.extend_from_slice(self);
    }
}

impl Words for DType {
    fn words(&self, s: &mut Signature) {
        s.push(*self as i64);
    }
}

impl Words for Scalar {
    fn words(&self, s: &mut Signature) {
        let (tag, i, f) = self.tagged(); // the kind decides the result's dtype, the value nothing
        s.extend([i64::from(tag), i, f.to_bits() as i64]);
    }
}

/// The bytes of the new storage `run` makes over `inputs` (None for an absent optional one), as
/// the op `op` with the other arguments `values`; None where `run` fails on meta.
pub(crate) fn meta_output_bytes(
    op: &'static str,
    values: &[&dyn Words],
    inputs: &[Option<&tch::Tensor>],
    run: impl FnOnce(&[Option<&tch::Tensor>]) -> crate::error::Result<tch::Tensor>,
) -> Option<u64> {
    let mut signature: Signature = vec![op.as_ptr() as i64, op.len() as i64];
    values.iter().for_each(|v| v.words(&mut signature));
    for input in inputs {
        match input {
            None => signature.push(-1),
            Some(t) => {
                signature.extend([t.kind() as i64, t.dim() as i64]);
                signature.extend(t.size());
                signature.extend(t.stride());
            }
        }
    }
    if let Some(known) = kept().lock().unwrap_or_else(|e| e.into_inner()).get(&signature) {
        return *known;
    }
    let bytes = on_meta(inputs, run);
    let mut kept = kept().lock().unwrap_or_else(|e| e.into_inner());
    if kept.len() >= MOST_KEPT {
        kept.clear();
    }
    kept.insert(signature, bytes);
    bytes
}

/// `run` over meta copies of `inputs`: its result's new bytes.
fn on_meta(inputs: &[Option<&tch::Tensor>], run: impl FnOnce(&[Option<&tch::Tensor>]) -> crate::error::Result<tch::Tensor>) -> Option<u64> {
    let metas = inputs.iter().map(|i| i.map(to_meta).transpose()).collect::<Result<Vec<_>, _>>().ok()?;
    let out = run(&metas.iter().map(Option::as_ref).collect::<Vec<_>>()).ok()?;
    new_storage_bytes(&out, metas.iter().flatten()).ok()
}

/// The answers so far, by signature (emptied when it holds this many).
const MOST_KEPT: usize = 1 << 16;

fn kept() -> &'static Mutex<HashMap<Signature, Option<u64>>> {
    static KEPT: OnceLock<Mutex<HashMap<Signature, Option<u64>>>> = OnceLock::new();
    KEPT.get_or_init(Mutex::default)
}
