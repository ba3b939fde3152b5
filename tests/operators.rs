//! `Tensor`'s operators (generated from the operator attributes of ops.def) as users write them:
//! each gives the op's values, scalars on either side keep PyTorch's dtypes, compound assignments
//! write in place (seen through another handle to the same storage), and a failing operator panics
//! with the op's error.

mod common;
use common::leak_free;
use tensorref::{DType, Tensor};

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

#[test]
fn binary_operators_give_the_ops_values() {
    leak_free(|| {
        let a = Tensor::from_slice(&[7.0f32, -7.0, 5.5, 2.0], &[4])?;
        let b = Tensor::from_slice(&[2.0f32, 2.0, -2.0, 4.0], &[4])?;
        assert_eq!(vals(&(&a + &b)), [9.0, -5.0, 3.5, 6.0]);
        assert_eq!(vals(&(&a - &b)), [5.0, -9.0, 7.5, -2.0]);
        assert_eq!(vals(&(&a * &b)), [14.0, -14.0, -11.0, 8.0]);
        assert_eq!(vals(&(&a / &b)), [3.5, -3.5, -2.75, 0.5]);
        // % takes the sign of the divisor, as Python's (and PyTorch's remainder)
        assert_eq!(vals(&(&a % &b)), [1.0, 1.0, -0.5, 2.0]);
        assert_eq!(vals(&-&a), [-7.0, 7.0, -5.5, -2.0]);
        // an expression of temporaries
        assert_eq!(vals(&(&(&a + &b) * 2.0)), [18.0, -10.0, 7.0, 12.0]);
        Ok(())
    });
}

#[test]
fn scalars_go_on_either_side_and_keep_pytorchs_dtypes() {
    leak_free(|| {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 4.0], &[3])?;
        assert_eq!(vals(&(2.0 * &x)), [2.0, 4.0, 8.0]);
        assert_eq!(vals(&(1.0 - &x)), [0.0, -1.0, -3.0]);
        assert_eq!(vals(&(4.0 / &x)), [4.0, 2.0, 1.0]);
        assert_eq!(vals(&(5.0 % &x)), [0.0, 1.0, 1.0]);
        assert_eq!(vals(&(&x + 1.0)), [2.0, 3.0, 5.0]);
        assert_eq!(vals(&(3 + &x)), [4.0, 5.0, 7.0]);

        let ints = Tensor::from_slice(&[7i64, -7, 9], &[3])?;
        let kept = &ints + 1;
        assert_eq!(kept.dtype()?, DType::I64);
        assert_eq!(kept.to_vec::<i64>()?, [8, -6, 10]);
        assert_eq!((&ints % 4).to_vec::<i64>()?, [3, 1, 1]);
        assert_eq!((2 * &ints).dtype()?, DType::I64);
        assert_eq!((&ints + 0.5).dtype()?, DType::F32);
        assert_eq!((&ints / 2).dtype()?, DType::F32, "/ is a true division");
        Ok(())
    });
}

#[test]
fn compound_assignments_write_in_place_through_every_handle() {
    leak_free(|| {
        let mut w = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3])?;
        let other = w.alias()?; // another handle, same storage
        let before = tensorref::Stats::get().live();
        let g = Tensor::from_slice(&[0.5f32, 0.5, 0.5], &[3])?;
        w -= &g;
        assert_eq!(vals(&other), [0.5, 1.5, 2.5], "the storage itself changed");
        w *= 2.0;
        w += 1;
        assert_eq!(vals(&other), [2.0, 4.0, 6.0]);
        w /= &Tensor::from_slice(&[2.0f32, 2.0, 2.0], &[3])?;
        w %= 2.0;
        assert_eq!(vals(&w), [1.0, 0.0, 1.0]);
        assert_eq!(vals(&other), vals(&w));
        drop(g);
        assert_eq!(tensorref::Stats::get().live(), before, "in place: no new handle");

        let mut ints = Tensor::from_slice(&[7i64, 8], &[2])?;
        ints += 1;
        ints %= 3;
        assert_eq!(ints.dtype()?, DType::I64);
        assert_eq!(ints.to_vec::<i64>()?, [2, 0]);
        Ok(())
    });
}

#[test]
fn a_failing_operator_panics_with_the_ops_error() {
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let b = Tensor::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    let msg = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| &a + &b)).unwrap_err();
    let msg = msg.downcast_ref::<String>().unwrap();
    assert!(msg.starts_with("add: "), "{msg}");
    let mut ints = Tensor::from_slice(&[1i64, 2], &[2]).unwrap();
    let msg = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ints /= 2.0)).unwrap_err();
    assert!(msg.downcast_ref::<String>().unwrap().starts_with("div_scalar_: "));
}
