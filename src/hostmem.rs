//! The simulator's own memory on the host's transparent huge pages.
//!
//! A GUPS or bfs run reads its simulated page tables, its ground truth and its simulated caches'
//! tag arrays at random: tens of MiB touched a few lines at a time. On 4 KiB host pages nearly
//! every such read misses the host's TLB, and where the host is itself a virtual machine (as CI's
//! and this project's machines are) each miss is a two-dimensional walk. Linux backs memory with
//! 2 MiB pages only where the process asks (`transparent_hugepage=madvise`, the common default),
//! so [`HugePageAlloc`] asks: every allocation of 256 KiB or more gets a mapping of its own,
//! aligned to 2 MiB, rounded up to whole 2 MiB pages and advised `MADV_HUGEPAGE`. That includes
//! the simulated caches' tag arrays and a large configuration's TLBs. Each such block may cost up
//! to 2 MiB of memory more. Smaller allocations go to the system allocator.
//! Structures made of many small blocks that a run reads at random keep them in large slabs
//! instead (the radix page table's nodes) so that they benefit too.
//!
//! It changes no simulated number: only where the host keeps the simulator's data.
//! `XLATE_HOST_THP=0` in the environment turns the advice off (mappings stay aligned), to measure
//! what it gains (docs/performance.md, "Host huge pages").

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

/// The host's huge-page size (x86-64 and arm64 with 4 KiB base pages).
pub const HUGE: usize = 2 << 20;

/// The smallest block that gets a mapping of its own (glibc would map it too, on 4 KiB pages).
pub const MIN_MAPPED: usize = 256 << 10;

/// The global allocator of the `xlate` binary and the Python module: large blocks on transparent
/// huge pages, the rest from [`System`].
pub struct HugePageAlloc;

/// Whether to advise huge pages: 0 not decided yet, 1 yes, 2 no (`XLATE_HOST_THP=0`).
static ADVISE: AtomicU8 = AtomicU8::new(0);

fn advise() -> bool {
    match ADVISE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            // SAFETY: `getenv` with a NUL-terminated name; the pointer it returns is only read
            // here, at once, as a NUL-terminated string. (`std::env::var` would allocate, and
            // this runs inside the allocator.)
            let off = unsafe {
                let v = libc::getenv(c"XLATE_HOST_THP".as_ptr());
                !v.is_null() && *v == b'0' as libc::c_char
            };
            ADVISE.store(if off { 2 } else { 1 }, Ordering::Relaxed);
            !off
        }
    }
}

/// Whether a block of this layout gets a mapping of its own.
#[inline]
fn mapped(layout: &Layout) -> bool {
    layout.size() >= MIN_MAPPED && layout.align() <= HUGE
}

/// The length of the mapping of a block of `size` bytes: whole huge pages, so that its last
/// part is on a huge page too (at most 2 MiB of address space more; untouched memory is not
/// backed).
#[inline]
fn map_len(size: usize) -> usize {
    size.div_ceil(HUGE) * HUGE
}

