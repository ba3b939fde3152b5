//! The per-op overhead sample, shared by the `ratios` (time) and `instructions` (callgrind)
//! benches: the table's hand-written `add`, and ops generated from libtorch's schema, one of
//! each kind of argument and result (a scalar, an optional float and tensor, a string, an
//! optional int list and dtype, a tuple of results). Each op comes as three variants, raw tch,
//! TensorRef through Rust and TensorRef through the C ABI, each one call and the release of
//! what it made. `sample` checks every variant's whole output against raw tch's once, before
//! anything is timed or counted; a timed C call that does not return TR_OK is counted in
//! `failed`.

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use tensorref::ffi::*;
use tensorref::{DType, Scalar, Status, Tensor};

/// Timed C calls that did not return TR_OK (the benches then fail).
pub static FAILED: AtomicUsize = AtomicUsize::new(0);

pub fn failed() -> usize {
    FAILED.load(Ordering::Relaxed)
}

fn ok(status: Status) {
    if status != Status::TR_OK {
        FAILED.fetch_add(1, Ordering::Relaxed);
    }
}

/// One op: its name and its variants (raw tch, Rust, C ABI).
pub struct Op {
    pub name: &'static str,
    pub variants: [Box<dyn FnMut()>; 3],
}

pub const VARIANTS: [&str; 3] = ["raw tch", "Rust", "C ABI"];

/// A C ABI variant of an op with one result: `call` writes it into its argument, which is then
/// released.
fn c_one(call: impl Fn(*mut TrTensor) -> Status + 'static) -> Box<dyn FnMut()> {
    Box::new(move || {
        let mut out = TrTensor { id: 0 };
        ok(call(&mut out));
        tr_tensor_release(black_box(out));
    })
}

/// A result through the C ABI, as a Tensor that releases it.
fn adopt(out: TrTensor) -> Tensor {
    Tensor::from_raw(out.into())
}

/// Checks that each of `ours` (one op's result through each variant) equals raw tch's, whole.
fn check(name: &str, raw: &tch::Tensor, ours: &[Tensor]) {
    for o in ours {
        let o = o.with_tch(|t| t.shallow_clone()).unwrap();
        assert_eq!(raw.size(), o.size(), "{name}: shape");
        assert!(raw.equal(&o), "{name}: values differ from raw tch");
    }
}

/// An input as raw tch, as a TensorRef and as the C handle of that TensorRef.
struct Input {
    raw: tch::Tensor,
    ours: Tensor,
    c: TrTensor,
}

impl Input {
    fn new(raw: tch::Tensor) -> Input {
        let ours = Tensor::from_tch(raw.shallow_clone());
        let c = TrTensor::from(ours.id());
        Input { raw, ours, c }
    }

    /// What a closure owns of it: raw tch's tensor, a TensorRef handle of its own, the C handle.
    fn parts(&self) -> (tch::Tensor, Tensor, TrTensor) {
        (self.raw.shallow_clone(), self.ours.retain().unwrap(), self.c)
    }
}

