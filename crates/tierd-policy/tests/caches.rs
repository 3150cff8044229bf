//! Page caches: hand-computed sequences for each policy, the invariants every
//! cache owes its callers (capacity, one eviction per miss, dirty pages
//! reported exactly once, determinism), and the LRU stack property on the
//! real CloudPhysics trace.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use tierd_common::hash::FastMap;
use tierd_common::rng::{Rng, SeededRng};
use tierd_policy::cache::arc::ArcCache;
use tierd_policy::cache::fifo::Fifo;
use tierd_policy::cache::lru::Lru;
use tierd_policy::cache::s3fifo::{S3Fifo, S3FifoQueues};
use tierd_policy::cache::{
    build_cache, pages_touched, replay_pages, Access, CacheKind, Evicted, PageCache,
};
use tierd_trace::{open_trace, OpenOptions};

/// Counts heap allocations made by a thread while it has counting switched
/// on (other tests run in parallel threads and are not counted).
struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter only reads a const-initialised thread-local (no allocation).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.realloc(pointer, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const KINDS: [CacheKind; 4] = [
    CacheKind::Fifo,
    CacheKind::Lru,
    CacheKind::Arc,
    CacheKind::S3fifo,
];

/// Hit (`true`) or miss for each read of `pages`.
fn hits(cache: &mut dyn PageCache, pages: &[u64]) -> Vec<bool> {
    pages
        .iter()
        .map(|&page| cache.access(page, false).hit)
        .collect()
}

fn evicted_page(access: Access) -> Option<u64> {
    access.evicted.map(|evicted| evicted.page)
}

#[test]
fn fifo_keeps_insertion_order_where_lru_reorders_on_hit() {
    // Capacity 3: 1 2 3 fill; 1 hits; 4 must evict. FIFO evicts 1 (oldest
    // insertion) so the next 1 misses; LRU evicts 2 (least recently used)
    // so the next 1 hits and the following 2 misses.
    let sequence = [1, 2, 3, 1, 4, 1, 2];
    let mut fifo = build_cache(CacheKind::Fifo, 3);
    let mut lru = build_cache(CacheKind::Lru, 3);
    assert_eq!(
        hits(&mut *fifo, &sequence),
        [false, false, false, true, false, false, false]
    );
    assert_eq!(
        hits(&mut *lru, &sequence),
        [false, false, false, true, false, true, false]
    );

    let mut fifo = Fifo::new(3);
    for page in [1, 2, 3, 1, 1, 1] {
        fifo.access(page, false);
    }
    assert_eq!(evicted_page(fifo.access(4, false)), Some(1));
    let mut lru = Lru::new(3);
    for page in [1, 2, 3, 1, 2] {
        lru.access(page, false);
    }
    assert_eq!(evicted_page(lru.access(4, false)), Some(3));
    assert_eq!(lru.pages_most_recent_first(), vec![4, 2, 1]);
}

#[test]
fn arc_ghost_hit_in_b1_grows_p_and_in_b2_shrinks_it() {
    // c = 4. Pages 1..=4 fill T1; 3 and 4 are hit into T2; 5 and 6 push
    // T1's LRU pages 1 and 2 into B1 (|T1| = 2 > p = 0 each time).
    let mut cache = ArcCache::new(4);
    for page in [1, 2, 3, 4, 3, 4] {
        cache.access(page, false);
    }
    assert_eq!(evicted_page(cache.access(5, false)), Some(1));
    assert_eq!(evicted_page(cache.access(6, false)), Some(2));
    let lists = cache.lists();
    assert_eq!(
        (lists.t1, lists.t2, lists.b1.clone(), lists.b2),
        (vec![6, 5], vec![4, 3], vec![2, 1], vec![])
    );
    assert_eq!(cache.target_t1_pages(), 0.0);
    // Ghost hit on 1 in B1: p += max(1, |B2|/|B1|) = 1. REPLACE: |T1| = 2 > 1,
    // so T1's LRU page 5 goes to B1; page 1 enters T2.
    let access = cache.access(1, false);
    assert!(!access.hit);
    assert_eq!(evicted_page(access), Some(5));
    assert_eq!(cache.target_t1_pages(), 1.0);
    let lists = cache.lists();
    assert_eq!(
        (lists.t1, lists.t2, lists.b1, lists.b2),
        (vec![6], vec![1, 4, 3], vec![5, 2], vec![])
    );
    // Ghost hit on 2 in B1 again: p = 2. |T1| = 1 is not above p, so T2's
    // LRU page 3 goes to B2.
    assert_eq!(evicted_page(cache.access(2, false)), Some(3));
    assert_eq!(cache.target_t1_pages(), 2.0);
    // Ghost hit on 3 in B2 with |B1| = 1, |B2| = 1: p -= 1.
    cache.access(3, false);
    assert_eq!(cache.target_t1_pages(), 1.0);
}

#[test]
fn arc_resists_a_scan_that_flushes_lru() {
    // A working set of 50 pages used three times, then a one-time scan of
    // 1000 pages, then the working set again, in a 100-page cache.
    let working_set: Vec<u64> = (0..50).collect();
    let scan: Vec<u64> = (1_000..2_000).collect();
    let run = |cache: &mut dyn PageCache| {
        for _ in 0..3 {
            hits(cache, &working_set);
        }
        hits(cache, &scan);
        hits(cache, &working_set)
            .into_iter()
            .filter(|hit| *hit)
            .count()
    };
    let arc_hits = run(&mut *build_cache(CacheKind::Arc, 100));
    let lru_hits = run(&mut *build_cache(CacheKind::Lru, 100));
    // The scan only cycles through T1; the working set stays in T2.
    assert_eq!(arc_hits, 50);
    assert_eq!(lru_hits, 0);
}

#[test]
fn s3fifo_one_hit_wonders_leave_through_the_small_queue() {
    // 100 pages: S's share 10, M's 90, G 90 entries. A working set of 80
    // pages used three times gets into M; a scan of 1000 one-time pages then
    // only passes through S (and G), and the working set still hits.
    let mut cache = S3Fifo::new(100);
    let working_set: Vec<u64> = (0..80).collect();
    for _ in 0..3 {
        hits(&mut cache, &working_set);
    }
    let scan: Vec<u64> = (1_000..2_000).collect();
    let mut scan_evictions = 0;
    for &page in &scan {
        if let Some(evicted) = cache.access(page, false).evicted {
            assert!(
                evicted.page >= 1_000,
                "the scan evicted working-set page {}",
                evicted.page
            );
            scan_evictions += 1;
        }
    }
    let queues = cache.queues();
    // The whole working set sits in M. (So do the 10 scan pages that came
    // while the cache was first filling and S was at its share.)
    assert!(working_set.iter().all(|page| queues.main.contains(page)));
    assert_eq!(queues.main.len(), 90);
    assert!(queues.ghost.iter().all(|page| *page >= 1_000));
    assert_eq!(queues.ghost.len(), 90, "G is full of the scan's pages");
    // The cache was not full when the scan began (80 < 100), so the first
    // 20 scan pages took free room.
    assert_eq!(scan_evictions, 1000 - 20);
    let working_set_hits = hits(&mut cache, &working_set);
    assert!(working_set_hits.iter().all(|hit| *hit));

    // LRU loses the whole working set to the same scan.
    let mut lru = build_cache(CacheKind::Lru, 100);
    for _ in 0..3 {
        hits(&mut *lru, &working_set);
    }
    hits(&mut *lru, &scan);
    assert!(hits(&mut *lru, &working_set).iter().all(|hit| !hit));
}

#[test]
fn s3fifo_moves_by_frequency_and_reinserts_in_main() {
    // c = 10: S's share 1 page, M's 9, G 9 entries.
    let mut cache = S3Fifo::new(10);
    let queues = |small: &[u64], main: &[u64], ghost: &[u64]| S3FifoQueues {
        small: small.to_vec(),
        main: main.to_vec(),
        ghost: ghost.to_vec(),
    };
    for page in 1..=10 {
        cache.access(page, false);
    }
    // Filling: 1 takes S's one page, the rest go to M.
    assert_eq!(
        cache.queues(),
        queues(&[1], &[10, 9, 8, 7, 6, 5, 4, 3, 2], &[])
    );
    for page in [1, 1, 2, 3, 3] {
        assert!(cache.access(page, false).hit);
    }
    // 11 misses on a full cache. M is at its share, so S evicts: 1 was hit
    // twice and moves to M (counter reset), leaving S empty and M over its
    // share; M then evicts: 2 (counter 1) and 3 (counter 2) go back to the
    // head with their counters decremented, and 4 (counter 0) leaves.
    assert_eq!(evicted_page(cache.access(11, false)), Some(4));
    assert_eq!(
        cache.queues(),
        queues(&[11], &[3, 2, 1, 10, 9, 8, 7, 6, 5], &[])
    );
    assert_eq!(
        [cache.frequency(3), cache.frequency(2), cache.frequency(1)],
        [Some(1), Some(0), Some(0)]
    );
    // 12: S evicts 11, never hit: a one-hit wonder, remembered in G.
    assert_eq!(evicted_page(cache.access(12, false)), Some(11));
    assert_eq!(cache.queues().ghost, vec![11]);
    // 11 again: found in G, so it goes straight to M; S evicts 12 to make room.
    let access = cache.access(11, false);
    assert!(!access.hit);
    assert_eq!(evicted_page(access), Some(12));
    assert_eq!(
        cache.queues(),
        queues(&[], &[11, 3, 2, 1, 10, 9, 8, 7, 6, 5], &[12])
    );
    // 13: M is over its share, so M evicts its oldest page with counter 0.
    assert_eq!(evicted_page(cache.access(13, false)), Some(5));
    assert_eq!(
        cache.queues(),
        queues(&[13], &[11, 3, 2, 1, 10, 9, 8, 7, 6], &[12])
    );
}

/// A skewed random workload: 70% of accesses to 64 hot pages, the rest
/// spread over 4096, with occasional sequential runs; 30% writes.
fn random_workload(seed: u64, count: usize) -> Vec<(u64, bool)> {
    let mut rng = SeededRng::new(seed);
    let mut accesses = Vec::with_capacity(count);
    while accesses.len() < count {
        if rng.chance(0.02) {
            let start = rng.below(4096);
            for page in start..start + 40 {
                accesses.push((page, rng.chance(0.3)));
            }
        } else {
            let page = if rng.chance(0.7) {
                rng.below(64)
            } else {
                rng.below(4096)
            };
            accesses.push((page, rng.chance(0.3)));
        }
    }
    accesses.truncate(count);
    accesses
}

#[test]
fn capacity_is_never_exceeded_and_each_full_miss_evicts_one_resident_page() {
    let workload = random_workload(7, 20_000);
    for kind in KINDS {
        for capacity in [0, 1, 2, 7, 10, 64, 500] {
            let mut cache = build_cache(kind, capacity);
            assert_eq!(cache.capacity_pages(), capacity);
            // The model of what is resident.
            let mut resident: FastMap<u64, ()> = FastMap::default();
            for &(page, is_write) in &workload {
                let before = cache.len();
                let access = cache.access(page, is_write);
                assert_eq!(
                    access.hit,
                    resident.contains_key(&page),
                    "{kind:?} c={capacity}"
                );
                if let Some(evicted) = access.evicted {
                    assert!(!access.hit, "{kind:?}: a hit evicted a page");
                    assert_ne!(evicted.page, page);
                    assert!(
                        resident.remove(&evicted.page).is_some(),
                        "{kind:?}: evicted a page that was not resident"
                    );
                }
                if !access.hit && capacity > 0 {
                    resident.insert(page, ());
                    assert_eq!(
                        access.evicted.is_some(),
                        before == capacity,
                        "{kind:?} c={capacity}: evict exactly when full"
                    );
                }
                assert_eq!(cache.len(), resident.len() as u64);
                assert!(cache.len() <= capacity);
            }
        }
    }
}

#[test]
fn a_dirty_page_is_reported_exactly_once_when_it_leaves() {
    let workload = random_workload(11, 20_000);
    for kind in KINDS {
        for capacity in [1, 5, 100, 1000] {
            let mut cache = build_cache(kind, capacity);
            // Per resident page: written since it was inserted?
            let mut dirty: FastMap<u64, bool> = FastMap::default();
            let mut written_back = 0u64;
            for &(page, is_write) in &workload {
                let access = cache.access(page, is_write);
                if let Some(Evicted {
                    page: gone,
                    dirty: was_dirty,
                }) = access.evicted
                {
                    let expected = dirty.remove(&gone).expect("evicted page was resident");
                    assert_eq!(was_dirty, expected, "{kind:?} c={capacity} page {gone}");
                    written_back += u64::from(was_dirty);
                }
                *dirty.entry(page).or_insert(false) |= is_write;
            }
            // A second run through replay_pages counts the same write-backs.
            let stats = replay_pages(workload.iter().copied(), &mut *build_cache(kind, capacity));
            assert_eq!(stats.dirty_evictions, written_back, "{kind:?} c={capacity}");
            assert!(
                written_back > 0,
                "{kind:?} c={capacity}: no write-back at all"
            );
            // What was not written back is still resident and dirty.
            let still_dirty = dirty.values().filter(|d| **d).count() as u64;
            assert!(still_dirty <= capacity);
        }
    }
}

#[test]
fn a_full_cache_allocates_nothing_per_access() {
    let workload = random_workload(13, 40_000);
    for kind in KINDS {
        let mut cache = build_cache(kind, 500);
        // Fill it, and let the ghost lists reach their sizes.
        for &(page, is_write) in &workload[..20_000] {
            cache.access(page, is_write);
        }
        assert_eq!(cache.len(), 500);
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        COUNTING.with(|counting| counting.set(true));
        for &(page, is_write) in &workload[20_000..] {
            cache.access(page, is_write);
        }
        COUNTING.with(|counting| counting.set(false));
        let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
        assert_eq!(allocations, 0, "{kind:?} allocated during 20,000 accesses");
    }
}

#[test]
fn the_same_accesses_give_the_same_results() {
    let workload = random_workload(3, 20_000);
    for kind in KINDS {
        let run = || {
            let mut cache = build_cache(kind, 300);
            workload
                .iter()
                .map(|&(page, is_write)| cache.access(page, is_write))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run(), "{kind:?}");
    }
}

#[test]
fn policies_differ_on_a_skewed_workload() {
    // Guards against build_cache wiring every kind to the same policy.
    let workload = random_workload(5, 30_000);
    let ratios: Vec<f64> = KINDS
        .iter()
        .map(|kind| {
            replay_pages(workload.iter().copied(), &mut *build_cache(*kind, 200)).miss_ratio
        })
        .collect();
    for i in 0..ratios.len() {
        for j in i + 1..ratios.len() {
            assert_ne!(ratios[i], ratios[j], "{:?} and {:?}", KINDS[i], KINDS[j]);
        }
    }
}

#[test]
fn replay_counts_hits_misses_and_write_backs() {
    // LRU, capacity 2: w1 r2 r1 (hit) r3 (evicts clean 2) r4 (evicts dirty 1).
    let mut cache = Lru::new(2);
    let stats = replay_pages(
        [(1, true), (2, false), (1, false), (3, false), (4, false)],
        &mut cache,
    );
    assert_eq!(stats.accesses, 5);
    assert_eq!(stats.hits, 1);
    assert_eq!(stats.evictions, 2);
    assert_eq!(stats.dirty_evictions, 1);
    assert!((stats.miss_ratio - 0.8).abs() < 1e-12);
    assert_eq!(replay_pages([], &mut cache).miss_ratio, 0.0);
}

#[test]
fn pages_touched_covers_partial_pages() {
    assert_eq!(pages_touched(0, 4096), 0..1);
    assert_eq!(pages_touched(512, 4096), 0..2);
    assert_eq!(pages_touched(4095, 2), 0..2);
    assert_eq!(pages_touched(8192, 8192), 2..4);
    assert_eq!(pages_touched(100, 0), 0..0);
    assert_eq!(pages_touched(u64::MAX - 10, 100).end, u64::MAX / 4096 + 1);
}

/// Every 4 KiB page each request of the CloudPhysics trace touches, with
/// its direction.
fn cloudphysics_pages(traces: &Path) -> Vec<(u64, bool)> {
    let path = traces.join("cloudphysics/cloudPhysicsIO.vscsi");
    let mut reader =
        open_trace(&path, &OpenOptions::default()).expect("open the CloudPhysics trace");
    let mut pages = Vec::new();
    while let Some(request) = reader.next_request().expect("read the CloudPhysics trace") {
        let is_write = request.op.is_write();
        pages.extend(
            pages_touched(request.offset_bytes, request.length_bytes).map(|page| (page, is_write)),
        );
    }
    pages
}

#[test]
fn cloudphysics_lru_is_a_stack_algorithm_and_all_policies_see_the_compulsory_misses() {
    let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR")) else {
        return;
    };
    let pages = cloudphysics_pages(&traces);
    let mut unique: FastMap<u64, ()> = FastMap::default();
    for &(page, _) in &pages {
        unique.insert(page, ());
    }
    let unique_pages = unique.len() as u64;
    // 113,872 requests, none of zero length (SOURCES.md); each touches at least one page.
    assert!(pages.len() >= 113_872);

    // LRU at growing sizes, in lockstep: the stack property says every hit
    // at a size is also a hit at every larger size, so the miss ratio never
    // rises with size.
    let sizes = [256u64, 4_096, 65_536];
    let mut caches: Vec<Lru> = sizes.iter().map(|size| Lru::new(*size)).collect();
    let mut misses = vec![0u64; sizes.len()];
    for &(page, is_write) in &pages {
        let mut smaller_hit = false;
        for (index, cache) in caches.iter_mut().enumerate() {
            let hit = cache.access(page, is_write).hit;
            assert!(
                hit || !smaller_hit,
                "hit at a smaller size but not at {}",
                sizes[index]
            );
            smaller_hit = hit;
            misses[index] += u64::from(!hit);
        }
    }
    let miss_ratios: Vec<f64> = misses
        .iter()
        .map(|m| *m as f64 / pages.len() as f64)
        .collect();
    for pair in miss_ratios.windows(2) {
        assert!(
            pair[1] <= pair[0],
            "LRU miss ratios rise with size: {miss_ratios:?}"
        );
    }
    assert!(
        miss_ratios[0] > miss_ratios[2],
        "size made no difference: {miss_ratios:?}"
    );

    // With room for every page, every policy misses exactly once per page
    // and never evicts.
    for kind in KINDS {
        let mut cache = build_cache(kind, unique_pages);
        let stats = replay_pages(pages.iter().copied(), &mut *cache);
        assert_eq!(stats.accesses - stats.hits, unique_pages, "{kind:?}");
        assert_eq!(stats.evictions, 0, "{kind:?}");
    }
}
