//! Scenario (b): a stack of linear layers whose weights are 4x the device budget runs under Flow
//! on the accelerator (`--device auto`, the default: CUDA if present, else the simulated one).
//! Each forward pass is marked as an iteration; from the second pass Flow evicts by the learned
//! order and prefetches ahead. Prints the manager's statistics per pass.
//!
//!     cargo run --release --example flow_stack -- [--device auto|cuda|cuda:N|simulated|cpu]

use tensorref::residency::{self, Device, Config, Policy};
use tensorref::{with_scope, DType, NoGradGuard, Result, Tensor};

const LAYERS: usize = 8;
const WIDTH: i64 = 256;
const BATCH: i64 = 64;

fn main() -> Result<()> {
    let _inference = NoGradGuard::new();
    tensorref::manual_seed(0);
    let weights: Vec<Tensor> = (0..LAYERS)
        .map(|_| Tensor::randn(&[WIDTH, WIDTH], DType::F32)?.mul_scalar(1.0 / (WIDTH as f64).sqrt()))
        .collect::<Result<_>>()?;
    let x = Tensor::randn(&[BATCH, WIDTH], DType::F32)?;
    let expected = forward(&weights, &x)?; // without a manager

    let weight_bytes = (LAYERS as i64 * WIDTH * WIDTH * 4) as u64;
    let argv: Vec<String> = std::env::args().collect();
    let device: Device = argv.iter().position(|a| a == "--device").and_then(|i| argv.get(i + 1)).map_or("auto", |s| s.as_str()).parse()?;
    residency::configure(Config::new(device, Policy::Flow, weight_bytes / 4))?;
    println!("running on {device}");
    println!("{LAYERS} layers, {} KiB of weights, budget {} KiB", weight_bytes >> 10, (weight_bytes / 4) >> 10);
    println!("{:>4} {:>7} {:>11} {:>9} {:>13} {:>13} {:>11}", "pass", "loads", "loaded KiB", "evictions", "prefetch hits", "prefetch miss", "peak KiB");
    let mut last = residency::stats().unwrap_or_default();
    for pass in 1..=5 {
        let y = forward(&weights, &x)?;
        residency::mark_iteration()?;
        // Bit for bit on the host; CUDA's kernels round differently from the CPU's.
        let tolerance = if let Device::Cuda(_) = device { 1e-4 } else { 0.0 };
        let worst = y.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst <= tolerance, "the manager changes where tensors live, never the results ({worst})");
        let s = residency::stats().unwrap_or_default();
        println!(
            "{pass:>4} {:>7} {:>11} {:>9} {:>13} {:>13} {:>11}",
            s.loads - last.loads,
            (s.load_bytes - last.load_bytes) >> 10,
            s.evictions - last.evictions,
            s.prefetch_hits - last.prefetch_hits,
            s.prefetch_misses - last.prefetch_misses,
            s.peak_device_bytes >> 10
        );
        assert!(s.peak_device_bytes <= s.budget, "the budget is never exceeded");
        last = s;
    }
    residency::disable()
}

fn forward(weights: &[Tensor], x: &Tensor) -> Result<Vec<f32>> {
    with_scope(|_| {
        let mut h = x.matmul(&weights[0])?;
        for w in &weights[1..] {
            let a = h.relu()?;
            drop(h);
            h = a.matmul(w)?;
        }
        h.to_vec::<f32>()
    })
}
