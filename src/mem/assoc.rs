//! A generic set-associative tag store with pluggable replacement.
//!
//! Every associative structure in xlate (data caches, TLBs, page-walk caches, POM-TLB, Utopia's RestSeg)
//! is "tags grouped in sets, choose a victim when a set is full". This type holds only the tags and the
//! replacement state. Callers keep their payload (dirty bits, PFNs, page sizes, ...) in their own arrays
//! indexed by [`SetAssoc::slot`], so a lookup scans one contiguous slice of tags ([`Tag`]: `u64` or `u32`)
//! and nothing else.
//!
//! Contract:
//! - everything is allocated in [`SetAssoc::new`]; no method allocates afterwards;
//! - behaviour is deterministic (no randomness anywhere, ties go to the lowest way);
//! - a tag is unique within its set (callers [`SetAssoc::probe`] or [`SetAssoc::lookup`] before
//!   [`SetAssoc::insert`]), and [`Tag::INVALID`] (all ones; [`INVALID_TAG`] for `u64`) is never a real tag.

use std::fmt;

/// Replacement policy of a [`SetAssoc`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Replacement {
    /// Least recently used: the victim is the valid way touched longest ago.
    Lru,
    /// Static re-reference interval prediction (Jaleel et al., ISCA'10) with 2-bit RRPVs and hit
    /// promotion to 0: a fill is predicted "long" (RRPV 2), so a line used once leaves before lines that
    /// were reused, which makes the policy resistant to scans.
    Srrip,
}

/// The tag value reserved to mark an invalid way. Callers must never store it as a real tag; real tags
/// (line numbers, virtual page numbers) never reach `u64::MAX`.
pub const INVALID_TAG: u64 = u64::MAX;

/// The type a [`SetAssoc`] stores its tags in: `u64` for any tag, `u32` where the owner can
/// narrow its tags (a cache of physical lines stores `line >> set bits`), which halves the host
/// memory a set's tags take, so a 16-way set's tags fill one host cache line
/// (docs/performance.md, "Narrow cache tags").
pub trait Tag: Copy + Eq + fmt::Debug + fmt::LowerHex + bytemuck::Pod + 'static {
    /// The reserved "invalid way" value (all ones); never a real tag.
    const INVALID: Self;
    /// `x` as a tag, if it fits and is not [`Tag::INVALID`].
    fn narrow(x: u64) -> Option<Self>;
    /// The tag's value.
    fn widen(self) -> u64;
    /// Bit `w` set where `tags[w] == tag`, for at most 64 tags. Compares every way (no early
    /// exit: the matching way is random, so an exit mispredicts; docs/performance.md,
    /// "Branch-free set search").
    fn match_mask(tags: &[Self], tag: Self) -> u64;
}

/// [`Tag::match_mask`] without vector instructions (other targets, and the last few tags of a
/// set whose width is not a multiple of the vector's).
#[inline(always)]
fn match_mask_scalar<T: Tag>(tags: &[T], tag: T, first_way: usize) -> u64 {
    tags.iter().enumerate().fold(0u64, |m, (w, &t)| m | (u64::from(t == tag) << (first_way + w)))
}

/// SSE2 compares of 16 bytes of tags at a time (4 `u32`s or 2 `u64`s), one movemask each: a
/// 16-way set of `u32` tags is 4 compares. SSE2 has no 64-bit compare, so a `u64` lane matches
/// where both of its 32-bit halves do.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::{match_mask_scalar, Tag};
    use std::arch::x86_64::*;

    /// The mask of `tags` from `chunk`'s masks of 16-byte chunks (`lanes` tags each), the
    /// remainder compared one by one.
    #[inline(always)]
    fn by_chunks<T: Tag>(tags: &[T], tag: T, lanes: usize, chunk: impl Fn(__m128i) -> u64) -> u64 {
        let chunks = tags.chunks_exact(lanes);
        let rest = chunks.remainder();
        let mut m = 0u64;
        for (c, q) in chunks.enumerate() {
            // SAFETY: SSE2 is part of the x86_64 baseline, so the load exists on every x86_64
            // host; `q` is one chunk of `lanes` tags, exactly the 16 bytes read. Checked against
            // the scalar version by `mem::assoc::tests::vector_match_equals_scalar`.
            let v = unsafe { _mm_loadu_si128(q.as_ptr().cast()) };
            m |= chunk(v) << (lanes * c);
        }
        m | match_mask_scalar(rest, tag, tags.len() - rest.len())
    }

    /// `N` = 4 or 8 `u16`s as a vector (lanes past `N` are 0).
    #[inline(always)]
    fn load<const N: usize>(q: &[u16; N]) -> __m128i {
        const { assert!(N == 4 || N == 8) };
        // SAFETY: SSE2 is baseline on x86_64; each load reads exactly the `2 N` bytes of `q`
        // (`loadl` reads 8).
        unsafe {
            if N == 8 {
                _mm_loadu_si128(q.as_ptr().cast())
            } else {
                _mm_loadl_epi64(q.as_ptr().cast())
            }
        }
    }

    /// Writes the first `N` = 4 or 8 lanes of `v` into `q`.
    #[inline(always)]
    fn store<const N: usize>(q: &mut [u16; N], v: __m128i) {
        const { assert!(N == 4 || N == 8) };
        // SAFETY: SSE2 is baseline on x86_64; each store writes exactly the `2 N` bytes of `q`
        // (`storel` writes 8).
        unsafe {
            if N == 8 {
                _mm_storeu_si128(q.as_mut_ptr().cast(), v)
            } else {
                _mm_storel_epi64(q.as_mut_ptr().cast(), v)
            }
        }
    }

    /// The largest of a set's `u16` states, `lo` (4 or 8 ways) then `hi` (4 or 8 more, if any),
    /// and the lowest way holding it: `xor 0x8000` maps their order onto SSE2's signed 16-bit
    /// max, three shuffles spread the maximum to every lane, and one compare and movemask (two
    /// bits per lane) name its first way. Lanes past a 4-way half load as 0, the smallest state
    /// after the flip, so they can only tie with a real way, which comes first.
    #[inline(always)]
    pub(super) fn max_way<const A: usize, const B: usize>(lo: &[u16; A], hi: Option<&[u16; B]>) -> (u16, usize) {
        // SAFETY: SSE2 register operations, baseline on x86_64 (the loads are `load`'s). Checked
        // against the scalar form by `mem::assoc::tests::vector_victim_equals_scalar`.
        unsafe {
            let flip = _mm_set1_epi16(i16::MIN);
            let a = _mm_xor_si128(load(lo), flip);
            let b = hi.map_or(a, |h| _mm_xor_si128(load(h), flip));
            let mut m = _mm_max_epi16(a, b);
            m = _mm_max_epi16(m, _mm_shuffle_epi32::<0b01_00_11_10>(m));
            m = _mm_max_epi16(m, _mm_shuffle_epi32::<0b10_11_00_01>(m));
            m = _mm_max_epi16(m, _mm_or_si128(_mm_slli_epi32::<16>(m), _mm_srli_epi32::<16>(m)));
            let mut mask = _mm_movemask_epi8(_mm_cmpeq_epi16(a, m)) as u32 & ((1 << (2 * A)) - 1);
            if hi.is_some() {
                mask |= (_mm_movemask_epi8(_mm_cmpeq_epi16(b, m)) as u32 & ((1 << (2 * B)) - 1)) << (2 * A);
            }
            ((_mm_cvtsi128_si32(m) as u16) ^ 0x8000, mask.trailing_zeros() as usize / 2)
        }
    }

    /// Adds 1 to each of `N` = 4 or 8 `u16` LRU ranks below `r` (`xor 0x8000` maps unsigned
    /// order onto SSE2's signed compare; the compare's all-ones lanes are -1, so subtracting
    /// them adds 1).
    #[inline(always)]
    pub(super) fn age_below<const N: usize>(meta: &mut [u16; N], r: u16) {
        // SAFETY: SSE2 register operations, baseline on x86_64 (the load and store are `load`'s
        // and `store`'s). Checked against the scalar form by
        // `mem::assoc::tests::vector_age_equals_scalar`.
        unsafe {
            let flip = _mm_set1_epi16(i16::MIN);
            let rv = _mm_xor_si128(_mm_set1_epi16(r as i16), flip);
            let v = load(meta);
            let below = _mm_cmpgt_epi16(rv, _mm_xor_si128(v, flip));
            store(meta, _mm_sub_epi16(v, below));
        }
    }

    /// A fill of a full LRU set of `A` (4 or 8) plus `B` (4 or 8, if `hi`) ways: if a rank is
    /// `last` (= ways - 1: the least recently used way; only a full set holds that rank), every
    /// rank goes up by one and that way's becomes 0 (most recent), and its way is returned; else
    /// nothing changes. The same state as `max_way` then `age_below` would leave, in one compare
    /// per half instead of the maximum's shuffles.
    #[inline(always)]
    pub(super) fn rotate_full<const A: usize, const B: usize>(lo: &mut [u16; A], hi: Option<&mut [u16; B]>, last: u16) -> Option<usize> {
        // SAFETY: SSE2 register operations, baseline on x86_64 (the loads and stores are
        // `load`'s and `store`'s). Checked against `max_way` and `age_below` by
        // `mem::assoc::tests::full_set_rotation_equals_victim_then_promote`.
        unsafe {
            let l = _mm_set1_epi16(last as i16);
            let one = _mm_set1_epi16(1);
            let a = load(lo);
            let ea = _mm_cmpeq_epi16(a, l);
            let mut mask = _mm_movemask_epi8(ea) as u32 & ((1 << (2 * A)) - 1);
            let b = hi.as_deref().map(load);
            let eb = b.map(|b| _mm_cmpeq_epi16(b, l));
            if let Some(eb) = eb {
                mask |= (_mm_movemask_epi8(eb) as u32 & ((1 << (2 * B)) - 1)) << (2 * A);
            }
            if mask == 0 {
                return None;
            }
            store(lo, _mm_andnot_si128(ea, _mm_add_epi16(a, one)));
            if let (Some(h), Some(b), Some(eb)) = (hi, b, eb) {
                store(h, _mm_andnot_si128(eb, _mm_add_epi16(b, one)));
            }
            Some(mask.trailing_zeros() as usize / 2)
        }
    }

    #[inline(always)]
    pub(super) fn mask_u32(tags: &[u32], tag: u32) -> u64 {
        if let Ok(q) = <&[u32; 16]>::try_from(tags) {
            return mask_u32x16(q, tag);
        }
        // SAFETY (both blocks): SSE2 register operations, baseline on x86_64.
        let t = unsafe { _mm_set1_epi32(tag as i32) };
        by_chunks(tags, tag, 4, |v| unsafe { _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(v, t))) as u64 })
    }

    /// [`mask_u32`] of 16 tags (the 16-way caches): the four compares' lanes (all ones where
    /// equal) narrowed by two saturating packs to one byte per tag, in order, so one movemask
    /// gives the whole mask (instead of a movemask, shift and or per 4 tags).
    #[inline(always)]
    fn mask_u32x16(tags: &[u32; 16], tag: u32) -> u64 {
        // SAFETY: SSE2 is baseline on x86_64; each load reads 16 of the 64 bytes of `tags`.
        // Checked against the scalar version by `mem::assoc::tests::vector_match_equals_scalar`.
        unsafe {
            let t = _mm_set1_epi32(tag as i32);
            let p = tags.as_ptr().cast::<__m128i>();
            let eq = |i: usize| _mm_cmpeq_epi32(_mm_loadu_si128(p.add(i)), t);
            let lo = _mm_packs_epi32(eq(0), eq(1));
            let hi = _mm_packs_epi32(eq(2), eq(3));
            _mm_movemask_epi8(_mm_packs_epi16(lo, hi)) as u32 as u64
        }
    }

    #[inline(always)]
    pub(super) fn mask_u64(tags: &[u64], tag: u64) -> u64 {
        // SAFETY (both blocks): SSE2 register operations, baseline on x86_64.
        let t = unsafe { _mm_set1_epi64x(tag as i64) };
        by_chunks(tags, tag, 2, |v| unsafe {
            let halves = _mm_cmpeq_epi32(v, t);
            let both = _mm_and_si128(halves, _mm_shuffle_epi32::<0b10_11_00_01>(halves));
            _mm_movemask_pd(_mm_castsi128_pd(both)) as u64
        })
    }
}

