//! Writers against readers on the real shared traces: every trace converted
//! to the native format reads back identical; each text writer's output
//! reads back as the same requests to the precision of its format; the two
//! CloudPhysics encodings (vscsi binary and CSV) hold the same requests.
//!
//! Comparisons stream both sides in lockstep, so the 5.3 M-reference w106
//! trace needs no memory for the requests.

use std::path::{Path, PathBuf};

use tierd_trace::{
    create_writer, open_trace, Format, OpenOptions, Request, TraceReader, WriteOptions,
};

fn traces() -> Option<PathBuf> {
    tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR"))
}

/// Every shared trace with the format it is in.
const SHARED: [(&str, Format); 13] = [
    ("msr_cambridge/hm_0-cut-20k.csv", Format::Msr),
    ("msr_cambridge/msr-cambridge1-sample.csv", Format::Msr),
    ("cloudphysics/trace.csv", Format::CloudPhysicsCsv),
    ("cloudphysics/cloudPhysicsIO.vscsi", Format::Vscsi),
    ("cloudphysics/w106.trace.xz", Format::LirsBlocks),
    ("umass_spc/web1.trace", Format::FlashSim),
    ("umass_spc/example.ascii", Format::DiskSim),
    ("umass_spc/fin1.trace", Format::FlashSim),
    ("tpcc/tpcc-small.trace", Format::DiskSim),
    ("arc_ibm/OLTP.lis.zst", Format::ArcLis),
    ("arc_ibm/P3.lis.zst", Format::ArcLis),
    ("blktrace_misc/blktrace.txt", Format::Blkparse),
    // The same MSR file again, compressed on the way out (below).
    ("msr_cambridge/hm_0-cut-20k.csv", Format::Msr),
];

fn open(path: &Path, format: Format) -> Box<dyn TraceReader> {
    let options = OpenOptions {
        format: Some(format),
        ..OpenOptions::default()
    };
    open_trace(path, &options).unwrap_or_else(|error| panic!("{error}"))
}

/// Writes every request of `source` to `target` as `format`; returns the
/// count and the source's volume names.
fn convert(
    source: &Path,
    source_format: Format,
    target: &Path,
    format: Format,
    options: &WriteOptions,
) -> (u64, Vec<String>) {
    let mut reader = open(source, source_format);
    let mut writer = create_writer(target, format, options).unwrap();
    while let Some(request) = reader.next_request().unwrap() {
        writer
            .write_request(&request, reader.volumes())
            .unwrap_or_else(|error| panic!("{error}"));
    }
    let written = writer.finish().unwrap();
    (written, reader.volumes().names().to_vec())
}

/// Reads both streams in lockstep and asserts `expected(left) == right` for
/// every request and equal lengths; returns the count.
fn assert_same(
    mut left: Box<dyn TraceReader>,
    mut right: Box<dyn TraceReader>,
    expected: impl Fn(&Request) -> Request,
) -> u64 {
    let mut count = 0u64;
    loop {
        let (a, b) = (left.next_request().unwrap(), right.next_request().unwrap());
        match (a, b) {
            (None, None) => return count,
            (Some(a), Some(b)) => assert_eq!(
                expected(&a),
                b,
                "request {} of {} vs {}",
                count + 1,
                left.path().display(),
                right.path().display()
            ),
            (a, b) => panic!(
                "lengths differ after {count} requests: {} has {a:?}, {} has {b:?}",
                left.path().display(),
                right.path().display()
            ),
        }
        count += 1;
    }
}

/// The native format keeps a response above u32::MAX ns in whole
/// microseconds (docs/formats/tierd.md); everything else is exact.
fn native_precision(request: &Request) -> Request {
    let mut request = *request;
    if let Some(response_ns) = request.response_ns.filter(|ns| *ns > u64::from(u32::MAX)) {
        request.response_ns = Some(response_ns / 1000 * 1000);
    }
    request
}

#[test]
fn every_shared_trace_survives_the_native_format() {
    let Some(traces) = traces() else { return };
    let directory = tempfile::tempdir().unwrap();
    for (index, (name, format)) in SHARED.iter().enumerate() {
        let source = traces.join(name);
        // The last entry goes through an outer zstd, as a user who ran zstd
        // on a .tierd would have it.
        let extension = if index == SHARED.len() - 1 {
            "tierd.zst"
        } else {
            "tierd"
        };
        let target = directory.path().join(format!("{index}.{extension}"));
        let (written, names) = convert(
            &source,
            *format,
            &target,
            Format::Tierd,
            &WriteOptions::default(),
        );
        assert!(written > 0, "{name}: nothing written");
        let native = open_trace(&target, &OpenOptions::default()).unwrap();
        assert_eq!(
            native.format(),
            Format::Tierd,
            "{name}: detected as the native format"
        );
        let count = assert_same(open(&source, *format), native, native_precision);
        assert_eq!(count, written, "{name}");
        let mut native = open(&target, Format::Tierd);
        while native.next_request().unwrap().is_some() {}
        assert_eq!(native.volumes().names(), names, "{name}: volume names");
    }
}

