//! LRU: a hit moves the page to the most-recently-used end; a miss evicts
//! the least recently used page.
//!
//! The classic stack algorithm (Mattson, Gecsei, Slutz and Traiger,
//! "Evaluation techniques for storage hierarchies", IBM Systems Journal 9(2),
//! 1970): its contents at capacity c are always a subset of its contents at
//! c + 1, so its miss ratio never rises with capacity (the test suite checks
//! this on the CloudPhysics trace).
//!
//! Layout: one intrusive doubly-linked queue over a node slab, head = most
//! recently used; a page → node map. Every access is O(1) and allocates
//! nothing once the cache has filled.

use super::nodes::{PageNodes, Queue};
use super::{checked_capacity, initial_nodes, Access, PageCache};

#[derive(Debug)]
pub struct Lru {
    capacity_pages: u64,
    nodes: PageNodes,
    queue: Queue,
}

impl Lru {
    /// An empty cache of `capacity_pages` (see [`super::build_cache`] for the limits).
    pub fn new(capacity_pages: u64) -> Self {
        let capacity_pages = checked_capacity(capacity_pages);
        Self {
            capacity_pages,
            nodes: PageNodes::with_capacity(initial_nodes(capacity_pages)),
            queue: Queue::default(),
        }
    }

    /// Resident pages from most to least recently used; for tests and debugging.
    pub fn pages_most_recent_first(&self) -> Vec<u64> {
        self.queue.pages(&self.nodes.nodes)
    }
}

impl PageCache for Lru {
    fn name(&self) -> &'static str {
        "lru"
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
            self.queue.move_to_head(&mut self.nodes.nodes, id);
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

    #[test]
    fn a_hit_protects_the_page_from_the_next_eviction() {
        let mut cache = Lru::new(3);
        for page in [1, 2, 3] {
            assert!(!cache.access(page, false).hit);
        }
        assert!(cache.access(1, false).hit);
        assert_eq!(cache.pages_most_recent_first(), vec![1, 3, 2]);
        assert_eq!(cache.access(4, false).evicted.map(|e| e.page), Some(2));
        assert_eq!(cache.access(5, false).evicted.map(|e| e.page), Some(3));
        assert_eq!(cache.pages_most_recent_first(), vec![5, 4, 1]);
    }

    #[test]
    fn capacity_one_keeps_the_last_page() {
        let mut cache = Lru::new(1);
        cache.access(1, true);
        assert!(cache.access(1, false).hit);
        let evicted = cache.access(2, false).evicted.unwrap();
        assert_eq!((evicted.page, evicted.dirty), (1, true));
        assert_eq!(cache.pages_most_recent_first(), vec![2]);
    }
}
