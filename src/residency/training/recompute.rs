//! Recomputation (DTR, Kirisame et al. 2021; the choice per tensor as DELTA makes it). An op's
//! result may keep its recipe: the op's replay function and views of its inputs. Evicting such a
//! result can then drop it instead of writing it back, and the manager makes it again from its
//! inputs when it is next used (or read, exported, or kept past the manager). With
//! `Recompute::Cheaper` a result is dropped when remaking it (its op, plus its dropped inputs'
//! ops, plus loading its evicted inputs that the recorded order does not read next to it: DTR's
//! evicted neighbourhood) costs less than the write-back and the reload its eviction would take,
//! copies weighed by how loaded the link was in the last iteration (`LinkLoad`: recompute more
//! where the link is the bottleneck, reload where compute is); with `Recompute::Always`, whenever
//! it has a recipe. Costs are estimated from the op's shapes at the device's rates
//! (`remake_estimate_ns`, `Config::rates`): on the simulated device an H100's, so the choice made
//! there is the one an H100 would make. What a recipe is: `recipe`.
//!
//! What keeps a recipe sound:
//! - Only ops whose result depends on nothing but their inputs have replay functions, never an
//!   in-place one; a random one (tools/optable.py, `RANDOM`) draws again from a snapshot of the
//!   generator it drew from (src/ops/random.rs), so it too depends on nothing else.
//! - A result keeps a recipe only if its inputs and itself fit the budget together, so that a
//!   drain, made in the order results were made, can always make it again.
//! - A recipe holds views of its inputs' storages, so they live while it does. Once nothing but
//!   recipes holds a storage that has a recipe itself, it is dropped from the device at once, as
//!   its last view's death would have freed it. Chains are cut: a result whose inputs' recipes are
//!   `MAX_CHAIN` deep gets none, so no remake runs more than `MAX_CHAIN` ops and a long-lived
//!   result keeps at most that many ancestors.
//! - A storage about to be written drops its recipe, and its dependents' recipes are dropped too,
//!   once each dependent that was dropped has been made again from the old data (`before_write`).
//!   Memory shared with the outside is treated the same way. Each input's version is checked at
//!   every remake anyway: a write the manager did not see is an error, never a wrong value.

use crate::residency::device::Device;
use crate::residency::device::memory::{Mode, Scope};
use crate::residency::device::faults::Fault;
use crate::residency::core::manager::Manager;
use crate::residency::core::report::EventKind;
use crate::residency::training::costs::op_seconds;
use crate::residency::core::storage::Home;
use crate::error::{Error, Result};
use crate::residency::torch_storage::StorageRef;
use crate::registry::Entry;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;
use crate::residency::training::recipe::{Recipe, Recompute, Replay, MAX_CHAIN};

/// An input the recorded order reads again within this many ops of a result's next use is
/// brought back for that read anyway, so making the result again costs no load of it (in
/// backward, an op's input is read right after its result).
const SHARED_WITHIN: u64 = 8;

impl Manager {
    /// Gives a new result of `op` its recipe, unless an input is memory the outside may write or
    /// the chain would be too deep. The recipe holds views of its own of the inputs' storages
    /// (`recipe_holds`), not the program's tensors.
    pub(in crate::residency) fn keep_recipe(&mut self, id: u64, op: &'static str, mut recipe: Recipe) -> Result<()> {
        recipe.op = op;
        let mut depth = 0;
        for entry in recipe.inputs.iter().flatten() {
            let input = self.storage_of(entry)?;
            let s = &self.storages[&input];
            if matches!(s.kind, Home::External { .. }) {
                return Ok(());
            }
            depth = depth.max(s.recipe.as_ref().map_or(0, |r| r.depth));
            recipe.storages.push((input, s.home.version()));
        }
        recipe.depth = depth + 1;
        recipe.working_set = self.working_set(id, &recipe);
        if recipe.depth > MAX_CHAIN || !self.fits_beside_pins(&recipe) {
            return Ok(());
        }
        recipe.cost_ns = self.remake_estimate_ns(id, &recipe);
        let mut views = Vec::with_capacity(recipe.storages.len());
        for (entry, &(input, _)) in recipe.inputs.iter().flatten().zip(&recipe.storages) {
            views.push(Entry::new(self.storages[&input].home.view(entry)?));
        }
        let mut held = recipe.storages.iter().map(|&(input, _)| input).zip(views);
        for slot in recipe.inputs.iter_mut().filter(|i| i.is_some()) {
            let (input, view) = held.next().expect("one view per present input");
            self.attach(&view, input);
            self.storages.get_mut(&input).expect("known").recipe_holds += 1;
            self.dependents.entry(input).or_default().push(id);
            *slot = Some(Arc::new(view));
        }
        self.storages.get_mut(&id).expect("just added").recipe = Some(Arc::new(recipe));
        Ok(())
    }

