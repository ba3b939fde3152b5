//! Training through the residency manager: seeded runs of an MLP and of a small transformer
//! encoder, with dropout off and on, with SGD and Adam, give the same losses and the same final
//! parameters bit for bit under every policy as without a manager, and no policy goes over its
//! budget. Also: gradients reach leaves through views and in-place writes as in PyTorch; an
//! in-place write to a leaf that requires grad, or to a tensor saved for backward, is refused the
//! same way everywhere; what autograd saves is managed (evicted in forward, prefetched and loaded
//! back in backward); a cleared gradient leaves the device at once; at half the unmanaged peak Flow
//! trains with no needless cost in steady state, writes back ahead what it will evict, and runs
//! as fast as unmanaged training in the schedule model (which costs backward as this file checks).
//! (One test binary: the manager is process-wide, so these tests take turns.)
//!
//! `cargo test --features cuda-tests --test training` runs them against CUDA device 0, where
//! results are compared within a tolerance instead (a run that draws dropout with Resident's: see
//! `reference`).

use std::sync::{Arc, Mutex, MutexGuard};
use tensorref::residency::{self, Device, Config, EventKind, Policy, Recompute, ResidencyStats};
use tensorref::{live_handles, manual_seed, no_grad, DType, Result, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

/// The manager and the live-handle count to this test alone.
fn turn() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Turns the manager off when dropped, so that a failed check leaves none to the next test.
struct Managed;

impl Managed {
    fn new(policy: Policy, budget: u64) -> Managed {
        Managed::recomputing(policy, budget, Recompute::Off)
    }

    fn recomputing(policy: Policy, budget: u64, recompute: Recompute) -> Managed {
        residency::configure(Config { recompute, ..Config::new(DEVICE, policy, budget) }).unwrap();
        Managed
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        let _ = residency::disable();
    }
}

#[cfg(not(feature = "cuda-tests"))]
const DEVICE: Device = Device::Simulated;
#[cfg(feature = "cuda-tests")]
const DEVICE: Device = Device::Cuda(0);

/// What a run gives: its losses, then its parameters' values after the last step.
#[derive(Debug, PartialEq)]
struct Run {
    losses: Vec<f32>,
    params: Vec<Vec<f32>>,
}

#[derive(Clone, Copy, Debug)]
enum Optimizer {
    Sgd,
    Adam,
}

/// A model under training: its parameters, and one step's loss as a tensor.
trait Model {
    fn params(&self) -> Vec<&Tensor>;
    fn loss(&self, dropout: bool) -> Result<Tensor>;
}

/// How a step ends with the gradients: zeroed (`zero_grad`), or dropped (`clear_grad`, PyTorch's
/// default `zero_grad(set_to_none=True)`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Grads {
    Zero,
    Clear,
}

/// Trains `model` for `steps` steps; every tensor is made inside `f`'s manager (or none).
fn train<M: Model>(make: impl Fn() -> Result<M>, steps: usize, dropout: bool, optimizer: Optimizer) -> Result<Run> {
    train_with(make, steps, dropout, optimizer, Grads::Zero, |_| {})
}

/// `train`, ending each step with `grads`, and calling `after` with each step's number once the
/// step is done.
fn train_with<M: Model>(make: impl Fn() -> Result<M>, steps: usize, dropout: bool, optimizer: Optimizer, grads: Grads, mut after: impl FnMut(usize)) -> Result<Run> {
    manual_seed(17);
    let model = no_grad(&make)?;
    for p in model.params() {
        p.requires_grad_(true)?;
    }
    let moments = model.params().iter().map(|p| Ok((p.zeros_like()?, p.zeros_like()?))).collect::<Result<Vec<_>>>()?;
    let mut losses = Vec::new();
    for step in 1..=steps {
        let loss = model.loss(dropout)?;
        loss.backward()?;
        losses.push(loss.item()? as f32);
        let params = model.params();
        match optimizer {
            Optimizer::Sgd => Tensor::optim_sgd_step(&params, 0.05)?,
            Optimizer::Adam => {
                let (m, v): (Vec<&Tensor>, Vec<&Tensor>) = moments.iter().map(|(m, v)| (m, v)).unzip();
                Tensor::optim_adam_step(&params, &m, &v, step as i64, 1e-3, 0.9, 0.999, 1e-8, 0.01)?;
            }
        }
        match grads {
            Grads::Zero => params.iter().try_for_each(|p| p.zero_grad())?,
            Grads::Clear => params.iter().try_for_each(|p| p.clear_grad())?,
        }
        if residency::enabled() {
            residency::mark_iteration()?;
        }
        after(step);
    }
    let params = model.params().iter().map(|p| p.to_vec::<f32>()).collect::<Result<_>>()?;
    Ok(Run { losses, params })
}

