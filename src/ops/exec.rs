//! How an op runs. `Op` looks up the inputs, lets the residency manager place them on the
//! compute device when one is configured, runs the body (once more after evicting, if the
//! device ran out of memory), and registers the result; `admitted` runs the whole of it again
//! while ops on other threads hold the room it needs. Without a manager it adds one atomic
//! load to the registry lookups. The generated functions in `generated/` are written against it,
//! the schema's through their runner (aten/run.rs).

use crate::error::{Error, Result};
use crate::ops::aten::Made;
use crate::ops::output_bytes::{meta_output_bytes, Words};
use crate::registry::{self, Entry, TensorId, TensorIds};
use crate::residency::{self, Recipe, Replay, Ticket};
use smallvec::SmallVec;
use std::cell::Cell;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ops::Deref;
use std::sync::Arc;

/// Runs one op (`attempt`: from `Op::begin` to its result). Under a manager, an op whose inputs
/// and result fit the budget by themselves but not beside what ops on other threads hold lets go
/// of everything it holds and runs again from the start once room is freed: admission is all or
/// nothing, and no op waits while holding room another waits for (residency::room). Without a
/// manager, or on one thread, it runs once.
#[inline(always)]
pub(crate) fn admitted<R>(attempt: impl FnMut() -> Result<R>) -> Result<R> {
    residency::with_room(attempt)
}

/// A replayed op's inputs, as many as it takes (see `Op::output_replayable`).
pub(crate) fn replay_args<'a, const N: usize>(inputs: &[Option<&'a tch::Tensor>]) -> Result<[Option<&'a tch::Tensor>; N]> {
    inputs.try_into().map_err(|_| Error::Device(format!("an op replayed with {} inputs, not {N}", inputs.len())))
}

/// A replayed op's required input.
pub(crate) fn given(input: Option<&tch::Tensor>) -> Result<&tch::Tensor> {
    input.ok_or_else(|| Error::Device("an op replayed without a required input".into()))
}

fn undefined() -> Error {
    Error::Torch("the op returned an undefined tensor".into())
}

/// Checks that lists an op runs over element by element have one length.
pub(crate) fn same_lengths(lists: &[(&str, &[TensorId])]) -> Result<()> {
    let (first, n) = (lists[0].0, lists[0].1.len());
    match lists.iter().find(|(_, l)| l.len() != n) {
        Some((name, l)) => Err(Error::InvalidArg(format!("{n} {first} but {} {name}", l.len()))),
        None => Ok(()),
    }
}

/// An op's input, used as a `&tch::Tensor`: the registered entry itself, or under a manager an
/// unregistered entry around the input's device copy. One pointer either way, so the unmanaged
/// path hands inputs around in registers. The input is usually the last to hold a device copy's
/// entry, whose allocation it leaves to the next op's (`registry::retire`).
pub(crate) struct Input(ManuallyDrop<Arc<Entry>>);

impl Input {
    /// A registered entry as an input, to be placed (`Op::place_each`).
    pub(crate) fn new(entry: Arc<Entry>) -> Input {
        Input(ManuallyDrop::new(entry))
    }

    fn entry(&self) -> &Arc<Entry> {
        &self.0
    }
}

impl Deref for Input {
    type Target = tch::Tensor;
    #[inline]
    fn deref(&self) -> &tch::Tensor {
        &self.0
    }
}

impl Drop for Input {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: taken once, here, and never used again.
        let entry = unsafe { ManuallyDrop::take(&mut self.0) };
        // A registered entry is held by its slot too: only a view of a device copy (or an
        // entry whose handle another thread released meanwhile) is let go of here for good.
        if Arc::strong_count(&entry) == 1 {
            registry::retire(entry);
        }
    }
}

/// A managed op's ticket, and the entries whose device copies it uses, kept alive until the
/// ticket is done with them (fields drop in order). When results keep recipes, `placed[i]` is
/// the input made for `originals[i]`.
struct Managed {
    ticket: Ticket,
    originals: SmallVec<[Arc<Entry>; 4]>,
    placed: SmallVec<[Arc<Entry>; 4]>,
}

impl Managed {
    /// The registered entry an input (as the body sees it) stands for.
    fn original(&self, input: &tch::Tensor) -> Option<Arc<Entry>> {
        let i = self.placed.iter().position(|p| {
            let placed: &tch::Tensor = p;
            std::ptr::eq(placed, input)
        })?;
        Some(self.originals[i].clone())
    }
}

/// Boxed, so that an unmanaged op moves one null pointer around.
pub(crate) struct Op {
    managed: Option<ManagedBox>,
}

/// A managed op's state in a box, which goes back to its thread when the op ends: the thread's
/// next managed op is made in it (`SPARE`).
struct ManagedBox(ManuallyDrop<Box<Managed>>);

