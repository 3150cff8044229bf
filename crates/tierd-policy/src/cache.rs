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