    /// The bytes on the device while `recipe` makes `id` again from inputs already made: its
    /// inputs' storages, each once, and what its kernel allocates (`kernel_bytes`). A result is
    /// dropped only if this fits the budget beside the pins (`fits_beside_pins`), so that a read,
    /// and a drain, can always make it again (`Manager::drain`).
    fn working_set(&self, id: u64, recipe: &Recipe) -> u64 {
        let mut inputs: Vec<u64> = recipe.storages.iter().map(|&(input, _)| input).collect();
        inputs.sort_unstable();
        inputs.dedup();
        inputs.iter().map(|input| self.storages[input].bytes).sum::<u64>() + self.kernel_bytes(id, recipe)
    }

    /// What `recipe`'s kernel allocates to make `id`: its result, and the scratch the simulated
    /// device's allocator saw it take the first time.
    fn kernel_bytes(&self, id: u64, recipe: &Recipe) -> u64 {
        self.storages[&id].bytes.max(recipe.kernel_bytes)
    }

    /// Whether `recipe` can run beside the pinned storages (its pinned inputs counted once).
    /// Asked of every eviction candidate: it allocates nothing.
    fn fits_beside_pins(&self, recipe: &Recipe) -> bool {
        let inputs = &recipe.storages;
        let first = |i: usize| !inputs[..i].iter().any(|&(earlier, _)| earlier == inputs[i].0);
        let counted_twice: u64 = (0..inputs.len())
            .filter(|&i| first(i))
            .filter_map(|i| self.storages.get(&inputs[i].0).filter(|s| s.pinned).map(|s| s.bytes))
            .sum();
        recipe.working_set + self.stats.pinned_bytes - counted_twice <= self.cfg.budget_bytes
    }

    /// Makes again every dropped result whose remake no longer fits beside the pins (a pin was
    /// just counted): while the pinned storage is not on the device yet, it still does. Such a
    /// result is written back from now on (`droppable`).
    pub(in crate::residency) fn remake_crowded(&mut self) -> Result<()> {
        let mut crowded: Vec<u64> = self
            .storages
            .iter()
            .filter(|(_, s)| s.dropped() && s.recipe.as_ref().is_some_and(|r| !self.fits_beside_pins(r)))
            .map(|(&id, _)| id)
            .collect();
        crowded.sort_unstable();
        crowded.into_iter().try_for_each(|id| self.remake_if_dropped(id, "pin_resident"))
    }

    /// The time `recipe`'s op would take to make `id` again at the device's rates (`op_seconds`,
    /// at least a launch). Not the op's measured time: on CUDA the host sees only the launch
    /// (kernels run asynchronously), and on the simulated device the CPU's compute; an estimate
    /// makes the choice a GPU would make on both.
    fn remake_estimate_ns(&self, id: u64, recipe: &Recipe) -> f64 {
        let shapes: Vec<Vec<i64>> = recipe.inputs.iter().flatten().map(|e| e.size()).collect();
        let elem = recipe.inputs.iter().flatten().next().map_or(4, |e| e.kind().elt_size_in_bytes());
        let input_bytes = recipe.storages.iter().map(|(input, _)| self.storages[input].bytes).sum();
        let rates = self.rates;
        let seconds = op_seconds(recipe.op, &shapes, input_bytes, self.storages[&id].bytes, rates.flops, rates.memory_bandwidth, elem);
        seconds.max(rates.launch) * 1e9
    }

    /// See `residency::keep_saved_recipe`: only a storage that was saved and has no recipe yet.
    pub(in crate::residency) fn keep_saved_recipe(&mut self, t: &tch::Tensor, op: &'static str, replay: Replay) -> Result<()> {
        if self.cfg.recompute == Recompute::Off || !self.moves() {
            return Ok(());
        }
        let info = crate::residency::torch_storage::storage(t, self.cuda())?;
        match self.by_device.get(&info.id) {
            Some(&id) if self.storages[&id].recipe.is_none() => self.keep_recipe(id, op, Recipe::new(Vec::new(), replay)),
            _ => Ok(()),
        }
    }

