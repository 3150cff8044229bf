//! A global allocator that counts, so a target can assert that its input
//! never made the code under test allocate more than a bound (libFuzzer's
//! `-rss_limit_mb` alone misses a zero-filled `vec![0; huge]`: the kernel
//! hands out the pages lazily, so the resident size does not grow).
//!
//! Binaries that want the counts install it (`#[global_allocator] static
//! ALLOCATOR: Watching = Watching;` in `fuzz_targets/nbd_client.rs` and
//! `tests/seeds.rs`); elsewhere [`installed`] is false and the counts stay
//! zero. Counts are process-wide: a target resets them at its start, and
//! anything else allocating at the same time adds to them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The counting allocator (over the system allocator).
pub struct Watching;

static INSTALLED: AtomicBool = AtomicBool::new(false);
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);
static LARGEST_BYTES: AtomicUsize = AtomicUsize::new(0);

fn grew(size: usize) {
    INSTALLED.store(true, Ordering::Relaxed);
    let live = LIVE_BYTES.fetch_add(size, Ordering::Relaxed) + size;
    PEAK_BYTES.fetch_max(live, Ordering::Relaxed);
    LARGEST_BYTES.fetch_max(size, Ordering::Relaxed);
}

fn shrank(size: usize) {
    LIVE_BYTES.fetch_sub(size, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let pointer = System.alloc(layout);
        if !pointer.is_null() {
            grew(layout.size());
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let pointer = System.alloc_zeroed(layout);
        if !pointer.is_null() {
            grew(layout.size());
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        System.dealloc(pointer, layout);
        shrank(layout.size());
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let moved = System.realloc(pointer, layout, new_size);
        if !moved.is_null() {
            shrank(layout.size());
            grew(new_size);
        }
        moved
    }
}

/// True once the watching allocator has served an allocation in this
/// process (so the counts mean something).
pub fn installed() -> bool {
    // Allocate once so a process that has not allocated yet still reports.
    drop(std::hint::black_box(Box::new(0u64)));
    INSTALLED.load(Ordering::Relaxed)
}

/// Starts a measurement: the peak is reset to what is live now and the
/// largest single allocation to 0. Returns the live bytes at the start.
pub fn reset() -> usize {
    let live = LIVE_BYTES.load(Ordering::Relaxed);
    PEAK_BYTES.store(live, Ordering::Relaxed);
    LARGEST_BYTES.store(0, Ordering::Relaxed);
    live
}

/// The largest single allocation (or reallocation's new size) since
/// [`reset`].
pub fn largest_bytes() -> usize {
    LARGEST_BYTES.load(Ordering::Relaxed)
}

/// The most bytes live at once since [`reset`].
pub fn peak_bytes() -> usize {
    PEAK_BYTES.load(Ordering::Relaxed)
}
