//! The access trace Flow learns from. Each op appends a record of the tensors it read; an
//! iteration ends at an explicit mark (`mark_iteration`) or when the manager sees the sequence
//! repeat (an op reading the same already-used persistent tensors as an op earlier in the
//! recording). While the program follows the recorded iteration, `next_use` answers when a
//! tensor is needed next, for Belady eviction and for prefetching. Tensors made during an
//! iteration are named by the op that made them (a storage made from nothing, by the op that
//! first used it), so the next iteration's activations match.
//! `offline_min_loads` computes the optimum (Belady's MIN) any policy could reach on a trace.

use crate::residency::core::id_map::IdMap;
use std::collections::{HashMap, HashSet};
use smallvec::SmallVec;

/// How a tensor is named in the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TraceKey {
    /// Made before the current iteration (weights, inputs): its entry id.
    Persistent(u64),
    /// The result of op `op` of iteration `iteration`.
    Produced { iteration: u64, op: u32 },
}

/// A key relative to one iteration: results of other iterations never match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NormKey {
    Persistent(u64),
    Produced(u32),
    Stale,
}

/// One op of a recorded iteration: the tensors it read and the one it made, with their bytes.
/// Most ops read one or two, kept in the record itself: an op recorded costs no allocation of
/// its own, which a long iteration would keep.
#[derive(Debug, Clone, PartialEq)]
pub struct OpRecord {
    pub name: &'static str,
    pub inputs: SmallVec<[(NormKey, u64); 2]>,
    pub output: Option<(NormKey, u64)>,
}

struct Recorded {
    ops: Vec<OpRecord>,
    /// Each tensor's uses: where its op indices lie in `positions` (start, count).
    uses: IdMap<NormKey, (u32, u32)>,
    /// The op indices that read each tensor, in order, tensor after tensor: one allocation
    /// however many tensors the iteration reads.
    positions: Vec<u32>,
    /// The tensors evicted (not dropped) in the recorded iteration.
    evicted: HashSet<NormKey>,
    /// The tensors each op wrote in place, by op index (see `Trace::wrote`).
    writes: HashSet<(u32, NormKey)>,
    /// By op, the most bytes running kernels held in flight while it was the op under way (see
    /// `Trace::kernels_held`), as the last iteration that repeated the recording saw them: one
    /// figure for each of `ops`.
    kernel_room: Vec<u64>,
}

impl Recorded {
    fn new(ops: Vec<OpRecord>, evicted: HashSet<NormKey>, writes: HashSet<(u32, NormKey)>, kernel_room: Vec<u64>) -> Recorded {
        assert_eq!(kernel_room.len(), ops.len(), "one figure of kernel room for each op");
        let mut uses: IdMap<NormKey, (u32, u32)> = IdMap::default();
        for (k, _) in ops.iter().flat_map(|op| &op.inputs) {
            uses.entry(*k).or_default().1 += 1;
        }
        let mut next = 0;
        for (start, count) in uses.values_mut() {
            *start = next;
            next += *count;
            *count = 0; // counts again as the positions are filled
        }
        let mut positions = vec![0; next as usize];
        for (i, op) in ops.iter().enumerate() {
            for (k, _) in &op.inputs {
                let (start, count) = uses.get_mut(k).expect("counted above");
                positions[(*start + *count) as usize] = i as u32;
                *count += 1;
            }
        }
        Recorded { ops, uses, positions, evicted, writes, kernel_room }
    }

    /// Each op from `start` on, round to the one before it, with what its kernels hold while it
    /// runs, beside its inputs: its result, or more where they allocate scratch (in backward, the
    /// gradients autograd's nodes pass on, held while the op under way is the next saved
    /// tensor's unpacking).
    fn ops_from(&self, start: usize) -> impl Iterator<Item = (&OpRecord, u64)> {
        fn held<'a>(ops: &'a [OpRecord], room: &'a [u64]) -> impl Iterator<Item = (&'a OpRecord, u64)> {
            ops.iter().zip(room).map(|(op, &room)| (op, op.output.map_or(0, |o| o.1).max(room)))
        }
        let (ops, room) = (self.ops.split_at(start), self.kernel_room.split_at(start));
        held(ops.1, room.1).chain(held(ops.0, room.0))
    }

    /// The indices of the ops that read `key`, in order.
    fn uses_of(&self, key: &NormKey) -> Option<&[u32]> {
        self.uses.get(key).map(|&(start, count)| &self.positions[start as usize..(start + count) as usize])
    }

    /// Whether `now` repeats the recorded op `then`: same name, same inputs by key. Sizes may
    /// differ (a batch of another length). A persistent tensor may stand for a recorded
    /// persistent one when the recording never used it (a new batch's inputs, made by the host
    /// each time), or when both are young (`Young`): the next token of a decode step is made at
    /// the end of the step before, and read by the recording too.
    fn same_op(&self, then: &OpRecord, now: &OpRecord, young: Young) -> bool {
        then.name == now.name
            && then.inputs.len() == now.inputs.len()
            && then.inputs.iter().zip(&now.inputs).all(|((a, _), (b, _))| match (a, b) {
                _ if a == b => true,
                (NormKey::Persistent(a), NormKey::Persistent(b)) => !self.uses.contains_key(&NormKey::Persistent(*b)) || young.stands_for(*a, *b),
                _ => false,
            })
    }

    /// Op index of the next use of `key` at or after `pos`; persistent tensors wrap around to
    /// the next iteration; u64::MAX if never.
    fn next_use(&self, key: NormKey, pos: u32) -> u64 {
        let Some(uses) = self.uses_of(&key) else { return u64::MAX };
        match uses.iter().find(|&&u| u >= pos) {
            Some(&u) => u as u64,
            None if matches!(key, NormKey::Persistent(_)) => uses[0] as u64 + self.ops.len() as u64,
            None => u64::MAX,
        }
    }
}

