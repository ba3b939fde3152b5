//! Instructions per op, a figure no busy machine can move. Two uses:
//!
//! **The per-op sample** (benches/common/op_sample.rs, the ops the `ratios` bench times): with no
//! arguments, the bench runs itself under callgrind once and prints, for each op, the
//! instructions of one call (and the release of its results) as raw tch, through Rust and
//! through the C ABI, and their ratios; it exits 1 over the per-op bar, as `ratios` does. Each
//! variant runs inside a function of its own (`m<op>_<variant>`), whose inclusive count
//! callgrind_annotate reports, so libtorch's start-up is not counted.
//!
//!     cargo bench --bench instructions
//!
//! **A 4-element add under a manager** (`raw`, `rust`, `c`, and `resident`, `genoa`, `flow`: the
//! simulated device, a budget of 1 GiB that nothing is evicted under): run under callgrind twice
//! with different counts; the difference cancels libtorch's start-up:
//!
//!     cargo bench --bench instructions --no-run
//!     valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/deps/instructions-<hash> <raw|rust|c|resident|genoa|flow> 10000
//!     (and again with 30000; instructions per op = difference / 20000)
//!
//! For the C ABI's rows, counting only inside its two calls takes one run (per op = total / n):
//! add `--toggle-collect='tr_tensor_*'`.

#[path = "common/op_sample.rs"]
mod op_sample;

use std::hint::black_box;
use tensorref::ffi::{tr_tensor_add, tr_tensor_copy_to, tr_tensor_release, TrTensor};
use tensorref::residency::{self, Config, Device, Policy};
use tensorref::{DType, Status, Tensor};

/// The per-op bar: the C ABI at most this much over raw tch.
const BAR: f64 = 1.15;
/// Calls counted per variant (after as many uncounted ones).
const CALLS: usize = 2000;

// One function per (op, variant) of the sample, each with a body of its own (so that no two are
// merged into one symbol): callgrind counts what each runs.
macro_rules! markers {
    ($($name:ident = $k:literal),*) => {
        $(#[inline(never)]
        fn $name(n: usize, f: &mut dyn FnMut()) {
            for _ in 0..n {
                f();
            }
            black_box($k);
        })*
    };
}
markers!(m0_0 = 0, m0_1 = 1, m0_2 = 2, m1_0 = 10, m1_1 = 11, m1_2 = 12, m2_0 = 20, m2_1 = 21, m2_2 = 22,
         m3_0 = 30, m3_1 = 31, m3_2 = 32, m4_0 = 40, m4_1 = 41, m4_2 = 42, m5_0 = 50, m5_1 = 51, m5_2 = 52);
type Marker = fn(usize, &mut dyn FnMut());
const MARKERS: [[Marker; 3]; 6] = [[m0_0, m0_1, m0_2], [m1_0, m1_1, m1_2], [m2_0, m2_1, m2_2],
                                   [m3_0, m3_1, m3_2], [m4_0, m4_1, m4_2], [m5_0, m5_1, m5_2]];

/// Runs the sample, each variant CALLS times uncounted and CALLS times in its marker.
fn run_sample() {
    let mut keep = vec![];
    let mut ops = op_sample::sample(&mut keep);
    assert_eq!(ops.len(), MARKERS.len(), "one row of markers per op of the sample");
    for (op, markers) in ops.iter_mut().zip(MARKERS) {
        for (f, marker) in op.variants.iter_mut().zip(markers) {
            for _ in 0..CALLS {
                f();
            }
            marker(CALLS, f.as_mut());
        }
    }
    assert_eq!(op_sample::failed(), 0, "timed C calls failed");
}

