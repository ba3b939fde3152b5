//! What ops and copies cost on a device: its rates (`Rates`, set in the configuration; the H100's
//! a named preset), a roofline time per op, and the compute time of a logged pass with the
//! backward of a training step counted. Recomputation decides with these; the schedule model's
//! replay (`model`) uses the same.

use crate::residency::model::pass::{Pass, Step, Work, SAVE};

/// A backward op's cost against its forward op's: a matrix product's backward is two products
/// of its size (the inputs' gradients and the weight's), an elementwise op's reads and writes
/// about twice the bytes.
/// cbindgen:ignore
pub const BACKWARD_COST: f64 = 2.0;

/// Each op step's time: `compute` for an op the program ran or one made again; for an unpack,
/// `BACKWARD_COST` times the forward cost of the ops the program ran from the one that saved
/// the tensor up to the previous unpack's (0 if the previous unpack's reaches further back). An
/// unpack of a tensor saved after the previous one's range began starts a new backward pass.
pub(crate) fn op_costs(pass: &Pass, compute: &impl Fn(&Step) -> f64) -> Vec<f64> {
    let ops: Vec<&Step> = pass.ops().collect();
    let forward: Vec<f64> = ops.iter().map(|s| if matches!(s, Step::Op { work: Work::Program, .. }) { compute(s) } else { 0.0 }).collect();
    let mut costs = Vec::with_capacity(ops.len());
    // The backward pass under way: the op step where it began, and the lowest op it has reached.
    let mut backward: Option<(usize, usize)> = None;
    for (i, op) in ops.iter().enumerate() {
        costs.push(match op {
            Step::Op { work: Work::Backward { saved_at: Some(at) }, .. } => {
                let (began, reached) = match backward {
                    Some((began, reached)) if *at < began => (began, reached),
                    _ => (i, i),
                };
                let from = (*at).min(reached);
                backward = Some((began, from));
                BACKWARD_COST * forward[from..reached].iter().sum::<f64>()
            }
            Step::Op { work: Work::Backward { saved_at: None }, .. } => 0.0,
            op => compute(op),
        });
    }
    costs
}

/// A device's rates for the model: its link, bytes/s each way; its matrix products, FLOP/s; its
/// memory bandwidth for every other op, bytes/s; and the least time of a kernel (a launch), s.
/// cbindgen:ignore
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    pub link: f64,
    pub flops: f64,
    pub memory_bandwidth: f64,
    pub launch: f64,
}

impl Rates {
    /// An H100's: PCIe 5 from page-locked memory, f32 products without TF32, HBM3 (the measured
    /// figures and their sources: docs/performance.md, "The hardware the model and the docs
    /// assume"). The simulated device's rates, so that it makes the choices an H100 would.
    /// cbindgen:ignore
    pub const H100: Rates = Rates { link: 53.6e9, flops: 50e12, memory_bandwidth: 3e12, launch: 5e-6 };

    /// The compute time of `pass` at these rates with nothing moved or remade: the ops the
    /// program ran, and the backward they stand for.
    pub fn unmanaged_seconds(self, pass: &Pass, elem: usize) -> f64 {
        let costs = op_costs(pass, &self.kernels(elem));
        pass.ops().zip(&costs).filter(|(s, _)| !matches!(s, Step::Op { work: Work::Remake, .. })).map(|(_, c)| c).sum()
    }

    /// `roofline` at these rates for `elem`-byte elements, each kernel taking at least a launch
    /// (a step that runs none, a saved tensor's, takes nothing).
    pub fn kernels(self, elem: usize) -> impl Fn(&Step) -> f64 {
        let roofline = roofline(self.flops, self.memory_bandwidth, elem);
        move |step| match roofline(step) {
            0.0 => 0.0,
            t => t.max(self.launch),
        }
    }
}

/// A roofline cost for `replay`: a matrix product or an attention takes its FLOPs at `flops`
/// per second (`op_flops`), anything else reads its inputs and writes its output at
/// `memory_bandwidth` bytes per second.
pub fn roofline(flops: f64, memory_bandwidth: f64, elem: usize) -> impl Fn(&Step) -> f64 {
    move |op| {
        let Step::Op { name, input_bytes, shapes, output_bytes, .. } = op else { return 0.0 };
        op_seconds(name, shapes, input_bytes.iter().sum(), *output_bytes, flops, memory_bandwidth, elem)
    }
}

/// One op's time by `roofline`'s rule: `shapes`, its inputs' as it read them; `input_bytes`,
/// what it read; its result of `output_bytes` in `elem`-byte elements.
pub(crate) fn op_seconds(name: &str, shapes: &[Vec<i64>], input_bytes: u64, output_bytes: u64, flops: f64, memory_bandwidth: f64, elem: usize) -> f64 {
    match (name, op_flops(name, shapes, output_bytes / elem as u64)) {
        (SAVE, _) => 0.0,
        (_, Some(f)) => f / flops,
        _ => (input_bytes + output_bytes) as f64 / memory_bandwidth,
    }
}

/// The FLOPs of a matrix product or an attention, by the op table's names and by aten's (the
/// `tensorref` device's ops); None for any other op. A product makes each of its `results`
/// elements in 2 k FLOPs, k being the last dimension of its first matrix (the first input, or
/// the second where the first is the added one: `addmm`, `baddbmm`). An attention over queries
/// of shape (..., L, d) and keys of shape (..., S, d) takes 4 S FLOPs per element of its queries
/// (the scores, and their product with the values).
fn op_flops(name: &str, shapes: &[Vec<i64>], results: u64) -> Option<f64> {
    let dim = |input: usize, from_end: usize| shapes.get(input).and_then(|s| s.len().checked_sub(from_end).map(|i| s[i]));
    let product = |k: Option<i64>| k.map(|k| 2.0 * k as f64 * results as f64);
    match name.strip_prefix("aten::").unwrap_or(name) {
        "linear" | "matmul" | "bmm" | "mm" => product(dim(0, 1)),
        "addmm" | "baddbmm" | "addbmm" => product(dim(1, 1)),
        n if n.starts_with("scaled_dot_product") || n.starts_with("_scaled_dot_product") => {
            let queries: i64 = shapes.first()?.iter().product();
            Some(4.0 * dim(1, 2)? as f64 * queries as f64)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_and_attention_cost_their_flops_by_either_name() {
        let (a, b) = (vec![64, 128], vec![128, 32]);
        let mm = 2.0 * 128.0 * (64 * 32) as f64;
        assert_eq!(op_flops("matmul", &[a.clone(), b.clone()], 64 * 32), Some(mm));
        assert_eq!(op_flops("aten::mm", &[a.clone(), b.clone()], 64 * 32), Some(mm));
        assert_eq!(op_flops("aten::addmm", &[vec![32], a.clone(), b], 64 * 32), Some(mm));
        let (q, k) = (vec![2, 4, 16, 8], vec![2, 4, 24, 8]);
        assert_eq!(op_flops("aten::_scaled_dot_product_flash_attention_for_cpu", &[q.clone(), k.clone(), k], 2 * 4 * 16 * 8), Some(4.0 * 24.0 * (2 * 4 * 16 * 8) as f64));
        assert_eq!(op_flops("aten::add", &[q.clone(), q], 2 * 4 * 16 * 8), None);
    }
}
