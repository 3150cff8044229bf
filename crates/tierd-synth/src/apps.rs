//! Application start-up traces (`app-firefox`, `app-calc`), shaped like
//! paper 003's Fig. 4 and Fig. 5: the reads an application makes as it
//! starts on a 120 GB disk, clustered around 30, 50, 80 and 100 GB, with a
//! shared-library cluster (30 GB: fonts, the shell, common libraries) far
//! from the application's own files.
//!
//! **Synthetic**, not the paper's trace (it published only the figures):
//! where the clusters lie and which is the application's own come from the
//! paper's text (§4.1, §4.2); how many reads each takes and their sizes are
//! chosen so that the no-replica start costs about what the paper's Tables
//! 2-3 report on a disk of that class (about 300 and 550 random reads).
//!
//! The stream: two *system* sessions first (as at login: a desktop session
//! reads its own files near 10 GB and the shared cluster), then the
//! application's start repeated [`STARTS`] times, each the same sequence of
//! reads with a few varied, 20 s apart, with a system session between
//! starts. Inside a start, reads are dependent (one at a time, each issued
//! after a think time of 40 ms plus an exponential 10 ms, longer than any
//! random read of the disk), so the disk serves them in order.

use tierd_common::rng::{Rng, SeededRng};
use tierd_common::units::NS_PER_SECOND;
use tierd_trace::{Op, Request};

use crate::presets::MODEL;
use crate::targets::Targets;
use crate::Preset;

const GIB: u64 = 1 << 30;
const KIB: u64 = 1 << 10;
/// The paper's disk: WD1200JB, 234,441,648 sectors.
pub const DISK_BYTES: u64 = 234_441_648 * 512;
/// Application starts in a trace.
pub const STARTS: u32 = 4;
const START_GAP_NS: u64 = 20 * NS_PER_SECOND;
const THINK_NS: u64 = 40_000_000;
const THINK_EXTRA_MEAN_NS: f64 = 10e6;
/// Share of a start's reads that differ from one start to the next.
const VARIED_SHARE: f64 = 0.03;

/// A region of files on the disk.
#[derive(Clone, Copy, Debug)]
struct Cluster {
    /// Where it lies, GiB from the start of the disk.
    at_gib: f64,
    width_bytes: u64,
    /// Reads a start makes there.
    reads: u32,
}

/// An application start: its clusters and where its description comes from.
#[derive(Clone, Copy, Debug)]
pub struct AppStart {
    pub name: &'static str,
    pub figure: &'static str,
    clusters: &'static [Cluster],
    /// Index of the shared-library cluster in `clusters`.
    shared: usize,
}

const FIREFOX: AppStart = AppStart {
    name: "app-firefox",
    figure: "paper 003 Fig. 4 and §4.2 (Firefox 1.5 start-up on a 120 GB disk)",
    clusters: &[
        // /etc/fonts, /bin/bash, common libraries: read by many programs.
        Cluster {
            at_gib: 30.0,
            width_bytes: 300 << 20,
            reads: 45,
        },
        Cluster {
            at_gib: 50.0,
            width_bytes: 400 << 20,
            reads: 110,
        },
        Cluster {
            at_gib: 80.0,
            width_bytes: 400 << 20,
            reads: 100,
        },
        // /usr/lib/firefox-1.5.0.12: the application's own files.
        Cluster {
            at_gib: 100.0,
            width_bytes: 200 << 20,
            reads: 50,
        },
    ],
    shared: 0,
};

const CALC: AppStart = AppStart {
    name: "app-calc",
    figure: "paper 003 Fig. 5 and §4.2 (OpenOffice.org 2.0 Calc start-up on a 120 GB disk)",
    clusters: &[
        Cluster {
            at_gib: 30.0,
            width_bytes: 300 << 20,
            reads: 90,
        },
        // /usr/lib/openoffice.org2.0.
        Cluster {
            at_gib: 50.0,
            width_bytes: 600 << 20,
            reads: 300,
        },
        // /root/.openoffice.org2.0: the user's settings.
        Cluster {
            at_gib: 100.0,
            width_bytes: 200 << 20,
            reads: 160,
        },
    ],
    shared: 0,
};

/// The system session's own cluster (near 10 GB) and its reads there and
/// in the shared cluster.
const SYSTEM_AT_GIB: f64 = 10.0;
const SYSTEM_OWN_READS: u32 = 80;
const SYSTEM_SHARED_READS: u32 = 40;

const APPS: [AppStart; 2] = [FIREFOX, CALC];

fn preset_of(app: &AppStart, description: &'static str) -> Preset {
    Preset {
        name: app.name,
        description,
        volume_name: app.name,
        volume_bytes: DISK_BYTES,
        default_hours: 0.1,
        window: "the whole trace: two system sessions, then four starts 20 s apart",
        source: app.figure,
        targets: Targets::NONE,
        model: crate::model::Model {
            window_hours: 0.1,
            recurrence_hours: 0.1,
            ..MODEL
        },
    }
}

static PRESETS: std::sync::OnceLock<[Preset; 2]> = std::sync::OnceLock::new();

