//! Page caches: the classic per-request baselines the papers compare
//! against (flashcache's FIFO) plus LRU, ARC and S3-FIFO.
//!
//! A cache holds page numbers (4 KiB pages of a volume). The simulator looks
//! every page of a request up with [`PageCache::access`]; a miss inserts the
//! page (reads fill, writes allocate: write-back, as flashcache does) and may
//! evict one page, which the simulator writes back to the slow tier when it
//! was dirty.

pub mod arc;
pub mod fifo;
pub mod lru;
pub mod s3fifo;

use serde::{Deserialize, Serialize};

/// What one access did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub hit: bool,
    /// A page pushed out to make room, and whether it was dirty (must be
    /// written back).
    pub evicted: Option<Evicted>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evicted {
    pub page: u64,
    pub dirty: bool,
}

/// A fixed-capacity page cache.
///
/// Obligations: `access` is O(1) amortised; the cache never holds more than
/// `capacity_pages()` pages; a write marks the page dirty until it is evicted;
/// at most one page is evicted per access; behaviour is deterministic.
pub trait PageCache: Send {
    fn name(&self) -> &'static str;
    fn capacity_pages(&self) -> u64;
    /// Pages resident now.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn access(&mut self, page: u64, is_write: bool) -> Access;
    /// Whether `page` is resident (ghosts are not). O(1); changes nothing.
    fn contains(&self, page: u64) -> bool;
    /// Takes a resident `page` out without counting it as an eviction (a
    /// discard, or a block the block cache could not give a slot); ghosts
    /// are kept. Returns whether it was resident. O(1).
    fn remove(&mut self, page: u64) -> bool;
    /// Pushes out the page a miss on a full cache would push out now (with
    /// its ghost, where the policy keeps one), without a page entering; `None`
    /// when nothing is resident. The block cache uses it to keep slots
    /// coming back while a miss finds none free.
    fn evict(&mut self) -> Option<Evicted>;
    /// Lowers the capacity to `capacity_pages` (a larger value leaves it as
    /// it is): pages past the new capacity are pushed out as [`evict`]
    /// would, in its order, and returned; ghosts are trimmed to the
    /// policy's bounds at the new size. A sampled shadow of a cache whose
    /// sampling rate halves shrinks with it (the block cache's adaptive
    /// admission).
    ///
    /// [`evict`]: PageCache::evict
    fn shrink(&mut self, capacity_pages: u64) -> Vec<Evicted>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheKind {
    Fifo,
    Lru,
    Arc,
    S3fifo,
}

impl CacheKind {
    pub fn name(self) -> &'static str {
        match self {
            CacheKind::Fifo => "fifo",
            CacheKind::Lru => "lru",
            CacheKind::Arc => "arc",
            CacheKind::S3fifo => "s3fifo",
        }
    }
}

/// Bytes per cache page: the caches work on 4 KiB pages of a volume.
pub const PAGE_BYTES: u64 = 4096;

/// The pages a request of `length_bytes` at `offset_bytes` touches: every
/// 4 KiB page that holds at least one of its bytes. Empty for a zero-length
/// request. Never overflows (the end saturates at `u64::MAX`).
pub fn pages_touched(offset_bytes: u64, length_bytes: u64) -> std::ops::Range<u64> {
    if length_bytes == 0 {
        return 0..0;
    }
    let first_page = offset_bytes / PAGE_BYTES;
    let last_byte = offset_bytes.saturating_add(length_bytes - 1);
    first_page..last_byte / PAGE_BYTES + 1
}

/// A cache of `kind` holding at most `capacity_pages` pages, with the
/// policy's published default parameters. A capacity of 0 gives a cache
/// that never holds anything (every access misses, nothing is evicted).
///
/// Panics when `capacity_pages` exceeds [`MAX_CAPACITY_PAGES`] (2^31 − 2
/// pages, 8 TiB of 4 KiB pages): node indices are 32-bit so that the lists
/// stay compact.
pub fn build_cache(kind: CacheKind, capacity_pages: u64) -> Box<dyn PageCache> {
    match kind {
        CacheKind::Fifo => Box::new(fifo::Fifo::new(capacity_pages)),
        CacheKind::Lru => Box::new(lru::Lru::new(capacity_pages)),
        CacheKind::Arc => Box::new(arc::ArcCache::new(capacity_pages)),
        CacheKind::S3fifo => Box::new(s3fifo::S3Fifo::new(capacity_pages)),
    }
}

/// The largest capacity any cache here accepts: ARC keeps up to twice its
/// capacity in nodes (resident pages plus ghosts) and node indices are `u32`
/// with `u32::MAX` reserved for "none".
pub const MAX_CAPACITY_PAGES: u64 = (u32::MAX as u64 - 1) / 2 - 1;

