//! The runner of the ops generated from libtorch's schema. A generated core function names its
//! op (`Schema`) and lists its arguments in the schema's order as `Arg`s, its tensors as handles
//! (`Arg::handle` ...), and calls the function here for its kind of result. The runner looks the
//! handles up under one registry lock, has the op executor place them when a manager is
//! configured, calls the kernel, and registers what it made. None of it is generic over the op,
//! so a thousand ops share one copy of the executor's managed path.

use super::{call, call_one, dtype_of, Arg, Collected, Kernel, Made, Tag};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::exec::{admitted, Input, Op};
use crate::registry::{self, Entry, TensorId, TensorIds};
use crate::residency::{self, Replay};
use smallvec::SmallVec;
use std::any::Any;
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::sync::Arc;

/// A generated op, as the runner needs it.
#[derive(Clone, Copy)]
pub(crate) struct Schema {
    /// The op's name in the table: its tickets' and trace keys' name.
    name: &'static str,
    /// The schema's overload (`div.Tensor_mode`), which errors name.
    overload: &'static str,
    kernel: Kernel,
}

impl Schema {
    pub(crate) const fn new(name: &'static str, overload: &'static str, kernel: Kernel) -> Schema {
        Schema { name, overload, kernel }
    }

    fn call(&self, args: &[Arg]) -> Result<Collected> {
        Ok(call(self.kernel, self.overload, args)?)
    }

    /// The `n` tensors the kernel returned, or (`n` None) its list.
    fn many(&self, n: Option<usize>, args: &[Arg]) -> Result<Made> {
        let tensors = self.call(args)?.tensors;
        match n {
            Some(n) if tensors.len() != n => {
                Err(Error::Torch(format!("{}: {} results where the schema says {n}", self.overload, tensors.len())))
            }
            _ => Ok(tensors),
        }
    }

    /// The kernel's value: a number it returned, or 0.
    fn value(&self, args: &[Arg]) -> Result<i64> {
        Ok(self.call(args)?.i)
    }

    /// The one tensor the kernel returned.
    fn one(&self, args: &[Arg]) -> Result<tch::Tensor> {
        call_one(self.kernel, self.overload, args)?.ok_or_else(|| Error::Torch(format!("{}: no result", self.overload)))
    }
}

/// An op that returns a new tensor.
pub(crate) fn tensor(op: &Schema, args: &[Arg]) -> Result<TensorId> {
    run(op, args, |a| Ok(registry::insert(op.one(a)?)), |o, bound| o.output(|| op.one(&bound.args)))
}

/// Like `tensor`, for an op whose result depends on nothing but its arguments: under a manager
/// that recomputes, the result keeps them (`keep`) as its recipe.
pub(crate) fn replayable(op: &Schema, args: &[Arg]) -> Result<TensorId> {
    run(op, args, |a| Ok(registry::insert(op.one(a)?)), |o, bound| {
        if !o.keeps_recipe() {
            return o.output(|| op.one(&bound.args));
        }
        let inputs = bound.inputs_in_order(args);
        o.output_with_recipe(&inputs, |_| op.one(&bound.args), || keep(op, args))
    })
}

/// An op that returns a tuple of `n` tensors or (`n` None) a list; an undefined one gets the
/// handle 0.
pub(crate) fn tensors(op: &Schema, n: Option<usize>, args: &[Arg]) -> Result<TensorIds> {
    run(
        op,
        args,
        |a| Ok(registry::insert_all(op.many(n, a)?)),
        |o, bound| o.outputs(|| op.many(n, &bound.args)),
    )
}

/// An op that writes its first argument (`Arg::handle_mut`), or returns a number (a bool, an
/// integer, an element type's code) or nothing: its value.
pub(crate) fn value(op: &Schema, args: &[Arg]) -> Result<i64> {
    run(op, args, |a| op.value(a), |o, bound| o.value(|| op.value(&bound.args)))
}

/// An op that returns an element type.
pub(crate) fn dtype(op: &Schema, args: &[Arg]) -> Result<DType> {
    Ok(dtype_of(op.overload, value(op, args)?)?)
}

/// Runs `op` on `args`. While no manager is configured, `unmanaged` runs it on the arguments
/// with each handle replaced by its entry's tensor (bound on the stack where the op allows,
/// `Direct`): nothing is placed and no room is asked for, on a path of its own that stays small,
/// as most programs run every op on it. Otherwise `managed` runs it with the op's executor and
/// its arguments as the executor placed them, after room for its outputs is reserved where the
/// device's kernels allocate without asking (CUDA).
fn run<R>(
    op: &Schema,
    args: &[Arg],
    unmanaged: impl FnOnce(&[Arg]) -> Result<R>,
    managed: impl Fn(Op, &Bound) -> Result<R>,
) -> Result<R> {
    if !residency::active() {
        let mut direct = Direct::new();
        if direct.look_up(args)? {
            return unmanaged(direct.args());
        }
        let mut bound = Bound::default();
        bound.look_up(args)?;
        return unmanaged(&bound.args);
    }
    admitted(|| {
        let mut o = Op::begin(op.name);
        let mut bound = Bound::default();
        bound.bind(&mut o, args)?;
        o.reserve(|_| super::output_bytes(op.overload, &bound.args))?;
        managed(o, &bound)
    })
}

