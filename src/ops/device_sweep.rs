//! The device-placement sweep: every op of the table runs with its tensor inputs on libtorch's
//! `meta` device (shapes and dtypes, no data), and every tensor it returns must be on meta too.
//! An op body that makes a tensor on the CPU (a scalar, a constant, a mask) fails here exactly
//! as it would beside a CUDA input, so this catches on a machine without a GPU what would break
//! on one. The cases are generated from the op table (`cases_generated.rs`, tools/emit_device_sweep.py):
//! a new op is covered automatically. With `--features cuda-tests` the same cases run through
//! the manager on CUDA and are compared with plain tch on CUDA.

use super::generated::core;
use super::scalars::Scalar;
use crate::dtype::DType::{self, Bool, F32, F64, I64};
use crate::error::Result;
use crate::ops::kernels::{is_meta, to_meta};
use crate::registry::{self, TensorId};

mod cases_generated;

pub(super) struct Case {
    op: &'static str,
    /// The op has tensor inputs (a creation op makes host tensors by design).
    on_inputs: bool,
    /// Generated from libtorch's schema (its body is one call of the op's own kernel).
    generated: bool,
    run: fn() -> Result<Vec<TensorId>>,
}

/// Where the cases' tensor inputs are made: on meta for the sweep; in host memory, or on CUDA,
/// with seeded values for the check against plain tch on CUDA.
#[derive(Clone, Copy, PartialEq)]
enum Inputs {
    Meta,
    #[cfg_attr(not(feature = "cuda-tests"), allow(dead_code))]
    Host,
    #[cfg_attr(not(feature = "cuda-tests"), allow(dead_code))]
    Cuda,
}

thread_local! {
    static INPUTS: std::cell::Cell<Inputs> = const { std::cell::Cell::new(Inputs::Meta) };
}

/// A tensor for a case: seeded values (integers in 0..3, valid indices for every case), placed
/// as `INPUTS` says.
fn make(shape: &[i64], dtype: DType) -> tch::Tensor {
    let cpu = tch::Device::Cpu;
    let host = match dtype {
        I64 => tch::Tensor::f_randint(3, shape, (tch::Kind::Int64, cpu)),
        Bool => tch::Tensor::f_rand(shape, (tch::Kind::Float, cpu)).and_then(|t| t.f_lt(0.5)),
        _ => tch::Tensor::f_randn(shape, (dtype.kind(), cpu)),
    }
    .expect("a seeded host tensor");
    match INPUTS.with(std::cell::Cell::get) {
        Inputs::Meta => to_meta(&host).expect("a meta tensor"),
        Inputs::Host => host,
        Inputs::Cuda => host.to_device(tch::Device::Cuda(0)),
    }
}

/// A registered input tensor.
fn m(shape: &[i64], dtype: DType) -> TensorId {
    registry::insert(make(shape, dtype))
}

/// Placed as `INPUTS` says.
fn placed(host: tch::Tensor) -> TensorId {
    registry::insert(match INPUTS.with(std::cell::Cell::get) {
        Inputs::Meta => to_meta(&host).expect("a meta tensor"),
        Inputs::Host => host,
        Inputs::Cuda => host.to_device(tch::Device::Cuda(0)),
    })
}

fn host_f32(shape: &[i64]) -> tch::Tensor {
    tch::Tensor::f_randn(shape, (tch::Kind::Float, tch::Device::Cpu)).expect("a seeded host tensor")
}

/// Positive values.
fn pos(shape: &[i64]) -> TensorId {
    placed(host_f32(shape).abs() + 0.1)
}

/// Values in (0, 1).
fn unit(shape: &[i64]) -> TensorId {
    placed(host_f32(shape).sigmoid())
}

/// A symmetric positive-definite n x n matrix.
fn spd(n: i64) -> TensorId {
    let a = host_f32(&[n, n]);
    placed(a.matmul(&a.tr()) + tch::Tensor::eye(n, (tch::Kind::Float, tch::Device::Cpu)))
}

