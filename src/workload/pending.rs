//! A buffer of accesses produced by one step of an algorithm and handed out in batches.
//!
//! Algorithms such as a tree insert or a BFS vertex expansion are easiest to write as "do one
//! step, record its accesses"; [`Pending`] lets such a step overfill and `fill` drain it, without
//! allocating after the first steps (the Vec keeps its capacity).

use crate::trace::{Access, AccessKind};

/// Accesses recorded but not yet handed to the simulator.
#[derive(Default, Debug)]
pub struct Pending {
    buf: Vec<Access>,
    pos: usize,
    /// Instructions retired since the last recorded access (added to the next one).
    carry: u32,
}

impl Pending {
    /// Whether every recorded access has been handed out.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos == self.buf.len()
    }

    /// Counts `n` instructions that do no memory access (they are charged to the next access).
    #[inline]
    pub fn instrs(&mut self, n: u32) {
        self.carry += n;
    }

    /// Records an access of `size` bytes at `vaddr` by instruction `ip`, which retires together with
    /// `instrs` non-memory instructions counted since the previous access (plus any carried ones).
    #[inline]
    pub fn push(&mut self, kind: AccessKind, vaddr: u64, size: u8, ip: u64, instrs: u32) {
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        let instrs = (instrs + self.carry).max(1);
        self.carry = 0;
        self.buf.push(Access { cpu: 0, asid: 0, ip, vaddr, kind, size, instrs });
    }

    /// Records a load (see [`Pending::push`]).
    #[inline]
    pub fn load(&mut self, vaddr: u64, size: u8, ip: u64, instrs: u32) {
        self.push(AccessKind::Load, vaddr, size, ip, instrs);
    }

    /// Records a store (see [`Pending::push`]).
    #[inline]
    pub fn store(&mut self, vaddr: u64, size: u8, ip: u64, instrs: u32) {
        self.push(AccessKind::Store, vaddr, size, ip, instrs);
    }

    /// Moves up to `out.len()` recorded accesses into `out`, tagging them with `cpu`; returns how many.
    #[inline]
    pub fn drain_into(&mut self, out: &mut [Access], cpu: u16) -> usize {
        let n = (self.buf.len() - self.pos).min(out.len());
        for (o, a) in out[..n].iter_mut().zip(&self.buf[self.pos..self.pos + n]) {
            *o = Access { cpu, ..*a };
        }
        self.pos += n;
        n
    }
}
