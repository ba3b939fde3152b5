//! Ops through TensorRef give the same values as the same tch calls, per group of the table;
//! in-place ops register nothing; autograd and the optimizer steps behave like PyTorch's.

mod common;
use common::leak_free;
use tensorref::{no_grad, DType, Scope, Stats, Tensor};

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn tch_vals(t: &tch::Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()
}

fn pair(data: &[f32], shape: &[i64]) -> (Tensor, tch::Tensor) {
    (Tensor::from_slice(data, shape).unwrap(), tch::Tensor::from_slice(data).reshape(shape))
}

#[test]
fn elementwise_reductions_and_shapes_match_tch() {
    leak_free(|| {
        let (a, ta) = pair(&[0.5, -1.0, 2.0, 3.0, -0.25, 1.5], &[2, 3]);
        let (b, tb) = pair(&[1.0, 2.0, 3.0], &[3]);
        let cases: Vec<(Tensor, tch::Tensor)> = vec![
            (a.add(&b)?, &ta + &tb),
            (a.div(&b)?, &ta / &tb),
            (a.pow_scalar(2.0)?, ta.pow_tensor_scalar(2.0)),
            (a.gelu()?, ta.gelu("none")),
            (a.silu()?, ta.silu()),
            (a.clamp(-0.5, 1.0)?, ta.clamp(-0.5, 1.0)),
            (a.sum_dim(&[1], true)?, ta.sum_dim_intlist([1i64].as_slice(), true, None)),
            (a.mean_dim(&[0], false)?, ta.mean_dim([0i64].as_slice(), false, None)),
            (a.max_dim(1, false)?, ta.max_dim(1, false).0),
            (a.softmax(1)?, ta.softmax(1, None)),
            (a.log_softmax(0)?, ta.log_softmax(0, None)),
            (a.matmul(&a.transpose(0, 1)?)?, ta.matmul(&ta.tr())),
            (a.permute(&[1, 0])?.contiguous()?, ta.permute([1, 0]).contiguous()),
            (a.reshape(&[3, -1])?, ta.reshape([3, -1])),
            (a.narrow(1, 1, 2)?, ta.narrow(1, 1, 2)),
            (Tensor::cat(&[&a, &a], 0)?, tch::Tensor::cat(&[&ta, &ta], 0)),
            (Tensor::stack(&[&b, &b], 1)?, tch::Tensor::stack(&[&tb, &tb], 1)),
            (a.where_self(&a.gt(&a.zeros_like()?)?, &a.neg()?)?, ta.where_self(&ta.gt(0.0), &-&ta)),
        ];
        for (i, (ours, theirs)) in cases.iter().enumerate() {
            assert_eq!(ours.shape()?, theirs.size(), "case {i}");
            assert_eq!(vals(ours), tch_vals(theirs), "case {i}");
        }
        assert_eq!(a.argmax(1, false)?.to_vec::<i64>()?, [2, 0]);
        Ok(())
    });
}

#[test]
fn creation_is_seeded_and_typed() {
    leak_free(|| {
        tensorref::manual_seed(7);
        let r1 = vals(&Tensor::randn(&[5], DType::F32)?);
        tensorref::manual_seed(7);
        let r2 = vals(&Tensor::randn(&[5], DType::F32)?);
        assert_eq!(r1, r2);
        assert_eq!(Tensor::arange(0.0, 5.0, 2.0, DType::I64)?.to_vec::<i64>()?, [0, 2, 4]);
        assert_eq!(vals(&Tensor::eye(2, DType::F32)?), [1.0, 0.0, 0.0, 1.0]);
        assert_eq!(Tensor::full(&[2], 3.5, DType::F64)?.to_vec::<f64>()?, [3.5, 3.5]);
        for d in DType::ALL {
            assert_eq!(Tensor::ones(&[3], d)?.to_dtype(DType::F32)?.to_vec::<f32>()?, [1.0; 3], "{d:?}");
        }
        Ok(())
    });
}

