//! The device-placement sweep: every op of the table runs with its tensor inputs on libtorch's
//! `meta` device (shapes and dtypes, no data), and every tensor it returns must be on meta too.
//! An op body that makes a tensor on the CPU (a scalar, a constant, a mask) fails here exactly
//! as it would beside a CUDA input, so this catches on a machine without a GPU what would break
//! on one. The cases are generated from the op table (`cases.rs`, tools/emit_device_sweep.py):
//! a new op is covered automatically.

use super::generated::core;
use crate::dtype::DType::{self, Bool, F32, I64};
use crate::error::Result;
use crate::native::{is_meta, to_meta};
use crate::registry::{self, TensorId};

mod cases;

pub(super) struct Case {
    op: &'static str,
    /// The op has tensor inputs (a creation op makes host tensors by design).
    on_inputs: bool,
    run: fn() -> Result<Vec<TensorId>>,
}

/// A registered meta tensor.
fn m(shape: &[i64], dtype: DType) -> TensorId {
    let host = tch::Tensor::f_empty(shape, (dtype.kind(), tch::Device::Cpu)).expect("an empty host tensor");
    registry::insert(to_meta(&host).expect("a meta tensor"))
}

/// A meta parameter whose gradient a backward pass has filled.
fn p(shape: &[i64]) -> TensorId {
    let param = to_meta(&tch::Tensor::f_empty(shape, (tch::Kind::Float, tch::Device::Cpu)).unwrap()).unwrap().set_requires_grad(true);
    param.f_mul(&param).and_then(|sq| sq.f_sum(None::<tch::Kind>)).and_then(|l| l.f_backward()).expect("backward on meta");
    registry::insert(param)
}

/// A meta scalar with an autograd graph behind it.
fn loss() -> TensorId {
    let param = to_meta(&tch::Tensor::f_empty([4], (tch::Kind::Float, tch::Device::Cpu)).unwrap()).unwrap().set_requires_grad(true);
    registry::insert(param.f_mul(&param).and_then(|sq| sq.f_sum(None::<tch::Kind>)).expect("a meta loss"))
}

fn on_meta(id: TensorId) -> bool {
    registry::get([id]).map(|[e]| is_meta(&e)).unwrap_or(false)
}

#[test]
fn every_op_keeps_what_it_makes_on_its_inputs_device() {
    let skipped: Vec<&str> = cases::NOT_ON_META.iter().map(|s| s.0).collect();
    let mut failures = vec![];
    crate::scope::with_scope(|_| -> Result<()> {
        for case in cases::cases().iter().filter(|c| !skipped.contains(&c.op)) {
            match (case.run)() {
                Err(e) => failures.push(format!(
                    "{}: {e} (a tensor made on another device than its inputs', or arguments that do not suit the op: \
                     give them in tools/emit_device_sweep.py)",
                    case.op
                )),
                Ok(made) if case.on_inputs => {
                    failures.extend(made.iter().filter(|&&id| !on_meta(id)).map(|_| format!("{}: returned a tensor off the meta device", case.op)));
                }
                Ok(made) => failures.extend(made.iter().filter(|&&id| on_meta(id)).map(|_| format!("{}: a creation op made a tensor off the host", case.op))),
            }
        }
        Ok(())
    })
    .unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn ops_listed_as_not_running_on_meta_still_fail_there() {
    crate::scope::with_scope(|_| -> Result<()> {
        for (op, why) in cases::NOT_ON_META {
            let case = cases::cases().into_iter().find(|c| c.op == *op).unwrap_or_else(|| panic!("{op} is not in the table"));
            assert!((case.run)().is_err(), "{op} runs on meta now ({why} no longer holds): remove it from NOT_ON_META");
        }
        Ok(())
    })
    .unwrap();
}

/// The sweep's premise: a CPU tensor beside a meta input is refused as beside a CUDA one.
#[test]
fn a_cpu_tensor_beside_a_meta_input_fails_as_beside_a_cuda_one() {
    let x = to_meta(&tch::Tensor::f_empty([4], (tch::Kind::Float, tch::Device::Cpu)).unwrap()).unwrap();
    let bound = tch::Tensor::f_from_slice(&[0.5f32]).unwrap().f_reshape(&[] as &[i64]).unwrap();
    let err = x.f_clamp_tensor(Some(&bound), Some(&bound)).unwrap_err().to_string();
    assert!(err.contains("Expected all tensors to be on the same device"), "{err}");
    let on_device = crate::ops::scalars::scalar(&x, 0.5).unwrap();
    assert!(is_meta(&on_device) && x.f_clamp_tensor(Some(&on_device), Some(&on_device)).is_ok());
}