/// What [`replay_pages`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CacheReplayStats {
    pub accesses: u64,
    pub hits: u64,
    /// `1 − hits / accesses`; 0 when there were no accesses.
    pub miss_ratio: f64,
    /// Pages pushed out of the cache.
    pub evictions: u64,
    /// Evicted pages that were dirty (each is one page written back).
    pub dirty_evictions: u64,
}

/// Feeds `(page, is_write)` accesses through `cache` and counts hits and
/// evictions. The cache keeps its state afterwards (call it again to go on).
pub fn replay_pages<C>(
    pages: impl IntoIterator<Item = (u64, bool)>,
    cache: &mut C,
) -> CacheReplayStats
where
    C: PageCache + ?Sized,
{
    let mut stats = CacheReplayStats::default();
    for (page, is_write) in pages {
        let access = cache.access(page, is_write);
        stats.accesses += 1;
        stats.hits += u64::from(access.hit);
        if let Some(evicted) = access.evicted {
            stats.evictions += 1;
            stats.dirty_evictions += u64::from(evicted.dirty);
        }
    }
    stats.miss_ratio = if stats.accesses == 0 {
        0.0
    } else {
        1.0 - stats.hits as f64 / stats.accesses as f64
    };
    stats
}

/// Slab-allocated nodes and intrusive doubly-linked queues over them, shared
/// by the list-based caches (LRU, ARC, S3-FIFO): O(1) push, unlink and move
/// with 32-bit links, and no allocation once the slab has reached its
/// largest size.
pub(crate) mod nodes {
    use tierd_common::blockmap::BlockMap;

    /// "No node".
    pub const NIL: u32 = u32::MAX;

    /// Keys the page index has room for before it first grows.
    const INITIAL_INDEX: usize = 1 << 12;

    #[derive(Clone, Copy, Debug)]
    pub struct Node {
        pub page: u64,
        /// Towards the head (newer) of its queue.
        pub prev: u32,
        /// Towards the tail (older) of its queue.
        pub next: u32,
        pub dirty: bool,
        /// Which of the owner's queues the node is on.
        pub queue: u8,
        /// Policy-defined counter (S3-FIFO's access frequency).
        pub frequency: u8,
    }

    /// A miss in a single-queue cache (FIFO, LRU): on a full cache the tail
    /// (oldest) page leaves, then `page` enters at the head. A capacity of 0
    /// holds nothing.
    #[inline]
    pub fn miss_one_queue(
        nodes: &mut PageNodes,
        queue: &mut Queue,
        capacity_pages: u64,
        page: u64,
        is_write: bool,
    ) -> Option<super::Evicted> {
        if capacity_pages == 0 {
            return None;
        }
        let evicted = if queue.len == capacity_pages {
            evict_one_queue(nodes, queue)
        } else {
            None
        };
        let id = nodes.insert(page, 0, is_write);
        queue.push_head(&mut nodes.nodes, id);
        evicted
    }

    /// The tail (oldest) page of a single-queue cache leaves.
    /// `shrink` of a one-queue cache (FIFO, LRU): the capacity drops to
    /// `capacity_pages` (never rises) and the queue's tail leaves until it fits.
    pub fn shrink_one_queue(
        nodes: &mut PageNodes,
        queue: &mut Queue,
        capacity: &mut u64,
        capacity_pages: u64,
    ) -> Vec<super::Evicted> {
        *capacity = (*capacity).min(capacity_pages);
        let mut evicted = Vec::new();
        while queue.len > *capacity {
            evicted.extend(evict_one_queue(nodes, queue));
        }
        evicted
    }

    pub fn evict_one_queue(nodes: &mut PageNodes, queue: &mut Queue) -> Option<super::Evicted> {
        if queue.len == 0 {
            return None;
        }
        let victim = queue.tail;
        queue.unlink(&mut nodes.nodes, victim);
        let node = nodes.nodes[victim as usize];
        nodes.remove(victim);
        Some(super::Evicted {
            page: node.page,
            dirty: node.dirty,
        })
    }

    /// Takes `page` off a single-queue cache; whether it was there.
    pub fn remove_one_queue(nodes: &mut PageNodes, queue: &mut Queue, page: u64) -> bool {
        match nodes.find(page) {
            Some(id) => {
                queue.unlink(&mut nodes.nodes, id);
                nodes.remove(id);
                true
            }
            None => false,
        }
    }

