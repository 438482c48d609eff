//! Addresses and page sizes: the vocabulary every other layer speaks.
//!
//! Addresses are plain `u64` newtypes so the hot path pays nothing for them; a page size knows its
//! shift, and everything else (alignment, page numbers, offsets) is derived from that one number.

use std::fmt;

/// A virtual address in one address space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VirtAddr(pub u64);

/// A physical (host) address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PhysAddr(pub u64);

/// A physical frame number in 4 KiB units, whatever the size of the page it starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pfn(pub u64);

/// Base (smallest) page shift: 4 KiB.
pub const BASE_SHIFT: u32 = 12;
/// Base page size in bytes.
pub const BASE_PAGE: u64 = 1 << BASE_SHIFT;
/// Bytes in a cache line (every structure in xlate uses 64-byte lines).
pub const LINE_BYTES: u64 = 64;
/// log2 of [`LINE_BYTES`].
pub const LINE_SHIFT: u32 = 6;

/// The translation sizes xlate knows. x86-64 uses 4K/2M/1G; ARMv8's contiguous bit adds 64K
/// (16 × 4K) and 32M (16 × 2M).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub enum PageSize {
    /// 4 KiB base page.
    #[serde(rename = "4K")]
    K4,
    /// 64 KiB (ARMv8 contiguous PTEs).
    #[serde(rename = "64K")]
    K64,
    /// 2 MiB (x86 PDE / ARMv8 PMD block).
    #[serde(rename = "2M")]
    M2,
    /// 32 MiB (ARMv8 contiguous PMD blocks).
    #[serde(rename = "32M")]
    M32,
    /// 1 GiB (x86 PDPTE / ARMv8 PUD block).
    #[serde(rename = "1G")]
    G1,
}

impl PageSize {
    /// Every size, smallest first. Indexes of this array are the dense ids of [`PageSize::index`].
    pub const ALL: [PageSize; 5] = [PageSize::K4, PageSize::K64, PageSize::M2, PageSize::M32, PageSize::G1];
    /// Number of distinct sizes (length of per-size counter arrays).
    pub const COUNT: usize = 5;

    /// log2 of the size in bytes.
    #[inline(always)]
    pub const fn shift(self) -> u32 {
        match self {
            PageSize::K4 => 12,
            PageSize::K64 => 16,
            PageSize::M2 => 21,
            PageSize::M32 => 25,
            PageSize::G1 => 30,
        }
    }

    /// Size in bytes.
    #[inline(always)]
    pub const fn bytes(self) -> u64 {
        1u64 << self.shift()
    }

    /// Buddy order of a block of this size (order 0 = 4 KiB).
    #[inline(always)]
    pub const fn order(self) -> u32 {
        self.shift() - BASE_SHIFT
    }

    /// Number of 4 KiB base pages in one page of this size.
    #[inline(always)]
    pub const fn base_pages(self) -> u64 {
        1u64 << self.order()
    }

    /// Dense index 0..COUNT, for per-size arrays.
    #[inline(always)]
    pub const fn index(self) -> usize {
        match self {
            PageSize::K4 => 0,
            PageSize::K64 => 1,
            PageSize::M2 => 2,
            PageSize::M32 => 3,
            PageSize::G1 => 4,
        }
    }

    /// Mask of the offset bits inside a page of this size.
    #[inline(always)]
    pub const fn offset_mask(self) -> u64 {
        self.bytes() - 1
    }

    /// `addr` rounded down to this size.
    #[inline(always)]
    pub const fn align_down(self, addr: u64) -> u64 {
        addr & !self.offset_mask()
    }

    /// Whether `addr` is aligned to this size.
    #[inline(always)]
    pub const fn is_aligned(self, addr: u64) -> bool {
        addr & self.offset_mask() == 0
    }

    /// For a translation made of a contiguous group of smaller entries (ARMv8's contiguous bit:
    /// 64 KiB = 16 × 4 KiB, 32 MiB = 16 × 2 MiB), the size of one entry; `None` for a size one
    /// entry maps. A TLB that does not implement the contiguous hint caches such an entry.
    #[inline(always)]
    pub const fn descriptor(self) -> Option<PageSize> {
        match self {
            PageSize::K64 => Some(PageSize::K4),
            PageSize::M32 => Some(PageSize::M2),
            _ => None,
        }
    }

    /// Short label used in reports and config ("4K", "2M", ...).
    pub const fn label(self) -> &'static str {
        match self {
            PageSize::K4 => "4K",
            PageSize::K64 => "64K",
            PageSize::M2 => "2M",
            PageSize::M32 => "32M",
            PageSize::G1 => "1G",
        }
    }

    /// Parses a label written by [`PageSize::label`].
    pub fn from_label(s: &str) -> Option<PageSize> {
        PageSize::ALL.into_iter().find(|p| p.label().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for PageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl Pfn {
    /// Physical address of the first byte of this frame.
    #[inline(always)]
    pub const fn addr(self) -> u64 {
        self.0 << BASE_SHIFT
    }
    /// Frame that contains physical address `pa`.
    #[inline(always)]
    pub const fn containing(pa: u64) -> Pfn {
        Pfn(pa >> BASE_SHIFT)
    }
}

/// Parses a byte size such as `4G`, `512M`, `64K`, `4096` or `4GiB`.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (num, mul) = match t.chars().last()? {
        'K' | 'k' => (&t[..t.len() - 1], 1u64 << 10),
        'M' | 'm' => (&t[..t.len() - 1], 1 << 20),
        'G' | 'g' => (&t[..t.len() - 1], 1 << 30),
        'T' | 't' => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

/// Formats a byte count with a binary unit (`4 GiB`, `512 MiB`, `12 KiB`, `100 B`).
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (u, m) in UNITS {
        if b >= m {
            return if b.is_multiple_of(m) { format!("{} {u}", b / m) } else { format!("{:.2} {u}", b as f64 / m as f64) };
        }
    }
    format!("{b} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_orders() {
        assert_eq!(PageSize::M2.order(), 9);
        assert_eq!(PageSize::M32.order(), 13);
        assert_eq!(PageSize::G1.base_pages(), 262_144);
        assert_eq!(PageSize::M2.align_down(0x40_1234_5678), 0x40_1220_0000);
        assert!(PageSize::K64.is_aligned(0x1_0000));
    }

    #[test]
    fn byte_sizes_parse() {
        assert_eq!(parse_bytes("4G"), Some(4 << 30));
        assert_eq!(parse_bytes("512MiB"), Some(512 << 20));
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("x"), None);
        assert_eq!(fmt_bytes(4 << 30), "4 GiB");
    }
}

/// Serde helpers so config files can say `size = "32K"` or `size = 32768`.
pub mod bytes_serde {
    use serde::{de, Deserializer, Serializer};

    /// Writes a byte count as a human string when it is a whole number of KiB/MiB/GiB.
    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        const UNITS: [(&str, u64); 4] = [("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)];
        for (u, m) in UNITS {
            if *v >= m && v.is_multiple_of(m) {
                return s.serialize_str(&format!("{}{u}", v / m));
            }
        }
        s.serialize_u64(*v)
    }

    /// Reads an integer or a string such as "2M".
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = u64;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a byte size such as 4096, \"32K\", \"2M\" or \"4G\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
                Ok(v)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
                u64::try_from(v).map_err(|_| E::custom("a byte size must not be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
                super::parse_bytes(v).ok_or_else(|| E::custom(format!("`{v}` is not a byte size (expected e.g. \"32K\", \"2M\", \"4G\")")))
            }
        }
        d.deserialize_any(V)
    }
}
