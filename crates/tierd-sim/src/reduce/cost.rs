//! What one block's reduction costs a worker, step by step
//! (`docs/devices/processor.md`): the live reduced tier's codec (XXH3-128
//! fingerprint, lz4 block compression, the byte check of a dedup hit) and
//! the block IO the worker issues (storing a fragment, staging a raw block
//! and reading it back). Every step is a fixed cost per block plus a cost
//! per KiB; the defaults are measured on this repository's machine by
//! `tierd sim --experiment reduce-calibrate` (the numbers and the command
//! are in `docs/devices/processor.md`).

use serde::{Deserialize, Serialize};

use super::packs::PassWork;

/// One step's worker time: `fixed_ns + ns_per_kib × KiB`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub fixed_ns: f64,
    pub ns_per_kib: f64,
}

impl Cost {
    pub const fn new(fixed_ns: f64, ns_per_kib: f64) -> Cost {
        Cost {
            fixed_ns,
            ns_per_kib,
        }
    }

    /// Worker time for `bytes`.
    pub fn ns(&self, bytes: f64) -> f64 {
        self.fixed_ns + self.ns_per_kib * bytes / 1024.0
    }

    /// The line through two measurements (`(bytes, ns)`), fixed part clamped
    /// at zero: what a calibration fits from a small and a large block.
    pub fn fit(small: (f64, f64), large: (f64, f64)) -> Cost {
        let ns_per_kib = ((large.1 - small.1) / ((large.0 - small.0) / 1024.0)).max(0.0);
        let fixed_ns = (small.1 - ns_per_kib * small.0 / 1024.0).max(0.0);
        Cost {
            fixed_ns,
            ns_per_kib,
        }
    }
}

/// Per-step costs of reducing one block, and what lz4 makes of the data.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReductionCosts {
    /// XXH3-128 fingerprint (`codec::fingerprint`).
    pub hash: Cost,
    /// lz4 block compression of 2:1 data (`codec::compress`).
    pub compress: Cost,
    /// lz4 decompression (`codec::decompress`): a dedup hit reads the stored
    /// fragment back to compare it.
    pub decompress: Cost,
    /// Byte comparison of a dedup candidate with the new block.
    pub compare: Cost,
    /// Issuing one block write (a stage store, a fragment store): the
    /// system call and the copy (buffered `pwrite`), per byte written.
    pub store: Cost,
    /// Issuing one block read (reading a staged block back, a stored
    /// fragment for the byte check): buffered `pread`, per byte read.
    pub load: Cost,
    /// lz4's output over its input on the data (0.5 for exactly 2:1).
    pub compressed_fraction: f64,
}

/// Measured on the repository's build machine (2 cores of an AMD EPYC VM,
/// shared with other builds) by `tierd sim --experiment reduce-calibrate`
/// (release build): the fastest of 25 interleaved rounds per step, fitted
/// through 4 KiB and 8 KiB blocks. lz4 compression of an 8 KiB block took
/// 5.1 µs in 4 of 9 processes and 8.0–8.8 µs in the others (stable within
/// one; every other step repeats within 5 %); these are a 5.1 µs run's.
/// See `docs/devices/processor.md`.
pub const MEASURED: ReductionCosts = ReductionCosts {
    hash: Cost::new(25.0, 53.9),
    compress: Cost::new(240.0, 606.6),
    decompress: Cost::new(0.0, 346.1),
    compare: Cost::new(0.0, 32.2),
    store: Cost::new(2106.0, 141.3),
    load: Cost::new(240.0, 69.3),
    compressed_fraction: 0.517,
};

impl Default for ReductionCosts {
    fn default() -> Self {
        MEASURED
    }
}

/// Which work a write's block takes, by mode and by whether it duplicates
/// a stored block.
impl ReductionCosts {
    /// Reducing one block of `bytes`: fingerprint, then for a duplicate the
    /// byte check against the stored fragment (read it, decompress, compare),
    /// for a new block compression and storing the fragment.
    pub fn reduce_ns(&self, bytes: u64, duplicate: bool) -> f64 {
        let bytes = bytes as f64;
        let fragment = bytes * self.compressed_fraction;
        self.hash.ns(bytes)
            + if duplicate {
                self.load.ns(fragment) + self.decompress.ns(bytes) + self.compare.ns(bytes)
            } else {
                self.compress.ns(bytes) + self.store.ns(fragment)
            }
    }