/// A new zeroed mapping of `len` bytes (a multiple of [`HUGE`]) aligned to [`HUGE`], advised
/// huge; null if the host refuses.
fn map(len: usize) -> *mut u8 {
    let Some(reserve) = len.checked_add(HUGE) else { return std::ptr::null_mut() };
    // SAFETY: an anonymous private mapping at an address the kernel chooses touches no existing
    // memory. The unmapped head and tail lie inside the range just mapped, and the advice covers
    // exactly the part kept.
    unsafe {
        let p =
            libc::mmap(std::ptr::null_mut(), reserve, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        if p == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        let start = p as usize;
        let aligned = start.next_multiple_of(HUGE);
        let head = aligned - start;
        if head > 0 {
            libc::munmap(p, head);
        }
        let tail = reserve - head - len;
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
        if advise() {
            // Refused only where the kernel has no THP; the memory is as good without.
            libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
        aligned as *mut u8
    }
}

/// Unmaps a block [`map`] returned for `len` bytes.
///
/// # Safety
/// `p` and `len` must be those of a live mapping from [`map`].
unsafe fn unmap(p: *mut u8, len: usize) {
    // SAFETY: the caller passes a whole mapping of ours, which nothing refers to any more.
    unsafe {
        libc::munmap(p.cast(), len);
    }
}

// SAFETY: blocks of `mapped` layouts come from `map`, which returns memory aligned to 2 MiB (at
// least the layout's alignment) and at least `size` bytes long, or null; they go back through
// `unmap` with the length computed from the same size. Every other block goes to and from
// `System` unchanged. `realloc` keeps the block's first `min(old, new)` bytes in either case.
unsafe impl GlobalAlloc for HugePageAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if mapped(&layout) {
            map(map_len(layout.size()))
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc(layout) }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if mapped(&layout) {
            // SAFETY: the caller's guarantees; a fresh anonymous mapping reads as zeros.
            unsafe { self.alloc(layout) }
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if mapped(&layout) {
            // SAFETY: a mapped layout's block came from `map` with this length.
            unsafe { unmap(ptr, map_len(layout.size())) }
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY (the whole body): the caller guarantees `ptr` is a live block of `layout` and
        // `new_size`, with `layout.align()`, is a valid layout.
        unsafe {
            let new = Layout::from_size_align_unchecked(new_size, layout.align());
            match (mapped(&layout), mapped(&new)) {
                (false, false) => System.realloc(ptr, layout, new_size),
                (true, true) if map_len(new_size) == map_len(layout.size()) => ptr,
                (true, true) => {
                    let (old_len, new_len) = (map_len(layout.size()), map_len(new_size));
                    if new_len < old_len {
                        // Shrinking: give back the whole huge pages past the new end.
                        libc::munmap(ptr.add(new_len).cast(), old_len - new_len);
                        return ptr;
                    }
                    grow_mapping(ptr, old_len, new_len)
                }
                _ => {
                    // Across the threshold: a new block and a copy (rare: one per growing vector).
                    let q = self.alloc(new);
                    if !q.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    q
                }
            }
        }
    }
}

/// Grows a mapping of ours from `old_len` to `new_len` bytes (multiples of [`HUGE`]): the kernel
/// moves its pages, huge pages included, to a new aligned range (`mremap` into a reservation),
/// without copying the contents. Null (the old block intact) if the host refuses.
///
/// # Safety
/// `p` must be a live mapping from [`map`] of `old_len` bytes.
unsafe fn grow_mapping(p: *mut u8, old_len: usize, new_len: usize) -> *mut u8 {
    let target = map(new_len);
    if target.is_null() {
        return target;
    }
    // SAFETY: `target` is a fresh mapping of `new_len` bytes of ours; MREMAP_FIXED replaces it
    // with the old pages (a move, which leaves `p` unmapped) and keeps the advice of the old
    // range, which is ours too. On failure the target is unmapped and `p` is untouched.
    unsafe {
        let q = libc::mremap(p.cast(), old_len, new_len, libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, target.cast::<libc::c_void>());
        if q == libc::MAP_FAILED {
            unmap(target, new_len);
            return std::ptr::null_mut();
        }
        if advise() {
            libc::madvise(q, new_len, libc::MADV_HUGEPAGE);
        }
        q.cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks of every size class keep their contents through growth and shrinking, across the
    /// threshold both ways, and mapped blocks are aligned to huge pages.
    #[test]
    fn blocks_keep_their_contents_and_alignment() {
        let a = HugePageAlloc;
        // Up within the small blocks, across the threshold, within and past a mapping's huge pages; down
        // within the mapped blocks (the tail unmapped), then across the threshold; up across it again.
        let sizes =
            [64usize, 4096, MIN_MAPPED - 8, MIN_MAPPED, HUGE - 8, HUGE, HUGE + 1, 3 * HUGE, 5 * HUGE + 4096, HUGE + 1, 64, HUGE * 2];
        let layout = Layout::from_size_align(sizes[0], 8).unwrap();
        // SAFETY: every pointer is a live block of the layout it is used with; writes and reads
        // stay within `size` bytes.
        unsafe {
            let mut p = a.alloc(layout);
            assert!(!p.is_null());
            let fill = |p: *mut u8, n: usize| (0..n).step_by(509).for_each(|i| *p.add(i) = (i % 251) as u8);
            fill(p, sizes[0]);
            let mut size = sizes[0];
            for &next in &sizes[1..] {
                p = a.realloc(p, Layout::from_size_align(size, 8).unwrap(), next);
                assert!(!p.is_null());
                for i in (0..size.min(next)).step_by(509) {
                    assert_eq!(*p.add(i), (i % 251) as u8, "byte {i} after {size} → {next}");
                }
                if next >= MIN_MAPPED {
                    assert_eq!(p as usize % HUGE, 0, "a mapped block is aligned to a huge page");
                }
                fill(p, next);
                size = next;
            }
            a.dealloc(p, Layout::from_size_align(size, 8).unwrap());
            let z = a.alloc_zeroed(Layout::from_size_align(3 * HUGE, 64).unwrap());
            assert!((0..3 * HUGE).step_by(4093).all(|i| *z.add(i) == 0));
            a.dealloc(z, Layout::from_size_align(3 * HUGE, 64).unwrap());
        }
    }

    /// A `Vec` grown through this allocator from empty to many huge pages holds what was pushed.
    #[test]
    fn a_growing_vector_keeps_its_elements() {
        let a = HugePageAlloc;
        let mut len = 0usize;
        let mut cap = 16usize;
        // SAFETY: the block always has room for `cap` u64s; only the first `len` are read.
        unsafe {
            let mut p = a.alloc(Layout::array::<u64>(cap).unwrap()).cast::<u64>();
            while len < 3 << 20 {
                if len == cap {
                    p = a.realloc(p.cast(), Layout::array::<u64>(cap).unwrap(), cap * 16).cast();
                    assert!(!p.is_null());
                    cap *= 2;
                }
                *p.add(len) = len as u64 * 7;
                len += 1;
            }
            assert!((0..len).step_by(1001).all(|i| *p.add(i) == i as u64 * 7));
            a.dealloc(p.cast(), Layout::array::<u64>(cap).unwrap());
        }
    }
}