thread_local! {
    /// The allocation of this thread's last managed op, for its next.
    static SPARE: Cell<Option<Box<MaybeUninit<Managed>>>> = const { Cell::new(None) };
}

impl ManagedBox {
    fn new(ticket: Ticket) -> ManagedBox {
        let managed = Managed { ticket, originals: SmallVec::new(), placed: SmallVec::new() };
        ManagedBox(ManuallyDrop::new(match SPARE.try_with(Cell::take).ok().flatten() {
            Some(mut spare) => {
                spare.write(managed);
                // SAFETY: written just above.
                unsafe { Box::from_raw(Box::into_raw(spare).cast::<Managed>()) }
            }
            None => Box::new(managed),
        }))
    }
}

impl Deref for ManagedBox {
    type Target = Managed;
    fn deref(&self) -> &Managed {
        &self.0
    }
}

impl std::ops::DerefMut for ManagedBox {
    fn deref_mut(&mut self) -> &mut Managed {
        &mut self.0
    }
}

impl Drop for ManagedBox {
    fn drop(&mut self) {
        // SAFETY: taken once, here. Once its value is dropped in place, the allocation is an
        // uninitialised `Managed`'s, which `ManagedBox::new` writes before use.
        let spare = unsafe {
            let managed = Box::into_raw(ManuallyDrop::take(&mut self.0));
            std::ptr::drop_in_place(managed);
            Box::from_raw(managed.cast::<MaybeUninit<Managed>>())
        };
        let _ = SPARE.try_with(|s| s.set(Some(spare)));
    }
}

impl Op {
    #[inline]
    pub(crate) fn begin(name: &'static str) -> Op {
        let ticket = if residency::active() { Ticket::begin(name) } else { None };
        Op { managed: ticket.map(ManagedBox::new) }
    }

    #[inline]
    fn place(&mut self, entry: Arc<Entry>, write: bool) -> Result<Input> {
        match &mut self.managed {
            None => Ok(Input::new(entry)),
            Some(m) => {
                let input = m.ticket.acquire(&entry, write)?;
                if m.ticket.recomputes() {
                    m.placed.push(input.clone());
                }
                m.originals.push(entry);
                Ok(Input::new(input))
            }
        }
    }

    #[inline(always)]
    pub(crate) fn get<const N: usize>(&mut self, ids: [TensorId; N]) -> Result<[Input; N]> {
        let entries = registry::get(ids)?;
        if self.managed.is_none() {
            return Ok(entries.map(Input::new));
        }
        self.place_all(entries)
    }

    /// Out of line, like `output_managed`: each op inlines only the unmanaged path.
    #[inline(never)]
    fn place_all<const N: usize>(&mut self, entries: [Arc<Entry>; N]) -> Result<[Input; N]> {
        if let Some(m) = &self.managed {
            m.ticket.fetch(entries.iter().map(|e| &**e));
        }
        let mut placed: [Option<Input>; N] = std::array::from_fn(|_| None);
        for (slot, e) in placed.iter_mut().zip(entries) {
            *slot = Some(self.place(e, false)?);
        }
        Ok(placed.map(|p| p.expect("each input placed above")))
    }

    /// Whether inputs are placed by a manager (`place_each`), so that they are not the entries
    /// the registry holds.
    #[inline]
    pub(crate) fn places(&self) -> bool {
        self.managed.is_some()
    }

    /// Places inputs the caller looked up itself (the runner of the ops generated from the
    /// schema, src/ops/aten/run.rs), `inputs[written]` the one the op writes.
    pub(crate) fn place_each(&mut self, inputs: &mut [Input], written: Option<usize>) -> Result<()> {
        if let Some(m) = &self.managed {
            m.ticket.fetch(inputs.iter().map(|i| &**i.entry()));
        }
        for (k, input) in inputs.iter_mut().enumerate() {
            *input = self.place(input.entry().clone(), written == Some(k))?;
        }
        Ok(())
    }

