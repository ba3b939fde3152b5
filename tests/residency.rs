//! The residency manager on the simulated accelerator: seeded random programs (with views,
//! in-place writes through views, and a buffer shared with code outside the library that the
//! outside refills between ops) give results identical to plain tch under Resident, Genoa and
//! Flow at every budget from the smallest feasible up; the device bytes never exceed the budget at any event; too-small budgets,
//! releases in flight, out-of-memory retries and over-budget pins give their documented
//! results with nothing lost and no handle left behind.
//! (One test binary: the manager is process-wide, so these tests take turns.)
//!
//! `cargo test --features cuda-tests --test residency` runs the same tests against CUDA device 0,
//! with the reference on CUDA too and results compared within 1e-5 instead of bit for bit.

mod common;
use common::shared_with_outside;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tensorref::residency::{self, Device, Config, EventKind, Policy};
use tensorref::{live_handles, no_grad, with_scope, DType, Error, Result, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

#[cfg(not(feature = "cuda-tests"))]
const DEVICE: Device = Device::Simulated;
#[cfg(feature = "cuda-tests")]
const DEVICE: Device = Device::Cuda(0);
/// Where the plain-tch reference runs.
const REFERENCE: tch::Device = if cfg!(feature = "cuda-tests") { tch::Device::Cuda(0) } else { tch::Device::Cpu };

/// Runs one test with the manager to itself; afterwards the manager is off and no handle leaked.
fn exclusive(f: impl FnOnce() -> Result<()>) {
    let _turn: MutexGuard<()> = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let live = live_handles();
    let result = no_grad(f);
    residency::disable().unwrap();
    result.unwrap();
    assert_eq!(live_handles(), live, "handles leaked");
}

/// Configures the manager and records the highest device byte count seen at any event.
fn configure(policy: Policy, budget: u64) -> Arc<AtomicU64> {
    let mut cfg = Config::new(DEVICE, policy, budget);
    cfg.prefetch_depth = 2;
    residency::configure(cfg).unwrap();
    let peak = Arc::new(AtomicU64::new(0));
    let seen = peak.clone();
    residency::set_callback(Some(Box::new(move |e| {
        seen.fetch_max(e.device_bytes, Ordering::Relaxed);
    })))
    .unwrap();
    peak
}

// ---------------------------------------------------------------- random programs

/// A tiny deterministic generator (xorshift), so every program is reproducible by its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Debug, Clone, Copy)]
enum Instr {
    Add(usize, usize),
    Mul(usize, usize),
    Matmul(usize, usize),
    Relu(usize),
    Tanh(usize),
    Scale(usize),
    Softmax(usize),
    Transpose(usize),
    /// A transposed view (no copy): writes through it reach its base.
    View(usize),
    AddInPlace(usize, usize),
    Release(usize),
    /// The outside writes new values into the shared buffer (value 0).
    Refill(u64),
}

/// A program over values of two sizes (16x16 and 32x32); binary ops pair values of one size.
fn program(seed: u64, len: usize) -> (Vec<i64>, Vec<Instr>) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let sizes: Vec<i64> = (0..6).map(|i| if i % 3 == 0 { 32 } else { 16 }).collect();
    let mut value_sizes = sizes.clone();
    // The value whose storage each value views (itself, unless it is a view).
    let mut base: Vec<usize> = (0..sizes.len()).collect();
    let mut live: Vec<usize> = (0..sizes.len()).collect();
    let mut instrs = vec![];
    for _ in 0..len {
        let a = live[rng.below(live.len())];
        let same: Vec<usize> = live.iter().copied().filter(|&v| value_sizes[v] == value_sizes[a]).collect();
        let b = same[rng.below(same.len())];
        let instr = match rng.below(13) {
            10 => Instr::View(a),
            11 if live.contains(&0) => Instr::Refill(rng.next() % 7),
            0 => Instr::Add(a, b),
            1 => Instr::Mul(a, b),
            2 | 3 => Instr::Matmul(a, b),
            4 => Instr::Relu(a),
            5 => Instr::Tanh(a),
            6 => Instr::Scale(a),
            7 => Instr::Softmax(a),
            8 => Instr::Transpose(a),
            _ if live.len() > 3 && a != 0 && rng.below(2) == 0 => Instr::Release(a),
            // libtorch refuses an in-place write from a partly overlapping view of the target.
            _ if a != b && base[a] == base[b] => Instr::Add(a, b),
            _ => Instr::AddInPlace(a, b),
        };
        match instr {
            Instr::Release(v) => live.retain(|&x| x != v),
            Instr::AddInPlace(..) | Instr::Refill(_) => {}
            _ => {
                live.push(value_sizes.len());
                value_sizes.push(value_sizes[a]);
                base.push(if let Instr::View(v) = instr { base[v] } else { base.len() });
            }
        }
        instrs.push(instr);
    }
    (sizes, instrs)
}

/// Runs a program on plain tch: the reference.
fn run_tch(seed: u64, sizes: &[i64], instrs: &[Instr]) -> Vec<Option<Vec<f32>>> {
    tch::manual_seed(seed as i64);
    let mut vals: Vec<Option<tch::Tensor>> = sizes.iter().map(|&n| Some(tch::Tensor::randn([n, n], tch::kind::FLOAT_CPU).to_device(REFERENCE))).collect();
    let v = |vals: &[Option<tch::Tensor>], i: usize| vals[i].as_ref().unwrap().shallow_clone();
    for &ins in instrs {
        let out = match ins {
            Instr::Add(a, b) => v(&vals, a) + v(&vals, b),
            Instr::Mul(a, b) => v(&vals, a) * v(&vals, b),
            Instr::Matmul(a, b) => v(&vals, a).matmul(&v(&vals, b)),
            Instr::Relu(a) => v(&vals, a).relu(),
            Instr::Tanh(a) => v(&vals, a).tanh(),
            Instr::Scale(a) => v(&vals, a) * 0.5,
            Instr::Softmax(a) => v(&vals, a).softmax(1, None),
            Instr::Transpose(a) => v(&vals, a).transpose(0, 1).contiguous(),
            Instr::View(a) => v(&vals, a).transpose(0, 1),
            Instr::AddInPlace(a, b) => {
                let _ = v(&vals, a).f_add_(&v(&vals, b)).unwrap();
                continue;
            }
            Instr::Release(a) => {
                vals[a] = None;
                continue;
            }
            Instr::Refill(k) => {
                v(&vals, 0).f_copy_(&refill(k, sizes[0])).unwrap();
                continue;
            }
        };
        vals.push(Some(out));
    }
    vals.iter().map(|t| t.as_ref().map(|t| Vec::<f32>::try_from(t.flatten(0, -1)).unwrap())).collect()
}