/// The run the managed ones are compared with: `f` without a manager. On CUDA, a run that draws
/// dropout's noise is compared with the same under Resident instead, where every op runs on the
/// device and draws from its generator as PyTorch's model on that device does; without a manager
/// the ops run on the host, whose generator draws other numbers.
fn reference(dropout: bool, f: impl Fn() -> Result<Run>) -> Run {
    if cfg!(feature = "cuda-tests") && dropout {
        let _resident = Managed::new(Policy::Resident, 0);
        return f().unwrap();
    }
    f().unwrap()
}

/// Runs `f` without a manager (see `reference`), then under each policy at each budget, with
/// recomputation off, where cheaper, and always (Genoa and Flow), and compares each run with the
/// first; checks the budget, that recomputation happened where it always should, and that no
/// handle leaked.
fn same_under_every_policy(budgets: &[u64], dropout: bool, f: impl Fn() -> Result<Run>) {
    let _turn = turn();
    let live = live_handles();
    let plain = reference(dropout, &f);
    assert!(plain.losses.last() < plain.losses.first(), "the loss goes down: {:?}", plain.losses);
    let mut runs = vec![(Policy::Resident, 0, Recompute::Off)];
    for policy in [Policy::Genoa, Policy::Flow] {
        for &budget in budgets {
            runs.extend([Recompute::Off, Recompute::Cheaper, Recompute::Always].map(|r| (policy, budget, r)));
        }
    }
    for (policy, budget, recompute) in runs {
        let what = format!("{policy:?} at {budget} bytes, recomputation {recompute:?}");
        let managed = Managed::recomputing(policy, budget, recompute);
        residency::device_memory(true);
        let run = f();
        let stats = residency::stats().unwrap();
        let memory = residency::device_memory(false);
        drop(managed);
        let run = run.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_same(&plain, &run, &what);
        if policy != Policy::Resident {
            assert!(stats.peak_device_bytes <= budget, "{what}: over budget {stats:?}");
            if !cfg!(feature = "cuda-tests") {
                assert!(memory.peak <= budget, "{what}: the allocator saw {} device bytes alive at once", memory.peak);
            }
            assert!(stats.evictions > 0, "{what}: the budget made it move data {stats:?}");
        }
        match recompute {
            Recompute::Off => assert_eq!((stats.drops, stats.recomputations), (0, 0), "{what}: {stats:?}"),
            Recompute::Always => assert!(stats.drops > 0 && stats.recomputations > 0, "{what}: nothing recomputed {stats:?}"),
            // Only what was dropped is made again; and Flow, which keeps results, finds some whose
            // remaking is cheaper than their copies at these budgets (dropout's outputs).
            Recompute::Cheaper => assert!(
                stats.recomputations <= stats.drops && stats.recomputed_bytes <= stats.dropped_bytes && (policy != Policy::Flow || stats.drops > 0),
                "{what}: {stats:?}"
            ),
        }
        assert_eq!(live_handles(), live, "{what}: handles leaked");
    }
}

/// Bit for bit on the CPU and the simulated device; within a tolerance on CUDA, where the order
/// of floating-point reductions may differ between runs.
fn assert_same(plain: &Run, run: &Run, what: &str) {
    let tolerance = if cfg!(feature = "cuda-tests") { 1e-4 } else { 0.0 };
    let differs = |a: f32, b: f32| (a - b).abs() > tolerance * (1.0 + a.abs()) || a.is_nan() != b.is_nan();
    let first = |a: &[f32], b: &[f32]| a.iter().zip(b).position(|(&x, &y)| differs(x, y)).or((a.len() != b.len()).then_some(a.len().min(b.len())));
    if let Some(i) = first(&plain.losses, &run.losses) {
        panic!("{what}: losses differ from step {}: {:?} without a manager, {:?} under it", i + 1, plain.losses, run.losses);
    }
    for (p, (a, b)) in plain.params.iter().zip(&run.params).enumerate() {
        if let Some(i) = first(a, b) {
            panic!("{what}: parameter {p} differs at element {i}: {:?} vs {:?}", a.get(i), b.get(i));
        }
    }
}

// ---------------------------------------------------------------- an MLP

