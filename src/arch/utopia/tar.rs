//! One space's Tag Array (TAR) of one RestSeg, host-side: per slot the tag of the page there.
//!
//! A tag is what the hardware's TAR entry keeps (Utopia footnote 8): the VPN's part above the
//! set index, `vpn / divisor` ([`SetHash::divisor`](super::SetHash::divisor)), from which the
//! slot's set gives the VPN back ([`SetHash::vpn`](super::SetHash::vpn)). Tags that fit in 32
//! bits (every 4 KiB RestSeg of 16 sets or more under a 4-level table, of 8,192 or more under 5
//! levels) are kept as `u32` in 64-byte-aligned host lines, so a 16-way set's row is one host
//! cache line. The RestSeg walk scans its set's row on every L2 TLB miss, and the row is rarely
//! in the host's caches (perf put 59 % of `side_lookup`'s samples on the scan's first load when
//! rows were `u64` VPNs, two or three host lines each). Wider tags are kept as `u64`.

const NARROW_EMPTY: u32 = u32::MAX;
const WIDE_EMPTY: u64 = u64::MAX;
/// Narrow tags per host line.
const PER_LINE: usize = 16;

/// A host cache line of narrow tags.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u32; PER_LINE]);

// SAFETY: `repr(C)` over `[u32; PER_LINE]`: 64 bytes, no padding, every bit pattern valid.
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: as above; `Copy` and `'static`.
unsafe impl bytemuck::Pod for Line {}

/// The tags of one space in one RestSeg, by slot (set × ways + way).
pub(super) struct Tar(Keys);

/// A [`Tar`]'s storage.
enum Keys {
    /// Tags below `u32::MAX`, in host lines; `len` slots of them are used.
    Narrow { lines: Vec<Line>, len: usize },
    /// Any tag.
    Wide(Vec<u64>),
}

impl Tar {
    /// An empty TAR of `slots` slots whose tags are at most `max_tag`.
    pub(super) fn new(slots: usize, max_tag: u64) -> Tar {
        if max_tag < NARROW_EMPTY as u64 {
            Tar(Keys::Narrow { lines: vec![Line([NARROW_EMPTY; PER_LINE]); slots.div_ceil(PER_LINE)], len: slots })
        } else {
            Tar(Keys::Wide(vec![WIDE_EMPTY; slots]))
        }
    }

    /// The narrow tags as one slice.
    #[inline(always)]
    fn narrow(lines: &[Line], len: usize) -> &[u32] {
        &bytemuck::cast_slice(lines)[..len]
    }

    /// [`Tar::narrow`], mutably.
    #[inline(always)]
    fn narrow_mut(lines: &mut [Line], len: usize) -> &mut [u32] {
        &mut bytemuck::cast_slice_mut(lines)[..len]
    }

    /// Slots.
    pub(super) fn len(&self) -> usize {
        match &self.0 {
            Keys::Narrow { len, .. } => *len,
            Keys::Wide(v) => v.len(),
        }
    }

    /// The slot among `ways` slots from `first` (a set's row) whose tag is `tag`.
    #[inline]
    pub(super) fn find(&self, first: usize, ways: usize, tag: u64) -> Option<usize> {
        let way = match &self.0 {
            Keys::Narrow { lines, len } => {
                if tag >= NARROW_EMPTY as u64 {
                    return None; // no slot holds it (and it must not match an empty one)
                }
                let row = &Self::narrow(lines, *len)[first..first + ways];
                row.iter().position(|&t| t == tag as u32)
            }
            Keys::Wide(v) => v[first..first + ways].iter().position(|&t| t == tag),
        };
        way.map(|w| first + w)
    }

    /// Host prefetch of the row whose first slot is `first` (its first host line: a whole
    /// 16-way row of narrow tags); changes nothing.
    #[inline]
    pub(super) fn prefetch(&self, first: usize) {
        match &self.0 {
            Keys::Narrow { lines, .. } => {
                if let Some(l) = lines.get(first / PER_LINE) {
                    crate::mem::host_prefetch(l);
                }
            }
            Keys::Wide(v) => {
                if let Some(t) = v.get(first) {
                    crate::mem::host_prefetch(t);
                }
            }
        }
    }

