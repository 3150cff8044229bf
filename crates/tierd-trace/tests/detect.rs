//! Format detection on every shared trace, on small fixtures of the formats
//! without a shared sample, on compressed copies, and on garbage.

use std::io::Write;
use std::path::{Path, PathBuf};

use tierd_common::rng::{Rng, SeededRng};
use tierd_trace::detect::detect;
use tierd_trace::input::{open_input, peek};
use tierd_trace::open::DETECT_BYTES;
use tierd_trace::{open_trace, Format, OpenOptions, TraceError};

/// Detects `path` the way `open_trace` does: decompress, take the head, ask.
fn detect_file(path: &Path) -> Result<Format, TraceError> {
    let input = open_input(path)?;
    let (head, _input) = peek(input, DETECT_BYTES)?;
    detect(&head, path)
}

/// Every file of `../shared/traces` (SOURCES.md aside) and its format.
const SHARED_TRACES: [(&str, Format); 12] = [
    ("msr_cambridge/hm_0-cut-20k.csv", Format::Msr),
    ("msr_cambridge/msr-cambridge1-sample.csv", Format::Msr),
    ("cloudphysics/trace.csv", Format::CloudPhysicsCsv),
    ("cloudphysics/cloudPhysicsIO.vscsi", Format::Vscsi),
    ("cloudphysics/w106.trace.xz", Format::LirsBlocks),
    ("umass_spc/web1.trace", Format::FlashSim),
    ("umass_spc/fin1.trace", Format::FlashSim),
    ("umass_spc/example.ascii", Format::DiskSim),
    ("tpcc/tpcc-small.trace", Format::DiskSim),
    ("arc_ibm/OLTP.lis.zst", Format::ArcLis),
    ("arc_ibm/P3.lis.zst", Format::ArcLis),
    ("blktrace_misc/blktrace.txt", Format::Blkparse),
];

