//! The main demonstration: sentence embeddings from a real model (all-MiniLM-L6-v2, 91 MB of
//! weights as TensorRefs) computed on an accelerator whose budget is a quarter of the model,
//! under Flow with the weights paged (or, with `--chunk`, the first ones pinned). Prints the
//! cosine-similarity matrix, the bytes moved, the peak device bytes (never above the budget) and
//! the time; progress goes to stderr; the manager's events are written as a Chrome trace and
//! drawn as a picture of memory over time (SVG).
//!
//!     cargo run --features models --example minilm_demo -- [--device auto|cuda|cuda:N|simulated]
//!         [--chunk] [--timeline PATH] [--memory PATH.svg] [--budget-div N]
//!
//! The accelerator (`auto`, the default) is CUDA where libtorch sees one, else the simulated
//! accelerator (host memory accounted as device memory, with real copies).

use std::time::Instant;
use tensorref::models::{find_model_dir, MiniLm, MiniLmOptions, WeightMode};
use tensorref::residency::{self, Device, Config, Policy};
use tensorref::{NoGradGuard, Result};

const SENTENCES: &[&str] = &[
    "A man is playing a guitar.",
    "Someone is strumming a guitar on stage.",
    "The stock market fell sharply today.",
    "Shares dropped as investors panicked.",
    "A cat sleeps on the warm windowsill.",
    "My kitten is napping in the sun by the window.",
    "Rust manages memory without a garbage collector.",
    "Reference counting frees tensors as soon as nobody needs them.",
];

fn mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64)
}

fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    let value = |name: &str| argv.iter().position(|s| s == name).and_then(|i| argv.get(i + 1)).cloned();
    let chunk = argv.iter().any(|a| a == "--chunk");
    let timeline = value("--timeline").unwrap_or_else(|| "target/minilm_timeline.json".into());
    let memory = value("--memory").unwrap_or_else(|| "target/minilm_memory.svg".into());
    let divisor: u64 = value("--budget-div").and_then(|v| v.parse().ok()).unwrap_or(4);
    let _no_grad = NoGradGuard::new();

    let dir = find_model_dir()?;
    let mut opts = MiniLmOptions { batch_size: 4, progress: true, ..Default::default() };
    let model = MiniLm::load(&dir, opts)?;
    let budget = model.weight_bytes() / divisor;
    if chunk {
        opts.mode = WeightMode::Chunk { capacity: budget / 2 };
    }
    let mut model = model;
    model.set_mode(opts.mode)?;
    let device: Device = value("--device").as_deref().unwrap_or("auto").parse()?;
    println!("all-MiniLM-L6-v2 from {}", dir.display());
    println!("running on          {device}");
    println!(
        "weights {} | budget {} (1/{divisor} of the weights) | policy Flow | weights {:?} | {} sentences in batches of {}",
        mib(model.weight_bytes()), mib(budget), opts.mode, SENTENCES.len(), opts.batch_size
    );

    residency::configure(Config::new(device, Policy::Flow, budget))?;
    residency::timeline_start()?;
    let start = Instant::now();
    let emb = model.embed(SENTENCES)?;
    let secs = start.elapsed().as_secs_f64();
    let stats = residency::stats().unwrap_or_default();
    residency::timeline_write(std::path::Path::new(&timeline))?;
    residency::timeline_write(std::path::Path::new(&memory))?;
    residency::disable()?;

    let dim = model.dim();
    println!("\ncosine similarity (embeddings are unit length, so the dot product):");
    print!("{:>4}", "");
    for j in 0..SENTENCES.len() {
        print!("{j:>6}");
    }
    println!();
    for i in 0..SENTENCES.len() {
        print!("{i:>4}");
        for j in 0..SENTENCES.len() {
            let dot: f32 = (0..dim).map(|k| emb[i * dim + k] * emb[j * dim + k]).sum();
            print!("{dot:>6.2}");
        }
        println!("  {}", SENTENCES[i]);
    }
    println!();
    println!("time                {:.3} s ({} forward passes)", secs, SENTENCES.len().div_ceil(opts.batch_size));
    println!("bytes moved         {} host->device ({} loads, {} of them prefetched), {} written back", mib(stats.load_bytes), stats.loads, stats.prefetches, mib(stats.write_back_bytes));
    println!("prefetch hits       {} hits, {} misses", stats.prefetch_hits, stats.prefetch_misses);
    println!("pinned              {}", mib(stats.pinned_bytes));
    println!("peak device bytes   {} of a {} budget ({:.1} %)", mib(stats.peak_device_bytes), mib(budget), 100.0 * stats.peak_device_bytes as f64 / budget as f64);
    println!("timeline            {timeline} (open in ui.perfetto.dev or chrome://tracing)");
    println!("memory over time    {memory} (a picture: open it in a browser)");
    if stats.peak_device_bytes > budget {
        eprintln!("peak device bytes exceeded the budget");
        std::process::exit(1);
    }
    Ok(())
}
