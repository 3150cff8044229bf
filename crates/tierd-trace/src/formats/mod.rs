//! One module per trace format. Text formats implement
//! [`crate::text::LineFormat`]; binary formats implement
//! [`crate::reader::TraceReader`] directly. Each module has a `sniff` used by
//! detection and an `open` used by [`open`].

pub mod arc_lis;
pub mod blkparse;
pub mod cloudphysics;
pub mod disksim;
pub mod fio_iolog;
pub mod fiu;
pub mod flashsim;
pub mod lirs_blocks;
pub mod msr;
pub mod native;
pub mod spc;
pub mod systor17;
pub mod tencent;
pub mod vscsi;

use crate::error::Result;
use crate::format::Format;
use crate::input::Input;
use crate::open::OpenOptions;
use crate::reader::TraceReader;
use crate::text::TextReader;

/// The reader for `format` over an already opened (decompressed) input.
pub fn open(format: Format, input: Input, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    let skip = options.skip_bad_lines;
    Ok(match format {
        Format::Msr => Box::new(TextReader::new(input, msr::Msr::default(), skip)),
        Format::CloudPhysicsCsv => cloudphysics::open(input, options)?,
        Format::Vscsi => vscsi::open(input, options)?,
        Format::DiskSim => disksim::open(input, options)?,
        Format::FlashSim => flashsim::open(input, options)?,
        Format::Spc => spc::open(input, options)?,
        Format::Blkparse => blkparse::open(input, options)?,
        Format::ArcLis => arc_lis::open(input, options)?,
        Format::LirsBlocks => lirs_blocks::open(input, options)?,
        Format::Tencent => tencent::open(input, options)?,
        Format::Systor17 => systor17::open(input, options)?,
        Format::Fiu => fiu::open(input, options)?,
        Format::FioIolog => fio_iolog::open(input, options)?,
        Format::Tierd => native::open(input, options)?,
    })
}