/// The sample, its outputs checked. The inputs stay alive as long as the closures (each owns a
/// handle of its own; the C handle is the shared TensorRef's, kept by `keep`).
pub fn sample(keep: &mut Vec<Tensor>) -> Vec<Op> {
    let cpu = tch::kind::FLOAT_CPU;
    let (a, b) = (Input::new(tch::Tensor::ones([4], cpu)), Input::new(tch::Tensor::rand([4], cpu)));
    let (x, w) = (Input::new(tch::Tensor::rand([2, 8], cpu)), Input::new(tch::Tensor::rand([8], cpu)));
    // alpha 1, libtorch's default: raw tch's `add` has no alpha.
    let one = TrScalar { kind: ScalarKind::Int as TrScalarKind, i: 1, f: 0.0, b: false };
    let eps = 1e-5;
    let floor = c"floor";
    let f64_code: TrDtype = DType::F64 as TrDtype;

    // The same calls as the timed ones, once, their outputs compared.
    let mut out = TrTensor { id: 0 };
    assert_eq!(tr_tensor_add(a.c, b.c, &mut out), Status::TR_OK);
    check("add", &a.raw.f_add(&b.raw).unwrap(), &[a.ours.add(&b.ours).unwrap(), adopt(out)]);
    assert_eq!(tr_tensor_add_tensor(a.c, b.c, one, &mut out), Status::TR_OK);
    check("add.Tensor", &a.raw.f_add(&b.raw).unwrap(), &[a.ours.add_tensor(&b.ours, 1).unwrap(), adopt(out)]);
    assert_eq!(tr_tensor_rms_norm(x.c, [8i64].as_ptr(), 1, w.c, &eps, &mut out), Status::TR_OK);
    let ours = x.ours.rms_norm(&[8], Some(&w.ours), Some(eps)).unwrap();
    check("rms_norm", &x.raw.rms_norm([8], Some(&w.raw), eps), &[ours, adopt(out)]);
    assert_eq!(tr_tensor_div_tensor_mode(a.c, b.c, floor.as_ptr(), &mut out), Status::TR_OK);
    let ours = a.ours.div_tensor_mode(&b.ours, Some("floor")).unwrap();
    check("div.Tensor_mode", &a.raw.divide_tensor_mode(&b.raw, "floor"), &[ours, adopt(out)]);
    assert_eq!(tr_tensor_sum_dim_intlist(x.c, [1i64].as_ptr(), 1, false, &f64_code, &mut out), Status::TR_OK);
    let sum = x.raw.sum_dim_intlist([1i64].as_slice(), false, tch::Kind::Double);
    let ours = x.ours.sum_dim_intlist(Some(&[1]), false, Some(DType::F64)).unwrap();
    check("sum.dim_IntList", &sum, &[ours, adopt(out)]);
    let mut pair = [TrTensor { id: 0 }; 2];
    let mut written = 0;
    assert_eq!(tr_tensor_topk(x.c, 3, -1, true, true, pair.as_mut_ptr(), 2, &mut written), Status::TR_OK);
    let (values, indices) = x.raw.topk(3, -1, true, true);
    let mut ours = x.ours.topk(3, -1, true, true).unwrap().into_iter();
    let (our_values, our_indices) = (ours.next().unwrap(), ours.next().unwrap());
    check("topk values", &values, &[our_values, adopt(pair[0])]);
    check("topk indices", &indices, &[our_indices, adopt(pair[1])]);

    let ((ta, a2, ca), (tb, b2, cb)) = (a.parts(), b.parts());
    let ((tx, x2, cx), (tw, w2, cw)) = (x.parts(), w.parts());
    let ops = vec![
        Op {
            name: "add [4] (ops.def)",
            variants: [
                {
                    let (ta, tb) = (ta.shallow_clone(), tb.shallow_clone());
                    Box::new(move || drop(black_box(ta.f_add(&tb).unwrap())))
                },
                {
                    let (a, b) = (a2.retain().unwrap(), b2.retain().unwrap());
                    Box::new(move || drop(black_box(a.add(&b).unwrap())))
                },
                c_one(move |out| tr_tensor_add(ca, cb, out)),
            ],
        },
        Op {
            name: "add.Tensor [4], alpha 1",
            variants: [
                {
                    let (ta, tb) = (ta.shallow_clone(), tb.shallow_clone());
                    Box::new(move || drop(black_box(ta.f_add(&tb).unwrap())))
                },
                {
                    let (a, b) = (a2.retain().unwrap(), b2.retain().unwrap());
                    Box::new(move || drop(black_box(a.add_tensor(&b, Scalar::Int(1)).unwrap())))
                },
                c_one(move |out| tr_tensor_add_tensor(ca, cb, one, out)),
            ],
        },
        Op {
            name: "rms_norm [2, 8], weight, eps",
            variants: [
                {
                    let (x, w) = (tx.shallow_clone(), tw.shallow_clone());
                    Box::new(move || drop(black_box(x.f_rms_norm([8], Some(&w), eps).unwrap())))
                },
                {
                    let (x, w) = (x2.retain().unwrap(), w2.retain().unwrap());
                    Box::new(move || drop(black_box(x.rms_norm(&[8], Some(&w), Some(eps)).unwrap())))
                },
                c_one(move |out| tr_tensor_rms_norm(cx, [8i64].as_ptr(), 1, cw, &eps, out)),
            ],
        },
        Op {
            name: "div.Tensor_mode [4], \"floor\"",
            variants: [
                {
                    let (ta, tb) = (ta.shallow_clone(), tb.shallow_clone());
                    Box::new(move || drop(black_box(ta.f_divide_tensor_mode(&tb, "floor").unwrap())))
                },
                {
                    let (a, b) = (a2.retain().unwrap(), b2.retain().unwrap());
                    Box::new(move || drop(black_box(a.div_tensor_mode(&b, Some("floor")).unwrap())))
                },
                c_one(move |out| tr_tensor_div_tensor_mode(ca, cb, floor.as_ptr(), out)),
            ],
        },
        Op {
            name: "sum.dim_IntList [2, 8], f64",
            variants: [
                {
                    let x = tx.shallow_clone();
                    Box::new(move || {
                        drop(black_box(x.f_sum_dim_intlist([1i64].as_slice(), false, tch::Kind::Double).unwrap()))
                    })
                },
                {
                    let x = x2.retain().unwrap();
                    Box::new(move || drop(black_box(x.sum_dim_intlist(Some(&[1]), false, Some(DType::F64)).unwrap())))
                },
                c_one(move |out| tr_tensor_sum_dim_intlist(cx, [1i64].as_ptr(), 1, false, &f64_code, out)),
            ],
        },
        Op {
            name: "topk [2, 8], k 3 (two results)",
            variants: [
                Box::new(move || drop(black_box(tx.f_topk(3, -1, true, true).unwrap()))),
                Box::new(move || drop(black_box(x2.topk(3, -1, true, true).unwrap()))),
                Box::new(move || {
                    let mut pair = [TrTensor { id: 0 }; 2];
                    let mut written = 0;
                    ok(tr_tensor_topk(cx, 3, -1, true, true, pair.as_mut_ptr(), 2, &mut written));
                    tr_tensor_release(black_box(pair[0]));
                    tr_tensor_release(black_box(pair[1]));
                }),
            ],
        },
    ];
    keep.extend([a.ours, b.ours, x.ours, w.ours, a2, b2, w2]);
    ops
}
