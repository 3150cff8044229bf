//! A simulated disk with a volatile write cache, for crash testing.
//!
//! Writes land in what reads see at once, but survive a [`CrashDisk::crash`]
//! only after a `flush`. At a crash every 512-byte sector written since the
//! last flush independently keeps its new contents or falls back to the last
//! flushed ones (chosen by the caller's seeded RNG): a write in flight may be
//! torn at sector granularity, and later writes may survive while earlier
//! ones do not, as on a disk that reorders its cache.

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
}
