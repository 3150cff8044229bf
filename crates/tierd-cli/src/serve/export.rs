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
//!
//! `BLOCK_STATUS` (`base:allocation`) answers from the volume
//! ([`Volume::block_status`]): a hole is `NBD_STATE_HOLE | NBD_STATE_ZERO`,
//! data is 0, covering a prefix of the request when the answer would need
//! more runs than the volume gives at once (the client asks again).

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::Arc;

use tierd_engine::config::{Backend, Config};
use tierd_engine::device::stats::{IoKind, IoStats};
use tierd_engine::volume::{Volume, VolumeError};
use tierd_load::target::{describe, DescribedVolume};
use tierd_nbd::proto::{NBD_STATE_HOLE, NBD_STATE_ZERO};
use tierd_nbd::{Export, ExportError, ExportResult, Extent};

/// `base:allocation` flags of a hole: it reads as zeroes. Data is 0.
const HOLE_FLAGS: u32 = NBD_STATE_HOLE | NBD_STATE_ZERO;

/// One volume as an export.
pub struct VolumeExport {
    volume: Arc<Volume>,
    description: String,
    rotational: bool,
    /// The volume's NBD requests as its clients see them (count, bytes,
    /// latency), for the metrics endpoint.
    requests: Arc<IoStats>,
}

/// Whether the volume `name`'s home tier (the last of its stack, which
/// holds every segment) is a spinning disk: its `model` names an HDD or SMR
/// preset, or, without a model, its `path` is a block device whose queue
/// says `rotational` = 1 in sysfs. Clients are told with
/// `NBD_FLAG_ROTATIONAL` (the kernel client then marks the device
/// rotational, and I/O schedulers favour sequential access). A regular file
/// is never reported rotational: what lies under its file system is not
/// known.
pub fn home_is_rotational(config: &Config, name: &str) -> bool {
    let home = config
        .volumes
        .iter()
        .find(|volume| volume.name == name)
        .and_then(|volume| volume.tiers.last())
        .and_then(|home| config.tiers.iter().find(|tier| &tier.name == home));
    let Some(home) = home else {
        return false;
    };
    if let Some(model) = home.model {
        return model.is_rotational();
    }
    match (&home.backend, &home.path) {
        (Backend::File, Some(path)) => block_device_is_rotational(Path::new("/sys"), path),
        _ => false,
    }
}

/// `SYS/dev/block/MAJ:MIN/queue/rotational` of the block device at `path`
/// (for a partition, its disk's queue, one directory up); false for
/// anything that is not a block device or has no such attribute.
fn block_device_is_rotational(sys: &Path, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(metadata) = std::fs::metadata(path) else {
        return false;
    };
    if !metadata.file_type().is_block_device() {
        return false;
    }
    let device = metadata.rdev();
    rotational_attribute(sys, libc::major(device), libc::minor(device))
}

fn rotational_attribute(sys: &Path, major: u32, minor: u32) -> bool {
    let device = sys.join(format!("dev/block/{major}:{minor}"));
    [
        device.join("queue/rotational"),
        device.join("../queue/rotational"),
    ]
    .iter()
    .find_map(|attribute| std::fs::read_to_string(attribute).ok())
    .is_some_and(|text| text.trim() == "1")
}

