//! Writing traces: tierd's native format and the text formats other tools
//! read (fio iologs for replay with fio, MSR, DiskSim, SPC, CloudPhysics CSV).
//!
//! Every text writer produces what the matching reader in this crate parses
//! back into the same requests, to the precision of the format: MSR keeps
//! 100 ns ticks, CloudPhysics whole microseconds, fio v3 whole microseconds of
//! relative time, fio v2 no time at all; sector formats need sector-aligned
//! offsets (and, for DiskSim, lengths). A request a format cannot hold is an
//! [`TraceError::Unwritable`] naming the request (counting from 1) and why.
//!
//! The output is compressed when its extension says so (`.gz`, `.bz2`, `.xz`,
//! `.zst`), through [`crate::input::Output`].

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Result, TraceError};
use crate::format::Format;
use crate::formats::msr::{FILETIME_UNIX_EPOCH_TICKS, NS_PER_TICK};
use crate::formats::native::NativeWriter;
use crate::input::Output;
use crate::request::{Op, Request, VolumeId, VolumeTable};

/// The formats [`create_writer`] can write.
pub const WRITABLE_FORMATS: [Format; 6] = [
    Format::Tierd,
    Format::FioIolog,
    Format::Msr,
    Format::DiskSim,
    Format::Spc,
    Format::CloudPhysicsCsv,
];

/// Bytes per sector in the sector-addressed formats.
const SECTOR_BYTES: u64 = 512;

/// A sink for requests in one format.
///
/// The caller MUST call [`finish`](TraceWriter::finish): it writes what only
/// the end knows (the native header, fio `close` lines), ends any compressed
/// stream and syncs the file. A writer dropped without `finish` leaves an
/// incomplete file.
pub trait TraceWriter {
    /// Appends one request. `volumes` is the table of the reader the request
    /// came from; `request.volume` indexes it.
    fn write_request(&mut self, request: &Request, volumes: &VolumeTable) -> Result<()>;

    /// Completes the file; returns how many requests were written.
    fn finish(self: Box<Self>) -> Result<u64>;
}

/// Choices for writers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteOptions {
    /// fio iolog version: 2 (the default: every fio reads it, no times) or 3
    /// (fio 3.31 and later: each line starts with a timestamp, so replay
    /// keeps the trace's timing).
    pub fio_iolog_version: u32,
}

impl Default for WriteOptions {
    fn default() -> Self {
        Self {
            fio_iolog_version: 2,
        }
    }
}

/// Creates `path` and a writer for `format` into it.
pub fn create_writer(
    path: &Path,
    format: Format,
    options: &WriteOptions,
) -> Result<Box<dyn TraceWriter>> {
    let unwritable = |reason: String| TraceError::Unwritable {
        path: path.to_path_buf(),
        format,
        reason,
    };
    Ok(match format {
        Format::Tierd => Box::new(NativeWriter::create(path)?),
        Format::FioIolog => match options.fio_iolog_version {
            2 | 3 => Box::new(LineWriter::create(
                path,
                FioIolog::new(options.fio_iolog_version),
            )?),
            other => return Err(unwritable(format!("fio iolog version {other}; use 2 or 3"))),
        },
        Format::Msr => Box::new(LineWriter::create(path, Msr::default())?),
        Format::DiskSim => Box::new(LineWriter::create(path, DiskSim::default())?),
        Format::Spc => Box::new(LineWriter::create(path, Spc::default())?),
        Format::CloudPhysicsCsv => Box::new(LineWriter::create(path, CloudPhysics::default())?),
        _ => {
            let writable: Vec<&str> = WRITABLE_FORMATS
                .iter()
                .map(|format| format.name())
                .collect();
            return Err(unwritable(format!(
                "tierd reads {format} but does not write it; writable formats: {}",
                writable.join(", ")
            )));
        }
    })
}

