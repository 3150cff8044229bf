//! S3-FIFO: Juncheng Yang, Yazhuo Zhang, Ziyue Qiu, Yao Yue and Rashmi
//! Vinayak, "FIFO queues are all you need for cache eviction", SOSP 2023
//! (§4, Algorithm 1).
//!
//! Three FIFO queues: a small queue S (10% of the capacity) that every new
//! page enters, a main queue M (the other 90%), and a ghost queue G of page
//! numbers only, holding as many entries as M can hold pages. Each resident
//! page has a 2-bit access counter (0..=3), bumped on every hit; hits never
//! reorder a queue.
//!
//! - Miss: a page found in G goes straight to M (it was evicted from S too
//!   early); any other page enters S. Both start with frequency 0. While the
//!   cache is filling for the first time (nothing evicted yet), pages that
//!   find S at its share go to M instead.
//! - Evicting when full: from M when M holds more than its share or S is
//!   empty, otherwise from S.
//! - From S: the oldest page moves to M (frequency reset to 0) if it was hit
//!   at least `move_to_main_threshold` times (default 2, as in libCacheSim),
//!   and the next oldest is examined; the first page below the
//!   threshold leaves the cache and its number goes to G (one-hit wonders
//!   leave after a short stay in S). G drops its oldest entry when full.
//! - From M: the oldest page with a non-zero frequency is reinserted at the
//!   head with its frequency decremented (a 2-bit CLOCK); the first with
//!   frequency 0 leaves the cache.
//!
//! The details the paper leaves open follow the authors' reference
//! implementation in libCacheSim (`libCacheSim/cache/eviction/S3FIFO.c`, the
//! version since December 2024, which the `libcachesim` 0.3.5 package runs),
//! so that miss ratios can be compared exactly: which queue evicts is decided
//! by M's size; a page moved S → M may push M past its share, and the next
//! eviction then comes from M; the cold-start rule above; exactly one page
//! leaves the cache per miss on a full cache. `docs/policies/s3fifo.md` has
//! the details.
//!
//! Layout: the three queues share one node slab and one page → node map (a
//! ghost hit reuses the node), so every access is amortised O(1) — an
//! eviction may move several pages between queues, each move O(1), and the
//! total number of moves is bounded by the number of hits — and allocates
//! nothing once the cache has filled.

use serde::{Deserialize, Serialize};

use super::nodes::{PageNodes, Queue};
use super::{checked_capacity, initial_nodes, Access, Evicted, PageCache};

const SMALL: u8 = 0;
const MAIN: u8 = 1;
const GHOST: u8 = 2;

/// Saturation value of the 2-bit access counter.
const MAX_FREQUENCY: u8 = 3;

/// S3-FIFO's parameters; the defaults are the paper's (and libCacheSim's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S3FifoConfig {
    /// Share of the capacity for the small queue, in percent (rounded down
    /// to whole pages, at least one page).
    pub small_share_percent: u8,
    /// Entries of the ghost queue as a percentage of the capacity (rounded
    /// down); 90 = as many as the main queue holds pages.
    pub ghost_share_percent: u8,
    /// Hits a page needs while in the small queue to move to the main queue
    /// instead of leaving (1..=3; libCacheSim's default is 2).
    pub move_to_main_threshold: u8,
}

impl Default for S3FifoConfig {
    fn default() -> Self {
        Self {
            small_share_percent: 10,
            ghost_share_percent: 90,
            move_to_main_threshold: 2,
        }
    }
}

#[derive(Debug)]
pub struct S3Fifo {
    capacity_pages: u64,
    /// S's share: while nothing has been evicted yet, a full S sends new
    /// pages to M.
    small_share_pages: u64,
    /// M's share: S is evicted from while M holds at most this many pages.
    main_share_pages: u64,
    /// Whether the cache has ever evicted (it has been full).
    has_evicted: bool,
    ghost_capacity: u64,
    /// The configured shares (percent), kept for [`PageCache::shrink`].
    small_share_percent: u64,
    ghost_share_percent: u64,
    move_to_main_threshold: u8,
    nodes: PageNodes,
    /// S, M, G (indexed by the constants above); heads are the newest.
    queues: [Queue; 3],
}

/// The queues' contents, newest first, and the resident pages' frequencies;
/// for tests and debugging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3FifoQueues {
    pub small: Vec<u64>,
    pub main: Vec<u64>,
    pub ghost: Vec<u64>,
}

impl S3Fifo {
    /// An empty cache of `capacity_pages` with the default parameters (see
    /// [`super::build_cache`] for the limits).
    pub fn new(capacity_pages: u64) -> Self {
        Self::with_config(capacity_pages, S3FifoConfig::default())
    }

