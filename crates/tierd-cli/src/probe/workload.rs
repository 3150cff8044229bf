//! Paper 001's microbenchmark as pure functions: what each phase reads and
//! writes, where, in what order (docs/probe.md, "Workload").
//!
//! - reads are 1 MiB: **sr** sequential from byte 0, **rr** random over the
//!   whole device (4 KiB-aligned offsets);
//! - writes: **sw** sequential 1 MiB from byte 0, **rw** random over the
//!   whole device in 1 KiB, 16 KiB, 256 KiB and 4 MiB pieces, equally many
//!   of each, shuffled;
//! - a run is a list of combinations (write load, then reads), each started
//!   on a settled device: reads with no writes (`none`) first, then sw and
//!   rw at the largest amount, then rw → rr at every other amount (Fig. 7).

use serde::{Deserialize, Serialize};
use tierd_common::rng::{Rng, SeededRng};

/// Every read of the benchmark.
pub const READ_BYTES: u64 = 1 << 20;
/// Sequential writes.
pub const SEQUENTIAL_WRITE_BYTES: u64 = 1 << 20;
/// Random writes: equally many of each (paper 001 §3).
pub const RANDOM_WRITE_SIZES_BYTES: [u64; 4] = [1 << 10, 16 << 10, 256 << 10, 4 << 20];
/// Offsets are multiples of this (O_DIRECT).
pub const ALIGNMENT_BYTES: u64 = 4096;

/// The write load before a combination's reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteKind {
    None,
    Sw,
    Rw,
}

/// The reads of a combination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadKind {
    Sr,
    Rr,
}

impl WriteKind {
    pub fn name(self) -> &'static str {
        match self {
            WriteKind::None => "none",
            WriteKind::Sw => "sw",
            WriteKind::Rw => "rw",
        }
    }
}

impl ReadKind {
    pub fn name(self) -> &'static str {
        match self {
            ReadKind::Sr => "sr",
            ReadKind::Rr => "rr",
        }
    }
}

/// One IO of a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Io {
    pub write: bool,
    pub offset_bytes: u64,
    pub length_bytes: u64,
}

/// One combination of the benchmark: a write load, then reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Combination {
    pub write: WriteKind,
    pub read: ReadKind,
    pub written_bytes: u64,
}

impl Combination {
    /// `rw-rr-1073741824`: unique within a run.
    pub fn label(&self) -> String {
        format!(
            "{}-{}-{}",
            self.write.name(),
            self.read.name(),
            self.written_bytes
        )
    }
}

/// The amounts of a run, already multiplied by the scale.
#[derive(Clone, Debug, PartialEq)]
pub struct Amounts {
    /// Amounts written by rw before rr, ascending; the largest is also the
    /// amount of sw and of rw before sr.
    pub written_bytes: Vec<u64>,
    pub read_bytes: u64,
    /// Smallest write the device takes (1 KiB writes are rounded up to it).
    pub write_size_min_bytes: u64,
}

/// `value × scale`, rounded down to whole MiB (at least one).
pub fn scaled(value_bytes: u64, scale: f64) -> u64 {
    let bytes = (value_bytes as f64 * scale) as u64;
    (bytes / READ_BYTES).max(1) * READ_BYTES
}

/// The combinations of a run, in the order they run.
pub fn combinations(amounts: &Amounts) -> Vec<Combination> {
    let largest = amounts.written_bytes.iter().copied().max().unwrap_or(0);
    let mut list = vec![
        Combination {
            write: WriteKind::None,
            read: ReadKind::Sr,
            written_bytes: 0,
        },
        Combination {
            write: WriteKind::None,
            read: ReadKind::Rr,
            written_bytes: 0,
        },
    ];
    for write in [WriteKind::Sw, WriteKind::Rw] {
        for read in [ReadKind::Sr, ReadKind::Rr] {
            if write == WriteKind::Rw && read == ReadKind::Rr {
                continue;
            }
            list.push(Combination {
                write,
                read,
                written_bytes: largest,
            });
        }
    }
    let mut amounts_rr = amounts.written_bytes.clone();
    amounts_rr.sort_unstable();
    amounts_rr.dedup();
    for written_bytes in amounts_rr {
        list.push(Combination {
            write: WriteKind::Rw,
            read: ReadKind::Rr,
            written_bytes,
        });
    }
    list
}

/// Bytes the device must hold: the sequential runs start at byte 0 and
/// the random IO needs room for its largest piece.
pub fn required_bytes(amounts: &Amounts) -> u64 {
    let largest = amounts.written_bytes.iter().copied().max().unwrap_or(0);
    largest
        .max(amounts.read_bytes)
        .max(RANDOM_WRITE_SIZES_BYTES[3])
        .max(READ_BYTES)
}

/// A random aligned offset for `length` bytes inside `device_bytes`.
pub fn random_offset(rng: &mut SeededRng, device_bytes: u64, length_bytes: u64) -> u64 {
    let slots = device_bytes.saturating_sub(length_bytes) / ALIGNMENT_BYTES + 1;
    rng.below(slots) * ALIGNMENT_BYTES
}