/// Sorted values.
fn sorted(n: i64) -> TensorId {
    placed(host_f32(&[n]).sort(0, false).0)
}

/// LU pivots of an n x n matrix (int32, 1-based): no row swapped.
fn pivots(n: i64) -> TensorId {
    placed(tch::Tensor::arange_start(1, n + 1, (tch::Kind::Int, tch::Device::Cpu)))
}

/// Complex values (libtorch's complex64).
fn cplx(shape: &[i64]) -> TensorId {
    let pairs: Vec<i64> = shape.iter().copied().chain([2]).collect();
    placed(host_f32(&pairs).view_as_complex())
}

/// An int64 tensor of these values that stays in host memory: an argument libtorch reads
/// on the host (split points, a bound).
fn host(values: &[i64]) -> TensorId {
    registry::insert(tch::Tensor::from_slice(values))
}

/// An int64 tensor of these values, placed as `INPUTS` says.
fn ints(values: &[i64]) -> TensorId {
    placed(tch::Tensor::from_slice(values))
}

/// A 0-dim int64 host tensor.
fn host_scalar(v: i64) -> TensorId {
    registry::insert(tch::Tensor::from(v))
}

/// A parameter whose gradient a backward pass has filled.
fn p(shape: &[i64]) -> TensorId {
    let param = make(shape, F32).set_requires_grad(true);
    param.f_mul(&param).and_then(|sq| sq.f_sum(None::<tch::Kind>)).and_then(|l| l.f_backward()).expect("a backward pass");
    registry::insert(param)
}

/// A scalar with an autograd graph behind it.
fn loss() -> TensorId {
    let param = make(&[4], F32).set_requires_grad(true);
    registry::insert(param.f_mul(&param).and_then(|sq| sq.f_sum(None::<tch::Kind>)).expect("a loss"))
}

fn on_meta(id: TensorId) -> bool {
    registry::get([id]).map(|[e]| is_meta(&e)).unwrap_or(false)
}

/// Why an op cannot run on meta in libtorch without Python: it has no meta kernel (PyTorch
/// registers many in Python, torch/_meta_registrations.py; convolutions reach the hook for
/// other backends; named tensors are CPU and CUDA only), or it reads its input's data.
fn no_meta_kernel(e: &crate::Error) -> bool {
    let text = e.to_string();
    const WHY: [&str; 5] = [
        "no fake impl or Meta kernel registered",
        "Cannot copy out of meta tensor",
        "its data is not allocated yet",
        "convolution_overrideable not implemented",
        "named tensors only support CPU",
    ];
    WHY
        .iter()
        .any(|why| text.contains(why))
}

/// Runs a case on host tensors instead of meta ones.
fn on_host(case: &Case) -> Result<Vec<TensorId>> {
    INPUTS.with(|i| i.set(Inputs::Host));
    let made = (case.run)();
    INPUTS.with(|i| i.set(Inputs::Meta));
    made
}