/// The application-start presets.
pub fn all() -> &'static [Preset] {
    PRESETS.get_or_init(|| {
        [
            preset_of(
                &FIREFOX,
                "application start-up (Firefox) shaped like paper 003 Fig. 4: reads around 30, 50, 80 and 100 GB of a 120 GB disk, the shared-library cluster at 30 GB",
            ),
            preset_of(
                &CALC,
                "application start-up (OpenOffice Calc) shaped like paper 003 Fig. 5: reads around 30, 50 and 100 GB of a 120 GB disk, the shared-library cluster at 30 GB",
            ),
        ]
    })
}

/// The application start called `name`, if it is one.
pub fn find(name: &str) -> Option<&'static AppStart> {
    APPS.iter().find(|app| app.name == name)
}

/// One file-like read target: reads of up to 128 KiB in a row.
fn file_reads(rng: &mut SeededRng, cluster: &Cluster, reads: u32, out: &mut Vec<(u64, u64)>) {
    let base = (cluster.at_gib * GIB as f64) as u64;
    let mut left = reads;
    while left > 0 {
        // A file: 1 to 6 reads of 4-128 KiB in a row.
        let count = (1 + rng.below(6) as u32).min(left);
        let mut offset = base + rng.below(cluster.width_bytes / (4 * KIB)) * 4 * KIB;
        for _ in 0..count {
            let length = 4 * KIB * (1 + rng.below(32));
            out.push((offset, length));
            offset += length;
        }
        left -= count;
    }
}

/// A run of reads in one cluster, in order: interleaves the clusters'
/// reads in runs, as a program reads a library, then its settings, ...
fn interleave(rng: &mut SeededRng, parts: Vec<Vec<(u64, u64)>>) -> Vec<(u64, u64)> {
    let mut queues: Vec<std::collections::VecDeque<(u64, u64)>> =
        parts.into_iter().map(Into::into).collect();
    let mut out = Vec::new();
    loop {
        let left: u64 = queues.iter().map(|queue| queue.len() as u64).sum();
        if left == 0 {
            return out;
        }
        // Pick a cluster with weight = reads left; take a run of 1-8.
        let mut pick = rng.below(left);
        let mut index = 0;
        for (position, queue) in queues.iter().enumerate() {
            if pick < queue.len() as u64 {
                index = position;
                break;
            }
            pick -= queue.len() as u64;
        }
        for _ in 0..1 + rng.below(8) {
            match queues[index].pop_front() {
                Some(read) => out.push(read),
                None => break,
            }
        }
    }
}

/// The whole trace of `app` for `seed`, cut at `end_ns`.
pub fn requests(app: &AppStart, seed: u64, end_ns: u64) -> Vec<Request> {
    let root = SeededRng::new(seed);
    let mut layout = root.derive(1);
    let mut timing = root.derive(2);
    let mut variation = root.derive(3);
    // The start's script and the system session's.
    let parts: Vec<Vec<(u64, u64)>> = app
        .clusters
        .iter()
        .map(|cluster| {
            let mut reads = Vec::new();
            file_reads(&mut layout, cluster, cluster.reads, &mut reads);
            reads
        })
        .collect();
    let shared_reads = parts[app.shared].clone();
    let start = interleave(&mut layout, parts);
    let system_cluster = Cluster {
        at_gib: SYSTEM_AT_GIB,
        width_bytes: 300 << 20,
        reads: SYSTEM_OWN_READS,
    };
    let mut own = Vec::new();
    file_reads(&mut layout, &system_cluster, SYSTEM_OWN_READS, &mut own);
    // The system session reads most of the same shared files.
    let shared_part: Vec<(u64, u64)> = shared_reads
        .iter()
        .copied()
        .take(SYSTEM_SHARED_READS as usize)
        .collect();
    let system = interleave(&mut layout, vec![own, shared_part]);

    let mut out = Vec::new();
    let mut now_ns = 0u64;
    let mut emit = |now_ns: &mut u64, reads: &[(u64, u64)], timing: &mut SeededRng| {
        for (offset, length) in reads {
            if *now_ns >= end_ns {
                return;
            }
            out.push(Request {
                time_ns: *now_ns,
                volume: 0,
                op: Op::Read,
                offset_bytes: *offset,
                length_bytes: *length,
                response_ns: None,
            });
            *now_ns += THINK_NS + timing.exponential(THINK_EXTRA_MEAN_NS) as u64;
        }
    };
    for _ in 0..2 {
        emit(&mut now_ns, &system, &mut timing);
        now_ns += START_GAP_NS / 2;
    }
    for index in 0..STARTS {
        // A few reads differ from start to start (a cache file, a lock).
        let varied: Vec<(u64, u64)> = start
            .iter()
            .map(|read| {
                if variation.chance(VARIED_SHARE) {
                    let cluster =
                        &app.clusters[variation.below(app.clusters.len() as u64) as usize];
                    let base = (cluster.at_gib * GIB as f64) as u64;
                    (
                        base + variation.below(cluster.width_bytes / (4 * KIB)) * 4 * KIB,
                        read.1,
                    )
                } else {
                    *read
                }
            })
            .collect();
        emit(&mut now_ns, &varied, &mut timing);
        now_ns += START_GAP_NS / 2;
        if index + 1 < STARTS {
            emit(&mut now_ns, &system, &mut timing);
            now_ns += START_GAP_NS / 2;
        }
    }
    out.retain(|request| request.end_bytes() <= DISK_BYTES);
    out
}