/// Runs the same program through TensorRef (under whatever manager is configured).
fn run_tr(seed: u64, sizes: &[i64], instrs: &[Instr]) -> Result<Vec<Option<Vec<f32>>>> {
    with_scope(|_| {
        tensorref::manual_seed(seed);
        let mut vals: Vec<Option<Tensor>> = sizes.iter().map(|&n| Tensor::randn(&[n, n], DType::F32).map(Some)).collect::<Result<_>>()?;
        // Value 0 lives in memory the outside also reaches (as PyTorch's from_torch shares it).
        let outside = vals[0].as_ref().unwrap().with_tch(|t| t.copy())?;
        vals[0] = Some(shared_with_outside(&outside)?);
        for &ins in instrs {
            let v = |i: usize| vals[i].as_ref().unwrap();
            let out = match ins {
                Instr::Add(a, b) => v(a).add(v(b))?,
                Instr::Mul(a, b) => v(a).mul(v(b))?,
                Instr::Matmul(a, b) => v(a).matmul(v(b))?,
                Instr::Relu(a) => v(a).relu()?,
                Instr::Tanh(a) => v(a).tanh()?,
                Instr::Scale(a) => v(a).mul_scalar(0.5)?,
                Instr::Softmax(a) => v(a).softmax(1)?,
                Instr::Transpose(a) => v(a).transpose(0, 1)?.contiguous()?,
                Instr::View(a) => v(a).transpose(0, 1)?,
                Instr::AddInPlace(a, b) => {
                    v(a).add_(v(b))?;
                    continue;
                }
                Instr::Release(a) => {
                    vals[a] = None;
                    continue;
                }
                Instr::Refill(k) => {
                    outside.shallow_clone().f_copy_(&refill(k, sizes[0])).unwrap();
                    continue;
                }
            };
            vals.push(Some(out));
        }
        vals.iter().map(|t| t.as_ref().map(Tensor::to_vec::<f32>).transpose()).collect()
    })
}

/// What the outside writes into the shared buffer for `Refill(k)`.
fn refill(k: u64, n: i64) -> tch::Tensor {
    tch::Tensor::arange(n * n, tch::kind::FLOAT_CPU).reshape([n, n]) * (0.01 * (k as f64 + 1.0)) - 1.0
}

/// The smallest budget every op of the program fits in: its largest inputs + output + scratch.
fn smallest_feasible(sizes: &[i64], instrs: &[Instr]) -> u64 {
    let bytes = |n: i64| (n * n * 4) as u64;
    let mut vs: Vec<i64> = sizes.to_vec();
    let mut need = 0;
    for &ins in instrs {
        let (inputs, out): (Vec<usize>, bool) = match ins {
            Instr::Add(a, b) | Instr::Mul(a, b) | Instr::Matmul(a, b) => (vec![a, b], true),
            Instr::AddInPlace(a, b) => (vec![a, b], false),
            Instr::View(a) => (vec![a], false),
            Instr::Release(_) | Instr::Refill(_) => continue,
            Instr::Relu(a) | Instr::Tanh(a) | Instr::Scale(a) | Instr::Softmax(a) | Instr::Transpose(a) => (vec![a], true),
        };
        let mut distinct = inputs.clone();
        distinct.dedup();
        // transpose+contiguous is two ops: the view counts as a full-size result. Softmax of a
        // view that is not contiguous copies it first: scratch of the input's size.
        let scratch = if matches!(ins, Instr::Softmax(_)) { bytes(vs[inputs[0]]) } else { 0 };
        let ws: u64 = distinct.iter().map(|&i| bytes(vs[i])).sum::<u64>() + if out { bytes(vs[inputs[0]]) } else { 0 } + scratch;
        need = need.max(ws);
        if out || matches!(ins, Instr::View(_)) {
            vs.push(vs[inputs[0]]);
        }
    }
    need
}

/// `t`'s values on the reference device, as plain tch.
fn on_reference(t: &Tensor) -> tch::Tensor {
    t.with_tch(|v| v.to_device(REFERENCE)).unwrap()
}

fn values(t: &tch::Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.flatten(0, -1).to_device(tch::Device::Cpu)).unwrap()
}

/// Bit for bit on the CPU; within 1e-5 (relative) on CUDA, where the reference is another run.
fn assert_same(got: &[Option<Vec<f32>>], expected: &[Option<Vec<f32>>], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}");
    for (g, e) in got.iter().zip(expected) {
        match (g, e) {
            (Some(g), Some(e)) if cfg!(feature = "cuda-tests") => {
                assert!(g.iter().zip(e).all(|(a, b)| (a - b).abs() <= 1e-5 * (1.0 + b.abs())), "{what}")
            }
            (Some(g), Some(e)) => assert!(g.iter().map(|f| f.to_bits()).eq(e.iter().map(|f| f.to_bits())), "{what}"),
            _ => assert_eq!(g.is_some(), e.is_some(), "{what}"),
        }
    }
}

