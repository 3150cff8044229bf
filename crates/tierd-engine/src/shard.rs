//! Per-thread shards for counters that every IO thread updates.
//!
//! A counter that all connections' threads write on every IO (behind one
//! mutex, or even one atomic) makes the threads queue for it, or bounce its
//! cache line between cores. A [`Sharded`] value has one copy per shard,
//! each on its own cache line ([`CachePadded`], from `crossbeam-utils`: the
//! padding it picks per architecture is 128 bytes on x86_64, where the
//! prefetcher pulls cache lines in pairs); a thread always uses the same
//! shard, and readers sum the shards. Threads get shards round-robin in the
//! order they first record, so up to [`default_shard_count`] threads never
//! share one; beyond that two threads share a shard, which is still correct,
//! only no longer free of contention.

use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

/// Shards for a structure recorded into by every IO thread: twice the CPUs
/// (a thread blocked in IO leaves its CPU to another), as a power of two,
/// at least 4 and at most 64.
pub(crate) fn default_shard_count() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    (cpus * 2).next_power_of_two().clamp(4, 64)
}

/// This thread's number, given out in the order threads first ask.
fn thread_number() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static NUMBER: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|number| *number)
}

/// One `T` per shard, each on its own cache line.
pub(crate) struct Sharded<T> {
    shards: Box<[CachePadded<T>]>,
}

impl<T> Sharded<T> {
    /// `count` shards (rounded up to a power of two, at least one), each
    /// made by `make`.
    pub(crate) fn new(count: usize, mut make: impl FnMut() -> T) -> Self {
        let count = count.max(1).next_power_of_two();
        Self {
            shards: (0..count).map(|_| CachePadded::new(make())).collect(),
        }
    }

    /// The calling thread's shard.
    #[inline]
    pub(crate) fn local(&self) -> &T {
        &self.shards[thread_number() & (self.shards.len() - 1)]
    }

    /// Every shard, for readers that merge them.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.shards.iter().map(|shard| &**shard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    #[test]
    fn each_thread_keeps_one_shard() {
        let sharded = Arc::new(Sharded::new(8, || AtomicU64::new(0)));
        assert_eq!(sharded.iter().count(), 8);
        // Four threads, alive at once, each bumping its own shard; thread
        // numbers are consecutive only among threads that start recording
        // while no other test thread does, so count used shards instead of
        // naming them.
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let sharded = Arc::clone(&sharded);
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    let shard: *const AtomicU64 = sharded.local();
                    for _ in 0..1_000 {
                        sharded.local().fetch_add(1, Ordering::Relaxed);
                    }
                    // The same thread keeps its shard.
                    assert!(std::ptr::eq(shard, sharded.local()));
                    barrier.wait();
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        let total: u64 = sharded
            .iter()
            .map(|shard| shard.load(Ordering::Relaxed))
            .sum();
        assert_eq!(total, 4_000);
        assert!(
            sharded
                .iter()
                .all(|shard| shard.load(Ordering::Relaxed) % 1_000 == 0),
            "each thread's counts land in one shard"
        );
    }

    #[test]
    fn shard_count_is_a_power_of_two() {
        assert_eq!(Sharded::new(5, || 0u8).iter().count(), 8);
        assert_eq!(Sharded::new(0, || 0u8).iter().count(), 1);
        let count = default_shard_count();
        assert!(
            count.is_power_of_two() && (4..=64).contains(&count),
            "{count}"
        );
    }
}