/// The most arguments an op binds on the stack (`Direct`).
const DIRECT: usize = 8;

/// An unmanaged op's arguments as its kernel takes them, bound on the stack: the given ones with
/// each handle replaced by its entry's tensor (the first `len` of `args`), and those entries (the
/// first `holds` of `held`), kept alive until the kernel has run. Every op without a list of
/// tensors and with at most `DIRECT` arguments binds this way, most ops; `Bound` takes the rest.
/// Nothing is initialised ahead: an op pays only for the arguments it has.
struct Direct<'a> {
    args: [MaybeUninit<Arg<'a>>; DIRECT],
    len: usize,
    held: [MaybeUninit<Arc<Entry>>; DIRECT],
    holds: usize,
}

impl<'a> Direct<'a> {
    fn new() -> Direct<'a> {
        Direct { args: [const { MaybeUninit::uninit() }; DIRECT], len: 0, held: [const { MaybeUninit::uninit() }; DIRECT], holds: 0 }
    }

    /// Binds `given` under one registry lock; false for an op `Direct` does not take. A list of
    /// handles is found only when reached, so an op with one takes the lock twice (here, then in
    /// `Bound`): a scan ahead would cost every other op more (20 instructions of `add.Tensor`).
    #[inline(always)]
    fn look_up(&mut self, given: &[Arg<'a>]) -> Result<bool> {
        if given.len() > DIRECT {
            return Ok(false);
        }
        let registry = registry::lock();
        for a in given {
            let bound = bind_one(a, &registry, |entry| {
                let entry = self.held[self.holds].write(entry);
                self.holds += 1;
                entry.as_ptr().cast()
            })?;
            let Some(arg) = bound else { return Ok(false) };
            self.args[self.len].write(arg);
            self.len += 1;
        }
        Ok(true)
    }

    fn args(&self) -> &[Arg<'a>] {
        // SAFETY: `look_up` wrote the first `len` arguments.
        unsafe { std::slice::from_raw_parts(self.args.as_ptr().cast::<Arg<'a>>(), self.len) }
    }
}

impl Drop for Direct<'_> {
    fn drop(&mut self) {
        for entry in &mut self.held[..self.holds] {
            // SAFETY: `look_up` wrote the first `holds` entries, and nothing else drops them.
            unsafe { entry.assume_init_drop() };
        }
    }
}

/// An op's arguments as its kernel takes them: each handle replaced with its input. `args`
/// points into `inputs` (each an entry's tensor, which stays where it is while the entry lives)
/// and `lists`, so a `Bound` is kept whole until the kernel has run.
struct Bound<'a> {
    args: SmallVec<[Arg<'a>; 8]>,
    inputs: SmallVec<[Input; 4]>,
    lists: Vec<Vec<*const c_void>>,
}

impl<'a> Bound<'a> {
    fn default() -> Bound<'a> {
        Bound { args: SmallVec::new(), inputs: SmallVec::new(), lists: Vec::new() }
    }

    /// Looks up the handles of `given` and makes the kernel's arguments: `given` with each
    /// handle replaced by its input. Filled where it lies (each op pays for it, and it is a few
    /// hundred bytes).
    #[inline(always)]
    fn bind(&mut self, op: &mut Op, given: &[Arg<'a>]) -> Result<()> {
        let written = self.look_up(given)?;
        if op.places() {
            op.place_each(&mut self.inputs, written)?;
            self.repoint();
        }
        Ok(())
    }

    /// Looks up the handles of `given` under one registry lock and makes the kernel's
    /// arguments, each handle replaced by its entry's tensor; the input the op writes, if any.
    #[inline(always)]
    fn look_up(&mut self, given: &[Arg<'a>]) -> Result<Option<usize>> {
        let mut written = None;
        let registry = registry::lock();
        for a in given {
            if matches!(a.tag, Tag::HandleMut) {
                written = Some(self.inputs.len());
            }
            let arg = match bind_one(a, &registry, |entry| self.input(entry))? {
                Some(arg) => arg,
                None => {
                    let optional = matches!(a.tag, Tag::OptHandles);
                    let list = handles(a).iter().map(|&id| match optional && id.0 == 0 {
                        true => Ok(std::ptr::null()),
                        false => Ok(self.input(registry.entry(id)?)),
                    }).collect::<Result<Vec<*const c_void>>>()?;
                    let tensors = Arg::new(Tag::Tensors, 0, 0.0, list.as_ptr().cast(), list.len());
                    self.lists.push(list);
                    tensors
                }
            };
            self.args.push(arg);
        }
        Ok(written)
    }

    /// Holds `entry` as the next input; a pointer to its tensor.
    fn input(&mut self, entry: Arc<Entry>) -> *const c_void {
        let input = Input::new(entry);
        let p = input.as_ptr().cast();
        self.inputs.push(input);
        p
    }

    /// Points the tensor arguments at the inputs again, in order, once the manager has placed them.
    fn repoint(&mut self) {
        let mut inputs = self.inputs.iter().map(|t| -> *const c_void { t.as_ptr().cast() });
        let mut lists = self.lists.iter_mut();
        for arg in self.args.iter_mut() {
            match arg.tag {
                Tag::Tensor => arg.p = inputs.next().expect("an input per tensor argument"),
                Tag::Tensors => {
                    let list = lists.next().expect("a list per list argument");
                    for p in list.iter_mut().filter(|p| !p.is_null()) {
                        *p = inputs.next().expect("an input per tensor of a list");
                    }
                }
                _ => {}
            }
        }
    }

    /// The tensor inputs of an op with no lists, in the order of its arguments (None for an
    /// absent optional one), as a recipe names them.
    fn inputs_in_order(&self, given: &[Arg]) -> SmallVec<[Option<&tch::Tensor>; 4]> {
        let mut next = self.inputs.iter();
        given.iter().filter_map(|a| match a.tag {
            Tag::Handle | Tag::HandleMut => Some(next.next().map(|t| &**t)),
            Tag::OptHandle => Some(if a.i == 0 { None } else { next.next().map(|t| &**t) }),
            _ => None,
        }).collect()
    }
}

/// `a` as its kernel takes it: a handle replaced by its entry's tensor, the entry given to
/// `hold`, which keeps it alive while the kernel runs and returns where its tensor is; an absent
/// optional handle as none; any other argument as it is. None for a list of handles, which each
/// binder lays out its own way.
#[inline(always)]
fn bind_one<'a>(a: &Arg<'a>, registry: &registry::State, hold: impl FnOnce(Arc<Entry>) -> *const c_void) -> Result<Option<Arg<'a>>> {
    Ok(Some(match a.tag {
        Tag::OptHandle if a.i == 0 => Arg::none(),
        // The tensor stays where it is while its entry is held.
        Tag::Handle | Tag::HandleMut | Tag::OptHandle => {
            Arg::new(Tag::Tensor, 0, 0.0, hold(registry.entry(TensorId(a.i as u64))?), 0)
        }
        Tag::Handles | Tag::OptHandles => return Ok(None),
        _ => *a,
    }))
}