struct Mlp {
    x: Tensor,
    target: Tensor,
    layers: Vec<(Tensor, Tensor)>,
}

impl Mlp {
    /// 256 samples of 32 features through 32-128-128-1.
    fn new() -> Result<Mlp> {
        let x = Tensor::randn(&[256, 32], DType::F32)?;
        let target = x.narrow(1, 0, 1)?.mul(&x.narrow(1, 1, 1)?)?.tanh()?;
        let layer = |i: i64, o: i64| -> Result<(Tensor, Tensor)> { Ok((Tensor::randn(&[i, o], DType::F32)?.mul_scalar(1.0 / (i as f64).sqrt())?, Tensor::zeros(&[o], DType::F32)?)) };
        Ok(Mlp { x, target, layers: vec![layer(32, 128)?, layer(128, 128)?, layer(128, 1)?] })
    }
}

impl Model for Mlp {
    fn params(&self) -> Vec<&Tensor> {
        self.layers.iter().flat_map(|(w, b)| [w, b]).collect()
    }

    fn loss(&self, dropout: bool) -> Result<Tensor> {
        let mut h = self.x.matmul(&self.layers[0].0)?.add(&self.layers[0].1)?.relu()?;
        if dropout {
            h = h.dropout(0.2, true)?;
        }
        let h = h.matmul(&self.layers[1].0)?.add(&self.layers[1].1)?.tanh()?;
        h.matmul(&self.layers[2].0)?.add(&self.layers[2].1)?.mse_loss(&self.target)
    }
}

/// The MLP's largest op holds 128 KiB of activations, a 64 KiB weight and a 128 KiB result; Adam's
/// step holds every parameter, its gradient and moments, and two temporaries the size of the
/// largest (64 KiB), as the simulated device's allocator counts them. Backward's largest node
/// needs 513 KiB at once (a 128 KiB saved activation and the 64 KiB weight, the gradient it
/// receives and the two it makes; `TR_ERR_BUDGET_TOO_SMALL` at 512 KiB).
const MLP_BUDGETS: [u64; 2] = [640 << 10, 768 << 10];

#[test]
fn an_mlp_trains_the_same_under_every_policy_with_sgd() {
    same_under_every_policy(&MLP_BUDGETS, false, || train(Mlp::new, 6, false, Optimizer::Sgd));
}

#[test]
fn an_mlp_with_dropout_trains_the_same_under_every_policy_with_adam() {
    same_under_every_policy(&MLP_BUDGETS, true, || train(Mlp::new, 6, true, Optimizer::Adam));
}

/// The same on a device that runs 4 ops behind the host (`residency::set_simulated_lag`): what the
/// manager evicts or writes back stays the device's until the device is past it, and the
/// allocator's peak, that memory included, stays within the budget.
#[test]
fn an_mlp_with_dropout_trains_the_same_on_a_device_behind_the_host() {
    same_under_every_policy(&MLP_BUDGETS, true, || {
        residency::set_simulated_lag(4);
        let run = train(Mlp::new, 6, true, Optimizer::Adam);
        residency::set_simulated_lag(0);
        run
    });
}

#[test]
fn an_mlp_whose_gradients_are_dropped_every_step_trains_the_same_under_every_policy() {
    same_under_every_policy(&MLP_BUDGETS, true, || train_with(Mlp::new, 6, true, Optimizer::Adam, Grads::Clear, |_| {}));
}

// ---------------------------------------------------------------- a transformer encoder

/// Post-norm encoder layers over sequences of tokens, and a classifier over the mean token.
struct Encoder {
    shape: Shape,
    x: Tensor,
    labels: Tensor,
    layers: Vec<[Tensor; 10]>,
    classifier: Tensor,
}

#[derive(Clone, Copy)]
struct Shape {
    layers: usize,
    batch: i64,
    tokens: i64,
    width: i64,
    heads: i64,
}

/// Two layers (2 heads) over 4 sequences of 16 tokens of width 32.
const SMALL: Shape = Shape { layers: 2, batch: 4, tokens: 16, width: 32, heads: 2 };
/// The training benchmark's default: four layers (4 heads) over 16 sequences of 64 tokens of
/// width 256.
#[cfg_attr(feature = "cuda-tests", allow(dead_code))] // only the schedule model's test uses it
const WIDE: Shape = Shape { layers: 4, batch: 16, tokens: 64, width: 256, heads: 4 };

impl Encoder {
    fn new() -> Result<Encoder> {
        Encoder::of(SMALL)
    }

