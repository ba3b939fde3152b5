//! A stack of layers whose weights are 4x the device budget, forward passes under CPU-only (no
//! manager), Resident (where it fits), Genoa and Flow, printed side by side. Per row: time per
//! pass, bytes moved per pass, the whole output checked against a reference computed
//! independently (plain libtorch, every weight on the compute device), peak device memory (the
//! manager's books; the simulated device's allocator; CUDA's caching allocator reserved), and
//! what a GPU would stall on (inputs loaded on demand, time ops waited for copies).
//!
//! Time and bytes cover one window per pass: the device is synchronised (every stream, the
//! copies' side streams included) before the timer starts and before it stops, so a copy a pass
//! starts for the next pass lies in the window whose bytes count it. Each row runs after CUDA's
//! caching allocator has given its cache back and started its peaks anew.
//!
//! Two bounds for the bytes a pass loads, as time over the link: the bytes Flow loaded, and the
//! fewest bytes any schedule that repeats every pass must load within the budget (`min_loads`).
//! On CUDA a row faster than either is SUSPECT; on the simulated device the schedule model's
//! replay of the pass (a lower bound for a GPU at given rates, `residency::model`) is held to them. The
//! "/Belady" column is the loads over Belady's MIN on the recorded trace: exact for equal sizes,
//! a heuristic (not a bound) when sizes differ. A failed output check, a SUSPECT row, loads
//! below the fewest possible, or (on the simulated device) a budgeted row whose allocator peak
//! exceeds the budget make the run exit 1. `benches/residency_peers.py` runs the same
//! stack in PyTorch (resident, hand-written streams, accelerate, optimem, CPU).
//!
//!     cargo bench --bench residency -- [--device simulated|cuda] [--width 512] [--layers 16]
//!         [--batch 768] [--passes 5] [--dtype f32|f16] [--shape linear|opt30b]
//!         [--policies cpu,resident,genoa,flow] [--budget-div 4] [--tflops T] [--lag OPS] [--json PATH]
//!
//! `--lag` makes the simulated device run that many ops behind the host, as a GPU does: memory
//! the manager let go of stays the device's until the device is past it, and the host waits where
//! the budget needs it (docs/residency.md, "Memory the device still uses"; the allocator's peak
//! stays within the budget, and the steady-state line counts the waits).
//! `--shape opt30b` builds OPT-30B-like blocks (four weights of 3h x h, h x h, 4h x h, h x 4h
//! with h = `--width`) instead of square layers; `--layers` counts blocks.

#[path = "common/cli.rs"]
mod cli;
use cli::{usage, Cli};
use std::time::Instant;
use tch::Kind;
use tensorref::residency::{self, model, Device, Config, Policy, ResidencyStats};
use tensorref::{no_grad, with_scope, DType, Result, Tensor};

/// The row that runs with room for every weight, under no budget.
const RESIDENT_ROW: &str = "Resident (fits: no budget)";

/// The rows `--policies` may name.
const POLICIES: [&str; 4] = ["cpu", "resident", "genoa", "flow"];

struct Args {
    device: Device,
    width: i64,
    layers: usize,
    batch: i64,
    passes: usize,
    dtype: DType,
    opt30b: bool,
    policies: Vec<String>,
    budget_div: u64,
    /// The schedule model's compute rate (default: an H100's).
    tflops: Option<f64>,
    /// How many ops the simulated device runs behind the host.
    lag: u64,
    json: Option<String>,
}

