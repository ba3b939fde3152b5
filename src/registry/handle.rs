//! Generation-checked handles. A handle is a `u64`: the slot index in bits 0..32, the slot's
//! generation in bits 32..60 (never 0, so 0 is never a valid handle), the handle's kind in bits
//! 60..62 (0 tensor, 1 scope), and bit 63 clear. Removing an entry bumps its slot's generation,
//! so an old handle stays detectably stale after the slot is reused; a handle of another kind
//! never reaches a slot.

use crate::error::{Error, HandleKind, Result};
use slab::Slab;

const KEY_BITS: u32 = 32;
const GEN_MASK: u64 = (1 << 28) - 1;
const KIND_SHIFT: u32 = 60;
const KINDS: [HandleKind; 2] = [HandleKind::Tensor, HandleKind::Scope];

const fn kind_tag(kind: HandleKind) -> u64 {
    match kind {
        HandleKind::Tensor => 0,
        HandleKind::Scope => 1,
    }
}

/// A slab whose entries are addressed by generation-checked handles of one kind.
pub(crate) struct GenSlab<T> {
    slab: Slab<T>,
    gens: Vec<u32>,
    /// The kind's tag, in place (bits 60..62).
    tag: u64,
}

impl<T> GenSlab<T> {
    pub(crate) const fn new(kind: HandleKind) -> Self {
        GenSlab { slab: Slab::new(), gens: Vec::new(), tag: kind_tag(kind) << KIND_SHIFT }
    }

    pub(crate) fn insert(&mut self, value: T) -> (usize, u64) {
        let key = self.slab.insert(value);
        if key == self.gens.len() {
            self.gens.push(1);
        }
        (key, self.handle_of(key))
    }

    /// The handle of the live entry at `key`.
    pub(crate) fn handle_of(&self, key: usize) -> u64 {
        self.tag | (u64::from(self.gens[key]) << KEY_BITS) | key as u64
    }

    fn kind(&self) -> HandleKind {
        KINDS[(self.tag >> KIND_SHIFT) as usize]
    }

    /// Whether `handle` is exactly the one `handle_of(key)` would issue now (on every op's path;
    /// the slot may still be vacant).
    #[inline]
    fn current(&self, handle: u64, key: usize) -> bool {
        self.gens.get(key).is_some_and(|&g| handle == self.tag | u64::from(g) << KEY_BITS | key as u64)
    }

    /// Resolves a handle to its slot key, or says why it is not a live handle of this kind.
    #[inline]
    pub(crate) fn key(&self, handle: u64) -> Result<usize> {
        let key = (handle & 0xffff_ffff) as usize;
        match self.current(handle, key) && self.slab.contains(key) {
            true => Ok(key),
            false => Err(self.why_not_live(handle)),
        }
    }

    #[cold]
    #[inline(never)]
    fn why_not_live(&self, handle: u64) -> Error {
        let key = (handle & 0xffff_ffff) as usize;
        let gen = (handle >> KEY_BITS) & GEN_MASK;
        let kind = self.kind();
        let invalid = |why: String| Error::InvalidHandle { kind, id: handle, why };
        let tagged = KINDS.get((handle >> KIND_SHIFT) as usize);
        if handle >> 63 != 0 || gen == 0 || tagged.is_none() {
            return invalid("not a handle".into());
        }
        if let Some(&other) = tagged.filter(|&&k| k != kind) {
            return invalid(format!("it is a {other} handle, not a {kind} handle"));
        }
        match self.gens.get(key) {
            Some(&g) if u64::from(g) > gen || (u64::from(g) == gen && !self.slab.contains(key)) => {
                Error::StaleHandle { kind, id: handle }
            }
            _ => invalid("never issued".into()),
        }
    }

    /// The live entry `handle` names (one slab access: on every op's path).
    #[inline]
    pub(crate) fn get(&self, handle: u64) -> Result<&T> {
        let key = (handle & 0xffff_ffff) as usize;
        match self.slab.get(key) {
            Some(v) if self.current(handle, key) => Ok(v),
            _ => Err(self.why_not_live(handle)),
        }
    }

    pub(crate) fn get_mut(&mut self, handle: u64) -> Result<&mut T> {
        self.key(handle).map(|k| &mut self.slab[k])
    }

    pub(crate) fn at(&self, key: usize) -> &T {
        &self.slab[key]
    }

    pub(crate) fn at_mut(&mut self, key: usize) -> &mut T {
        &mut self.slab[key]
    }

    /// Removes the entry at `key` and retires its handle.
    pub(crate) fn remove(&mut self, key: usize) -> T {
        let g = &mut self.gens[key];
        *g = if u64::from(*g) == GEN_MASK { 1 } else { *g + 1 };
        self.slab.remove(key)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.slab.iter().map(|(_, v)| v)
    }

    pub(crate) fn len(&self) -> usize {
        self.slab.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_of_another_kind_never_reaches_a_slot() {
        let mut slabs = KINDS.map(GenSlab::new);
        let handles: Vec<u64> = slabs.iter_mut().map(|s| s.insert(()).1).collect();
        for (i, slab) in slabs.iter().enumerate() {
            for (j, &h) in handles.iter().enumerate() {
                match slab.key(h) {
                    Ok(_) => assert_eq!(i, j, "{:?} slab accepted a {:?} handle", KINDS[i], KINDS[j]),
                    Err(Error::InvalidHandle { why, .. }) => {
                        assert_ne!(i, j);
                        assert_eq!(why, format!("it is a {} handle, not a {} handle", KINDS[j], KINDS[i]));
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
        }
        assert!(matches!(slabs[0].key(3 << KIND_SHIFT | 1 << KEY_BITS), Err(Error::InvalidHandle { .. })), "tag 3 is no kind");
    }
}
