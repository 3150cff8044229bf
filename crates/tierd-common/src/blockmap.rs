//! [`BlockMap`]: a hash map keyed by block or page numbers, built for the
//! simulator's hot paths (the block cache's block → slot map, the page
//! caches' page → node index).
//!
//! Those maps hold up to millions of entries and are looked up for every
//! block of every request; with `std`'s map (hashbrown) a lookup in a table
//! larger than the CPU caches costs two cache misses (the control bytes,
//! then the bucket), and neighbouring blocks land in unrelated places. Here
//! one flat array of `(key, value)` entries is probed linearly (one miss
//! for a lookup that finds its entry in its home line), and the home
//! position keeps runs of [`GROUP`] consecutive keys side by side in one
//! cache line, so a request over neighbouring blocks touches one line
//! instead of one per block. The load stays at most 1/2.
//!
//! Deterministic like [`super::hash::FastMap`]: no random seed, the same
//! inserts and removals leave the same table. Iteration ([`BlockMap::keys`],
//! [`BlockMap::iter`]) is in table order, which is no particular order.

use std::fmt;

/// Consecutive keys that share a home line: `1 << GROUP_BITS`.
const GROUP_BITS: u32 = 2;
pub const GROUP: u64 = 1 << GROUP_BITS;
/// The key that marks an empty entry (the key itself is kept aside).
const EMPTY: u64 = u64::MAX;
const MIN_ENTRIES: usize = 16;
/// Fibonacci hashing's multiplier (2^64 / φ).
const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

#[derive(Clone, Copy)]
struct Entry<V> {
    key: u64,
    value: V,
}

/// A map from `u64` keys (block or page numbers) to small `Copy` values.
#[derive(Clone)]
pub struct BlockMap<V: Copy + Default> {
    /// A power of two long (at least [`MIN_ENTRIES`]), or empty.
    entries: Vec<Entry<V>>,
    /// Entries in `entries` (the key `u64::MAX` is counted apart).
    len: usize,
    /// `64 − log2(groups)`: the shift that takes a group's hash to its line.
    shift: u32,
    /// The value of key `u64::MAX`, which marks empty entries.
    max_key: Option<V>,
}

impl<V: Copy + Default> Default for BlockMap<V> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            len: 0,
            shift: 64,
            max_key: None,
        }
    }
}