    /// Nodes by index plus a page → node index. Freed nodes are reused
    /// before the slab grows.
    #[derive(Debug)]
    pub struct PageNodes {
        pub nodes: Vec<Node>,
        free_head: u32,
        index: BlockMap<u32>,
    }

    impl PageNodes {
        /// Room for `expected` nodes before anything is reallocated.
        /// The index starts small and doubles as pages come: a table
        /// sized for a large cache that holds few pages spreads them over
        /// far more memory (cache misses) than the pages need.
        pub fn with_capacity(expected: usize) -> Self {
            Self {
                nodes: Vec::with_capacity(expected),
                free_head: NIL,
                index: BlockMap::with_capacity(expected.min(INITIAL_INDEX)),
            }
        }

        #[inline]
        pub fn find(&self, page: u64) -> Option<u32> {
            self.index.get(&page).copied()
        }

        /// A new node for `page`, which the caller guarantees is absent, not
        /// yet on any queue.
        #[inline]
        pub fn insert(&mut self, page: u64, queue: u8, dirty: bool) -> u32 {
            let node = Node {
                page,
                prev: NIL,
                next: NIL,
                dirty,
                queue,
                frequency: 0,
            };
            let id = if self.free_head != NIL {
                let id = self.free_head;
                self.free_head = self.nodes[id as usize].next;
                self.nodes[id as usize] = node;
                id
            } else {
                let id = u32::try_from(self.nodes.len())
                    .ok()
                    .filter(|id| *id != NIL)
                    .expect(
                        "node slab exceeds 2^32 - 1 nodes (capacity is checked at construction)",
                    );
                self.nodes.push(node);
                id
            };
            self.index.insert(page, id);
            id
        }

        /// Forgets node `id` (already unlinked from its queue) and its page.
        #[inline]
        pub fn remove(&mut self, id: u32) {
            let page = self.nodes[id as usize].page;
            self.index.remove(&page);
            self.nodes[id as usize].next = self.free_head;
            self.free_head = id;
        }
    }

    /// A queue threaded through [`Node::prev`]/[`Node::next`]: head is the
    /// newest (most recently inserted or used), tail the oldest.
    #[derive(Clone, Copy, Debug)]
    pub struct Queue {
        pub head: u32,
        pub tail: u32,
        pub len: u64,
    }

    impl Default for Queue {
        fn default() -> Self {
            Self {
                head: NIL,
                tail: NIL,
                len: 0,
            }
        }
    }

    impl Queue {
        /// Puts unlinked node `id` at the head.
        #[inline]
        pub fn push_head(&mut self, nodes: &mut [Node], id: u32) {
            let old_head = self.head;
            {
                let node = &mut nodes[id as usize];
                node.prev = NIL;
                node.next = old_head;
            }
            if old_head == NIL {
                self.tail = id;
            } else {
                nodes[old_head as usize].prev = id;
            }
            self.head = id;
            self.len += 1;
        }

        /// Takes node `id`, which the caller guarantees is on this queue, off it.
        #[inline]
        pub fn unlink(&mut self, nodes: &mut [Node], id: u32) {
            let (prev, next) = {
                let node = &nodes[id as usize];
                (node.prev, node.next)
            };
            if prev == NIL {
                self.head = next;
            } else {
                nodes[prev as usize].next = next;
            }
            if next == NIL {
                self.tail = prev;
            } else {
                nodes[next as usize].prev = prev;
            }
            self.len -= 1;
        }

        /// Moves node `id` (on this queue) to the head.
        #[inline]
        pub fn move_to_head(&mut self, nodes: &mut [Node], id: u32) {
            if self.head != id {
                self.unlink(nodes, id);
                self.push_head(nodes, id);
            }
        }

        /// Pages from head (newest) to tail (oldest); for tests and debugging.
        pub fn pages(&self, nodes: &[Node]) -> Vec<u64> {
            let mut pages = Vec::with_capacity(self.len as usize);
            let mut id = self.head;
            while id != NIL {
                pages.push(nodes[id as usize].page);
                id = nodes[id as usize].next;
            }
            pages
        }
    }
}

/// Checks a requested capacity against [`MAX_CAPACITY_PAGES`].
pub(crate) fn checked_capacity(capacity_pages: u64) -> u64 {
    assert!(
        capacity_pages <= MAX_CAPACITY_PAGES,
        "cache capacity {capacity_pages} pages exceeds the maximum of {MAX_CAPACITY_PAGES} pages"
    );
    capacity_pages
}

