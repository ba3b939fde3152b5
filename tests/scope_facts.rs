//! The numbered facts of docs/dispose-scopes.md, one test each, checked with the per-thread
//! statistics tuple (created_outside, disposed_outside, created_in, disposed_in, attached,
//! detached, live), starting from `Stats::reset()` with no scope open.

mod common;
use common::{small, tuple};
use tensorref::{with_scope, DType, Error, Result, Scope, Stats, Tensor};

fn fresh() {
    assert!(Scope::current().is_none(), "a scope is still open on this test thread");
    Stats::reset();
}

#[test]
fn fact_01_create_in_scope_and_attach_to_own_scope() -> Result<()> {
    fresh();
    let s = Scope::new();
    let t = small()?;
    assert_eq!(tuple(), (0, 0, 1, 0, 0, 0, 1));
    s.attach(&t)?;
    assert_eq!(tuple(), (0, 0, 1, 0, 0, 0, 1));
    Ok(())
}

#[test]
fn fact_02_detach_then_dispose_scope_keeps_handle_alive() -> Result<()> {
    fresh();
    let s = Scope::new();
    let t = small()?;
    t.detach_from_scope()?;
    assert_eq!(tuple(), (0, 0, 1, 0, 0, 1, 1));
    s.dispose();
    assert_eq!(tuple(), (0, 0, 1, 0, 0, 1, 1));
    assert!(t.is_valid());
    Ok(())
}

#[test]
fn fact_03_dispose_handle_in_scope_twice() -> Result<()> {
    fresh();
    let _s = Scope::new();
    let t = small()?;
    let id = t.id();
    t.dispose()?;
    assert_eq!(tuple(), (0, 0, 1, 1, 0, 0, 0));
    let again = Tensor::from_raw(id).dispose();
    assert!(matches!(again, Err(Error::StaleHandle { .. })), "{again:?}");
    assert_eq!(tuple(), (0, 0, 1, 1, 0, 0, 0));
    Ok(())
}

#[test]
fn fact_04_dispose_scope_disposes_handle() -> Result<()> {
    fresh();
    let s = Scope::new();
    let t = small()?;
    s.dispose();
    assert_eq!(tuple(), (0, 0, 1, 1, 0, 0, 0));
    assert!(!t.is_valid());
    drop(t); // stale: the drop does nothing
    assert_eq!(tuple(), (0, 0, 1, 1, 0, 0, 0));
    Ok(())
}

#[test]
fn fact_05_create_and_dispose_outside() -> Result<()> {
    fresh();
    let t = small()?;
    assert_eq!(tuple(), (1, 0, 0, 0, 0, 0, 1));
    t.dispose()?;
    assert_eq!(tuple(), (1, 1, 0, 0, 0, 0, 0));
    Ok(())
}

#[test]
fn fact_06_attach_then_dispose_handle_or_scope() -> Result<()> {
    for dispose_scope in [false, true] {
        fresh();
        let t = small()?;
        let s = Scope::new();
        s.attach(&t)?;
        assert_eq!(tuple(), (1, 0, 0, 0, 1, 0, 1));
        if dispose_scope {
            s.dispose();
        } else {
            t.dispose()?;
        }
        assert_eq!(tuple(), (1, 0, 0, 1, 1, 0, 0), "dispose_scope={dispose_scope}");
    }
    Ok(())
}

#[test]
fn fact_07_attach_detach_then_dispose_scope() -> Result<()> {
    fresh();
    let t = small()?;
    let s = Scope::new();
    s.attach(&t)?;
    s.detach(&t)?;
    assert_eq!(tuple(), (1, 0, 0, 0, 1, 1, 1));
    s.dispose();
    assert_eq!(tuple(), (1, 0, 0, 0, 1, 1, 1));
    assert!(t.is_valid());
    Ok(())
}

#[test]
fn fact_08_detach_unowned_changes_nothing() -> Result<()> {
    fresh();
    let t = small()?;
    let before = tuple();
    t.detach_from_scope()?;
    assert_eq!(tuple(), before);
    Ok(())
}

#[test]
fn fact_09_unrelated_scope_leaves_attachment() -> Result<()> {
    fresh();
    let t = small()?;
    let a = Scope::new();
    a.attach(&t)?;
    let before = tuple();
    Scope::new().dispose();
    assert_eq!(tuple(), before);
    assert!(a.contains(&t)?);
    assert_eq!(t.scope()?, Some(a.id()));
    Ok(())
}