    fn of(shape: Shape) -> Result<Encoder> {
        let Shape { layers, batch, tokens, width, .. } = shape;
        let x = Tensor::randn(&[batch, tokens, width], DType::F32)?;
        let labels = Tensor::from_slice(&(0..batch).map(|i| [0i64, 1, 2, 1][i as usize % 4]).collect::<Vec<_>>(), &[batch])?;
        let weight = |i: i64, o: i64| Tensor::randn(&[i, o], DType::F32)?.mul_scalar(1.0 / (i as f64).sqrt());
        let layer = || -> Result<[Tensor; 10]> {
            Ok([
                weight(width, width)?,
                weight(width, width)?,
                weight(width, width)?,
                weight(width, width)?,
                Tensor::ones(&[width], DType::F32)?,
                Tensor::zeros(&[width], DType::F32)?,
                weight(width, 4 * width)?,
                weight(4 * width, width)?,
                Tensor::ones(&[width], DType::F32)?,
                Tensor::zeros(&[width], DType::F32)?,
            ])
        };
        let layers = (0..layers).map(|_| layer()).collect::<Result<_>>()?;
        Ok(Encoder { shape, x, labels, layers, classifier: weight(width, 3)? })
    }

    /// [batch, tokens, width] -> [batch, heads, tokens, width / heads]: views, as PyTorch's models do.
    fn heads(&self, t: &Tensor) -> Result<Tensor> {
        let Shape { batch, tokens, width, heads, .. } = self.shape;
        t.view(&[batch, tokens, heads, width / heads])?.transpose(1, 2)
    }

    fn layer(&self, x: &Tensor, p: &[Tensor; 10], dropout: bool) -> Result<Tensor> {
        let Shape { batch, tokens, width, heads, .. } = self.shape;
        let [wq, wk, wv, wo, g1, b1, w1, w2, g2, b2] = p;
        let (q, k, v) = (self.heads(&x.matmul(wq)?)?, self.heads(&x.matmul(wk)?)?, self.heads(&x.matmul(wv)?)?);
        let mut attention = q.matmul(&k.transpose(2, 3)?)?.mul_scalar(1.0 / ((width / heads) as f64).sqrt())?.softmax(-1)?;
        if dropout {
            attention = attention.dropout(0.1, true)?;
        }
        let mixed = attention.matmul(&v)?.transpose(1, 2)?.contiguous()?.view(&[batch, tokens, width])?;
        let x = x.add(&mixed.matmul(wo)?)?.layer_norm(&[width], Some(g1), Some(b1), 1e-5)?;
        let mut ff = x.matmul(w1)?.gelu()?.matmul(w2)?;
        if dropout {
            ff = ff.dropout(0.1, true)?;
        }
        x.add(&ff)?.layer_norm(&[width], Some(g2), Some(b2), 1e-5)
    }
}

impl Model for Encoder {
    fn params(&self) -> Vec<&Tensor> {
        self.layers.iter().flatten().chain([&self.classifier]).collect()
    }

    fn loss(&self, dropout: bool) -> Result<Tensor> {
        let mut x = self.layer(&self.x, &self.layers[0], dropout)?;
        for p in &self.layers[1..] {
            x = self.layer(&x, p, dropout)?;
        }
        x.mean_dim(&[1], false)?.matmul(&self.classifier)?.cross_entropy(&self.labels)
    }
}

/// The encoder's largest op: the feed-forward's 32 KiB activations in, 16 KiB weight, 32 KiB out;
/// Adam's step, with its temporaries, 128 KiB; backward with a remake of a dropped input needs
/// more than 128 KiB (`TR_ERR_BUDGET_TOO_SMALL` there, recomputing always).
const ENCODER_BUDGETS: [u64; 2] = [160 << 10, 256 << 10];

#[test]
fn a_transformer_encoder_trains_the_same_under_every_policy_with_adam() {
    same_under_every_policy(&ENCODER_BUDGETS, false, || train(Encoder::new, 5, false, Optimizer::Adam));
}

#[test]
fn a_transformer_encoder_with_dropout_trains_the_same_under_every_policy_with_sgd() {
    same_under_every_policy(&ENCODER_BUDGETS, true, || train(Encoder::new, 5, true, Optimizer::Sgd));
}

// ---------------------------------------------------------------- gradients as in PyTorch

