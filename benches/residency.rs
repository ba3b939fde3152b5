//! A stack of layers whose weights are 4x the device budget, forward passes under CPU-only (no
//! manager), Resident (where it fits), Genoa and Flow, printed side by side: time per pass,
//! throughput against CPU-only, bytes moved per pass, for Flow the bytes loaded over the offline
//! optimum (Belady's MIN on the recorded trace), and the schedule model's replay of Flow's last
//! pass (a copy engine at the link's bandwidth beside a compute engine) against the bound
//! max(bytes loaded / bandwidth, compute). On CUDA the link's bandwidth is measured in the run
//! and the PCIe bound printed beside the times. `benches/residency_peers.py` runs the same stack
//! in PyTorch (resident, a hand-written double-buffered stream, accelerate, optimem, CPU).
//!
//!     cargo bench --bench residency -- [--device simulated|cuda] [--width 512] [--layers 16]
//!         [--batch 768] [--passes 5] [--dtype f32|f16] [--shape linear|opt30b]
//!         [--policies cpu,resident,genoa,flow] [--budget-div 4] [--tflops T] [--json PATH]
//!
//! `--shape opt30b` builds OPT-30B-like blocks (four weights of 3h x h, h x h, 4h x h, h x 4h
//! with h = `--width`) instead of square layers; `--layers` counts blocks.

#[path = "common/cli.rs"]
mod cli;
use cli::Cli;
use std::time::Instant;
use tensorref::residency::{self, schedule, ComputeDevice, Config, PolicyKind};
use tensorref::{no_grad, with_scope, DType, Result, Tensor};

struct Args {
    device: ComputeDevice,
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
    json: Option<String>,
}

fn args() -> Args {
    let cli = Cli::new();
    // Activations of 1.5x a layer's weights: a layer's working set (in + weights + out) is then
    // exactly the budget, and Genoa moves activations as well as weights.
    Args {
        device: cli.value("--device").map_or(ComputeDevice::Simulated, |d| d.parse().expect("--device")),
        width: cli.num("--width", 512),
        layers: cli.num("--layers", 16) as usize,
        batch: cli.num("--batch", 768),
        passes: cli.num("--passes", 5) as usize,
        dtype: if cli.value("--dtype").as_deref() == Some("f16") { DType::F16 } else { DType::F32 },
        opt30b: cli.value("--shape").as_deref() == Some("opt30b"),
        policies: cli.value("--policies").unwrap_or_else(|| "cpu,resident,genoa,flow".into()).split(',').map(String::from).collect(),
        budget_div: cli.num("--budget-div", 4) as u64,
        tflops: cli.value("--tflops").and_then(|v| v.parse().ok()),
        json: cli.value("--json"),
    }
}

/// One layer: weights [out, in] applied in order (a square layer has one; an OPT block four,
/// with the first's output narrowed back to the hidden size as attention would).
struct Model {
    layers: Vec<Vec<Tensor>>,
    x: Tensor,
    width: i64,
}

impl Model {
    fn build(a: &Args) -> Result<Model> {
        let h = a.width;
        let shapes: Vec<[i64; 2]> = if a.opt30b { vec![[3 * h, h], [h, h], [4 * h, h], [h, 4 * h]] } else { vec![[h, h]] };
        // One layer's weights drawn at random; the others are copies (distinct storages), which is
        // much faster than drawing tens of GiB.
        // Scaled so activations keep their size: 1/sqrt(in) per product, and the two products
        // that feed an OPT block's residual additions by 1/sqrt(2 layers) more (as GPT-2 does),
        // or f16 overflows by the last block.
        let residual = 1.0 / (2.0 * a.layers as f64).sqrt();
        let first: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let scale = if a.opt30b && i % 2 == 1 { residual } else { 1.0 };
                Tensor::randn(s, DType::F32)?.mul_scalar(scale / (s[1] as f64).sqrt())?.to_dtype(a.dtype)
            })
            .collect::<Result<_>>()?;
        let mut layers = vec![];
        for _ in 1..a.layers {
            layers.push(first.iter().map(|w| w.with_tch(|t| Tensor::from_tch(t.copy()))).collect::<Result<_>>()?);
        }
        layers.insert(0, first);
        Ok(Model { layers, x: Tensor::randn(&[a.batch, h], DType::F32)?.to_dtype(a.dtype)?, width: h })
    }

    fn weight_bytes(&self) -> Result<u64> {
        self.layers.iter().flatten().try_fold(0, |n, w| Ok(n + (w.numel()? * w.dtype()?.size()) as u64))
    }

    /// One pass. Every activation is dropped before the op after its last use, so none is ever
    /// written back to make room.
    fn forward(&self) -> Result<f64> {
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
            h.to_dtype(DType::F32)?.mean()?.item()
        })
    }
}

