//! Training a transformer encoder (post-norm layers, random initialisation, Adam) under a device
//! budget: Resident first (no budget: its peak is the unmanaged peak), then Genoa and Flow at a
//! half and a quarter of that peak, and Flow with recomputation where cheaper and always, printed
//! side by side: time per step against Resident, peak device bytes against the budget (on the
//! simulated device as its allocator counts them, backward's gradients in flight included; and on
//! CUDA the caching allocator's peak reserved bytes in the run, its cache emptied as the run starts,
//! and how much that peak grew after the warm-up: a long run at a tight budget shows any drift), bytes loaded and written back and results
//! made again per step, the steady-state counters of the Flow GPU work (page-locked allocations,
//! pageable copies, write-through waits, needless write-backs, inputs loaded on demand, the ops' waits for
//! copies), and the losses (the same under every policy).
//! A row whose losses differ from Resident's, whose device memory passes its budget, or whose
//! modelled step beats its own bound is printed as FAILED, and the run exits non-zero. `benches/training_peers.py` trains
//! the same encoder in PyTorch: unmanaged, with `save_on_cpu` and with activation checkpointing
//! (with the same seeds, its losses are ours on the CPU).
//!
//! Each managed row also gives the schedule model's prediction for a GPU (src/residency/
//! src/residency/model): the last step as the manager logged it, replayed with a copy engine at an
//! H100's PCIe bandwidth beside a compute engine at `--tflops` (matrix products) and 3 TB/s
//! (everything else), each kernel taking at least `--launch-us`, against the same step with
//! nothing moved or remade.
//!
//!     cargo bench --bench training -- [--device simulated|cuda] [--width 256] [--layers 4]
//!         [--heads 4] [--tokens 64] [--batch 16] [--steps 6] [--warmup 3] [--dropout 0.1] [--tflops 50]
//!         [--launch-us 5] [--runs genoa,flow,flow+cheaper,flow+always] [--budgets 2,4]
//!         [--soak MINUTES]   (`make soak`: see `soak`)

#[path = "common/cli.rs"]
mod cli;
use cli::{usage, Cli};
use std::time::Instant;
use tensorref::residency::{self, model, Device, Config, Policy, Recompute, ResidencyStats};
use tensorref::{manual_seed, no_grad, with_scope, DType, Result, Tensor};

struct Args {
    device: Device,
    width: i64,
    layers: usize,
    heads: i64,
    tokens: i64,
    batch: i64,
    steps: usize,
    /// The steps before the timed ones (two to learn the order, one to follow it first, and
    /// more where the caches are still filling: each new page-locked block costs milliseconds on
    /// CUDA), timed apart.
    warmup: usize,
    dropout: f64,
    /// The schedule model's device: an H100's, with `--tflops` and `--launch-us` if given.
    rates: model::Rates,
    /// The managed runs: policy and recomputation, each at a budget of the unmanaged peak over
    /// each of `budgets`.
    runs: Vec<(Policy, Recompute)>,
    budgets: Vec<u64>,
    /// `--soak MINUTES`: instead of the table, train under Flow with recomputation where cheaper
    /// at a quarter of the peak for this long (see `soak`).
    soak: Option<u64>,
}

/// A run named as `--runs` takes it: `genoa`, `flow`, `flow+cheaper`, `flow+always`.
fn run_named(name: &str) -> (Policy, Recompute) {
    let policy = match name.split('+').next() {
        Some("genoa") => Policy::Genoa,
        Some("flow") => Policy::Flow,
        _ => usage(format!("--runs: {name} is not genoa or flow, with +cheaper or +always or neither")),
    };
    let recompute = match name.split_once('+').map(|(_, r)| r) {
        None => Recompute::Off,
        Some("cheaper") => Recompute::Cheaper,
        Some("always") => Recompute::Always,
        Some(r) => usage(format!("--runs: {name}: +{r} is not +cheaper or +always")),
    };
    (policy, recompute)
}