/// Runs `f` under each policy at a budget of a few small tensors (the caller has its turn).
fn each_policy(f: impl Fn(Policy) -> Result<()>) {
    for policy in [Policy::Resident, Policy::Genoa, Policy::Flow] {
        let managed = Managed::new(policy, 4 << 10);
        let result = f(policy);
        drop(managed);
        result.unwrap_or_else(|e| panic!("{policy:?}: {e}"));
    }
}

#[test]
fn gradients_reach_leaves_through_views_and_in_place_writes() {
    let _turn = turn();
    each_policy(|policy| {
        let w = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0], &[2, 2])?;
        w.requires_grad_(true)?;
        // Through a view: d/dw sum(w^T * c) = c^T.
        let c = Tensor::from_slice(&[10f32, 20.0, 30.0, 40.0], &[2, 2])?;
        w.transpose(0, 1)?.mul(&c)?.sum()?.backward()?;
        assert_eq!(w.grad()?.unwrap().to_vec::<f32>()?, [10.0, 30.0, 20.0, 40.0], "{policy:?}: through a view");
        w.zero_grad()?;
        // Through an in-place write into a tensor that did not require grad.
        let x = Tensor::zeros(&[2, 2], DType::F32)?;
        x.add_(&w)?;
        x.mul_scalar_(3.0)?;
        assert!(x.requires_grad()?, "{policy:?}: the in-place write made x require grad");
        x.sum()?.backward()?;
        assert_eq!(w.grad()?.unwrap().to_vec::<f32>()?, [3.0; 4], "{policy:?}: through in-place writes");
        // Accumulation across two backward passes, and the value a gradient handle reads.
        let g = w.grad()?.unwrap();
        w.mul(&w)?.sum()?.backward()?;
        assert_eq!(g.to_vec::<f32>()?, [5.0, 7.0, 9.0, 11.0], "{policy:?}: 3 + 2w, read through the earlier handle");
        Ok(())
    });
}

/// `clear_grad` drops a gradient: `grad` reads none, the next backward makes it anew, and its
/// device memory is let go at once; a gradient handle the program kept still reads it.
#[test]
fn a_cleared_gradient_leaves_the_device_at_once_unless_the_program_holds_it() {
    let _turn = turn();
    each_policy(|policy| {
        let w = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0], &[2, 2])?;
        w.requires_grad_(true)?;
        let device_bytes = || residency::stats().unwrap().device_bytes;
        w.mul(&w)?.sum()?.backward()?;
        let with_grad = device_bytes();
        w.clear_grad()?;
        assert!(w.grad()?.is_none(), "{policy:?}: cleared");
        if policy == Policy::Flow {
            // Flow keeps results on the device: the gradient was there.
            assert_eq!(device_bytes(), with_grad - 16, "{policy:?}: the gradient's 16 bytes left the device");
        }
        w.sum()?.backward()?;
        assert_eq!(w.grad()?.unwrap().to_vec::<f32>()?, [1.0; 4], "{policy:?}: made anew, not added to 2w");
        let kept = w.grad()?.unwrap();
        w.clear_grad()?;
        assert_eq!(kept.to_vec::<f32>()?, [1.0; 4], "{policy:?}: a handle the program kept still reads it");
        assert!(w.grad()?.is_none(), "{policy:?}: cleared with a handle kept");
        w.clear_grad()?; // none to drop
        Ok(())
    });
}

#[test]
fn an_in_place_write_to_a_leaf_that_requires_grad_is_refused_everywhere() {
    let _turn = turn();
    let w = Tensor::ones(&[4], DType::F32).unwrap();
    w.requires_grad_(true).unwrap();
    let plain = w.add_scalar_(1.0).unwrap_err().to_string();
    assert!(plain.contains("leaf Variable that requires grad"), "{plain}");
    each_policy(|policy| {
        let err = w.add_scalar_(1.0).unwrap_err().to_string();
        assert!(err.contains("leaf Variable that requires grad"), "{policy:?}: {err}");
        no_grad(|| w.add_scalar_(1.0))?; // as in PyTorch, allowed without tracking
        Ok(())
    });
    assert_eq!(w.to_vec::<f32>().unwrap(), [4.0; 4], "one write per policy landed");
}

