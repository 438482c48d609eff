//! A multi-socket machine as accelerators see it (SPARTA §4, §7.4–7.5): sockets × memory
//! channels, an on-chip network inside each socket and inter-socket links between them, and one
//! DRAM model per channel. A memory reference's latency depends on where its frame lives.
//!
//! Physical memory is split into equal contiguous ranges: socket `s` owns the `s`-th
//! `memory / sockets` bytes and each of its channels an equal contiguous slice of them (the
//! NUMA-node layout SPARTA's partitions are built on; no interleaving across channels, so a
//! partition of a channel is a physical range). Within a channel the [`Dram`] model maps the
//! channel-local address to its ranks, banks and rows.
//!
//! Latencies (one way, in requester cycles): a request crosses its own socket's network to the
//! socket's edge (`noc`), `hops × link` to the target socket, and that socket's network to the
//! channel (`noc` again when remote); the response retraces the path. Sockets are linked as a
//! hypercube by default (hops = Hamming distance of socket ids, as 8-socket glueless machines
//! wire a twisted cube) or fully connected (every remote socket one hop away). The paper states
//! none of these numbers: the defaults and their reasoning are in docs/sparta.md.

use super::dram::{Dram, DramConfig, DramStats};
use crate::error::{Error, Result};

/// How sockets are wired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Links {
    /// Hypercube: hops = popcount(a xor b) (2 sockets: 1 hop; 8 sockets: 1–3 hops).
    #[default]
    Hypercube,
    /// Every remote socket one hop away.
    Full,
}

/// The `accel.topology` config table.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopologyConfig {
    /// Sockets (power of two). SPARTA §7.5: 8.
    pub sockets: u32,
    /// Memory channels per socket (power of two). SPARTA §7.5: 4.
    pub channels: u32,
    /// One on-chip network traversal (requester or memory controller to the socket's edge), ns.
    pub noc_ns: f64,
    /// One inter-socket link hop, ns.
    pub link_ns: f64,
    /// How sockets are wired.
    pub links: Links,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        // SPARTA §7.5: an 8-socket machine, 4 channels per socket. Latencies: assumptions
        // (docs/sparta.md): a mesh crossing ≈ 10 ns; one UPI-class hop ≈ 35 ns one way (remote
        // DRAM on 2-socket servers is ≈ 60–70 ns slower than local, round trip).
        TopologyConfig { sockets: 8, channels: 4, noc_ns: 10.0, link_ns: 35.0, links: Links::Hypercube }
    }
}

impl TopologyConfig {
    /// Checks the table for a machine of `memory` bytes; errors name `key.field`.
    pub fn validate(&self, key: &str, memory: u64) -> Result<()> {
        for (name, v) in [("sockets", self.sockets), ("channels", self.channels)] {
            if v == 0 || !v.is_power_of_two() || v > 1024 {
                return Err(Error::config(format!("{key}.{name}"), format!("must be a power of two between 1 and 1024 (got {v})")));
            }
        }
        for (name, v) in [("noc_ns", self.noc_ns), ("link_ns", self.link_ns)] {
            if !v.is_finite() || v < 0.0 {
                return Err(Error::config(format!("{key}.{name}"), format!("must be a finite number ≥ 0 (got {v})")));
            }
        }
        let units = self.sockets as u64 * self.channels as u64;
        if !memory.is_multiple_of(units << 21) {
            return Err(Error::config(
                format!("{key}.channels"),
                format!("os.memory ({memory} bytes) must split into {units} channels of whole 2 MiB blocks"),
            ));
        }
        Ok(())
    }
}

/// Where a physical address lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    /// Socket.
    pub socket: u32,
    /// Channel, numbered across the machine (`socket × channels + channel in socket`).
    pub channel: u32,
}

/// The machine: latencies between sockets and one DRAM per channel.
pub struct Topology {
    /// Bytes per channel.
    slice: u64,
    channels_per_socket: u32,
    noc: u32,
    link: u32,
    links: Links,
    drams: Vec<Dram>,
}

