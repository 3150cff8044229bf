//! Deterministic, fast hashing for hash maps and sets.
//!
//! `std`'s default `RandomState` seeds itself from the OS RNG, so iteration
//! order differs between runs; simulator output must not. These maps use a
//! fixed multiply-rotate hasher (the FxHash construction), which is also several
//! times faster than SipHash on integer keys such as block numbers.

use std::hash::{BuildHasherDefault, Hasher};

/// A fixed-seed hasher for integer-heavy keys. Not DoS resistant: do not key
/// it by untrusted strings in a long-lived server map.
#[derive(Clone, Copy, Debug, Default)]
pub struct FixedHasher {
    state: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FixedHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.state = (self.state.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FixedHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // Final avalanche so that low bits (used by the table) depend on all input bits.
        let mut x = self.state;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 56));
        }
    }

    #[inline]
    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }
    #[inline]
    fn write_u16(&mut self, value: u16) {
        self.add(u64::from(value));
    }
    #[inline]
    fn write_u32(&mut self, value: u32) {
        self.add(u64::from(value));
    }
    #[inline]
    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }
    #[inline]
    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }
}

pub type FixedState = BuildHasherDefault<FixedHasher>;
/// std's `HashMap` with the fixed hasher; use it wherever a hash map is needed
/// (`clippy.toml` bans the std type, whose default state is OS-seeded).
#[allow(clippy::disallowed_types)] // the one sanctioned spelling of std's map
pub type FastMap<K, V> = std::collections::HashMap<K, V, FixedState>;
/// std's `HashSet` with the fixed hasher.
#[allow(clippy::disallowed_types)] // the one sanctioned spelling of std's set
pub type FastSet<K> = std::collections::HashSet<K, FixedState>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iteration_order_is_the_same_every_time() {
        let build = || {
            let mut set: FastSet<u64> = FastSet::default();
            for value in 0..1000u64 {
                set.insert(value.wrapping_mul(7919));
            }
            set.into_iter().collect::<Vec<_>>()
        };
        assert_eq!(build(), build());
    }

    #[test]
    fn sequential_keys_spread_over_low_bits() {
        let mut buckets = [0u32; 16];
        for value in 0..16_000u64 {
            let mut hasher = FixedHasher::default();
            hasher.write_u64(value);
            buckets[(hasher.finish() & 15) as usize] += 1;
        }
        for count in buckets {
            assert!((800..1200).contains(&count), "skewed bucket: {buckets:?}");
        }
    }
}