#[test]
fn nn_ops_match_tch() {
    leak_free(|| {
        tch::manual_seed(3);
        let tx = tch::Tensor::randn([2, 3, 6, 6], (tch::Kind::Float, tch::Device::Cpu));
        let tw = tch::Tensor::randn([4, 3, 3, 3], (tch::Kind::Float, tch::Device::Cpu));
        let x = Tensor::from_tch(tx.shallow_clone());
        let w = Tensor::from_tch(tw.shallow_clone());
        let y = x.conv2d(&w, None, &[1, 1], &[1, 1], &[1, 1], 1)?.max_pool2d(&[2, 2], &[2, 2], &[0, 0], &[1, 1], false)?;
        let ty = tx.conv2d::<&tch::Tensor>(&tw, None, [1, 1], [1, 1], [1, 1], 1).max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false);
        assert_eq!(vals(&y), tch_vals(&ty));

        let table = Tensor::randn(&[10, 4], DType::F32)?;
        let idx = Tensor::from_slice(&[3i64, 0, 3], &[3])?;
        let rows = table.embedding(&idx)?;
        assert_eq!(vals(&rows.narrow(0, 0, 1)?), vals(&rows.narrow(0, 2, 1)?));
        let ln = table.layer_norm(&[4], None, None, 1e-5)?;
        let mean = ln.mean_dim(&[1], false)?.to_vec::<f32>()?;
        assert!(mean.iter().all(|m| m.abs() < 1e-5), "{mean:?}");
        let logits = Tensor::from_slice(&[2.0f32, 0.0, 0.0, 2.0], &[2, 2])?;
        let targets = Tensor::from_slice(&[0i64, 1], &[2])?;
        let ce = logits.cross_entropy(&targets)?.item()?;
        assert!((ce - (1.0 + (-2.0f64).exp()).ln()).abs() < 1e-6, "{ce}");
        assert_eq!(table.dropout(0.5, false)?.to_vec::<f32>()?, table.to_vec::<f32>()?);
        Ok(())
    });
}

#[test]
fn scalar_operands_promote_like_python_floats() {
    leak_free(|| {
        // PyTorch: int or bool tensor with a float scalar gives the default dtype (f32); a float
        // scalar never widens a floating tensor.
        for (dtype, expected) in [(DType::I64, DType::F32), (DType::Bool, DType::F32), (DType::F16, DType::F16), (DType::F64, DType::F64)] {
            let t = Tensor::ones(&[2], dtype)?;
            for result in [t.mul_scalar(0.5)?, t.add_scalar(1.0)?, t.div_scalar(2.0)?, t.pow_scalar(2.0)?] {
                assert_eq!(result.dtype()?, expected, "{dtype:?}");
            }
        }
        assert_eq!(Tensor::ones(&[2], DType::I64)?.mul_scalar(0.5)?.to_vec::<f32>()?, [0.5, 0.5]);
        Ok(())
    });
}

#[test]
fn in_place_ops_register_nothing_new() {
    leak_free(|| {
        let a = Tensor::ones(&[3], DType::F32)?;
        let b = Tensor::full(&[3], 2.0, DType::F32)?;
        let created = Stats::get().created_outside_scope;
        let same = a.add_(&b)?.mul_scalar_(2.0)?;
        assert_eq!(same.id(), a.id());
        assert_eq!(Stats::get().created_outside_scope, created);
        assert_eq!(vals(&a), [6.0; 3]);
        a.zero_()?;
        assert_eq!(vals(&a), [0.0; 3]);
        Ok(())
    });
}

#[test]
fn autograd_grad_is_a_new_handle_and_no_grad_stops_tracking() {
    leak_free(|| {
        let scope = Scope::new();
        let w = Tensor::from_slice(&[1.0f32, 2.0], &[2])?;
        w.requires_grad_(true)?;
        assert!(w.requires_grad()?);
        assert!(w.grad()?.is_none(), "no gradient before backward");
        w.mul(&w)?.sum()?.backward()?;
        let g = w.grad()?.unwrap();
        assert!(scope.contains(&g)?, "grad is registered like any new handle");
        assert_eq!(vals(&g), [2.0, 4.0]);
        w.zero_grad()?;
        assert_eq!(vals(&w.grad()?.unwrap()), [0.0, 0.0]);
        let untracked = no_grad(|| w.mul_scalar(3.0))?;
        assert!(!untracked.requires_grad()?);
        Ok(())
    });
}

#[test]
fn adam_step_matches_torch_formula() {
    leak_free(|| {
        let p = Tensor::from_slice(&[1.0f32, -1.0], &[2])?;
        p.requires_grad_(true)?;
        let (m, v) = (p.zeros_like()?, p.zeros_like()?);
        p.mul(&p)?.sum()?.backward()?; // grad = 2p = [2, -2]
        Tensor::optim_adam_step(&[&p], &[&m], &[&v], 1, 0.1, 0.9, 0.999, 1e-8, 0.0)?;
        // First Adam step moves each parameter by lr * sign(grad).
        let got = vals(&p);
        assert!((got[0] - 0.9).abs() < 1e-5 && (got[1] + 0.9).abs() < 1e-5, "{got:?}");
        let err = Tensor::optim_adam_step(&[&p], &[], &[&v], 1, 0.1, 0.9, 0.999, 1e-8, 0.0).unwrap_err();
        assert!(err.to_string().contains("1 params but 0 exp_avg"), "{err}");
        Ok(())
    });
}
