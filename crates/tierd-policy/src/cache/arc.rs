//! ARC, the Adaptive Replacement Cache: Nimrod Megiddo and Dharmendra S.
//! Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", USENIX FAST
//! 2003 (Figure 4, the algorithm as published).
//!
//! Four LRU lists: T1 holds pages seen once recently, T2 pages seen at least
//! twice; B1 and B2 are their ghosts (page numbers only, no data) with
//! |T1| + |B1| ≤ c and |T1| + |T2| + |B1| + |B2| ≤ 2c. The target size `p`
//! of T1 adapts: a hit in B1 means T1 was too small (p grows by
//! max(1, |B2|/|B1|)), a hit in B2 means T2 was (p shrinks by
//! max(1, |B1|/|B2|)). REPLACE evicts the LRU page of T1 into B1 when
//! |T1| > p (or |T1| = p and the miss was in B2), otherwise the LRU page of
//! T2 into B2. `p` is real-valued, as in the paper.
//!
//! A one-time scan only passes through T1, so a working set that is used
//! repeatedly stays in T2 (scan resistance).
//!
//! Layout: the four lists share one node slab and one page → node map; every
//! access is O(1) and allocates nothing once the cache has filled.

use super::nodes::{PageNodes, Queue, NIL};
use super::{checked_capacity, initial_nodes, Access, Evicted, PageCache};

const T1: u8 = 0;
const T2: u8 = 1;
const B1: u8 = 2;
const B2: u8 = 3;

#[derive(Debug)]
pub struct ArcCache {
    capacity_pages: u64,
    /// Target size of T1, in pages, 0 ≤ p ≤ c.
    target_t1_pages: f64,
    nodes: PageNodes,
    /// T1, T2, B1, B2 (indexed by the constants above); heads are MRU.
    queues: [Queue; 4],
}

/// The lists' contents, most recently used first; for tests and debugging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArcLists {
    pub t1: Vec<u64>,
    pub t2: Vec<u64>,
    pub b1: Vec<u64>,
    pub b2: Vec<u64>,
}

impl ArcCache {
    /// An empty cache of `capacity_pages` with p = 0 (see
    /// [`super::build_cache`] for the limits).
    pub fn new(capacity_pages: u64) -> Self {
        let capacity_pages = checked_capacity(capacity_pages);
        Self {
            capacity_pages,
            target_t1_pages: 0.0,
            nodes: PageNodes::with_capacity(initial_nodes(2 * capacity_pages)),
            queues: [Queue::default(); 4],
        }
    }

    /// The adaptive target size of T1 (`p` in the paper), in pages.
    pub fn target_t1_pages(&self) -> f64 {
        self.target_t1_pages
    }

    pub fn lists(&self) -> ArcLists {
        let nodes = &self.nodes.nodes;
        ArcLists {
            t1: self.queues[T1 as usize].pages(nodes),
            t2: self.queues[T2 as usize].pages(nodes),
            b1: self.queues[B1 as usize].pages(nodes),
            b2: self.queues[B2 as usize].pages(nodes),
        }
    }

    #[inline]
    fn len_of(&self, queue: u8) -> u64 {
        self.queues[queue as usize].len
    }

    /// Moves node `id` from the queue it is on to the head of `target`.
    #[inline]
    fn move_node(&mut self, id: u32, target: u8) {
        let source = self.nodes.nodes[id as usize].queue;
        self.queues[source as usize].unlink(&mut self.nodes.nodes, id);
        self.nodes.nodes[id as usize].queue = target;
        self.queues[target as usize].push_head(&mut self.nodes.nodes, id);
    }

    /// Drops the LRU page of ghost list `ghost` from the directory.
    #[inline]
    fn drop_ghost_tail(&mut self, ghost: u8) {
        let id = self.queues[ghost as usize].tail;
        self.queues[ghost as usize].unlink(&mut self.nodes.nodes, id);
        self.nodes.remove(id);
    }

    /// REPLACE(x, p): moves the LRU page of T1 or T2 to its ghost list and
    /// returns it as evicted. `missed_in_b2` is "x ∈ B2". The `|T2| = 0` arm
    /// only guards an empty T2 (the paper's invariants never reach it with
    /// T1 empty as well).
    #[inline]
    fn replace(&mut self, missed_in_b2: bool) -> Evicted {
        let t1_pages = self.len_of(T1) as f64;
        let take_t1 = (self.len_of(T1) > 0
            && (t1_pages > self.target_t1_pages
                || (missed_in_b2 && t1_pages == self.target_t1_pages)))
            || self.len_of(T2) == 0;
        let (source, ghost) = if take_t1 { (T1, B1) } else { (T2, B2) };
        let id = self.queues[source as usize].tail;
        debug_assert_ne!(id, NIL, "REPLACE on an empty cache");
        self.move_node(id, ghost);
        let node = &mut self.nodes.nodes[id as usize];
        let evicted = Evicted {
            page: node.page,
            dirty: node.dirty,
        };
        node.dirty = false;
        evicted
    }
}

