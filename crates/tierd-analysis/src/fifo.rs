//! A FIFO page cache, the FlashCache default that ATSMF (002 §3.3, Table 1)
//! measured its "Caching" hit ratio with.
//!
//! Every access costs O(1): a ring of resident pages in insertion order and a
//! set for membership. Memory is O(min(capacity, distinct pages)).

use std::collections::VecDeque;

use tierd_common::hash::FastSet;

/// First-in first-out cache of page numbers.
#[derive(Debug, Default)]
pub struct FifoCache {
    capacity_pages: u64,
    order: VecDeque<u64>,
    resident: FastSet<u64>,
    accesses: u64,
    hits: u64,
}

impl FifoCache {
    /// A cache holding at most `capacity_pages` pages (0: every access misses).
    pub fn new(capacity_pages: u64) -> Self {
        Self {
            capacity_pages,
            ..Self::default()
        }
    }

    /// Accesses `page`; returns whether it was resident. A miss inserts the
    /// page (reads and writes alike: write-allocate), evicting the page that
    /// was inserted first when the cache is full. A hit does not reorder.
    pub fn access(&mut self, page: u64) -> bool {
        self.accesses += 1;
        if self.resident.contains(&page) {
            self.hits += 1;
            return true;
        }
        if self.capacity_pages == 0 {
            return false;
        }
        if self.order.len() as u64 >= self.capacity_pages {
            if let Some(oldest) = self.order.pop_front() {
                self.resident.remove(&oldest);
            }
        }
        self.order.push_back(page);
        self.resident.insert(page);
        false
    }

    pub fn capacity_pages(&self) -> u64 {
        self.capacity_pages
    }

    pub fn accesses(&self) -> u64 {
        self.accesses
    }

    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// hits / accesses; `None` before the first access.
    pub fn hit_ratio(&self) -> Option<f64> {
        (self.accesses > 0).then(|| self.hits as f64 / self.accesses as f64)
    }

    /// Pages resident now.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_in_insertion_order_and_hits_do_not_reorder() {
        let mut cache = FifoCache::new(2);
        // 1 miss [1]; 2 miss [1,2]; 1 hit (no reorder) [1,2]; 3 miss evicts 1 → [2,3];
        // 1 miss evicts 2 → [3,1]; 3 hit; 2 miss evicts 3 → [1,2].
        let hits: Vec<bool> = [1, 2, 1, 3, 1, 3, 2]
            .iter()
            .map(|page| cache.access(*page))
            .collect();
        assert_eq!(hits, [false, false, true, false, false, true, false]);
        assert_eq!(cache.hits(), 2);
        assert_eq!(cache.accesses(), 7);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.hit_ratio(), Some(2.0 / 7.0));
    }

    #[test]
    fn zero_capacity_always_misses() {
        let mut cache = FifoCache::new(0);
        assert!(!cache.access(5));
        assert!(!cache.access(5));
        assert_eq!(cache.hit_ratio(), Some(0.0));
        assert!(cache.is_empty());
        assert_eq!(FifoCache::new(3).hit_ratio(), None);
    }
}