/// One text format's lines. Implementations write into `line` (appending)
/// and say why a request cannot be written.
trait LineEncoder {
    const FORMAT: Format;

    /// Lines before the first request.
    fn header(&mut self, _out: &mut Vec<u8>) {}

    fn encode(
        &mut self,
        request: &Request,
        volumes: &VolumeTable,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), String>;

    /// Lines after the last request.
    fn footer(&mut self, _out: &mut Vec<u8>) {}
}

/// Plumbing shared by the text writers: the output file, a reused line
/// buffer, the request count for error messages.
struct LineWriter<E: LineEncoder> {
    path: PathBuf,
    output: Output,
    encoder: E,
    buffer: Vec<u8>,
    written: u64,
}

impl<E: LineEncoder> LineWriter<E> {
    fn create(path: &Path, mut encoder: E) -> Result<Self> {
        let output = Output::create(path)?;
        let mut buffer = Vec::with_capacity(256);
        encoder.header(&mut buffer);
        Ok(Self {
            path: path.to_path_buf(),
            output,
            encoder,
            buffer,
            written: 0,
        })
    }

    fn write_buffer(&mut self) -> Result<()> {
        if let Err(source) = self.output.write_all(&self.buffer) {
            return Err(TraceError::Write {
                path: self.path.clone(),
                source,
            });
        }
        self.buffer.clear();
        Ok(())
    }
}