    /// Storing the raw block in the stage (post-process, before the ack;
    /// paper 004 Fig. 1 ②).
    pub fn stage_store_ns(&self, bytes: u64) -> f64 {
        self.store.ns(bytes as f64)
    }

    /// Reading a staged block back to reduce it (Fig. 1 ④) and reducing it.
    pub fn staged_reduce_ns(&self, bytes: u64, duplicate: bool) -> f64 {
        self.load.ns(bytes as f64) + self.reduce_ns(bytes, duplicate)
    }

    /// Mean worker time per write of `bytes` in inline mode, a
    /// `duplicate_fraction` of the blocks being duplicates.
    pub fn inline_ns(&self, bytes: u64, duplicate_fraction: f64) -> f64 {
        duplicate_fraction * self.reduce_ns(bytes, true)
            + (1.0 - duplicate_fraction) * self.reduce_ns(bytes, false)
    }

    /// Mean worker time per write in post-process mode.
    pub fn post_ns(&self, bytes: u64, duplicate_fraction: f64) -> f64 {
        self.stage_store_ns(bytes)
            + self.load.ns(bytes as f64)
            + self.inline_ns(bytes, duplicate_fraction)
    }

    /// One cleaning pass's worker time (`super::packs`): each victim pack
    /// read whole (one `load` of a pack), the live bytes it copies written
    /// (`store` per KiB, and its fixed cost once per pack they fill: the
    /// copies are appended to open packs and written a pack at a time), and
    /// with dedup each copied fragment decompressed (a compressed one) and
    /// fingerprinted, so the index's hint follows it (the live tier's
    /// `relocate_victims`).
    pub fn clean_ns(&self, work: &PassWork, pack_bytes: u64, block_bytes: u64, dedup: bool) -> f64 {
        if work.packs_read == 0 {
            return 0.0;
        }
        let bytes = work.bytes as f64;
        let packs_written = work.bytes.div_ceil(pack_bytes.max(1)) as f64;
        let read = work.packs_read as f64 * self.load.ns(pack_bytes as f64);
        let write = packs_written * self.store.fixed_ns + self.store.ns_per_kib * bytes / 1024.0;
        let rehash = if dedup {
            let block = block_bytes as f64;
            work.fragments as f64 * (self.hash.ns(block) + self.decompress.ns(block))
        } else {
            0.0
        };
        read + write + rehash
    }

    /// Post-process's work per write over inline's (the `r` of
    /// `tierd_core::reduce::SwitchConfig::validate`).
    pub fn post_work_ratio(&self, bytes: u64, duplicate_fraction: f64) -> f64 {
        self.post_ns(bytes, duplicate_fraction) / self.inline_ns(bytes, duplicate_fraction)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_through_two_sizes() {
        let cost = Cost::fit((4096.0, 500.0), (16384.0, 1700.0));
        assert!((cost.ns_per_kib - 100.0).abs() < 1e-9);
        assert!((cost.fixed_ns - 100.0).abs() < 1e-9);
        assert!((cost.ns(8192.0) - 900.0).abs() < 1e-9);
        // Noise that makes the small block dearer per KiB than the line: no
        // negative fixed cost.
        assert_eq!(Cost::fit((4096.0, 100.0), (16384.0, 1700.0)).fixed_ns, 0.0);
    }

    #[test]
    fn post_process_does_the_stage_on_top_of_inlines_work() {
        let costs = ReductionCosts {
            hash: Cost::new(0.0, 10.0),
            compress: Cost::new(100.0, 100.0),
            decompress: Cost::new(0.0, 20.0),
            compare: Cost::new(0.0, 5.0),
            store: Cost::new(1000.0, 50.0),
            load: Cost::new(500.0, 25.0),
            compressed_fraction: 0.5,
        };
        // 8 KiB new block: 80 + 900 + (1000 + 200) = 2180; duplicate:
        // 80 + (500 + 100) + 160 + 40 = 880.
        assert_eq!(costs.reduce_ns(8192, false), 2180.0);
        assert_eq!(costs.reduce_ns(8192, true), 880.0);
        assert_eq!(costs.inline_ns(8192, 0.5), 1530.0);
        // Stage store 1000 + 400, read-back 500 + 200.
        assert_eq!(costs.post_ns(8192, 0.5), 1530.0 + 1400.0 + 700.0);
        assert!(costs.post_work_ratio(8192, 0.5) > 2.0);
    }
}