impl<V: Copy + Default + fmt::Debug> fmt::Debug for BlockMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V: Copy + Default> BlockMap<V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Room for `capacity` keys before the table grows.
    pub fn with_capacity(capacity: usize) -> Self {
        let mut map = Self::default();
        map.reserve(capacity);
        map
    }

    /// Keys held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len + usize::from(self.max_key.is_some())
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes room for `additional` more keys.
    pub fn reserve(&mut self, additional: usize) {
        let wanted = (self.len + additional)
            .saturating_mul(2)
            .max(MIN_ENTRIES)
            .next_power_of_two();
        if wanted > self.entries.len() {
            self.resize(wanted);
        }
    }

    /// Forgets every key, keeping the table's size.
    pub fn clear(&mut self) {
        for entry in &mut self.entries {
            *entry = Entry {
                key: EMPTY,
                value: V::default(),
            };
        }
        self.len = 0;
        self.max_key = None;
    }

    /// Where `key` (not `EMPTY`) starts probing: its group's line, at the
    /// key's place in the group.
    #[inline]
    fn home(&self, key: u64) -> usize {
        let line = (key >> GROUP_BITS).wrapping_mul(MULTIPLIER) >> self.shift;
        ((line << GROUP_BITS) | (key & (GROUP - 1))) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.entries.len() - 1
    }

    /// The index of `key` (not `EMPTY`), if present.
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut index = self.home(key);
        loop {
            let entry = &self.entries[index];
            if entry.key == key {
                return Some(index);
            }
            if entry.key == EMPTY {
                return None;
            }
            index = (index + 1) & mask;
        }
    }

    /// The index where `key` (not `EMPTY`) is or would go; the table has room.
    #[inline]
    fn find_or_empty(&self, key: u64) -> (usize, bool) {
        let mask = self.mask();
        let mut index = self.home(key);
        loop {
            let entry = &self.entries[index];
            if entry.key == key {
                return (index, true);
            }
            if entry.key == EMPTY {
                return (index, false);
            }
            index = (index + 1) & mask;
        }
    }

    #[inline]
    pub fn get(&self, key: &u64) -> Option<&V> {
        if *key == EMPTY {
            return self.max_key.as_ref();
        }
        self.find(*key).map(|index| &self.entries[index].value)
    }

    #[inline]
    pub fn get_mut(&mut self, key: &u64) -> Option<&mut V> {
        if *key == EMPTY {
            return self.max_key.as_mut();
        }
        self.find(*key).map(|index| &mut self.entries[index].value)
    }

    #[inline]
    pub fn contains_key(&self, key: &u64) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key`'s value; the old one, if any.
    #[inline]
    pub fn insert(&mut self, key: u64, value: V) -> Option<V> {
        let slot = self.slot(key);
        let old = slot.0.then_some(*slot.1);
        *slot.1 = value;
        old
    }

    /// `key`'s value, inserted as `V::default()` if absent.
    #[inline]
    pub fn entry_or_default(&mut self, key: u64) -> &mut V {
        self.slot(key).1
    }

    /// Whether `key` was present, and its value (a new entry's is `V::default()`).
    #[inline]
    fn slot(&mut self, key: u64) -> (bool, &mut V) {
        if key == EMPTY {
            let present = self.max_key.is_some();
            return (present, self.max_key.get_or_insert_with(V::default));
        }
        if (self.len + 1) * 2 > self.entries.len() {
            let size = (self.entries.len() * 2).max(MIN_ENTRIES);
            self.resize(size);
        }
        let (index, present) = self.find_or_empty(key);
        if !present {
            self.entries[index] = Entry {
                key,
                value: V::default(),
            };
            self.len += 1;
        }
        (present, &mut self.entries[index].value)
    }

    /// Takes `key` out; its value, if it was present.
    #[inline]
    pub fn remove(&mut self, key: &u64) -> Option<V> {
        if *key == EMPTY {
            return self.max_key.take();
        }
        let mut hole = self.find(*key)?;
        let value = self.entries[hole].value;
        // Backward-shift deletion: later entries of the probe run move
        // into the hole when their home allows, so no tombstones are left.
        let mask = self.mask();
        let mut next = hole;
        loop {
            next = (next + 1) & mask;
            let key = self.entries[next].key;
            if key == EMPTY {
                break;
            }
            let home = self.home(key);
            if next.wrapping_sub(home) & mask >= next.wrapping_sub(hole) & mask {
                self.entries[hole] = self.entries[next];
                hole = next;
            }
        }
        self.entries[hole] = Entry {
            key: EMPTY,
            value: V::default(),
        };
        self.len -= 1;
        Some(value)
    }

    /// Every `(key, value)`, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &V)> + '_ {
        self.entries
            .iter()
            .filter(|entry| entry.key != EMPTY)
            .map(|entry| (&entry.key, &entry.value))
            .chain(self.max_key.as_ref().map(|value| (&EMPTY, value)))
    }

    /// Every key, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &u64> + '_ {
        self.iter().map(|(key, _)| key)
    }

    /// Every value, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, value)| value)
    }

    /// Every value, mutably, in no particular order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> + '_ {
        self.entries
            .iter_mut()
            .filter(|entry| entry.key != EMPTY)
            .map(|entry| &mut entry.value)
            .chain(self.max_key.as_mut())
    }

    /// Keeps the keys `keep` says to keep (it sees every key once, in no
    /// particular order, and may change the values).
    pub fn retain(&mut self, mut keep: impl FnMut(&u64, &mut V) -> bool) {
        let mut removed = 0;
        for entry in &mut self.entries {
            if entry.key != EMPTY && !keep(&entry.key, &mut entry.value) {
                entry.key = EMPTY;
                removed += 1;
            }
        }
        if let Some(value) = self.max_key.as_mut() {
            if !keep(&EMPTY, value) {
                self.max_key = None;
            }
        }
        if removed > 0 {
            // The holes broke probe runs: lay the rest out again.
            self.len -= removed;
            self.resize(self.entries.len());
        }
    }

    fn resize(&mut self, size: usize) {
        debug_assert!(size.is_power_of_two() && size >= MIN_ENTRIES);
        let old = std::mem::replace(
            &mut self.entries,
            vec![
                Entry {
                    key: EMPTY,
                    value: V::default(),
                };
                size
            ],
        );
        let groups = size >> GROUP_BITS;
        self.shift = 64 - groups.trailing_zeros();
        for entry in old {
            if entry.key != EMPTY {
                let (index, _) = self.find_or_empty(entry.key);
                self.entries[index] = entry;
            }
        }
    }
}

impl<V: Copy + Default> std::ops::Index<&u64> for BlockMap<V> {
    type Output = V;

    /// Panics when `key` is absent, as `std`'s maps do.
    fn index(&self, key: &u64) -> &V {
        self.get(key).expect("key not in the BlockMap")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::FastMap;
    use crate::rng::splitmix64;

    /// Random inserts, updates, removals and lookups agree with std's map,
    /// on dense runs of keys, scattered keys and the reserved `u64::MAX`.
    #[test]
    fn agrees_with_a_hash_map() {
        for seed in 0..30u64 {
            let mut state = seed;
            let mut map: BlockMap<u32> = BlockMap::default();
            let mut model: FastMap<u64, u32> = FastMap::default();
            let span = [16u64, 300, 5_000, u64::MAX][(seed % 4) as usize];
            for step in 0..20_000u32 {
                let raw = splitmix64(&mut state);
                let key = if raw.is_multiple_of(97) {
                    u64::MAX
                } else if span == u64::MAX {
                    raw
                } else {
                    raw % span
                };
                match splitmix64(&mut state) % 6 {
                    0 | 1 => assert_eq!(map.insert(key, step), model.insert(key, step)),
                    2 => assert_eq!(map.remove(&key), model.remove(&key)),
                    3 => {
                        *map.entry_or_default(key) += 1;
                        *model.entry(key).or_default() += 1;
                    }
                    4 => {
                        if let Some(value) = map.get_mut(&key) {
                            *value = value.wrapping_add(7);
                        }
                        if let Some(value) = model.get_mut(&key) {
                            *value = value.wrapping_add(7);
                        }
                    }
                    _ => assert_eq!(map.get(&key), model.get(&key)),
                }
                assert_eq!(map.len(), model.len());
            }
            let mut held: Vec<(u64, u32)> = map.iter().map(|(k, v)| (*k, *v)).collect();
            let mut expected: Vec<(u64, u32)> = model.iter().map(|(k, v)| (*k, *v)).collect();
            held.sort_unstable();
            expected.sort_unstable();
            assert_eq!(held, expected, "seed {seed}");
            for (key, value) in &expected {
                assert_eq!(map[key], *value);
                assert!(map.contains_key(key));
            }
            map.retain(|key, value| {
                *value = value.wrapping_add(1);
                key % 3 != 0
            });
            model.retain(|key, value| {
                *value = value.wrapping_add(1);
                key % 3 != 0
            });
            for value in map.values_mut() {
                *value ^= 5;
            }
            for value in model.values_mut() {
                *value ^= 5;
            }
            let mut held: Vec<(u64, u32)> = map.iter().map(|(k, v)| (*k, *v)).collect();
            let mut expected: Vec<(u64, u32)> = model.iter().map(|(k, v)| (*k, *v)).collect();
            held.sort_unstable();
            expected.sort_unstable();
            assert_eq!(held, expected, "seed {seed} after retain");
            for (key, value) in &expected {
                assert_eq!(map.get(key), Some(value));
            }
            map.clear();
            assert!(map.is_empty());
            assert!(expected.iter().all(|(key, _)| !map.contains_key(key)));
        }
    }

    /// Consecutive keys of one group sit side by side (one cache line).
    #[test]
    fn a_group_of_consecutive_keys_shares_a_line() {
        let mut map: BlockMap<u32> = BlockMap::with_capacity(1 << 12);
        for key in 0..4096u64 {
            map.insert(key * 977, 0);
        }
        for group in [8u64, 4000, 123_456] {
            let first = group * GROUP;
            let homes: Vec<usize> = (first..first + GROUP).map(|key| map.home(key)).collect();
            for (offset, home) in homes.iter().enumerate() {
                assert_eq!(*home, homes[0] + offset);
            }
            assert_eq!(homes[0] % GROUP as usize, 0);
        }
    }
}
