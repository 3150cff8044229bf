//! Replicas in free HDD space (paper 003; `tierd_core::replica`): which
//! setting a run uses (`tierd sim --replicas off,one,many,contiguous`) and
//! what it reports. The engine drives the core in `engine/replicas.rs`.

use std::fmt::Write as _;

use serde::Serialize;
pub use tierd_core::replica::ReplicaConfig;

use crate::error::SimError;

/// One `--replicas` setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaSetting {
    /// No replicas (the run still reports `disk_access_ms`).
    Off,
    /// At most one copy per extent (FS2's rule).
    One,
    /// Up to `max_copies` per extent, each near a different access centre.
    Many,
    /// As `many`, and a recurring read sequence laid out contiguously in
    /// sequence order.
    Contiguous,
}

impl ReplicaSetting {
    pub const ALL: [ReplicaSetting; 4] = [
        ReplicaSetting::Off,
        ReplicaSetting::One,
        ReplicaSetting::Many,
        ReplicaSetting::Contiguous,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReplicaSetting::Off => "off",
            ReplicaSetting::One => "one",
            ReplicaSetting::Many => "many",
            ReplicaSetting::Contiguous => "contiguous",
        }
    }

    /// `off,one,many,contiguous` (any subset, in the order given).
    pub fn parse_list(text: &str) -> Result<Vec<ReplicaSetting>, SimError> {
        let mut settings = Vec::new();
        for name in text
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
        {
            let setting = ReplicaSetting::ALL
                .into_iter()
                .find(|setting| setting.name() == name)
                .ok_or_else(|| {
                    SimError::option(
                        "replicas",
                        format!("{name:?}: expected off, one, many or contiguous"),
                    )
                })?;
            if !settings.contains(&setting) {
                settings.push(setting);
            }
        }
        if settings.is_empty() {
            return Err(SimError::option(
                "replicas",
                "empty list; give off, one, many and/or contiguous",
            ));
        }
        Ok(settings)
    }

    /// The core's settings for this run from `base` (the defaults, or a
    /// stack's); `None` for `off`.
    pub fn config(self, base: &ReplicaConfig) -> Option<ReplicaConfig> {
        let mut config = base.clone();
        // The simulator has no allocation map from before the trace: an
        // extent the trace reads holds data.
        config.reads_allocate = true;
        match self {
            ReplicaSetting::Off => return None,
            ReplicaSetting::One => {
                config.max_copies = 1;
                config.contiguous_sequences = false;
            }
            ReplicaSetting::Many => {
                config.max_copies = config.max_copies.max(2);
                config.contiguous_sequences = false;
            }
            ReplicaSetting::Contiguous => {
                config.max_copies = config.max_copies.max(2);
                config.contiguous_sequences = true;
            }
        }
        Some(config)
    }
}

/// A run's replica settings: what `--replicas` asked for and the core's
/// settings (`None` for `off`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplicaRun {
    pub setting: ReplicaSetting,
    pub config: Option<ReplicaConfig>,
    /// Home must have been idle this long before a copy starts.
    pub idle_ns: u64,
}

/// Default idle time before copies start: longer than the gaps inside a
/// burst of reads, short against the pauses between bursts.
pub const DEFAULT_IDLE_NS: u64 = 100_000_000;

impl ReplicaRun {
    pub fn new(setting: ReplicaSetting, base: &ReplicaConfig) -> ReplicaRun {
        ReplicaRun {
            setting,
            config: setting.config(base),
            idle_ns: DEFAULT_IDLE_NS,
        }
    }
}

/// What replicas did in a run (`"replica"` in a run's JSON).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ReplicaResult {
    pub extent_bytes: u64,
    pub max_copies: u32,
    pub contiguous_sequences: bool,
    /// The manager's counters (`copy_bytes`: the copies' reads and writes
    /// on the HDD, in idle time, charged to the disk).
    #[serde(flatten)]
    pub stats: tierd_core::replica::ReplicaStats,
    pub copy_busy_ms: f64,
    /// At the end.
    pub replicated_extents: u64,
    pub current_copies: u64,
    pub replica_bytes: u64,
    /// The HDD's busy time for user reads in the last read session (reads
    /// separated by less than the session gap): for an application-start
    /// trace, the last start, after replicas were made.
    pub last_session_disk_access_ms: f64,
    /// User reads and their HDD busy time per session, in order.
    pub session_disk_access_ms: Vec<f64>,
}

/// The replica runs of a report as a table (empty when none has replicas).
pub fn render_text(runs: &[crate::RunResult]) -> String {
    let mut out = String::new();
    let rows: Vec<_> = runs
        .iter()
        .filter_map(|run| Some((run, run.replicas.as_ref()?, run.replica.as_ref()?)))
        .collect();
    if rows.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nReplicas in free HDD space (paper 003): disk access = the HDD's busy time for user reads"
    );
    let _ = writeln!(
        out,
        "{:<10} {:<10} {:>16} {:>18} {:>12} {:>10} {:>14}",
        "policy",
        "replicas",
        "disk access ms",
        "last session ms",
        "from copies",
        "copies",
        "copy busy ms"
    );
    for (run, setting, replica) in rows {
        let _ = writeln!(
            out,
            "{:<10} {:<10} {:>16.1} {:>18.1} {:>12} {:>10} {:>14.1}",
            run.policy,
            setting,
            run.disk_access_ms.unwrap_or(0.0),
            replica.last_session_disk_access_ms,
            replica.stats.reads_from_replicas,
            replica.stats.copies_made,
            replica.copy_busy_ms
        );
    }
    out
}
