//! The trace formats tierd knows, by the names the CLI uses.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    /// MSR Cambridge CSV: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`.
    Msr,
    /// CloudPhysics CSV with header `version,time,op,size,lbn`.
    CloudPhysicsCsv,
    /// CloudPhysics vscsi binary, version 1 (32-byte records).
    Vscsi,
    /// DiskSim ASCII: `time(ns) device lba(sectors) size(sectors) type(1=read)`.
    DiskSim,
    /// flashsim text: `time(ms)\tdevice\tlba(sectors)\tsize(4KiB pages)\ttype(1=read)`.
    FlashSim,
    /// Original UMass/SPC: `ASU,LBA(sectors),size(bytes),opcode(r|w),timestamp(s)`.
    Spc,
    /// Default `blkparse` text output.
    Blkparse,
    /// ARC paper `.lis`: `start_block count ignore request_number`.
    ArcLis,
    /// LIRS2 binary: headerless little-endian u32 block numbers.
    LirsBlocks,
    /// Tencent CBS CSV: `timestamp(s),offset(sectors),size(sectors),io_type(0=read),volume`.
    Tencent,
    /// SYSTOR '17 CSV: `Timestamp,Response,IOType,LUN,Offset,Size`.
    Systor17,
    /// FIU IODedup text: `ts(ns) pid process lba(sectors) size(sectors) op major minor md5`.
    Fiu,
    /// fio iolog, version 2 (and 3 when reading).
    FioIolog,
    /// tierd's native binary format.
    Tierd,
}

impl Format {
    pub const ALL: [Format; 14] = [
        Format::Msr,
        Format::CloudPhysicsCsv,
        Format::Vscsi,
        Format::DiskSim,
        Format::FlashSim,
        Format::Spc,
        Format::Blkparse,
        Format::ArcLis,
        Format::LirsBlocks,
        Format::Tencent,
        Format::Systor17,
        Format::Fiu,
        Format::FioIolog,
        Format::Tierd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Format::Msr => "msr",
            Format::CloudPhysicsCsv => "cloudphysics-csv",
            Format::Vscsi => "vscsi",
            Format::DiskSim => "disksim",
            Format::FlashSim => "flashsim",
            Format::Spc => "spc",
            Format::Blkparse => "blkparse",
            Format::ArcLis => "arc-lis",
            Format::LirsBlocks => "lirs-blocks",
            Format::Tencent => "tencent",
            Format::Systor17 => "systor17",
            Format::Fiu => "fiu",
            Format::FioIolog => "fio-iolog",
            Format::Tierd => "tierd",
        }
    }

    /// One line for `tierd trace formats`.
    pub fn description(self) -> &'static str {
        match self {
            Format::Msr => "MSR Cambridge CSV (FILETIME, host, disk, Read|Write, bytes)",
            Format::CloudPhysicsCsv => "CloudPhysics CSV with header version,time,op,size,lbn",
            Format::Vscsi => "CloudPhysics vscsi binary v1 (32-byte records)",
            Format::DiskSim => "DiskSim ASCII: ns, device, sectors, sectors, 1=read",
            Format::FlashSim => "flashsim text: ms, device, sectors, 4 KiB pages, 1=read (tabs)",
            Format::Spc => "UMass/SPC: ASU, LBA, bytes, r|w, seconds",
            Format::Blkparse => "blkparse default text (Q events by default, --event D|C)",
            Format::ArcLis => "ARC .lis: start block, block count (reads only, no time)",
            Format::LirsBlocks => "LIRS2 binary: little-endian u32 block numbers (needs --format)",
            Format::Tencent => {
                "Tencent CBS CSV: seconds, sectors, sectors, 0=read, volume (sorted on read)"
            }
            Format::Systor17 => {
                "SYSTOR'17 CSV: seconds, response, R|W, LUN, bytes, bytes (sorted on read)"
            }
            Format::Fiu => {
                "FIU IODedup text: ns, pid, process, sectors, sectors, R|W, major, minor, md5"
            }
            Format::FioIolog => "fio iolog v2 (written by default) and v3 (times)",
            Format::Tierd => "tierd native binary: header, fixed 32-byte records, zstd blocks",
        }
    }

    /// Formats that carry block numbers only: no time, no writes. Every record
    /// counts as one read request.
    pub fn is_block_only(self) -> bool {
        matches!(self, Format::ArcLis | Format::LirsBlocks)
    }

    /// Formats whose rows are not in time order in the wild; readers sort them.
    pub fn needs_sorting(self) -> bool {
        matches!(self, Format::Tencent | Format::Systor17)
    }

    pub fn names() -> String {
        Format::ALL
            .iter()
            .map(|format| format.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Format {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Format::ALL
            .into_iter()
            .find(|format| format.name() == text)
            .ok_or_else(|| {
                format!(
                    "unknown trace format {text:?}; known formats: {}",
                    Format::names()
                )
            })
    }
}
