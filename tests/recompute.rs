//! Recomputation under the residency manager (src/residency/training/recompute.rs): a result dropped
//! rather than written back reads the same wherever it is made again (an op's input, a read, an
//! in-place write to one of its inputs, the manager's end); random ops are made again with the
//! numbers they drew; results read by an in-place write are never made again from stale inputs; remakes stay within the chain limit;
//! a temporary only recipes hold leaves the device as soon as the program lets it go.
//! (One test binary: the manager is process-wide, so these tests take turns.)

use std::sync::{Mutex, MutexGuard};
use tensorref::residency::{self, Device, Config, Policy, Rates, Recompute, ResidencyStats};
use tensorref::{live_handles, manual_seed, DType, Result, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

/// 1024 floats: 4 KiB a tensor.
const N: i64 = 1024;
const TENSOR: u64 = 4 << 10;

/// The manager to this test alone, with recomputation always, turned off when dropped.
struct Managed(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Managed {
    fn new(budget: u64) -> Managed {
        Managed::with(Policy::Flow, budget)
    }

    /// Genoa: every result leaves the device as soon as it is made.
    fn genoa() -> Managed {
        Managed::with(Policy::Genoa, 3 * TENSOR)
    }

    fn with(policy: Policy, budget: u64) -> Managed {
        Managed::recomputing(Recompute::Always, policy, budget)
    }

    fn recomputing(recompute: Recompute, policy: Policy, budget: u64) -> Managed {
        Managed::priced(recompute, policy, budget, None)
    }

    fn priced(recompute: Recompute, policy: Policy, budget: u64, rates: Option<Rates>) -> Managed {
        let turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let config = Config { recompute, rates, ..Config::new(Device::Simulated, policy, budget) };
        residency::configure(config).unwrap();
        Managed(turn)
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        let _ = residency::disable();
    }
}

fn stats() -> ResidencyStats {
    residency::stats().unwrap()
}

fn ramp() -> Result<Tensor> {
    Tensor::from_slice(&(0..N).map(|i| i as f32 / 100.0 - 5.0).collect::<Vec<_>>(), &[N])
}

/// Evicts everything but what is pinned: `TENSOR`-sized results fill the budget.
fn crowd_out(budget: u64) -> Result<Vec<Tensor>> {
    let filler = Tensor::ones(&[N], DType::F32)?;
    (0..budget / TENSOR + 1).map(|_| filler.mul_scalar(2.0)).collect()
}

#[test]
fn a_dropped_result_reads_the_same_when_made_again() -> Result<()> {
    let _m = Managed::new(3 * TENSOR);
    let live = live_handles();
    {
        let x = ramp()?;
        let y = x.mul_scalar(3.0)?.relu()?;
        let want: Vec<f32> = x.to_vec::<f32>()?.iter().map(|v| (v * 3.0).max(0.0)).collect();
        let _crowd = crowd_out(3 * TENSOR)?;
        assert!(!y.is_resident()?, "evicted");
        assert!(stats().drops > 0, "dropped, not written back: {:?}", stats());
        let before = stats().recomputations;
        assert_eq!(y.to_vec::<f32>()?, want, "a read makes it again");
        assert!(stats().recomputations > before, "{:?}", stats());
        let _crowd = crowd_out(3 * TENSOR)?;
        assert_eq!(y.add_scalar(1.0)?.to_vec::<f32>()?, want.iter().map(|v| v + 1.0).collect::<Vec<_>>(), "an op makes its input again");
        assert!(stats().peak_device_bytes <= 3 * TENSOR, "{:?}", stats());
    }
    assert_eq!(live_handles(), live, "nothing leaked");
    Ok(())
}

/// An op generated from libtorch's schema keeps its arguments in its recipe, copied
/// (src/ops/aten/run.rs): a string, a list, an absent optional tensor.
#[test]
fn a_dropped_result_of_a_schema_op_is_made_again_with_its_arguments() -> Result<()> {
    let _m = Managed::new(3 * TENSOR);
    let live = live_handles();
    {
        let x = ramp()?;
        let ones = Tensor::ones(&[N], DType::F32)?;
        let (d, lo) = (ones.mul_scalar(0.3)?, ones.mul_scalar(-1.0)?);
        let mode = String::from("floor");
        let dims = vec![0];
        let ys = [
            x.div_tensor_mode(&d, Some(&mode))?,
            x.clamp_tensor(Some(&lo), None)?,
            x.roll(&[3], &dims)?,
        ];
        drop((mode, dims));
        let want: Vec<Vec<f32>> = ys.iter().map(Tensor::to_vec::<f32>).collect::<Result<_>>()?;
        assert_eq!(want[0][0], (-5.0f32 / 0.3).floor(), "the mode reached the kernel");
        let _crowd = crowd_out(3 * TENSOR)?;
        for y in &ys {
            assert!(!y.is_resident()?, "evicted");
        }
        let before = stats().recomputations;
        for (y, want) in ys.iter().zip(&want) {
            assert_eq!(&y.to_vec::<f32>()?, want, "made again with the arguments it was given");
        }
        assert!(stats().recomputations >= before + 3, "{:?}", stats());
    }
    assert_eq!(live_handles(), live, "nothing leaked");
    Ok(())
}

#[test]
fn an_in_place_write_to_an_input_first_makes_its_dropped_dependents_again() -> Result<()> {
    let _m = Managed::new(3 * TENSOR);
    let x = ramp()?;
    let y = x.mul_scalar(2.0)?;
    let want = y.to_vec::<f32>()?;
    let _crowd = crowd_out(3 * TENSOR)?;
    assert!(!y.is_resident()?);
    x.add_scalar_(100.0)?;
    let _crowd = crowd_out(3 * TENSOR)?;
    assert_eq!(y.to_vec::<f32>()?, want, "y is twice x as it was, not as it is now");
    // y was written back this time: it no longer has a recipe reading x.
    x.add_scalar_(1.0)?;
    assert_eq!(y.to_vec::<f32>()?, want);
    Ok(())
}

#[test]
fn an_in_place_write_to_a_dropped_result_keeps_the_write() -> Result<()> {
    let _m = Managed::new(3 * TENSOR);
    let x = ramp()?;
    let y = x.mul_scalar(2.0)?;
    let _crowd = crowd_out(3 * TENSOR)?;
    y.add_scalar_(1.0)?;
    let want: Vec<f32> = x.to_vec::<f32>()?.iter().map(|v| v * 2.0 + 1.0).collect();
    let _crowd = crowd_out(3 * TENSOR)?;
    assert_eq!(y.to_vec::<f32>()?, want, "written, then evicted: written back, never made again from x");
    Ok(())
}

/// A random result is made again from a snapshot of the generator it drew from: the same
/// numbers every time, and the program's later draws are the ones it would get without a manager.
#[test]
fn a_random_result_is_made_again_with_the_numbers_it_drew() -> Result<()> {
    let draw = || -> Result<Tensor> { Tensor::ones(&[N], DType::F32)?.mul_scalar(1.0)?.dropout(0.5, true) };
    let (plain_first, plain_second) = {
        // Nothing moved or kept: the plain draws, straight from the generator.
        let _resident = Managed::recomputing(Recompute::Off, Policy::Resident, 1);
        manual_seed(3);
        (draw()?.to_vec::<f32>()?, draw()?.to_vec::<f32>()?)
    };
    // The input, the mask and the result, and the scratch dropout's kernel draws with (960 bytes
    // on the simulated device, whose allocator counts it).
    let _m = Managed::new(3 * TENSOR + 1024);
    manual_seed(3);
    let y = draw()?;
    let first = y.to_vec::<f32>()?;
    assert!(first.contains(&0.0) && first.contains(&2.0), "a dropout mask: {:?}", &first[..8]);
    assert_eq!(first, plain_first);
    for _ in 0..3 {
        let _crowd = crowd_out(3 * TENSOR)?;
        assert!(!y.is_resident()?);
        assert_eq!(y.add_scalar(0.0)?.to_vec::<f32>()?, first, "the same mask every time");
    }
    assert_eq!(draw()?.to_vec::<f32>()?, plain_second, "remakes leave the generator alone");
    let s = stats();
    assert!(s.drops > 0 && s.recomputations >= 3, "{s:?}");
    Ok(())
}

#[test]
fn a_remake_runs_at_most_a_chain_of_eight_ops() -> Result<()> {
    let _m = Managed::genoa();
    let mut h = ramp()?;
    let mut want = h.to_vec::<f32>()?;
    for _ in 0..30 {
        h = h.mul_scalar(1.01)?.add_scalar(0.5)?;
        want = want.iter().map(|v| v * 1.01 + 0.5).collect();
    }
    assert!(!h.is_resident()?);
    let before = stats().recomputations;
    let got = h.to_vec::<f32>()?;
    let ran = stats().recomputations - before;
    assert!((1..=8).contains(&ran), "{ran} ops made again for one read");
    assert_eq!(got, want);
    Ok(())
}

#[test]
fn a_temporary_only_recipes_hold_leaves_the_device_when_released() -> Result<()> {
    let _m = Managed::new(16 * TENSOR);
    let x = ramp()?;
    let t = x.mul_scalar(2.0)?;
    let y = t.relu()?;
    let with_temporary = stats().device_bytes;
    drop(t);
    assert_eq!(stats().device_bytes, with_temporary - TENSOR, "dropped from the device at once: {:?}", stats());
    assert_eq!(y.to_vec::<f32>()?, x.to_vec::<f32>()?.iter().map(|v| (v * 2.0).max(0.0)).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn turning_the_manager_off_makes_every_dropped_result_again() -> Result<()> {
    let m = Managed::new(3 * TENSOR);
    let x = ramp()?;
    let ys: Vec<Tensor> = (1..=4).map(|k| x.mul_scalar(k as f64)).collect::<Result<_>>()?;
    let _crowd = crowd_out(3 * TENSOR)?;
    assert!(stats().drops >= 4, "{:?}", stats());
    drop(m);
    let x = x.to_vec::<f32>()?;
    for (k, y) in (1..=4).zip(&ys) {
        assert_eq!(y.to_vec::<f32>()?, x.iter().map(|v| v * k as f32).collect::<Vec<_>>(), "y{k} without a manager");
    }
    Ok(())
}

/// `Cheaper` on the simulated device prices an op as an H100 would run it (the preset): a 1 MiB elementwise
/// result is dropped (remaking it is a kernel's launch, 5 us, where writing it back and loading it
/// again takes 39 us at 53.6 GB/s), a 4 KiB one is written back (0.15 us of copies).
#[test]
fn cheaper_drops_what_an_h100_would_remake_faster_than_it_moves_it() -> Result<()> {
    for (floats, dropped) in [(1i64 << 18, true), (N, false)] {
        let bytes = floats as u64 * 4;
        let _m = Managed::recomputing(Recompute::Cheaper, Policy::Flow, 3 * bytes);
        let filler = Tensor::ones(&[floats], DType::F32)?;
        let before = stats();
        let results: Vec<Tensor> = (0..5).map(|_| filler.mul_scalar(2.0)).collect::<Result<_>>()?;
        let (s, moved) = (stats(), |a: u64, b: u64| a - b);
        assert!(s.evictions > before.evictions, "{floats} floats: the budget evicts {s:?}");
        assert_eq!(moved(s.drops, before.drops) > 0, dropped, "{floats} floats: {s:?}");
        assert_eq!(moved(s.write_backs, before.write_backs) > 0, !dropped, "{floats} floats: {s:?}");
        assert!(results.iter().all(|r| r.to_vec::<f32>().map(|v| v.iter().all(|&x| x == 2.0)).unwrap_or(false)));
    }
    Ok(())
}

/// `Cheaper` prices with the configuration's rates where it names them: over a link of 1 MB/s
/// the 4 KiB result the H100 preset writes back is dropped (8 ms of copies against a launch),
/// over a link of 1 PB/s the 1 MiB result it drops is written back (2 ns of copies).
#[test]
fn cheaper_prices_with_the_rates_the_configuration_names() -> Result<()> {
    for (floats, link, dropped) in [(N, 1e6, true), (1i64 << 18, 1e15, false)] {
        let bytes = floats as u64 * 4;
        let rates = Rates { link, ..Rates::H100 };
        let _m = Managed::priced(Recompute::Cheaper, Policy::Flow, 3 * bytes, Some(rates));
        let filler = Tensor::ones(&[floats], DType::F32)?;
        let before = stats();
        let results: Vec<Tensor> = (0..5).map(|_| filler.mul_scalar(2.0)).collect::<Result<_>>()?;
        let s = stats();
        assert!(s.evictions > before.evictions, "{floats} floats: the budget evicts {s:?}");
        assert_eq!(s.drops > before.drops, dropped, "{floats} floats at {link} B/s: {s:?}");
        assert_eq!(s.write_backs > before.write_backs, !dropped, "{floats} floats at {link} B/s: {s:?}");
        assert!(results.iter().all(|r| r.to_vec::<f32>().map(|v| v.iter().all(|&x| x == 2.0)).unwrap_or(false)));
    }
    Ok(())
}

/// `Cheaper` weighs copies by how loaded the link was in the last iteration. A 256 x 8192 by
/// 8192 x 256 product takes 2.2 times as long on an H100 as writing its 256 KiB back and loading
/// them again: after an iteration of kernels and few copies it is written back, after one whose
/// evicted 1 MiB results would have kept the link 3 times as busy as the kernels, it is dropped.
#[test]
fn cheaper_recomputes_more_after_an_iteration_where_the_link_was_the_bottleneck() -> Result<()> {
    for link_bound in [false, true] {
        let _m = Managed::recomputing(Recompute::Cheaper, Policy::Flow, (16 << 20) + (5 << 19));
        let (x, w) = (Tensor::ones(&[256, 8192], DType::F32)?, Tensor::ones(&[8192, 256], DType::F32)?);
        let filler = Tensor::ones(&[1 << 18], DType::F32)?;
        x.pin_resident(true)?;
        w.pin_resident(true)?;
        residency::mark_iteration()?; // their loads are not the next iteration's
        let first: Vec<Tensor> = match link_bound {
            true => (0..16).map(|_| filler.mul_scalar(2.0)).collect::<Result<_>>()?,
            false => vec![x.matmul(&w)?],
        };
        residency::mark_iteration()?;
        let before = stats();
        let products: Vec<Tensor> = (0..12).map(|_| x.matmul(&w)).collect::<Result<_>>()?;
        let s = stats();
        assert!(s.evictions > before.evictions, "the budget evicts products: {s:?}");
        assert_eq!(s.drops > before.drops, link_bound, "link-bound first iteration: {link_bound}; {s:?}");
        assert_eq!(s.write_backs > before.write_backs, !link_bound, "link-bound first iteration: {link_bound}; {s:?}");
        assert!(products.iter().chain(&first[..1]).all(|p| p.to_vec::<f32>().is_ok_and(|v| v[0] == 8192.0 || v[0] == 2.0)));
    }
    Ok(())
}

/// `Cheaper` counts no load for an input the recorded order reads again within a few ops of the
/// result's own next use (backward reads an op's input right after its result). `y`, a 1 MiB sum
/// over a 2 MiB `a`, costs a 2 MiB load to make again once `a` is evicted: as much as writing
/// `y` back and loading it. Flow evicts `a` (used later), then `y`, for a 2 MiB op between. Once
/// the order is recorded, `y` is dropped when `a` is read right after `y`, and written back when
/// 16 other ops come between.
#[test]
fn cheaper_counts_no_load_for_an_input_read_next_to_the_result() -> Result<()> {
    let floats = 1i64 << 18; // 1 MiB: a copy takes 20 us, longer than a launch
    for (gap, dropped) in [(0, true), (16, false)] {
        let _m = Managed::recomputing(Recompute::Cheaper, Policy::Flow, 4 * 4 * floats as u64);
        let (a, c) = (Tensor::ones(&[2, floats], DType::F32)?, Tensor::ones(&[2, floats], DType::F32)?);
        let mut last = (0, 0);
        for _ in 0..3 {
            let before = stats();
            let y = a.sum_dim(&[0], false)?;
            c.mul_scalar(2.0)?; // 4 MiB with its input: everything else leaves
            let z = y.dropout(0.0, true)?; // reads y (p = 0: y itself)
            for _ in 0..gap {
                c.sum()?;
            }
            let u = a.mul_scalar(1.0)?;
            assert_eq!((z.to_vec::<f32>()?[0], u.to_vec::<f32>()?[0]), (2.0, 1.0));
            residency::mark_iteration()?;
            last = (stats().drops - before.drops, stats().recomputations - before.recomputations);
        }
        assert_eq!(last.0 > 0 && last.1 > 0, dropped, "{gap} ops between: (drops, remakes) {last:?}");
    }
    Ok(())
}