fn args() -> Args {
    let cli = Cli::new();
    // Activations of 1.5x a layer's weights: a layer's working set (in + weights + out) is then
    // exactly the budget, and Genoa moves activations as well as weights.
    let a = Args {
        device: cli.parsed("--device", Device::Simulated),
        width: cli.parsed("--width", 512),
        layers: cli.parsed("--layers", 16),
        batch: cli.parsed("--batch", 768),
        passes: cli.parsed("--passes", 5),
        dtype: if cli.choice("--dtype", &["f32", "f16"]) == "f16" { DType::F16 } else { DType::F32 },
        opt30b: cli.choice("--shape", &["linear", "opt30b"]) == "opt30b",
        policies: cli.list("--policies", &POLICIES.join(",")),
        budget_div: cli.parsed("--budget-div", 4),
        tflops: cli.optional("--tflops"),
        lag: cli.parsed("--lag", 0),
        json: cli.value("--json"),
    };
    if let Some(p) = a.policies.iter().find(|p| !POLICIES.contains(&p.as_str())) {
        usage(format!("--policies: {p} is not one of {}", POLICIES.join(", ")));
    }
    if a.budget_div == 0 || a.passes == 0 {
        usage("--budget-div and --passes: at least 1");
    }
    if a.lag > 0 && a.device != Device::Simulated {
        usage("--lag: only the simulated device runs behind the host as told (a GPU does so by itself)");
    }
    a
}

/// One layer: weights [out, in] applied in order (a square layer has one; an OPT block four,
/// with the first's output narrowed back to the hidden size as attention would).
struct Model {
    layers: Vec<Vec<Tensor>>,
    x: Tensor,
    width: i64,
    batch: i64,
}

impl Model {
    /// Every layer its own weights, drawn from the seeded generator; on CUDA drawn on the device
    /// (tens of GiB drawn on the host would take minutes) and copied home. Scaled so activations
    /// keep their size: 1/sqrt(in) per product, and the two products that feed an OPT block's
    /// residual additions by 1/sqrt(2 layers) more (as GPT-2 does), or f16 overflows by the last
    /// block.
    fn build(a: &Args) -> Result<Model> {
        let h = a.width;
        let shapes: Vec<[i64; 2]> = if a.opt30b { vec![[3 * h, h], [h, h], [4 * h, h], [h, 4 * h]] } else { vec![[h, h]] };
        let residual = 1.0 / (2.0 * a.layers as f64).sqrt();
        tch::manual_seed(0);
        let draw = |shape: &[i64], scale: f64| -> Result<Tensor> {
            let t = tch::Tensor::f_randn(shape, (Kind::Float, a.device.tch()))?.f_mul_scalar(scale)?;
            Ok(Tensor::from_tch(t.f_to_kind(kind(a.dtype))?.f_to_device(tch::Device::Cpu)?))
        };
        let layers = (0..a.layers)
            .map(|_| {
                let scales = shapes.iter().enumerate().map(|(i, s)| (if a.opt30b && i % 2 == 1 { residual } else { 1.0 }) / (s[1] as f64).sqrt());
                shapes.iter().zip(scales).map(|(s, scale)| draw(s, scale)).collect()
            })
            .collect::<Result<_>>()?;
        Ok(Model { layers, x: draw(&[a.batch, h], 1.0)?, width: h, batch: a.batch })
    }

    fn weight_bytes(&self) -> Result<u64> {
        self.layers.iter().flatten().try_fold(0, |n, w| Ok(n + bytes(w)?))
    }

    /// The fewest bytes a pass must load, for a schedule that repeats every pass, with `budget`
    /// device bytes: all the weights but those that stay on the device throughout. While the op
    /// of a weight `w` that does not stay runs, the device holds `w`, the op's input and output
    /// and every weight that stays; so those that stay hold at most the budget less the smallest
    /// such working set. (An OPT block's narrowed input is counted at its narrow size, which
    /// only lowers the bound.)
    fn min_loads(&self, budget: u64, elem: u64) -> Result<u64> {
        // Each weight's op reads [batch, in] and writes [batch, out].
        let mut working = u64::MAX;
        for w in self.layers.iter().flatten() {
            let shape = w.shape()?;
            let (out, inp) = (shape[0] as u64, shape[1] as u64);
            working = working.min(bytes(w)? + self.batch as u64 * (inp + out) * elem);
        }
        Ok(self.weight_bytes()?.saturating_sub(budget.saturating_sub(working)))
    }