struct Row {
    name: String,
    /// The first pass: it records the trace and, on CUDA, moves the weights into page-locked
    /// memory.
    first_pass: f64,
    secs_per_pass: f64,
    loaded: u64,
    written: u64,
    optimum: Option<u64>,
    checksum: f64,
    replay: Option<schedule::Replay>,
    steady: Option<residency::ResidencyStats>,
}

/// Runs the passes (the first is a warm-up that records the trace) and measures the rest.
fn run(model: &Model, name: &str, cfg: Option<Config>, passes: usize, compute: impl Fn(&schedule::Step) -> f64, bandwidth: f64) -> Result<Row> {
    if let Some(cfg) = cfg {
        residency::configure(cfg)?;
        residency::schedule_log_start()?;
    }
    let first = Instant::now();
    let mut checksum = model.forward()?;
    let first_pass = first.elapsed().as_secs_f64();
    let _ = residency::mark_iteration();
    let before = residency::stats().unwrap_or_default();
    let start = Instant::now();
    for _ in 0..passes {
        checksum = model.forward()?;
        let _ = residency::mark_iteration();
    }
    let secs_per_pass = start.elapsed().as_secs_f64() / passes as f64;
    let after = residency::stats().unwrap_or_default();
    let optimum = residency::recorded_trace().map(|t| residency::offline_min_loads(&t, after.budget, after.pinned_bytes, 3));
    let replay = residency::schedule_log().map(|pass| schedule::replay(&pass, bandwidth, &compute));
    residency::disable()?;
    let per_pass = |a: u64, b: u64| (a - b) / passes as u64;
    let steady = cfg.map(|_| delta(&after, &before));
    Ok(Row {
        name: name.into(),
        first_pass,
        secs_per_pass,
        loaded: per_pass(after.load_bytes, before.load_bytes),
        written: per_pass(after.write_back_bytes, before.write_back_bytes),
        optimum,
        checksum,
        replay,
        steady,
    })
}

/// The counters that must stay at zero in steady state, as differences.
fn delta(after: &residency::ResidencyStats, before: &residency::ResidencyStats) -> residency::ResidencyStats {
    residency::ResidencyStats {
        page_locked_allocs: after.page_locked_allocs - before.page_locked_allocs,
        pageable_copies: after.pageable_copies - before.pageable_copies,
        write_through_waits: after.write_through_waits - before.write_through_waits,
        needless_write_backs: after.needless_write_backs - before.needless_write_backs,
        ..*after
    }
}

