//! The replica layer (docs/replicas.md) with a read of a copy held in
//! flight: found by the crash loop on a replicated home
//! (`crates/tierd-cli/tests/crash_loop.rs`,
//! `kill_9_loop_on_a_replicated_home_keeps_flushed_writes`, 1 iteration in
//! about 150), where a read of one extent returned another extent's bytes.
//!
//! A read routed to a copy is in flight; a write to the copy's primary
//! drops the copy, which frees its space; a new group's far member gets a
//! copy planned into that space; the copier must not write it before the
//! read has finished (rule 5 of the layer's module docs, for the copier's
//! writes as well as the user's), or the read returns the new primary's
//! bytes.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tierd_common::clock::{Clock, ManualClock};
use tierd_engine::device::memory::MemoryDevice;
use tierd_engine::device::replica::{ReplicaDevice, ReplicaOptions};
use tierd_engine::device::{BlockDevice, DeviceResult};

const MIB: u64 = 1 << 20;
const EXTENT: u64 = 64 << 10;
const GAP_NS: u64 = 1_000_000_000;
/// A cluster near 8 MiB and two far extents near 40 MiB.
const GROUP: [u64; 6] = [128, 129, 130, 131, 640, 641];
/// Far from the cluster too: read with it later, a new member of its group.
const NEWCOMER: u64 = 900;

/// A memory device that holds the first read of an extent outside
/// `user` (a copy's space) until released.
struct GatedDevice {
    inner: MemoryDevice,
    user: Vec<u64>,
    gate: Mutex<Gate>,
    changed: Condvar,
    /// Extents written, in order (metadata left out).
    writes: Mutex<Vec<u64>>,
}

#[derive(Default)]
struct Gate {
    armed: bool,
    /// The extent of the read held.
    holding: Option<u64>,
    released: bool,
}

impl BlockDevice for GatedDevice {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn is_volatile(&self) -> bool {
        true
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> DeviceResult<()> {
        let extent = offset_bytes / EXTENT;
        let metadata = offset_bytes >= 60 * MIB;
        {
            let mut gate = self.gate.lock();
            if gate.armed && !metadata && !self.user.contains(&extent) {
                gate.armed = false;
                gate.holding = Some(extent);
                self.changed.notify_all();
                while !gate.released {
                    self.changed.wait(&mut gate);
                }
            }
        }
        self.inner.read_at(offset_bytes, buf)
    }
    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        if offset_bytes < 60 * MIB {
            self.writes.lock().push(offset_bytes / EXTENT);
        }
        self.inner.write_at(offset_bytes, data)
    }
    fn flush(&self) -> DeviceResult<()> {
        self.inner.flush()
    }
    fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.inner.discard(offset_bytes, length_bytes)
    }
    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.inner.write_zeroes(offset_bytes, length_bytes)
    }
}

fn pattern(extent: u64) -> Vec<u8> {
    (0..EXTENT)
        .map(|index| {
            (extent as u8)
                .wrapping_mul(31)
                .wrapping_add((index / 512) as u8)
        })
        .collect()
}

fn read(device: &ReplicaDevice, extent: u64) -> Vec<u8> {
    let mut buf = vec![0u8; EXTENT as usize];
    device.read_at(extent * EXTENT, &mut buf).unwrap();
    buf
}

fn session(device: &ReplicaDevice, clock: &ManualClock, extents: &[u64]) {
    for extent in extents {
        let _ = read(device, *extent);
        clock.advance_ns(1_000_000);
    }
    clock.advance_ns(2 * GAP_NS);
}

fn park_ms(milliseconds: u64) {
    std::thread::park_timeout(Duration::from_millis(milliseconds));
}

#[test]
fn the_copier_never_writes_a_copys_space_under_a_read_routed_there() {
    let mut user: Vec<u64> = GROUP.to_vec();
    user.push(NEWCOMER);
    let inner = Arc::new(GatedDevice {
        inner: MemoryDevice::new("hdd", 64 * MIB),
        user: user.clone(),
        gate: Mutex::new(Gate::default()),
        changed: Condvar::new(),
        writes: Mutex::new(Vec::new()),
    });
    let clock = Arc::new(ManualClock::new(1));
    let mut options = ReplicaOptions::default();
    options.manager.far_bytes = 2 * MIB;
    options.manager.session_gap_ns = GAP_NS;
    options.idle_ns = u64::MAX;
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let device =
        Arc::new(ReplicaDevice::open("hdd", inner.clone(), options, dyn_clock, true).unwrap());
    for extent in &user {
        device.write_at(extent * EXTENT, &pattern(*extent)).unwrap();
    }
    device.flush().unwrap();
    session(&device, &clock, &GROUP);
    session(&device, &clock, &GROUP);
    let _ = read(&device, 0);
    assert_eq!(device.run_copies_now(usize::MAX).unwrap(), 2);

    // A read of 640 from next to the cluster goes to its copy; hold it.
    let _ = read(&device, 131);
    inner.gate.lock().armed = true;
    let reader = {
        let device = device.clone();
        std::thread::spawn(move || read(&device, 640))
    };
    {
        let mut gate = inner.gate.lock();
        while gate.holding.is_none() {
            inner.changed.wait(&mut gate);
        }
    }
    let stats = device.manager_stats();
    assert_eq!(stats.reads_from_replicas, 1, "routed to the copy");
    // That read is a session of its own.
    clock.advance_ns(2 * GAP_NS);

    // A write to 640 (not the part the test checks: its last 4 KiB) drops
    // the copy; the group recurs with a new far member, planned into the
    // freed space nearest its centre.
    device.write_at(641 * EXTENT - 4096, &[0xEE; 4096]).unwrap();
    session(&device, &clock, &[128, 129, NEWCOMER, 130, 131, 641]);
    let _ = read(&device, 0);
    let copier = {
        let device = device.clone();
        std::thread::spawn(move || device.run_copies_now(usize::MAX).unwrap())
    };
    // Give the copier time to write while the read is held.
    park_ms(300);
    {
        let mut gate = inner.gate.lock();
        gate.released = true;
        inner.changed.notify_all();
    }
    let got = reader.join().unwrap();
    let made = copier.join().unwrap();
    // The newcomer's copy went where the held read was reading (else this
    // test shows nothing).
    let held = inner.gate.lock().holding.unwrap();
    let writes = inner.writes.lock().clone();
    assert!(
        writes.iter().filter(|extent| **extent == held).count() >= 2,
        "no second copy into extent {held} (the held read's): writes {writes:?}"
    );
    assert!(made >= 1, "the newcomer was copied ({made} copies made)");
    // The read is concurrent with the write to 640's last 4 KiB: the rest
    // is 640's, never the newcomer's.
    let expected = pattern(640);
    let at = (0..EXTENT as usize - 4096).find(|at| got[*at] != expected[*at]);
    assert!(
        at.is_none(),
        "the read of 640 returned other bytes from byte {at:?} on (the newcomer's: {})",
        got[..64] == pattern(NEWCOMER)[..64]
    );
}