#[test]
fn random_programs_match_plain_tch_under_every_policy_and_budget() {
    exclusive(|| {
        let mut runs = 0;
        for seed in 1..=120u64 {
            let (sizes, instrs) = program(seed, 24);
            let expected = run_tch(seed, &sizes, &instrs);
            let least = smallest_feasible(&sizes, &instrs);
            for policy in [Policy::Resident, Policy::Genoa, Policy::Flow] {
                for budget in [least, least * 3 / 2, least * 3, 1 << 30] {
                    let peak = configure(policy, budget);
                    let got = run_tr(seed, &sizes, &instrs).unwrap_or_else(|e| panic!("seed {seed} {policy:?} budget {budget}: {e}"));
                    assert_same(&got, &expected, &format!("seed {seed} {policy:?} budget {budget}"));
                    if policy != Policy::Resident {
                        assert!(peak.load(Ordering::Relaxed) <= budget, "seed {seed} {policy:?}: over budget");
                        assert!(residency::stats().unwrap().peak_device_bytes <= budget);
                        let memory = residency::device_memory(false);
                        assert!(memory.peak <= budget, "seed {seed} {policy:?}: the allocator counted {memory:?}, budget {budget}");
                    }
                    residency::disable()?;
                    runs += 1;
                }
            }
        }
        assert_eq!(runs, 120 * 3 * 4);
        Ok(())
    });
}

/// On a device that runs behind the host, memory the host lets go of stays the device's until the
/// device is past it (CUDA's caching allocator reuses it only then). Random programs on the
/// simulated device running 3 ops behind give plain tch's results under Genoa and Flow, and the
/// allocator's real peak, the copies let go of but not yet freed included, stays within the
/// budget.
#[test]
fn random_programs_on_a_device_behind_the_host_keep_its_memory_within_the_budget() {
    if DEVICE != Device::Simulated {
        return; // only the simulated device can be made to run behind
    }
    exclusive(|| {
        residency::set_simulated_lag(3);
        let outcome = (1..=40u64).try_for_each(|seed| {
            let (sizes, instrs) = program(seed, 24);
            let expected = run_tch(seed, &sizes, &instrs);
            let least = smallest_feasible(&sizes, &instrs);
            for policy in [Policy::Genoa, Policy::Flow] {
                for budget in [least, least * 3 / 2] {
                    let what = format!("seed {seed} {policy:?} budget {budget}");
                    configure(policy, budget);
                    let got = run_tr(seed, &sizes, &instrs).map_err(|e| Error::Torch(format!("{what}: {e}")))?;
                    assert_same(&got, &expected, &what);
                    let memory = residency::device_memory(false);
                    assert!(memory.peak <= budget, "{what}: the allocator counted {memory:?}");
                    residency::disable()?;
                }
            }
            Ok(())
        });
        residency::set_simulated_lag(0);
        outcome
    });
}

// ---------------------------------------------------------------- documented failures

#[test]
fn budget_too_small_names_the_op_and_loses_nothing() {
    exclusive(|| {
        let a = Tensor::randn(&[64, 64], DType::F32)?; // 16 KiB
        let b = Tensor::randn(&[64, 64], DType::F32)?;
        let expected = a.matmul(&b)?.to_vec::<f32>()?;
        configure(Policy::Flow, 20_000);
        let err = a.matmul(&b).unwrap_err();
        match &err {
            Error::BudgetTooSmall { op, needed, budget } => {
                assert_eq!((op.as_str(), *budget), ("matmul", 20_000));
                assert!(*needed > 20_000, "{err}");
            }
            other => panic!("expected BudgetTooSmall, got {other:?}"),
        }
        assert!(err.to_string().contains("`matmul` needs"), "{err}");
        residency::disable()?;
        assert_eq!(a.matmul(&b)?.to_vec::<f32>()?, expected, "inputs intact after the failure");
        Ok(())
    });
}

#[test]
fn release_in_flight_frees_device_bytes_when_the_op_ends() {
    exclusive(|| {
        configure(Policy::Flow, 64 << 20);
        let a = Tensor::randn(&[512, 512], DType::F32)?;
        let id = a.into_raw();
        let worker = std::thread::spawn(move || -> Result<()> {
            let a = std::mem::ManuallyDrop::new(Tensor::from_raw(id));
            for _ in 0..20 {
                drop(a.matmul(&a)?);
            }
            Ok(())
        });
        std::thread::sleep(std::time::Duration::from_millis(5));
        let released = Tensor::from_raw(id).dispose(); // while the worker may be mid-op
        let worked = worker.join().unwrap();
        // Either the release came first (the worker then sees a stale handle) or the ops ran on
        // an entry kept alive by the op itself; both end with nothing on the device.
        assert!(released.is_ok());
        if let Err(e) = worked {
            assert!(matches!(e, Error::StaleHandle { .. }), "{e:?}");
        }
        assert_eq!(residency::stats().unwrap().device_bytes, 0);
        Ok(())
    });
}

/// A tensor an earlier manager tracked, used again under a later one: its entry still names the
/// earlier manager's storage, whose slot the later manager fills first with a storage of its own.
/// The later manager tells the two apart and registers the tensor anew.
#[test]
fn a_tensor_an_earlier_manager_tracked_is_new_to_a_later_one() {
    exclusive(|| {
        let old = Tensor::from_slice(&[2.0f32; 4], &[4])?;
        configure(Policy::Flow, 1 << 20);
        old.add(&old)?; // the manager registers `old`'s storage first
        residency::disable()?;

        configure(Policy::Flow, 1 << 20);
        let new = Tensor::from_slice(&[3.0f32; 4], &[4])?;
        new.add(&new)?; // the later manager's first storage, in the same slot
        assert_eq!(old.add(&new)?.to_vec::<f32>()?, [5.0; 4]);
        assert_eq!(old.to_vec::<f32>()?, [2.0; 4]);
        Ok(())
    });
}