fn args() -> Args {
    let cli = Cli::new();
    let a = Args {
        device: cli.parsed("--device", Device::Simulated),
        width: cli.parsed("--width", 256),
        layers: cli.parsed("--layers", 4),
        heads: cli.parsed("--heads", 4),
        tokens: cli.parsed("--tokens", 64),
        batch: cli.parsed("--batch", 16),
        steps: cli.parsed("--steps", 6),
        warmup: cli.parsed("--warmup", 3),
        dropout: cli.parsed("--dropout", 0.1),
        rates: model::Rates {
            flops: cli.optional("--tflops").map_or(model::Rates::H100.flops, |t: f64| t * 1e12),
            launch: cli.optional("--launch-us").map_or(model::Rates::H100.launch, |us: f64| us * 1e-6),
            ..model::Rates::H100
        },
        runs: cli.list::<String>("--runs", "genoa,flow,flow+cheaper,flow+always").iter().map(|r| run_named(r)).collect(),
        budgets: cli.list("--budgets", "2,4"),
        soak: cli.optional("--soak"),
    };
    if a.warmup < 3 || a.steps < a.warmup + 2 {
        usage("--warmup: at least 3 (two to learn the order, one to follow it first); --steps: at least two more");
    }
    if a.budgets.contains(&0) {
        usage("--budgets: divisors of the peak, at least 1");
    }
    a
}

/// One post-norm encoder layer's parameters: attention (q, k, v, out), norm, feed-forward (4x), norm.
struct Layer {
    p: Vec<Tensor>,
}

struct Encoder {
    a: (i64, i64, i64, i64),
    layers: Vec<Layer>,
    classifier: Tensor,
}

impl Encoder {
    fn new(a: &Args) -> Result<Encoder> {
        let w = a.width;
        let weight = |i: i64, o: i64| Tensor::randn(&[i, o], DType::F32)?.mul_scalar(1.0 / (i as f64).sqrt());
        let layer = || -> Result<Layer> {
            let mut p = vec![weight(w, w)?, weight(w, w)?, weight(w, w)?, weight(w, w)?];
            p.extend([Tensor::ones(&[w], DType::F32)?, Tensor::zeros(&[w], DType::F32)?]);
            p.extend([weight(w, 4 * w)?, weight(4 * w, w)?]);
            p.extend([Tensor::ones(&[w], DType::F32)?, Tensor::zeros(&[w], DType::F32)?]);
            Ok(Layer { p })
        };
        let layers = (0..a.layers).map(|_| layer()).collect::<Result<_>>()?;
        Ok(Encoder { a: (a.batch, a.tokens, w, a.heads), layers, classifier: weight(w, 8)? })
    }

    fn params(&self) -> Vec<&Tensor> {
        self.layers.iter().flat_map(|l| &l.p).chain([&self.classifier]).collect()
    }

    fn loss(&self, x: &Tensor, labels: &Tensor, dropout: f64) -> Result<Tensor> {
        let (b, t, w, h) = self.a;
        let heads = |y: &Tensor| y.view(&[b, t, h, w / h])?.transpose(1, 2);
        let mut hidden: Option<Tensor> = None;
        for l in &self.layers {
            let (p, x) = (&l.p, hidden.as_ref().unwrap_or(x));
            let (q, k, v) = (heads(&x.matmul(&p[0])?)?, heads(&x.matmul(&p[1])?)?, heads(&x.matmul(&p[2])?)?);
            let scores = q.matmul(&k.transpose(2, 3)?)?.mul_scalar(1.0 / ((w / h) as f64).sqrt())?.softmax(-1)?;
            let mixed = scores.dropout(dropout, true)?.matmul(&v)?.transpose(1, 2)?.contiguous()?.view(&[b, t, w])?;
            let x = x.add(&mixed.matmul(&p[3])?)?.layer_norm(&[w], Some(&p[4]), Some(&p[5]), 1e-5)?;
            let ff = x.matmul(&p[6])?.gelu()?.matmul(&p[7])?.dropout(dropout, true)?;
            hidden = Some(x.add(&ff)?.layer_norm(&[w], Some(&p[8]), Some(&p[9]), 1e-5)?);
        }
        hidden.as_ref().unwrap_or(x).mean_dim(&[1], false)?.matmul(&self.classifier)?.cross_entropy(labels)
    }
}

struct Run {
    /// Over the steps after the warm-up.
    ms_per_step: f64,
    /// The warm-up's steps, all together.
    warmup_ms: f64,
    losses: Vec<f64>,
    /// The counters over the steps after the warm-up (steady state), and at the end.
    steady: ResidencyStats,
    last: ResidencyStats,
    /// The caching allocator's peak reserved bytes after the warm-up: what it grew by since is
    /// drift.
    reserved_peak_before: u64,
    /// The schedule model's replay of the last step.
    model: Option<model::Replay>,
    /// The most device bytes alive at once: on the simulated device as its allocator counts them
    /// (backward's gradients in flight and kernels' scratch included), elsewhere in the books.
    peak: u64,
}


