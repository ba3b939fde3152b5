//! A stack of linear layers whose weights are 4x the device budget, forward passes under
//! CPU-only (no manager), Resident (where it fits), Genoa and Flow, printed side by side: time
//! per pass and throughput against CPU-only, bytes moved per pass, and for Flow the bytes loaded
//! over the offline optimum (Belady's MIN on the recorded trace).
//!
//!     cargo bench --bench residency -- [--device simulated|cuda] [--width 512] [--layers 16]
//!                                      [--batch 768] [--passes 5]

use std::time::Instant;
use tensorref::residency::{self, ComputeDevice, Config, PolicyKind};
use tensorref::{no_grad, with_scope, DType, Result, Tensor};

struct Args {
    device: ComputeDevice,
    width: i64,
    layers: usize,
    batch: i64,
    passes: usize,
}

fn args() -> Args {
    // Activations of 1.5x a layer's weights: a layer's working set (in + weights + out) is then
    // exactly the budget, and Genoa moves activations as well as weights.
    let mut a = Args { device: ComputeDevice::Simulated, width: 512, layers: 16, batch: 768, passes: 5 };
    let argv: Vec<String> = std::env::args().collect();
    let value = |name: &str| argv.iter().position(|s| s == name).and_then(|i| argv.get(i + 1)).cloned();
    if value("--device").as_deref() == Some("cuda") {
        a.device = ComputeDevice::Cuda(0);
    }
    a.width = value("--width").and_then(|v| v.parse().ok()).unwrap_or(a.width);
    a.layers = value("--layers").and_then(|v| v.parse().ok()).unwrap_or(a.layers);
    a.batch = value("--batch").and_then(|v| v.parse().ok()).unwrap_or(a.batch);
    a.passes = value("--passes").and_then(|v| v.parse().ok()).unwrap_or(a.passes);
    a
}

struct Model {
    layers: Vec<(Tensor, Tensor)>,
    x: Tensor,
}

impl Model {
    fn forward(&self) -> Result<f64> {
        with_scope(|_| {
            let mut h = self.x.linear(&self.layers[0].0, Some(&self.layers[0].1))?;
            for (w, b) in &self.layers[1..] {
                let a = h.relu()?;
                drop(h); // dead before the next op, so it is never written back
                h = a.linear(w, Some(b))?;
            }
            h.mean()?.item()
        })
    }
}

struct Row {
    name: String,
    secs_per_pass: f64,
    loaded: u64,
    written: u64,
    optimum: Option<u64>,
    checksum: f64,
}

/// Runs the passes (the first is a warm-up that records the trace) and measures the rest.
fn run(model: &Model, name: &str, cfg: Option<Config>, passes: usize) -> Result<Row> {
    if let Some(cfg) = cfg {
        residency::configure(cfg)?;
    }
    let mut checksum = model.forward()?;
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
    residency::disable()?;
    let per_pass = |a: u64, b: u64| (a - b) / passes as u64;
    Ok(Row {
        name: name.into(),
        secs_per_pass,
        loaded: per_pass(after.load_bytes, before.load_bytes),
        written: per_pass(after.write_back_bytes, before.write_back_bytes),
        optimum,
        checksum,
    })
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn main() -> Result<()> {
    let a = args();
    let _no_grad = tensorref::NoGradGuard::new();
    tensorref::manual_seed(0);
    let layers = (0..a.layers)
        .map(|_| Ok((Tensor::randn(&[a.width, a.width], DType::F32)?.mul_scalar(1.0 / (a.width as f64).sqrt())?, Tensor::zeros(&[a.width], DType::F32)?)))
        .collect::<Result<Vec<_>>>()?;
    let model = Model { layers, x: Tensor::randn(&[a.batch, a.width], DType::F32)? };
    let weight_bytes = (a.layers as i64 * (a.width * a.width + a.width) * 4) as u64;
    let budget = weight_bytes / 4;
    println!(
        "{} layers of {}x{} f32 ({} of weights), batch {}, device budget {} (weights / 4), device {:?}, {} passes\n",
        a.layers, a.width, a.width, mib(weight_bytes), a.batch, mib(budget), a.device, a.passes
    );

    let cfg = |policy| Config::new(a.device, policy, budget);
    let mut rows = vec![no_grad(|| run(&model, "CPU-only", None, a.passes))?];
    let unbounded = Config { budget: weight_bytes * 4, ..cfg(PolicyKind::Resident) };
    rows.push(run(&model, "Resident (fits: no budget)", Some(unbounded), a.passes)?);
    rows.push(run(&model, "Genoa", Some(cfg(PolicyKind::Genoa)), a.passes)?);
    rows.push(run(&model, "Flow", Some(cfg(PolicyKind::Flow)), a.passes)?);

    let base = rows[0].secs_per_pass;
    println!("{:<28} {:>12} {:>14} {:>14} {:>14} {:>16}", "policy", "ms / pass", "throughput", "loaded/pass", "written/pass", "loaded/optimum");
    for r in &rows {
        let ratio = r.optimum.filter(|&o| o > 0).map_or("-".into(), |o| format!("{:.3}", r.loaded as f64 / o as f64));
        println!(
            "{:<28} {:>12.2} {:>13.2}x {:>14} {:>14} {:>16}",
            r.name, r.secs_per_pass * 1e3, base / r.secs_per_pass, mib(r.loaded), mib(r.written), ratio
        );
    }
    let (genoa, flow) = (&rows[2], &rows[3]);
    println!("\nFlow loads {:.3} of Genoa's bytes per pass.", flow.loaded as f64 / genoa.loaded.max(1) as f64);
    let agree = rows.iter().all(|r| r.checksum == rows[0].checksum);
    println!("All policies computed the same output: {agree}");
    if !agree {
        std::process::exit(1);
    }
    Ok(())
}
