//! The budget holds of real memory: on the simulated device, the bytes its allocator counts alive
//! (device copies, an op's outputs and its kernel's scratch) never exceed the budget at any
//! moment, under every policy, because an op's kernel gets room for each allocation before it
//! is made. An op whose scratch cannot fit beside its inputs is refused with what it needs, and
//! nothing is left counted once the manager is off. Where kernels allocate as CUDA's do, without
//! asking, each op makes room for its outputs before its kernel. (Its own test binary: the
//! manager and the allocator's counts are process-wide; no Python in it, so the meta kernels
//! asked are libtorch's C++ ones.)

mod common;
use std::sync::Mutex;
use tensorref::residency::{self, Config, Device, DeviceMemory, Policy, ResidencyStats};
use tensorref::{no_grad, DType, Error, Result, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

/// 64 × 64 f32: 16 KiB.
const N: i64 = 64;
const TENSOR: u64 = (N * N * 4) as u64;

/// The chains' operands: eight tensors of distinct values, and the first `x`.
fn operands() -> Result<(Vec<Tensor>, Tensor)> {
    let ts = (0..8).map(|i| Tensor::full(&[N, N], 0.01 * (i + 1) as f64, DType::F32)).collect::<Result<_>>()?;
    Ok((ts, Tensor::full(&[N, N], 0.5, DType::F32)?))
}

/// A chain of ops over eight tensors, each op reading two or three of them; returns the last
/// result's values.
fn chain() -> Result<Vec<f32>> {
    let (ts, mut x) = operands()?;
    for i in 0..64 {
        let (a, b) = (&ts[i % 8], &ts[(i * 3 + 1) % 8]);
        x = x.matmul(a)?.add(b)?.tanh()?.softmax(1)?;
    }
    x.to_vec::<f32>()
}

/// `run` under a manager configured by `config`, turned off again after it: what `run` returned,
/// the device's memory over the run and the manager's stats.
fn managed<R>(config: Config, run: impl FnOnce() -> Result<R>) -> Result<(Result<R>, DeviceMemory, ResidencyStats)> {
    residency::configure(config)?;
    residency::device_memory(true);
    let result = run();
    let memory = residency::device_memory(false);
    let stats = residency::stats().expect("configured");
    residency::disable()?;
    Ok((result, memory, stats))
}

#[test]
fn the_allocator_never_counts_more_device_bytes_than_the_budget() -> Result<()> {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    no_grad(|| -> Result<()> {
        let plain = chain()?;
        // Room for an op's inputs and result, and a little more: every op evicts.
        let budget = 4 * TENSOR;
        for (policy, recompute) in common::policy_runs() {
            if policy == Policy::Resident {
                continue; // keeps everything: no budget to hold
            }
            let what = format!("{policy:?}, recompute {recompute:?}");
            let (run, memory, stats) = managed(Config { recompute, ..Config::new(Device::Simulated, policy, budget) }, chain)?;
            assert_eq!(run?, plain, "{what}: results differ from the same ops without a manager");
            assert!(stats.evictions > 0, "{what}: the budget made it move data");
            assert!(memory.peak >= 3 * TENSOR, "{what}: an op's inputs and result were counted: {memory:?}");
            assert!(memory.peak <= budget, "{what}: {} device bytes alive at once, budget {budget}", memory.peak);
            let after = residency::device_memory(false);
            assert_eq!((after.live, after.in_flight), (0, 0), "{what}: device memory left once the manager is off: {after:?}");
        }
        Ok(())
    })
}

#[test]
fn an_ops_scratch_needs_room_too() -> Result<()> {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    no_grad(|| -> Result<()> {
        // cross_entropy computes log_softmax of the logits (as many bytes again) before the loss.
        let logits = Tensor::full(&[N, 4 * N], 0.25, DType::F32)?;
        let targets = Tensor::zeros(&[N], DType::I64)?;
        let (logits_bytes, targets_bytes) = (4 * TENSOR, (N * 8) as u64);
        let plain = logits.cross_entropy(&targets)?.to_vec::<f32>()?;
        // The inputs and the scalar result fit; the scratch beside them does not.
        let tight = logits_bytes + targets_bytes + 1024;
        residency::configure(Config::new(Device::Simulated, Policy::Flow, tight))?;
        let refused = logits.cross_entropy(&targets);
        residency::disable()?;
        match refused {
            Err(Error::BudgetTooSmall { op, needed, budget }) => {
                assert_eq!((op.as_str(), budget), ("cross_entropy", tight));
                assert!(needed >= 2 * logits_bytes + targets_bytes, "says what it needs with its scratch: {needed}");
            }
            other => panic!("cross_entropy at a budget without room for its scratch: {other:?}"),
        }
        let roomy = 2 * logits_bytes + targets_bytes + 1024;
        let (loss, memory, _) = managed(Config::new(Device::Simulated, Policy::Flow, roomy), || logits.cross_entropy(&targets)?.to_vec::<f32>())?;
        assert_eq!(loss?, plain);
        assert!(memory.peak >= 2 * logits_bytes && memory.peak <= roomy, "the scratch was counted, within the budget: {memory:?}");
        Ok(())
    })
}

/// The chain's ops and ops over lists and views, all with kernels of their own or the schema's:
/// `matmul` (the schema's runner), `relu` (the same, with no meta kernel in libtorch's C++: a
/// pointwise op's answer), `index_select`, `floor_divide` and `var` (the same, sized by rules of
/// ours: src/residency/core/outputs_by_rule.cpp), `add`, `softmax`, `gelu`, `transpose` and `cat`
/// (bodies of their own, run over meta copies of the inputs).
fn table_chain() -> Result<Vec<f32>> {
    let (ts, mut x) = operands()?;
    let reversed = Tensor::from_slice(&(0..N).rev().collect::<Vec<i64>>(), &[N])?;
    for i in 0..16 {
        let (a, b) = (&ts[i % 8], &ts[(i * 3 + 1) % 8]);
        let y = x.matmul(&a.transpose(0, 1)?)?.relu()?.add(b)?.gelu()?;
        let spread = y.index_select(0, &reversed)?.floor_divide(b)?.var_correction(Some(&[1]), None, true)?;
        x = Tensor::cat(&[&y.add(&spread)?, &x.softmax(1)?], 0)?.narrow(0, 0, N)?;
    }
    x.to_vec::<f32>()
}

#[test]
fn kernels_allocating_as_on_cuda_find_room_for_their_outputs_first() -> Result<()> {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    no_grad(|| -> Result<()> {
        let plain = table_chain()?;
        let budget = 6 * TENSOR; // cat's two inputs and its result, and room to spare
        residency::simulate_cuda_allocator(true);
        struct AsCuda; // off again however the test ends
        impl Drop for AsCuda {
            fn drop(&mut self) {
                residency::simulate_cuda_allocator(false);
            }
        }
        let _as_cuda = AsCuda;
        for policy in [Policy::Genoa, Policy::Flow] {
            let (run, memory, stats) = managed(Config::new(Device::Simulated, policy, budget), table_chain)?;
            assert_eq!(run?, plain, "{policy:?}: results differ from the same ops without a manager");
            assert!(stats.evictions > 0, "{policy:?}: the budget made it move data");
            assert_eq!(stats.output_bytes_unreserved, 0, "{policy:?}: every output had room made before its kernel");
            assert!(memory.peak <= budget + memory.scratch_peak, "{policy:?}: {memory:?} over the budget {budget}");
        }
        Ok(())
    })
}