/// Real devices raise out-of-memory themselves; the simulated one does when a result does not fit
/// its capacity, so the recovery path is exercised here.
#[cfg(not(feature = "cuda-tests"))]
#[test]
fn out_of_memory_makes_flow_evict_and_retry() {
    exclusive(|| {
        let ts: Vec<Tensor> = (0..4).map(|_| Tensor::randn(&[32, 32], DType::F32)).collect::<Result<_>>()?; // 4 KiB each
        let mut cfg = Config::new(DEVICE, Policy::Flow, 64 << 10);
        cfg.simulated_capacity = Some(14 << 10); // the device is smaller than the budget
        residency::configure(cfg)?;
        let sums: Vec<Tensor> = ts.windows(2).map(|w| w[0].add(&w[1])).collect::<Result<_>>()?;
        let s = residency::stats().unwrap();
        assert!(s.oom_retries >= 1, "{s:?}");
        assert!(s.evictions >= 1);
        residency::disable()?;
        for (w, sum) in ts.windows(2).zip(&sums) {
            assert_eq!(sum.to_vec::<f32>()?, w[0].add(&w[1])?.to_vec::<f32>()?);
        }
        Ok(())
    });
}

#[test]
fn pins_count_against_the_budget_and_stay_resident() {
    exclusive(|| {
        let big = Tensor::randn(&[80, 64], DType::F32)?; // 20 KiB
        let pinned = Tensor::randn(&[32, 32], DType::F32)?; // 4 KiB
        let x = Tensor::randn(&[32, 32], DType::F32)?;
        let peak = configure(Policy::Flow, 16 << 10);
        let err = big.pin_resident(true).unwrap_err();
        assert!(matches!(&err, Error::BudgetTooSmall { op, .. } if op == "pin_resident"), "{err:?}");
        pinned.pin_resident(true)?;
        let mut history = vec![x.add(&pinned)?];
        for _ in 0..12 {
            let next = history.last().unwrap().matmul(&x)?.tanh()?.add(&pinned)?;
            history.push(next); // everything stays alive: the budget forces evictions
        }
        let s = residency::stats().unwrap();
        assert_eq!(s.pinned_bytes, 4096);
        assert!(s.evictions > 0 && s.write_backs > 0, "{s:?}");
        assert!(peak.load(Ordering::Relaxed) <= 16 << 10);
        assert!(pinned.is_resident()?, "a pinned tensor is never evicted");
        residency::disable()?;
        // The same ops in plain tch on the reference device (CUDA's kernels differ from the CPU's).
        let (tx, tp) = (on_reference(&x), on_reference(&pinned));
        let mut expected = &tx + &tp;
        for got in &history[1..] {
            expected = expected.matmul(&tx).tanh() + &tp;
            assert_same(&[Some(got.to_vec::<f32>()?)], &[Some(values(&expected))], "evicted values came back intact");
        }
        Ok(())
    });
}

#[test]
fn genoa_keeps_nothing_on_the_device_between_ops() {
    exclusive(|| {
        let w = Tensor::randn(&[32, 32], DType::F32)?;
        let x = Tensor::randn(&[8, 32], DType::F32)?;
        configure(Policy::Genoa, 1 << 20);
        let ends = Arc::new(Mutex::new(Vec::new()));
        let log = ends.clone();
        residency::set_callback(Some(Box::new(move |e| {
            if e.kind == EventKind::OpEnd {
                log.lock().unwrap().push(e.device_bytes);
            }
        })))?;
        let y = x.matmul(&w)?.relu()?.matmul(&w.transpose(0, 1)?)?;
        assert!(ends.lock().unwrap().iter().all(|&b| b == 0), "{:?}", ends.lock().unwrap());
        let s = residency::stats().unwrap();
        assert!(s.write_backs >= 3, "every result went back: {s:?}");
        assert_eq!(y.shape()?, [8, 32]);
        Ok(())
    });
}

// ---------------------------------------------------------------- Flow learns the trace

/// A stack of linear layers whose weights are 4x the budget, run for several forward passes with
/// an iteration mark after each: Flow loads at most 1.1x Belady's optimum and a third of Genoa.
#[test]
fn flow_with_a_recorded_trace_is_near_optimal_and_far_below_genoa() {
    exclusive(|| {
        // 16 layers of 16 KiB under a 64 KiB budget; activations of 24 KiB make a matmul's
        // working set (24 + 16 + 24 KiB) exactly the budget.
        let (width, layers, batch) = (64i64, 16, 96i64);
        let weights: Vec<Tensor> = (0..layers).map(|_| Tensor::randn(&[width, width], DType::F32)).collect::<Result<_>>()?;
        let x = Tensor::randn(&[batch, width], DType::F32)?;
        let weight_bytes = (layers as i64 * width * width * 4) as u64;
        let budget = weight_bytes / 4;
        let pass = || -> Result<Vec<f32>> {
            with_scope(|_| {
                let mut h = x.matmul(&weights[0])?;
                for w in &weights[1..] {
                    let z = h.matmul(w)?;
                    drop(h); // dead before the next op, so it is never written back
                    h = z.tanh()?;
                }
                h.to_vec::<f32>()
            })
        };
        // The same ops in plain tch on the reference device.
        let reference = {
            let mut h = on_reference(&x).matmul(&on_reference(&weights[0]));
            for w in &weights[1..] {
                h = h.matmul(&on_reference(w)).tanh();
            }
            values(&h)
        };
        let mut per_pass = std::collections::HashMap::new();
        for policy in [Policy::Genoa, Policy::Flow] {
            let peak = configure(policy, budget);
            let mut loads = vec![];
            for _ in 0..4 {
                let before = residency::stats().unwrap().load_bytes;
                assert_same(&[Some(pass()?)], &[Some(reference.clone())], &format!("{policy:?}"));
                residency::mark_iteration()?;
                loads.push(residency::stats().unwrap().load_bytes - before);
            }
            assert!(peak.load(Ordering::Relaxed) <= budget);
            let trace = residency::recorded_trace().expect("an iteration was recorded");
            let optimum = residency::offline_min_loads(&trace, budget, 0, 3);
            per_pass.insert(format!("{policy:?}"), (*loads.last().unwrap(), optimum));
            if policy == Policy::Flow {
                let s = residency::stats().unwrap();
                assert!(s.prefetch_hits > 0, "prefetch brought weights ahead of use: {s:?}");
            }
            residency::disable()?;
        }
        let (flow, optimum) = per_pass["Flow"];
        let (genoa, _) = per_pass["Genoa"];
        assert!(flow as f64 <= 1.1 * optimum as f64, "Flow loads {flow} vs optimum {optimum}");
        assert!(flow * 3 <= genoa, "Flow loads {flow} vs Genoa {genoa}");
        Ok(())
    });
}