impl<E: LineEncoder> TraceWriter for LineWriter<E> {
    fn write_request(&mut self, request: &Request, volumes: &VolumeTable) -> Result<()> {
        let start = self.buffer.len();
        if let Err(reason) = self.encoder.encode(request, volumes, &mut self.buffer) {
            self.buffer.truncate(start);
            return Err(TraceError::Unwritable {
                path: self.path.clone(),
                format: E::FORMAT,
                reason: format!("request {} (counting from 1): {reason}", self.written + 1),
            });
        }
        self.written += 1;
        if self.buffer.len() >= 64 * 1024 {
            self.write_buffer()?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<u64> {
        self.encoder.footer(&mut self.buffer);
        self.write_buffer()?;
        let LineWriter {
            output, written, ..
        } = *self;
        output.finish()?;
        Ok(written)
    }
}

/// The name of `volume`, or why there is none.
fn volume_name(volumes: &VolumeTable, volume: VolumeId) -> std::result::Result<&str, String> {
    volumes.name(volume).ok_or_else(|| {
        format!(
            "volume id {volume} is not in the reader's volume table of {} names",
            volumes.len()
        )
    })
}

/// `offset` and `length` in sectors, or why they are not whole sectors.
fn sectors(request: &Request, length_too: bool) -> std::result::Result<(u64, u64), String> {
    let (lba, offset_rest) = (
        request.offset_bytes / SECTOR_BYTES,
        request.offset_bytes % SECTOR_BYTES,
    );
    let (count, length_rest) = (
        request.length_bytes / SECTOR_BYTES,
        request.length_bytes % SECTOR_BYTES,
    );
    if offset_rest != 0 {
        return Err(format!(
            "offset {} bytes is not a multiple of the {SECTOR_BYTES}-byte sector",
            request.offset_bytes
        ));
    }
    if length_too && length_rest != 0 {
        return Err(format!(
            "length {} bytes is not a multiple of the {SECTOR_BYTES}-byte sector",
            request.length_bytes
        ));
    }
    Ok((lba, count))
}

/// Device numbers for formats whose volumes are numbers (DiskSim devices,
/// SPC ASUs): a volume named by a decimal number keeps it; any other name
/// becomes its volume id (0, 1, ... in order of first appearance).
#[derive(Default)]
struct DeviceNumbers {
    numbers: Vec<Option<u64>>,
}

impl DeviceNumbers {
    fn number(
        &mut self,
        volumes: &VolumeTable,
        volume: VolumeId,
    ) -> std::result::Result<u64, String> {
        let index = volume as usize;
        if let Some(Some(number)) = self.numbers.get(index) {
            return Ok(*number);
        }
        let name = volume_name(volumes, volume)?;
        let number = name
            .parse::<u64>()
            .ok()
            .filter(|_| name.bytes().all(|byte| byte.is_ascii_digit()))
            .unwrap_or(u64::from(volume));
        if self.numbers.len() <= index {
            self.numbers.resize(index + 1, None);
        }
        self.numbers[index] = Some(number);
        Ok(number)
    }
}

/// fio iolog, version 2 (no times) or 3 (leading timestamp).
///
/// fio 3.31+ writes and replays version 3 timestamps in microseconds since
/// the start of the run (`iolog.c`: `utime_since_now` when writing,
/// `iolog_delay` compares against microseconds when replaying); this writer
/// makes them relative to the first request.
struct FioIolog {
    version: u32,
    first_time_ns: Option<u64>,
    last_relative: u64,
    /// Volumes that had their `add` and `open` lines, in that order.
    opened: Vec<VolumeId>,
    opened_flags: Vec<bool>,
    names: Vec<String>,
}

/// Nanoseconds per unit of the fio v3 timestamp.
pub const FIO_V3_NS_PER_UNIT: u64 = 1_000;

/// fio reads file names with `%256s`.
const FIO_NAME_BYTES_MAX: usize = 256;

impl FioIolog {
    fn new(version: u32) -> Self {
        Self {
            version,
            first_time_ns: None,
            last_relative: 0,
            opened: Vec::new(),
            opened_flags: Vec::new(),
            names: Vec::new(),
        }
    }

    fn stamp(&self, out: &mut Vec<u8>, relative: u64) {
        if self.version == 3 {
            let _ = write!(out, "{relative} ");
        }
    }
}

impl LineEncoder for FioIolog {
    const FORMAT: Format = Format::FioIolog;

    fn header(&mut self, out: &mut Vec<u8>) {
        let _ = writeln!(out, "fio version {} iolog", self.version);
    }

    fn encode(
        &mut self,
        request: &Request,
        volumes: &VolumeTable,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), String> {
        if request.length_bytes > u64::from(u32::MAX) {
            return Err(format!(
                "length {} bytes exceeds fio's limit of {} bytes",
                request.length_bytes,
                u32::MAX
            ));
        }
        let first_time_ns = *self.first_time_ns.get_or_insert(request.time_ns);
        let relative = if self.version == 3 {
            let since_first_ns = request.time_ns.checked_sub(first_time_ns).ok_or_else(|| {
                format!(
                    "time {} ns is before the first request's {first_time_ns} ns; fio v3 times count from the first request (sort the trace first)",
                    request.time_ns
                )
            })?;
            since_first_ns / FIO_V3_NS_PER_UNIT
        } else {
            0
        };
        let index = request.volume as usize;
        if !self.opened_flags.get(index).copied().unwrap_or(false) {
            let name = volume_name(volumes, request.volume)?;
            if name.is_empty()
                || name.len() > FIO_NAME_BYTES_MAX
                || name.bytes().any(|byte| byte.is_ascii_whitespace())
            {
                return Err(format!(
                    "volume name {name:?} cannot be an fio file name (it needs 1 to {FIO_NAME_BYTES_MAX} bytes and no spaces)"
                ));
            }
            if self.opened_flags.len() <= index {
                self.opened_flags.resize(index + 1, false);
                self.names.resize(index + 1, String::new());
            }
            self.opened_flags[index] = true;
            self.names[index] = name.to_string();
            self.opened.push(request.volume);
            self.stamp(out, relative);
            let _ = writeln!(out, "{name} add");
            self.stamp(out, relative);
            let _ = writeln!(out, "{name} open");
        }
        self.last_relative = relative;
        self.stamp(out, relative);
        let action = match request.op {
            Op::Read => "read",
            Op::Write => "write",
        };
        let _ = writeln!(
            out,
            "{} {action} {} {}",
            self.names[index], request.offset_bytes, request.length_bytes
        );
        Ok(())
    }

    fn footer(&mut self, out: &mut Vec<u8>) {
        for volume in &self.opened {
            self.stamp(out, self.last_relative);
            let _ = writeln!(out, "{} close", self.names[*volume as usize]);
        }
    }
}

/// MSR Cambridge CSV. Volume `HOST_DISK` (a decimal disk number after the
/// last underscore) splits into its two fields; any other name `NAME` is
/// written as host `NAME`, disk `0`, which reads back as `NAME_0`. Requests
/// without a response time get 0.
#[derive(Default)]
struct Msr {
    /// `HOST,DISK` per volume id, once seen.
    host_disks: Vec<Option<String>>,
}

impl LineEncoder for Msr {
    const FORMAT: Format = Format::Msr;

    fn encode(
        &mut self,
        request: &Request,
        volumes: &VolumeTable,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), String> {
        let index = request.volume as usize;
        if self.host_disks.get(index).is_none_or(Option::is_none) {
            let name = volume_name(volumes, request.volume)?;
            if name.is_empty()
                || name
                    .bytes()
                    .any(|byte| byte == b',' || byte == b'\n' || byte == b'\r')
            {
                return Err(format!("volume name {name:?} cannot be an MSR hostname (empty, or has a comma or line break)"));
            }
            let host_disk = match name.rsplit_once('_') {
                Some((host, disk))
                    if !host.is_empty()
                        && !disk.is_empty()
                        && disk.bytes().all(|byte| byte.is_ascii_digit()) =>
                {
                    format!("{host},{disk}")
                }
                _ => format!("{name},0"),
            };
            if self.host_disks.len() <= index {
                self.host_disks.resize(index + 1, None);
            }
            self.host_disks[index] = Some(host_disk);
        }
        let host_disk = self.host_disks[index].as_deref().unwrap_or_default();
        let ticks = request.time_ns / NS_PER_TICK + FILETIME_UNIX_EPOCH_TICKS;
        let response_ticks = request.response_ns.unwrap_or(0) / NS_PER_TICK;
        let op = match request.op {
            Op::Read => "Read",
            Op::Write => "Write",
        };
        let _ = writeln!(
            out,
            "{ticks},{host_disk},{op},{},{},{response_ticks}",
            request.offset_bytes, request.length_bytes
        );
        Ok(())
    }
}

/// DiskSim ASCII: `time(ns) device lba(sectors) size(sectors) type(1=read)`.
#[derive(Default)]
struct DiskSim {
    devices: DeviceNumbers,
}

impl LineEncoder for DiskSim {
    const FORMAT: Format = Format::DiskSim;

    fn encode(
        &mut self,
        request: &Request,
        volumes: &VolumeTable,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), String> {
        let (lba, count) = sectors(request, true)?;
        let device = self.devices.number(volumes, request.volume)?;
        let kind = match request.op {
            Op::Read => 1,
            Op::Write => 0,
        };
        let _ = writeln!(out, "{} {device} {lba} {count} {kind}", request.time_ns);
        Ok(())
    }
}

/// UMass/SPC: `ASU,LBA(sectors),size(bytes),opcode(r|w),timestamp(s)`. The
/// time has 6 decimals (as in the published files) unless it has
/// sub-microsecond digits, which get 9.
#[derive(Default)]
struct Spc {
    devices: DeviceNumbers,
}

impl LineEncoder for Spc {
    const FORMAT: Format = Format::Spc;

    fn encode(
        &mut self,
        request: &Request,
        volumes: &VolumeTable,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), String> {
        let (lba, _) = sectors(request, false)?;
        let asu = self.devices.number(volumes, request.volume)?;
        let opcode = match request.op {
            Op::Read => 'r',
            Op::Write => 'w',
        };
        let seconds = request.time_ns / 1_000_000_000;
        let fraction_ns = request.time_ns % 1_000_000_000;
        let (fraction_us, sub_us_ns) = (fraction_ns / 1000, fraction_ns % 1000);
        let _ = write!(
            out,
            "{asu},{lba},{},{opcode},{seconds}.",
            request.length_bytes
        );
        if sub_us_ns == 0 {
            let _ = writeln!(out, "{fraction_us:06}");
        } else {
            let _ = writeln!(out, "{fraction_ns:09}");
        }
        Ok(())
    }
}

/// CloudPhysics CSV: header `version,time,op,size,lbn`, time in whole
/// microseconds, op `28` (READ(10)) or `2a` (WRITE(10)), size in bytes, lbn
/// in sectors. It holds one volume: a second volume is an error (pick one
/// with `--volume`).
#[derive(Default)]
struct CloudPhysics {
    volume: Option<VolumeId>,
}

impl LineEncoder for CloudPhysics {
    const FORMAT: Format = Format::CloudPhysicsCsv;

    fn header(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"version,time,op,size,lbn\n");
    }

    fn encode(
        &mut self,
        request: &Request,
        volumes: &VolumeTable,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), String> {
        let (lbn, _) = sectors(request, false)?;
        let volume = *self.volume.get_or_insert(request.volume);
        if volume != request.volume {
            return Err(format!(
                "cloudphysics-csv holds one volume, but the trace has {:?} and {:?}; pick one with --volume",
                volumes.name(volume).unwrap_or("?"),
                volumes.name(request.volume).unwrap_or("?")
            ));
        }
        let op = match request.op {
            Op::Read => "28",
            Op::Write => "2a",
        };
        let _ = writeln!(
            out,
            "1,{},{op},{},{lbn}",
            request.time_ns / 1000,
            request.length_bytes
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(
        time_ns: u64,
        volume: VolumeId,
        op: Op,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Request {
        Request {
            time_ns,
            volume,
            op,
            offset_bytes,
            length_bytes,
            response_ns: Some(261_700),
        }
    }

    fn write_text(
        format: Format,
        options: &WriteOptions,
        volume_names: &[&str],
        requests: &[Request],
    ) -> Result<String> {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("out.txt");
        let mut volumes = VolumeTable::new();
        for name in volume_names {
            volumes.intern(name);
        }
        let mut writer = create_writer(&path, format, options)?;
        for request in requests {
            writer.write_request(request, &volumes)?;
        }
        assert_eq!(writer.finish()?, requests.len() as u64);
        Ok(std::fs::read_to_string(&path).unwrap())
    }

    #[test]
    fn msr_lines_match_the_published_layout() {
        // The first line of hm_0-cut-20k.csv, back from nanoseconds.
        let time_ns = (128_166_385_295_514_878 - FILETIME_UNIX_EPOCH_TICKS) * NS_PER_TICK;
        let text = write_text(
            Format::Msr,
            &WriteOptions::default(),
            &["hm_0", "solo", "a_b_12"],
            &[
                request(time_ns, 0, Op::Write, 11_855_351_808, 512),
                request(time_ns + 99, 1, Op::Read, 7, 3),
                request(time_ns + 100, 2, Op::Read, 7, 3),
            ],
        )
        .unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "128166385295514878,hm,0,Write,11855351808,512,2617"
        );
        assert_eq!(lines[1], "128166385295514878,solo,0,Read,7,3,2617");
        assert_eq!(lines[2], "128166385295514879,a_b,12,Read,7,3,2617");
    }

    #[test]
    fn fio_iolog_v2_and_v3() {
        let requests = [
            request(5_000_000, 0, Op::Read, 4096, 8192),
            request(7_500_000, 1, Op::Write, 0, 512),
            request(9_000_999, 0, Op::Write, 512, 512),
        ];
        let v2 = write_text(
            Format::FioIolog,
            &WriteOptions::default(),
            &["/dev/sdb", "img"],
            &requests,
        )
        .unwrap();
        assert_eq!(
            v2,
            "fio version 2 iolog\n/dev/sdb add\n/dev/sdb open\n/dev/sdb read 4096 8192\n\
             img add\nimg open\nimg write 0 512\n/dev/sdb write 512 512\n/dev/sdb close\nimg close\n"
        );
        let v3 = write_text(
            Format::FioIolog,
            &WriteOptions {
                fio_iolog_version: 3,
            },
            &["/dev/sdb", "img"],
            &requests,
        )
        .unwrap();
        assert_eq!(
            v3,
            "fio version 3 iolog\n0 /dev/sdb add\n0 /dev/sdb open\n0 /dev/sdb read 4096 8192\n\
             2500 img add\n2500 img open\n2500 img write 0 512\n4000 /dev/sdb write 512 512\n\
             4000 /dev/sdb close\n4000 img close\n"
        );
        let error = write_text(
            Format::FioIolog,
            &WriteOptions::default(),
            &["has space"],
            &requests[..1],
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("request 1") && error.contains("has space"),
            "{error}"
        );
        let backwards = [requests[1], requests[0]];
        let error = write_text(
            Format::FioIolog,
            &WriteOptions {
                fio_iolog_version: 3,
            },
            &["a", "b"],
            &backwards,
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("request 2") && error.contains("before the first"),
            "{error}"
        );
    }

    #[test]
    fn sector_formats_need_aligned_requests() {
        let good = request(1_500_000_123, 0, Op::Read, 1024, 4096);
        let disksim =
            write_text(Format::DiskSim, &WriteOptions::default(), &["7"], &[good]).unwrap();
        assert_eq!(disksim, "1500000123 7 2 8 1\n");
        let spc = write_text(Format::Spc, &WriteOptions::default(), &["named"], &[good]).unwrap();
        assert_eq!(spc, "0,2,4096,r,1.500000123\n");
        let whole_us = request(2_000_001_000, 0, Op::Write, 512, 100);
        let spc = write_text(Format::Spc, &WriteOptions::default(), &["3"], &[whole_us]).unwrap();
        assert_eq!(spc, "3,1,100,w,2.000001\n");
        let cloud = write_text(
            Format::CloudPhysicsCsv,
            &WriteOptions::default(),
            &["0"],
            &[good],
        )
        .unwrap();
        assert_eq!(cloud, "version,time,op,size,lbn\n1,1500000,28,4096,2\n");

        let misaligned = request(0, 0, Op::Read, 1000, 512);
        for format in [Format::DiskSim, Format::Spc, Format::CloudPhysicsCsv] {
            let error = write_text(
                format,
                &WriteOptions::default(),
                &["0"],
                &[good, misaligned],
            )
            .unwrap_err()
            .to_string();
            assert!(
                error.contains("request 2") && error.contains("offset 1000"),
                "{format}: {error}"
            );
        }
        let short = request(0, 0, Op::Read, 512, 100);
        let error = write_text(Format::DiskSim, &WriteOptions::default(), &["0"], &[short])
            .unwrap_err()
            .to_string();
        assert!(error.contains("length 100"), "{error}");
        let second_volume = request(0, 1, Op::Read, 512, 512);
        let error = write_text(
            Format::CloudPhysicsCsv,
            &WriteOptions::default(),
            &["a", "b"],
            &[good, second_volume],
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("one volume") && error.contains("--volume"),
            "{error}"
        );
    }

    #[test]
    fn unwritable_formats_list_the_writable_ones() {
        let error = write_text(Format::Vscsi, &WriteOptions::default(), &[], &[])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("does not write") && error.contains("fio-iolog, msr"),
            "{error}"
        );
        let error = write_text(
            Format::FioIolog,
            &WriteOptions {
                fio_iolog_version: 4,
            },
            &[],
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("version 4"), "{error}");
    }
}