impl Tag for u64 {
    const INVALID: Self = u64::MAX;
    #[inline(always)]
    fn narrow(x: u64) -> Option<Self> {
        (x != Self::INVALID).then_some(x)
    }
    #[inline(always)]
    fn widen(self) -> u64 {
        self
    }
    #[inline(always)]
    fn match_mask(tags: &[Self], tag: Self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        return sse2::mask_u64(tags, tag);
        #[cfg(not(target_arch = "x86_64"))]
        return match_mask_scalar(tags, tag, 0);
    }
}

impl Tag for u32 {
    const INVALID: Self = u32::MAX;
    #[inline(always)]
    fn narrow(x: u64) -> Option<Self> {
        (x < u64::from(Self::INVALID)).then_some(x as u32)
    }
    #[inline(always)]
    fn widen(self) -> u64 {
        u64::from(self)
    }
    #[inline(always)]
    fn match_mask(tags: &[Self], tag: Self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        return sse2::mask_u32(tags, tag);
        #[cfg(not(target_arch = "x86_64"))]
        return match_mask_scalar(tags, tag, 0);
    }
}

/// Largest 2-bit RRPV: "distant re-reference", the only value that can be evicted.
const RRPV_DISTANT: u16 = 3;
/// SRRIP state of an invalid way: above every RRPV, so the victim search (largest state, lowest
/// way among equals) takes the lowest-index invalid way first without a scan of the tags.
const RRPV_INVALID: u16 = RRPV_DISTANT + 1;
/// RRPV given to a fill: "long re-reference" (Jaleel et al. ISCA'10: SRRIP inserts at 2^M - 2, here M = 2).
const RRPV_LONG: u16 = 2;

/// LRU state of an invalid way is `INVALID_RANK + (ways - 1 - way)`: above every valid way's rank,
/// so the victim search (largest state) takes invalid ways first, lowest index first.
const INVALID_RANK: u16 = 0x8000;

/// Most ways a set may have: LRU ranks and the invalid marks above share one `u16` per way.
pub const MAX_WAYS: u32 = INVALID_RANK as u32;

/// Checks `ways` against [`MAX_WAYS`] for the config key `key`.
pub fn check_ways(key: &str, ways: u64) -> crate::error::Result<()> {
    if ways > u64::from(MAX_WAYS) {
        return Err(crate::error::Error::config(
            key.to_string(),
            format!("at most {MAX_WAYS} ways per set are supported (got {ways}); a larger fully associative structure is not modelled"),
        ));
    }
    Ok(())
}

/// The largest of a set's replacement states and the lowest way holding it: the victim of both
/// policies (their states put invalid ways above valid ones). A max has no data-dependent exit
/// (a search for the maximum's position mispredicts on its random way). The common widths use
/// SSE2 ([`sse2::max_way`]); the rest, and other targets, one max over `i32` keys: the state
/// above 15 bits of inverted way (states are below 2^16 and ways at most [`MAX_WAYS`] = 2^15), so
/// that the largest key is the largest state at its lowest way.
#[inline(always)]
fn max_way(meta: &[u16]) -> (u16, usize) {
    #[cfg(target_arch = "x86_64")]
    match meta.len() {
        16 => return sse2::max_way::<8, 8>(meta[..8].try_into().expect("8 ways"), Some(meta[8..].try_into().expect("8 ways"))),
        12 => return sse2::max_way::<8, 4>(meta[..8].try_into().expect("8 ways"), Some(meta[8..].try_into().expect("4 ways"))),
        8 => return sse2::max_way::<8, 8>(meta.try_into().expect("8 ways"), None),
        4 => return sse2::max_way::<4, 4>(meta.try_into().expect("4 ways"), None),
        _ => {}
    }
    max_way_scalar(meta)
}

/// [`max_way`] as one max over keys (every width, and the reference the vector form is tested
/// against).
#[inline(always)]
fn max_way_scalar(meta: &[u16]) -> (u16, usize) {
    let key = meta.iter().enumerate().map(|(w, &m)| i32::from(m) << 15 | (0x7FFF - w as i32)).max().unwrap_or(0x7FFF);
    ((key >> 15) as u16, (0x7FFF - (key & 0x7FFF)) as usize)
}

/// Ages by one every LRU rank of `meta` below `r`: for 4, 8, 12 and 16 ways a few SSE2 instructions
/// ([`sse2::age_below`]; the compiler's own vectorization of the loop left half of a 16-way set
/// scalar), else the loop.
#[inline(always)]
fn age_below(meta: &mut [u16], r: u16) {
    #[cfg(target_arch = "x86_64")]
    match meta.len() {
        16 | 12 => {
            let (lo, hi) = meta.split_at_mut(8);
            sse2::age_below::<8>(lo.try_into().expect("8 ways"), r);
            match hi.len() {
                8 => sse2::age_below::<8>(hi.try_into().expect("8 ways"), r),
                _ => sse2::age_below::<4>(hi.try_into().expect("4 ways"), r),
            }
            return;
        }
        8 => return sse2::age_below::<8>(meta.try_into().expect("8 ways"), r),
        4 => return sse2::age_below::<4>(meta.try_into().expect("4 ways"), r),
        _ => {}
    }
    age_below_scalar(meta, r);
}