/// Every op of the table runs on meta inputs and keeps what it makes there. An op generated
/// from the schema that libtorch cannot run on meta (`no_meta_kernel`) runs on host tensors
/// instead, so that every generated op is called with its arguments once; the test prints them.
#[test]
fn every_op_keeps_what_it_makes_on_its_inputs_device() {
    let skipped: Vec<&str> = cases_generated::NOT_ON_META.iter().chain(cases_generated::NOT_SAMPLED).map(|s| s.0).collect();
    let mut failures = vec![];
    let mut host = vec![];
    crate::scope::with_scope(|_| -> Result<()> {
        for case in cases_generated::cases().iter().filter(|c| !skipped.contains(&c.op)) {
            let made = match (case.run)() {
                Err(e) if case.generated && no_meta_kernel(&e) => {
                    host.push(case.op);
                    match on_host(case) {
                        Ok(made) if made.iter().any(|&id| on_meta(id)) => Err(crate::Error::Device("a meta tensor from host inputs".into())),
                        other => other.map(|_| vec![]),
                    }
                }
                made => made,
            };
            match made {
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
    println!("{} generated ops without a meta kernel ran on host tensors: {}", host.len(), host.join(" "));
    assert!(failures.is_empty(), "{} of {} ops failed:\n{}", failures.len(), cases_generated::cases().len(), failures.join("\n"));
}

#[test]
fn ops_listed_as_not_running_on_meta_still_fail_there() {
    crate::scope::with_scope(|_| -> Result<()> {
        let case = |op: &str| cases_generated::cases().into_iter().find(|c| c.op == op).unwrap_or_else(|| panic!("{op} is not in the table"));
        for (op, why) in cases_generated::NOT_ON_META {
            assert!((case(op).run)().is_err(), "{op} runs on meta now ({why} no longer holds): remove it from NOT_ON_META");
        }
        for (op, why) in cases_generated::NOT_SAMPLED {
            assert!(on_host(&case(op)).is_err(), "{op} runs with sampled arguments now ({why} no longer holds): remove it from NOT_SAMPLED");
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

/// Every op of the table through the manager (Resident; Genoa and Flow at a tight budget) gives
/// what plain tch gives on CUDA: the same op on the same values, run without a manager on CUDA
/// inputs. The autograd ops are left out: they have no values of their own to compare
/// (tests/training.rs compares training through the manager with training without it).
#[cfg(feature = "cuda-tests")]
#[test]
fn every_op_under_the_manager_matches_plain_tch_on_cuda() {
    use crate::residency::{self, Device, Config, Policy};
    const AUTOGRAD: [&str; 8] = ["backward", "grad", "zero_grad", "clear_grad", "optim_sgd_step", "optim_adam_step", "requires_grad_", "requires_grad"];
    let run = |case: &Case, inputs: Inputs| -> Result<Vec<Vec<f64>>> {
        INPUTS.with(|i| i.set(inputs));
        crate::manual_seed(7);
        crate::scope::with_scope(|_| {
            (case.run)()?
                .into_iter()
                .map(|id| {
                    let [e] = registry::get([id])?;
                    let data = crate::residency::readable(&e)?;
                    let host = data.f_to_kind(tch::Kind::Double)?.f_to_device(tch::Device::Cpu)?.f_flatten(0, -1)?;
                    Ok(Vec::<f64>::try_from(&host).map_err(crate::Error::from)?)
                })
                .collect()
        })
    };
    let mut failures = vec![];
    let _grad = crate::NoGradGuard::new();
    for case in cases_generated::cases().iter().filter(|c| !AUTOGRAD.contains(&c.op)) {
        let expected = match run(case, Inputs::Cuda) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{}: plain tch on CUDA failed: {e}", case.op));
                continue;
            }
        };
        for (policy, budget) in [(Policy::Resident, 1 << 30), (Policy::Genoa, 4096), (Policy::Flow, 4096)] {
            residency::configure(Config::new(Device::Cuda(0), policy, budget)).unwrap();
            let got = run(case, Inputs::Host);
            residency::disable().unwrap();
            match got {
                Err(e) => failures.push(format!("{} under {policy:?}: {e}", case.op)),
                Ok(got) if got.len() != expected.len() => failures.push(format!("{} under {policy:?}: {} results, {} expected", case.op, got.len(), expected.len())),
                Ok(got) => {
                    for (g, e) in got.iter().zip(&expected) {
                        let worst = g.iter().zip(e).map(|(a, b)| (a - b).abs() / (1.0 + b.abs())).fold(0.0, f64::max);
                        if g.len() != e.len() || !(worst <= 1e-5) {
                            failures.push(format!("{} under {policy:?}: differs from plain tch by {worst:e} (relative)", case.op));
                        }
                    }
                }
            }
        }
    }
    INPUTS.with(|i| i.set(Inputs::Meta));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