/// Which persistent tensors are young, by their ids (which grow as storages are registered): a
/// recorded one first read in the iteration before the recording or later (`then_from`), a
/// current one first read in the recorded iteration or later (`now_from`).
#[derive(Debug, Clone, Copy)]
struct Young {
    then_from: u64,
    now_from: u64,
}

impl Young {
    /// Whether `now`, read where the recording read `then`, plays the same part one iteration
    /// later: both are young (a decode step's token, made at the end of the step before). A
    /// weight is never young once three iterations have passed, so weights read in another order
    /// (Mixtral's routing) still end the following.
    fn stands_for(&self, then: u64, now: u64) -> bool {
        then >= self.then_from && now >= self.now_from
    }
}

#[derive(Default)]
pub(crate) struct Trace {
    iteration: u64,
    /// Index of the op now running within the current iteration.
    pos: u32,
    current: Vec<OpRecord>,
    recorded: Option<Recorded>,
    /// Counts the recordings made: which one a prefetch window was planned over.
    recordings: u64,
    following: bool,
    /// The program marks its iterations: the last boundary was a mark.
    explicit: bool,
    /// The ops since the last mark outgrew `MAX_MARKED_OPS`: the next mark records nothing.
    overlong: bool,
    /// Auto-detection: the op index in `current` where each anchor signature first appeared.
    anchors: IdMap<u64, usize>,
    /// The tensors evicted (not dropped) so far in this iteration.
    evicted: HashSet<NormKey>,
    /// This iteration's `Recorded::writes` so far.
    writes: HashSet<(u32, NormKey)>,
    /// This iteration's `Recorded::kernel_room`, by op index, so far.
    kernel_room: Vec<u64>,
    /// The first persistent id of the iteration before the recorded one, of the recorded one
    /// and of the current one (None before there was one), and one past the largest read so far.
    firsts: [Option<u64>; 3],
    newest: u64,
    /// The results of the iteration before that outlived it, named by their own id since the
    /// last mark (a decode step's KV cache), by the op that made them; and those of the mark
    /// before, which the recorded iteration read. See `stand_in`.
    survivors: Survivors,
    survived_before: Survivors,
}

/// Persisted survivors of one iteration: op -> id, and id -> op.
#[derive(Default)]
struct Survivors {
    by_op: IdMap<u32, u64>,
    by_id: IdMap<u64, u32>,
}

/// At most this many ops are kept while no iteration boundary has been found (fewer in the unit
/// tests, which reach it): an unmarked iteration is found if it repeats within 65,536 ops (a
/// training step of a large transformer is about 10,000; a longer one needs `mark_iteration`).
/// A program that never repeats then holds at most about 9 MiB of trace (the op records and
/// the anchor map, which is freed at the cap), and past the cap an op adds nothing to it and
/// looks nothing up: only `mark_iteration` starts an iteration then.
const MAX_UNMARKED_OPS: usize = if cfg!(test) { 1 << 12 } else { 1 << 16 };

/// An iteration found by itself is at least this many ops long: a shorter loop is followed as
/// several of its turns, so that what Flow does once an iteration (its prefetch window's plan)
/// is not done again every few ops.
const MIN_FOUND_OPS: usize = 16;

/// At most this many ops of a marked iteration are kept (about 100 MiB of records). A marked
/// iteration that runs longer is not recorded, and until the next mark iterations are looked for
/// as in a program that never marks: a program that marked once and then stopped keeps a bounded
/// trace, and Flow still learns its order.
const MAX_MARKED_OPS: usize = if cfg!(test) { 1 << 13 } else { 1 << 20 };

impl Trace {
    /// The iteration under way (counted from 0 by `mark` and detected boundaries).
    pub(crate) fn iteration(&self) -> u64 {
        self.iteration
    }

    pub(crate) fn key_for_new(&self) -> TraceKey {
        TraceKey::Produced { iteration: self.iteration, op: self.pos }
    }