/// Nodes to reserve up front: the capacity, but no more than 64 Ki, so that
/// a huge cache on a short trace, or a sampled shadow of one that holds a
/// few thousand pages, does not allocate memory it never uses (the slab
/// grows by doubling past that).
pub(crate) fn initial_nodes(capacity_nodes: u64) -> usize {
    capacity_nodes.min(1 << 16) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use tierd_common::rng::splitmix64;

    /// Every policy, under random accesses, removals, forced evictions and
    /// shrinks, keeps exactly the pages a model of "inserted − evicted − removed" says
    /// it holds, never more than its capacity; `remove` answers whether the
    /// page was in, and `evict` pushes out a resident page (`None` only when
    /// empty).
    #[test]
    fn removal_keeps_every_policy_consistent() {
        for kind in [
            CacheKind::Fifo,
            CacheKind::Lru,
            CacheKind::Arc,
            CacheKind::S3fifo,
        ] {
            for seed in 0..20u64 {
                let mut state = seed;
                let mut capacity = 1 + splitmix64(&mut state) % 32;
                let mut cache = build_cache(kind, capacity);
                let mut resident = BTreeSet::new();
                for _ in 0..2_000 {
                    let page = splitmix64(&mut state) % 40;
                    let choice = splitmix64(&mut state) % 8;
                    if choice == 0 && splitmix64(&mut state).is_multiple_of(16) {
                        // Shrink (a shadow whose sampling rate halved).
                        let smaller = 1 + splitmix64(&mut state) % capacity;
                        let expected_out = resident.len().saturating_sub(smaller as usize);
                        let evicted = cache.shrink(smaller);
                        assert_eq!(evicted.len(), expected_out, "{kind:?} seed {seed}");
                        for gone in evicted {
                            assert!(
                                resident.remove(&gone.page),
                                "{kind:?} seed {seed}: shrink pushed out a page it did not hold"
                            );
                        }
                        capacity = smaller;
                        assert_eq!(cache.capacity_pages(), capacity);
                    } else if choice == 0 {
                        match cache.evict() {
                            Some(evicted) => assert!(
                                resident.remove(&evicted.page),
                                "{kind:?} seed {seed}: evict pushed out a page it did not hold"
                            ),
                            None => assert!(resident.is_empty(), "{kind:?} seed {seed}"),
                        }
                    } else if choice < 3 {
                        assert_eq!(
                            cache.remove(page),
                            resident.remove(&page),
                            "{kind:?} seed {seed}"
                        );
                    } else {
                        let access = cache.access(page, false);
                        assert_eq!(access.hit, resident.contains(&page), "{kind:?} seed {seed}");
                        if let Some(evicted) = access.evicted {
                            assert!(
                                resident.remove(&evicted.page),
                                "{kind:?} evicted a page it did not hold"
                            );
                            assert_ne!(evicted.page, page);
                        }
                        resident.insert(page);
                    }
                    assert_eq!(cache.len(), resident.len() as u64, "{kind:?} seed {seed}");
                    assert!(cache.len() <= capacity);
                }
            }
        }
    }

    /// `evict` pushes out the page the next miss on the full cache would
    /// have: two copies of a policy, one missing on a new page, the other
    /// evicting, lose the same page and stay alike. FIFO, LRU and S3-FIFO
    /// only: ARC's case IV(A) drops a page without a ghost (or drops a ghost
    /// first) where `evict` keeps one, so the two copies' ghost lists part;
    /// its `evict` is REPLACE, checked by the consistency test above.
    #[test]
    fn evict_takes_the_page_a_miss_would() {
        for kind in [CacheKind::Fifo, CacheKind::Lru, CacheKind::S3fifo] {
            for seed in 0..20u64 {
                let mut state = seed;
                let capacity = 2 + splitmix64(&mut state) % 14;
                let mut missing = build_cache(kind, capacity);
                let mut evicting = build_cache(kind, capacity);
                let mut checked = 0;
                for _ in 0..500 {
                    let page = splitmix64(&mut state) % 30;
                    if missing.len() == capacity && splitmix64(&mut state).is_multiple_of(3) {
                        // A page neither holds nor remembers: a plain miss.
                        let fresh = 1_000 + splitmix64(&mut state);
                        let by_miss = missing.access(fresh, false).evicted.map(|e| e.page);
                        let by_evict = evicting.evict().map(|e| e.page);
                        assert_eq!(by_miss, by_evict, "{kind:?} seed {seed}");
                        assert!(by_miss.is_some());
                        evicting.access(fresh, false);
                        checked += 1;
                    } else {
                        let a = missing.access(page, false);
                        let b = evicting.access(page, false);
                        assert_eq!(a, b, "{kind:?} seed {seed}");
                    }
                }
                assert!(checked > 10, "{kind:?} seed {seed}: only {checked} checks");
            }
        }
    }
}