    /// One pass: the output in f32, and its mean read on the host (as a loop reads its loss).
    /// Every activation is dropped before the op after its last use, so none is ever written
    /// back to make room.
    fn forward(&self) -> Result<Tensor> {
        with_scope(|_| {
            let mut h = self.x.alias()?;
            for ws in &self.layers {
                h = match &ws[..] {
                    [w] => {
                        let z = h.linear(w, None)?;
                        drop(h);
                        z.relu()?
                    }
                    [qkv, o, fc1, fc2] => {
                        let a = h.linear(qkv, None)?.narrow(1, 0, self.width)?;
                        let attn = a.linear(o, None)?;
                        drop(a);
                        let h1 = h.add(&attn)?;
                        drop((h, attn));
                        let up = h1.linear(fc1, None)?;
                        let act = up.relu()?;
                        drop(up);
                        let down = act.linear(fc2, None)?;
                        drop(act);
                        h1.add(&down)?
                    }
                    _ => unreachable!("one or four weights per layer"),
                };
            }
            let out = h.to_dtype(DType::F32)?;
            out.mean()?.item()?;
            out.move_to_outer_scope()?;
            Ok(out)
        })
    }

    /// The same pass in plain libtorch with every weight on `device`: the reference every row's
    /// output is checked against.
    fn reference(&self, device: tch::Device) -> Result<tch::Tensor> {
        let on = |t: &Tensor| -> Result<tch::Tensor> { Ok(t.with_tch(|t| t.f_to_device(device))??) };
        let _no_grad = tch::no_grad_guard();
        let mut h = on(&self.x)?;
        for ws in &self.layers {
            let ws: Vec<tch::Tensor> = ws.iter().map(on).collect::<Result<_>>()?;
            h = match &ws[..] {
                [w] => h.f_linear::<tch::Tensor>(w, None)?.f_relu()?,
                [qkv, o, fc1, fc2] => {
                    let attn = h.f_linear::<tch::Tensor>(qkv, None)?.f_narrow(1, 0, self.width)?.f_linear::<tch::Tensor>(o, None)?;
                    let h1 = h.f_add(&attn)?;
                    let down = h1.f_linear::<tch::Tensor>(fc1, None)?.f_relu()?.f_linear::<tch::Tensor>(fc2, None)?;
                    h1.f_add(&down)?
                }
                _ => unreachable!("one or four weights per layer"),
            };
        }
        Ok(h.f_to_kind(Kind::Float)?.f_to_device(tch::Device::Cpu)?)
    }
}

fn kind(dtype: DType) -> Kind {
    if dtype == DType::F16 { Kind::Half } else { Kind::Float }
}

fn bytes(t: &Tensor) -> Result<u64> {
    Ok((t.numel()? * t.dtype()?.size()) as u64)
}

/// A row's output against the reference: the largest absolute difference, and the tolerance it
/// is held to.
struct Check {
    max_diff: f64,
    tolerance: f64,
}

impl Check {
    fn ok(&self) -> bool {
        self.max_diff <= self.tolerance
    }
}

struct Row {
    name: String,
    /// The first pass: it records the trace and, on CUDA, moves the weights into page-locked
    /// memory.
    first_pass: f64,
    /// The median of the timed passes' windows.
    secs_per_pass: f64,
    loaded: u64,
    written: u64,
    optimum: Option<u64>,
    check: Check,
    /// The schedule model's replay of the last pass, and the bytes that pass loaded.
    replay: Option<(model::Replay, u64)>,
    /// The counters over the timed passes (differences), and at their end.
    steady: Option<(ResidencyStats, ResidencyStats)>,
    /// The simulated device's allocator peak over the row (0 elsewhere).
    allocator_peak: u64,
}

/// What a row is checked against: `Model::reference`'s output, computed on `device`.
struct Reference {
    output: tch::Tensor,
    device: tch::Device,
    dtype: DType,
    /// max |output|.
    peak: f64,
}