    pub(crate) fn norm(&self, key: TraceKey) -> NormKey {
        match key {
            TraceKey::Persistent(uid) => NormKey::Persistent(uid),
            TraceKey::Produced { iteration, op } if iteration == self.iteration => NormKey::Produced(op),
            TraceKey::Produced { .. } => NormKey::Stale,
        }
    }

    /// Whether the program is following a recorded iteration (Belady and prefetch apply).
    pub(crate) fn following(&self) -> bool {
        self.following && self.recorded.is_some()
    }

    /// When `key` is needed next, in ops from the start of the current iteration.
    pub(crate) fn next_use(&self, key: TraceKey) -> u64 {
        match (&self.recorded, self.norm(key)) {
            (_, NormKey::Stale) | (None, _) => u64::MAX,
            (Some(r), k) => r.next_use(self.stand_in(k), self.pos),
        }
    }

    /// Whether the recorded op that uses `key` next, at most `within` ops from the one about to
    /// run, wrote it in place (an optimizer's state, updated by one op after another): see
    /// `Manager::write_ahead`.
    pub(crate) fn next_use_writes(&self, key: TraceKey, within: u64) -> bool {
        let Some(r) = self.recorded.as_ref().filter(|_| self.following) else { return false };
        let key = self.stand_in(self.norm(key));
        let next = r.next_use(key, self.pos);
        next != u64::MAX && next - self.pos as u64 <= within && r.writes.contains(&((next % r.ops.len() as u64) as u32, key))
    }

    /// After a mark, the results of the iteration before that survived it (`survivors`: their
    /// ids and the ops that made them). Of the mark before's, only those gone since (`alive`
    /// says which are not) get a stand-in: one still alive (an optimizer's moments) is read as
    /// itself.
    pub(crate) fn survived(&mut self, survivors: impl IntoIterator<Item = (u64, u32)>, alive: impl Fn(u64) -> bool) {
        let mut now = Survivors::default();
        for (id, op) in survivors {
            now.by_op.insert(op, id);
            now.by_id.insert(id, op);
        }
        let mut before = std::mem::replace(&mut self.survivors, now);
        before.by_id.retain(|&id, _| !alive(id));
        before.by_op.retain(|_, &mut id| !alive(id));
        self.survived_before = before;
    }

    /// A survivor of the iteration before plays, in the recording, the part of the survivor the
    /// same op made one iteration earlier: the KV cache a decode step reads is the one the step
    /// before made, a new tensor each step. Its key there, for `next_use`.
    fn stand_in(&self, key: NormKey) -> NormKey {
        let NormKey::Persistent(id) = key else { return key };
        let then = self.survivors.by_id.get(&id).and_then(|op| self.survived_before.by_op.get(op));
        then.map_or(key, |&then| NormKey::Persistent(then))
    }

    /// The other way: the survivor of the iteration before that stands for `id`, a survivor the
    /// recording read (for `prefetch_plan`).
    fn standing_for(&self, id: u64) -> u64 {
        let now = self.survived_before.by_id.get(&id).and_then(|op| self.survivors.by_op.get(op));
        now.copied().unwrap_or(id)
    }

    /// What to prefetch for the next `depth` recorded ops (from the op about to run), in order,
    /// handed to `visit`: each input that exists now (persistent, or made earlier in this
    /// iteration: an activation autograd saved, read again in backward) with what must fit
    /// beside it until its use (`Ahead`). A prefetched tensor must fit beside those, or it would
    /// be evicted unused. A visitor, not a list: the manager keeps the storages the keys name.
    pub(crate) fn prefetch_plan(&self, depth: usize, mut visit: impl FnMut(TraceKey, Ahead)) {
        let Some(r) = self.recorded.as_ref().filter(|_| self.following) else { return };
        let start = self.pos as usize % r.ops.len();
        let (mut before, mut results) = (0, 0);
        for (op, made) in r.ops_from(start).take(depth) {
            results = results.max(made);
            let ahead = Ahead { working_set: before, results };
            let mut working_set = made;
            for &(k, bytes) in &op.inputs {
                working_set += bytes;
                if let Some(key) = self.fetchable(k) {
                    visit(key, ahead);
                }
            }
            before = before.max(working_set);
        }
    }

    /// The prefetch window as it is now, planned through (see `Manager::prefetch`).
    pub(crate) fn window_done(&self, epoch: u64) -> WindowDone {
        WindowDone { iteration: self.iteration, pos: self.pos, recording: self.recordings, epoch }
    }