#[test]
fn timeline_is_chrome_trace_json() {
    exclusive(|| {
        let a = Tensor::randn(&[16, 16], DType::F32)?;
        configure(Policy::Flow, 4096);
        residency::timeline_start()?;
        let _b = a.matmul(&a)?.relu()?;
        let path = std::env::temp_dir().join(format!("tensorref-timeline-{}.json", std::process::id()));
        residency::timeline_write(&path)?;
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(text.starts_with("{\"displayTimeUnit\""));
        for needle in [r#""name":"matmul""#, r#""name":"Load""#, r#""name":"device bytes""#] {
            assert!(text.contains(needle), "{needle} missing");
        }
        assert_eq!(text.matches('{').count(), text.matches('}').count());
        Ok(())
    });
}

#[test]
fn dlpack_export_shares_the_current_data_and_settles_it_home() {
    use tensorref::ffi::{tr_tensor_from_dlpack, tr_tensor_to_dlpack, TrTensor};
    exclusive(|| {
        let a = Tensor::randn(&[8, 8], DType::F32)?;
        let expected = a.add(&a)?.to_vec::<f32>()?;
        configure(Policy::Flow, 1 << 20);
        let y = a.add(&a)?; // its newest copy is on the device
        assert!(y.is_resident()?);
        let mut managed = std::ptr::null_mut();
        assert_eq!(tr_tensor_to_dlpack(TrTensor::from(y.id()), &mut managed), tensorref::Status::TR_OK);
        assert!(!y.is_resident()?, "the export leaves the home copy as the only one");
        let mut back = TrTensor { id: 0 };
        assert_eq!(tr_tensor_from_dlpack(managed, &mut back), tensorref::Status::TR_OK);
        let shared = Tensor::from_raw(back.into());
        assert_eq!(shared.to_vec::<f32>()?, expected, "the exported memory holds the current values");
        Ok(())
    });
}

// ---------------------------------------------------------------- what a GPU would stall on

/// The benchmark's stack (benches/residency.rs) scaled down, run for five passes that each read
/// their output on the host: 16 layers whose weights are 4x the budget, activations a quarter of
/// a weight. Returns the last pass's schedule log and the counters after the first pass and after
/// the last.
/// The numbers of an SVG attribute's value (a path's `d`, a line's coordinate).
fn numbers(value: &str) -> Vec<f64> {
    value.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-')).filter(|n| !n.is_empty()).map(|n| n.parse().unwrap()).collect()
}

/// The value of attribute `name` in the first element of `svg` that `marker` starts.
fn attribute<'a>(svg: &'a str, marker: &str, name: &str) -> &'a str {
    let element = &svg[svg.find(marker).unwrap_or_else(|| panic!("{marker} missing"))..];
    let element = &element[..element.find('>').unwrap()];
    let start = element.find(&format!(" {name}=\"")).unwrap_or_else(|| panic!("{marker} has no {name}")) + name.len() + 3;
    &element[start..start + element[start..].find('"').unwrap()]
}

