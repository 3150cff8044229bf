//! Opening a trace file: transparent decompression chosen by magic bytes (not by
//! extension), and a peek at the start of the uncompressed stream for format
//! detection.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::{Result, TraceError};

/// Read buffer size: large enough that a syscall per line never happens.
pub const READ_BUFFER_BYTES: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Bzip2,
    Xz,
    Zstd,
}

impl Compression {
    pub fn from_magic(magic: &[u8]) -> Compression {
        if magic.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if magic.starts_with(b"BZh") {
            Compression::Bzip2
        } else if magic.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
            Compression::Xz
        } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// Compression to apply when writing `path`, from its extension.
    pub fn from_extension(path: &Path) -> Compression {
        match path.extension().and_then(|extension| extension.to_str()) {
            Some("gz") => Compression::Gzip,
            Some("bz2") => Compression::Bzip2,
            Some("xz") => Compression::Xz,
            Some("zst") => Compression::Zstd,
            _ => Compression::None,
        }
    }
}

/// A byte stream that counts how many uncompressed bytes were consumed, so
/// binary readers can report the offset of a bad record.
pub struct Input {
    pub path: PathBuf,
    pub compression: Compression,
    pub reader: Box<dyn BufRead + Send>,
}

/// Opens `path`, undoing any gzip/bzip2/xz/zstd compression.
pub fn open_input(path: &Path) -> Result<Input> {
    let open_error = |source| TraceError::Open {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(open_error)?;
    let mut raw = BufReader::with_capacity(READ_BUFFER_BYTES, file);
    let magic = raw.fill_buf().map_err(open_error)?.to_vec();
    let compression = Compression::from_magic(&magic);
    let reader: Box<dyn BufRead + Send> = match compression {
        Compression::None => Box::new(raw),
        Compression::Gzip => Box::new(BufReader::with_capacity(
            READ_BUFFER_BYTES,
            flate2::bufread::MultiGzDecoder::new(raw),
        )),
        Compression::Bzip2 => Box::new(BufReader::with_capacity(
            READ_BUFFER_BYTES,
            bzip2::bufread::MultiBzDecoder::new(raw),
        )),
        Compression::Xz => Box::new(BufReader::with_capacity(
            READ_BUFFER_BYTES,
            liblzma::bufread::XzDecoder::new_multi_decoder(raw),
        )),
        Compression::Zstd => {
            let decoder = zstd::stream::read::Decoder::with_buffer(raw).map_err(open_error)?;
            Box::new(BufReader::with_capacity(READ_BUFFER_BYTES, decoder))
        }
    };
    Ok(Input {
        path: path.to_path_buf(),
        compression,
        reader,
    })
}

/// Reads up to `limit` bytes from the start of the uncompressed stream without
/// losing them: returns the bytes and a reader that yields them again followed
/// by the rest.
pub fn peek(input: Input, limit: usize) -> Result<(Vec<u8>, Input)> {
    let Input {
        path,
        compression,
        mut reader,
    } = input;
    let mut head = Vec::with_capacity(limit.min(1 << 16));
    (&mut reader)
        .take(limit as u64)
        .read_to_end(&mut head)
        .map_err(|source| TraceError::Read {
            path: path.clone(),
            offset: 0,
            source,
        })?;
    let chained = BufReader::with_capacity(
        READ_BUFFER_BYTES,
        io::Cursor::new(head.clone()).chain(reader),
    );
    Ok((
        head,
        Input {
            path,
            compression,
            reader: Box::new(chained),
        },
    ))
}

/// An output file, compressed as its extension asks. Call [`Output::finish`]:
/// dropping it without finishing may leave a truncated compressed stream, and
/// finish is where a full disk is reported.
pub struct Output {
    path: PathBuf,
    sink: Sink,
}

enum Sink {
    Plain(io::BufWriter<File>),
    Gzip(flate2::write::GzEncoder<io::BufWriter<File>>),
    Bzip2(bzip2::write::BzEncoder<io::BufWriter<File>>),
    Xz(liblzma::write::XzEncoder<io::BufWriter<File>>),
    Zstd(zstd::stream::write::Encoder<'static, io::BufWriter<File>>),
}

impl Output {
    pub fn create(path: &Path) -> Result<Output> {
        let file = File::create(path).map_err(|source| TraceError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let buffered = io::BufWriter::with_capacity(READ_BUFFER_BYTES, file);
        let sink = match Compression::from_extension(path) {
            Compression::None => Sink::Plain(buffered),
            Compression::Gzip => Sink::Gzip(flate2::write::GzEncoder::new(
                buffered,
                flate2::Compression::default(),
            )),
            Compression::Bzip2 => Sink::Bzip2(bzip2::write::BzEncoder::new(
                buffered,
                bzip2::Compression::default(),
            )),
            Compression::Xz => Sink::Xz(liblzma::write::XzEncoder::new(buffered, 6)),
            Compression::Zstd => Sink::Zstd(
                zstd::stream::write::Encoder::new(buffered, 3).map_err(|source| {
                    TraceError::Write {
                        path: path.to_path_buf(),
                        source,
                    }
                })?,
            ),
        };
        Ok(Output {
            path: path.to_path_buf(),
            sink,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Ends any compressed stream, flushes and syncs the file.
    pub fn finish(self) -> Result<()> {
        let path = self.path;
        let write_error = |source| TraceError::Write {
            path: path.clone(),
            source,
        };
        let buffered = match self.sink {
            Sink::Plain(buffered) => buffered,
            Sink::Gzip(encoder) => encoder.finish().map_err(write_error)?,
            Sink::Bzip2(encoder) => encoder.finish().map_err(write_error)?,
            Sink::Xz(encoder) => encoder.finish().map_err(write_error)?,
            Sink::Zstd(encoder) => encoder.finish().map_err(write_error)?,
        };
        let file = buffered
            .into_inner()
            .map_err(|error| write_error(error.into_error()))?;
        file.sync_all().map_err(write_error)
    }
}

impl io::Write for Output {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match &mut self.sink {
            Sink::Plain(writer) => writer.write(bytes),
            Sink::Gzip(writer) => writer.write(bytes),
            Sink::Bzip2(writer) => writer.write(bytes),
            Sink::Xz(writer) => writer.write(bytes),
            Sink::Zstd(writer) => writer.write(bytes),
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.sink {
            Sink::Plain(writer) => writer.write_all(bytes),
            Sink::Gzip(writer) => writer.write_all(bytes),
            Sink::Bzip2(writer) => writer.write_all(bytes),
            Sink::Xz(writer) => writer.write_all(bytes),
            Sink::Zstd(writer) => writer.write_all(bytes),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::Plain(writer) => writer.flush(),
            Sink::Gzip(writer) => writer.flush(),
            Sink::Bzip2(writer) => writer.flush(),
            Sink::Xz(writer) => writer.flush(),
            Sink::Zstd(writer) => writer.flush(),
        }
    }
}