    /// The inputs of the ops that entered the prefetch window of `depth` ops since it was
    /// `since` (the plan's keys, in its order), or None when the window holds no op it held then:
    /// every op of it is new, the position moved back, or another recording is followed. The
    /// window moves on into the next iteration of the same recording, as the plan wraps.
    pub(crate) fn entered_since(&self, since: &WindowDone, depth: usize) -> Option<impl Iterator<Item = TraceKey> + '_> {
        let r = self.recorded.as_ref().filter(|_| self.following && since.recording == self.recordings)?;
        let depth = depth.min(r.ops.len());
        let moved = match self.iteration.checked_sub(since.iteration)? {
            0 => self.pos.checked_sub(since.pos)? as usize,
            1 => (r.ops.len() as u32).checked_sub(since.pos)? as usize + self.pos as usize,
            _ => return None,
        };
        if moved >= depth && moved > 0 {
            return None;
        }
        // The window covers the whole recording when `depth` is its length: no op enters it.
        let entered = if depth == r.ops.len() { 0 } else { moved };
        let first = self.pos as usize + depth - entered;
        Some((first..first + entered).flat_map(move |i| r.ops[i % r.ops.len()].inputs.iter().filter_map(|&(k, _)| self.fetchable(k))))
    }

    /// A recorded op's input, as it is named now, if it exists now: a persistent one (a survivor
    /// by the one standing for it), or a result made earlier in this iteration.
    fn fetchable(&self, key: NormKey) -> Option<TraceKey> {
        match key {
            NormKey::Persistent(uid) => Some(TraceKey::Persistent(self.standing_for(uid))),
            NormKey::Produced(made) if made < self.pos => Some(TraceKey::Produced { iteration: self.iteration, op: made }),
            _ => None,
        }
    }
}

/// Where the last prefetch pass that went through its whole window began (see `Manager::prefetch`).
#[derive(Clone, Copy)]
pub(crate) struct WindowDone {
    iteration: u64,
    pos: u32,
    /// The recording followed then (`Trace::recordings`).
    recording: u64,
    /// `Manager::window_epoch` then.
    pub(crate) epoch: u64,
}

/// What must fit on the device beside a prefetched tensor until the op that reads it has run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ahead {
    /// The largest working set (inputs, and what the kernels hold) of the ops that run before it.
    pub working_set: u64,
    /// The most the kernels of the ops up to its own hold (a result, or scratch beside it: see
    /// `Trace::kernels_held`): made while it stays, in room that holds no tensor yet.
    pub results: u64,
}

impl Trace {
    /// Records a finished op. `anchor` is a signature of the already-used persistent tensors it
    /// read (None if it read none); a repeated anchor starts a new iteration. Returns the key of
    /// the op's result.
    pub(crate) fn op_end(&mut self, name: &'static str, inputs: &[(TraceKey, u64)], output_bytes: Option<u64>, anchor: Option<u64>) -> TraceKey {
        // Past the ops kept, no iteration can be found (not all its ops were kept), so no anchor
        // is looked up or kept: a program that never repeats holds a bounded trace, and its ops
        // pay no lookup in a map that large.
        let searching = !self.explicit && self.current.len() < MAX_UNMARKED_OPS;
        if let (true, Some(sig)) = (searching, anchor) {
            match self.anchors.get(&sig) {
                Some(&start) if self.current.len() - start >= MIN_FOUND_OPS => {
                    if start > 0 {
                        self.writes = self.writes.drain().filter(|&(op, _)| op >= start as u32).map(|(op, k)| (op - start as u32, renumbered(k, start as u32))).collect();
                    }
                    self.current.drain(..start);
                    self.kernel_room.drain(..start.min(self.kernel_room.len()));
                    renumber(&mut self.current, start as u32);
                    let ops = std::mem::take(&mut self.current);
                    self.start_iteration(Some(ops));
                    // This op is the new iteration's first: its anchor ends that iteration when
                    // it comes round again, so each iteration found begins where the last one did.
                    self.anchors.insert(sig, 0);
                }
                Some(_) => {}
                None => {
                    self.anchors.insert(sig, self.current.len());
                }
            }
        }
        let key = self.key_for_new();
        for (k, _) in inputs {
            if let TraceKey::Persistent(uid) = k {
                self.newest = self.newest.max(uid + 1);
            }
        }
        // The record is made only to be kept or compared with the followed iteration's: past
        // the ops kept, a program that follows nothing records nothing.
        let keep = self.current.len() < if self.explicit { MAX_MARKED_OPS } else { MAX_UNMARKED_OPS };
        let followed = self.recorded.as_ref().filter(|_| self.following);
        if keep || followed.is_some() {
            let record = OpRecord {
                name,
                inputs: inputs.iter().map(|&(k, b)| (self.norm(k), b)).collect(),
                output: output_bytes.map(|b| (self.norm(key), b)),
            };
            if let Some(r) = followed {
                let young = match self.firsts {
                    [Some(then_from), Some(now_from), _] => Young { then_from, now_from },
                    _ => Young { then_from: u64::MAX, now_from: u64::MAX },
                };
                self.following = r.ops.get(self.pos as usize).is_some_and(|e| r.same_op(e, &record, young));
            }
            if keep {
                self.current.push(record);
                if !self.explicit && self.current.len() == MAX_UNMARKED_OPS {
                    self.anchors = IdMap::default();
                }
            }
        }
        self.pos += 1;
        if self.explicit && self.current.len() == MAX_MARKED_OPS {
            self.outgrown();
        }
        key
    }

