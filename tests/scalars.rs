//! Typed scalars: an integer scalar keeps an integer tensor integer and is exact to 64 bits, a
//! float promotes as a Python float does in PyTorch (checked against tch's own `Scalar` ops),
//! `full` refuses values its dtype cannot hold, `item_scalar` is exact, the reflected ops are
//! true operations, and an empty list is an argument error.

mod common;
use common::leak_free;
use tensorref::{DType, Error, Scalar, Tensor};

#[test]
fn scalars_promote_as_python_numbers_do_in_pytorch() {
    leak_free(|| {
        let ints = Tensor::from_slice(&[0i64, 1], &[2])?;
        let int32 = Tensor::from_slice(&[0i32, 1], &[2])?;
        let halves = Tensor::from_slice(&[1.0f32, 2.0], &[2])?.to_dtype(DType::F16)?;
        let flags = Tensor::from_slice(&[0u8, 1], &[2])?.to_dtype(DType::Bool)?;
        let cases = [
            (ints.add_scalar(1)?, DType::I64),
            (int32.add_scalar(1)?, DType::I32),
            (ints.add_scalar(0.5)?, DType::F32),
            (ints.div_scalar(2)?, DType::F32),
            (ints.rdiv_scalar(2)?, DType::F32),
            (halves.mul_scalar(2.0)?, DType::F16),
            (halves.mul_scalar(2)?, DType::F16),
            (flags.add_scalar(1)?, DType::I64),
            (flags.add_scalar(true)?, DType::Bool),
            (ints.pow_scalar(2)?, DType::I64),
            (ints.rpow_scalar(2)?, DType::I64),
            (ints.floor_divide_scalar(2)?, DType::I64),
            (ints.gt_scalar(0.5)?, DType::Bool),
        ];
        for (i, (t, want)) in cases.iter().enumerate() {
            assert_eq!(t.dtype()?, *want, "case {i}");
        }
        // The same dtypes as tch's own Scalar ops (libtorch's wrapped numbers).
        let t = tch::Tensor::from_slice(&[0i64, 1]);
        assert_eq!((&t + 1).kind(), tch::Kind::Int64);
        assert_eq!((&t + 0.5).kind(), tch::Kind::Float);
        Ok(())
    });
}

#[test]
fn integer_scalars_are_exact_to_64_bits() {
    leak_free(|| {
        let big = Tensor::from_slice(&[1i64 << 60], &[1])?;
        assert_eq!(big.add_scalar(1)?.to_vec::<i64>()?, [(1i64 << 60) + 1]);
        let full = Tensor::full(&[2], (1i64 << 62) + 1, DType::I64)?;
        assert_eq!(full.to_vec::<i64>()?, [(1i64 << 62) + 1; 2]);
        let odd = Tensor::from_slice(&[(1i64 << 53) + 1], &[1])?;
        assert_eq!(odd.item_scalar()?, Scalar::Int((1 << 53) + 1));
        assert_eq!(odd.item()?, 9007199254740992.0); // the double rounds
        assert_eq!(Tensor::from_slice(&[2.5f32], &[])?.item_scalar()?, Scalar::Float(2.5));
        Ok(())
    });
}

#[test]
fn full_refuses_values_its_dtype_cannot_hold() {
    leak_free(|| {
        for (value, dtype) in [(Scalar::Float(f64::INFINITY), DType::I64), (Scalar::Float(f64::NAN), DType::I32),
                               (Scalar::Int(256), DType::U8), (Scalar::Float(1e19), DType::I64)] {
            match Tensor::full(&[1], value, dtype) {
                Err(Error::InvalidArg(m)) => assert!(m.contains("does not fit"), "{m}"),
                other => panic!("full({value}, {dtype:?}) gave {other:?}"),
            }
        }
        assert_eq!(Tensor::full(&[1], 2.9, DType::I64)?.to_vec::<i64>()?, [2]); // truncated, as libtorch
        assert_eq!(Tensor::full(&[1], f64::INFINITY, DType::F32)?.to_vec::<f32>()?, [f32::INFINITY]);
        Ok(())
    });
}

#[test]
fn reflected_ops_are_true_operations() {
    leak_free(|| {
        let data: Vec<f32> = (1..=1000).map(|i| i as f32 * 0.37 + 0.01).collect();
        let a = Tensor::from_slice(&data, &[1000])?;
        // s / a as PyTorch computes it, a^-1 * s (1 ulp off the correctly rounded quotient for
        // some of these): the same results as without the library.
        let exact: Vec<f32> = data.iter().map(|x| 3.0 / x).collect();
        let reciprocal: Vec<f32> = data.iter().map(|x| (1.0 / x) * 3.0).collect();
        assert_eq!(a.rdiv_scalar(3.0)?.to_vec::<f32>()?, reciprocal);
        assert!(reciprocal != exact, "the inputs no longer tell the two apart");
        let minus: Vec<f32> = data.iter().map(|x| 1.5 - x).collect();
        assert_eq!(a.rsub_scalar(1.5)?.to_vec::<f32>()?, minus);
        let ints = Tensor::from_slice(&[-7i64, 7], &[2])?;
        assert_eq!(ints.floor_divide_scalar(2)?.to_vec::<i64>()?, [-4, 3]);
        assert_eq!(ints.remainder_scalar(3)?.to_vec::<i64>()?, [2, 1]); // Python's sign
        assert_eq!(ints.rremainder_scalar(10)?.to_vec::<i64>()?, [-4, 3]);
        Ok(())
    });
}

#[test]
fn an_empty_list_is_an_argument_error() {
    leak_free(|| {
        for r in [Tensor::cat(&[], 0), Tensor::stack(&[], 0)] {
            assert!(matches!(r, Err(Error::InvalidArg(ref m)) if m.contains("at least one tensor")), "{r:?}");
        }
        Ok(())
    });
}