#[test]
fn fact_10_four_handles_four_fates() -> Result<()> {
    fresh();
    let (detached, moved_out) = with_scope(|s| -> Result<_> {
        let kept = small()?;
        let detached = small()?;
        let moved_out = small()?;
        let by_hand = small()?;
        detached.detach_from_scope()?;
        moved_out.move_to_outer_scope()?; // no outer scope: becomes detached
        by_hand.dispose()?;
        assert!(s.contains(&kept)?);
        std::mem::forget(kept); // left to the scope, as a garbage-collected host would
        Ok((detached, moved_out))
    })?;
    let s = Stats::get();
    assert_eq!((s.live(), s.created_in_scope, s.disposed_in_scope, s.detached_from_scope), (2, 4, 2, 2));
    assert!(detached.is_valid() && moved_out.is_valid());
    Ok(())
}

#[test]
fn fact_11_temporaries_belong_to_the_scope() -> Result<()> {
    fresh();
    let x = Tensor::from_slice(&[1f32, 2., 3.], &[3])?;
    let temps = with_scope(|s| -> Result<_> {
        let a = &x * 2.0;
        let b = &a + 1.0;
        let c = b.exp()?.sum()?;
        for t in [&a, &b, &c] {
            assert!(s.contains(t)?);
        }
        assert!(!s.contains(&x)?);
        assert_eq!(s.len()?, 3); // exp's temporary was already released by Rust's drop
        Ok([a, b, c])
    })?;
    assert!(temps.iter().all(|t| !t.is_valid()));
    assert_eq!(x.to_vec::<f32>()?, [1., 2., 3.]);
    let s = Stats::get();
    assert_eq!((s.created_in_scope, s.disposed_in_scope), (4, 4));
    Ok(())
}

#[test]
fn fact_12_inner_scope_restores_live() -> Result<()> {
    fresh();
    with_scope(|_outer| -> Result<()> {
        let _a = small()?;
        let live_before = Stats::get().live();
        with_scope(|_inner| -> Result<()> {
            for _ in 0..5 {
                std::mem::forget(small()?);
            }
            Ok(())
        })?;
        assert_eq!(Stats::get().live(), live_before);
        std::mem::forget(_a);
        Ok(())
    })?;
    assert_eq!(Stats::get().live(), 0);
    Ok(())
}

#[test]
fn fact_13_training_loop_in_one_scope_leaves_nothing() -> Result<()> {
    fresh();
    with_scope(|_| -> Result<()> {
        tensorref::manual_seed(13);
        let x = Tensor::randn(&[32, 8], DType::F32)?;
        let y = Tensor::randn(&[32, 1], DType::F32)?;
        let params = [
            Tensor::randn(&[16, 8], DType::F32)?.mul_scalar(0.3)?,
            Tensor::zeros(&[16], DType::F32)?,
            Tensor::randn(&[1, 16], DType::F32)?.mul_scalar(0.3)?,
            Tensor::zeros(&[1], DType::F32)?,
        ];
        for p in &params {
            p.requires_grad_(true)?;
        }
        let [w1, b1, w2, b2] = &params;
        let mut losses = vec![];
        for _ in 0..10 {
            let loss = x.linear(w1, Some(b1))?.relu()?.linear(w2, Some(b2))?.mse_loss(&y)?;
            loss.backward()?;
            let g = w1.grad()?.expect("w1 has a gradient after backward");
            assert_eq!(g.shape()?, [16, 8]);
            Tensor::optim_sgd_step(&params.iter().collect::<Vec<_>>(), 0.05)?;
            for p in &params {
                p.zero_grad()?;
            }
            losses.push(loss.item()?);
            std::mem::forget((loss, g)); // left to the scope
        }
        assert!(losses[9] < losses[0], "loss did not fall: {losses:?}");
        std::mem::forget(params);
        Ok(())
    })?;
    assert_eq!(Stats::get().live(), 0);
    Ok(())
}