/// [`age_below`] one way at a time (every width, and the reference the vector form is tested
/// against).
#[inline(always)]
fn age_below_scalar(meta: &mut [u16], r: u16) {
    meta.iter_mut().for_each(|m| *m += u16::from(*m < r));
}

/// [`sse2::rotate_full`] for the widths it serves (4, 8, 12 and 16 ways); `None` (nothing done)
/// for other widths and targets, whose callers take the general path.
#[inline(always)]
fn rotate_full(meta: &mut [u16]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        let last = meta.len() as u16 - 1;
        match meta.len() {
            16 | 12 => {
                let (lo, hi) = meta.split_at_mut(8);
                let lo: &mut [u16; 8] = lo.try_into().expect("8 ways");
                return match hi.len() {
                    8 => sse2::rotate_full::<8, 8>(lo, Some(hi.try_into().expect("8 ways")), last),
                    _ => sse2::rotate_full::<8, 4>(lo, Some(hi.try_into().expect("4 ways")), last),
                };
            }
            8 => return sse2::rotate_full::<8, 8>(meta.try_into().expect("8 ways"), None, last),
            4 => return sse2::rotate_full::<4, 4>(meta.try_into().expect("4 ways"), None, last),
            _ => {}
        }
    }
    let _ = meta;
    None
}

/// The compiled form of a store's hot operations ([`SetAssoc::lookup`], [`SetAssoc::insert`],
/// ...): the common (width, policy) pairs get code with both as constants, so an operation
/// dispatches once, on this, instead of on the width in each of its steps (the tag search, the
/// victim search, the LRU ageing) and on the policy in between; other pairs run the general code.
/// Chosen once, in [`SetAssoc::new`] (docs/performance.md, "One dispatch per set operation").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Lru4,
    Lru8,
    Lru12,
    Lru16,
    Srrip16,
    Lru,
    Srrip,
}

impl Shape {
    fn of(ways: usize, policy: Replacement) -> Shape {
        match (policy, ways) {
            (Replacement::Lru, 4) => Shape::Lru4,
            (Replacement::Lru, 8) => Shape::Lru8,
            (Replacement::Lru, 12) => Shape::Lru12,
            (Replacement::Lru, 16) => Shape::Lru16,
            (Replacement::Srrip, 16) => Shape::Srrip16,
            (Replacement::Lru, _) => Shape::Lru,
            (Replacement::Srrip, _) => Shape::Srrip,
        }
    }
}

/// Calls `$self.$op::<W, SRRIP>($args)` with the store's width `W` (0: not a constant) and policy
/// as constants ([`Shape`]).
macro_rules! by_shape {
    ($self:ident . $op:ident ( $($arg:expr),* )) => {
        match $self.shape {
            Shape::Lru4 => $self.$op::<4, false>($($arg),*),
            Shape::Lru8 => $self.$op::<8, false>($($arg),*),
            Shape::Lru12 => $self.$op::<12, false>($($arg),*),
            Shape::Lru16 => $self.$op::<16, false>($($arg),*),
            Shape::Srrip16 => $self.$op::<16, true>($($arg),*),
            Shape::Lru => $self.$op::<0, false>($($arg),*),
            Shape::Srrip => $self.$op::<0, true>($($arg),*),
        }
    };
}

/// The policy a [`Shape`]'s code is compiled for.
#[inline(always)]
const fn policy_of<const SRRIP: bool>() -> Replacement {
    if SRRIP {
        Replacement::Srrip
    } else {
        Replacement::Lru
    }
}

/// A set-associative array of tags with LRU or SRRIP replacement.
///
/// Host layout (docs/performance.md): a set's tags are `ways` consecutive `T`s followed by its
/// replacement state, `ways` `u16`s, so a 16-way set's state is 32 bytes next to its tags and a
/// miss's victim search is a few vector instructions.
#[derive(Clone)]
pub struct SetAssoc<T: Tag = u64> {
    sets: usize,
    ways: usize,
    policy: Replacement,
    shape: Shape,
    /// Words per set holding its tags (`ways` `T`s, rounded up to whole words).
    tag_words: usize,
    /// Words per set: `tag_words`, then the `ways` `u16` replacement states packed four to a word,
    /// then (if asked for: [`SetAssoc::with_way_bytes`]) a byte per way for the owner, then
    /// padding to a power of two words up to a host line, whole host lines beyond.
    stride: usize,
    /// Byte offset of the ways' bytes within a set (0 if the store has none).
    bytes_at: usize,
    /// Set-major; each set is `stride` words: its tags ([`Tag::INVALID`] in empty ways), then its
    /// replacement state (then the ways' bytes, if any). Keeping them adjacent means a miss, which
    /// reads both, touches one contiguous run of host memory, and aligning the sets to host lines
    /// keeps that run to as few lines as its size needs: a 16-way set of `u32` tags two (128
    /// bytes with its flag bytes and padding), an 8-way one one; unaligned, the 96 bytes of the
    /// former spanned three lines in every other set (docs/performance.md, "Sets aligned to host
    /// lines").
    ///
    /// Replacement state:
    /// LRU: the recency rank of each valid way (0 = most recently used; the valid ways of a set hold
    /// 0..valid-1, each once) and `INVALID_RANK + (ways - 1 - way)` for an invalid way. Ranks give
    /// the same order as timestamps but fit 16 bits, and a hit on the most recent way changes
    /// nothing. SRRIP: the RRPV 0..=3 ([`RRPV_INVALID`] in invalid ways).
    data: Vec<HostLine>,
    tag: std::marker::PhantomData<T>,
}

/// 64 bytes aligned as a host cache line: `SetAssoc`'s storage, so that a set never straddles
/// more host lines than its size needs.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct HostLine([u64; 8]);

// SAFETY: `repr(C)` over `[u64; 8]`: 64 bytes, no padding, every bit pattern valid.
unsafe impl bytemuck::Zeroable for HostLine {}
// SAFETY: as above; `Copy` and `'static`.
unsafe impl bytemuck::Pod for HostLine {}

impl<T: Tag> fmt::Debug for SetAssoc<T> {
    // The tag arrays can hold millions of entries; print the shape, not the contents.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetAssoc").field("sets", &self.sets).field("ways", &self.ways).field("policy", &self.policy).finish()
    }
}

impl<T: Tag> SetAssoc<T> {
    /// An empty store of `sets` × `ways`. `sets` should be a power of two so callers can index by masking
    /// (the caller validates its config; this type works with any `sets >= 1`). Panics if `ways` or `sets`
    /// is 0 or `ways` exceeds [`MAX_WAYS`] (configs check with [`check_ways`]).
    pub fn new(sets: usize, ways: usize, policy: Replacement) -> Self {
        Self::build(sets, ways, policy, false)
    }

    /// [`SetAssoc::new`] with a byte per way stored in the set, beside its tags and replacement
    /// state, for the owner's per-line flags ([`SetAssoc::byte_index`]): a lookup and the flag
    /// update after it then touch the same host lines (a 16-way cache set of `u32` tags: 112 of
    /// its 128 bytes), instead of a parallel array's line as well.
    pub fn with_way_bytes(sets: usize, ways: usize, policy: Replacement) -> Self {
        Self::build(sets, ways, policy, true)
    }

    fn build(sets: usize, ways: usize, policy: Replacement, way_bytes: bool) -> Self {
        assert!(sets >= 1 && ways >= 1, "a set-associative store needs at least one set and one way (got {sets} × {ways})");
        assert!(ways <= MAX_WAYS as usize, "{ways} ways exceed the {MAX_WAYS} supported");
        // The set accessors' safety rests on this layout (`SetAssoc::set_base`).
        const { assert!(std::mem::align_of::<T>() <= 8) };
        let tag_words = (ways * std::mem::size_of::<T>()).div_ceil(8);
        // Sets of up to a host line are a power of two words (never straddling two lines);
        // larger ones whole lines.
        let state_words = tag_words + ways.div_ceil(4);
        let words = state_words + if way_bytes { ways.div_ceil(8) } else { 0 };
        let stride = if words <= 8 { words.next_power_of_two() } else { words.div_ceil(8) * 8 };
        let bytes_at = if way_bytes { state_words * 8 } else { 0 };
        let n = sets.checked_mul(stride).expect("sets × ways overflows usize");
        let data = vec![HostLine([0; 8]); n.div_ceil(8)];
        let shape = Shape::of(ways, policy);
        let mut s = SetAssoc { sets, ways, policy, shape, tag_words, stride, bytes_at, data, tag: std::marker::PhantomData };
        s.clear();
        s
    }

    /// The storage as words.
    #[inline(always)]
    fn words(&self) -> &[u64] {
        bytemuck::cast_slice(&self.data)
    }