/// The write load of `kind` amounting to about `written_bytes`.
pub fn writes(
    kind: WriteKind,
    written_bytes: u64,
    device_bytes: u64,
    write_size_min_bytes: u64,
    rng: &mut SeededRng,
) -> Vec<Io> {
    match kind {
        WriteKind::None => Vec::new(),
        WriteKind::Sw => (0..written_bytes / SEQUENTIAL_WRITE_BYTES)
            .map(|index| Io {
                write: true,
                offset_bytes: index * SEQUENTIAL_WRITE_BYTES,
                length_bytes: SEQUENTIAL_WRITE_BYTES,
            })
            .collect(),
        WriteKind::Rw => {
            let sizes = RANDOM_WRITE_SIZES_BYTES.map(|size| size.max(write_size_min_bytes));
            let round: u64 = sizes.iter().sum();
            let each = (written_bytes / round).max(1);
            let mut lengths: Vec<u64> = sizes
                .iter()
                .flat_map(|&size| std::iter::repeat_n(size, each as usize))
                .collect();
            // Fisher-Yates: the sizes come in a seeded random order.
            for index in (1..lengths.len()).rev() {
                let other = rng.below(index as u64 + 1) as usize;
                lengths.swap(index, other);
            }
            lengths
                .into_iter()
                .map(|length_bytes| Io {
                    write: true,
                    offset_bytes: random_offset(rng, device_bytes, length_bytes),
                    length_bytes,
                })
                .collect()
        }
    }
}

/// The reads of `kind`: `read_bytes` in 1 MiB reads.
pub fn reads(kind: ReadKind, read_bytes: u64, device_bytes: u64, rng: &mut SeededRng) -> Vec<Io> {
    (0..read_bytes / READ_BYTES)
        .map(|index| Io {
            write: false,
            offset_bytes: match kind {
                ReadKind::Sr => index * READ_BYTES,
                ReadKind::Rr => random_offset(rng, device_bytes, READ_BYTES),
            },
            length_bytes: READ_BYTES,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_writes_come_in_equal_counts_of_the_four_sizes_inside_the_device() {
        let mut rng = SeededRng::new(1);
        let device = 64 << 30;
        let load = writes(WriteKind::Rw, 10 << 30, device, 1, &mut rng);
        // 10 GiB / (1 KiB + 16 KiB + 256 KiB + 4 MiB) = 2400 of each.
        assert_eq!(load.len(), 9600);
        for size in RANDOM_WRITE_SIZES_BYTES {
            assert_eq!(
                load.iter().filter(|io| io.length_bytes == size).count(),
                2400
            );
        }
        assert!(load.iter().all(|io| io.offset_bytes % ALIGNMENT_BYTES == 0
            && io.offset_bytes + io.length_bytes <= device));
        // Shuffled: the first hundred are not all one size.
        let first = load[0].length_bytes;
        assert!(load[..100].iter().any(|io| io.length_bytes != first));
        let rounded = writes(WriteKind::Rw, 10 << 30, device, 4096, &mut rng);
        assert!(rounded.iter().all(|io| io.length_bytes >= 4096));
    }

    #[test]
    fn sequential_loads_start_at_zero_and_random_reads_cover_the_device() {
        let mut rng = SeededRng::new(2);
        let device = 1 << 30;
        let sw = writes(WriteKind::Sw, 8 << 20, device, 1, &mut rng);
        assert_eq!(
            sw.iter().map(|io| io.offset_bytes).collect::<Vec<_>>(),
            (0..8).map(|index| index << 20).collect::<Vec<_>>()
        );
        let sr = reads(ReadKind::Sr, 4 << 20, device, &mut rng);
        assert_eq!(sr[3].offset_bytes, 3 << 20);
        let rr = reads(ReadKind::Rr, 512 << 20, device, &mut rng);
        assert_eq!(rr.len(), 512);
        assert!(rr.iter().any(|io| io.offset_bytes > device / 2));
        assert!(rr.iter().any(|io| io.offset_bytes < device / 2));
        assert!(rr.iter().all(|io| io.offset_bytes + READ_BYTES <= device));
    }

    #[test]
    fn a_run_has_the_papers_combinations_and_one_rw_rr_per_amount() {
        let amounts = Amounts {
            written_bytes: vec![10 << 20, 1 << 20, 5 << 20],
            read_bytes: 10 << 20,
            write_size_min_bytes: 1,
        };
        let labels: Vec<String> = combinations(&amounts)
            .iter()
            .map(Combination::label)
            .collect();
        assert_eq!(
            labels,
            [
                "none-sr-0",
                "none-rr-0",
                "sw-sr-10485760",
                "sw-rr-10485760",
                "rw-sr-10485760",
                "rw-rr-1048576",
                "rw-rr-5242880",
                "rw-rr-10485760"
            ]
        );
        assert_eq!(required_bytes(&amounts), 10 << 20);
        assert_eq!(scaled(10 << 30, 1.0 / 64.0), 160 << 20);
        assert_eq!(scaled(1 << 20, 0.001), 1 << 20);
    }
}
