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
        let description = describe(&DescribedVolume {
            name: volume.name().to_string(),
            size_bytes: volume.size_bytes(),
            segment_bytes: volume.segment_bytes(),
            tiers: volume.tier_names(),
        });
        VolumeExport {
            volume,
            description,
        }
    }
}

/// What the NBD description of a tierd export tells a client about the
/// volume behind it (`tierd replay` shows it in its report).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedVolume {
    pub name: String,
    pub size_bytes: u64,
    pub segment_bytes: u64,
    /// Fastest first; the last is home.
    pub tiers: Vec<String>,
}

const DESCRIPTION_PREFIX: &str = "tierd volume ";
const SEGMENTS_OF: &str = " bytes in segments of ";
const OVER_TIERS: &str = " bytes over tiers ";
const TIER_SEPARATOR: &str = " > ";

/// The export description: `tierd volume NAME (SIZE bytes in segments of
/// SEGMENT bytes over tiers FAST > ... > HOME)`.
pub fn describe(volume: &DescribedVolume) -> String {
    format!(
        "{DESCRIPTION_PREFIX}{} ({}{SEGMENTS_OF}{}{OVER_TIERS}{})",
        volume.name,
        volume.size_bytes,
        volume.segment_bytes,
        volume.tiers.join(TIER_SEPARATOR)
    )
}

/// The volume a [`describe`]d description names; `None` for any other text
/// (another server's export).
pub fn parse_description(text: &str) -> Option<DescribedVolume> {
    let rest = text.strip_prefix(DESCRIPTION_PREFIX)?.strip_suffix(')')?;
    let (name, rest) = rest.split_once(" (")?;
    let (size, rest) = rest.split_once(SEGMENTS_OF)?;
    let (segment, tiers) = rest.split_once(OVER_TIERS)?;
    Some(DescribedVolume {
        name: name.to_string(),
        size_bytes: size.parse().ok()?,
        segment_bytes: segment.parse().ok()?,
        tiers: tiers.split(TIER_SEPARATOR).map(str::to_string).collect(),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_reads_back() {
        let volume = DescribedVolume {
            name: "vol0".to_string(),
            size_bytes: 1 << 30,
            segment_bytes: 64 << 20,
            tiers: vec!["mem".to_string(), "disk".to_string()],
        };
        let text = describe(&volume);
        assert_eq!(
            text,
            "tierd volume vol0 (1073741824 bytes in segments of 67108864 bytes over tiers mem > disk)"
        );
        assert_eq!(parse_description(&text), Some(volume));
        assert_eq!(parse_description("nbdkit memory plugin"), None);
        assert_eq!(parse_description("tierd volume x (big)"), None);
    }
}