/// The encoder, its Adam moments and one batch, made from the same seed every time.
struct Training {
    model: Encoder,
    moments: Vec<(Tensor, Tensor)>,
    x: Tensor,
    labels: Tensor,
    dropout: f64,
}

impl Training {
    fn new(a: &Args) -> Result<Training> {
        manual_seed(3);
        let model = no_grad(|| Encoder::new(a))?;
        model.params().iter().try_for_each(|p| p.requires_grad_(true).map(drop))?;
        let moments = model.params().iter().map(|p| Ok((p.zeros_like()?, p.zeros_like()?))).collect::<Result<Vec<_>>>()?;
        let x = Tensor::randn(&[a.batch, a.tokens, a.width], DType::F32)?;
        let labels = Tensor::from_slice(&(0..a.batch).map(|i| i % 8).collect::<Vec<i64>>(), &[a.batch])?;
        Ok(Training { model, moments, x, labels, dropout: a.dropout })
    }

    /// Step `step` (from 1): forward, backward, Adam, gradients dropped, the iteration marked.
    /// Returns the loss.
    fn step(&self, step: usize) -> Result<f64> {
        let loss = with_scope(|_| {
            let loss = self.model.loss(&self.x, &self.labels, self.dropout)?;
            loss.backward()?;
            let params = self.model.params();
            let (m, v): (Vec<&Tensor>, Vec<&Tensor>) = self.moments.iter().map(|(m, v)| (m, v)).unzip();
            Tensor::optim_adam_step(&params, &m, &v, step as i64, 1e-3, 0.9, 0.999, 1e-8, 0.0)?;
            // Dropped, as PyTorch's `zero_grad()` does by default: nothing to keep or move.
            params.iter().try_for_each(|p| p.clear_grad())?;
            loss.item()
        })?;
        if residency::enabled() {
            residency::mark_iteration()?;
        }
        Ok(loss)
    }
}

/// Trains for `a.steps` steps under the configured manager, timing the warm-up's steps apart.
fn train(a: &Args) -> Result<Run> {
    residency::reset_reserved_peak()?; // this run's own peak, not the process's
    residency::device_memory(true);
    let training = Training::new(a)?;
    if residency::enabled() {
        residency::schedule_log_start()?;
    }
    let (mut losses, mut started, mut before, mut warmup_ms) = (vec![], Instant::now(), ResidencyStats::default(), 0.0);
    for step in 1..=a.steps {
        if step == a.warmup + 1 {
            warmup_ms = started.elapsed().as_secs_f64() * 1e3;
            started = Instant::now();
            before = residency::stats().unwrap_or_default();
        }
        losses.push(training.step(step)?);
    }
    let ms_per_step = started.elapsed().as_secs_f64() * 1e3 / (a.steps - a.warmup) as f64;
    let last = residency::stats().unwrap_or_default();
    let steady = ResidencyStats {
        load_bytes: last.load_bytes - before.load_bytes,
        write_back_bytes: last.write_back_bytes - before.write_back_bytes,
        recomputations: last.recomputations - before.recomputations,
        page_locked_allocs: last.page_locked_allocs - before.page_locked_allocs,
        pageable_copies: last.pageable_copies - before.pageable_copies,
        write_through_waits: last.write_through_waits - before.write_through_waits,
        needless_write_backs: last.needless_write_backs - before.needless_write_backs,
        prefetch_misses: last.prefetch_misses - before.prefetch_misses,
        load_wait_ns: last.load_wait_ns - before.load_wait_ns,
        ..ResidencyStats::default()
    };
    let model = residency::schedule_log().map(|step| a.rates.replay(&step, 4));
    let peak = last.peak_device_bytes.max(residency::device_memory(false).peak);
    Ok(Run { ms_per_step, warmup_ms, losses, steady, last, reserved_peak_before: before.peak_reserved_bytes, model, peak })
}

/// What must repeat exactly from one step to the next once the order is learned: the handles
/// alive, and each counter's growth over the step.
fn per_step(now: &ResidencyStats, before: &ResidencyStats) -> [u64; 10] {
    [
        now.ops - before.ops,
        now.loads - before.loads,
        now.load_bytes - before.load_bytes,
        now.evictions - before.evictions,
        now.write_backs - before.write_backs,
        now.write_back_bytes - before.write_back_bytes,
        now.drops - before.drops,
        now.recomputations - before.recomputations,
        now.prefetches - before.prefetches,
        now.page_locked_allocs - before.page_locked_allocs,
    ]
}

/// The process's resident set, from /proc (0 where there is none).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4096
}