impl VolumeExport {
    /// `rotational`: advertise the volume as a spinning disk
    /// ([`home_is_rotational`]).
    pub fn new(volume: Arc<Volume>, rotational: bool, requests: Arc<IoStats>) -> VolumeExport {
        let description = describe(&DescribedVolume {
            name: volume.name().to_string(),
            size_bytes: volume.size_bytes(),
            segment_bytes: volume.segment_bytes(),
            tiers: volume.tier_names(),
        });
        VolumeExport {
            volume,
            description,
            rotational,
            requests,
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

    fn is_rotational(&self) -> bool {
        self.rotational
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> ExportResult<()> {
        self.requests.measure(IoKind::Read(buf.len() as u64), || {
            self.volume.read(offset_bytes, buf).map_err(export_error)
        })
    }

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> ExportResult<()> {
        self.requests.measure(IoKind::Write(data.len() as u64), || {
            self.volume
                .write(offset_bytes, data, fua)
                .map_err(export_error)
        })
    }

    fn flush(&self) -> ExportResult<()> {
        // Flushes every tier device, so it covers writes completed on any
        // connection (the server advertises multi-conn).
        self.requests
            .measure(IoKind::Flush, || self.volume.flush().map_err(export_error))
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> ExportResult<()> {
        if length_bytes == 0 {
            return Ok(());
        }
        self.requests.measure(IoKind::Discard, || {
            self.volume
                .discard(offset_bytes, length_bytes, fua)
                .map_err(export_error)
        })
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
        self.requests.measure(IoKind::Discard, || {
            self.volume
                .write_zeroes(offset_bytes, length_bytes, fua)
                .map_err(export_error)
        })
    }

    fn block_status(&self, offset_bytes: u64, length_bytes: u64) -> ExportResult<Vec<Extent>> {
        let runs = self
            .volume
            .block_status(offset_bytes, length_bytes)
            .map_err(export_error)?;
        Ok(runs
            .into_iter()
            .map(|run| Extent {
                length_bytes: run.length_bytes,
                flags: if run.allocated { 0 } else { HOLE_FLAGS },
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Aligned NBD requests reach an `O_DIRECT` tier without a bounce copy:
    /// WRITE payloads arrive in aligned buffers and READ data is read into
    /// aligned buffers, inline and with workers, plain and FUA. An unaligned
    /// request still bounces (the counter counts).
    #[test]
    fn aligned_nbd_requests_reach_a_direct_tier_without_a_bounce() {
        use tierd_common::clock::{Clock, SystemClock};
        use tierd_engine::device::file::FileDevice;
        use tierd_engine::device::BlockDevice;
        use tierd_engine::volume::{TierSpec, VolumeOptions};
        use tierd_nbd::{Client, Server, ServerConfig};

        const SIZE: u64 = 4 << 20;
        let directory = tempfile::tempdir().unwrap();
        let file = match FileDevice::open_tier(
            directory.path().join("disk.img"),
            Some(SIZE),
            true,
            true,
            true,
        ) {
            Ok(file) => Arc::new(file),
            Err(error) if error.message.contains("set direct = false") => {
                eprintln!("skipping: this filesystem refuses O_DIRECT: {error}");
                return;
            }
            Err(error) => panic!("{error}"),
        };
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let options = VolumeOptions {
            name: "vol0".into(),
            size_bytes: SIZE,
            segment_bytes: 1 << 20,
            chunk_bytes: 256 << 10,
            period_ns: 60_000_000_000,
            checkpoint_every_periods: 1,
            policy: tierd_policy::PolicyConfig::None,
            migration: Default::default(),
        };
        let specs = vec![TierSpec {
            name: "disk".into(),
            device: file.clone() as Arc<dyn BlockDevice>,
            volatile: false,
            unsafe_volatile: false,
        }];
        let volume = Arc::new(
            Volume::open(options, specs, &directory.path().join("meta"), clock)
                .unwrap()
                .0,
        );
        let export: Arc<dyn Export> = Arc::new(VolumeExport::new(
            volume,
            false,
            Arc::new(IoStats::new(Arc::new(
                tierd_common::clock::SystemClock::new(),
            ))),
        ));
        for workers in [0, 4] {
            let server = Server::new(
                vec![("vol0".into(), export.clone())],
                ServerConfig {
                    workers_per_connection: workers,
                    ..ServerConfig::default()
                },
            )
            .unwrap();
            let socket = directory.path().join(format!("nbd-{workers}.sock"));
            let handle = server.serve_unix(&socket).unwrap();
            let mut client =
                Client::connect_uri(&format!("nbd+unix:///vol0?socket={}", socket.display()))
                    .unwrap();
            // 4 KiB, 64 KiB and one across a segment boundary (1 MiB).
            for (index, &(offset, length)) in
                [(0u64, 4096usize), (8192, 65536), ((1 << 20) - 4096, 12288)]
                    .iter()
                    .enumerate()
            {
                let data: Vec<u8> = (0..length)
                    .map(|byte| (byte as u8) ^ (index as u8 * 37 + workers as u8))
                    .collect();
                client.write(offset, &data, index == 1).unwrap();
                let mut back = vec![0u8; length];
                client.read(offset, &mut back).unwrap();
                assert_eq!(back, data, "{workers} workers, write {index}");
            }
            assert_eq!(
                file.bounce_count(),
                0,
                "{workers} workers: aligned requests were bounced"
            );
            client.disconnect().unwrap();
            handle.shutdown();
        }
        // The counter is live: an unaligned write does bounce.
        export.write(100, &[1, 2, 3], false).unwrap();
        assert_eq!(file.bounce_count(), 1);
    }

    /// BLOCK_STATUS over a real server: holes of the tier file are
    /// HOLE|ZERO extents, written blocks data, clipped to the request; with
    /// REQ_ONE a single extent.
    #[test]
    fn block_status_reports_the_volumes_holes() {
        use tierd_common::clock::{Clock, SystemClock};
        use tierd_engine::device::file::FileDevice;
        use tierd_engine::device::BlockDevice;
        use tierd_engine::volume::{TierSpec, VolumeOptions};
        use tierd_nbd::{Client, Server, ServerConfig};

        const SIZE: u64 = 4 << 20;
        let directory = tempfile::tempdir().unwrap();
        let file = Arc::new(
            FileDevice::open_tier(
                directory.path().join("disk.img"),
                Some(SIZE),
                false,
                true,
                true,
            )
            .unwrap(),
        );
        if file
            .allocation(0, SIZE)
            .is_none_or(|runs| runs.iter().all(|run| run.allocated))
        {
            eprintln!("skipping: the file system here reports no holes in a sparse file");
            return;
        }
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let options = VolumeOptions {
            name: "vol0".into(),
            size_bytes: SIZE,
            segment_bytes: 1 << 20,
            chunk_bytes: 256 << 10,
            period_ns: 60_000_000_000,
            checkpoint_every_periods: 1,
            policy: tierd_policy::PolicyConfig::None,
            migration: Default::default(),
        };
        let specs = vec![TierSpec {
            name: "disk".into(),
            device: file as Arc<dyn BlockDevice>,
            volatile: false,
            unsafe_volatile: false,
        }];
        let volume = Arc::new(
            Volume::open(
                options,
                specs,
                &directory.path().join("meta"),
                clock.clone(),
            )
            .unwrap()
            .0,
        );
        let export: Arc<dyn Export> = Arc::new(VolumeExport::new(
            volume,
            false,
            Arc::new(IoStats::new(clock)),
        ));
        let server = Server::new(vec![("vol0".into(), export)], ServerConfig::default()).unwrap();
        let socket = directory.path().join("nbd.sock");
        let handle = server.serve_unix(&socket).unwrap();
        let mut client =
            Client::connect_uri(&format!("nbd+unix:///vol0?socket={}", socket.display())).unwrap();
        client.write(64 << 10, &[7u8; 4096], false).unwrap();
        client.write((1 << 20) - 4096, &[9u8; 8192], false).unwrap();
        let extent = |length_bytes: u64, flags: u32| Extent {
            length_bytes,
            flags,
        };
        let hole = NBD_STATE_HOLE | NBD_STATE_ZERO;
        assert_eq!(
            client.block_status(0, 2 << 20, false).unwrap(),
            vec![
                extent(64 << 10, hole),
                extent(4096, 0),
                extent((1 << 20) - 4096 - (68 << 10), hole),
                extent(8192, 0),
                extent((1 << 20) - 4096, hole),
            ]
        );
        assert_eq!(
            client.block_status(0, 2 << 20, true).unwrap(),
            vec![extent(64 << 10, hole)]
        );
        assert_eq!(
            client.block_status((64 << 10) + 100, 10, true).unwrap(),
            vec![extent(10, 0)]
        );
        client.disconnect().unwrap();
        handle.shutdown();
    }

    /// The sysfs attribute, for a whole disk and for a partition (whose
    /// queue is its disk's), read from a fake sysfs tree.
    #[test]
    fn the_rotational_attribute_is_read_for_disks_and_partitions() {
        let sys = tempfile::tempdir().unwrap();
        let disk = sys.path().join("devices/sda");
        std::fs::create_dir_all(disk.join("queue")).unwrap();
        std::fs::create_dir_all(disk.join("sda1")).unwrap();
        std::fs::write(disk.join("queue/rotational"), "1\n").unwrap();
        let ssd = sys.path().join("devices/nvme0n1");
        std::fs::create_dir_all(ssd.join("queue")).unwrap();
        std::fs::write(ssd.join("queue/rotational"), "0\n").unwrap();
        let block = sys.path().join("dev/block");
        std::fs::create_dir_all(&block).unwrap();
        std::os::unix::fs::symlink(&disk, block.join("8:0")).unwrap();
        std::os::unix::fs::symlink(disk.join("sda1"), block.join("8:1")).unwrap();
        std::os::unix::fs::symlink(&ssd, block.join("259:0")).unwrap();
        assert!(rotational_attribute(sys.path(), 8, 0));
        assert!(rotational_attribute(sys.path(), 8, 1));
        assert!(!rotational_attribute(sys.path(), 259, 0));
        assert!(!rotational_attribute(sys.path(), 7, 7), "no such device");
        // A regular file is not a block device.
        let file = sys.path().join("disk.img");
        std::fs::write(&file, b"").unwrap();
        assert!(!block_device_is_rotational(sys.path(), &file));
    }
}