    /// Where the byte of (`set`, `way`) is ([`SetAssoc::with_way_bytes`]), for
    /// [`SetAssoc::byte`] and [`SetAssoc::byte_mut`]; owners may keep it as a slot's handle.
    #[inline(always)]
    pub fn byte_index(&self, set: usize, way: usize) -> usize {
        debug_assert!(self.bytes_at != 0 && way < self.ways, "no byte for way {way}");
        set * self.stride * 8 + self.bytes_at + way
    }

    /// The byte at `index` ([`SetAssoc::byte_index`]).
    #[inline(always)]
    pub fn byte(&self, index: usize) -> u8 {
        bytemuck::cast_slice::<HostLine, u8>(&self.data)[index]
    }

    /// The byte at `index` ([`SetAssoc::byte_index`]), mutably.
    #[inline(always)]
    pub fn byte_mut(&mut self, index: usize) -> &mut u8 {
        &mut self.bytes_mut()[index]
    }

    /// The storage as bytes, mutably.
    #[inline(always)]
    fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.data)
    }

    /// Replacement state of invalid way `way`.
    #[inline(always)]
    fn empty_meta(&self, way: usize) -> u16 {
        match self.policy {
            Replacement::Lru => INVALID_RANK + (self.ways - 1 - way) as u16,
            Replacement::Srrip => RRPV_INVALID,
        }
    }

    /// Number of sets.
    #[inline(always)]
    pub fn sets(&self) -> usize {
        self.sets
    }

    /// Number of ways per set.
    #[inline(always)]
    pub fn ways(&self) -> usize {
        self.ways
    }

    /// Replacement policy.
    #[inline(always)]
    pub fn policy(&self) -> Replacement {
        self.policy
    }

    /// Index of (`set`, `way`) in a flat `sets * ways` array, for callers' parallel payload arrays.
    #[inline(always)]
    pub fn slot(&self, set: usize, way: usize) -> usize {
        set * self.ways + way
    }

    /// The first word of `set`. Panics unless `set < sets`. That one compare is the only bounds
    /// check the set accessors below need: [`SetAssoc::new`] sized `data` to at least `sets ×
    /// stride` words and never resizes it, and within a set the first `tag_words` words hold its
    /// `ways` tags and the next ones its `ways` `u16` states, so every slice they cut
    /// lies inside `data` (the slice checks and casts they replace cost a GUPS access about 150
    /// instructions; docs/performance.md, "Set accessors").
    #[inline(always)]
    fn set_base(&self, set: usize) -> *const u64 {
        assert!(set < self.sets, "set {set} of a {}-set store", self.sets);
        // SAFETY: set * stride < sets * stride <= the words of `data`, inside the allocation;
        // `HostLine` is eight `u64`s (64-byte aligned), so the cast pointer is aligned for `u64`.
        unsafe { self.data.as_ptr().cast::<u64>().add(set * self.stride) }
    }

    /// [`SetAssoc::set_base`], for writing.
    #[inline(always)]
    fn set_base_mut(&mut self, set: usize) -> *mut u64 {
        assert!(set < self.sets, "set {set} of a {}-set store", self.sets);
        // SAFETY: as in `set_base`.
        unsafe { self.data.as_mut_ptr().cast::<u64>().add(set * self.stride) }
    }

    /// The tags of `set`.
    #[inline(always)]
    fn set_tags(&self, set: usize) -> &[T] {
        // SAFETY (this and the accessors below): `set_base` checked the set; its `ways` tags
        // fill at most its `tag_words` words and its `ways` states at most the `stride -
        // tag_words` words after them (`new`), so the two slices are in bounds and disjoint, and
        // each borrows `self` as the reference it came from does. `T` is `Pod` (any bits are a
        // valid tag) and at most 8-byte aligned (`new` asserts it), as is every word; so is `u16`.
        // Exercised on both tag types and many widths by `lru_ranks_match_timestamps`, and by
        // every cache, TLB and walk-cache test; `set_beyond_the_store_panics` checks the bound.
        unsafe { std::slice::from_raw_parts(self.set_base(set).cast::<T>(), self.ways) }
    }

    /// The tags of `set`, mutably.
    #[inline(always)]
    fn set_tags_mut(&mut self, set: usize) -> &mut [T] {
        let ways = self.ways;
        // SAFETY: see `set_tags`.
        unsafe { std::slice::from_raw_parts_mut(self.set_base_mut(set).cast::<T>(), ways) }
    }

    /// The number of ways and of tag words of a store of `W` ways (0: not a constant, read from
    /// `self`). The operations compiled for a [`Shape`] pass its width as `W`, so the slices the
    /// set accessors cut have constant lengths and every match on those lengths downstream folds
    /// away. `W` is either 0 or `self.ways`: [`SetAssoc::build`] derives the shape from `ways`,
    /// and neither changes afterwards; the set accessors' safety rests on it.
    #[inline(always)]
    fn geometry<const W: usize>(&self) -> (usize, usize) {
        debug_assert!(W == 0 || W == self.ways, "a {W}-way operation on a {}-way store", self.ways);
        if W == 0 {
            (self.ways, self.tag_words)
        } else {
            (W, (W * std::mem::size_of::<T>()).div_ceil(8))
        }
    }

    /// The tags of `set`, for a store of `W` ways (0: any; [`SetAssoc::geometry`]).
    #[inline(always)]
    fn set_tags_w<const W: usize>(&self, set: usize) -> &[T] {
        let (ways, _) = self.geometry::<W>();
        // SAFETY: see `set_tags`; `ways` is the store's (`geometry`).
        unsafe { std::slice::from_raw_parts(self.set_base(set).cast::<T>(), ways) }
    }

    /// The tags and the replacement state of `set`, for a store of `W` ways (0: any;
    /// [`SetAssoc::geometry`]).
    #[inline(always)]
    fn set_parts_w<const W: usize>(&mut self, set: usize) -> (&mut [T], &mut [u16]) {
        let (ways, tag_words) = self.geometry::<W>();
        let base = self.set_base_mut(set);
        // SAFETY: see `set_tags`; `ways` and `tag_words` are the store's (`geometry`), and the
        // tags end before word `tag_words`, where the states begin.
        unsafe {
            (
                std::slice::from_raw_parts_mut(base.cast::<T>(), ways),
                std::slice::from_raw_parts_mut(base.add(tag_words).cast::<u16>(), ways),
            )
        }
    }

    /// The replacement state of `set`.
    #[inline(always)]
    fn set_meta(&mut self, set: usize) -> &mut [u16] {
        let (ways, tag_words) = (self.ways, self.tag_words);
        // SAFETY: see `set_tags`.
        unsafe { std::slice::from_raw_parts_mut(self.set_base_mut(set).add(tag_words).cast::<u16>(), ways) }
    }

    /// The way of `set` holding `tag` (the lowest, for [`Tag::INVALID`]). The scan compares every
    /// way into a bit mask instead of stopping at the match: an early exit mispredicts on the
    /// hit's way, which is random (docs/performance.md, "Branch-free set search").
    #[inline(always)]
    fn find(&self, set: usize, tag: T) -> Option<usize> {
        by_shape!(self.find_w(set, tag))
    }

    /// [`SetAssoc::find`] for `W` ways (0: any); the policy does not matter.
    #[inline(always)]
    fn find_w<const W: usize, const SRRIP: bool>(&self, set: usize, tag: T) -> Option<usize> {
        Self::find_in(self.set_tags_w::<W>(set), tag)
    }

    /// The way of a set's `tags` holding `tag`, as [`SetAssoc::find`] searches it.
    #[inline(always)]
    fn find_in(tags: &[T], tag: T) -> Option<usize> {
        if tags.len() > 64 {
            return tags.iter().position(|&t| t == tag);
        }
        // The common widths get a fixed length, so the compares unroll with no loop.
        let hits = match tags.len() {
            16 => T::match_mask(<&[T; 16]>::try_from(tags).expect("16 ways"), tag),
            8 => T::match_mask(<&[T; 8]>::try_from(tags).expect("8 ways"), tag),
            4 => T::match_mask(<&[T; 4]>::try_from(tags).expect("4 ways"), tag),
            _ => T::match_mask(tags, tag),
        };
        (hits != 0).then(|| hits.trailing_zeros() as usize)
    }

    /// Makes `way` the most recently used way of its set (`meta` is the set's LRU state). The ways
    /// more recent than it age by one; a way that was invalid counts as older than every valid way.
    #[inline(always)]
    fn promote(meta: &mut [u16], way: usize) {
        let r = meta[way];
        if r == 0 {
            return; // already the most recent: nothing moves
        }
        let r = r.min(INVALID_RANK);
        // Branch-free over the whole set; invalid ways (>= INVALID_RANK) never move.
        age_below(meta, r);
        meta[way] = 0;
    }

    /// Puts `tag` in `way` of a set (`tags`, `meta`) with a fill's replacement state (LRU: most
    /// recent; SRRIP: long re-reference); returns the tag it replaced, if valid.
    #[inline(always)]
    fn fill_way(policy: Replacement, tags: &mut [T], meta: &mut [u16], way: usize, tag: T) -> Option<T> {
        let old = std::mem::replace(&mut tags[way], tag);
        match policy {
            Replacement::Lru => Self::promote(meta, way),
            Replacement::Srrip => meta[way] = RRPV_LONG,
        }
        (old != T::INVALID).then_some(old)
    }

    /// Marks `way` of `set` as just used: LRU makes it most recently used, SRRIP predicts near
    /// re-reference (RRPV 0).
    #[inline(always)]
    fn touch_at(&mut self, set: usize, way: usize) {
        by_shape!(self.touch_w(set, way))
    }

    /// [`SetAssoc::touch_at`] for `W` ways (0: any) under SRRIP or LRU.
    #[inline(always)]
    fn touch_w<const W: usize, const SRRIP: bool>(&mut self, set: usize, way: usize) {
        Self::hit_state(policy_of::<SRRIP>(), self.set_parts_w::<W>(set).1, way);
    }

    /// Replacement state of a way just hit ([`SetAssoc::touch_at`] on a set's state `meta`).
    #[inline(always)]
    fn hit_state(policy: Replacement, meta: &mut [u16], way: usize) {
        match policy {
            Replacement::Lru => Self::promote(meta, way),
            Replacement::Srrip => meta[way] = 0,
        }
    }

    /// Looks `tag` up in `set`. On a hit returns the way and updates the replacement state as a use
    /// (LRU: most recently used; SRRIP: RRPV 0).
    #[inline(always)]
    pub fn lookup(&mut self, set: usize, tag: T) -> Option<usize> {
        debug_assert!(tag != T::INVALID, "the invalid tag is reserved");
        by_shape!(self.lookup_w(set, tag))
    }

    /// [`SetAssoc::lookup`] for `W` ways (0: any) under SRRIP or LRU.
    #[inline(always)]
    fn lookup_w<const W: usize, const SRRIP: bool>(&mut self, set: usize, tag: T) -> Option<usize> {
        let (tags, meta) = self.set_parts_w::<W>(set);
        let way = Self::find_in(tags, tag)?;
        Self::hit_state(policy_of::<SRRIP>(), meta, way);
        Some(way)
    }

    /// [`SetAssoc::lookup`] of `tag`, and on a miss [`SetAssoc::insert`] of it, in one
    /// dispatch on one cut of the set (a cache level's demand access): the way, whether it hit,
    /// and on a miss the tag evicted, if that way held a valid one.
    #[inline(always)]
    pub fn lookup_or_insert(&mut self, set: usize, tag: T) -> (usize, bool, Option<T>) {
        debug_assert!(tag != T::INVALID, "the invalid tag is reserved");
        by_shape!(self.lookup_or_insert_w(set, tag))
    }

    /// [`SetAssoc::lookup_or_insert`] for `W` ways (0: any) under SRRIP or LRU.
    #[inline(always)]
    fn lookup_or_insert_w<const W: usize, const SRRIP: bool>(&mut self, set: usize, tag: T) -> (usize, bool, Option<T>) {
        let policy = policy_of::<SRRIP>();
        let (tags, meta) = self.set_parts_w::<W>(set);
        if let Some(way) = Self::find_in(tags, tag) {
            Self::hit_state(policy, meta, way);
            return (way, true, None);
        }
        let (way, evicted) = Self::fill_in(policy, (tags, meta), tag);
        (way, false, evicted)
    }

    /// Like [`SetAssoc::lookup`] but changes nothing: for checks, invalidations and side lookups that
    /// must not disturb replacement.
    #[inline]
    pub fn probe(&self, set: usize, tag: T) -> Option<usize> {
        self.find(set, tag)
    }

    /// Marks a valid way as used, as a hit would. For callers that found the way with
    /// [`SetAssoc::probe`] (e.g. a multi-size TLB that probes several sets before deciding which hit
    /// counts).
    #[inline]
    pub fn touch(&mut self, set: usize, way: usize) {
        debug_assert!(self.set_tags(set)[way] != T::INVALID, "touching an invalid way");
        self.touch_at(set, way);
    }

    /// Fills `tag` into `set`; the caller guarantees it is not already present. Returns the way used and
    /// the tag evicted from it, if that way held a valid tag.
    ///
    /// Victim choice: the lowest-index invalid way if there is one; otherwise LRU takes the least recently
    /// used way, and SRRIP the lowest-index way with RRPV 3, after ageing every way of the set (adding 1 to
    /// all RRPVs) as many times as needed to produce one. The new tag is LRU-most-recent, or SRRIP RRPV 2.
    #[inline(always)]
    pub fn insert(&mut self, set: usize, tag: T) -> (usize, Option<T>) {
        debug_assert!(self.probe(set, tag).is_none(), "tag {tag:#x} inserted twice in set {set}");
        debug_assert!(tag != T::INVALID, "the invalid tag is reserved");
        by_shape!(self.insert_w(set, tag))
    }

    /// [`SetAssoc::insert`] for `W` ways (0: any) under SRRIP or LRU: `victim` and `insert_at`
    /// on one cut of the set.
    #[inline(always)]
    fn insert_w<const W: usize, const SRRIP: bool>(&mut self, set: usize, tag: T) -> (usize, Option<T>) {
        Self::fill_in(policy_of::<SRRIP>(), self.set_parts_w::<W>(set), tag)
    }

    /// Fills `tag` into a set (`tags`, `meta`) that does not hold it, as [`SetAssoc::insert`]:
    /// the way and the tag it evicted. A full LRU set takes [`rotate_full`]'s shortcut (its
    /// victim is the way of the last rank, and every other way ages by one).
    #[inline(always)]
    fn fill_in(policy: Replacement, (tags, meta): (&mut [T], &mut [u16]), tag: T) -> (usize, Option<T>) {
        if policy == Replacement::Lru {
            if let Some(way) = rotate_full(meta) {
                let old = std::mem::replace(&mut tags[way], tag);
                return (way, (old != T::INVALID).then_some(old));
            }
        }
        let way = Self::victim_in(policy, meta);
        (way, Self::fill_way(policy, tags, meta, way, tag))
    }

    /// The way a fill of `set` would use, chosen (and SRRIP state aged) exactly as
    /// [`SetAssoc::insert`] does, without filling it: for owners that must move the victim out
    /// before the new tag goes in with [`SetAssoc::insert_at`] (Utopia's RestSeg sets).
    pub fn choose_way(&mut self, set: usize) -> usize {
        self.victim(set)
    }

    /// The way [`SetAssoc::choose_way`] would take in `set` now, changing nothing: SRRIP's
    /// ageing adds the same amount to every way, which does not change the way it picks. For
    /// host-side hints that look ahead (the victim a later fill will move out).
    pub fn peek_way(&self, set: usize) -> usize {
        // SAFETY: see `set_tags`; the states begin at word `tag_words` and are `ways` long.
        let meta = unsafe { std::slice::from_raw_parts(self.set_base(set).add(self.tag_words).cast::<u16>(), self.ways) };
        max_way(meta).1
    }

    /// Fills `tag` into (`set`, `way`) with a fill's replacement state (LRU most recent, SRRIP RRPV
    /// 2); returns the tag it replaced, if valid. The caller guarantees `tag` is not elsewhere in
    /// the set.
    #[inline]
    pub fn insert_at(&mut self, set: usize, way: usize, tag: T) -> Option<T> {
        debug_assert!(tag != T::INVALID, "the invalid tag is reserved");
        debug_assert!(self.probe(set, tag).is_none_or(|w| w == way), "tag {tag:#x} inserted twice in set {set}");
        by_shape!(self.insert_at_w(set, way, tag))
    }

    /// [`SetAssoc::insert_at`] for `W` ways (0: any) under SRRIP or LRU.
    #[inline(always)]
    fn insert_at_w<const W: usize, const SRRIP: bool>(&mut self, set: usize, way: usize, tag: T) -> Option<T> {
        let (tags, meta) = self.set_parts_w::<W>(set);
        Self::fill_way(policy_of::<SRRIP>(), tags, meta, way, tag)
    }

    /// Chooses the way to fill in `set` (and ages SRRIP state if needed).
    #[inline]
    fn victim(&mut self, set: usize) -> usize {
        by_shape!(self.victim_w(set))
    }

    /// [`SetAssoc::victim`] for `W` ways (0: any) under SRRIP or LRU.
    #[inline(always)]
    fn victim_w<const W: usize, const SRRIP: bool>(&mut self, set: usize) -> usize {
        Self::victim_in(policy_of::<SRRIP>(), self.set_parts_w::<W>(set).1)
    }

    /// [`SetAssoc::victim`] on a set's replacement state `meta`.
    #[inline(always)]
    fn victim_in(policy: Replacement, meta: &mut [u16]) -> usize {
        // Both policies give invalid ways the largest states, so the lowest-index invalid way
        // wins if there is one. LRU: else the least recently used (rank valid - 1); values are
        // distinct. SRRIP: else "increment all RRPVs and retry until some way reaches 3" ends
        // after (3 - max) rounds with the first way holding the maximum as victim; do those rounds
        // in one pass (no way is invalid then). Both are one max over (state, lowest way) keys.
        let (max, way) = max_way(meta);
        if policy == Replacement::Srrip && max < RRPV_DISTANT {
            let age = RRPV_DISTANT - max;
            meta.iter_mut().for_each(|m| *m += age);
        }
        way
    }

    /// Removes `tag` from `set` if present; returns whether it was. (Shootdowns probe a set per
    /// page and size this way: one dispatch for the search and the removal.)
    #[inline]
    pub fn invalidate(&mut self, set: usize, tag: T) -> bool {
        by_shape!(self.invalidate_w(set, tag))
    }

    /// [`SetAssoc::invalidate`] for `W` ways (0: any) under SRRIP or LRU.
    #[inline(always)]
    fn invalidate_w<const W: usize, const SRRIP: bool>(&mut self, set: usize, tag: T) -> bool {
        match self.find_w::<W, SRRIP>(set, tag) {
            Some(way) => {
                self.invalidate_way_w::<W, SRRIP>(set, way);
                true
            }
            None => false,
        }
    }

    /// Empties (`set`, `way`); returns the tag it held, if it was valid. Lets callers that keep payload
    /// per slot (dirty bits, counters) read it before dropping the entry.
    #[inline]
    pub fn invalidate_way(&mut self, set: usize, way: usize) -> Option<T> {
        by_shape!(self.invalidate_way_w(set, way))
    }

    /// [`SetAssoc::invalidate_way`] for `W` ways (0: any) under SRRIP or LRU.
    #[inline(always)]
    fn invalidate_way_w<const W: usize, const SRRIP: bool>(&mut self, set: usize, way: usize) -> Option<T> {
        let empty = self.empty_meta(way);
        let (tags, meta) = self.set_parts_w::<W>(set);
        let old = std::mem::replace(&mut tags[way], T::INVALID);
        if old == T::INVALID {
            return None;
        }
        if !SRRIP {
            // The valid ways older than it move up one rank, keeping ranks 0..valid-1.
            let r = meta[way];
            meta.iter_mut().for_each(|m| *m -= u16::from(*m > r && *m < INVALID_RANK));
        }
        meta[way] = empty;
        Some(old)
    }

    /// Removes every valid tag for which `pred` returns true, scanning the whole store (shootdowns,
    /// flushes by ASID or range). Returns how many were removed.
    pub fn invalidate_if(&mut self, mut pred: impl FnMut(T) -> bool) -> usize {
        let mut n = 0;
        for set in 0..self.sets {
            for way in 0..self.ways {
                let t = self.set_tags(set)[way];
                if t != T::INVALID && pred(t) {
                    self.invalidate_way(set, way);
                    n += 1;
                }
            }
        }
        n
    }

    /// Empties every set.
    pub fn clear(&mut self) {
        let empty: Vec<u16> = (0..self.ways).map(|w| self.empty_meta(w)).collect();
        for set in 0..self.sets {
            self.set_tags_mut(set).fill(T::INVALID);
            self.set_meta(set).copy_from_slice(&empty);
            if self.bytes_at != 0 {
                let first = self.byte_index(set, 0);
                let ways = self.ways;
                self.bytes_mut()[first..first + ways].fill(0);
            }
        }
    }

    /// Calls `f(set, way)` for each of the `n` consecutive sets from `first` that holds `tag`,
    /// in set order; changes nothing itself. For removing a run of lines that share their tag
    /// (a page's lines in consecutive sets): one pass over the run's contiguous words instead of
    /// a lookup per line.
    #[inline]
    pub fn probe_run(&self, first: usize, n: usize, tag: T, mut f: impl FnMut(usize, usize)) {
        let run = &self.words()[first * self.stride..(first + n) * self.stride];
        for (k, words) in run.chunks_exact(self.stride).enumerate() {
            let tags = &bytemuck::cast_slice::<u64, T>(&words[..self.tag_words])[..self.ways];
            if let Some(way) = Self::find_in(tags, tag) {
                f(first + k, way);
            }
        }
    }

    /// Host prefetch of `set`'s tags and replacement state (its first and last words); no
    /// simulated effect.
    #[inline(always)]
    pub fn prefetch(&self, set: usize) {
        let (b, words) = (set * self.stride, self.words());
        super::host_prefetch(&words[b]);
        super::host_prefetch(&words[b + self.stride - 1]);
    }

    /// The tag held by (`set`, `way`), if valid.
    #[inline]
    pub fn tag_at(&self, set: usize, way: usize) -> Option<T> {
        let t = self.set_tags(set)[way];
        (t != T::INVALID).then_some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 0xA;
    const B: u64 = 0xB;
    const C: u64 = 0xC;
    const D: u64 = 0xD;
    const E: u64 = 0xE;
    const F: u64 = 0xF;
    const G: u64 = 0x10;
    const H: u64 = 0x11;
    const I: u64 = 0x12;
    const J: u64 = 0x13;

    impl SetAssoc {
        /// Replacement state of `set`'s ways (also for other modules' equivalence tests).
        pub(crate) fn state(&mut self, set: usize) -> Vec<u16> {
            self.set_meta(set).to_vec()
        }
    }

    #[test]
    fn lru_two_ways() {
        // 1 set × 2 ways.
        // fill A -> way 0, fill B -> way 1      recency (old..new): A B
        // hit A                                  B A
        // fill C evicts B (way 1)                A C
        // fill D evicts A (way 0)                C D
        // hit C, fill E evicts D (way 1)         C E
        let mut s = SetAssoc::new(1, 2, Replacement::Lru);
        assert_eq!(s.insert(0, A), (0, None));
        assert_eq!(s.insert(0, B), (1, None));
        assert_eq!(s.lookup(0, A), Some(0));
        assert_eq!(s.insert(0, C), (1, Some(B)));
        assert_eq!(s.insert(0, D), (0, Some(A)));
        assert_eq!(s.lookup(0, C), Some(1));
        assert_eq!(s.insert(0, E), (0, Some(D)));
        assert_eq!(s.lookup(0, A), None);
        assert_eq!(s.tag_at(0, 0), Some(E));
        assert_eq!(s.tag_at(0, 1), Some(C));
    }

    #[test]
    fn lru_four_ways() {
        // 1 set × 4 ways; recency ranks of ways 0..3 (0 = most recent) after each step.
        // fill A B C D -> ways 0..3              [3 2 1 0]
        // hit A                                  [0 3 2 1]
        // fill E evicts B (rank 3), way 1        [1 0 3 2]
        // hit C                                  [2 1 0 3]
        // fill F evicts D (rank 3), way 3        [3 2 1 0]
        // fill G evicts A, way 0                 [0 3 2 1]
        // fill H evicts E, way 1                 [1 0 3 2]
        let mut s = SetAssoc::new(1, 4, Replacement::Lru);
        for (w, t) in [A, B, C, D].into_iter().enumerate() {
            assert_eq!(s.insert(0, t), (w, None));
        }
        assert_eq!(s.lookup(0, A), Some(0));
        assert_eq!(s.insert(0, E), (1, Some(B)));
        assert_eq!(s.lookup(0, C), Some(2));
        assert_eq!(s.insert(0, F), (3, Some(D)));
        assert_eq!(s.insert(0, G), (0, Some(A)));
        assert_eq!(s.insert(0, H), (1, Some(E)));
        assert_eq!(s.state(0), [1, 0, 3, 2]);
    }

    /// LRU as it was specified before ranks: a timestamp per way, bumped on every touch, invalid
    /// ways stamped 0, the victim the smallest stamp (lowest index on ties).
    struct StampLru {
        ways: usize,
        tags: Vec<u64>,
        stamps: Vec<u64>,
        clock: u64,
    }

    impl StampLru {
        fn lookup(&mut self, set: usize, tag: u64) -> Option<usize> {
            let w = (0..self.ways).find(|&w| self.tags[set * self.ways + w] == tag)?;
            self.clock += 1;
            self.stamps[set * self.ways + w] = self.clock;
            Some(w)
        }
        fn insert(&mut self, set: usize, tag: u64) -> (usize, Option<u64>) {
            let b = set * self.ways;
            let w = (0..self.ways).min_by_key(|&w| (self.stamps[b + w], w)).unwrap();
            let old = std::mem::replace(&mut self.tags[b + w], tag);
            self.clock += 1;
            self.stamps[b + w] = self.clock;
            (w, (old != INVALID_TAG).then_some(old))
        }
        fn invalidate_way(&mut self, set: usize, w: usize) -> Option<u64> {
            self.stamps[set * self.ways + w] = 0;
            let old = std::mem::replace(&mut self.tags[set * self.ways + w], INVALID_TAG);
            (old != INVALID_TAG).then_some(old)
        }
    }

    /// Equivalence tester: the rank encoding makes exactly the choices of timestamps, way for way,
    /// over random lookups, fills and invalidations (including of invalid ways and whole-store
    /// predicates).
    /// The SSE2 match masks equal the scalar fold for every width up to 64 ways, including `u64`
    /// tags that share only one 32-bit half with the searched tag.
    #[test]
    fn vector_match_equals_scalar() {
        let mut rng = crate::rng::Rng::new(7);
        for len in 0..=64usize {
            for _ in 0..50 {
                let tag64 = rng.next_u64() | 1 << 40;
                let pick = |r: &mut crate::rng::Rng| match r.below(4) {
                    0 => tag64,
                    1 => tag64 ^ 1,            // low half differs
                    2 => tag64 ^ (1u64 << 40), // high half differs
                    _ => r.next_u64(),
                };
                let t64: Vec<u64> = (0..len).map(|_| pick(&mut rng)).collect();
                assert_eq!(u64::match_mask(&t64, tag64), match_mask_scalar(&t64, tag64, 0), "u64, {len} ways");
                let t32: Vec<u32> = t64.iter().map(|&t| t as u32).collect();
                assert_eq!(u32::match_mask(&t32, tag64 as u32), match_mask_scalar(&t32, tag64 as u32, 0), "u32, {len} ways");
            }
        }
    }

    /// `ways` random replacement states: small values below `small` (ranks, RRPVs, with ties),
    /// invalid marks above 0x8000, and any 16-bit value.
    fn random_states(rng: &mut crate::rng::Rng, ways: usize, small: u64) -> Vec<u16> {
        (0..ways)
            .map(|_| match rng.below(3) {
                0 => rng.below(small) as u16,
                1 => INVALID_RANK + rng.below(ways as u64) as u16,
                _ => rng.next_u64() as u16,
            })
            .collect()
    }

    /// A fill of a full LRU set by rotation ([`rotate_full`]) leaves the ranks that the victim
    /// search then the promotion leave, and names the same way; a set with an invalid way is left
    /// alone for the general path. Every LRU state of 4, 8, 12 and 16 ways can arise: any subset
    /// of valid ways, their ranks any order.
    #[test]
    fn full_set_rotation_equals_victim_then_promote() {
        let mut rng = crate::rng::Rng::new(13);
        let mut full = 0;
        for ways in [4usize, 8, 12, 16] {
            for _ in 0..20_000 {
                let valid: Vec<bool> = (0..ways).map(|_| rng.below(4) != 0).collect();
                let mut ranks: Vec<u16> = (0..valid.iter().filter(|&&v| v).count() as u16).collect();
                for i in (1..ranks.len()).rev() {
                    ranks.swap(i, rng.below(i as u64 + 1) as usize);
                }
                let mut next = ranks.into_iter();
                let meta: Vec<u16> =
                    (0..ways).map(|w| if valid[w] { next.next().unwrap() } else { INVALID_RANK + (ways - 1 - w) as u16 }).collect();
                let mut rotated = meta.clone();
                let got = rotate_full(&mut rotated);
                if valid.iter().all(|&v| v) {
                    full += 1;
                    let mut want = meta.clone();
                    let (_, way) = max_way_scalar(&want);
                    SetAssoc::<u64>::promote(&mut want, way);
                    assert_eq!((got, &rotated), (Some(way), &want), "{meta:?}");
                } else {
                    assert_eq!((got, &rotated), (None, &meta), "{meta:?}");
                }
            }
        }
        assert!(full > 1000, "too few full sets drawn ({full})");
    }

    /// The SSE2 victim search names the same state and way as the scalar one, for 4, 8, 12 and 16 ways
    /// of random states, with ties (SRRIP) and with the invalid marks above 0x8000 (LRU).
    #[test]
    fn vector_victim_equals_scalar() {
        let mut rng = crate::rng::Rng::new(11);
        for ways in [4usize, 8, 12, 16] {
            for _ in 0..20_000 {
                let meta = random_states(&mut rng, ways, 4);
                assert_eq!(max_way(&meta), max_way_scalar(&meta), "{meta:?}");
            }
        }
    }

    /// The SSE2 ageing of LRU ranks equals the scalar one, for 4, 8, 12 and 16 ways of random states
    /// (ranks, invalid marks above 0x8000, any 16-bit value) against bounds at the edges too.
    #[test]
    fn vector_age_equals_scalar() {
        let mut rng = crate::rng::Rng::new(12);
        for ways in [4usize, 8, 12, 16] {
            for _ in 0..20_000 {
                let meta = random_states(&mut rng, ways, ways as u64);
                let r = match rng.below(4) {
                    0 => 0,
                    1 => INVALID_RANK,
                    2 => rng.below(ways as u64 + 1) as u16,
                    _ => rng.next_u64() as u16,
                };
                let (mut fast, mut slow) = (meta.clone(), meta.clone());
                age_below(&mut fast, r);
                age_below_scalar(&mut slow, r);
                assert_eq!(fast, slow, "{meta:?} below {r}");
            }
        }
    }

    #[test]
    fn lru_ranks_match_timestamps() {
        for ways in [1, 2, 3, 4, 8, 12, 16, 48, 64, 80] {
            let sets = 4;
            let mut rng = crate::rng::Rng::new(ways as u64);
            let mut fast = SetAssoc::new(sets, ways, Replacement::Lru);
            // The same store with narrow tags answers alike (its own set layout).
            let mut narrow = SetAssoc::<u32>::new(sets, ways, Replacement::Lru);
            let mut slow = StampLru { ways, tags: vec![INVALID_TAG; sets * ways], stamps: vec![0; sets * ways], clock: 0 };
            for step in 0..20_000 {
                let set = rng.below(sets as u64) as usize;
                let tag = rng.below(3 * ways as u64);
                match rng.below(10) {
                    0 => {
                        let w = rng.below(ways as u64) as usize;
                        let dropped = fast.invalidate_way(set, w);
                        assert_eq!(narrow.invalidate_way(set, w).map(u64::from), dropped, "step {step}, narrow tags");
                        assert_eq!(dropped, slow.invalidate_way(set, w), "step {step}");
                    }
                    1 if step % 97 == 0 => {
                        let m = rng.below(5) + 2;
                        fast.invalidate_if(|t| t.is_multiple_of(m));
                        narrow.invalidate_if(|t| u64::from(t).is_multiple_of(m));
                        for s in 0..sets {
                            for w in 0..ways {
                                let t = slow.tags[s * ways + w];
                                if t != INVALID_TAG && t.is_multiple_of(m) {
                                    slow.invalidate_way(s, w);
                                }
                            }
                        }
                    }
                    _ => {
                        let hit = fast.lookup(set, tag);
                        assert_eq!(hit, slow.lookup(set, tag), "step {step}");
                        assert_eq!(hit, narrow.lookup(set, tag as u32), "step {step}, narrow tags");
                        if hit.is_none() {
                            let (way, old) = narrow.insert(set, tag as u32);
                            let wide = fast.insert(set, tag);
                            assert_eq!((way, old.map(u64::from)), wide, "step {step}, narrow tags");
                            assert_eq!(wide, slow.insert(set, tag), "step {step}, {ways} ways");
                        }
                    }
                }
            }
        }
    }

    /// The set accessors' one bound: a set beyond the store panics instead of reading past it.
    #[test]
    #[should_panic(expected = "set 4 of a 4-set store")]
    fn set_beyond_the_store_panics() {
        let mut s = SetAssoc::<u32>::new(4, 16, Replacement::Lru);
        s.lookup(4, 1);
    }

    #[test]
    fn srrip_four_ways() {
        // 1 set × 4 ways; RRPVs of ways 0..3 after each step.
        // fill A B C D                      [2 2 2 2]
        // hit B                             [2 0 2 2]
        // fill E: no 3, age +1 -> [3 1 3 3], victim way 0 (A), E at 2      [2 1 3 3]
        // fill F: way 2 (C) already 3                                       [2 1 2 3]
        // fill G: way 3 (D)                                                 [2 1 2 2]
        // hit E (way 0)                                                     [0 1 2 2]
        // fill H: age +1 -> [1 2 3 3], victim way 2 (F)                     [1 2 2 3]
        // fill I: way 3 (G)                                                 [1 2 2 2]
        // fill J: age +1 -> [2 3 3 3], victim way 1 (B)                     [2 2 3 3]
        let mut s = SetAssoc::new(1, 4, Replacement::Srrip);
        for (w, t) in [A, B, C, D].into_iter().enumerate() {
            assert_eq!(s.insert(0, t), (w, None));
        }
        assert_eq!(s.state(0), [2, 2, 2, 2]);
        assert_eq!(s.lookup(0, B), Some(1));
        assert_eq!(s.insert(0, E), (0, Some(A)));
        assert_eq!(s.state(0), [2, 1, 3, 3]);
        assert_eq!(s.insert(0, F), (2, Some(C)));
        assert_eq!(s.insert(0, G), (3, Some(D)));
        assert_eq!(s.state(0), [2, 1, 2, 2]);
        assert_eq!(s.lookup(0, E), Some(0));
        assert_eq!(s.insert(0, H), (2, Some(F)));
        assert_eq!(s.state(0), [1, 2, 2, 3]);
        assert_eq!(s.insert(0, I), (3, Some(G)));
        assert_eq!(s.insert(0, J), (1, Some(B)));
        assert_eq!(s.state(0), [2, 2, 3, 3]);
    }

    /// Every operation compiled for a [`Shape`] (a width and policy as constants) leaves the
    /// store exactly as the general code does: two stores of each specialized pair, one forced
    /// to the general shape, replay the same random lookups, probes, touches, fills (chosen and
    /// placed), and invalidations (of a way and of a tag), and agree on every answer and on every way's tag and
    /// replacement state after each step.
    #[test]
    fn shaped_operations_equal_the_general_code() {
        let general = |policy| match policy {
            Replacement::Lru => Shape::Lru,
            Replacement::Srrip => Shape::Srrip,
        };
        for (ways, policy) in
            [(4, Replacement::Lru), (8, Replacement::Lru), (12, Replacement::Lru), (16, Replacement::Lru), (16, Replacement::Srrip)]
        {
            let sets = 4;
            let mut shaped = SetAssoc::<u32>::with_way_bytes(sets, ways, policy);
            assert_ne!(shaped.shape, general(policy), "{ways} ways, {policy:?} has code of its own");
            let mut plain = shaped.clone();
            plain.shape = general(policy);
            let mut rng = crate::rng::Rng::new(ways as u64 * 31 + policy as u64);
            for step in 0..30_000 {
                let set = rng.below(sets as u64) as usize;
                let tag = rng.below(3 * ways as u64) as u32;
                let what = format!("{ways} ways, {policy:?}, step {step}");
                match rng.below(13) {
                    0 => {
                        let w = rng.below(ways as u64) as usize;
                        assert_eq!(shaped.invalidate_way(set, w), plain.invalidate_way(set, w), "{what}");
                    }
                    12 => assert_eq!(shaped.invalidate(set, tag), plain.invalidate(set, tag), "{what}"),
                    1 => assert_eq!(shaped.probe(set, tag), plain.probe(set, tag), "{what}"),
                    2 => {
                        if let Some(w) = plain.probe(set, tag) {
                            shaped.touch(set, w);
                            plain.touch(set, w);
                        }
                    }
                    3 if plain.probe(set, tag).is_none() => {
                        let peeked = shaped.peek_way(set);
                        let w = shaped.choose_way(set);
                        assert_eq!(peeked, w, "peek_way, {what}");
                        assert_eq!(w, plain.choose_way(set), "{what}");
                        assert_eq!(shaped.insert_at(set, w, tag), plain.insert_at(set, w, tag), "{what}");
                    }
                    _ => {
                        let hit = shaped.lookup(set, tag);
                        assert_eq!(hit, plain.lookup(set, tag), "{what}");
                        if hit.is_none() {
                            assert_eq!(shaped.insert(set, tag), plain.insert(set, tag), "{what}");
                        }
                    }
                }
                for w in 0..ways {
                    assert_eq!(shaped.tag_at(set, w), plain.tag_at(set, w), "{what}");
                }
                assert_eq!(shaped.set_meta(set), plain.set_meta(set), "{what}");
            }
        }
    }

    #[test]
    fn srrip_resists_a_scan() {
        // A reused line survives a stream of single-use lines under SRRIP (its RRPV is 0 while every
        // streaming line arrives at 2), but not under LRU.
        for (policy, survives) in [(Replacement::Srrip, true), (Replacement::Lru, false)] {
            let mut s = SetAssoc::new(1, 4, policy);
            s.insert(0, A);
            s.lookup(0, A);
            for t in 100..106 {
                s.insert(0, t);
            }
            assert_eq!(s.probe(0, A).is_some(), survives, "{policy:?}");
        }
    }

    #[test]
    fn invalid_ways_fill_first_and_probe_changes_nothing() {
        let mut s = SetAssoc::new(2, 2, Replacement::Lru);
        s.insert(1, A);
        s.insert(1, B);
        // Probing A must not make it recent, so C still evicts A (a lookup would have saved it).
        assert_eq!(s.probe(1, A), Some(0));
        assert_eq!(s.insert(1, C), (0, Some(A)));
        assert!(s.invalidate(1, B));
        assert!(!s.invalidate(1, B));
        // The freed way 1 is filled before anything is evicted, even though C (way 0) is the newest.
        assert_eq!(s.insert(1, D), (1, None));
        // Sets are independent.
        assert_eq!(s.probe(0, D), None);
        assert_eq!(s.insert(0, D), (0, None));
        assert_eq!(s.slot(1, 1), 3);
        assert_eq!(s.invalidate_way(1, 1), Some(D));
        assert_eq!(s.invalidate_way(1, 1), None);
    }

    #[test]
    fn touch_promotes_like_a_hit() {
        let mut s = SetAssoc::new(1, 2, Replacement::Lru);
        s.insert(0, A);
        s.insert(0, B);
        let w = s.probe(0, A).unwrap();
        s.touch(0, w);
        assert_eq!(s.insert(0, C), (1, Some(B)));
    }

    #[test]
    fn invalidate_if_and_clear() {
        let mut s = SetAssoc::new(4, 2, Replacement::Srrip);
        for t in 0..8u64 {
            s.insert((t % 4) as usize, t);
        }
        assert_eq!(s.invalidate_if(|t| t % 2 == 0), 4);
        assert_eq!(s.probe(0, 0), None);
        assert_eq!(s.probe(1, 1), Some(0));
        assert_eq!(s.invalidate_if(|_| true), 4);
        s.insert(2, A);
        s.clear();
        assert_eq!(s.tag_at(2, 0), None);
        assert_eq!((s.sets(), s.ways(), s.policy()), (4, 2, Replacement::Srrip));
    }

    /// Each way's byte is its own: it survives every fill, hit and invalidation of its own and
    /// other sets, and `clear` zeroes it. The store with bytes answers exactly as the one
    /// without. Every set lies in as few host lines as its size allows (one for up to 64 bytes).
    #[test]
    fn way_bytes_are_private_and_sets_fit_host_lines() {
        for ways in [1, 2, 4, 8, 12, 16, 24, 64] {
            let sets = 8;
            let mut rng = crate::rng::Rng::new(100 + ways as u64);
            let mut with = SetAssoc::<u32>::with_way_bytes(sets, ways, Replacement::Lru);
            let mut without = SetAssoc::<u32>::new(sets, ways, Replacement::Lru);
            let mut bytes = vec![0u8; sets * ways];
            for step in 0..5_000 {
                let set = rng.below(sets as u64) as usize;
                let tag = rng.below(3 * ways as u64) as u32;
                let hit = with.lookup(set, tag);
                assert_eq!(hit, without.lookup(set, tag), "{ways} ways, step {step}");
                let way = match hit {
                    Some(w) => w,
                    None => {
                        let filled = with.insert(set, tag);
                        assert_eq!(filled, without.insert(set, tag), "{ways} ways, step {step}");
                        filled.0
                    }
                };
                let b = rng.below(256) as u8;
                *with.byte_mut(with.byte_index(set, way)) = b;
                bytes[set * ways + way] = b;
                if step % 7 == 0 {
                    let w = rng.below(ways as u64) as usize;
                    assert_eq!(with.invalidate_way(set, w), without.invalidate_way(set, w));
                }
                for s in 0..sets {
                    for w in 0..ways {
                        assert_eq!(with.byte(with.byte_index(s, w)), bytes[s * ways + w], "{ways} ways, step {step}");
                    }
                }
            }
            for set in 0..sets {
                let (first, last) = (with.set_base(set) as usize, with.set_base(set) as usize + with.stride * 8 - 1);
                assert!(with.stride <= 8 || first % 64 == 0, "{ways} ways: set {set} starts inside a host line");
                assert!(with.stride > 8 || first / 64 == last / 64, "{ways} ways: set {set} straddles host lines");
            }
            with.clear();
            assert!((0..sets).all(|s| (0..ways).all(|w| with.byte(with.byte_index(s, w)) == 0)));
        }
    }
}