/// Host-to-device bandwidth from page-locked memory: a 1 GiB copy, best of three.
fn measured_bandwidth(device: ComputeDevice) -> Option<f64> {
    let ComputeDevice::Cuda(n) = device else { return None };
    let host = tch::Tensor::zeros([1 << 28], (tch::Kind::Float, tch::Device::Cpu)).pin_memory(tch::Device::Cuda(n));
    let mut best = f64::MAX;
    for _ in 0..4 {
        tch::Cuda::synchronize(n as i64);
        let start = Instant::now();
        let d = host.to_device_(tch::Device::Cuda(n), tch::Kind::Float, true, false);
        tch::Cuda::synchronize(n as i64);
        best = best.min(start.elapsed().as_secs_f64());
        drop(d);
    }
    Some((1u64 << 30) as f64 / best)
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn main() -> Result<()> {
    let a = args();
    let _no_grad = tensorref::NoGradGuard::new();
    tensorref::manual_seed(0);
    let model = Model::build(&a)?;
    let weight_bytes = model.weight_bytes()?;
    let budget = weight_bytes / a.budget_div;
    let measured = measured_bandwidth(a.device);
    let bandwidth = measured.unwrap_or(53.6e9);
    // The schedule model's compute rate: an H100's dense f16 rate on tensor cores, and its f32
    // rate (without TF32, libtorch's default for matrix products).
    let flops = a.tflops.map_or(if a.dtype == DType::F16 { 700e12 } else { 50e12 }, |t| t * 1e12);
    println!(
        "{} {} of {}x{} {:?} ({} of weights), batch {}, device budget {} (weights / {}), device {}, {} passes",
        a.layers, if a.opt30b { "OPT-style blocks" } else { "layers" }, a.width, a.width, a.dtype, mib(weight_bytes), a.batch, mib(budget), a.budget_div, a.device, a.passes
    );
    match measured {
        Some(b) => println!("host-to-device bandwidth from page-locked memory: {:.1} GB/s (measured now)\n", b / 1e9),
        None => println!("schedule model: a copy engine at {:.1} GB/s (an H100's PCIe link) beside {:.0} TFLOP/s\n", bandwidth / 1e9, flops / 1e12),
    }

    let cfg = |policy| Config::new(a.device, policy, budget);
    // Elementwise ops at an H100's memory bandwidth.
    let compute = schedule::roofline(flops, 3e12, a.dtype.size());
    let wants = |p: &str| a.policies.iter().any(|x| x == p);
    let mut rows = vec![];
    if wants("cpu") {
        rows.push(no_grad(|| run(&model, "CPU-only", None, a.passes, &compute, bandwidth))?);
    }
    if wants("resident") {
        let unbounded = Config { budget: weight_bytes * 4, ..cfg(PolicyKind::Resident) };
        rows.push(run(&model, "Resident (fits: no budget)", Some(unbounded), a.passes, &compute, bandwidth)?);
    }
    if wants("genoa") {
        rows.push(run(&model, "Genoa", Some(cfg(PolicyKind::Genoa)), a.passes, &compute, bandwidth)?);
    }
    if wants("flow") {
        rows.push(run(&model, "Flow", Some(cfg(PolicyKind::Flow)), a.passes, &compute, bandwidth)?);
    }

    let base = rows.first().map_or(1.0, |r| r.secs_per_pass);
    println!(
        "{:<28} {:>10} {:>10} {:>12} {:>12} {:>9} {:>10} {:>28}",
        "policy", "ms / pass", "vs first", "loaded/pass", "written/pass", "/optimum", "PCIe bnd", "model: makespan / bound"
    );
    for r in &rows {
        let ratio = r.optimum.filter(|&o| o > 0).map_or("-".into(), |o| format!("{:.3}", r.loaded as f64 / o as f64));
        let pcie = if r.loaded > 0 { format!("{:.1} ms", r.loaded as f64 / bandwidth * 1e3) } else { "-".into() };
        let model_col = r.replay.filter(|m| m.makespan > 0.0 && r.loaded > 0).map_or("-".into(), |m| {
            format!("{:.2} / {:.2} ms = {:.3}", m.makespan * 1e3, m.bound * 1e3, m.efficiency())
        });
        println!(
            "{:<28} {:>10.2} {:>9.2}x {:>12} {:>12} {:>9} {:>10} {:>28}",
            r.name, r.secs_per_pass * 1e3, base / r.secs_per_pass, mib(r.loaded), mib(r.written), ratio, pcie, model_col
        );
    }
    for r in rows.iter().filter(|r| r.steady.is_some()) {
        let s = r.steady.unwrap();
        println!(
            "{:<28} first pass {:.0} ms; steady state (after pass 1): {} new page-locked allocations, {} pageable copies, {} op waits, {} needless write-backs",
            r.name, r.first_pass * 1e3, s.page_locked_allocs, s.pageable_copies, s.write_through_waits, s.needless_write_backs
        );
    }
    // On the host every policy computes bit for bit the same; on CUDA the kernels differ from the
    // CPU's, and the policies agree with each other within rounding.
    let reference = rows.iter().find(|r| r.name != "CPU-only").or(rows.first()).map_or(0.0, |r| r.checksum);
    let tolerance = if let ComputeDevice::Cuda(_) = a.device { 1e-3 * (1.0 + reference.abs()) } else { 0.0 };
    let agree = rows.iter().filter(|r| r.name != "CPU-only" || tolerance == 0.0).all(|r| (r.checksum - reference).abs() <= tolerance);
    println!("\nAll policies computed the same output{}: {agree}", if tolerance > 0.0 { " (within 1e-3 on CUDA)" } else { "" });
    if let Some(path) = &a.json {
        write_json(path, &a, weight_bytes, budget, measured, &rows);
    }
    if !agree {
        std::process::exit(1);
    }
    Ok(())
}

/// The rows as JSON, for the GPU bundle's summary table.
fn write_json(path: &str, a: &Args, weight_bytes: u64, budget: u64, bandwidth: Option<f64>, rows: &[Row]) {
    let rows: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                r#"{{"name":"{}","ms":{:.3},"loaded":{},"written":{},"model_efficiency":{}}}"#,
                r.name,
                r.secs_per_pass * 1e3,
                r.loaded,
                r.written,
                r.replay.map_or("null".into(), |m| format!("{:.4}", m.efficiency()))
            )
        })
        .collect();
    let text = format!(
        r#"{{"width":{},"layers":{},"batch":{},"dtype":"{:?}","shape":"{}","weight_bytes":{},"budget":{},"bandwidth":{},"rows":[{}]}}"#,
        a.width,
        a.layers,
        a.batch,
        a.dtype,
        if a.opt30b { "opt30b" } else { "linear" },
        weight_bytes,
        budget,
        bandwidth.map_or("null".into(), |b| format!("{b:.0}")),
        rows.join(",")
    );
    std::fs::write(path, text).expect("writing the JSON results");
}
