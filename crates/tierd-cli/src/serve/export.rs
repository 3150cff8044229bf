//! A [`Volume`] served as an NBD [`Export`].
//!
//! Requests map one to one onto the volume (which routes them through the
//! tiering table, splits them at segment boundaries, writes volatile tiers
//! through and mirrors writes to a segment being moved). Errors carry the
//! volume's errno ([`VolumeError::errno`]) and its message (logged by the
//! server, never sent).
//!
//! `WRITE_ZEROES` with `FAST_ZERO` always fails with ENOTSUP: every volume
//! has a file home tier, and zeroing a file range is fast only when the
//! file system supports `FALLOC_FL_ZERO_RANGE` or hole punching (otherwise
//! the device writes zero bytes), and an emulated tier charges its modelled
//! time for the zeroes. The spec lets a server that cannot promise a fast
//! zero answer ENOTSUP; clients (qemu-img, nbdcopy) then zero another way or
//! skip pre-zeroing. Without `FAST_ZERO` the zeroes are written (the device
//! may deallocate the range).

use std::sync::Arc;

use tierd_engine::volume::{Volume, VolumeError};
use tierd_nbd::{Export, ExportError, ExportResult};

/// One volume as an export.
pub struct VolumeExport {
    volume: Arc<Volume>,
    description: String,
}

impl VolumeExport {
    pub fn new(volume: Arc<Volume>) -> VolumeExport {
        let description = format!(
            "tierd volume {} ({} bytes in segments of {} bytes over tiers {})",
            volume.name(),
            volume.size_bytes(),
            volume.segment_bytes(),
            volume.tier_names().join(" > ")
        );
        VolumeExport {
            volume,
            description,
        }
    }
}

fn export_error(error: VolumeError) -> ExportError {
    ExportError::new(error.errno(), error.to_string())
}

impl Export for VolumeExport {
    fn size_bytes(&self) -> u64 {
        self.volume.size_bytes()
    }

    fn description(&self) -> Option<String> {
        Some(self.description.clone())
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> ExportResult<()> {
        self.volume.read(offset_bytes, buf).map_err(export_error)
    }

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> ExportResult<()> {
        self.volume
            .write(offset_bytes, data, fua)
            .map_err(export_error)
    }

    fn flush(&self) -> ExportResult<()> {
        // Flushes every tier device, so it covers writes completed on any
        // connection (the server advertises multi-conn).
        self.volume.flush().map_err(export_error)
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> ExportResult<()> {
        if length_bytes == 0 {
            return Ok(());
        }
        self.volume
            .discard(offset_bytes, length_bytes, fua)
            .map_err(export_error)
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        fua: bool,
        _may_trim: bool,
        fast_only: bool,
    ) -> ExportResult<()> {
        if fast_only {
            return Err(ExportError::new(
                libc::ENOTSUP,
                "fast zero is not offered: a file tier may have to write the zeroes",
            ));
        }
        if length_bytes == 0 {
            return Ok(());
        }
        self.volume
            .write_zeroes(offset_bytes, length_bytes, fua)
            .map_err(export_error)
    }
}