impl PageCache for ArcCache {
    fn name(&self) -> &'static str {
        "arc"
    }

    fn capacity_pages(&self) -> u64 {
        self.capacity_pages
    }

    fn len(&self) -> u64 {
        self.len_of(T1) + self.len_of(T2)
    }

    fn access(&mut self, page: u64, is_write: bool) -> Access {
        let capacity = self.capacity_pages;
        let found = self.nodes.find(page);
        if let Some(id) = found {
            let queue = self.nodes.nodes[id as usize].queue;
            if queue == T1 || queue == T2 {
                // Case I: a hit anywhere in the cache makes the page frequent.
                self.nodes.nodes[id as usize].dirty |= is_write;
                self.move_node(id, T2);
                return Access {
                    hit: true,
                    evicted: None,
                };
            }
            // Cases II and III: a ghost hit. Ghosts exist only once the cache
            // has been full; it is full still unless pages were removed
            // (`remove`), and only a full cache has to make room.
            let (b1, b2) = (self.len_of(B1) as f64, self.len_of(B2) as f64);
            let missed_in_b2 = queue == B2;
            if missed_in_b2 {
                let delta = if b2 >= b1 { 1.0 } else { b1 / b2 };
                self.target_t1_pages = (self.target_t1_pages - delta).max(0.0);
            } else {
                let delta = if b1 >= b2 { 1.0 } else { b2 / b1 };
                self.target_t1_pages = (self.target_t1_pages + delta).min(capacity as f64);
            }
            // Take x off its ghost list first (it is not a candidate), then
            // make room, then x enters T2.
            self.queues[queue as usize].unlink(&mut self.nodes.nodes, id);
            let evicted = (self.len() == capacity).then(|| self.replace(missed_in_b2));
            let node = &mut self.nodes.nodes[id as usize];
            node.queue = T2;
            node.dirty = is_write;
            self.queues[T2 as usize].push_head(&mut self.nodes.nodes, id);
            return Access {
                hit: false,
                evicted,
            };
        }
        if capacity == 0 {
            return Access {
                hit: false,
                evicted: None,
            };
        }
        // Case IV: a miss everywhere. Only a full cache has to make room.
        let mut evicted = None;
        if self.len() == capacity {
            if self.len_of(T1) + self.len_of(B1) >= capacity {
                if self.len_of(B1) > 0 {
                    // IV(A), |T1| < c: drop B1's LRU ghost, then REPLACE.
                    self.drop_ghost_tail(B1);
                    evicted = Some(self.replace(false));
                } else {
                    // IV(A), |T1| = c: T1's LRU page leaves without a ghost.
                    let id = self.queues[T1 as usize].tail;
                    self.queues[T1 as usize].unlink(&mut self.nodes.nodes, id);
                    let node = self.nodes.nodes[id as usize];
                    self.nodes.remove(id);
                    evicted = Some(Evicted {
                        page: node.page,
                        dirty: node.dirty,
                    });
                }
            } else {
                // IV(B): the directory holds 2c pages: drop B2's LRU ghost.
                let directory = self.len() + self.len_of(B1) + self.len_of(B2);
                if directory >= 2 * capacity && self.len_of(B2) > 0 {
                    self.drop_ghost_tail(B2);
                }
                evicted = Some(self.replace(false));
            }
        }
        let id = self.nodes.insert(page, T1, is_write);
        self.queues[T1 as usize].push_head(&mut self.nodes.nodes, id);
        Access {
            hit: false,
            evicted,
        }
    }

    /// REPLACE with x ∉ B2, as a case IV miss on a full cache; the directory
    /// keeps its bound (at most 2c pages) since nothing enters.
    fn evict(&mut self) -> Option<Evicted> {
        (self.len() > 0).then(|| self.replace(false))
    }

    fn contains(&self, page: u64) -> bool {
        self.nodes
            .find(page)
            .is_some_and(|id| matches!(self.nodes.nodes[id as usize].queue, T1 | T2))
    }

    /// REPLACE until the cache fits, then ghosts dropped from the LRU ends
    /// until |T1| + |B1| ≤ c and the directory ≤ 2c (B1 first for the first
    /// bound, B2 first for the second, as the misses of case IV drop them);
    /// p stays within 0..=c.
    fn shrink(&mut self, capacity_pages: u64) -> Vec<Evicted> {
        let capacity = self.capacity_pages.min(capacity_pages);
        self.capacity_pages = capacity;
        self.target_t1_pages = self.target_t1_pages.min(capacity as f64);
        let mut evicted = Vec::new();
        while self.len() > capacity {
            evicted.push(self.replace(false));
        }
        while self.len_of(T1) + self.len_of(B1) > capacity && self.len_of(B1) > 0 {
            self.drop_ghost_tail(B1);
        }
        while self.len() + self.len_of(B1) + self.len_of(B2) > 2 * capacity {
            let ghost = if self.len_of(B2) > 0 { B2 } else { B1 };
            if self.len_of(ghost) == 0 {
                break;
            }
            self.drop_ghost_tail(ghost);
        }
        evicted
    }

    fn remove(&mut self, page: u64) -> bool {
        let Some(id) = self.nodes.find(page) else {
            return false;
        };
        let queue = self.nodes.nodes[id as usize].queue;
        if !matches!(queue, T1 | T2) {
            return false;
        }
        self.queues[queue as usize].unlink(&mut self.nodes.nodes, id);
        self.nodes.remove(id);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lists(t1: &[u64], t2: &[u64], b1: &[u64], b2: &[u64]) -> ArcLists {
        ArcLists {
            t1: t1.to_vec(),
            t2: t2.to_vec(),
            b1: b1.to_vec(),
            b2: b2.to_vec(),
        }
    }

    #[test]
    fn first_access_goes_to_t1_and_a_second_to_t2() {
        let mut cache = ArcCache::new(4);
        cache.access(1, false);
        cache.access(2, false);
        assert_eq!(cache.lists(), lists(&[2, 1], &[], &[], &[]));
        assert!(cache.access(1, false).hit);
        assert_eq!(cache.lists(), lists(&[2], &[1], &[], &[]));
        assert!(cache.access(1, false).hit);
        assert_eq!(cache.lists(), lists(&[2], &[1], &[], &[]));
    }

    #[test]
    fn a_full_t1_with_p_zero_evicts_its_lru_page_into_b1() {
        // c = 2: pages 1, 2 fill T1; 2 is hit (T2); 3 misses with |T1| = 1 > p = 0.
        let mut cache = ArcCache::new(2);
        cache.access(1, false);
        cache.access(2, false);
        cache.access(2, false);
        let access = cache.access(3, true);
        assert_eq!(access.evicted.map(|e| e.page), Some(1));
        assert_eq!(cache.lists(), lists(&[3], &[2], &[1], &[]));
        // A hit on ghost 1 in B1: p grows by max(1, |B2|/|B1|) = 1, and
        // REPLACE now evicts from T1 only when |T1| > 1, so T2's page 2 goes.
        let access = cache.access(1, false);
        assert!(!access.hit);
        assert_eq!(cache.target_t1_pages(), 1.0);
        let evicted = access.evicted.unwrap();
        assert_eq!((evicted.page, evicted.dirty), (2, false));
        assert_eq!(cache.lists(), lists(&[3], &[1], &[], &[2]));
        // A hit on ghost 2 in B2: p shrinks back to 0, and T1's page 3
        // (dirty from its write) is the one to leave.
        let access = cache.access(2, false);
        assert_eq!(cache.target_t1_pages(), 0.0);
        let evicted = access.evicted.unwrap();
        assert_eq!((evicted.page, evicted.dirty), (3, true));
        assert_eq!(cache.lists(), lists(&[], &[2, 1], &[3], &[]));
    }

    #[test]
    fn t1_full_of_unique_pages_drops_without_ghosts() {
        // IV(A) with |T1| = c: nothing is remembered.
        let mut cache = ArcCache::new(2);
        for page in [1, 2, 3, 4] {
            cache.access(page, false);
        }
        assert_eq!(cache.lists(), lists(&[4, 3], &[], &[], &[]));
    }

    #[test]
    fn a_shrunk_cache_keeps_the_papers_bounds_at_its_new_size() {
        let mut cache = ArcCache::new(64);
        // Pages seen once and twice, then a scan: ghosts in B1 and B2.
        for round in 0..3u64 {
            for page in 0..48 {
                cache.access(page + round * 16, false);
            }
            for page in 0..16 {
                cache.access(page, false);
            }
        }
        let before = cache.lists();
        assert!(!before.b1.is_empty() || !before.b2.is_empty(), "{before:?}");
        let evicted = cache.shrink(20);
        assert_eq!(cache.len(), 20);
        assert_eq!(evicted.len(), 44);
        let after = cache.lists();
        assert!(after.t1.len() + after.b1.len() <= 20, "{after:?}");
        assert!(after.t1.len() + after.t2.len() + after.b1.len() + after.b2.len() <= 40);
        assert!(cache.target_t1_pages() <= 20.0);
        for gone in &evicted {
            assert!(!cache.contains(gone.page));
        }
        // It runs on at the new size.
        for page in 1000..1100 {
            cache.access(page, false);
            assert!(cache.len() <= 20);
        }
    }

    #[test]
    fn directory_never_exceeds_twice_the_capacity() {
        let mut cache = ArcCache::new(3);
        let mut state = 12345u64;
        for _ in 0..5000 {
            let page = tierd_common::rng::splitmix64(&mut state) % 13;
            cache.access(page, page.is_multiple_of(3));
            let l = cache.lists();
            assert!(l.t1.len() + l.t2.len() <= 3);
            assert!(l.t1.len() + l.b1.len() <= 3);
            assert!(l.t1.len() + l.t2.len() + l.b1.len() + l.b2.len() <= 6);
            assert!((0.0..=3.0).contains(&cache.target_t1_pages()));
        }
    }
}
