//! Storages shared under the residency manager: views and aliases of a managed tensor share its
//! storage (a write through one is seen through all, nothing is counted twice, a clean view is
//! never written back), and memory shared with code outside the library (DLPack, what PyTorch's
//! `from_torch`/`to_torch` use) is never served stale and never overwritten, under every policy
//! and at tight and loose budgets.
//! (One test binary: the manager is process-wide, so these tests take turns.)
//!
//! `cargo test --features cuda-tests --test shared_storage` runs them against CUDA device 0.

mod common;
use common::shared_with_outside;
use std::sync::{Arc, Mutex, MutexGuard};
use tensorref::ffi::{tr_tensor_from_dlpack, tr_tensor_to_dlpack, TrTensor};
use tensorref::residency::{self, Device, Config, EventKind, Policy};
use tensorref::{live_handles, no_grad, DType, Result, Status, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

#[cfg(not(feature = "cuda-tests"))]
const DEVICE: Device = Device::Simulated;
#[cfg(feature = "cuda-tests")]
const DEVICE: Device = Device::Cuda(0);

const POLICIES: [Policy; 3] = [Policy::Resident, Policy::Genoa, Policy::Flow];

/// Runs `f` once per policy and budget, with the manager to itself; afterwards the manager is
/// off and no handle leaked.
fn each_policy(budgets: &[u64], f: impl Fn(Policy, u64) -> Result<()>) {
    let _turn: MutexGuard<()> = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for policy in POLICIES {
        for &budget in budgets {
            let live = live_handles();
            residency::configure(Config::new(DEVICE, policy, budget)).unwrap();
            let result = no_grad(|| f(policy, budget));
            let stats = residency::stats().unwrap();
            residency::disable().unwrap();
            result.unwrap_or_else(|e| panic!("{policy:?} budget {budget}: {e}"));
            assert_eq!(stats.needless_write_backs, 0, "{policy:?} budget {budget}: {stats:?}");
            if policy != Policy::Resident {
                assert!(stats.peak_device_bytes <= budget, "{policy:?} budget {budget}: over budget {stats:?}");
            }
            assert_eq!(live_handles(), live, "{policy:?} budget {budget}: handles leaked");
        }
    }
}

fn sum(t: &Tensor) -> Result<f64> {
    t.sum()?.item()
}

// ---------------------------------------------------------------- views and aliases

#[test]
fn a_write_through_the_base_is_seen_through_its_views() {
    // 16-byte tensors: every budget from one op's two inputs up.
    each_policy(&[32, 48, 1 << 20], |_, _| {
        let x = Tensor::zeros(&[4], DType::F32)?;
        let v = x.view(&[2, 2])?;
        x.add_(&Tensor::ones(&[4], DType::F32)?)?;
        assert_eq!(v.to_vec::<f32>()?, [1.0; 4], "the view reads the base's write");
        v.mul_scalar_(3.0)?;
        assert_eq!(x.to_vec::<f32>()?, [3.0; 4], "the base reads the view's write");
        let a = x.alias()?;
        a.add_(&x)?;
        assert_eq!(v.to_vec::<f32>()?, [6.0; 4], "an alias writes the same storage");
        Ok(())
    });
}

#[test]
fn writes_through_a_view_survive_evictions() {
    // 16 KiB tensors under a budget of four: every op evicts.
    let bytes = 64 * 64 * 4;
    each_policy(&[4 * bytes, 8 * bytes], |_, _| {
        let x = Tensor::ones(&[64, 64], DType::F32)?;
        let v = x.transpose(0, 1)?;
        let others: Vec<Tensor> = (0..6).map(|_| Tensor::ones(&[64, 64], DType::F32)).collect::<Result<_>>()?;
        for (i, o) in others.iter().enumerate() {
            v.add_(o)?; // through the view
            let churn = o.mul_scalar(2.0)?.add(o)?; // results that push the base out
            assert_eq!(sum(&x)?, 4096.0 * (i + 2) as f64, "step {i}: the base sees the write");
            assert_eq!(sum(&v)?, sum(&x)?, "step {i}");
            drop(churn);
        }
        Ok(())
    });
}

#[test]
fn view_ops_share_the_storage_and_cost_no_bytes() {
    let x_bytes = 128 * 128 * 4; // 65536
    each_policy(&[70_000], |policy, _| {
        let x = Tensor::randn(&[128, 128], DType::F32)?;
        let expected = x.to_vec::<f32>()?;
        let views = [
            x.transpose(0, 1)?,
            x.view(&[64, 256])?,
            x.reshape(&[16384])?,
            x.narrow(0, 3, 100)?,
            x.permute(&[1, 0])?,
            x.unsqueeze(0)?.squeeze(0)?,
            x.detach()?,
            x.contiguous()?,
        ];
        let s = residency::stats().unwrap();
        // Every view alive at once, and the books hold at most one copy of their one storage.
        assert!(s.device_bytes <= x_bytes as u64, "{policy:?}: a view was counted as a storage of its own: {s:?}");
        if policy != Policy::Resident {
            assert!(s.peak_device_bytes <= x_bytes as u64, "views were counted again: {s:?}");
        }
        assert_eq!(s.write_backs, 0, "nothing was modified, nothing is written back: {s:?}");
        assert_eq!(views[0].transpose(0, 1)?.to_vec::<f32>()?, expected);
        assert_eq!(views[3].to_vec::<f32>()?, expected[3 * 128..103 * 128]);
        Ok(())
    });
}

#[test]
fn a_clean_view_of_a_weight_is_never_written_back() {
    // Four weights of 16 KiB under a budget of two: every pass evicts every weight.
    let w_bytes = 64 * 64 * 4;
    each_policy(&[3 * w_bytes, 5 * w_bytes], |_, _| {
        let weights: Vec<Tensor> = (0..4).map(|_| Tensor::randn(&[64, 64], DType::F32)).collect::<Result<_>>()?;
        let x = Tensor::randn(&[8, 64], DType::F32)?;
        let written = Arc::new(Mutex::new(Vec::new()));
        let log = written.clone();
        residency::set_callback(Some(Box::new(move |e| {
            if e.kind == EventKind::WriteBack {
                log.lock().unwrap().push(e.bytes);
            }
        })))?;
        for _ in 0..3 {
            let mut h = x.alias()?;
            for w in &weights {
                h = h.matmul(&w.transpose(0, 1)?)?.tanh()?;
            }
            residency::mark_iteration()?;
        }
        // Only activations (8 x 64 floats) are ever written back (Genoa writes every result
        // back); a transposed weight is a clean view of the weight, never a result of its own.
        let written = written.lock().unwrap();
        assert!(written.iter().all(|&b| b == 8 * 64 * 4), "write-backs of {written:?} bytes");
        Ok(())
    });
}

#[test]
fn a_view_made_before_the_manager_sees_its_base_and_lets_it_go_with_it() {
    let _turn: MutexGuard<()> = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for policy in POLICIES {
        let live = live_handles();
        let x = Tensor::zeros(&[4], DType::F32).unwrap();
        let v = x.view(&[2, 2]).unwrap(); // no manager yet: the manager never registers `v`
        residency::configure(Config::new(DEVICE, policy, 1 << 20)).unwrap();
        no_grad(|| x.add_(&Tensor::ones(&[4], DType::F32)?).map(drop)).unwrap();
        drop(x); // its storage outlives it in `v`
        assert_eq!(v.to_vec::<f32>().unwrap(), [1.0; 4], "{policy:?}: the view reads the write");
        drop(v);
        drop(no_grad(|| Tensor::ones(&[4], DType::F32)?.mul_scalar(2.0)).unwrap()); // any release sweeps
        let s = residency::stats().unwrap();
        residency::disable().unwrap();
        assert_eq!(s.device_bytes, 0, "{policy:?}: the storage was forgotten with its last holder: {s:?}");
        assert_eq!(live_handles(), live);
    }
}

// ---------------------------------------------------------------- memory shared with the outside

fn outside_tensor(values: &[f32]) -> tch::Tensor {
    tch::Tensor::from_slice(values).to_device(tch::Device::Cpu)
}

#[test]
fn an_outside_refill_is_seen_by_the_next_op() {
    each_policy(&[32, 64, 1 << 20], |_, _| {
        let outside = outside_tensor(&[0.0; 4]);
        let buf = shared_with_outside(&outside)?;
        let acc = Tensor::zeros(&[4], DType::F32)?;
        let mut seen = vec![];
        for batch in 1..=3 {
            let _ = outside.shallow_clone().fill_(batch as f64); // the outside refills its buffer
            acc.add_(&buf)?;
            seen.push(acc.to_vec::<f32>()?[0]);
        }
        assert_eq!(seen, [1.0, 3.0, 6.0], "each batch read the refilled buffer");
        Ok(())
    });
}

#[test]
fn an_outside_write_is_never_overwritten_by_the_manager() {
    each_policy(&[32, 64, 1 << 20], |_, _| {
        let outside = outside_tensor(&[0.0; 4]);
        let buf = shared_with_outside(&outside)?;
        buf.add_(&Tensor::ones(&[4], DType::F32)?)?; // the library writes
        assert_eq!(Vec::<f32>::try_from(&outside).unwrap(), [1.0; 4], "the outside reads the library's write at once");
        let _ = outside.shallow_clone().fill_(200.0); // then the outside writes
        let churn = Tensor::ones(&[4], DType::F32)?.mul_scalar(2.0)?; // ops that evict
        drop(churn);
        assert_eq!(buf.to_vec::<f32>()?, [200.0; 4], "the library reads the outside's write");
        assert_eq!(Vec::<f32>::try_from(&outside).unwrap(), [200.0; 4], "and never writes an old copy over it");
        Ok(())
    });
}

#[test]
fn a_tensor_exported_under_the_manager_is_settled_and_stays_current() {
    each_policy(&[64, 1 << 20], |_, _| {
        let a = Tensor::ones(&[4], DType::F32)?;
        let y = a.add(&a)?; // its newest copy may be on the device only
        let mut managed = std::ptr::null_mut();
        assert_eq!(tr_tensor_to_dlpack(TrTensor::from(y.id()), &mut managed), Status::TR_OK);
        let mut back = TrTensor { id: 0 };
        assert_eq!(tr_tensor_from_dlpack(managed, &mut back), Status::TR_OK);
        let shared = Tensor::from_raw(back.into());
        assert_eq!(shared.to_vec::<f32>()?, [2.0; 4], "the export holds the current values");
        y.add_(&a)?; // a write through the library's own handle
        assert_eq!(shared.to_vec::<f32>()?, [3.0; 4], "is seen through the exported memory");
        Ok(())
    });
}