    /// The tag in `slot`, if it holds a page.
    #[inline]
    pub(super) fn tag_at(&self, slot: usize) -> Option<u64> {
        match &self.0 {
            Keys::Narrow { lines, .. } => Some(lines[slot / PER_LINE].0[slot % PER_LINE]).filter(|&t| t != NARROW_EMPTY).map(u64::from),
            Keys::Wide(v) => Some(v[slot]).filter(|&t| t != WIDE_EMPTY),
        }
    }

    /// Puts `tag` in `slot`; false (and nothing changed) if the tag is too wide for this TAR,
    /// which a VPN inside the virtual-address width never is.
    pub(super) fn put(&mut self, slot: usize, tag: u64) -> bool {
        match &mut self.0 {
            Keys::Narrow { lines, len } => match u32::try_from(tag) {
                Ok(t) if t != NARROW_EMPTY => {
                    Self::narrow_mut(lines, *len)[slot] = t;
                    true
                }
                _ => false,
            },
            Keys::Wide(_) if tag == WIDE_EMPTY => false,
            Keys::Wide(v) => {
                v[slot] = tag;
                true
            }
        }
    }

    /// Empties `slot`; returns the tag it held.
    pub(super) fn take(&mut self, slot: usize) -> Option<u64> {
        let tag = self.tag_at(slot);
        match &mut self.0 {
            Keys::Narrow { lines, len } => Self::narrow_mut(lines, *len)[slot] = NARROW_EMPTY,
            Keys::Wide(v) => v[slot] = WIDE_EMPTY,
        }
        tag
    }

    /// The slots that hold a page, with their tags, in slot order.
    pub(super) fn occupied(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        (0..self.len()).filter_map(|slot| self.tag_at(slot).map(|t| (slot, t)))
    }

    /// Whether the tags are kept narrow (for tests).
    #[cfg(test)]
    pub(super) fn is_narrow(&self) -> bool {
        matches!(self.0, Keys::Narrow { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both layouts answer alike, a narrow TAR's rows start on host lines, and a tag too wide for
    /// a narrow TAR is refused without changing it.
    #[test]
    fn narrow_and_wide_tars_answer_alike() {
        let (mut n, mut w) = (Tar::new(16 * 40, 1 << 30), Tar::new(16 * 40, u64::MAX));
        assert!(n.is_narrow() && !w.is_narrow());
        if let Keys::Narrow { lines, len } = &n.0 {
            let row = &Tar::narrow(lines, *len)[16 * 7..];
            assert_eq!(row.as_ptr() as usize % 64, 0, "a 16-way row is one host line");
        }
        let mut rng = crate::rng::Rng::new(3);
        for _ in 0..20_000 {
            let (slot, tag) = (rng.below(640) as usize, rng.below(1 << 12));
            match rng.below(3) {
                0 => assert_eq!(n.put(slot, tag), w.put(slot, tag)),
                1 => assert_eq!(n.take(slot), w.take(slot)),
                _ => {
                    let set = slot / 16;
                    // The host prefetch of a row, even one past the end, changes no answer.
                    for t in [&n, &w] {
                        t.prefetch(set * 16);
                        t.prefetch(set * 16 + 16 * 50);
                    }
                    assert_eq!(n.find(set * 16, 16, tag), w.find(set * 16, 16, tag));
                }
            }
            assert_eq!(n.tag_at(slot), w.tag_at(slot));
        }
        assert!(n.occupied().eq(w.occupied()));
        assert!(n.occupied().count() > 100);
        assert!(!n.put(3, u32::MAX as u64) && !n.put(3, 1 << 40));
        assert_eq!(n.find(0, 16, u32::MAX as u64), None, "an empty slot matches no tag");
        assert_eq!(n.find(0, 16, 1 << 40), None);
    }
}
