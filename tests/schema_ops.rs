//! Ops generated from libtorch's schema (tools/emit_aten.py), through the Rust API: each of a
//! sample that covers every kind of argument and result the generator handles (optional
//! tensors, lists of tensors and of optional tensors, optional numbers and lists, strings,
//! dtypes, lists of scalars, tuples and lists of results, in-place forms, values and element
//! types, more arguments than an op binds on the stack) equals libtorch called directly, without
//! a manager and under Flow on the simulated device at a budget that forces evictions. Errors
//! come back as errors (a list of the wrong fixed size and a dead handle among them), and nothing
//! leaks.

use std::sync::Mutex;
use tensorref::residency::{self, Config, Device, Policy};
use tensorref::{live_handles, no_grad, DType, Error, Result, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

fn t(x: &tch::Tensor) -> Tensor {
    Tensor::from_tch(x.shallow_clone())
}

fn same(ours: &Tensor, theirs: &tch::Tensor) {
    let ours = ours.with_tch(|o| o.to_device(tch::Device::Cpu)).unwrap();
    assert_eq!(ours.size(), theirs.size(), "shape");
    assert_eq!(ours.kind(), theirs.kind(), "dtype");
    assert!(ours.allclose(theirs, 1e-6, 1e-6, true), "values: {ours} vs {theirs}");
}

/// The sample: each op against libtorch's own call on the same inputs.
fn sample() -> Result<()> {
    tch::manual_seed(7);
    let x = tch::Tensor::randn([4, 6, 8], (tch::Kind::Float, tch::Device::Cpu));
    let w = tch::Tensor::rand([8], (tch::Kind::Float, tch::Device::Cpu));
    let (tx, tw) = (t(&x), t(&w));

    // Optional tensor and optional float.
    same(&tx.rms_norm(&[8], Some(&tw), Some(1e-5))?, &x.rms_norm([8], Some(&w), 1e-5));
    same(&tx.rms_norm(&[8], None, None)?, &x.rms_norm([8], None::<&tch::Tensor>, None));
    // Several tensors, optional tensor and float; keyword arguments in order.
    let (q, k, v) = (x.reshape([1, 4, 6, 8]), x.reshape([1, 4, 6, 8]) * 0.5, x.reshape([1, 4, 6, 8]) + 1.0);
    let ours = t(&q).scaled_dot_product_attention(&t(&k), &t(&v), None, 0.0, true, None, false)?;
    same(&ours, &tch::Tensor::scaled_dot_product_attention(&q, &k, &v, None::<&tch::Tensor>, 0.0, true, None, false));
    // Optional dtype, int.
    same(&tx.cumsum(1, Some(DType::F64))?, &x.cumsum(1, tch::Kind::Double));
    same(&tx.tril(-1)?, &x.tril(-1));
    // Optional int list.
    same(&tx.sum_dim_intlist(Some(&[0, 2]), true, None)?, &x.sum_dim_intlist([0i64, 2].as_slice(), true, None));
    // A string.
    let d = tch::Tensor::from_slice(&[7.0f32, -7.0, 5.5]);
    let e = tch::Tensor::from_slice(&[2.0f32, 2.0, -2.0]);
    same(&t(&d).div_tensor_mode(&t(&e), Some("floor"))?, &d.divide_tensor_mode(&e, "floor"));
    same(&t(&d).div_tensor_mode(&t(&e), None)?, &(&d / &e));
    // A string and a list of tensors.
    let a = tch::Tensor::randn([3, 4], (tch::Kind::Float, tch::Device::Cpu));
    let b = tch::Tensor::randn([4, 5], (tch::Kind::Float, tch::Device::Cpu));
    same(&Tensor::einsum("ij,jk->ik", &[&t(&a), &t(&b)], None)?, &a.matmul(&b));
    // A list of optional tensors (advanced indexing: x[:, idx]).
    let idx = tch::Tensor::from_slice(&[5i64, 0, 2]);
    same(&tx.index_tensor(&[None, Some(&t(&idx))])?, &x.index_select(1, &idx));
    // A tuple of results, and a list.
    let top = tx.topk(3, -1, true, true)?;
    let (values, indices) = x.topk(3, -1, true, true);
    assert_eq!(top.len(), 2);
    same(&top[0], &values);
    same(&top[1], &indices);
    let parts = tx.split_tensor(4, 2)?;
    assert_eq!(parts.len(), 2);
    same(&parts[0], &x.narrow(2, 0, 4));
    same(&parts[1], &x.narrow(2, 4, 4));
    // In place: the receiver changes, and the handle returned is the receiver.
    let y = t(&x.copy());
    let before = y.id();
    assert_eq!(y.clamp_min_(0.0)?.id(), before);
    same(&y, &x.clamp_min(0.0));
    // Values: a bool, an int, element types.
    assert!(tx.is_floating_point()?);
    assert_eq!(tx.size_int(1)?, 6);
    assert!(tx.sym_is_contiguous()? && !tx.transpose(0, 2)?.sym_is_contiguous()?);
    assert_eq!(t(&idx).result_type_tensor(&tx)?, DType::F32);
    assert_eq!(t(&idx).result_type_scalar(2.5)?, DType::F32);
    assert_eq!(Tensor::promote_types(DType::I64, DType::F16)?, DType::F16);
    // A list of scalars (`gradient`'s spacing), passed as doubles.
    let sq = tch::Tensor::from_slice(&[1.0f32, 4.0, 9.0, 16.0]);
    same(&t(&sq).gradient_scalarrayint(&[2.0], None, 1)?[0], &tch::Tensor::from_slice(&[1.5f32, 2.0, 3.0, 3.5]));
    // A tensor and a list (`histogramdd`): one list, the histogram first, then each dimension's edges.
    let points = tch::Tensor::rand([10, 2], (tch::Kind::Float, tch::Device::Cpu));
    let hist = t(&points).histogramdd(&[3, 4], None, None, false)?;
    assert_eq!(hist.iter().map(|h| h.shape()).collect::<Result<Vec<_>>>()?, [vec![3, 4], vec![4], vec![5]]);
    assert_eq!(hist[0].sum()?.item()?, 10.0);
    // Creation with an optional dtype: host memory, as libtorch's default.
    same(&Tensor::arange_start_step(0, 10, 3, Some(DType::I64))?, &tch::Tensor::arange_start_step(0, 10, 3, (tch::Kind::Int64, tch::Device::Cpu)));
    // A list of fixed size (`int[2] kernel_size`): one value stands for all, and a length that
    // is neither is refused before libtorch would read past the list's end.
    let img = tch::Tensor::randn([1, 2, 4, 4], (tch::Kind::Float, tch::Device::Cpu));
    let pooled = t(&img).avg_pool2d(&[2], &[], &[0], false, true, None)?;
    same(&pooled, &img.avg_pool2d([2, 2], [2, 2], [0, 0], false, true, None));
    let err = t(&img).avg_pool2d(&[2, 2, 2], &[], &[0], false, true, None).unwrap_err().to_string();
    assert!(err.contains("expected 2 values"), "{err}");
    // More arguments than an op binds on the stack (batch_norm has nine).
    let (mean, var) = (tch::Tensor::zeros([6], tch::kind::FLOAT_CPU), tch::Tensor::ones([6], tch::kind::FLOAT_CPU));
    let normed = tx.batch_norm(None, None, Some(&t(&mean)), Some(&t(&var)), false, 0.1, 1e-5, false)?;
    same(&normed, &x.batch_norm(None::<&tch::Tensor>, None::<&tch::Tensor>, Some(&mean), Some(&var), false, 0.1, 1e-5, false));
    // A dead handle after a live one is refused as stale, and the live one stays usable.
    let dead = t(&w);
    let dead_id = dead.id();
    dead.dispose()?;
    let dead = std::mem::ManuallyDrop::new(Tensor::from_raw(dead_id));
    assert!(matches!(tw.add_tensor(&dead, 1.0), Err(Error::StaleHandle { .. })));
    same(&tw.add_tensor(&tw, 1.0)?, &(&w + &w));
    // Errors are errors: a shape libtorch refuses, and a string it does not know.
    assert!(tx.rms_norm(&[5], None, None).is_err());
    assert!(t(&d).div_tensor_mode(&t(&e), Some("sideways")).is_err());
    Ok(())
}

/// Runs the sample, with the manager configured by `manager` if any; returns the manager's
/// stats at the end.
fn run(manager: Option<Config>) -> Option<residency::ResidencyStats> {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let live = live_handles();
    if let Some(cfg) = manager {
        residency::configure(cfg).unwrap();
    }
    let result = no_grad(sample);
    let stats = residency::stats();
    residency::disable().unwrap();
    result.unwrap();
    assert_eq!(live_handles(), live, "handles leaked");
    stats
}

#[test]
fn test_generated_ops_equal_libtorch_without_a_manager() {
    assert!(run(None).is_none());
}

#[test]
fn test_generated_ops_equal_libtorch_under_flow_at_a_budget_that_evicts() {
    // Room for a few of the sample's [4, 6, 8] float tensors (768 bytes each) at a time.
    let mut cfg = Config::new(Device::Simulated, Policy::Flow, 4096);
    cfg.prefetch_depth = 2;
    let stats = run(Some(cfg)).expect("a manager");
    assert!(stats.evictions > 0, "the budget evicted nothing: {stats:?}");
    assert!(stats.peak_device_bytes <= 4096, "over the budget: {stats:?}");
}
