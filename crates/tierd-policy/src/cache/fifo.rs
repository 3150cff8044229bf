//! FIFO: pages leave in the order they came in; a hit changes nothing but
//! the dirty bit.
//!
//! This is flashcache's default replacement policy (Facebook flashcache,
//! `doc/flashcache-doc.txt`: FIFO by default, LRU selectable, applied within
//! each set of its set-associative cache), the cache baseline the papers'
//! tiering results are measured against (paper 000 §5.4, paper 002 §5). tierd
//! models it fully associative: one FIFO over the whole cache.
//!
//! Layout: a ring of `capacity` slots filled in order; once full, the hand
//! points at the oldest page, which the next miss overwrites. A page → slot
//! map finds hits. Every access is O(1) and allocates nothing.

use tierd_common::hash::FastMap;

use super::{checked_capacity, initial_nodes, Access, Evicted, PageCache};

#[derive(Debug)]
pub struct Fifo {
    capacity_pages: u64,
    /// Resident pages in insertion order, starting at `hand` once full.
    slots: Vec<Slot>,
    /// Next slot to overwrite once the ring is full (the oldest page).
    hand: usize,
    index: FastMap<u64, u32>,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    page: u64,
    dirty: bool,
}

impl Fifo {
    /// An empty cache of `capacity_pages` (see [`super::build_cache`] for the limits).
    pub fn new(capacity_pages: u64) -> Self {
        let capacity_pages = checked_capacity(capacity_pages);
        let reserve = initial_nodes(capacity_pages);
        let mut index = FastMap::default();
        index.reserve(reserve);
        Self {
            capacity_pages,
            slots: Vec::with_capacity(reserve),
            hand: 0,
            index,
        }
    }

    /// Resident pages from newest to oldest; for tests and debugging.
    pub fn pages_newest_first(&self) -> Vec<u64> {
        let count = self.slots.len();
        // Once full, the newest page sits just before the hand; before that,
        // slots fill from 0 and the hand stays at 0.
        (0..count)
            .map(|age| self.slots[(self.hand + count - 1 - age) % count].page)
            .collect()
    }
}

impl PageCache for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn capacity_pages(&self) -> u64 {
        self.capacity_pages
    }

    fn len(&self) -> u64 {
        self.slots.len() as u64
    }

    #[inline]
    fn access(&mut self, page: u64, is_write: bool) -> Access {
        if let Some(&slot) = self.index.get(&page) {
            self.slots[slot as usize].dirty |= is_write;
            return Access {
                hit: true,
                evicted: None,
            };
        }
        if self.capacity_pages == 0 {
            return Access {
                hit: false,
                evicted: None,
            };
        }
        let incoming = Slot {
            page,
            dirty: is_write,
        };
        if (self.slots.len() as u64) < self.capacity_pages {
            // Below capacity the slot number fits in u32 (capacity is checked).
            let slot = self.slots.len() as u32;
            self.slots.push(incoming);
            self.index.insert(page, slot);
            return Access {
                hit: false,
                evicted: None,
            };
        }
        let slot = self.hand;
        let outgoing = std::mem::replace(&mut self.slots[slot], incoming);
        self.index.remove(&outgoing.page);
        self.index.insert(page, slot as u32);
        self.hand = if slot + 1 == self.slots.len() {
            0
        } else {
            slot + 1
        };
        Access {
            hit: false,
            evicted: Some(Evicted {
                page: outgoing.page,
                dirty: outgoing.dirty,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_do_not_reorder_and_the_oldest_page_leaves_first() {
        let mut cache = Fifo::new(3);
        for page in [1, 2, 3] {
            assert!(!cache.access(page, false).hit);
        }
        // Page 1 is hit, but it is still the oldest: it leaves on the next miss.
        assert!(cache.access(1, false).hit);
        assert_eq!(cache.pages_newest_first(), vec![3, 2, 1]);
        let access = cache.access(4, false);
        assert_eq!(
            access.evicted,
            Some(Evicted {
                page: 1,
                dirty: false
            })
        );
        assert_eq!(cache.pages_newest_first(), vec![4, 3, 2]);
        assert_eq!(cache.access(5, false).evicted.map(|e| e.page), Some(2));
        assert_eq!(cache.pages_newest_first(), vec![5, 4, 3]);
    }

    #[test]
    fn a_write_hit_makes_the_page_dirty_until_it_leaves() {
        let mut cache = Fifo::new(2);
        cache.access(10, false);
        cache.access(11, false);
        assert!(cache.access(10, true).hit);
        let evicted = cache.access(12, false).evicted.unwrap();
        assert_eq!((evicted.page, evicted.dirty), (10, true));
        // 10 comes back clean after a read miss (pushing out clean 11).
        let evicted = cache.access(10, false).evicted.unwrap();
        assert_eq!((evicted.page, evicted.dirty), (11, false));
        assert_eq!(cache.access(13, false).evicted.map(|e| e.page), Some(12));
        let evicted = cache.access(14, false).evicted.unwrap();
        assert_eq!((evicted.page, evicted.dirty), (10, false));
    }

    #[test]
    fn zero_capacity_holds_nothing() {
        let mut cache = Fifo::new(0);
        for _ in 0..3 {
            assert_eq!(
                cache.access(7, true),
                Access {
                    hit: false,
                    evicted: None
                }
            );
        }
        assert!(cache.is_empty());
    }
}
