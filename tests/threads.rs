//! Eight threads, each with its own scopes, share handles through the one registry: 10,000 ops
//! each, handles retained on one thread and released on another, no deadlock, and the process's
//! live handle count back to its start at the end. (Its own test binary: it checks the global count.)

use std::sync::{mpsc, Mutex};
use tensorref::{live_handles, with_scope, DType, Error, Result, Tensor, TensorId};

/// The tests of this binary check the process-wide count: they take turns.
static SERIAL: Mutex<()> = Mutex::new(());

const THREADS: usize = 8;
const OPS: usize = 10_000;

#[test]
fn eight_threads_share_handles_without_leaks() -> Result<()> {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let start = live_handles();
    let shared: Vec<Tensor> = (0..16).map(|i| Tensor::full(&[4], i as f64, DType::F32)).collect::<Result<_>>()?;
    let ids: Vec<TensorId> = shared.iter().map(Tensor::id).collect();
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::channel::<Tensor>()).unzip();

    std::thread::scope(|s| {
        for (i, inbox) in receivers.into_iter().enumerate() {
            let next = senders[(i + 1) % THREADS].clone();
            let ids = &ids;
            s.spawn(move || -> Result<()> {
                let local = Tensor::ones(&[4], DType::F32)?;
                for block in 0..OPS / 100 {
                    with_scope(|scope| -> Result<()> {
                        let shared = std::mem::ManuallyDrop::new(Tensor::from_raw(ids[(i + block) % ids.len()]));
                        let mut acc = shared.add(&local)?;
                        for _ in 1..100 {
                            acc = acc.add(&local)?;
                        }
                        assert!(scope.contains(&acc)?);
                        // Hand a new reference of a shared handle to the next thread to release.
                        next.send(shared.retain()?).unwrap();
                        let expected = (ids.iter().position(|&x| x == shared.id()).unwrap() + 100) as f32;
                        assert_eq!(acc.to_vec::<f32>()?, [expected; 4]);
                        Ok(())
                    })?;
                    while let Ok(t) = inbox.try_recv() {
                        drop(t); // released on a different thread than it was retained on
                    }
                }
                drop(next);
                for t in inbox {
                    drop(t); // until the previous thread has finished sending
                }
                Ok(())
            });
        }
        drop(senders);
    });
    drop(shared);
    assert_eq!(live_handles(), start);
    Ok(())
}

/// A handle released while an op on another thread uses it turns stale at once; the running op
/// finishes on the entry it holds, which is freed when the op lets go of it. Both kinds of op
/// body hold it: the runner of the ops generated from the schema (`matmul`) and the table's own
/// bodies (`add`).
#[test]
fn release_during_an_op_on_another_thread() -> Result<()> {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let start = live_handles();
    let ops: [fn(&Tensor) -> Result<Tensor>; 2] = [|t| t.matmul(t), |t| t.add(t)];
    for round in 0..40 {
        let op = ops[round % 2];
        let t = Tensor::randn(&[256, 256], DType::F32)?;
        let id = t.into_raw();
        let worker = std::thread::spawn(move || -> Result<usize> {
            let t = std::mem::ManuallyDrop::new(Tensor::from_raw(id));
            let mut done = 0;
            loop {
                match op(&t) {
                    Ok(product) => {
                        assert_eq!(product.shape()?, [256, 256]);
                        done += 1;
                    }
                    Err(Error::StaleHandle { .. }) => return Ok(done),
                    Err(e) => return Err(e),
                }
            }
        });
        std::thread::sleep(std::time::Duration::from_micros(200 * (round as u64 / 2 % 5)));
        Tensor::from_raw(id).dispose()?;
        worker.join().unwrap()?;
        assert_eq!(live_handles(), start, "round {round}: the entry was freed once the op gave it back");
    }
    Ok(())
}