    /// Drops a storage's recipe: its inputs are no longer held for it, nor is it their dependent.
    pub(in crate::residency) fn drop_recipe(&mut self, id: u64) {
        let Some(recipe) = self.storages.get_mut(&id).and_then(|s| s.recipe.take()) else { return };
        for &(input, _) in &recipe.storages {
            if let Some(s) = self.storages.get_mut(&input) {
                s.recipe_holds -= 1;
            }
            if let Some(dependents) = self.dependents.get_mut(&input) {
                dependents.retain(|&d| d != id);
            }
        }
    }

    /// After a view of `id` died: once only recipes hold it, it is dropped from the device if it
    /// can be made again (nothing but a remake needs it).
    pub(in crate::residency) fn held_by_recipes(&mut self, id: u64) {
        let s = &self.storages[&id];
        if s.held_by_recipes_only() && s.evictable() && self.droppable(id) {
            let _ = self.evict(id, "held by recipes only");
        }
    }

    /// Whether evicting `id` should drop its device copy rather than write it back.
    pub(in crate::residency) fn droppable(&self, id: u64) -> bool {
        let s = &self.storages[&id];
        if s.kind != Home::Lazy || !s.recipe.as_ref().is_some_and(|r| self.fits_beside_pins(r)) {
            return false;
        }
        match self.cfg.recompute {
            Recompute::Off => false,
            Recompute::Always => true,
            Recompute::Cheaper => {
                let due = self.trace.next_use(s.key);
                let (kernels, copies) = self.remake_ns(id, due, &mut HashSet::new());
                let moves = 2.0 * s.bytes as f64 / self.link_bytes_per_ns();
                s.held_by_recipes_only() || kernels + self.link.pressure * copies < self.link.pressure * moves
            }
        }
    }

    /// The estimated time to make `id` again by op `due` (its next use in the recorded order,
    /// u64::MAX if unknown), its kernels' and its copies' apart: its op, and for each input not on
    /// the device, its remake (each dropped storage counted once) or its load; nothing for an
    /// input the recorded order reads again within `SHARED_WITHIN` ops of `due`.
    fn remake_ns(&self, id: u64, due: u64, seen: &mut HashSet<u64>) -> (f64, f64) {
        let Some(recipe) = &self.storages[&id].recipe else { return (0.0, 0.0) };
        let (mut kernels, mut copies) = (recipe.cost_ns, 0.0);
        for &(input, _) in &recipe.storages {
            let s = &self.storages[&input];
            let read_anyway = due != u64::MAX && self.trace.next_use(s.key) <= due.saturating_add(SHARED_WITHIN);
            if s.resident() || read_anyway || !seen.insert(input) {
                continue;
            }
            if s.dropped() {
                let (k, c) = self.remake_ns(input, due, seen);
                kernels += k;
                copies += c;
            } else {
                copies += s.bytes as f64 / self.link_bytes_per_ns();
            }
        }
        (kernels, copies)
    }

    /// The link's bandwidth in bytes per nanosecond, at the device's rates.
    fn link_bytes_per_ns(&self) -> f64 {
        self.rates.link / 1e9
    }

    /// At a mark, under `Cheaper`: how loaded the link was in the iteration that ended (see
    /// `LinkLoad`).
    pub(in crate::residency) fn weigh_link(&mut self) {
        let s = &self.stats;
        let now = [s.load_bytes, s.recomputed_bytes, s.write_back_bytes, s.dropped_bytes];
        let [loaded, remade, written, dropped] = std::array::from_fn(|i| now[i] - self.link.at_mark[i]);
        self.link.at_mark = now;
        let Some(pass) = self.schedule.as_ref().and_then(|log| log.last_pass()) else { return };
        // f32 kernels: the log keeps no element size.
        let kernels = self.rates.unmanaged_seconds(pass, 4);
        if kernels > 0.0 {
            let link = (loaded + remade).max(written + dropped) as f64 / self.rates.link;
            self.link.pressure = link / kernels;
        }
    }

