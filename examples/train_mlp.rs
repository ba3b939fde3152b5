//! The demonstration of dispose scopes: the same MLP trained twice, once with a scope per step
//! and once without. Each step leaves its intermediate handles the way a garbage-collected host
//! (.NET, Python without `del`) leaves tensors it no longer references: nothing releases them
//! until a collector runs, and the collector cannot see native memory. With a scope per step the
//! live count and bytes stay flat; without, they grow every step.
//!
//!     cargo run --release --example train_mlp [steps]

use tensorref::{live_bytes, live_handles, manual_seed, with_scope, DType, Result, Tensor, TensorId};

const REPORT_EVERY: usize = 25;

struct Mlp {
    params: [Tensor; 4],
}

impl Mlp {
    fn new() -> Result<Mlp> {
        let params = [
            Tensor::randn(&[64, 16], DType::F32)?.mul_scalar(0.25)?,
            Tensor::zeros(&[64], DType::F32)?,
            Tensor::randn(&[1, 64], DType::F32)?.mul_scalar(0.125)?,
            Tensor::zeros(&[1], DType::F32)?,
        ];
        for p in &params {
            p.requires_grad_(true)?;
        }
        Ok(Mlp { params })
    }

    /// One SGD step. Every handle it makes is handed to `left_behind` instead of being
    /// released, as a garbage-collected host would leave it.
    fn step(&self, x: &Tensor, y: &Tensor, left_behind: &mut Vec<TensorId>) -> Result<f64> {
        let [w1, b1, w2, b2] = &self.params;
        let hidden = x.linear(w1, Some(b1))?;
        let act = hidden.relu()?;
        let pred = act.linear(w2, Some(b2))?;
        let loss = pred.mse_loss(y)?;
        loss.backward()?;
        let grads: Vec<Tensor> = self.params.iter().filter_map(|p| p.grad().transpose()).collect::<Result<_>>()?;
        Tensor::optim_sgd_step(&self.params.iter().collect::<Vec<_>>(), 0.05)?;
        for p in &self.params {
            p.zero_grad()?;
        }
        let value = loss.item()?;
        left_behind.extend([hidden, act, pred, loss].into_iter().chain(grads).map(Tensor::into_raw));
        Ok(value)
    }
}

struct Report {
    live: Vec<usize>,
    bytes: Vec<u64>,
    loss: f64,
}

fn train(steps: usize, scope_per_step: bool) -> Result<Report> {
    manual_seed(0);
    let x = Tensor::randn(&[256, 16], DType::F32)?;
    let y = x.narrow(1, 0, 1)?.mul(&x.narrow(1, 1, 1)?)?.mul_scalar(2.0)?.tanh()?; // a smooth target
    let model = Mlp::new()?;
    let mut left_behind = Vec::new();
    let (mut live, mut bytes, mut loss) = (vec![], vec![], 0.0);
    for _ in 0..steps {
        loss = if scope_per_step {
            with_scope(|_| model.step(&x, &y, &mut left_behind))?
        } else {
            model.step(&x, &y, &mut left_behind)?
        };
        live.push(live_handles());
        bytes.push(live_bytes(tch::Device::Cpu));
    }
    // The collector finally runs. (After the scoped run these handles are already dead.)
    for id in left_behind {
        let _ = Tensor::from_raw(id).dispose();
    }
    Ok(Report { live, bytes, loss })
}

fn main() -> Result<()> {
    let steps: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(300);
    println!("Training a 16-64-1 MLP for {steps} steps, twice (live handles and host bytes after each step).\n");
    let scoped = train(steps, true)?;
    let unscoped = train(steps, false)?;
    println!("{:>6} | {:>22} | {:>22}", "step", "scope per step", "no scope");
    println!("{:>6} | {:>8} {:>13} | {:>8} {:>13}", "", "live", "bytes", "live", "bytes");
    for i in (0..steps).filter(|i| i % REPORT_EVERY == 0 || *i == steps - 1) {
        println!(
            "{:>6} | {:>8} {:>13} | {:>8} {:>13}",
            i + 1, scoped.live[i], scoped.bytes[i], unscoped.live[i], unscoped.bytes[i]
        );
    }
    let growth = |r: &Report| r.live[steps - 1] as i64 - r.live[0] as i64;
    println!("\nfinal loss: {:.5} (scope per step), {:.5} (no scope)", scoped.loss, unscoped.loss);
    println!(
        "live handles grew by {} with a scope per step, by {} without",
        growth(&scoped),
        growth(&unscoped)
    );
    assert_eq!(growth(&scoped), 0, "a scope per step must keep the live count flat");
    assert_eq!(scoped.loss, unscoped.loss, "scopes change lifetimes, never results");
    Ok(())
}