    /// Makes room for the outputs of the op's kernel before it runs, where the device's kernels
    /// allocate without asking the manager (CUDA; see `Ticket::reserve`): `bytes(op)` tells how
    /// many for the op named `op`, None where it cannot (they are then counted unreserved as they
    /// appear).
    pub(crate) fn reserve(&mut self, bytes: impl FnOnce(&'static str) -> Option<u64>) -> Result<()> {
        match self.managed.as_deref_mut() {
            Some(m) if m.ticket.reserves() => m.ticket.reserve(bytes(m.ticket.op()).unwrap_or(0)),
            _ => Ok(()),
        }
    }

    /// Whether the result of this op keeps a recipe (see `output_replayable`).
    #[inline]
    pub(crate) fn keeps_recipe(&self) -> bool {
        self.recomputing().is_some()
    }

    /// The managed op, where the manager keeps recipes.
    fn recomputing(&self) -> Option<&Managed> {
        self.managed.as_deref().filter(|m| m.ticket.recomputes())
    }

    /// The input an in-place op writes to (under a manager, its device copy becomes the newer
    /// one; without, the home copy is current: disabling the manager wrote every copy home).
    pub(crate) fn get_mut(&mut self, id: TensorId) -> Result<Input> {
        let [entry] = registry::get([id])?;
        self.place(entry, true)
    }

    /// An optional input; handle 0 means none.
    pub(crate) fn get_opt(&mut self, id: TensorId) -> Result<Option<Input>> {
        registry::get_opt(id)?.map(|e| self.place(e, false)).transpose()
    }

    pub(crate) fn get_many(&mut self, ids: &[TensorId]) -> Result<Vec<Input>> {
        registry::get_many(ids)?.into_iter().map(|e| self.place(e, false)).collect()
    }

    /// A list of inputs the op writes to (an optimizer step's parameters and moments).
    pub(crate) fn get_many_mut(&mut self, ids: &[TensorId]) -> Result<Vec<Input>> {
        registry::get_many(ids)?.into_iter().map(|e| self.place(e, true)).collect()
    }

    /// Runs `body` and registers the tensor it makes.
    #[inline]
    pub(crate) fn output<E: Into<Error>>(self, body: impl Fn() -> Result<tch::Tensor, E>) -> Result<TensorId> {
        if self.managed.is_none() {
            return Ok(registry::insert(body().map_err(Into::into)?));
        }
        self.output_managed(body)
    }

    #[inline(never)]
    fn output_managed<E: Into<Error>>(self, body: impl Fn() -> Result<tch::Tensor, E>) -> Result<TensorId> {
        self.output_opt(body)?.ok_or_else(undefined)
    }

    /// Like `output`, for ops that may make nothing (an undefined tensor).
    #[inline]
    pub(crate) fn output_opt<E: Into<Error>>(self, body: impl Fn() -> Result<tch::Tensor, E>) -> Result<Option<TensorId>> {
        if self.managed.is_none() {
            let t = body().map_err(Into::into)?;
            return Ok(t.defined().then(|| registry::insert(t)));
        }
        self.run_managed(|| body().map_err(Into::into), || None)
    }

    /// Like `output`, for an op whose result depends on nothing but its tensor inputs (`inputs`,
    /// None for an absent optional one) and its other arguments (`values`): `run` computes it.
    /// Where the device's kernels allocate without asking the manager (CUDA), room for the
    /// result is reserved first, its bytes found by `run` over meta copies of the inputs
    /// (ops::output_bytes). Then as `output_with_recipe`.
    #[inline]
    pub(crate) fn output_replayable(
        mut self,
        inputs: &[Option<&tch::Tensor>],
        values: &[&dyn Words],
        run: impl Fn(&[Option<&tch::Tensor>]) -> Result<tch::Tensor>,
        keep: impl FnOnce() -> Replay,
    ) -> Result<TensorId> {
        self.reserve(|op| meta_output_bytes(op, values, inputs, &run))?;
        self.output_with_recipe(inputs, run, keep)
    }

    /// `output_replayable` for an op that reserved room for its result itself (the schema's
    /// runner, from the overload's meta kernel). Under a manager that recomputes, the result
    /// keeps its recipe (the inputs' entries and the replay function `keep` makes, holding the
    /// arguments): it may then be dropped when evicted and made again when needed (see
    /// residency::recompute).
    #[inline]
    pub(crate) fn output_with_recipe(
        self,
        inputs: &[Option<&tch::Tensor>],
        run: impl Fn(&[Option<&tch::Tensor>]) -> Result<tch::Tensor>,
        keep: impl FnOnce() -> Replay,
    ) -> Result<TensorId> {
        if self.managed.is_none() {
            return Ok(registry::insert(run(inputs)?));
        }
        let Some(originals) = self.originals(inputs) else { return self.output_managed(|| run(inputs)) };
        let replay = keep();
        let recipe = || Some(Recipe::new(originals.clone(), replay.clone()));
        self.run_managed(|| run(inputs), recipe)?.ok_or_else(undefined)
    }

    /// Reserves room, where the device's kernels allocate without asking (CUDA), for the result
    /// `run` makes over the op's list of inputs `tensors` and its other arguments `values`
    /// (its bytes found over meta copies of them, ops::output_bytes), before the op runs its
    /// body through `output`.
    pub(crate) fn reserve_list(&mut self, tensors: &[&tch::Tensor], values: &[&dyn Words], run: impl FnOnce(&[&tch::Tensor]) -> Result<tch::Tensor>) -> Result<()> {
        self.reserve(|op| {
            let inputs: SmallVec<[Option<&tch::Tensor>; 8]> = tensors.iter().map(|&t| Some(t)).collect();
            meta_output_bytes(op, values, &inputs, |metas| run(&metas.iter().flatten().copied().collect::<Vec<_>>()))
        })
    }

    /// Like `output_replayable`, for a random op: `draw(keep)` returns its result and, with `keep`
    /// (the manager keeps recipes), where it can, a replay function that draws the same numbers
    /// again (holding a snapshot of the generator it drew from), which becomes the result's recipe.
    pub(crate) fn output_drawn<const N: usize>(
        self,
        inputs: [Option<&tch::Tensor>; N],
        draw: impl Fn(bool) -> Result<(tch::Tensor, Option<Replay>)>,
    ) -> Result<TensorId> {
        if self.managed.is_none() {
            return Ok(registry::insert(draw(false)?.0));
        }
        let Some(originals) = self.originals(&inputs) else { return self.output_managed(|| draw(false).map(|(t, _)| t)) };
        let replay = std::cell::RefCell::new(None);
        let run = || draw(true).map(|(t, r)| {
            *replay.borrow_mut() = r;
            t
        });
        let recipe = || replay.borrow().clone().map(|r| Recipe::new(originals.clone(), r));
        self.run_managed(run, recipe)?.ok_or_else(undefined)
    }

    /// The registered entry of each present input, where the manager keeps recipes.
    fn originals(&self, inputs: &[Option<&tch::Tensor>]) -> Option<Vec<Option<Arc<Entry>>>> {
        let m = self.recomputing()?;
        inputs.iter().map(|i| match i {
            None => Some(None),
            Some(t) => m.original(t).map(Some),
        }).collect()
    }

    /// Runs `body` under the manager and places its result (with the recipe `recipe` gives);
    /// once more after evicting, if the device ran out of memory.
    #[inline(never)]
    fn run_managed(mut self, body: impl Fn() -> Result<tch::Tensor>, recipe: impl Fn() -> Option<Recipe>) -> Result<Option<TensorId>> {
        let Managed { ticket, .. } = self.managed.as_deref_mut().expect("a managed op");
        let mut retried = false;
        loop {
            let placed = ticket.kernel(&body).and_then(|t| match t.defined() {
                true => ticket.finish(t, recipe()).map(Some),
                false => ticket.end().map(|()| None),
            });
            match placed {
                Err(Error::OutOfMemory(_)) if !retried && ticket.evict_unused() > 0 => retried = true,
                other => return other.map(|e| e.map(|e| registry::insert_entry(registry::share(e)))),
            }
        }
    }

    /// Runs `body` for an op that makes several tensors (a tuple or a list) and registers each;
    /// an undefined one (libtorch's "no such output") gets the handle 0. Under a manager each
    /// result is placed as `finish` places one, with a trace key of its own; none keeps a recipe.
    pub(crate) fn outputs<E: Into<Error>>(mut self, body: impl Fn() -> Result<Made, E>) -> Result<TensorIds> {
        let Some(Managed { ticket, .. }) = self.managed.as_deref_mut() else {
            return Ok(registry::insert_all(body().map_err(Into::into)?));
        };
        let mut retried = false;
        loop {
            let results = ticket.kernel(|| body().map_err(Into::into));
            let placed = results.and_then(|all| {
                let defined: Vec<tch::Tensor> = all.iter().filter(|t| t.defined()).map(|t| t.shallow_clone()).collect();
                let entries = ticket.finish_many(&defined, None)?;
                for (entry, result) in entries.iter().zip(&defined) {
                    if result.requires_grad() {
                        crate::residency::autograd::connect_grad(entry, result)?;
                    }
                }
                let mut entries = entries.into_iter();
                Ok(all.iter().map(|t| match t.defined() {
                    true => registry::insert_entry(registry::share(entries.next().expect("one entry per defined result"))),
                    false => TensorId(0),
                }).collect())
            });
            match placed {
                Err(Error::OutOfMemory(_)) if !retried && ticket.evict_unused() > 0 => retried = true,
                other => return other,
            }
        }
    }

    /// Runs `body` for an op that makes no tensor (in-place ops, backward, optimizer steps).
    pub(crate) fn value<R, E: Into<Error>>(mut self, body: impl Fn() -> Result<R, E>) -> Result<R> {
        let Some(Managed { ticket, .. }) = self.managed.as_deref_mut() else { return body().map_err(Into::into) };
        let run = || ticket.kernel(|| body().map_err(Into::into));
        let value = match run() {
            Err(Error::OutOfMemory(_)) if ticket.evict_unused() > 0 => run(),
            other => other,
        }?;
        ticket.end()?;
        Ok(value)
    }
}