    /// Makes a dropped storage again: its inputs are acquired (made again too, if dropped), its
    /// op runs under no-grad (the graph was recorded the first time), and the result becomes the
    /// device copy.
    pub(in crate::residency) fn recompute(&mut self, id: u64, op: &'static str) -> Result<()> {
        let started = Instant::now();
        let recipe = self.storages[&id].recipe.clone().ok_or_else(|| Error::Device("a dropped storage has no recipe".into()))?;
        let mut acquired = Vec::new();
        let logged_from = self.schedule.as_ref().map(|log| log.remake_begin());
        let made = self.replay(&recipe, self.kernel_bytes(id, &recipe), &mut acquired, op);
        acquired.into_iter().for_each(|input| self.release(input, true));
        let result = made?;
        let info = crate::residency::torch_storage::storage(&result, self.cuda())?;
        let s = self.storages.get_mut(&id).expect("known: forgetting waits for the manager");
        if info.nbytes != s.bytes || self.by_device.contains_key(&info.id) {
            return Err(Error::Device(format!("`{}` made again is not the storage it made first", recipe.op)));
        }
        crate::residency::autograd::share_version(&result, &s.home.bytes()?)?;
        (s.device, s.dirty, s.modified) = (Some(StorageRef::of(&result)?), true, true);
        let bytes = s.bytes;
        self.by_device.insert(info.id, id);
        self.stats.device_bytes += bytes;
        self.device_by_role.add(s.role, bytes);
        self.stats.peak_device_bytes = self.stats.peak_device_bytes.max(self.stats.device_bytes);
        self.stats.recomputations += 1;
        self.stats.recomputed_bytes += bytes;
        if let (Some(log), Some(from)) = (&mut self.schedule, logged_from) {
            let input_bytes = recipe.storages.iter().map(|(input, _)| self.storages[input].bytes).collect();
            log.remade(from, recipe.op, input_bytes, bytes);
            log.made(id);
        }
        self.event(EventKind::Recompute, id, bytes, op, Some(started));
        Ok(())
    }

    /// Acquires the recipe's inputs (recording them in `acquired`), checks they hold the data
    /// the op first read, makes room for the result and its scratch (`bytes`) and runs the op.
    fn replay(&mut self, recipe: &Recipe, bytes: u64, acquired: &mut Vec<u64>, op: &'static str) -> Result<tch::Tensor> {
        let mut views = Vec::with_capacity(recipe.inputs.len());
        for input in &recipe.inputs {
            let Some(entry) = input else {
                views.push(None);
                continue;
            };
            let a = self.acquire(entry, false, op)?;
            acquired.push(a.storage);
            views.push(Some(a.view));
        }
        for &(input, version) in &recipe.storages {
            if self.storages[&input].home.version() != version {
                return Err(Error::Device(format!(
                    "an input of `{}` was modified where the residency manager could not see it, after the result was dropped to be made again",
                    recipe.op
                )));
            }
        }
        self.make_room(bytes, op)?;
        self.cfg.device.fault(Fault::DeviceAllocation, format_args!("allocating `{}` made again", recipe.op))?;
        let _no_grad = tch::no_grad_guard();
        let _counted = (self.cfg.device == Device::Simulated).then(|| Scope::enter(Mode::Count));
        (recipe.replay)(&views.iter().map(Option::as_ref).collect::<Vec<_>>())
    }

    /// Brings a storage to the device for an op: loaded from its home, made again, or, never
    /// written yet, given device memory.
    pub(in crate::residency) fn bring(&mut self, id: u64, op: &'static str, kind: EventKind) -> Result<()> {
        if self.storages[&id].dropped() {
            return self.recompute(id, op);
        }
        self.make_room(self.storages[&id].bytes, op)?;
        match self.storages[&id].fresh {
            true => self.allocate(id, op),
            false => self.load(id, op, kind),
        }
    }

    /// Makes a dropped storage again outside an op (a read, an export, the manager's end).
    pub(in crate::residency) fn remake_if_dropped(&mut self, id: u64, op: &'static str) -> Result<()> {
        match self.storages[&id].dropped() {
            true => self.recompute(id, op),
            false => Ok(()),
        }
    }

    /// Before `id`'s data changes: its own recipe no longer describes it, and neither does any
    /// dependent's. A dependent that was dropped is made again first, from the data as it is.
    /// The caller has brought `id` itself to the device.
    pub(in crate::residency) fn before_write(&mut self, id: u64, op: &'static str) -> Result<()> {
        self.drop_recipe(id);
        let Some(dependents) = self.dependents.remove(&id) else { return Ok(()) };
        for (i, &d) in dependents.iter().enumerate() {
            if let Err(e) = self.remake_if_dropped(d, op) {
                self.dependents.insert(id, dependents[i..].to_vec());
                return Err(e);
            }
            self.drop_recipe(d);
        }
        Ok(())
    }
}