/// Runs the sample under callgrind and prints its instructions per call.
fn measure() -> i32 {
    let exe = std::env::current_exe().expect("the bench's own path");
    let out = std::env::temp_dir().join(format!("tensorref-instructions-{}.out", std::process::id()));
    let run = std::process::Command::new("valgrind")
        .args(["--tool=callgrind", "--dump-instr=no"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(&exe)
        .arg("sample")
        .output();
    match run {
        Err(e) => {
            println!("instructions: valgrind could not be run ({e}); the sample's instruction counts need it");
            return 0;
        }
        Ok(r) if !r.status.success() => {
            eprintln!("instructions: the sample failed under valgrind:\n{}", String::from_utf8_lossy(&r.stderr));
            return 1;
        }
        Ok(_) => {}
    }
    let annotate = std::process::Command::new("callgrind_annotate").arg("--inclusive=yes").arg(&out).output();
    let _ = std::fs::remove_file(&out);
    let text = String::from_utf8_lossy(&annotate.expect("callgrind_annotate, which valgrind ships").stdout).into_owned();
    // A line per function: "  12,345,678 (1.23%)  ???:instructions::m2_1 [...]".
    let count = |marker: &str| -> f64 {
        let line = text.lines().find(|l| l.contains(&format!("instructions::{marker} "))).unwrap_or_else(|| {
            panic!("instructions: callgrind_annotate lists no {marker}")
        });
        let digits: String = line.split_whitespace().next().unwrap().chars().filter(char::is_ascii_digit).collect();
        digits.parse::<f64>().unwrap() / CALLS as f64
    };
    let mut keep = vec![];
    let names: Vec<&str> = op_sample::sample(&mut keep).iter().map(|op| op.name).collect();
    let [raw, rust, c] = op_sample::VARIANTS;
    println!("Instructions per call (op + release), callgrind, {CALLS} calls a variant");
    println!("{:<34} {raw:>9} {rust:>9} {c:>9}   {rust:>7} {c:>7}", "op");
    let mut worst: f64 = 0.0;
    for (k, name) in names.iter().enumerate() {
        let n: Vec<f64> = (0..3).map(|v| count(&format!("m{k}_{v}"))).collect();
        println!("{name:<34} {:>9.0} {:>9.0} {:>9.0}   {:>6.3}x {:>6.3}x", n[0], n[1], n[2], n[1] / n[0], n[2] / n[0]);
        worst = worst.max(n[2] / n[0]);
    }
    println!("worst C ABI ratio: {worst:.3}x raw tch (bar {BAR}x)");
    i32::from(worst > BAR)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes `--bench`.
    let mode = args.get(1).map_or("measure", String::as_str);
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    match mode {
        "measure" | "--bench" => std::process::exit(measure()),
        "sample" => run_sample(),
        "raw" => {
            let (a, b) = (tch::Tensor::ones([4], tch::kind::FLOAT_CPU), tch::Tensor::ones([4], tch::kind::FLOAT_CPU));
            for _ in 0..n {
                drop(black_box(a.f_add(&b).unwrap()));
            }
        }
        "c" | "resident" | "genoa" | "flow" => {
            let policy = match mode {
                "resident" => Some(Policy::Resident),
                "genoa" => Some(Policy::Genoa),
                "flow" => Some(Policy::Flow),
                _ => None,
            };
            if let Some(policy) = policy {
                residency::configure(Config::new(Device::Simulated, policy, 1 << 30)).unwrap();
            }
            let (a, b) = (Tensor::ones(&[4], DType::F32).unwrap(), Tensor::ones(&[4], DType::F32).unwrap());
            let (ca, cb) = (TrTensor::from(a.id()), TrTensor::from(b.id()));
            for i in 0..n {
                let mut out = TrTensor { id: 0 };
                assert_eq!(tr_tensor_add(ca, cb, &mut out), Status::TR_OK);
                if i + 1 == n {
                    // The last result, read back whole: the counted ops computed what they should.
                    let mut bytes = [0u8; 16];
                    let mut written = 0;
                    assert_eq!(tr_tensor_copy_to(out, bytes.as_mut_ptr(), bytes.len(), &mut written), Status::TR_OK);
                    let values: Vec<f32> = bytes.chunks(4).map(|c| f32::from_ne_bytes(c.try_into().unwrap())).collect();
                    assert_eq!((written, values), (16, vec![2.0; 4]), "{mode}: 1 + 1");
                }
                tr_tensor_release(black_box(out));
            }
        }
        _ => {
            let (a, b) = (Tensor::ones(&[4], DType::F32).unwrap(), Tensor::ones(&[4], DType::F32).unwrap());
            for _ in 0..n {
                drop(black_box(a.add(&b).unwrap()));
            }
        }
    }
}
