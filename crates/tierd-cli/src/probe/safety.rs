//! What `tierd probe` checks before it writes over a device: that it is not
//! mounted (nor a partition of it, nor held by device-mapper or md), not a
//! tier of a running `tierd serve`, and large enough. The probe then holds
//! the same lock a serving tier holds (an exclusive `flock`, plus `O_EXCL`
//! on a block device: `FileDevice::open_tier`), so a server started during
//! the probe refuses the file too.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use tierd_engine::device::file::flock_holder;

use crate::CliError;

/// The probe's hold on its device: the lock lasts as long as this.
pub struct Claim {
    _file: File,
}

/// `major:minor` of a block device.
fn device_number(rdev: u64) -> String {
    format!("{}:{}", libc::major(rdev), libc::minor(rdev))
}

/// The sysfs directory of block device `major:minor`, resolved.
fn sysfs_dir(number: &str) -> Option<PathBuf> {
    std::fs::canonicalize(format!("/sys/dev/block/{number}")).ok()
}

/// Mounts that use this block device or a partition of it, from
/// `/proc/self/mountinfo` (by major:minor, and by source path).
pub fn mounts_of(path: &Path, rdev: u64, mountinfo: &str) -> Vec<String> {
    let number = device_number(rdev);
    let disk = sysfs_dir(&number);
    let canonical = std::fs::canonicalize(path).ok();
    let mut found = Vec::new();
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(separator) = fields.iter().position(|&field| field == "-") else {
            continue;
        };
        let (Some(&mounted), Some(&mount_point)) = (fields.get(2), fields.get(4)) else {
            continue;
        };
        let source = fields.get(separator + 2).copied().unwrap_or("");
        let same_number = mounted == number;
        let same_path = canonical.as_ref().is_some_and(|canonical| {
            std::fs::canonicalize(source).ok().as_ref() == Some(canonical)
        });
        // A partition of this disk: its sysfs directory lies inside the disk's.
        let partition = mounted != "0:0"
            && disk.as_ref().is_some_and(|disk| {
                sysfs_dir(mounted).is_some_and(|part| part != *disk && part.starts_with(disk))
            });
        if same_number || same_path || partition {
            found.push(format!("{source} on {mount_point} ({mounted})"));
        }
    }
    found
}

/// Checks `path` and takes the lock (see the module docs).
pub fn claim(path: &Path) -> Result<Claim, CliError> {
    let shown = path.display();
    let metadata = std::fs::metadata(path).map_err(|error| {
        CliError(format!(
            "{shown}: cannot stat: {error}. Give an existing file (create one with `truncate -s 16GiB {shown}`) or a block device"
        ))
    })?;
    let block_device = metadata.file_type().is_block_device();
    if !block_device && !metadata.is_file() {
        return Err(CliError(format!(
            "{shown}: not a regular file or a block device"
        )));
    }
    if block_device {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mounts = mounts_of(path, metadata.rdev(), &mountinfo);
        if !mounts.is_empty() {
            return Err(CliError(format!(
                "{shown} is mounted: {}. The probe would destroy the filesystem; unmount it first",
                mounts.join("; ")
            )));
        }
        let holders = format!("/sys/dev/block/{}/holders", device_number(metadata.rdev()));
        if let Ok(entries) = std::fs::read_dir(&holders) {
            let names: Vec<String> = entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect();
            if !names.is_empty() {
                return Err(CliError(format!(
                    "{shown} is in use by {} (device-mapper, md or LVM: {holders}); stop that first",
                    names.join(", ")
                )));
            }
        }
    }
    let mut options = OpenOptions::new();
    options.read(true).write(true);
    if block_device {
        // The kernel's exclusive open: EBUSY while mounted or held.
        options.custom_flags(libc::O_EXCL);
    }
    let file = options.open(path).map_err(|error| {
        if error.raw_os_error() == Some(libc::EBUSY) {
            CliError(format!(
                "{shown}: the block device is in use (mounted, or opened exclusively by another program or tierd): {error}"
            ))
        } else {
            CliError(format!("{shown}: cannot open for writing: {error}"))
        }
    })?;
    // SAFETY: flock takes a descriptor we own and plain flags.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if locked != 0 {
        let holder = flock_holder(&metadata)
            .map(|pid| format!(" by process {pid}"))
            .unwrap_or_default();
        return Err(CliError(format!(
            "{shown} is locked{holder}: a running tierd serve uses it as a tier (or another probe runs on it). Stop that server first; the probe would overwrite the tier's data"
        )));
    }
    Ok(Claim { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_of_the_same_device_number_is_found() {
        let mountinfo = "\
36 35 98:0 / /mnt1 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
37 35 8:17 / /data rw - ext4 /dev/sdb1 rw
";
        let rdev = libc::makedev(8, 17);
        let found = mounts_of(Path::new("/nonexistent/dev/sdb1"), rdev, mountinfo);
        assert_eq!(found, ["/dev/sdb1 on /data (8:17)"]);
        let other = libc::makedev(8, 32);
        assert!(mounts_of(Path::new("/nonexistent/dev/sdc"), other, mountinfo).is_empty());
    }
}