/// `make soak`: trains under Flow with recomputation where cheaper at a quarter of `peak` for
/// `minutes`, printing every minute the live handles, the resident set and the last step's
/// counters. Fails unless, after five warm-up steps, every step leaves the same live handles and
/// grows every counter by the same amount as the first step after them, and the resident set
/// grows by less than 1 % over the last two thirds of the run (the last 20 minutes of 30): the
/// highest it was in the last minute against the highest in the first minute of those (the
/// allocator's caching moves it by a few MiB from step to step, a leak only up).
fn soak(a: &Args, peak: u64, minutes: u64) -> Result<()> {
    const WARM_UP: usize = 5;
    residency::configure(Config { recompute: Recompute::Cheaper, ..Config::new(a.device, Policy::Flow, peak / 4) })?;
    let training = Training::new(a)?;
    let started = Instant::now();
    let (mut before, mut steady, mut live) = (residency::stats().unwrap_or_default(), None, 0);
    // The highest resident set of each minute from a third of the run on.
    let (mut window, mut highest, mut printed, mut step) = (Vec::new(), 0, 0, 0);
    println!("{:>6} {:>7} {:>6} {:>10}  per step: ops, loads, loaded, evictions, write-backs, written, drops, remade, prefetches, page-locked allocations", "minute", "steps", "live", "RSS (max)");
    while started.elapsed().as_secs() < minutes * 60 {
        step += 1;
        let loss = training.step(step)?;
        assert!(loss.is_finite(), "step {step}: loss {loss}");
        let now = residency::stats().unwrap_or_default();
        let counters = per_step(&now, &before);
        before = now;
        if step == WARM_UP + 1 {
            (steady, live) = (Some(counters), tensorref::live_handles());
        } else if let Some(expected) = steady {
            assert_eq!(counters, expected, "step {step}: the counters of a step changed");
            assert_eq!(tensorref::live_handles(), live, "step {step}: live handles changed");
        }
        highest = highest.max(rss_bytes());
        let minute = started.elapsed().as_secs() / 60;
        if minute > printed || step == 1 {
            if printed * 3 >= minutes && step > 1 {
                window.push(highest);
            }
            println!("{minute:>6} {step:>7} {:>6} {:>6.1} MiB  {counters:?}", tensorref::live_handles(), highest as f64 / (1 << 20) as f64);
            (printed, highest) = (minute, 0);
        }
    }
    window.push(highest.max(rss_bytes())); // the minute the run ended in
    residency::disable()?;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let (from, to) = (window[0], window[window.len() - 1]);
    println!("{step} steps; highest resident set {:.1} MiB in the first minute of the last two thirds, {:.1} MiB in the last", mib(from), mib(to));
    assert!(step > WARM_UP + 1, "the soak ran too few steps to compare");
    assert!((to as f64) < from as f64 * 1.01, "the resident set grew by 1 % or more");
    println!("soak: passed");
    Ok(())
}

