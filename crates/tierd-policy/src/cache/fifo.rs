//! FIFO: pages leave in the order they came in; a hit changes nothing but
//! the dirty bit.
//!
//! This is flashcache's default replacement policy (Facebook flashcache,
//! `doc/flashcache-doc.txt`: FIFO by default, LRU selectable, applied within
//! each set of its set-associative cache), the cache baseline the papers'
//! tiering results are measured against (paper 000 §5.4, paper 002 §5). tierd
//! models it fully associative: one FIFO over the whole cache.
//!
//! Layout: one intrusive queue over a node slab (head = newest) and a
//! page → node map, as LRU's but a hit never moves a page. Every access is
//! O(1) and allocates nothing once the cache has filled; a page can be
//! taken out anywhere ([`PageCache::remove`], for discards).

use super::nodes::{PageNodes, Queue};
use super::{checked_capacity, initial_nodes, Access, PageCache};

#[derive(Debug)]
pub struct Fifo {
    capacity_pages: u64,
    nodes: PageNodes,
    queue: Queue,
}

impl Fifo {
    /// An empty cache of `capacity_pages` (see [`super::build_cache`] for the limits).
    pub fn new(capacity_pages: u64) -> Self {
        let capacity_pages = checked_capacity(capacity_pages);
        Self {
            capacity_pages,
            nodes: PageNodes::with_capacity(initial_nodes(capacity_pages)),
            queue: Queue::default(),
        }
    }

    /// Resident pages from newest to oldest; for tests and debugging.
    pub fn pages_newest_first(&self) -> Vec<u64> {
        self.queue.pages(&self.nodes.nodes)
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
        self.queue.len
    }

    #[inline]
    fn access(&mut self, page: u64, is_write: bool) -> Access {
        if let Some(id) = self.nodes.find(page) {
            self.nodes.nodes[id as usize].dirty |= is_write;
            return Access {
                hit: true,
                evicted: None,
            };
        }
        Access {
            hit: false,
            evicted: super::nodes::miss_one_queue(
                &mut self.nodes,
                &mut self.queue,
                self.capacity_pages,
                page,
                is_write,
            ),
        }
    }

    fn contains(&self, page: u64) -> bool {
        self.nodes.find(page).is_some()
    }

    fn remove(&mut self, page: u64) -> bool {
        super::nodes::remove_one_queue(&mut self.nodes, &mut self.queue, page)
    }

    fn evict(&mut self) -> Option<super::Evicted> {
        super::nodes::evict_one_queue(&mut self.nodes, &mut self.queue)
    }

    fn shrink(&mut self, capacity_pages: u64) -> Vec<super::Evicted> {
        super::nodes::shrink_one_queue(
            &mut self.nodes,
            &mut self.queue,
            &mut self.capacity_pages,
            capacity_pages,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Evicted;

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
    fn a_removed_page_leaves_a_place_and_order_is_kept() {
        let mut cache = Fifo::new(3);
        for page in [1, 2, 3] {
            cache.access(page, false);
        }
        assert!(cache.remove(2));
        assert!(!cache.remove(2));
        // Below capacity again: 4 enters without pushing anything out.
        assert_eq!(cache.access(4, false).evicted, None);
        assert_eq!(cache.pages_newest_first(), vec![4, 3, 1]);
        assert_eq!(cache.access(5, false).evicted.map(|e| e.page), Some(1));
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
