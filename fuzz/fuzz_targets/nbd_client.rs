#![no_main]

// Counts allocations so the target can bound them (see alloc_watch).
#[global_allocator]
static ALLOCATOR: tierd_fuzz::alloc_watch::Watching = tierd_fuzz::alloc_watch::Watching;

libfuzzer_sys::fuzz_target!(|data: &[u8]| tierd_fuzz::nbd_client::run(data));