/// The memory picture of a stack under Flow at a quarter of its weights: its budget line sits at
/// the budget, no layer rises above it, the tallest stack is the peak the events saw, each
/// marked iteration has its line, and loads and prefetches have their marks.
#[test]
fn timeline_svg_draws_memory_under_the_budget_line() {
    exclusive(|| {
        let budget = 4 * 64 * 64 * 4;
        let weights: Vec<Tensor> = (0..16).map(|_| Tensor::randn(&[64, 64], DType::F32)).collect::<Result<_>>()?;
        let x = Tensor::randn(&[8, 64], DType::F32)?;
        let peak = configure(Policy::Flow, budget);
        residency::timeline_start()?;
        for _ in 0..3 {
            with_scope(|_| {
                let mut h = x.alias()?;
                for w in &weights {
                    h = h.matmul(w)?.relu()?;
                }
                h.sum()?.item()
            })?;
            residency::mark_iteration()?;
        }
        let path = std::env::temp_dir().join(format!("tensorref-memory-{}.svg", std::process::id()));
        residency::timeline_write(&path)?;
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();

        let number = |name| attribute(&svg, "<svg", name).parse::<f64>().unwrap();
        let (drawn_peak, max) = (number("data-peak-bytes"), number("data-max-bytes"));
        assert_eq!(number("data-budget-bytes"), budget as f64);
        assert_eq!(drawn_peak, peak.load(Ordering::Relaxed) as f64, "the picture's peak is the events' peak");
        assert!(drawn_peak > 0.0 && drawn_peak <= budget as f64);
        let plot = numbers(attribute(&svg, "<svg", "data-plot")); // left top right bottom
        let y = |bytes: f64| plot[3] - (plot[3] - plot[1]) * bytes / max;
        let budget_y = numbers(attribute(&svg, r#"<line class="budget""#, "y1"))[0];
        assert!((budget_y - y(budget as f64)).abs() < 0.01, "budget line at {budget_y}, the budget at {}", y(budget as f64));

        let mut top = f64::MAX;
        for layer in svg.split(r#"<path class="layer""#).skip(1) {
            let d = &layer[layer.find(" d=\"").unwrap() + 4..];
            let ys: Vec<f64> = numbers(&d[..d.find('"').unwrap()]).into_iter().skip(1).step_by(2).collect();
            top = ys.iter().copied().fold(top, f64::min);
            assert!(ys.iter().all(|&v| v >= budget_y - 0.01), "a layer rises above the budget line");
        }
        assert!((top - y(drawn_peak)).abs() < 0.01, "the tallest stack ({top}) is the peak ({})", y(drawn_peak));
        assert_eq!(svg.matches(r#"<line class="iteration""#).count(), 3);
        for kind in ["loads", "prefetches"] {
            assert!(attribute(&svg, &format!(r#"data-kind="{kind}""#), "d").contains('M'), "no {kind} marked");
        }
        let weights_layer = attribute(&svg, r#"data-role="weights and inputs""#, "d");
        assert!(numbers(weights_layer).into_iter().skip(1).step_by(2).any(|v| v < plot[3] - 1.0), "no weights drawn");
        Ok(())
    });
}

fn logged_stack(cfg: Config) -> Result<(tensorref::residency::model::Pass, residency::ResidencyStats, residency::ResidencyStats)> {
    let (width, layers, batch) = (256i64, 16, 64i64);
    let weights: Vec<Tensor> = (0..layers).map(|_| Tensor::randn(&[width, width], DType::F32)).collect::<Result<_>>()?;
    let x = Tensor::randn(&[batch, width], DType::F32)?;
    let pass = || -> Result<f64> {
        with_scope(|_| {
            let mut h = x.alias()?;
            for w in &weights {
                let z = h.linear(w, None)?;
                drop(h);
                h = z.relu()?;
            }
            h.mean()?.item()
        })
    };
    residency::configure(cfg)?;
    residency::schedule_log_start()?;
    pass()?;
    residency::mark_iteration()?;
    let first = residency::stats().unwrap();
    for _ in 0..4 {
        pass()?;
        residency::mark_iteration()?;
    }
    let last = residency::stats().unwrap();
    Ok((residency::schedule_log().expect("a pass was logged"), first, last))
}

/// `logged_stack`'s budget: a quarter of its weights.
const STACK_BUDGET: u64 = 16 * 256 * 256 * 4 / 4;

/// A layer of `logged_stack` (256 KiB) crosses a 53.6 GB/s link in 4.9 us; its product (8.4
/// MFLOP) takes that long at 1.7 TFLOP/s: the balanced case, between a link-bound (6 TFLOP/s)
/// and a compute-bound one (0.5).
const BALANCED_TFLOPS: f64 = 1.7;

/// From the second pass on, Flow makes no new page-locked allocation, no copy from pageable
/// memory, no write-through wait and no needless write-back, loads nothing on demand, and the
/// schedule model puts its steady-state pass at 0.95 of the bound or better, whether the link,
/// the compute or neither is the bottleneck.
#[test]
fn flow_in_steady_state_pays_nothing_a_gpu_would_stall_on_and_overlaps_its_copies() {
    use tensorref::residency::model;
    exclusive(|| {
        let (log, first, s) = logged_stack(Config::new(DEVICE, Policy::Flow, STACK_BUDGET))?; // prefetch as far as the budget allows
        assert!(first.page_locked_allocs > 0, "the first pass moves the weights into page-locked memory: {first:?}");
        assert_eq!(s.page_locked_allocs, first.page_locked_allocs, "new page-locked memory in steady state: {s:?}");
        assert_eq!(s.pageable_copies, 0, "{s:?}");
        assert_eq!(s.write_through_waits, 0, "{s:?}");
        assert_eq!(s.needless_write_backs, 0, "{s:?}");
        assert_eq!(s.prefetch_misses, first.prefetch_misses, "an input loaded on demand in steady state: {s:?}");
        if DEVICE == Device::Simulated {
            // On a GPU much faster than the host, an op may be queued before its prefetch has
            // ended: the stream then waits a little whatever the schedule.
            assert_eq!(s.load_wait_ns, first.load_wait_ns, "an op waited for its input's copy in steady state: {s:?}");
        }
        assert!(s.prefetch_hits > 0 && s.peak_device_bytes <= STACK_BUDGET, "{s:?}");
        for tflops in [6.0, BALANCED_TFLOPS, 0.5] {
            let r = model::replay(&log, 53.6e9, model::roofline(tflops * 1e12, 3e12, 4));
            assert!(r.efficiency() >= 0.95 && r.efficiency() <= 1.0 + 1e-9, "{tflops} TFLOP/s: {r:?}");
        }
        Ok(())
    });
}

/// The stack on the simulated device running 8 ops behind the host: Flow evicts and loads what
/// it does on a device that keeps up, and waits, where a load needs the room, for the device to
/// finish with the copies it let go of, so that the allocator's real peak stays within the budget.
/// Without those waits the copies let go of but still the device's would add to the peak.
#[test]
fn flow_waits_for_a_device_behind_the_host_to_free_the_room_it_loads_into() {
    if DEVICE != Device::Simulated {
        return; // only the simulated device can be made to run behind
    }
    exclusive(|| {
        let run = |lag: u64| -> Result<(residency::ResidencyStats, residency::DeviceMemory)> {
            residency::set_simulated_lag(lag);
            let ran = logged_stack(Config::new(DEVICE, Policy::Flow, STACK_BUDGET));
            residency::set_simulated_lag(0);
            let (_, _, s) = ran?;
            let memory = residency::device_memory(false);
            residency::disable()?;
            Ok((s, memory))
        };
        let (kept_up, _) = run(0)?;
        let (behind, memory) = run(8)?;
        assert!(memory.peak <= STACK_BUDGET, "the allocator counted {memory:?} of a budget of {STACK_BUDGET}");
        assert_eq!(kept_up.freeing_waits, 0, "{kept_up:?}");
        assert!(behind.freeing_waits > 0, "no load waited for the device: {behind:?}");
        let moves = |s: &residency::ResidencyStats| (s.loads, s.load_bytes, s.evictions, s.prefetches, s.prefetch_misses);
        assert_eq!(moves(&behind), moves(&kept_up), "the device's lag changed what moved");
        Ok(())
    });
}

/// A prefetch depth as deep as the C ABI's field holds (u32::MAX) reaches no further than the
/// recording: Flow runs the stack as with the whole recording in its window, within the budget,
/// every input prefetched in steady state.
#[test]
fn flow_with_the_deepest_prefetch_depth_runs_within_the_budget() {
    exclusive(|| {
        let cfg = Config { prefetch_depth: u32::MAX as usize, ..Config::new(DEVICE, Policy::Flow, STACK_BUDGET) };
        let (_, first, s) = logged_stack(cfg)?;
        assert_eq!(s.prefetch_misses, first.prefetch_misses, "an input loaded on demand in steady state: {s:?}");
        assert!(s.prefetch_hits > first.prefetch_hits && s.peak_device_bytes <= STACK_BUDGET, "{s:?}");
        Ok(())
    });
}

/// The overlap test can fail: the same stack with prefetching off (every input loaded when its op
/// needs it, into room made by evicting what is used furthest ahead) scores below 0.8 at the
/// balanced rate, and the ops wait for their copies.
#[test]
fn without_prefetching_the_schedule_model_shows_the_stalls() {
    use tensorref::residency::model;
    exclusive(|| {
        let cfg = Config { prefetch_depth: 0, ..Config::new(DEVICE, Policy::Flow, STACK_BUDGET) };
        let (log, first, s) = logged_stack(cfg)?;
        let r = model::replay(&log, 53.6e9, model::roofline(BALANCED_TFLOPS * 1e12, 3e12, 4));
        assert!(r.efficiency() < 0.8, "loads on demand overlap as if prefetched: {r:?}");
        assert!(s.load_wait_ns > first.load_wait_ns, "no op waited for a copy: {s:?}");
        Ok(())
    });
}

/// The schedule model is a lower bound: no replay beats max(bytes loaded, bytes written back over
/// the bandwidth; compute time), whatever the log. Random logs of ops, loads (some of homes still
/// being written back, some waiting for room, in this pass or the one before) write-backs and
/// host reads, at several bandwidths; and the log that once beat it by 2x, where a load of a home
/// being written back ran beside another load as if on an engine of its own.
#[test]
fn the_schedule_model_never_beats_its_bound() {
    use tensorref::residency::model::{replay, Pass, Step, Work};
    let op = |storages: Vec<u64>| Step::Op { name: "relu", storages, input_bytes: vec![], shapes: vec![], output_bytes: 1 << 20, work: Work::Program };
    let gib = 1u64 << 30;
    let beside = Pass {
        steps: vec![
            op(vec![]),
            Step::WriteBack { storage: 1, bytes: 1 << 20, after: Some(0) },
            Step::Load { storage: 1, bytes: gib, after: None },
            Step::Load { storage: 2, bytes: gib, after: None },
            op(vec![1, 2]),
        ],
    };
    let r = replay(&beside, gib as f64, |_: &Step| 0.0);
    assert!(r.efficiency() <= 1.0 + 1e-9 && r.makespan >= 2.0 - 1e-9, "two loads of 1 GiB at 1 GiB/s: {r:?}");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    for log in 0..200 {
        let mut steps = vec![];
        let mut ops = 0usize;
        for _ in 0..40 {
            let storage = next(6);
            let bytes = (1 + next(8)) << 20;
            // An op of this pass or of the one before.
            let after = (next(2) == 0).then(|| next(ops as u64 + 4) as isize - 4);
            match next(5) {
                0 => steps.push(Step::WriteBack { storage, bytes, after: Some(ops as isize - 1) }),
                1 => steps.push(Step::Load { storage, bytes, after }),
                2 => steps.push(Step::HostWait { after: after.unwrap_or(-1) }),
                _ => {
                    steps.push(op((0..next(3)).map(|_| next(6)).collect()));
                    ops += 1;
                }
            }
        }
        let pass = Pass { steps };
        for (bandwidth, per_op) in [(1e9, 1e-3), (1e10, 1e-3), (1e9, 1e-5)] {
            let r = replay(&pass, bandwidth, |s: &Step| if matches!(s, Step::Op { .. }) { per_op } else { 0.0 });
            assert!(r.efficiency() <= 1.0 + 1e-9, "log {log} at {bandwidth} B/s: {r:?}");
        }
    }
}

/// The schedule model's copy engines: a load and a write-back of different storages run at once
/// (the link is full duplex, and each direction has its side stream), while the load of a home
/// whose write-back is under way follows it on the write-back stream.
#[test]
fn the_schedule_model_copies_both_ways_at_once_but_loads_a_home_only_once_written() {
    use tensorref::residency::model::{replay, Pass, Step, Work};
    let op = |storages: Vec<u64>| Step::Op { name: "relu", storages, input_bytes: vec![], shapes: vec![], output_bytes: 0, work: Work::Program };
    // An op, a write-back of storage 1, a load of `loaded` as large, an op reading it.
    let pass = |loaded: u64| Pass {
        steps: vec![op(vec![]), Step::WriteBack { storage: 1, bytes: 1 << 30, after: Some(0) }, Step::Load { storage: loaded, bytes: 1 << 30, after: None }, op(vec![loaded])],
    };
    let r = |loaded: u64| replay(&pass(loaded), 1e9, |_: &Step| 0.0);
    let (other, home) = (r(2), r(1));
    assert!((other.efficiency() - 1.0).abs() < 1e-9, "another storage's load overlaps the write-back: {other:?}");
    assert!(home.makespan >= home.copy_busy - 1e-9, "the home's load waits for its write-back: {home:?}");
}

/// The host timeline: a load issued after the host read a result starts once that result is
/// made, where the same load issued before the read overlaps the op.
#[test]
fn the_schedule_model_starts_nothing_before_the_host_issues_it() {
    use tensorref::residency::model::{replay, Pass, Step, Work};
    let op = |storages: Vec<u64>| Step::Op { name: "relu", storages, input_bytes: vec![], shapes: vec![], output_bytes: 0, work: Work::Program };
    let (load, read) = (Step::Load { storage: 1, bytes: 1 << 30, after: None }, Step::HostWait { after: 0 });
    let replayed = |steps: Vec<Step>| replay(&Pass { steps }, 1e9, |s: &Step| if matches!(s, Step::Op { storages, .. } if storages.is_empty()) { 1.0 } else { 0.0 });
    let ahead = replayed(vec![op(vec![]), load.clone(), read.clone(), op(vec![1])]);
    let behind = replayed(vec![op(vec![]), read, load, op(vec![1])]);
    assert!((ahead.efficiency() - 1.0).abs() < 1e-9, "a load issued before the read overlaps the op: {ahead:?}");
    assert!(behind.makespan >= ahead.copy_busy + ahead.compute_busy - 1e-9, "a load issued after the read waits for the op: {behind:?}");
}

/// `pin_host_memory = false` turns page-locked memory off: homes stay pageable (each copy then
/// counts as a pageable one) and nothing is page-locked, with the same results.
#[test]
fn without_page_locking_every_home_stays_pageable() {
    exclusive(|| {
        let ws: Vec<Tensor> = (0..6).map(|_| Tensor::randn(&[32, 32], DType::F32)).collect::<Result<_>>()?;
        let expected: Vec<Vec<f32>> = ws.windows(2).map(|w| w[0].matmul(&w[1])?.to_vec::<f32>()).collect::<Result<_>>()?;
        let mut cfg = Config::new(DEVICE, Policy::Genoa, 16 << 10);
        cfg.pin_host_memory = false;
        residency::configure(cfg)?;
        let got: Vec<Tensor> = ws.windows(2).map(|w| w[0].matmul(&w[1])).collect::<Result<_>>()?;
        let s = residency::stats().unwrap();
        for (g, e) in got.iter().zip(&expected) {
            assert_same(&[Some(g.to_vec::<f32>()?)], &[Some(e.clone())], "pageable homes");
        }
        assert_eq!(s.page_locked_allocs, 0, "{s:?}");
        assert!(s.pageable_copies >= s.loads + s.write_backs && s.write_backs > 0, "{s:?}");
        Ok(())
    });
}

/// An entry keeps the id of the storage the manager that first saw it gave it. Ids are never
/// reused, so under the next manager that id names nothing: the tensor is registered again, its
/// device copy counted in the new manager's bytes, and it reads what it held.
#[test]
fn a_tensor_an_earlier_manager_saw_is_registered_again_by_the_next() {
    exclusive(|| {
        let a = Tensor::ones(&[256], DType::F32)?;
        configure(Policy::Flow, 1 << 20);
        a.add(&a)?.sum()?.item()?; // the first manager registers `a`
        residency::disable()?;
        configure(Policy::Flow, 1 << 20);
        let doubled = a.add(&a)?;
        assert!(residency::stats().unwrap().device_bytes >= 2 * 1024, "`a` and the result are on the device");
        assert_eq!(doubled.sum()?.item()?, 512.0);
        drop((a, doubled));
        assert_eq!(residency::stats().unwrap().device_bytes, 0, "both are forgotten with their handles");
        Ok(())
    });
}

/// A loop that never marks its iterations: adds over 64 tensors of 4 KiB, op i reading tensors
/// i % 64 and (7i + 3) % 64. Under a budget of a quarter of them, Flow finds the period by
/// itself: it records one whole period once and follows that recording from then on, loading
/// within 1.1x of what it loads a period when the program marks each period.
#[test]
fn flow_finds_the_period_of_a_loop_that_never_marks_and_keeps_it() {
    exclusive(|| {
        const N: usize = 64;
        let elements = 1024i64;
        let budget = N as u64 * elements as u64 * 4 / 4; // a quarter of the tensors' f32 bytes
        // The bytes loaded in the last period, and the recording after each period.
        let run = |marked: bool| -> Result<(u64, Vec<Option<Vec<residency::OpRecord>>>)> {
            let live: Vec<Tensor> = (0..N).map(|i| Tensor::full(&[elements], i as f64, DType::F32)).collect::<Result<_>>()?;
            let peak = configure(Policy::Flow, budget);
            let (mut loads, mut recordings) = (0, vec![]);
            for period in 0..12 {
                let before = residency::stats().unwrap().load_bytes;
                for i in 0..N {
                    let (a, b) = (i, (7 * i + 3) % N);
                    let sum = live[a].add(&live[b])?;
                    if i == N - 1 {
                        assert_eq!(sum.to_vec::<f32>()?[0], (a + b) as f32, "period {period}");
                    }
                }
                if marked {
                    residency::mark_iteration()?;
                }
                loads = residency::stats().unwrap().load_bytes - before;
                recordings.push(residency::recorded_trace());
            }
            assert!(peak.load(Ordering::Relaxed) <= budget);
            residency::disable()?;
            Ok((loads, recordings))
        };
        let (marked_loads, marked) = run(true)?;
        let (loads, unmarked) = run(false)?;
        for (how, recordings) in [("marked", &marked), ("unmarked", &unmarked)] {
            let last = recordings.last().unwrap().as_ref().expect("a recording");
            assert_eq!(last.len(), N, "{how}: one whole period recorded");
            let since = recordings.iter().position(|r| r.as_ref() == Some(last)).unwrap();
            assert!(since <= 2, "{how}: the last recording first seen after period {since}, not kept from period 2 on");
        }
        assert!(loads as f64 <= 1.1 * marked_loads as f64, "unmarked {loads} bytes loaded a period, marked {marked_loads}");
        Ok(())
    });
}
