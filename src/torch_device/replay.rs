//! Recipes for what the `tensorref` device's ops make (recomputation; what a recipe is:
//! `residency::training::recipe`). The C++ half (replay.cpp) keeps how to run an op again, for
//! an op whose outputs depend on its inputs alone; here each output gets a recipe over the op's
//! inputs that runs it again and takes that output.

use crate::error::{Error, Result};
use crate::registry::Entry;
use crate::residency::Recipe;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

/// Field for field `RecipeIn` in device.h: the replay (owned from here on) and the op's inputs,
/// each a home and a tensor of the device with the input's geometry.
#[repr(C)]
pub(super) struct RecipeIn {
    replay: *mut c_void,
    homes: *const *const Entry,
    likes: *const *const c_void,
    n: usize,
}

extern "C" {
    fn tr_native_torch_device_replay(replay: *const c_void, output: usize, inputs: *const *const c_void, n: usize, out: *mut *mut c_void, err: *mut c_char, len: usize) -> c_int;
    fn tr_native_torch_device_replay_drop(replay: *mut c_void);
}

/// An op that can run again (C++'s `Replay`), freed with its last recipe.
struct OpReplay(*mut c_void);

// SAFETY: a `Replay` is never changed once made; running it copies its arguments.
unsafe impl Send for OpReplay {}
unsafe impl Sync for OpReplay {}

impl OpReplay {
    /// Runs the op again over `views` (its inputs' device copies) and returns its `output`-th
    /// output.
    fn output(&self, output: usize, views: &[Option<&tch::Tensor>]) -> Result<tch::Tensor> {
        let inputs: Vec<*const c_void> = views.iter().map(|v| v.map_or(std::ptr::null(), |t| t.as_ptr().cast())).collect();
        // SAFETY: the replay is live while `self` is; every view is live for the call.
        crate::shim::make("making a result again", |out, err, len| unsafe {
            tr_native_torch_device_replay(self.0, output, inputs.as_ptr(), inputs.len(), out, err, len)
        })
        .map_err(Error::from)
    }
}

impl Drop for OpReplay {
    fn drop(&mut self) {
        // SAFETY: the replay came from C++'s `replay_of`, and is dropped once.
        unsafe { tr_native_torch_device_replay_drop(self.0) }
    }
}

/// Takes the replay `recipe` holds (NULL: none) and, when `wanted`, gives each of an op's
/// `outputs` results a recipe that makes it again from the op's inputs.
///
/// # Safety
/// `recipe` is NULL or the C++ half's live `RecipeIn`, whose replay it hands over.
pub(super) unsafe fn recipes(recipe: *const RecipeIn, outputs: usize, wanted: bool) -> Result<Option<Vec<Recipe>>> {
    // SAFETY: the caller's contract.
    let Some(r) = (unsafe { recipe.as_ref() }) else { return Ok(None) };
    let replay = Arc::new(OpReplay(r.replay));
    if !wanted {
        return Ok(None);
    }
    let mut inputs = Vec::with_capacity(r.n);
    for i in 0..r.n {
        // SAFETY: `n` homes and likes, live for the call.
        let (home, like) = unsafe { (&**r.homes.add(i), std::mem::ManuallyDrop::new(tch::Tensor::from_ptr(*r.likes.add(i) as *mut _))) };
        inputs.push(Some(Arc::new(Entry::new(crate::residency::torch_storage::view_on(home, &like)?))));
    }
    let recipe = |output: usize| {
        let replay = Arc::clone(&replay);
        Recipe::new(inputs.clone(), Arc::new(move |views: &[Option<&tch::Tensor>]| replay.output(output, views)))
    };
    Ok(Some((0..outputs).map(recipe).collect()))
}