    /// The ops since the last mark reached `MAX_MARKED_OPS`: they are let go of, and a new
    /// iteration begins, to be found as in a program that never marks.
    fn outgrown(&mut self) {
        self.current = Vec::new();
        self.explicit = false;
        self.overlong = true;
        self.start_iteration(None);
    }

    /// Running kernels hold `bytes` in flight (allocated, not yet a storage) while the op under way
    /// runs: the most of it at each op is kept, so that once the iteration is followed a prefetch
    /// leaves that room free (`prefetch_plan`) rather than fill it and have the kernels evict what
    /// it fetched, to fetch it again. Only the simulated device sees kernels allocate.
    pub(crate) fn kernels_held(&mut self, bytes: u64) {
        let pos = self.pos as usize;
        if pos > self.current.len() {
            return; // past the ops kept: no record for it to go with
        }
        if self.kernel_room.len() <= pos {
            self.kernel_room.resize(pos + 1, 0);
        }
        self.kernel_room[pos] = self.kernel_room[pos].max(bytes);
    }

    /// The op that ended last wrote `key` in place (kept with its record: an op past the ops
    /// kept has none; a result of an iteration gone is no name to keep).
    pub(crate) fn wrote(&mut self, key: TraceKey) {
        match (self.pos.checked_sub(1), self.norm(key)) {
            (_, NormKey::Stale) => {}
            (Some(op), key) if (op as usize) < self.current.len() => {
                self.writes.insert((op, key));
            }
            _ => {}
        }
    }

    /// `key` leaves the device with its data kept (written back, or clean at home).
    pub(crate) fn evicted(&mut self, key: TraceKey) {
        match self.norm(key) {
            NormKey::Stale => {}
            k => {
                self.evicted.insert(k);
            }
        }
    }

    /// Whether the iteration being followed evicted `key` and kept its data.
    pub(crate) fn evicted_last_time(&self, key: TraceKey) -> bool {
        self.following() && self.recorded.as_ref().is_some_and(|r| r.evicted.contains(&self.norm(key)))
    }

    /// An explicit iteration mark: the ops since the last mark become the recorded iteration,
    /// unless they outgrew the ops kept (then only part of them would be).
    pub(crate) fn mark(&mut self) {
        self.explicit = true;
        let ops = std::mem::take(&mut self.current);
        let whole = !std::mem::take(&mut self.overlong);
        self.start_iteration((whole && !ops.is_empty()).then_some(ops));
    }

    fn start_iteration(&mut self, ops: Option<Vec<OpRecord>>) {
        let evicted = std::mem::take(&mut self.evicted);
        let writes = std::mem::take(&mut self.writes);
        let mut kernel_room = std::mem::take(&mut self.kernel_room);
        // Where the iteration was found by its first op repeating, that op's kernels ran already:
        // they are the next iteration's first op's.
        let first = ops.as_ref().and_then(|ops| kernel_room.get(ops.len()).copied());
        kernel_room.resize(ops.as_ref().map_or(0, Vec::len), 0);
        // The next iteration's ops go where the last one's went, or, when a new recording keeps
        // those, into room for as many.
        match (ops, &mut self.recorded) {
            // The iteration repeated the recorded one op for op: only what it evicted and what
            // its kernels held are new.
            (Some(ops), Some(r)) if r.ops == ops => {
                r.evicted = evicted;
                r.writes = writes;
                std::mem::swap(&mut r.kernel_room, &mut kernel_room);
                self.current = ops;
            }
            (Some(ops), _) => {
                self.current = Vec::with_capacity(ops.len());
                self.recorded = Some(Recorded::new(ops, evicted, writes, std::mem::take(&mut kernel_room)));
                self.recordings += 1;
            }
            (None, _) => {}
        }
        kernel_room.clear();
        kernel_room.extend(first);
        self.kernel_room = kernel_room;
        self.current.clear();
        self.anchors.clear();
        self.firsts = [self.firsts[1], self.firsts[2], Some(self.newest)];
        self.iteration += 1;
        self.pos = 0;
        self.following = true;
    }

    pub(crate) fn recorded_ops(&self) -> Option<&[OpRecord]> {
        self.recorded.as_ref().map(|r| &r.ops[..])
    }
}

/// Re-bases the op indices of results made inside an auto-detected iteration that began at op
/// `start` of the previous recording.
fn renumber(ops: &mut [OpRecord], start: u32) {
    for op in ops {
        op.inputs.iter_mut().for_each(|(k, _)| *k = renumbered(*k, start));
        op.output.iter_mut().for_each(|(k, _)| *k = renumbered(*k, start));
    }
}