/// The handles of a `Handles` or `OptHandles` argument.
fn handles<'a>(a: &Arg<'a>) -> &'a [TensorId] {
    // SAFETY: `Arg::handles` made it from a `&'a [TensorId]`.
    unsafe { std::slice::from_raw_parts(a.p.cast::<TensorId>(), a.len) }
}

/// A replayable op's arguments, owned, as its recipe's replay: each handle stands for the input
/// the replay is given in its place.
struct Kept {
    op: Schema,
    args: Vec<Arg<'static>>,
    /// What the lists and strings of `args` point into.
    _holds: Vec<Box<dyn Any + Send + Sync>>,
}

// SAFETY: the pointers of `args` point into `_holds`, which `Kept` owns and never changes, or
// are null; the handles it holds are numbers.
unsafe impl Send for Kept {}
unsafe impl Sync for Kept {}

/// `args` kept for `op`'s recipe (see `Kept`).
fn keep(op: &Schema, args: &[Arg]) -> Replay {
    fn own<T: Clone + Send + Sync + 'static>(a: &mut Arg<'static>, holds: &mut Vec<Box<dyn Any + Send + Sync>>) {
        // SAFETY: an argument of a list tag points to `len` values of its type, for the call.
        let owned: Box<[T]> = unsafe { std::slice::from_raw_parts(a.p.cast::<T>(), a.len) }.into();
        a.p = owned.as_ptr().cast();
        holds.push(Box::new(owned));
    }
    let mut kept = Kept { op: *op, args: Vec::with_capacity(args.len()), _holds: Vec::new() };
    for a in args {
        let mut a = Arg::new(a.tag, a.i, a.f, a.p, a.len);
        match a.tag {
            Tag::Ints => own::<i64>(&mut a, &mut kept._holds),
            Tag::Floats => own::<f64>(&mut a, &mut kept._holds),
            Tag::Str => own::<u8>(&mut a, &mut kept._holds),
            _ => {}
        }
        kept.args.push(a);
    }
    Arc::new(move |inputs: &[Option<&tch::Tensor>]| kept.replay(inputs))
}

impl Kept {
    fn replay(&self, inputs: &[Option<&tch::Tensor>]) -> Result<tch::Tensor> {
        let mut next = inputs.iter().copied();
        let missing = || Error::Device(format!("{} replayed without its inputs", self.op.name));
        let args = self.args.iter().map(|a| Ok(match a.tag {
            Tag::Handle | Tag::HandleMut => Arg::tensor(next.next().flatten().ok_or_else(missing)?),
            Tag::OptHandle => next.next().ok_or_else(missing)?.map_or(Arg::none(), Arg::tensor),
            _ => *a,
        })).collect::<Result<SmallVec<[Arg; 8]>>>()?;
        if next.next().is_some() {
            return Err(Error::Device(format!("{} replayed with {} inputs, more than it takes", self.op.name, inputs.len())));
        }
        self.op.one(&args)
    }
}
