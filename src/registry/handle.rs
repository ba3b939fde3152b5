//! Generation-checked handles. A handle is a `u64`: the slot index in bits 0..32, the slot's
//! generation in bits 32..62 (never 0, so 0 is never a valid handle), bit 62 set for scopes, and
//! bit 63 clear. Removing an entry bumps its slot's generation, so an old handle stays detectably
//! stale after the slot is reused.

use crate::error::{Error, HandleKind, Result};
use slab::Slab;

const KEY_BITS: u32 = 32;
const GEN_MASK: u64 = (1 << 30) - 1;
const SCOPE_BIT: u64 = 1 << 62;

/// A slab whose entries are addressed by generation-checked handles of one kind.
pub(crate) struct GenSlab<T> {
    slab: Slab<T>,
    gens: Vec<u32>,
    kind: HandleKind,
}

impl<T> GenSlab<T> {
    pub(crate) const fn new(kind: HandleKind) -> Self {
        GenSlab { slab: Slab::new(), gens: Vec::new(), kind }
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
        let tag = if self.kind == HandleKind::Scope { SCOPE_BIT } else { 0 };
        tag | (u64::from(self.gens[key]) << KEY_BITS) | key as u64
    }

    /// Resolves a handle to its slot key, or says why it is not a live handle of this kind.
    #[inline]
    pub(crate) fn key(&self, handle: u64) -> Result<usize> {
        let key = (handle & 0xffff_ffff) as usize;
        let gen = (handle >> KEY_BITS) & GEN_MASK;
        let tag_ok = (handle & SCOPE_BIT != 0) == (self.kind == HandleKind::Scope);
        let invalid = |why| Err(Error::InvalidHandle { kind: self.kind, id: handle, why });
        if handle >> 63 != 0 || gen == 0 {
            return invalid("not a handle");
        }
        if !tag_ok {
            return invalid(match self.kind {
                HandleKind::Tensor => "it is a scope handle, not a tensor handle",
                HandleKind::Scope => "it is a tensor handle, not a scope handle",
                HandleKind::Model => "it is a scope handle, not a model handle",
            });
        }
        match self.gens.get(key) {
            None => invalid("never issued"),
            Some(&g) if u64::from(g) == gen && self.slab.contains(key) => Ok(key),
            Some(&g) if u64::from(g) < gen => invalid("never issued"),
            Some(_) => Err(Error::StaleHandle { kind: self.kind, id: handle }),
        }
    }

    pub(crate) fn get(&self, handle: u64) -> Result<&T> {
        self.key(handle).map(|k| &self.slab[k])
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