fn main() -> Result<()> {
    let a = args();
    println!(
        "Training a {}-layer encoder (width {}, {} heads, {} sequences of {} tokens, dropout {}) for {} steps on {}.",
        a.layers, a.width, a.heads, a.batch, a.tokens, a.dropout, a.steps, a.device
    );
    residency::configure(Config::new(a.device, Policy::Resident, u64::MAX))?;
    let resident = train(&a)?;
    residency::disable()?;
    let peak = resident.peak;
    println!("Unmanaged peak (Resident): {:.1} MiB\n", peak as f64 / (1 << 20) as f64);
    if let Some(minutes) = a.soak {
        return soak(&a, peak, minutes);
    }
    println!(
        "{:<16} {:>9} {:>9} {:>7} {:>9} {:>7} {:>11} {:>10} {:>11} {:>11} {:>9} {:>8} {:>9} {:>6} {:>9} {:>8} {:>10}  losses",
        "policy", "budget", "ms/step", "x Res.", "warm-up", "model x", "peak/budget", "reserved", "loaded/st", "written/st", "remade/st", "pinned+", "pageable", "wthru", "needless", "misses", "load wait"
    );
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
    let row = |name: &str, budget: Option<u64>, r: &Run| {
        let measured = (a.steps - a.warmup) as u64;
        let per_step = |b: u64| mib(b / measured);
        let s = &r.steady;
        println!(
            "{:<16} {:>9} {:>9.1} {:>7.2} {:>9.0} {:>7} {:>11} {:>10} {:>11} {:>11} {:>9} {:>8} {:>9} {:>6} {:>9} {:>8} {:>7.2} ms  {}",
            name,
            budget.map_or("-".into(), mib),
            r.ms_per_step,
            r.ms_per_step / resident.ms_per_step,
            r.warmup_ms,
            r.model.filter(|_| budget.is_some()).map_or("-".into(), |m| format!("{:.2}", m.slowdown())),
            budget.map_or("-".into(), |b| format!("{:.2}", r.peak as f64 / b as f64)),
            match r.last.peak_reserved_bytes {
                0 => "-".into(),
                peak => format!("{} (+{})", mib(peak), mib(peak - r.reserved_peak_before)),
            },
            per_step(s.load_bytes),
            per_step(s.write_back_bytes),
            s.recomputations / measured,
            s.page_locked_allocs,
            s.pageable_copies,
            s.write_through_waits,
            s.needless_write_backs,
            s.prefetch_misses / measured,
            s.load_wait_ns as f64 / 1e6 / measured as f64,
            r.losses.iter().map(|l| format!("{l:.4}")).collect::<Vec<_>>().join(" ")
        );
    };
    row("Resident", None, &resident);
    let mut failed = vec![];
    let mut modelled = None; // the modelled step with nothing moved, from the first managed run
    for &(policy, recompute) in &a.runs {
        for &div in &a.budgets {
            let budget = peak / div;
            residency::configure(Config { recompute, ..Config::new(a.device, policy, budget) })?;
            let run = train(&a);
            residency::disable()?;
            let run = run?;
            modelled = modelled.or(run.model.map(|m| m.unmanaged));
            let mode = if recompute == Recompute::Off { String::new() } else { format!("+{recompute:?}").to_lowercase() };
            let name = format!("{policy:?}{mode} 1/{div}");
            row(&name, Some(budget), &run);
            failed.extend(checks(&a, &name, budget, &run, &resident));
        }
    }
    println!("\nPer step and counters: the steps after the {} of the warm-up (steady state; warm-up: those steps'", a.warmup);
    println!("milliseconds together, the order learnt and the caches filled). pinned+: new page-locked");
    println!("allocations; pageable: copies from or to pageable memory; wthru: ops that waited for a write-through");
    println!("of memory shared outside; needless: write-backs of copies nobody modified; misses: inputs loaded");
    println!("on demand a step (not prefetched); load wait: time a step's ops waited for their inputs' copies");
    println!("(on the simulated device, the demand copies); remade: results made again (+cheaper: dropped");
    println!("when remaking is estimated cheaper than the copies; +always: whenever they can be made again).");
    println!("reserved: the CUDA caching allocator's peak in the run (the manager's bytes, others' and fragmentation),");
    println!("and how much it grew after the warm-up (drift; run many --steps to see it).");
    if let Some(unmanaged) = modelled {
        println!("model x: the schedule model's step against the same step with nothing moved or remade ({:.2} ms:", unmanaged * 1e3);
        println!(
            "a {:.1} GB/s link beside {:.0} TFLOP/s for products, {:.0} TB/s for the rest, {:.0} us at least a kernel).",
            a.rates.link / 1e9,
            a.rates.flops / 1e12,
            a.rates.memory_bandwidth / 1e12,
            a.rates.launch * 1e6
        );
    }
    if !failed.is_empty() {
        println!();
        failed.iter().for_each(|f| println!("FAILED {f}"));
        std::process::exit(1);
    }
    Ok(())
}

/// What makes a managed row fail (each printed, and the run exits non-zero): losses other than
/// Resident's (bit for bit on the simulated device; on CUDA within 1e-4, relative, where
/// reductions may run in another order), device memory above the budget, a modelled step below
/// its own bound.
fn checks(a: &Args, name: &str, budget: u64, run: &Run, resident: &Run) -> Vec<String> {
    let tolerance = if matches!(a.device, Device::Cuda(_)) { 1e-4 } else { 0.0 };
    let mut failed = vec![];
    if let Some((step, (x, y))) = run.losses.iter().zip(&resident.losses).enumerate().find(|(_, (x, y))| (*x - *y).abs() > tolerance * (1.0 + y.abs())) {
        failed.push(format!("{name}: the loss of step {} is {x}, Resident's {y}", step + 1));
    }
    if run.peak > budget {
        failed.push(format!("{name}: {} device bytes alive at once, budget {budget}", run.peak));
    }
    if let Some(m) = run.model.filter(|m| m.efficiency() > 1.0 + 1e-9) {
        failed.push(format!("{name}: the modelled step beats its own bound: {m:?}"));
    }
    failed
}