/// `key` in an iteration that begins at op `start` of the one it was named in.
fn renumbered(key: NormKey, start: u32) -> NormKey {
    match key {
        NormKey::Produced(op) if op >= start => NormKey::Produced(op - start),
        NormKey::Produced(_) => NormKey::Stale,
        k => k,
    }
}

/// The fewest bytes any policy must load to run `ops` (one iteration, repeated `repeat` times
/// from an empty device) under `budget`, counted over the last repetition: Belady's MIN, which
/// evicts the tensor whose next use is furthest. Results appear on the device without a load
/// and count against the budget; `pinned` bytes are unavailable.
pub fn offline_min_loads(ops: &[OpRecord], budget: u64, pinned: u64, repeat: usize) -> u64 {
    let recorded = Recorded::new(ops.to_vec(), HashSet::new(), HashSet::new(), vec![0; ops.len()]);
    let capacity = budget.saturating_sub(pinned);
    let mut cache: HashMap<NormKey, u64> = HashMap::new();
    let mut loaded = 0;
    for rep in 0..repeat {
        cache.retain(|k, _| matches!(k, NormKey::Persistent(_))); // last iteration's results died
        for (pos, op) in ops.iter().enumerate() {
            let needed: Vec<NormKey> = op.inputs.iter().map(|(k, _)| *k).collect();
            let make_room = |cache: &mut HashMap<NormKey, u64>, bytes: u64| {
                while cache.values().sum::<u64>() + bytes > capacity {
                    let victim = cache
                        .keys()
                        .filter(|k| !needed.contains(k))
                        .max_by_key(|k| recorded.next_use(**k, pos as u32 + 1))
                        .copied();
                    match victim {
                        Some(v) => cache.remove(&v),
                        None => break,
                    };
                }
            };
            for &(k, bytes) in &op.inputs {
                if !cache.contains_key(&k) {
                    make_room(&mut cache, bytes);
                    cache.insert(k, bytes);
                    if rep + 1 == repeat {
                        loaded += bytes;
                    }
                }
            }
            if let Some((k, bytes)) = op.output {
                make_room(&mut cache, bytes);
                cache.insert(k, bytes);
            }
        }
    }
    loaded
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One decode step: the embedding of the token the step before made at its end (a persistent
    /// tensor to the trace, first read there), a product with a weight, and the next token, which
    /// the stopping criteria read at once.
    fn step(t: &mut Trace, token: u64, weights: [u64; 2]) {
        t.mark();
        let h = t.op_end("embedding", &[(TraceKey::Persistent(weights[0]), 64), (TraceKey::Persistent(token), 8)], Some(32), None);
        let logits = t.op_end("mm", &[(h, 32), (TraceKey::Persistent(weights[1]), 64)], Some(8), None);
        t.op_end("argmax", &[(logits, 8)], Some(8), None);
        t.op_end("isin", &[(TraceKey::Persistent(token + 1), 8)], Some(1), None);
    }

    /// The keys the prefetch plan of the op about to run holds.
    fn planned(t: &Trace) -> Vec<TraceKey> {
        let mut keys = vec![];
        t.prefetch_plan(1, |k, _| keys.push(k));
        keys
    }

    #[test]
    fn a_token_made_at_the_end_of_the_step_before_keeps_the_steps_followed() {
        let mut t = Trace::default();
        for token in 10..20 {
            step(&mut t, token, [1, 2]);
            if token >= 13 {
                assert!(t.following(), "step reading token {token} no longer follows the one before");
            }
        }
    }

    #[test]
    fn the_cache_the_step_before_made_stands_for_the_one_the_recording_read() {
        // Each step reads the cache the step before made (op 1 there; persisted at the mark, a
        // new id each step) beside a weight, then makes the next one.
        let mut t = Trace::default();
        for step in 0..6u64 {
            let cache = 100 + step;
            t.mark();
            t.survived([(cache, 1)], |id| id == cache);
            if step >= 3 {
                assert!(t.following(), "step {step}");
                assert_eq!(t.next_use(TraceKey::Persistent(cache)), 0, "step {step}: the cache is read by the next op");
                assert!(planned(&t).contains(&TraceKey::Persistent(cache)), "step {step}: the cache is fetched ahead");
            }
            t.op_end("cat", &[(TraceKey::Persistent(cache), 8), (TraceKey::Persistent(1), 8)], Some(16), None);
            t.op_end("mm", &[(TraceKey::Persistent(2), 8)], Some(16), None);
        }
    }

    #[test]
    fn a_survivor_still_alive_is_read_as_itself() {
        // A state made by op 1 of the first step and read by op 0 of every step after; the
        // second step's op 1 makes another tensor that outlives it.
        let mut t = Trace::default();
        let (state, other) = (50, 60);
        for step in 0..4u64 {
            t.mark();
            match step {
                1 => t.survived([(state, 1)], |_| true),
                2 => t.survived([(other, 1)], |_| true),
                _ => t.survived([], |_| true),
            }
            if step >= 2 {
                assert!(planned(&t).contains(&TraceKey::Persistent(state)), "step {step}: the state itself is fetched");
                assert_eq!(t.next_use(TraceKey::Persistent(other)), u64::MAX, "step {step}: the other tensor is read by nothing");
            }
            let read: &[(TraceKey, u64)] = if step == 0 { &[(TraceKey::Persistent(1), 8)] } else { &[(TraceKey::Persistent(1), 8), (TraceKey::Persistent(state), 8)] };
            t.op_end("add", read, Some(16), None);
            t.op_end("mm", &[(TraceKey::Persistent(2), 8)], Some(16), None);
        }
    }

    fn entered(t: &Trace, since: u32, depth: usize) -> Option<Vec<TraceKey>> {
        let since = WindowDone { pos: since, ..t.window_done(0) };
        t.entered_since(&since, depth).map(Iterator::collect)
    }

    #[test]
    fn the_ops_entering_the_prefetch_window_are_those_past_its_old_end() {
        // Five ops, each reading weight 1 to 5, followed from the fourth iteration on.
        let read = |t: &mut Trace, w: u64| {
            t.op_end("mm", &[(TraceKey::Persistent(w), 8)], Some(8), None);
        };
        let mut t = Trace::default();
        for _ in 0..3 {
            t.mark();
            (1..=5).for_each(|w| read(&mut t, w));
        }
        t.mark();
        assert!(t.following());
        assert_eq!(entered(&t, 0, 2), Some(vec![]), "the window has not moved");
        read(&mut t, 1);
        assert_eq!(entered(&t, 0, 2), Some(vec![TraceKey::Persistent(3)]), "ops 1-2 follow ops 0-1");
        read(&mut t, 2);
        assert_eq!(entered(&t, 0, 2), None, "no op of the window began at op 0 is in it");
        assert_eq!(entered(&t, 1, 2), Some(vec![TraceKey::Persistent(4)]));
        read(&mut t, 3);
        read(&mut t, 4);
        assert_eq!(entered(&t, 3, 2), Some(vec![TraceKey::Persistent(1)]), "the window wraps into the next iteration");
        assert_eq!(entered(&t, 3, 5), Some(vec![]), "a window as long as the iteration takes in no op");
        assert_eq!(entered(&t, 5, 2), None, "the position moved back");
        // Into the next iteration, which repeats the recording.
        let done = t.window_done(0);
        read(&mut t, 5);
        t.mark();
        let entered_since_done = |t: &Trace| t.entered_since(&done, 2).map(Iterator::collect::<Vec<_>>);
        assert_eq!(entered_since_done(&t), Some(vec![TraceKey::Persistent(2)]), "ops 0-1 of the next iteration follow ops 4-0");
        read(&mut t, 1);
        assert_eq!(entered_since_done(&t), None, "no op of the window begun at op 4 is in it");
        // A new recording: the window's ops are not the followed ones.
        (2..=4).for_each(|w| read(&mut t, w));
        let done = t.window_done(0);
        t.mark();
        assert_eq!(t.recorded_ops().map(<[OpRecord]>::len), Some(4), "the iteration without weight 5, recorded");
        assert_eq!(t.entered_since(&done, 2).map(Iterator::count), None, "another recording is followed");
    }

    #[test]
    fn a_program_that_never_repeats_keeps_a_bounded_trace() {
        // Each op reads two weights no op read before it with an earlier one: a new anchor each.
        let mut t = Trace::default();
        let first = |t: &mut Trace, w: u64| {
            t.op_end("add", &[(TraceKey::Persistent(w), 4)], Some(4), None);
        };
        first(&mut t, 1);
        for w in 2..(MAX_UNMARKED_OPS as u64 + 100) {
            first(&mut t, w);
            t.op_end("add", &[(TraceKey::Persistent(w - 1), 4), (TraceKey::Persistent(w), 4)], Some(4), Some(w));
        }
        assert_eq!(t.current.len(), MAX_UNMARKED_OPS, "the ops kept");
        assert!(t.anchors.is_empty(), "{} anchors kept past the ops kept", t.anchors.len());
        // An anchor seen before the cap, seen again past it, starts no iteration of the ops kept.
        t.op_end("add", &[(TraceKey::Persistent(1), 4), (TraceKey::Persistent(2), 4)], Some(4), Some(2));
        assert_eq!((t.iteration(), t.current.len()), (0, MAX_UNMARKED_OPS), "no iteration of part of the ops");
    }

    #[test]
    fn the_op_that_uses_a_tensor_next_is_known_to_write_it_or_not() {
        // Adam's second moment (persistent 7): scaled in place, added to in place, read; then a
        // weight read. Marked steps, so that each repeats the recording.
        let mut t = Trace::default();
        let v = TraceKey::Persistent(7);
        for step in 0..4 {
            t.mark();
            let following = step >= 1;
            assert_eq!(t.next_use_writes(v, 8), following, "step {step}: op 0 writes it next");
            t.op_end("mul_", &[(v, 8)], None, None);
            t.wrote(v);
            assert_eq!(t.next_use_writes(v, 8), following, "step {step}: op 1 writes it next");
            t.op_end("addcmul_", &[(v, 8), (TraceKey::Persistent(8), 8)], None, None);
            t.wrote(v);
            assert!(!t.next_use_writes(v, 8), "step {step}: op 2 only reads it");
            t.op_end("sqrt", &[(v, 8)], Some(8), None);
            assert_eq!(t.next_use_writes(v, 8), following, "step {step}: the next step's op 0 writes it");
            assert!(!t.next_use_writes(v, 0), "step {step}: two ops on, not within none");
            t.op_end("mm", &[(TraceKey::Persistent(9), 8)], Some(8), None);
        }
    }

    /// One op reading weight `w`, anchored by it once `used` (as a weight read before).
    fn read(t: &mut Trace, w: u64, used: bool) {
        t.op_end("mm", &[(TraceKey::Persistent(w), 8)], Some(8), used.then_some(w));
    }

    #[test]
    fn each_iteration_found_begins_where_the_last_one_did() {
        // A loop of three ops, never marked; from its second turn on each op is anchored.
        let mut t = Trace::default();
        let mut found = vec![];
        for turn in 0..40 {
            for w in 1..=3 {
                let before = t.iteration();
                read(&mut t, w, turn > 0);
                if t.iteration() != before {
                    found.push((turn, w));
                }
            }
        }
        // The first anchor at least MIN_FOUND_OPS ops after its first sight: six turns on.
        assert_eq!(found, [(7, 1), (13, 1), (19, 1), (25, 1), (31, 1), (37, 1)], "(turn, weight) where iterations began");
        assert_eq!(t.recorded_ops().map(<[OpRecord]>::len), Some(18), "six turns of the loop");
        assert!(t.following());
    }

    /// The `Ahead` the prefetch plan of the op about to run gives each key, over `depth` ops.
    fn aheads(t: &Trace, depth: usize) -> Vec<(TraceKey, u64, u64)> {
        let mut all = vec![];
        t.prefetch_plan(depth, |k, a| all.push((k, a.working_set, a.results)));
        all
    }

    #[test]
    fn the_prefetch_leaves_room_for_what_kernels_held_at_each_op() {
        // Three products of 8-byte weights making 8 bytes; the second one's kernels hold 100
        // bytes at their peak (its result and scratch).
        let mut t = Trace::default();
        for _ in 0..3 {
            t.mark();
            read(&mut t, 1, false);
            t.kernels_held(100);
            read(&mut t, 2, false);
            read(&mut t, 3, false);
        }
        t.mark();
        assert!(t.following());
        let w = |id| TraceKey::Persistent(id);
        // Beside weight 3 (read by the third op) the first op's 16 bytes fit, then the second
        // op's weight and its kernels' 100.
        assert_eq!(aheads(&t, 3), [(w(1), 0, 8), (w(2), 16, 100), (w(3), 108, 100)]);
    }

    #[test]
    fn an_iteration_found_by_itself_keeps_what_kernels_held_at_each_of_its_ops() {
        // The loop of `each_iteration_found_begins_where_the_last_one_did`, the op reading weight
        // w holding 10 x w bytes in its kernels: an iteration is found at its first op's end,
        // after that op's kernels ran.
        let mut t = Trace::default();
        for turn in 0..40 {
            for w in 1..=3 {
                t.kernels_held(10 * w);
                read(&mut t, w, turn > 0);
            }
        }
        let r = t.recorded.as_ref().expect("an iteration was found");
        for (i, (op, held)) in r.ops_from(0).enumerate() {
            let NormKey::Persistent(w) = op.inputs[0].0 else { panic!("op {i} reads no weight") };
            assert_eq!(held, 10 * w, "op {i}, reading weight {w}");
        }
    }

    #[test]
    fn a_program_that_marked_once_keeps_a_bounded_trace_and_still_finds_its_iterations() {
        let mut t = Trace::default();
        t.mark();
        let mut most = 0;
        for i in 0..MAX_MARKED_OPS as u64 + 100 {
            read(&mut t, 1 + i % 16, i >= 16);
            most = most.max(t.current.len());
        }
        assert!(most < MAX_MARKED_OPS, "{most} ops kept since the only mark");
        assert_eq!(t.recorded_ops().map(<[OpRecord]>::len), Some(16), "the loop's turn, found by itself");
        assert!(t.following());
        // The ops since that mark were let go of: a mark now records none of them.
        t.mark();
        assert_eq!(t.recorded_ops().map(<[OpRecord]>::len), Some(16));
    }

    #[test]
    fn weights_read_in_another_order_end_the_following() {
        let mut t = Trace::default();
        for token in 10..16 {
            step(&mut t, token, [1, 2]);
        }
        assert!(t.following());
        step(&mut t, 16, [2, 1]);
        assert!(!t.following());
    }
}