impl Reference {
    /// The tolerance for a row computed on `device`, relative to max |output|: none for the
    /// same kernels on the host (the simulated device is host memory); on the same GPU the
    /// rounding of kernels chosen anew (cuBLAS may pick another algorithm for another
    /// workspace), as benches/residency_peers.py allows; on another device that of other kernels.
    fn tolerance(&self, device: tch::Device) -> f64 {
        let f16 = self.dtype == DType::F16;
        match (device == self.device, device) {
            (true, tch::Device::Cpu) => 0.0,
            (true, _) => if f16 { 2e-2 } else { 1e-4 },
            (false, _) => if f16 { 5e-2 } else { 1e-3 },
        }
    }

    fn check(&self, out: &Tensor, device: tch::Device) -> Result<Check> {
        let out = out.with_tch(|t| t.f_to_device(tch::Device::Cpu))??;
        let max_diff = if out.size() == self.output.size() { out.f_sub(&self.output)?.f_abs()?.f_max()?.f_double_value(&[])? } else { f64::INFINITY };
        Ok(Check { max_diff, tolerance: self.tolerance(device) * self.peak })
    }
}

/// What every row shares: the reference, where the rows run, how many timed passes, and the
/// schedule model's link and compute.
struct Setup<'a, C> {
    reference: &'a Reference,
    device: Device,
    passes: usize,
    bandwidth: f64,
    compute: C,
}

/// Runs the passes (the first is a warm-up that records the trace) and measures the rest, each
/// in its own window (see the module's comment).
fn run<C: Fn(&model::Step) -> f64>(model: &Model, name: &str, cfg: Option<Config>, setup: &Setup<C>) -> Result<Row> {
    let sync = || {
        if let Device::Cuda(n) = setup.device {
            tch::Cuda::synchronize(n as i64);
        }
    };
    if let Some(cfg) = cfg {
        residency::configure(cfg)?;
        residency::reset_reserved_peak()?;
        residency::device_memory(true);
        residency::schedule_log_start()?;
    }
    let first = Instant::now();
    drop(model.forward()?);
    sync();
    let first_pass = first.elapsed().as_secs_f64();
    let _ = residency::mark_iteration();
    let before = residency::stats().unwrap_or_default();
    let mut times = vec![];
    let mut out = None;
    for _ in 0..setup.passes {
        drop(out.take()); // the previous output is not held through the pass
        sync();
        let start = Instant::now();
        out = Some(model.forward()?);
        sync();
        times.push(start.elapsed().as_secs_f64());
        let _ = residency::mark_iteration();
    }
    let after = residency::stats().unwrap_or_default();
    let allocator_peak = if cfg.is_some() { residency::device_memory(false).peak } else { 0 };
    let optimum = residency::recorded_trace().map(|t| residency::offline_min_loads(&t, after.budget, after.pinned_bytes, 3));
    let replay = residency::schedule_log().map(|pass| (model::replay(&pass, setup.bandwidth, &setup.compute), pass.loaded_bytes()));
    // Without a manager the pass runs on the host.
    let device = if cfg.is_some() { setup.device.tch() } else { tch::Device::Cpu };
    let check = setup.reference.check(out.as_ref().expect("at least one timed pass"), device)?;
    drop(out);
    residency::disable()?;
    times.sort_by(f64::total_cmp);
    let per_pass = |a: u64, b: u64| (a - b) / times.len() as u64;
    Ok(Row {
        name: name.into(),
        first_pass,
        secs_per_pass: times[times.len() / 2],
        loaded: per_pass(after.load_bytes, before.load_bytes),
        written: per_pass(after.write_back_bytes, before.write_back_bytes),
        optimum,
        check,
        replay,
        steady: cfg.map(|_| (delta(&after, &before), after)),
        allocator_peak,
    })
}

/// The counters that must stay at zero in steady state, as differences.
fn delta(after: &ResidencyStats, before: &ResidencyStats) -> ResidencyStats {
    ResidencyStats {
        page_locked_allocs: after.page_locked_allocs - before.page_locked_allocs,
        pageable_copies: after.pageable_copies - before.pageable_copies,
        write_through_waits: after.write_through_waits - before.write_through_waits,
        needless_write_backs: after.needless_write_backs - before.needless_write_backs,
        prefetch_misses: after.prefetch_misses - before.prefetch_misses,
        load_wait_ns: after.load_wait_ns - before.load_wait_ns,
        transfer_wait_ns: after.transfer_wait_ns - before.transfer_wait_ns,
        freeing_waits: after.freeing_waits - before.freeing_waits,
        freeing_wait_ns: after.freeing_wait_ns - before.freeing_wait_ns,
        ..*after
    }
}