#[test]
fn fact_14_moves_between_scopes() -> Result<()> {
    fresh();
    let unowned = small()?;
    let first = Scope::new();
    let t = small()?;
    t.move_to_scope(unowned.scope()?)?; // the scope of a handle no scope owns: detach
    assert_eq!(t.scope()?, None);
    first.attach(&t)?;

    let deep = {
        let second = Scope::new();
        let deep = {
            let third = Scope::new();
            let deep = small()?;
            assert!(third.contains(&deep)?);
            deep.move_to_scope(Some(first.id()))?;
            deep
        };
        assert!(deep.is_valid(), "survives the third scope");
        drop(second);
        deep
    };
    assert!(deep.is_valid(), "survives the second scope");
    assert!(first.contains(&deep)?);
    first.dispose();
    assert!(!deep.is_valid(), "dies with the first scope");
    Ok(())
}

#[test]
fn moving_to_own_scope_is_a_no_op_and_into_a_disposed_scope_an_error() -> Result<()> {
    fresh();
    let s = Scope::new();
    let t = small()?;
    t.move_to_scope(Some(s.id()))?;
    assert!(s.contains(&t)?);
    assert_eq!(s.len()?, 1);

    let gone = Scope::new();
    let gone_id = gone.id();
    drop(gone);
    let err = t.move_to_scope(Some(gone_id)).unwrap_err();
    assert!(matches!(err, Error::ScopeDisposed(_)), "{err:?}");
    assert!(s.contains(&t)?, "a failed move changes nothing");
    Ok(())
}

#[test]
fn disposed_scope_rejects_mutation_and_ignores_second_dispose() -> Result<()> {
    fresh();
    let s = Scope::new();
    let t = small()?;
    s.dispose();
    s.dispose();
    assert!(s.is_disposed());
    let u = small()?; // no scope open now
    for r in [s.attach(&u), s.dispose_everything(), s.len().map(drop)] {
        assert!(matches!(r, Err(Error::ScopeDisposed(_))), "{r:?}");
    }
    assert!(!t.is_valid());
    Ok(())
}

#[test]
fn out_of_order_dispose_relinks_the_stack() -> Result<()> {
    fresh();
    let outer = Scope::new();
    let middle = Scope::new();
    let inner = Scope::new();
    middle.dispose(); // not the innermost
    assert_eq!(Scope::current(), Some(inner.id()), "the current scope does not change");
    let t = small()?;
    assert!(inner.contains(&t)?, "new handles go to the current scope");
    t.move_to_outer_scope()?;
    assert!(outer.contains(&t)?, "the nearest live outer scope");
    inner.dispose();
    assert_eq!(Scope::current(), Some(outer.id()));
    outer.dispose();
    assert_eq!(Scope::current(), None);
    Ok(())
}

#[test]
fn dispose_everything_but_keeps_owned_and_ignores_foreign() -> Result<()> {
    fresh();
    let foreign = small()?;
    let s = Scope::new();
    let ts: Vec<Tensor> = (0..6).map(|_| small()).collect::<Result<_>>()?;
    s.dispose_everything_but(&[&ts[1], &ts[4], &foreign])?;
    let alive: Vec<bool> = ts.iter().map(Tensor::is_valid).collect();
    assert_eq!(alive, [false, true, false, false, true, false]);
    assert_eq!(s.len()?, 2);
    assert!(s.contains(&ts[4])? && !s.contains(&foreign)?, "foreign handles are not adopted");
    let more = small()?;
    assert!(s.contains(&more)?, "the scope keeps capturing");
    s.dispose_everything()?;
    assert!(!s.is_disposed() && s.is_empty()?);
    assert!(!ts[1].is_valid() && !more.is_valid() && foreign.is_valid());
    Ok(())
}

#[test]
fn with_scope_disposes_on_panic() {
    fresh();
    let caught = std::panic::catch_unwind(|| {
        with_scope(|_| {
            std::mem::forget(small().unwrap());
            panic!("boom");
        })
    });
    assert!(caught.is_err());
    assert_eq!(Scope::current(), None);
    assert_eq!(Stats::get().live(), 0);
}

#[test]
fn retained_handle_outlives_its_scope_reference() -> Result<()> {
    fresh();
    let s = Scope::new();
    let t = small()?;
    let extra = t.retain()?;
    s.dispose(); // drops the scope's reference only
    assert!(extra.is_valid());
    assert_eq!(t.scope()?, None);
    drop(extra);
    assert!(!t.is_valid());
    assert_eq!(Stats::get().live(), 0);
    Ok(())
}