#[test]
fn every_shared_trace_detects_as_its_format() {
    let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR")) else {
        return;
    };
    let mut failures = Vec::new();
    for (file, expected) in SHARED_TRACES {
        match detect_file(&traces.join(file)) {
            Ok(found) if found == expected => {}
            Ok(found) => failures.push(format!("{file}: detected as {found}, expected {expected}")),
            Err(error) => failures.push(format!("{file}: expected {expected}, got error: {error}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_shared_trace_list_is_complete() {
    let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR")) else {
        return;
    };
    let mut on_disk = Vec::new();
    for directory in std::fs::read_dir(&traces).unwrap() {
        let directory = directory.unwrap().path();
        if directory.is_dir() {
            for file in std::fs::read_dir(&directory).unwrap() {
                let file = file.unwrap().path();
                on_disk.push(
                    file.strip_prefix(&traces)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    on_disk.sort();
    let mut listed: Vec<String> = SHARED_TRACES
        .iter()
        .map(|(file, _)| file.to_string())
        .collect();
    listed.sort();
    assert_eq!(
        on_disk, listed,
        "a new shared trace needs its expected format here"
    );
}

/// Small fixtures for the formats without a shared sample (and two more).
/// The SPC rows are the first rows of Financial1; the others follow each
/// format's published layout.
const FIXTURES: [(&str, Format, &str); 7] = [
    (
        "financial.spc",
        Format::Spc,
        "0,303567,3584,w,0.000000\n1,55590,3072,w,0.000000\n0,303574,3584,w,0.026214\n\
         1,240840,3072,w,0.026214\n1,55596,3072,r,0.078643\n",
    ),
    (
        "tencent.csv",
        Format::Tencent,
        "1538323199,105352008,8,1,1283\n1538323199,105352016,8,1,1283\n1538323200,20971520,64,0,1045\n\
         1538323198,7340032,16,0,1283\n",
    ),
    (
        "lun.csv",
        Format::Systor17,
        "Timestamp,Response,IOType,LUN,Offset,Size\n1487198985.038926,0.000279,W,1,2214060032,4096\n\
         1487198985.039153,0.000122,R,0,1392541696,8192\n1487198985.039001,,R,0,1392549888,4096\n",
    ),
    (
        "homes.blkparse",
        Format::Fiu,
        "89967404265337 4600 nfsd 1049400 8 W 6 0 6f3a33e0ca4ee2a1bd4c1a9d9d0e5a6d\n\
         89967404301556 4600 nfsd 1049408 8 W 6 0 0ae8d2a2fc07bc77bd8b4e1e2be2a0f0\n\
         89967412480000 5321 syslogd 37410 8 R 6 0 a3f10d7c06a5bc1ad1a3cb0f1b5e8d22\n",
    ),
    (
        "job.v2.iolog",
        Format::FioIolog,
        "fio version 2 iolog\n/dev/sdb add\n/dev/sdb open\n/dev/sdb read 0 4096\n/dev/sdb write 4096 4096\n\
         /dev/sdb close\n",
    ),
    (
        "job.v3.iolog",
        Format::FioIolog,
        "fio version 3 iolog\n0 /dev/sdb add\n2 /dev/sdb open\n57 /dev/sdb write 0 4096\n\
         130 /dev/sdb read 8192 4096\n131 /dev/sdb close\n",
    ),
    (
        "capture.txt",
        Format::Blkparse,
        "Input file sdb.blktrace.0 added\n\
         \x20 8,16   5        1     0.000000000 18615  A   R 1444645666 + 256 <- (8,17) 1444645632\n\
         \x20 8,16   5        2     0.000001850 18615  Q   R 1444645666 + 256 [java]\n\
         \x20 8,16   5        0     0.000012990     0  m   N cfq18615S / insert_request\n\
         \x20 8,16   5        6     0.000031865 18615  D   R 1444645666 + 256 [java]\n\
         \x20 8,16   5       15     0.000356669     0  C   R 1444645666 + 256 [0]\n\
         \n\
         CPU5 (8,16):\n\
         \x20Reads Queued:           1,      128KiB\t Writes Queued:           0,        0KiB\n\
         \n\
         Throughput (R/W): 359KiB/s / 0KiB/s\n\
         Events (8,16): 5 entries\n",
    ),
];

/// Writes `contents` as `name`, and compressed copies `name.gz` and
/// `name.zst`, into `directory`; returns the three paths.
fn write_variants(directory: &Path, name: &str, contents: &[u8]) -> [PathBuf; 3] {
    let plain = directory.join(name);
    std::fs::write(&plain, contents).unwrap();
    let gzip = directory.join(format!("{name}.gz"));
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(contents).unwrap();
    std::fs::write(&gzip, encoder.finish().unwrap()).unwrap();
    let zstd = directory.join(format!("{name}.zst"));
    std::fs::write(&zstd, zstd::encode_all(contents, 3).unwrap()).unwrap();
    [plain, gzip, zstd]
}

#[test]
fn fixtures_detect_as_their_format_plain_and_compressed() {
    let directory = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (name, expected, contents) in FIXTURES {
        for path in write_variants(directory.path(), name, contents.as_bytes()) {
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            match detect_file(&path) {
                Ok(found) if found == expected => {}
                Ok(found) => {
                    failures.push(format!("{file}: detected as {found}, expected {expected}"))
                }
                Err(error) => {
                    failures.push(format!("{file}: expected {expected}, got error: {error}"))
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Detection and decompression together, through `open_trace`.
#[test]
fn compressed_fixtures_read_through_open_trace() {
    let directory = tempfile::tempdir().unwrap();
    let expectations = [
        ("job.v3.iolog", 2usize, 57_000u64),
        ("capture.txt", 1, 1_850),
    ];
    for (name, requests_expected, first_time_ns) in expectations {
        let (_, format, contents) = FIXTURES
            .iter()
            .find(|(fixture, _, _)| *fixture == name)
            .unwrap();
        for path in write_variants(directory.path(), name, contents.as_bytes()) {
            let mut reader = open_trace(&path, &OpenOptions::default()).unwrap();
            assert_eq!(reader.format(), *format, "{}", path.display());
            let mut times = Vec::new();
            while let Some(request) = reader.next_request().unwrap() {
                times.push(request.time_ns);
            }
            assert_eq!(times.len(), requests_expected, "{}", path.display());
            assert_eq!(times[0], first_time_ns, "{}", path.display());
        }
    }
}

#[test]
fn a_compressed_copy_of_a_shared_trace_detects_too() {
    let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR")) else {
        return;
    };
    let directory = tempfile::tempdir().unwrap();
    for (file, expected) in [
        ("blktrace_misc/blktrace.txt", Format::Blkparse),
        ("cloudphysics/cloudPhysicsIO.vscsi", Format::Vscsi),
    ] {
        let contents = std::fs::read(traces.join(file)).unwrap();
        let name = Path::new(file)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for path in write_variants(directory.path(), &name, &contents) {
            assert_eq!(detect_file(&path).unwrap(), expected, "{}", path.display());
        }
    }
}

/// Asserts that `error` is UnknownFormat for `path` and lists every format
/// with a reason; returns the `tried` text.
fn assert_lists_every_format(error: TraceError, path: &Path) -> String {
    let message = error.to_string();
    let TraceError::UnknownFormat {
        path: error_path,
        tried,
        known,
    } = error
    else {
        panic!("expected UnknownFormat, got: {message}");
    };
    assert_eq!(error_path, path);
    assert_eq!(known, Format::names());
    for format in Format::ALL {
        assert!(
            tried.contains(&format!("{format} (")),
            "{format} is missing from the tried list: {tried}"
        );
    }
    assert!(message.contains(&path.display().to_string()), "{message}");
    tried
}

#[test]
fn random_garbage_is_an_unknown_format_listing_every_reason() {
    let directory = tempfile::tempdir().unwrap();
    let mut rng = SeededRng::new(0x7e57_de7e);
    // 4,099 bytes: not a whole number of u32, so not even lirs-blocks.
    let garbage: Vec<u8> = (0..4_099).map(|_| rng.next_u64() as u8).collect();
    let path = directory.path().join("garbage.bin");
    std::fs::write(&path, &garbage).unwrap();
    let tried = assert_lists_every_format(detect_file(&path).unwrap_err(), &path);
    assert!(tried.contains("lirs-blocks (4099 bytes"), "{tried}");

    // 48 bytes of ASCII: whole words, so only the text guard keeps it from
    // being taken for lirs-blocks.
    let text = b"Dear diary,\ntoday I traced a disk.\nIt was fun!!\n";
    assert_eq!(text.len() % 4, 0);
    let path = directory.path().join("diary.txt");
    std::fs::write(&path, text).unwrap();
    let tried = assert_lists_every_format(detect_file(&path).unwrap_err(), &path);
    assert!(tried.contains("msr (line 1: "), "{tried}");
    assert!(tried.contains("--format lirs-blocks"), "{tried}");

    let path = directory.path().join("empty");
    std::fs::write(&path, b"").unwrap();
    assert_lists_every_format(detect_file(&path).unwrap_err(), &path);

    // open_trace reports the same error.
    let error = open_trace(&path, &OpenOptions::default()).err().unwrap();
    assert!(matches!(error, TraceError::UnknownFormat { .. }), "{error}");
}

#[test]
fn binary_whole_words_are_taken_for_lirs_blocks() {
    // The documented weakness: a headerless u32 array has no signature, so
    // any binary sample of whole words that no other format claims is one.
    let mut rng = SeededRng::new(11);
    let words: Vec<u8> = (0..1_024u32)
        .flat_map(|_| (rng.below(1 << 20) as u32).to_le_bytes())
        .collect();
    assert_eq!(
        detect(&words, Path::new("blocks.bin")).unwrap(),
        Format::LirsBlocks
    );
}

/// The detection order must not be what keeps formats apart: on every sample
/// exactly one format's sniff accepts, except that lirs-blocks (tried last)
/// also accepts binary samples of other formats.
#[test]
fn each_sample_is_claimed_by_one_format_only() {
    let mut samples: Vec<(String, Format, Vec<u8>)> = FIXTURES
        .iter()
        .map(|(name, format, contents)| (name.to_string(), *format, contents.as_bytes().to_vec()))
        .collect();
    if let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR")) {
        for (file, format) in SHARED_TRACES {
            let input = open_input(&traces.join(file)).unwrap();
            let (head, _input) = peek(input, DETECT_BYTES).unwrap();
            samples.push((file.to_string(), format, head));
        }
    }
    let mut failures = Vec::new();
    for (name, expected, head) in samples {
        let claims: Vec<Format> = tierd_trace::detect::DETECTION_ORDER
            .iter()
            .filter(|(format, sniff)| *format != Format::LirsBlocks && sniff(&head).is_ok())
            .map(|(format, _)| *format)
            .collect();
        let expected_claims: Vec<Format> = if expected == Format::LirsBlocks {
            vec![]
        } else {
            vec![expected]
        };
        if claims != expected_claims {
            failures.push(format!(
                "{name}: claimed by {claims:?}, expected {expected_claims:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