/// Host-to-device bandwidth from page-locked memory: a 1 GiB copy, best of three.
fn measured_bandwidth(device: Device) -> Option<f64> {
    let Device::Cuda(n) = device else { return None };
    let host = tch::Tensor::zeros([1 << 28], (Kind::Float, tch::Device::Cpu)).pin_memory(tch::Device::Cuda(n));
    let mut best = f64::MAX;
    for _ in 0..4 {
        tch::Cuda::synchronize(n as i64);
        let start = Instant::now();
        let d = host.to_device_(tch::Device::Cuda(n), Kind::Float, true, false);
        tch::Cuda::synchronize(n as i64);
        best = best.min(start.elapsed().as_secs_f64());
        drop(d);
    }
    Some((1u64 << 30) as f64 / best)
}

/// What CUDA's caching allocator may reserve beyond the budget under a managed policy: the
/// cuBLAS and cuBLASLt workspaces (32 MiB each, PyTorch's defaults on Hopper) and the rounding
/// of the blocks alive at the peak (at most 2 MiB each for large blocks; 32 blocks allowed for).
const RESERVED_ALLOWANCE: u64 = (2 * 32 + 32 * 2) << 20;

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}


fn main() -> Result<()> {
    let a = args();
    let _no_grad = tensorref::NoGradGuard::new();
    let model = Model::build(&a)?;
    residency::set_simulated_lag(a.lag);
    let weight_bytes = model.weight_bytes()?;
    let budget = weight_bytes / a.budget_div;
    let elem = a.dtype.size() as u64;
    let min_loads = model.min_loads(budget, elem)?;
    let measured = measured_bandwidth(a.device);
    let bandwidth = measured.unwrap_or(model::Rates::H100.link);
    // The schedule model's compute rate: an H100's f16 rate on tensor cores as PyTorch resident
    // ran the 30B shape (121 TFLOP in 173.0 ms), and its f32 rate without TF32, libtorch's
    // default for matrix products (docs/performance.md).
    let flops = a.tflops.map_or(if a.dtype == DType::F16 { 700e12 } else { model::Rates::H100.flops }, |t| t * 1e12);
    println!(
        "{} {} of {}x{} {:?} ({} of weights), batch {}, device budget {} (weights / {}), device {}, {} timed passes",
        a.layers, if a.opt30b { "OPT-style blocks" } else { "layers" }, a.width, a.width, a.dtype, mib(weight_bytes), a.batch, mib(budget), a.budget_div, a.device, a.passes
    );
    match measured {
        Some(b) => println!("host-to-device bandwidth from page-locked memory: {:.1} GB/s (measured now)", b / 1e9),
        None => println!("schedule model: a copy engine at {:.1} GB/s (an H100's PCIe link) beside {:.0} TFLOP/s", bandwidth / 1e9, flops / 1e12),
    }
    println!("fewest bytes a pass can load within the budget: {} (the weights less what can stay beside the smallest working set)\n", mib(min_loads));

    let cuda = matches!(a.device, Device::Cuda(_));
    let output = model.reference(a.device.tch())?;
    let peak = output.f_abs()?.f_max()?.f_double_value(&[])?;
    let reference = Reference { output, device: a.device.tch(), dtype: a.dtype, peak };
    // Elementwise ops at an H100's memory bandwidth.
    let setup = Setup { reference: &reference, device: a.device, passes: a.passes, bandwidth, compute: model::roofline(flops, 3e12, a.dtype.size()) };

    let cfg = |policy| Config::new(a.device, policy, budget);
    let wants = |p: &str| a.policies.iter().any(|x| x == p);
    let mut rows = vec![];
    if wants("cpu") {
        rows.push(no_grad(|| run(&model, "CPU-only", None, &setup))?);
    }
    if wants("resident") {
        let unbounded = Config { budget_bytes: weight_bytes * 4, ..cfg(Policy::Resident) };
        rows.push(run(&model, RESIDENT_ROW, Some(unbounded), &setup)?);
    }
    if wants("genoa") {
        rows.push(run(&model, "Genoa", Some(cfg(Policy::Genoa)), &setup)?);
    }
    if wants("flow") {
        rows.push(run(&model, "Flow", Some(cfg(Policy::Flow)), &setup)?);
    }

    let link_ms = |bytes: u64| bytes as f64 / bandwidth * 1e3;
    // A row's time (on CUDA) or its modelled last pass (elsewhere) against the link's time for
    // the bytes it loaded and for the fewest; below either is impossible.
    let against_bounds = |r: &Row| -> Option<(f64, f64)> {
        let (ms, loaded) = match (cuda, r.replay) {
            (true, _) => (r.secs_per_pass * 1e3, r.loaded),
            (false, Some((m, loaded))) => (m.makespan * 1e3, loaded),
            (false, None) => return None,
        };
        (loaded > 0).then(|| (ms / link_ms(loaded), ms / link_ms(min_loads)))
    };
    let suspect = |r: &Row| against_bounds(r).is_some_and(|(own, min)| own < 1.0 - 1e-9 || min < 1.0 - 1e-9) || (r.name == "Flow" && r.loaded < min_loads);

    let base = rows.first().map_or(1.0, |r| r.secs_per_pass);
    println!(
        "{:<28} {:>10} {:>9} {:>12} {:>12} {:>9} {:>22} {:>30}",
        "policy", "ms / pass", "vs first", "loaded/pass", "written/pass", "/Belady", if cuda { "time / link: own, min" } else { "model / link: own, min" }, "model: makespan / bound"
    );
    for r in &rows {
        let belady = r.optimum.filter(|&o| o > 0).map_or("-".into(), |o| format!("{:.3}", r.loaded as f64 / o as f64));
        let bounds = against_bounds(r).map_or("-".into(), |(own, min)| format!("{own:.3}, {min:.3}{}", if suspect(r) { " SUSPECT" } else { "" }));
        let model_col = r.replay.filter(|(m, loaded)| m.makespan > 0.0 && *loaded > 0).map_or("-".into(), |(m, _)| {
            format!("{:.2} / {:.2} ms = {:.3}", m.makespan * 1e3, m.bound * 1e3, m.efficiency())
        });
        println!(
            "{:<28} {:>10.2} {:>8.2}x {:>12} {:>12} {:>9} {:>22} {:>30}",
            r.name, r.secs_per_pass * 1e3, base / r.secs_per_pass, mib(r.loaded), mib(r.written), belady, bounds, model_col
        );
    }
    // On the simulated device the budget holds of the allocator's real bytes (docs/residency.md,
    // guarantee 2), the copies let go of but still the device's included.
    let over_budget = |r: &Row| !cuda && r.steady.is_some() && r.name != RESIDENT_ROW && r.allocator_peak > budget;
    println!("\nmemory (budget {}): peak on the device by the manager's books{}{}", mib(budget), if cuda { "" } else { ", by the simulated device's allocator" }, if cuda { ", CUDA's caching allocator reserved" } else { "" });
    for r in rows.iter().filter(|r| r.steady.is_some()) {
        let (_, end) = r.steady.unwrap();
        let device = if cuda { mib(end.peak_reserved_bytes) } else { mib(r.allocator_peak) };
        let bar = if cuda && r.name != RESIDENT_ROW {
            format!("  {:.3} of the budget + {} (cuBLAS workspaces, the allocator's rounding)", end.peak_reserved_bytes as f64 / (budget + RESERVED_ALLOWANCE) as f64, mib(RESERVED_ALLOWANCE))
        } else {
            String::new()
        };
        let over = if over_budget(r) { "  OVER BUDGET" } else { "" };
        println!("{:<28} {:>12} {:>12}{bar}{over}", r.name, mib(end.peak_device_bytes), device);
    }
    println!("\nsteady state (the timed passes; the first pass took the rest):");
    for r in rows.iter().filter(|r| r.steady.is_some()) {
        let (s, _) = r.steady.unwrap();
        let per_pass = |ns: u64| ns as f64 / 1e6 / a.passes as f64;
        println!(
            "{:<28} first pass {:.0} ms; {} new page-locked allocations, {} pageable copies, {} write-through waits, {} needless write-backs; {} inputs loaded on demand; ops waited {:.3} ms/pass for copies, the host {:.3} ms/pass; the host waited {:.1} times a pass ({:.3} ms) for the device to free memory",
            r.name, r.first_pass * 1e3, s.page_locked_allocs, s.pageable_copies, s.write_through_waits, s.needless_write_backs, s.prefetch_misses, per_pass(s.load_wait_ns), per_pass(s.transfer_wait_ns),
            s.freeing_waits as f64 / a.passes as f64, per_pass(s.freeing_wait_ns)
        );
    }
    println!("\noutput checks: each row's whole output against plain libtorch with every weight on {:?} (max |reference| {peak:.3e})", reference.device);
    for r in &rows {
        println!("{:<28} max |difference| {:.3e}, tolerance {:.3e}: {}", r.name, r.check.max_diff, r.check.tolerance, if r.check.ok() { "ok" } else { "FAILED" });
    }
    let ok = rows.iter().all(|r| r.check.ok() && !suspect(r) && !over_budget(r));
    if let Some(path) = &a.json {
        write_json(path, &a, weight_bytes, budget, min_loads, measured, &rows, &suspect, ok);
    }
    if !ok {
        println!("\nFAILED: an output check failed, a row is SUSPECT (faster than its bound, or Flow loaded fewer bytes than any schedule can), or a row went OVER BUDGET");
        std::process::exit(1);
    }
    Ok(())
}

