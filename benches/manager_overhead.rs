//! The host time the residency manager adds to one op: a 4-element add and its release through
//! the C ABI, its inputs a random pair out of n live tensors, without a manager and under
//! Resident, Genoa and Flow on the simulated device with a budget nothing is evicted under (Genoa
//! still moves every result home: that is its policy), at n = 100, 10,000 and 100,000 live
//! tensors. Each row is the median of rounds of ops; the added time is the row's median less the
//! median without a manager at the same n. The tensors are made after the manager is configured,
//! so every one is a storage of its, and each is read once before the rounds (on the device from
//! then on). Tensor i holds i: the sum each first read makes, and one sum after each round, are
//! checked whole; a failed add or a wrong sum makes the run exit 1. With `--kernels as-cuda` the
//! simulated device's kernels allocate as CUDA's do, without asking the manager, so that each
//! add first reserves room for its result (found by running its body over meta copies of its
//! inputs, once per signature: src/ops/output_bytes.rs).
//!
//!     cargo bench --bench manager_overhead [-- --live 100,10000,100000 --rounds 11 --ops 20000
//!         --policies resident,genoa,flow --kernels asking|as-cuda]
//!
//! The timed ops run in a function of their own, `timed`, so that a profiler can count them
//! alone: `valgrind --tool=callgrind --cache-sim=yes --toggle-collect='manager_overhead::timed'
//! --dump-before='tensorref::residency::configure' target/release/deps/manager_overhead-<hash>
//! --policies flow --live 100000 --rounds 1` dumps the rows without a manager and under it apart.

#[path = "common/cli.rs"]
mod cli;
use cli::{usage, Cli};
use std::hint::black_box;
use std::time::Instant;
use tensorref::ffi::{tr_tensor_add, tr_tensor_release, TrTensor};
use tensorref::residency::{self, Device, Config, Policy};
use tensorref::{Error, Result, Status, Tensor};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Nanoseconds per op (add + release) over `rounds` rounds of `ops` ops on random pairs of `n`
/// live tensors, made under `policy` (none: no manager).
fn per_op(policy: Option<Policy>, n: usize, rounds: usize, ops: usize) -> Result<f64> {
    if let Some(policy) = policy {
        residency::configure(Config::new(Device::Simulated, policy, 1 << 30))?;
    }
    // Tensor i holds i (exact in f32 up to 2^24), so each sum says which tensors it read.
    let live: Vec<Tensor> = (0..n).map(|i| Tensor::from_slice(&[i as f32; 4], &[4])).collect::<Result<_>>()?;
    let handles: Vec<TrTensor> = live.iter().map(|t| TrTensor::from(t.id())).collect();
    // Each tensor used once first: a tensor made by a creation op lives in host memory until an
    // op reads it, and that first load is not the cost measured here. Each sum is checked whole.
    for (i, &h) in handles.iter().enumerate() {
        check(h, h, 2.0 * i as f32)?;
    }
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut pick = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut times = vec![];
    for _ in 0..rounds {
        let pairs: Vec<(TrTensor, TrTensor)> = (0..ops).map(|_| (handles[pick()], handles[pick()])).collect();
        let start = Instant::now();
        let failed = timed(&pairs);
        times.push(start.elapsed().as_secs_f64() * 1e9 / ops as f64);
        if failed > 0 {
            return Err(Error::Device(format!("{failed} of {ops} timed adds failed (n = {n}, {policy:?})")));
        }
        let (a, b) = (pick(), pick());
        check(handles[a], handles[b], (a + b) as f32)?;
    }
    drop(live);
    if policy.is_some() {
        residency::disable()?;
    }
    Ok(median(times))
}

/// The ops timed: an add of each pair and its release. Returns how many adds failed.
#[inline(never)]
fn timed(pairs: &[(TrTensor, TrTensor)]) -> usize {
    let mut failed = 0;
    for &(a, b) in pairs {
        let mut out = TrTensor { id: 0 };
        failed += usize::from(tr_tensor_add(a, b, &mut out) != Status::TR_OK);
        tr_tensor_release(black_box(out));
    }
    failed
}

/// Adds `a` and `b` through the C ABI and checks the whole sum against `expected` in each element.
fn check(a: TrTensor, b: TrTensor, expected: f32) -> Result<()> {
    let mut out = TrTensor { id: 0 };
    let status = tr_tensor_add(a, b, &mut out);
    if status != Status::TR_OK {
        return Err(Error::Device(format!("an add failed: {status:?}")));
    }
    let sum = Tensor::from_raw(out.into()).to_vec::<f32>()?;
    match sum == [expected; 4] {
        true => Ok(()),
        false => Err(Error::Device(format!("an add made {sum:?}, not {expected} in each element"))),
    }
}

fn main() -> Result<()> {
    let cli = Cli::new();
    let live: Vec<usize> = cli.list("--live", "100,10000,100000");
    let (rounds, ops): (usize, usize) = (cli.parsed("--rounds", 11), cli.parsed("--ops", 20_000));
    if rounds == 0 || ops == 0 {
        usage("--rounds and --ops: at least 1");
    }
    let policies: Vec<Policy> = cli
        .list::<String>("--policies", "resident,genoa,flow")
        .iter()
        .map(|p| match p.as_str() {
            "resident" => Policy::Resident,
            "genoa" => Policy::Genoa,
            "flow" => Policy::Flow,
            other => usage(format!("--policies: {other} is not resident, genoa or flow")),
        })
        .collect();
    let kernels = cli.choice("--kernels", &["asking", "as-cuda"]);
    residency::simulate_cuda_allocator(kernels == "as-cuda");
    println!("4-element f32 add + release through the C ABI, random pairs of n live tensors, simulated device (kernels {kernels}), budget 1 GiB; median of {rounds} rounds of {ops} ops");
    print!("{:>8} {:>14}", "n", "no manager");
    for p in &policies {
        print!(" {:>24}", format!("{p:?} (added)"));
    }
    println!();
    for &n in &live {
        let none = per_op(None, n, rounds, ops)?;
        print!("{n:>8} {:>11.2} us", none / 1e3);
        for &p in &policies {
            let t = per_op(Some(p), n, rounds, ops)?;
            print!(" {:>24}", format!("{:.2} us ({:+.2})", t / 1e3, (t - none) / 1e3));
        }
        println!();
    }
    Ok(())
}
