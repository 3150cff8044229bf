//! A simulated disk with a volatile write cache, for crash testing.
//!
//! Writes land in what reads see at once, but survive a [`CrashDisk::crash`]
//! only after a `flush`. At a crash every 512-byte sector written since the
//! last flush independently keeps its new contents or falls back to the last
//! flushed ones (chosen by the caller's seeded RNG): a write in flight may be
//! torn at sector granularity, and later writes may survive while earlier
//! ones do not, as on a disk that reorders its cache.
//!
//! A durable write (`write_at_durable`, NBD FUA) is durable when it returns:
//! its bytes become the fallback at once, so they survive any crash, while
//! other unflushed writes (also to the same sectors, before it) stay at the
//! mercy of the crash. A plain write after it over the same bytes is again
//! unflushed: the crash keeps either that write or the durable one.

use parking_lot::Mutex;

use tierd_common::rng::Rng;

use super::{check_range, BlockDevice, DeviceResult};

/// Sector size for tearing.
pub const SECTOR_BYTES: u64 = 512;

struct State {
    current: Vec<u8>,
    durable: Vec<u8>,
    /// Sector-aligned ranges written since the last flush.
    pending: Vec<(u64, u64)>,
}

/// See the module docs. Not volatile: it models a disk.
pub struct CrashDisk {
    name: String,
    size_bytes: u64,
    state: Mutex<State>,
}

impl CrashDisk {
    pub fn new(name: impl Into<String>, size_bytes: u64) -> CrashDisk {
        CrashDisk {
            name: name.into(),
            size_bytes,
            state: Mutex::new(State {
                current: vec![0; size_bytes as usize],
                durable: vec![0; size_bytes as usize],
                pending: Vec::new(),
            }),
        }
    }

    /// The process (or power) dies: unflushed sectors keep their new
    /// contents or lose them at random. Returns how many sectors lost data.
    pub fn crash(&self, rng: &mut dyn Rng) -> u64 {
        let mut state = self.state.lock();
        let pending = std::mem::take(&mut state.pending);
        let mut lost = 0;
        for (offset, length) in pending {
            let first = offset / SECTOR_BYTES;
            let last = (offset + length).div_ceil(SECTOR_BYTES);
            for sector in first..last {
                let start = (sector * SECTOR_BYTES) as usize;
                let end = (start + SECTOR_BYTES as usize).min(state.current.len());
                if rng.below(2) == 0 {
                    let State {
                        current, durable, ..
                    } = &mut *state;
                    durable[start..end].copy_from_slice(&current[start..end]);
                } else {
                    lost += 1;
                }
            }
        }
        let State {
            current, durable, ..
        } = &mut *state;
        current.copy_from_slice(durable);
        lost
    }

    /// The harshest crash: every sector written since the last flush loses
    /// its new contents (only flushed and durable writes survive).
    pub fn crash_losing_everything_unflushed(&self) {
        let mut state = self.state.lock();
        state.pending.clear();
        let State {
            current, durable, ..
        } = &mut *state;
        current.copy_from_slice(durable);
    }

    fn mark(state: &mut State, offset: u64, length: u64) {
        if length == 0 {
            return;
        }
        let start = offset / SECTOR_BYTES * SECTOR_BYTES;
        let end = (offset + length).div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
        state.pending.push((start, end - start));
    }
}