/// The rows as JSON, for the GPU bundle's summary table.
#[allow(clippy::too_many_arguments)]
fn write_json(path: &str, a: &Args, weight_bytes: u64, budget: u64, min_loads: u64, bandwidth: Option<f64>, rows: &[Row], suspect: &dyn Fn(&Row) -> bool, ok: bool) {
    let ms = |bytes: u64| bandwidth.map_or("null".into(), |b| format!("{:.3}", bytes as f64 / b * 1e3));
    let rows: Vec<String> = rows
        .iter()
        .map(|r| {
            let (peak_device, peak_reserved) = r.steady.map_or((0, 0), |(_, end)| (end.peak_device_bytes, end.peak_reserved_bytes));
            format!(
                r#"{{"name":"{}","ms":{:.3},"loaded":{},"written":{},"model_efficiency":{},"max_diff":{:e},"tolerance":{:e},"ok":{},"suspect":{},"bound_ms":{},"min_bound_ms":{},"peak_device":{},"peak_reserved":{}}}"#,
                r.name,
                r.secs_per_pass * 1e3,
                r.loaded,
                r.written,
                r.replay.map_or("null".into(), |(m, _)| format!("{:.4}", m.efficiency())),
                r.check.max_diff,
                r.check.tolerance,
                r.check.ok(),
                suspect(r),
                if r.loaded > 0 { ms(r.loaded) } else { "null".into() },
                if r.loaded > 0 { ms(min_loads) } else { "null".into() },
                peak_device,
                peak_reserved,
            )
        })
        .collect();
    let text = format!(
        r#"{{"width":{},"layers":{},"batch":{},"dtype":"{:?}","shape":"{}","weight_bytes":{},"budget":{},"reserved_bar":{},"min_loads":{},"bandwidth":{},"ok":{},"rows":[{}]}}"#,
        a.width,
        a.layers,
        a.batch,
        a.dtype,
        if a.opt30b { "opt30b" } else { "linear" },
        weight_bytes,
        budget,
        budget + RESERVED_ALLOWANCE,
        min_loads,
        bandwidth.map_or("null".into(), |b| format!("{b:.0}")),
        ok,
        rows.join(",")
    );
    std::fs::write(path, text).expect("writing the JSON results");
}
