//! Our side of the comparison with pytorch-optimem (benches/minilm_compare.py prints the two side
//! by side): all-MiniLM-L6-v2 embedding 32 sentences in batches of 8 under a device budget of a
//! quarter of the weights, Flow, page and chunk weight modes (chunk pins half the budget), plus
//! Genoa page and the run without a manager. For each: ms per batch, bytes moved per batch
//! (host->device loads and device->host write-backs), peak device bytes. A first pass records
//! the trace (Flow) and is not measured. Writes the figures and the batches' token ids to JSON.
//!
//!     cargo bench --features models --bench minilm_compare -- --json target/minilm-compare.json [--passes 3]

use std::fmt::Write as _;
use std::time::Instant;
use tensorref::models::{find_model_dir, MiniLm, MiniLmOptions, WeightMode};
use tensorref::residency::{self, Device, Config, Policy};
use tensorref::{NoGradGuard, Result};

const BATCH: usize = 8;

fn sentences() -> Vec<String> {
    let subjects = ["A man", "The committee", "My neighbour's old dog", "An engineer", "The quick brown fox", "Two children", "A violinist", "The stock market"];
    let actions = ["is playing a guitar in the park.", "voted to postpone the decision until next spring after a long debate.", "sleeps.", "ported the allocator to a new accelerator with a hard memory budget.", "jumps over the lazy dog.", "build a sandcastle that the tide washes away.", "rehearses the second movement again and again.", "fell sharply as investors reacted to the news."];
    (0..32).map(|i| format!("{} {}", subjects[i % 8], actions[(i * 3 + i / 8) % 8])).collect()
}

struct Row {
    name: &'static str,
    ms_per_batch: f64,
    loaded: u64,
    written: u64,
    peak: u64,
    pinned: u64,
}

fn measure(model: &MiniLm, texts: &[&str], name: &'static str, cfg: Option<Config>, passes: usize) -> Result<Row> {
    if let Some(cfg) = cfg {
        residency::configure(cfg)?;
    }
    model.embed(texts)?; // warm-up: records the trace
    let before = residency::stats().unwrap_or_default();
    let mut best = f64::INFINITY; // the fastest pass: the machine is shared, noise only adds
    for _ in 0..passes {
        let start = Instant::now();
        model.embed(texts)?;
        best = best.min(start.elapsed().as_secs_f64());
    }
    let batches = (passes * texts.len().div_ceil(BATCH)) as f64;
    let ms_per_batch = best * 1e3 / texts.len().div_ceil(BATCH) as f64;
    let after = residency::stats().unwrap_or_default();
    residency::disable()?;
    let per = |a: u64, b: u64| ((a - b) as f64 / batches) as u64;
    Ok(Row { name, ms_per_batch, loaded: per(after.load_bytes, before.load_bytes), written: per(after.write_back_bytes, before.write_back_bytes), peak: after.peak_device_bytes, pinned: after.pinned_bytes })
}

fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    let value = |name: &str| argv.iter().position(|s| s == name).and_then(|i| argv.get(i + 1)).cloned();
    let json = value("--json");
    let passes: usize = value("--passes").and_then(|v| v.parse().ok()).unwrap_or(3);
    let _no_grad = NoGradGuard::new();
    tch::set_num_threads(1); // as the PyTorch side: one thread each, comparable on a shared machine
    let owned = sentences();
    let texts: Vec<&str> = owned.iter().map(String::as_str).collect();
    let dir = find_model_dir()?;
    let load = |mode| MiniLm::load(&dir, MiniLmOptions { mode, batch_size: BATCH, ..Default::default() });
    let page = load(WeightMode::Page)?;
    let weight_bytes = page.weight_bytes();
    let budget = weight_bytes / 4;
    let chunk = load(WeightMode::Chunk { capacity: budget / 2 })?;
    let device = if tch::Cuda::is_available() { Device::Cuda(0) } else { Device::Simulated };
    let cfg = |policy| Some(Config::new(device, policy, budget));
    eprintln!("[minilm_compare] {} sentences, batches of {BATCH}, budget {budget} bytes, device {device:?}, {passes} measured passes", texts.len());
    let rows = vec![
        measure(&page, &texts, "no manager (CPU)", None, passes)?,
        measure(&page, &texts, "Genoa page", cfg(Policy::Genoa), passes)?,
        measure(&page, &texts, "Flow page", cfg(Policy::Flow), passes)?,
        measure(&chunk, &texts, "Flow chunk", cfg(Policy::Flow), passes)?,
    ];

    println!("libtensorref, all-MiniLM-L6-v2, {} sentences in batches of {BATCH}, device {device:?}, budget {:.2} MiB (weights / 4)", texts.len(), budget as f64 / 1048576.0);
    println!("{:<20} {:>12} {:>16} {:>16} {:>14} {:>12}", "run", "ms / batch", "loaded / batch", "written / batch", "peak device", "pinned");
    for r in &rows {
        let mib = |b: u64| format!("{:.2} MiB", b as f64 / 1048576.0);
        println!("{:<20} {:>12.2} {:>16} {:>16} {:>14} {:>12}", r.name, r.ms_per_batch, mib(r.loaded), mib(r.written), mib(r.peak), mib(r.pinned));
        if r.name != "no manager (CPU)" && r.peak > budget {
            eprintln!("{}: peak device bytes {} exceed the budget {budget}", r.name, r.peak);
            std::process::exit(1);
        }
    }

    if let Some(path) = json {
        let mut out = format!(
            "{{\"device\":\"{device:?}\",\"weight_bytes\":{weight_bytes},\"budget\":{budget},\"chunk_capacity\":{},\"batch_size\":{BATCH},\"passes\":{passes},\"runs\":[",
            budget / 2
        );
        for (i, r) in rows.iter().enumerate() {
            let _ = write!(out, "{}{{\"name\":\"{}\",\"ms_per_batch\":{:.4},\"loaded\":{},\"written\":{},\"peak\":{},\"pinned\":{}}}", if i > 0 { "," } else { "" }, r.name, r.ms_per_batch, r.loaded, r.written, r.peak, r.pinned);
        }
        out += "],\"batches\":[";
        for (i, c) in texts.chunks(BATCH).enumerate() {
            let b = page.tokenize(c)?;
            let list = |v: &[i64]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
            let _ = write!(out, "{}{{\"batch\":{},\"len\":{},\"ids\":[{}],\"mask\":[{}]}}", if i > 0 { "," } else { "" }, b.batch, b.len, list(&b.ids), list(&b.mask));
        }
        out += "]}\n";
        std::fs::write(&path, out).map_err(|e| tensorref::Error::Io(format!("{path}: {e}")))?;
    }
    Ok(())
}