fn cycles(ns: f64, ghz: f64) -> u32 {
    (ns * ghz).round() as u32
}

impl Topology {
    /// The machine of a validated `cfg` over `memory` bytes, timed at `ghz`; every channel gets
    /// the `dram` timing with one channel of its own.
    pub fn new(cfg: &TopologyConfig, memory: u64, dram: &DramConfig, ghz: f64) -> Topology {
        let n = cfg.sockets * cfg.channels;
        let one = DramConfig { channels: 1, ..dram.clone() };
        Topology {
            slice: memory / n as u64,
            channels_per_socket: cfg.channels,
            noc: cycles(cfg.noc_ns, ghz),
            link: cycles(cfg.link_ns, ghz),
            links: cfg.links,
            drams: (0..n).map(|_| Dram::new(&one, ghz)).collect(),
        }
    }

    /// Where `pa` lives.
    #[inline]
    pub fn node(&self, pa: u64) -> Node {
        let channel = ((pa / self.slice) as u32).min(self.drams.len() as u32 - 1);
        Node { socket: channel / self.channels_per_socket, channel }
    }

    /// Link hops between two sockets.
    #[inline]
    pub fn hops(&self, a: u32, b: u32) -> u32 {
        match self.links {
            Links::Hypercube => (a ^ b).count_ones(),
            Links::Full => (a != b) as u32,
        }
    }

    /// One-way network latency from socket `from` to the memory controller of socket `to`.
    #[inline]
    pub fn one_way(&self, from: u32, to: u32) -> u32 {
        let h = self.hops(from, to);
        // Local: one crossing of the socket's network. Remote: out of this socket, over the
        // links, and across the target socket's network.
        self.noc * (1 + (h > 0) as u32) + h * self.link
    }

    /// The DRAM access at `pa` (its channel's row buffers move): latency in cycles.
    #[inline]
    pub fn dram(&mut self, pa: u64, translation: bool, write: bool) -> u32 {
        let ch = self.node(pa).channel as usize;
        let local = pa - ch as u64 * self.slice;
        self.drams[ch].access(local, translation, write)
    }

    /// Sockets.
    pub fn sockets(&self) -> u32 {
        self.drams.len() as u32 / self.channels_per_socket
    }

    /// Summed DRAM counters of every channel.
    pub fn dram_stats(&self) -> DramStats {
        let mut t = DramStats::default();
        for d in &self.drams {
            t.add(&d.stats());
        }
        t
    }

    /// Zeroes every channel's counters (open rows stay open).
    pub fn reset_stats(&mut self) {
        for d in &mut self.drams {
            d.reset_stats();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(sockets: u32, links: Links) -> Topology {
        let cfg = TopologyConfig { sockets, channels: 4, noc_ns: 10.0, link_ns: 30.0, links };
        Topology::new(&cfg, 8 << 30, &DramConfig::default(), 2.0)
    }

    #[test]
    fn addresses_map_to_contiguous_channel_slices() {
        let t = machine(8, Links::Hypercube);
        // 8 GiB over 32 channels: 256 MiB each.
        assert_eq!(t.node(0), Node { socket: 0, channel: 0 });
        assert_eq!(t.node((256 << 20) - 1), Node { socket: 0, channel: 0 });
        assert_eq!(t.node(256 << 20), Node { socket: 0, channel: 1 });
        assert_eq!(t.node(1 << 30), Node { socket: 1, channel: 4 });
        assert_eq!(t.node((8 << 30) - 1), Node { socket: 7, channel: 31 });
    }

    #[test]
    fn latency_grows_with_hops() {
        let t = machine(8, Links::Hypercube);
        // 2 GHz: noc 20 cycles, link 60.
        assert_eq!(t.one_way(3, 3), 20);
        assert_eq!(t.one_way(0, 1), 20 + 20 + 60);
        assert_eq!(t.one_way(0, 7), 20 + 20 + 3 * 60);
        let f = machine(8, Links::Full);
        assert_eq!(f.one_way(0, 7), 20 + 20 + 60);
    }
}