#[test]
fn msr_writer_reproduces_msr_traces() {
    let Some(traces) = traces() else { return };
    let directory = tempfile::tempdir().unwrap();
    for name in ["hm_0-cut-20k.csv", "msr-cambridge1-sample.csv"] {
        let source = traces.join("msr_cambridge").join(name);
        let target = directory.path().join(name);
        let (written, names) = convert(
            &source,
            Format::Msr,
            &target,
            Format::Msr,
            &WriteOptions::default(),
        );
        let count = assert_same(
            open(&source, Format::Msr),
            open(&target, Format::Msr),
            |request| *request,
        );
        assert_eq!(count, written);
        assert_eq!(names, ["hm_0"]);
        // Same requests, and the very same text.
        assert_eq!(
            std::fs::read(&source).unwrap(),
            std::fs::read(&target).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn fio_iologs_keep_order_and_version_3_keeps_microseconds() {
    let Some(traces) = traces() else { return };
    let directory = tempfile::tempdir().unwrap();
    let source = traces.join("msr_cambridge/hm_0-cut-20k.csv");
    let first_time_ns = open(&source, Format::Msr)
        .next_request()
        .unwrap()
        .unwrap()
        .time_ns;
    for version in [2, 3] {
        let target = directory.path().join(format!("hm_0.v{version}.iolog"));
        let options = WriteOptions {
            fio_iolog_version: version,
        };
        let (written, _) = convert(&source, Format::Msr, &target, Format::FioIolog, &options);
        let iolog = open_trace(&target, &OpenOptions::default()).unwrap();
        assert_eq!(iolog.format(), Format::FioIolog);
        let count = assert_same(open(&source, Format::Msr), iolog, |request| Request {
            // v3 times count whole microseconds from the first request; v2 has none.
            time_ns: if version == 3 {
                (request.time_ns - first_time_ns) / 1000 * 1000
            } else {
                0
            },
            response_ns: None,
            ..*request
        });
        assert_eq!(count, written);
    }
}

#[test]
fn cloudphysics_vscsi_and_csv_hold_the_same_requests() {
    let Some(traces) = traces() else { return };
    let vscsi = open(
        &traces.join("cloudphysics/cloudPhysicsIO.vscsi"),
        Format::Vscsi,
    );
    let csv = open(
        &traces.join("cloudphysics/trace.csv"),
        Format::CloudPhysicsCsv,
    );
    assert_eq!(assert_same(vscsi, csv, |request| *request), 113_872);

    // And the CSV writer reproduces the CSV.
    let directory = tempfile::tempdir().unwrap();
    let source = traces.join("cloudphysics/trace.csv");
    let target = directory.path().join("trace.csv");
    convert(
        &source,
        Format::CloudPhysicsCsv,
        &target,
        Format::CloudPhysicsCsv,
        &WriteOptions::default(),
    );
    let count = assert_same(
        open(&source, Format::CloudPhysicsCsv),
        open_trace(&target, &OpenOptions::default()).unwrap(),
        |request| *request,
    );
    assert_eq!(count, 113_872);
}

#[test]
fn sector_format_writers_read_back() {
    let Some(traces) = traces() else { return };
    let directory = tempfile::tempdir().unwrap();
    for name in ["umass_spc/example.ascii", "tpcc/tpcc-small.trace"] {
        let source = traces.join(name);
        for format in [Format::DiskSim, Format::Spc] {
            let target = directory.path().join(format!("out.{format}"));
            let (written, _) = convert(
                &source,
                Format::DiskSim,
                &target,
                format,
                &WriteOptions::default(),
            );
            let reader = open_trace(&target, &OpenOptions::default()).unwrap();
            assert_eq!(reader.format(), format, "{name} as {format} is detected");
            let count = assert_same(open(&source, Format::DiskSim), reader, |request| *request);
            assert_eq!(count, written, "{name} as {format}");
        }
    }
    // MSR requests are byte-addressed but sector-aligned in these files, and
    // carry response times the sector formats drop.
    let source = traces.join("msr_cambridge/msr-cambridge1-sample.csv");
    let target = directory.path().join("msr.spc");
    convert(
        &source,
        Format::Msr,
        &target,
        Format::Spc,
        &WriteOptions::default(),
    );
    let count = assert_same(
        open(&source, Format::Msr),
        open(&target, Format::Spc),
        |request| Request {
            // An MSR volume name is not an ASU number: it becomes its id, 0.
            response_ns: None,
            ..*request
        },
    );
    assert_eq!(count, 1000);
}