impl BlockDevice for CrashDisk {
    fn name(&self) -> &str {
        &self.name
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn is_volatile(&self) -> bool {
        false
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> DeviceResult<()> {
        check_range(
            &self.name,
            "read",
            offset_bytes,
            buf.len() as u64,
            self.size_bytes,
        )?;
        let state = self.state.lock();
        let start = offset_bytes as usize;
        buf.copy_from_slice(&state.current[start..start + buf.len()]);
        Ok(())
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        check_range(
            &self.name,
            "write",
            offset_bytes,
            data.len() as u64,
            self.size_bytes,
        )?;
        let mut state = self.state.lock();
        let start = offset_bytes as usize;
        state.current[start..start + data.len()].copy_from_slice(data);
        Self::mark(&mut state, offset_bytes, data.len() as u64);
        Ok(())
    }

    /// Written to the current and the durable image at once (see the module
    /// docs); no other pending sector becomes durable.
    fn write_at_durable(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        check_range(
            &self.name,
            "write",
            offset_bytes,
            data.len() as u64,
            self.size_bytes,
        )?;
        let mut state = self.state.lock();
        let start = offset_bytes as usize;
        let end = start + data.len();
        state.current[start..end].copy_from_slice(data);
        state.durable[start..end].copy_from_slice(data);
        Ok(())
    }

    fn flush(&self) -> DeviceResult<()> {
        let mut state = self.state.lock();
        let pending = std::mem::take(&mut state.pending);
        let State {
            current, durable, ..
        } = &mut *state;
        for (offset, length) in pending {
            let start = offset as usize;
            let end = ((offset + length) as usize).min(current.len());
            durable[start..end].copy_from_slice(&current[start..end]);
        }
        Ok(())
    }

    fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.write_zeroes(offset_bytes, length_bytes)
    }

    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        check_range(
            &self.name,
            "write_zeroes",
            offset_bytes,
            length_bytes,
            self.size_bytes,
        )?;
        let mut state = self.state.lock();
        let start = offset_bytes as usize;
        state.current[start..start + length_bytes as usize].fill(0);
        Self::mark(&mut state, offset_bytes, length_bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierd_common::rng::SeededRng;

    #[test]
    fn flushed_data_survives_and_unflushed_may_not() {
        let disk = CrashDisk::new("d", 64 * 1024);
        disk.write_at(0, &[1u8; 4096]).unwrap();
        disk.flush().unwrap();
        disk.write_at(0, &[2u8; 4096]).unwrap();
        let mut rng = SeededRng::new(1);
        let lost = disk.crash(&mut rng);
        let mut back = vec![0u8; 4096];
        disk.read_at(0, &mut back).unwrap();
        // Each sector holds the flushed or the new value, never a mix inside
        // a sector, and the count of old sectors is what crash reported.
        let mut old = 0;
        for sector in back.chunks(SECTOR_BYTES as usize) {
            assert!(sector.iter().all(|byte| *byte == sector[0]));
            assert!(sector[0] == 1 || sector[0] == 2);
            old += u64::from(sector[0] == 1);
        }
        assert_eq!(old, lost);
        // After the crash nothing is pending: a second crash changes nothing.
        disk.crash(&mut rng);
        let mut again = vec![0u8; 4096];
        disk.read_at(0, &mut again).unwrap();
        assert_eq!(again, back);
    }

    /// A durable (FUA) write survives every crash; the sectors of a plain
    /// unflushed write next to it are lost by some crashes and kept by
    /// others; neither makes the other durable.
    #[test]
    fn a_durable_write_survives_and_a_plain_one_may_not() {
        let mut plain_lost = 0;
        let mut plain_kept = 0;
        for seed in 0..32 {
            let disk = CrashDisk::new("d", 64 * 1024);
            // A plain write under the durable one: the durable bytes win
            // whatever the crash keeps of it.
            disk.write_at(0, &[7u8; 8192]).unwrap();
            disk.write_at_durable(0, &[1u8; 4096]).unwrap();
            disk.write_at(8192, &[2u8; 4096]).unwrap();
            disk.crash(&mut SeededRng::new(seed));
            let mut back = vec![0u8; 12288];
            disk.read_at(0, &mut back).unwrap();
            assert!(back[..4096].iter().all(|&byte| byte == 1), "seed {seed}");
            // The plain write's sectors next to it: old or new, never forced.
            assert!(back[4096..8192].iter().all(|&byte| byte == 0 || byte == 7));
            for sector in back[8192..].chunks(SECTOR_BYTES as usize) {
                if sector.iter().all(|&byte| byte == 2) {
                    plain_kept += 1;
                } else {
                    assert!(sector.iter().all(|&byte| byte == 0), "seed {seed}");
                    plain_lost += 1;
                }
            }
        }
        assert!(
            plain_lost > 0 && plain_kept > 0,
            "{plain_lost} / {plain_kept}"
        );

        // A plain write over durable bytes is unflushed again: a crash
        // keeps it or falls back to the durable write, never to zeroes.
        let disk = CrashDisk::new("d", 4096);
        disk.write_at_durable(0, &[3u8; 512]).unwrap();
        disk.write_at(0, &[4u8; 512]).unwrap();
        disk.crash(&mut SeededRng::new(5));
        let mut sector = [0u8; 512];
        disk.read_at(0, &mut sector).unwrap();
        assert!(sector == [3u8; 512] || sector == [4u8; 512]);
        assert!(disk.write_at_durable(4000, &[0u8; 200]).is_err());
    }
}

#[cfg(test)]
pub use mortal::Mortal;

#[cfg(test)]
mod mortal {
    use std::sync::Arc;

    use tierd_common::clock::Clock;

    use crate::device::{BlockDevice, DeviceError, DeviceErrorKind, DeviceResult};

    /// A device whose process dies (kill -9): after `left` more writes and
    /// flushes every write and flush fails, but what was written stays (the
    /// page cache, or a `CrashDisk`'s cache until its own crash). Writes may
    /// take `write_ns` of real time, so other threads run meanwhile.
    pub struct Mortal {
        inner: Arc<dyn BlockDevice>,
        pub left: std::sync::atomic::AtomicI64,
        write_ns: u64,
    }

    impl Mortal {
        pub fn new(inner: Arc<dyn BlockDevice>, write_ns: u64) -> Mortal {
            Mortal {
                inner,
                left: std::sync::atomic::AtomicI64::new(i64::MAX),
                write_ns,
            }
        }

        pub fn die_after(&self, operations: i64) {
            self.left
                .store(operations, std::sync::atomic::Ordering::SeqCst);
        }

        fn tick(&self) -> DeviceResult<()> {
            if self.left.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) <= 0 {
                return Err(DeviceError {
                    device: "ssd".into(),
                    op: "write",
                    offset_bytes: 0,
                    length_bytes: 0,
                    kind: DeviceErrorKind::Gone,
                    message: "the process died".into(),
                });
            }
            Ok(())
        }
    }

    impl BlockDevice for Mortal {
        fn name(&self) -> &str {
            "ssd"
        }
        fn size_bytes(&self) -> u64 {
            self.inner.size_bytes()
        }
        fn is_volatile(&self) -> bool {
            false
        }
        fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> DeviceResult<()> {
            self.inner.read_at(offset_bytes, buf)
        }
        fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
            self.tick()?;
            if self.write_ns > 0 {
                tierd_common::clock::SystemClock::new().sleep_ns(self.write_ns);
            }
            self.inner.write_at(offset_bytes, data)
        }
        fn write_at_durable(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
            self.tick()?;
            self.inner.write_at_durable(offset_bytes, data)
        }
        fn flush(&self) -> DeviceResult<()> {
            self.tick()?;
            self.inner.flush()
        }
        fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
            self.tick()?;
            self.inner.discard(offset_bytes, length_bytes)
        }
        fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
            self.tick()?;
            self.inner.write_zeroes(offset_bytes, length_bytes)
        }
    }
}