#[test]
fn an_in_place_write_to_a_tensor_saved_for_backward_is_caught_as_without_a_manager() {
    let _turn = turn();
    // d/dw sum(w * x) is x as it was when the product was taken: writing x in place before
    // backward makes libtorch refuse backward, and so it must under the manager, whichever
    // tensor autograd saved (an input's device copy, or an op's result: exp saves its result).
    let saved_then_written = |result_saved: bool| -> Result<()> {
        let w = Tensor::ones(&[4], DType::F32)?;
        w.requires_grad_(true)?;
        let x = Tensor::ones(&[4], DType::F32)?.mul_scalar(2.0)?;
        let y = if result_saved { w.mul(&x)?.exp()? } else { w.mul(&x)? };
        if result_saved {
            y.add_scalar_(1.0)?; // y is exp's result, saved by exp
        } else {
            x.add_scalar_(1.0)?; // x was saved by mul
        }
        y.sum()?.backward()
    };
    for result_saved in [false, true] {
        let plain = saved_then_written(result_saved).unwrap_err();
        assert!(plain.to_string().contains("modified by an inplace operation"), "{plain}");
        each_policy(|policy| {
            let err = saved_then_written(result_saved).expect_err(&format!("{policy:?}: backward after the write is refused"));
            assert!(err.to_string().contains("modified by an inplace operation"), "{policy:?}: {err}");
            assert_eq!(err.status(), plain.status(), "{policy:?}: the status libtorch gives without a manager");
            Ok(())
        });
    }
}

// ---------------------------------------------------------------- what autograd saves