    /// Out-of-range settings are clamped: shares to 0..=100 percent (the
    /// small queue gets at least one page), the threshold to 1..=3.
    pub fn with_config(capacity_pages: u64, config: S3FifoConfig) -> Self {
        let capacity_pages = checked_capacity(capacity_pages);
        let small_share_percent = u64::from(config.small_share_percent.min(100));
        let small_pages = (capacity_pages * small_share_percent / 100).max(1);
        let ghost_share_percent = u64::from(config.ghost_share_percent.min(100));
        let ghost_capacity = capacity_pages * ghost_share_percent / 100;
        Self {
            capacity_pages,
            small_share_pages: small_pages,
            main_share_pages: capacity_pages.saturating_sub(small_pages),
            has_evicted: false,
            ghost_capacity,
            small_share_percent,
            ghost_share_percent,
            move_to_main_threshold: config.move_to_main_threshold.clamp(1, MAX_FREQUENCY),
            nodes: PageNodes::with_capacity(initial_nodes(capacity_pages + ghost_capacity + 1)),
            queues: [Queue::default(); 3],
        }
    }

    pub fn queues(&self) -> S3FifoQueues {
        let nodes = &self.nodes.nodes;
        S3FifoQueues {
            small: self.queues[SMALL as usize].pages(nodes),
            main: self.queues[MAIN as usize].pages(nodes),
            ghost: self.queues[GHOST as usize].pages(nodes),
        }
    }

    /// The access counter of a resident `page`, `None` if it is not resident.
    pub fn frequency(&self, page: u64) -> Option<u8> {
        let node = &self.nodes.nodes[self.nodes.find(page)? as usize];
        (node.queue != GHOST).then_some(node.frequency)
    }

    #[inline]
    fn resident(&self) -> u64 {
        self.queues[SMALL as usize].len + self.queues[MAIN as usize].len
    }

    /// Removes exactly one resident page (the cache must be non-empty).
    #[inline]
    fn evict_one(&mut self) -> Evicted {
        loop {
            let small_len = self.queues[SMALL as usize].len;
            if self.queues[MAIN as usize].len > self.main_share_pages || small_len == 0 {
                return self.evict_from_main();
            }
            if let Some(evicted) = self.evict_from_small() {
                return evicted;
            }
            // Every page in S was promoted to M: evict again, now from M.
        }
    }

    /// Walks S from its oldest page: pages hit often enough move to M; the
    /// first that was not leaves (its number goes to G). `None` when S
    /// emptied without an eviction.
    #[inline]
    fn evict_from_small(&mut self) -> Option<Evicted> {
        loop {
            let id = self.queues[SMALL as usize].tail;
            if id == super::nodes::NIL {
                return None;
            }
            self.queues[SMALL as usize].unlink(&mut self.nodes.nodes, id);
            let node = &mut self.nodes.nodes[id as usize];
            if node.frequency >= self.move_to_main_threshold {
                node.frequency = 0;
                node.queue = MAIN;
                self.queues[MAIN as usize].push_head(&mut self.nodes.nodes, id);
                continue;
            }
            let evicted = Evicted {
                page: node.page,
                dirty: node.dirty,
            };
            if self.ghost_capacity == 0 {
                self.nodes.remove(id);
                return Some(evicted);
            }
            if self.queues[GHOST as usize].len == self.ghost_capacity {
                let oldest = self.queues[GHOST as usize].tail;
                self.queues[GHOST as usize].unlink(&mut self.nodes.nodes, oldest);
                self.nodes.remove(oldest);
            }
            let node = &mut self.nodes.nodes[id as usize];
            node.queue = GHOST;
            node.dirty = false;
            node.frequency = 0;
            self.queues[GHOST as usize].push_head(&mut self.nodes.nodes, id);
            return Some(evicted);
        }
    }

    /// Walks M from its oldest page: pages with a non-zero counter go back to
    /// the head with the counter decremented; the first at zero leaves.
    #[inline]
    fn evict_from_main(&mut self) -> Evicted {
        loop {
            let id = self.queues[MAIN as usize].tail;
            let node = &mut self.nodes.nodes[id as usize];
            if node.frequency > 0 {
                node.frequency -= 1;
                self.queues[MAIN as usize].move_to_head(&mut self.nodes.nodes, id);
                continue;
            }
            let evicted = Evicted {
                page: node.page,
                dirty: node.dirty,
            };
            self.queues[MAIN as usize].unlink(&mut self.nodes.nodes, id);
            self.nodes.remove(id);
            return evicted;
        }
    }
}