#[test]
fn what_autograd_saves_is_managed_evicted_in_forward_and_brought_back_in_backward() {
    let _turn = turn();
    let plain = reference(true, || train(Mlp::new, 3, true, Optimizer::Sgd));
    let budget = MLP_BUDGETS[0];
    let managed = Managed::new(Policy::Flow, budget);
    assert!(residency::saved_tensors_managed(), "backward runs on libtorch's engine here");
    // Each event's kind, op and the device bytes after it.
    type Seen = Vec<(EventKind, &'static str, u64)>;
    let events: Arc<Mutex<Seen>> = Arc::default();
    let seen = events.clone();
    residency::set_callback(Some(Box::new(move |e| seen.lock().unwrap().push((e.kind, e.op, e.device_bytes))))).unwrap();
    let run = train(Mlp::new, 3, true, Optimizer::Sgd).unwrap();
    let trace = residency::recorded_trace().expect("an iteration was marked");
    drop(managed);
    assert!(!residency::saved_tensors_managed(), "not without a manager");
    assert_same(&plain, &run, "Flow, saved tensors managed");
    let events = events.lock().unwrap();
    assert!(events.iter().all(|&(_, _, bytes)| bytes <= budget), "over budget at an event");
    let count = |op: &str| trace.iter().filter(|r| r.name == op).count();
    // New storages made by saving: the results relu and tanh save before they return them, and
    // dropout's mask, which no op of ours returns. The inputs saved are views of known storages.
    let names: Vec<_> = trace.iter().map(|r| r.name).collect();
    assert_eq!(count("save"), 3, "{names:?}");
    assert_eq!(count("unpack"), 10, "backward unpacked what the forward saved: {names:?}");
    let reloaded = events.iter().filter(|&&(kind, op, _)| kind == EventKind::Load && op == "unpack").count();
    assert!(reloaded > 0, "activations evicted in forward were brought back in backward");
}

/// The device memory `f` needs with nothing moved: under Resident, which keeps everything on the
/// device, the most the simulated device's allocator saw alive at once (backward's gradients in
/// flight and kernels' scratch included); on CUDA, the most Resident's books held.
fn unmanaged_peak(f: impl FnOnce() -> Result<()>) -> u64 {
    let _resident = Managed::new(Policy::Resident, 1);
    residency::device_memory(true);
    f().unwrap();
    residency::device_memory(false).peak.max(residency::stats().unwrap().peak_device_bytes)
}

#[test]
fn at_half_the_unmanaged_peak_flow_trains_with_no_needless_cost_in_steady_state() {
    let _turn = turn();
    // Steady state: once two marked steps have taught Flow the order and it has followed it for a
    // step (that step evicts in backward what the first two did not, and a gradient made anew
    // each step: their homes' page-locked memory is allocated then).
    for grads in [Grads::Zero, Grads::Clear] {
        let learned_at = 3;
        let peak = unmanaged_peak(|| train_with(Encoder::new, 6, true, Optimizer::Adam, grads, |_| {}).map(drop));
        let managed = Managed::new(Policy::Flow, peak / 2);
        let mut learned = None;
        train_with(Encoder::new, 6, true, Optimizer::Adam, grads, |step| {
            if step == learned_at {
                learned = residency::stats();
            }
        })
        .unwrap();
        let (learned, end) = (learned.unwrap(), residency::stats().unwrap());
        drop(managed);
        let counters = |s: &ResidencyStats| [s.page_locked_allocs, s.pageable_copies, s.write_through_waits, s.needless_write_backs, s.prefetch_misses, s.load_wait_ns];
        assert_eq!(
            counters(&learned),
            counters(&end),
            "{grads:?}: new page-locked memory, pageable copies, write-through waits, needless write-backs, loads on demand or waits for loads in steady state: {end:?}"
        );
        assert!(end.evictions > learned.evictions && end.peak_device_bytes <= peak / 2, "{grads:?}: {end:?}");
    }
}

#[test]
fn flow_prefetches_saved_activations_ahead_of_backward() {
    let _turn = turn();
    // Demand loads of saved tensors in backward, from the third step on, with and without
    // prefetch: Flow brings saved activations back ahead of their unpack. Measured: 9 without
    // prefetch, 6 prefetching weights only, 3 prefetching saved activations too.
    let budget = MLP_BUDGETS[1];
    let demand_loads = |prefetch_depth: usize| {
        let mut config = Config::new(DEVICE, Policy::Flow, budget);
        config.prefetch_depth = prefetch_depth;
        residency::configure(config).unwrap();
        let loads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counting = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (l, c) = (loads.clone(), counting.clone());
        residency::set_callback(Some(Box::new(move |e| {
            if c.load(std::sync::atomic::Ordering::Relaxed) && e.kind == EventKind::Load && e.op == "unpack" {
                l.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })))
        .unwrap();
        let run = train_with(Mlp::new, 5, true, Optimizer::Adam, Grads::Zero, |step| counting.store(step >= 2, std::sync::atomic::Ordering::Relaxed));
        let stats = residency::stats().unwrap();
        residency::disable().unwrap();
        run.unwrap();
        (loads.load(std::sync::atomic::Ordering::Relaxed), stats)
    };
    let (without, _) = demand_loads(0);
    let (with, stats) = demand_loads(residency::DEFAULT_PREFETCH_DEPTH);
    assert!(without > 0, "the budget makes backward reload saved activations");
    assert!(3 * with <= without, "prefetch left {with} of {without} demand loads in backward: {stats:?}");
}

/// The schedule model of a training step (src/residency/model): each unpack for backward
/// knows which op saved its tensor, and backward costs between one and three times the forward
/// (a matrix product's backward is two products of its size: the input's gradient and the
/// weight's), counted once however often the budget makes a saved tensor move; results made again
/// are costed apart. So the step with nothing moved or remade costs the same whatever the budget
/// and the recomputation mode.
#[test]
fn the_schedule_model_costs_a_training_step_backward_included() {
    use tensorref::residency::model::{self, Step, Work};
    let _turn = turn();
    let compute = model::roofline(1e12, 3e11, 4);
    let logged = |recompute: Recompute, budget: u64| {
        let _managed = Managed::recomputing(Policy::Flow, budget, recompute);
        residency::schedule_log_start().unwrap();
        train(Mlp::new, 3, false, Optimizer::Adam).unwrap();
        residency::schedule_log().expect("a step was logged")
    };
    let mut unmanaged = vec![];
    for (recompute, budget) in [(Recompute::Off, MLP_BUDGETS[0]), (Recompute::Always, MLP_BUDGETS[0]), (Recompute::Off, 64 << 20)] {
        let pass = logged(recompute, budget);
        let ops: Vec<&Step> = pass.ops().collect();
        let work = |s: &Step| if let Step::Op { work, .. } = s { *work } else { unreachable!() };
        let first_unpack = ops.iter().position(|s| matches!(work(s), Work::Backward { .. })).expect("backward unpacked saved tensors");
        assert!(ops.iter().all(|s| work(s) != Work::Backward { saved_at: None }), "every unpack knows which op saved it");
        let cost = |range: &[&Step]| range.iter().filter(|s| work(s) == Work::Program).map(|s| compute(s)).sum::<f64>();
        let (forward, after) = (cost(&ops[..first_unpack]), cost(&ops[first_unpack..]));
        assert!(forward > 0.0 && after > 0.0, "the forward, and the optimizer step after backward");
        let r = model::replay(&pass, model::Rates::H100.link, &compute);
        let backward = r.unmanaged - forward - after;
        assert!(backward >= forward * (1.0 - 1e-9) && backward <= 3.0 * forward * (1.0 + 1e-9), "{recompute:?} at {budget}: backward {backward} against forward {forward}: {r:?}");
        let remade = ops.iter().filter(|s| work(s) == Work::Remake).count();
        assert_eq!(remade > 0, recompute == Recompute::Always, "{recompute:?}: {remade} remakes logged");
        assert!(r.compute_busy >= r.unmanaged && r.makespan >= r.compute_busy * (1.0 - 1e-9), "{r:?}");
        unmanaged.push(r.unmanaged);
    }
    assert!(unmanaged.iter().all(|u| (u - unmanaged[0]).abs() <= 1e-9 * unmanaged[0]), "the step with nothing moved or remade: {unmanaged:?}");
}

/// While Flow follows the recorded order, a tensor the recorded step evicted is written back as
/// soon as it is made and stays on the device, clean (`write_ahead`): its later eviction writes
/// nothing. Seen in the events of the steps Flow follows: write-backs of storages that stay on
/// the device, and evictions with no write-back of a storage made in the same step.
#[test]
fn flow_writes_back_ahead_what_the_followed_step_evicted() {
    let _turn = turn();
    let _managed = Managed::new(Policy::Flow, ENCODER_BUDGETS[0]);
    let events = Arc::new(Mutex::new(Vec::new()));
    let (seen, counting) = (events.clone(), Arc::new(std::sync::atomic::AtomicBool::new(false)));
    let on = counting.clone();
    residency::set_callback(Some(Box::new(move |e| {
        if on.load(std::sync::atomic::Ordering::Relaxed) && matches!(e.kind, EventKind::WriteBack | EventKind::Evict) {
            seen.lock().unwrap().push((e.kind, e.entry));
        }
    })))
    .unwrap();
    train_with(Encoder::new, 5, true, Optimizer::Adam, Grads::Clear, |step| counting.store(step >= 3, std::sync::atomic::Ordering::Relaxed)).unwrap();
    residency::set_callback(None).unwrap();
    let events = events.lock().unwrap();
    // A write-back at an eviction is followed at once by the eviction of the same storage.
    let ahead = events.windows(2).filter(|w| w[0].0 == EventKind::WriteBack && w[1] != (EventKind::Evict, w[0].1)).count();
    let clean_evictions = events.iter().enumerate().filter(|&(i, e)| e.0 == EventKind::Evict && (i == 0 || events[i - 1] != (EventKind::WriteBack, e.1))).count();
    assert!(ahead > 0, "no write-back ahead of an eviction: {events:?}");
    assert!(clean_evictions > 0, "no eviction found its storage already written: {events:?}");
}

/// The training benchmark's encoder (`WIDE`) under Flow, its last step replayed by the schedule
/// model at an H100's rates (as `cargo bench --bench training` prints it): at three quarters of
/// its unmanaged peak within 5 % of the same step with nothing moved, at 0.95 of the bound for
/// what it moves or better; at half, 1.11x the unmanaged step and 0.90 of that bound (whose
/// largest term is the compute), guarded at 1.20x and 0.85 (1.30x and 0.77 before a prefetch left
/// room for what the kernels of the ops before its use hold, backward's gradients in flight
/// included; 1.59x before it left room for their results): without that room a kernel evicts a
/// prefetched copy, fetched again, once an op. What it takes (docs/performance.md, change by change): a
/// side stream per direction, results that outlive their step followed by their own key,
/// gradients dropped rather than zeroed, write-ahead, and that room.
#[cfg(not(feature = "cuda-tests"))]
#[test]
fn flow_trains_near_the_unmanaged_speed_in_the_schedule_model() {
    use tensorref::residency::model;
    let _turn = turn();
    let wide = || Encoder::of(WIDE);
    let peak = unmanaged_peak(|| train_with(wide, 2, true, Optimizer::Adam, Grads::Clear, |_| {}).map(drop));
    for (budget, slowdown, efficiency) in [(peak * 3 / 4, 1.05, 0.95), (peak / 2, 1.20, 0.85)] {
        let _managed = Managed::new(Policy::Flow, budget);
        residency::schedule_log_start().unwrap();
        train_with(wide, 5, true, Optimizer::Adam, Grads::Clear, |_| {}).unwrap();
        let step = residency::schedule_log().expect("a step was logged");
        let r = model::Rates::H100.replay(&step, 4);
        let what = format!("{:.2} of the peak: {r:?}, {:.2}x the unmanaged step", budget as f64 / peak as f64, r.slowdown());
        assert!(r.slowdown() <= slowdown && r.efficiency() >= efficiency && r.efficiency() <= 1.0 + 1e-9, "{what}");
    }
}