impl PageCache for S3Fifo {
    fn name(&self) -> &'static str {
        "s3fifo"
    }

    fn capacity_pages(&self) -> u64 {
        self.capacity_pages
    }

    fn len(&self) -> u64 {
        self.resident()
    }

    fn access(&mut self, page: u64, is_write: bool) -> Access {
        let found = self.nodes.find(page);
        let mut from_ghost = None;
        if let Some(id) = found {
            let node = &mut self.nodes.nodes[id as usize];
            if node.queue != GHOST {
                node.frequency = (node.frequency + 1).min(MAX_FREQUENCY);
                node.dirty |= is_write;
                return Access {
                    hit: true,
                    evicted: None,
                };
            }
            // A ghost hit: take the page off G before making room (it no
            // longer counts against G's size), keeping its node.
            self.queues[GHOST as usize].unlink(&mut self.nodes.nodes, id);
            from_ghost = Some(id);
        }
        if self.capacity_pages == 0 {
            return Access {
                hit: false,
                evicted: None,
            };
        }
        let evicted = (self.resident() == self.capacity_pages).then(|| self.evict_one());
        self.has_evicted |= evicted.is_some();
        let (id, queue) = match from_ghost {
            Some(id) => (id, MAIN),
            None => {
                let queue = if !self.has_evicted
                    && self.queues[SMALL as usize].len >= self.small_share_pages
                {
                    MAIN
                } else {
                    SMALL
                };
                (self.nodes.insert(page, queue, is_write), queue)
            }
        };
        let node = &mut self.nodes.nodes[id as usize];
        node.queue = queue;
        node.dirty = is_write;
        node.frequency = 0;
        self.queues[queue as usize].push_head(&mut self.nodes.nodes, id);
        Access {
            hit: false,
            evicted,
        }
    }

    fn evict(&mut self) -> Option<Evicted> {
        (self.resident() > 0).then(|| self.evict_one())
    }

    /// The queues' shares follow the new capacity; resident pages are
    /// evicted as misses on a full cache would, then G's oldest entries go.
    fn shrink(&mut self, capacity_pages: u64) -> Vec<Evicted> {
        let capacity = self.capacity_pages.min(capacity_pages);
        self.capacity_pages = capacity;
        let small_pages = (capacity * self.small_share_percent / 100).max(1);
        self.small_share_pages = small_pages;
        self.main_share_pages = capacity.saturating_sub(small_pages);
        self.ghost_capacity = capacity * self.ghost_share_percent / 100;
        let mut evicted = Vec::new();
        while self.resident() > capacity {
            evicted.push(self.evict_one());
            self.has_evicted = true;
        }
        while self.queues[GHOST as usize].len > self.ghost_capacity {
            let oldest = self.queues[GHOST as usize].tail;
            self.queues[GHOST as usize].unlink(&mut self.nodes.nodes, oldest);
            self.nodes.remove(oldest);
        }
        evicted
    }

    fn contains(&self, page: u64) -> bool {
        self.nodes
            .find(page)
            .is_some_and(|id| matches!(self.nodes.nodes[id as usize].queue, SMALL | MAIN))
    }

    fn remove(&mut self, page: u64) -> bool {
        let Some(id) = self.nodes.find(page) else {
            return false;
        };
        let queue = self.nodes.nodes[id as usize].queue;
        if !matches!(queue, SMALL | MAIN) {
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

    fn queues(small: &[u64], main: &[u64], ghost: &[u64]) -> S3FifoQueues {
        S3FifoQueues {
            small: small.to_vec(),
            main: main.to_vec(),
            ghost: ghost.to_vec(),
        }
    }

    #[test]
    fn sizes_follow_the_paper_shares() {
        let cache = S3Fifo::new(1000);
        assert_eq!(cache.main_share_pages, 900);
        assert_eq!(cache.ghost_capacity, 900);
        let tiny = S3Fifo::new(5);
        assert_eq!(tiny.main_share_pages, 4, "S gets at least one page");
    }

    #[test]
    fn frequency_saturates_at_three() {
        let mut cache = S3Fifo::new(10);
        cache.access(1, false);
        assert_eq!(cache.frequency(1), Some(0));
        for expected in [1, 2, 3, 3, 3] {
            assert!(cache.access(1, false).hit);
            assert_eq!(cache.frequency(1), Some(expected));
        }
        assert_eq!(cache.frequency(2), None);
    }

    #[test]
    fn a_page_hit_twice_in_small_moves_to_main_and_a_once_hit_one_leaves() {
        // c = 20: S's share is 2 pages, M's 18, G holds 18.
        let mut cache = S3Fifo::new(20);
        for page in 1..=20 {
            cache.access(page, false);
        }
        // While the cache first fills, pages that find S at its share go to M.
        assert_eq!(
            cache.queues(),
            queues(&[2, 1], &(3..=20).rev().collect::<Vec<_>>(), &[])
        );
        cache.access(1, false);
        cache.access(1, false); // page 1: frequency 2
        cache.access(2, false); // page 2: frequency 1 (below the threshold)
                                // Miss on 21: M is at its share, so S evicts: its oldest, 1, moves
                                // to M; the next oldest, 2, leaves to G.
        let evicted = cache.access(21, false).evicted.unwrap();
        assert_eq!(evicted.page, 2);
        let mut main = vec![1];
        main.extend((3..=20).rev());
        assert_eq!(cache.queues(), queues(&[21], &main, &[2]));
        assert_eq!(
            cache.frequency(1),
            Some(0),
            "moving to M resets the counter"
        );
        // The move put M over its share (19 > 18): the next miss evicts from
        // M, whose oldest page, 3, was never hit there.
        assert_eq!(cache.access(22, false).evicted.map(|e| e.page), Some(3));
        assert_eq!(cache.queues().small, vec![22, 21]);
    }
}
