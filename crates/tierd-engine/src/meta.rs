//! Durable placement and policy state: a checksummed journal of placement
//! changes plus a periodic checkpoint, one pair per volume.
//!
//! Files in the volume's metadata directory:
//! - `checkpoint`: `TIERDCK1` magic, format version (u32 LE), generation
//!   (u64 LE), payload length (u64 LE), CRC-32 of the payload (u32 LE), then
//!   the payload (JSON [`Checkpoint`]). Written to `checkpoint.tmp`, fsynced,
//!   renamed over `checkpoint`, directory fsynced: a reader sees the old or
//!   the new one, never a mix.
//! - `journal`: `TIERDJN1` magic, version (u32), generation (u64), CRC of
//!   those 20 bytes (u32); then records `[payload length u32][CRC u32]
//!   [payload JSON]`, each appended and fsynced before the change it records
//!   takes effect. A journal belongs to the checkpoint of the same generation:
//!   a checkpoint of generation G+1 replaces journal G (recovery ignores an
//!   older journal left by a crash between the two steps).
//!
//! Recovery rules: a record cut short at the end of the file (a crash during
//! an append) is dropped and reported in [`Recovered::notes`]; a record whose
//! checksum fails and that is *followed by more bytes*, a bad header, a bad
//! checkpoint, or a journal newer than its checkpoint is corruption: opening
//! fails with the path and byte offset, and the server refuses to start
//! rather than guess.
//!
//! Fault injection: [`MetaFaults`] (from [`MetaStore::faults`], or
//! `Volume::meta_faults`) arms one fault for the next journal append — the
//! process dying part-way through it ([`AppendFault::Tear`]) or a full
//! metadata device ([`AppendFault::NoSpace`]) — and one for the next
//! checkpoint write ([`CheckpointFault`]: dying while writing
//! `checkpoint.tmp` or right after renaming it into place, or ENOSPC). It is
//! an ordinary, always compiled handle, used by the deterministic simulation
//! tests; nothing fires unless a caller arms it.

use parking_lot::Mutex;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tierd_policy::view::{PeriodStats, SegmentId, TierId};

const CHECKPOINT_MAGIC: &[u8; 8] = b"TIERDCK1";
const JOURNAL_MAGIC: &[u8; 8] = b"TIERDJN1";
const FORMAT_VERSION: u32 = 1;
const CHECKPOINT_HEADER_BYTES: usize = 8 + 4 + 8 + 8 + 4;
const JOURNAL_HEADER_BYTES: usize = 8 + 4 + 8 + 4;
/// Largest record or checkpoint payload accepted (a bad length is corruption,
/// not an allocation).
const MAX_RECORD_BYTES: u32 = 16 << 20;
const MAX_CHECKPOINT_BYTES: u64 = 1 << 30;

/// Where a segment lives (the shared placement table's type; journaled as
/// `{"tier": T, "slot": S}`).
pub use tierd_core::placement::Location;

/// One journal record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Record {
    /// `segment` now lives at `location` (its data there is durable).
    Place {
        segment: SegmentId,
        location: Location,
        /// How long the move took (start to journal append), so the mean
        /// move time survives a restart that replays this record. Absent in
        /// records written before it existed: such a move counts as a move
        /// but not in the mean.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        move_ns: Option<u64>,
    },
    /// An operator pinned `segment` to `tier` (`tierd pin`): no policy moves
    /// it, until `until_unix_ns` (wall time) when set. Replaces an earlier pin.
    Pin {
        segment: SegmentId,
        tier: TierId,
        #[serde(default)]
        until_unix_ns: Option<u64>,
    },
    /// The pin of `segment` ended (`tierd unpin`, or it expired).
    Unpin { segment: SegmentId },
    /// A cache volume's mapping changes of one commit, in order (the
    /// commit's data was flushed on home and the cache tier first).
    CacheMap { changes: Vec<CacheChange> },
    /// The operator switched a cache volume's mode (`tierd cache`); `mode`
    /// is `writeback`, `writethrough`, `writearound` or `detach`, and
    /// `config_mode` the configured mode at that time (a config that says
    /// otherwise later wins over the switch).
    CacheMode { mode: String, config_mode: String },
    /// A detach finished: every dirty block was written back; the cache's
    /// mappings are dropped and IO goes to home alone.
    CacheDetached,
    /// The cache tier was lost: its mappings are dropped, and `blocks`
    /// (dirty: their data existed only there) read as errors until they
    /// are overwritten whole.
    CacheLost { blocks: Vec<u64> },
    /// Lost cache blocks that writes covered whole (durable on home before
    /// this record): they read normally again.
    CacheRewritten { blocks: Vec<u64> },
}

/// One mapping change of a cache volume: `["m", block, slot]` (mapped) or
/// `["u", block, slot]` (unmapped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheChange(pub CacheChangeKind, pub u64, pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CacheChangeKind {
    #[serde(rename = "m")]
    Mapped,
    #[serde(rename = "u")]
    Unmapped,
}

/// A cache volume's mappings in a checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheCheckpoint {
    /// The cache tier's name, block size and slots when written: a restart
    /// with other values cannot reuse the mappings.
    pub tier: String,
    pub block_bytes: u64,
    pub slots: u32,
    /// The mode in force (`detach` while detaching) and the configured mode
    /// when the operator last switched it (see [`Record::CacheMode`]).
    pub mode: String,
    pub config_mode: String,
    /// The cache is detached: no mappings, IO goes to home alone.
    pub detached: bool,
    /// Written by a clean stop: the dirty bits are exact. Otherwise every
    /// mapped block counts as dirty at recovery.
    pub clean_shutdown: bool,
    /// `(block, slot, dirty)`.
    pub entries: Vec<(u64, u32, bool)>,
    /// Blocks whose only current copy was on a lost cache tier.
    #[serde(default)]
    pub lost_blocks: Vec<u64>,
}

/// An operator's pin: `segment` stays on `tier`; policies never move it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    pub segment: SegmentId,
    pub tier: TierId,
    /// Wall time (ns since the Unix epoch) after which the pin is dropped;
    /// `None`: until `tierd unpin`.
    #[serde(default)]
    pub until_unix_ns: Option<u64>,
}

/// The last plan a volume's policy made, for `tierd status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LastPlan {
    /// End of the period it planned from (engine clock of the process that
    /// ran it) ...
    pub period_end_ns: u64,
    /// ... and the same moment as wall time, ns since the Unix epoch.
    pub planned_unix_ns: u64,
    /// Moves the policy proposed.
    pub moves: usize,
    /// Of those, moves the engine queued (the rest were dropped: segment
    /// already moving or queued, pinned, or out of range).
    pub queued: usize,
    /// The policy's reason (`Plan::summary`).
    pub summary: String,
}

impl Record {
    /// Applies a `Pin` or `Unpin` record to the pins it changes (recovery
    /// and the offline status replay the journal the same way); other
    /// records change no pin.
    pub fn apply_to_pins(&self, pins: &mut std::collections::BTreeMap<SegmentId, Pin>) {
        match self {
            Record::Pin {
                segment,
                tier,
                until_unix_ns,
            } => {
                pins.insert(
                    *segment,
                    Pin {
                        segment: *segment,
                        tier: *tier,
                        until_unix_ns: *until_unix_ns,
                    },
                );
            }
            Record::Unpin { segment } => {
                pins.remove(segment);
            }
            Record::Place { .. }
            | Record::CacheMap { .. }
            | Record::CacheMode { .. }
            | Record::CacheDetached
            | Record::CacheLost { .. }
            | Record::CacheRewritten { .. } => {}
        }
    }
}

/// A move as `tierd status` lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MoveRecord {
    pub segment: SegmentId,
    pub from: String,
    pub to: String,
    pub rule: String,
    pub detail: String,
    /// Engine clock times.
    pub started_ns: u64,
    pub finished_ns: u64,
    pub bytes_copied: u64,
    /// `done`, `failed: ...`, `dropped: ...`.
    pub outcome: String,
}

/// Everything a restart needs to come back with the same placement and warm
/// policy state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub volume: String,
    pub size_bytes: u64,
    pub segment_bytes: u64,
    /// Tier names, fastest first (the configured stack when written).
    pub tiers: Vec<String>,
    /// Indexed by segment.
    pub placement: Vec<Location>,
    pub policy: String,
    pub policy_state: serde_json::Value,
    /// The monitor's completed periods (the heat a policy plans from).
    pub history: Vec<PeriodStats>,
    pub completed_moves: u64,
    pub mean_move_ns: Option<f64>,
    pub recent_moves: Vec<MoveRecord>,
    /// Of `completed_moves`, how many have a known time (`mean_move_ns` is
    /// their mean). Absent in older checkpoints: all of them.
    #[serde(default)]
    pub timed_moves: Option<u64>,
    /// Operator pins (absent in older checkpoints: none).
    #[serde(default)]
    pub pins: Vec<Pin>,
    /// The policy's last plan and its reason.
    #[serde(default)]
    pub last_plan: Option<LastPlan>,
    /// A cache volume's mappings (absent for other volumes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheCheckpoint>,
}

/// A metadata file that failed its checks.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("{path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("{path} at byte offset {offset}: {reason}. The server refuses to start on damaged metadata rather than guess the placement; restore the file from a backup, or move the metadata directory aside to start with every segment on its home tier (data written to faster tiers since would then be lost)")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
}

/// What recovery found.
#[derive(Debug, Default)]
pub struct Recovered {
    pub checkpoint: Option<Checkpoint>,
    /// Journal records after the checkpoint, in order.
    pub records: Vec<Record>,
    /// Things recovery noticed that need no attention, for the log.
    pub notes: Vec<String>,
    /// What recovery repaired on its own: a torn last journal record (a
    /// crash during its append) that was dropped, with where and how much.
    pub repaired: Vec<String>,
}

/// A fault for the next journal append (see [`MetaFaults`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum AppendFault {
    /// The process dies during the append: the first `after_bytes` bytes of
    /// the record (at most its length − 1) reach the file, then the append
    /// fails and the store is dead — every later append and checkpoint
    /// fails, as nothing more would be written by a dead process. The caller
    /// must treat the process as crashed (drop the volume and reopen).
    Tear { after_bytes: usize },
    /// The metadata device is full: the first `written_bytes` bytes of the
    /// record (at most its length − 1) reach the file, as a short write
    /// does when space runs out, then the append fails with ENOSPC. The
    /// store stays usable.
    NoSpace { written_bytes: usize },
}

/// A fault for the next checkpoint write (see [`MetaFaults`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum CheckpointFault {
    /// The process dies while writing `checkpoint.tmp`: its first
    /// `after_bytes` bytes reach the file, then the store is dead (as after
    /// [`AppendFault::Tear`]). The old checkpoint and journal stay in place.
    TearTemporary { after_bytes: usize },
    /// The process dies right after the new checkpoint was renamed into
    /// place and the directory synced, before the journal was reset: the
    /// directory holds a newer checkpoint than its journal.
    DieAfterRename,
    /// The metadata device is full: the first `written_bytes` bytes of the
    /// checkpoint reach `checkpoint.tmp`, then ENOSPC. Nothing is renamed,
    /// the journal goes on, the store stays usable.
    NoSpace { written_bytes: usize },
}

/// Deterministic fault injection for one [`MetaStore`]'s journal appends
/// and checkpoint writes. Clones share the same state. An armed fault fires
/// on the next [`MetaStore::append`] (or [`MetaStore::write_checkpoint`])
/// and is then disarmed; nothing fires unless armed.
#[derive(Clone, Debug, Default)]
pub struct MetaFaults {
    armed: Arc<Mutex<Option<AppendFault>>>,
    checkpoint: Arc<Mutex<Option<CheckpointFault>>>,
}

impl MetaFaults {
    /// Arms `fault` for the next append (replacing one already armed).
    pub fn arm(&self, fault: AppendFault) {
        *self.lock() = Some(fault);
    }

    /// Disarms and returns the armed fault, if any.
    pub fn disarm(&self) -> Option<AppendFault> {
        self.lock().take()
    }

    /// The fault waiting for the next append (`None` once it fired).
    pub fn armed(&self) -> Option<AppendFault> {
        *self.lock()
    }

    /// Arms `fault` for the next checkpoint write (replacing one armed).
    pub fn arm_checkpoint(&self, fault: CheckpointFault) {
        *self.lock_checkpoint() = Some(fault);
    }

    /// Disarms and returns the armed checkpoint fault, if any.
    pub fn disarm_checkpoint(&self) -> Option<CheckpointFault> {
        self.lock_checkpoint().take()
    }

    fn lock_checkpoint(&self) -> parking_lot::MutexGuard<'_, Option<CheckpointFault>> {
        self.checkpoint.lock()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Option<AppendFault>> {
        // An Option is valid whatever a panicking holder did.
        self.armed.lock()
    }
}

/// One volume's metadata directory.
#[derive(Debug)]
pub struct MetaStore {
    dir: PathBuf,
    generation: u64,
    journal: File,
    journal_bytes: u64,
    faults: MetaFaults,
    /// Set when an injected [`AppendFault::Tear`] "killed the process":
    /// every later write fails.
    dead: bool,
    /// A failed append left bytes that could not be cut off again: appends
    /// refuse until a checkpoint starts a fresh journal.
    stale_tail: bool,
}

fn io_error(path: &Path, what: &'static str, source: std::io::Error) -> MetaError {
    MetaError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}

fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> MetaError {
    MetaError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason: reason.into(),
    }
}

fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

fn sync_dir(dir: &Path) -> Result<(), MetaError> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(|error| io_error(dir, "syncing the metadata directory", error))
}

fn read_whole(path: &Path) -> Result<Option<Vec<u8>>, MetaError> {
    match File::open(path) {
        Ok(mut file) => {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)
                .map_err(|error| io_error(path, "reading", error))?;
            Ok(Some(bytes))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(io_error(path, "opening", error)),
    }
}

/// Decodes a checkpoint file's bytes (pure: used by recovery and fuzzing).
pub fn decode_checkpoint(path: &Path, bytes: &[u8]) -> Result<(u64, Checkpoint), MetaError> {
    if bytes.len() < CHECKPOINT_HEADER_BYTES {
        return Err(corrupt(
            path,
            0,
            format!(
                "checkpoint is {} bytes, shorter than its {CHECKPOINT_HEADER_BYTES}-byte header",
                bytes.len()
            ),
        ));
    }
    if &bytes[0..8] != CHECKPOINT_MAGIC {
        return Err(corrupt(path, 0, "not a tierd checkpoint (bad magic)"));
    }
    let version = read_u32(bytes, 8);
    if version != FORMAT_VERSION {
        return Err(corrupt(
            path,
            8,
            format!("checkpoint format version {version}, this tierd reads {FORMAT_VERSION}"),
        ));
    }
    let generation = read_u64(bytes, 12);
    let length = read_u64(bytes, 20);
    let expected_crc = read_u32(bytes, 28);
    let payload = &bytes[CHECKPOINT_HEADER_BYTES..];
    if length > MAX_CHECKPOINT_BYTES || length != payload.len() as u64 {
        return Err(corrupt(
            path,
            20,
            format!(
                "checkpoint says {length} payload bytes, file holds {}",
                payload.len()
            ),
        ));
    }
    if crc(payload) != expected_crc {
        return Err(corrupt(
            path,
            CHECKPOINT_HEADER_BYTES as u64,
            "checkpoint payload fails its CRC-32 checksum",
        ));
    }
    let checkpoint: Checkpoint = serde_json::from_slice(payload).map_err(|error| {
        corrupt(
            path,
            CHECKPOINT_HEADER_BYTES as u64,
            format!("checkpoint payload passes its checksum but does not decode: {error}"),
        )
    })?;
    Ok((generation, checkpoint))
}

/// Result of decoding a journal's bytes.
#[derive(Debug, Default)]
pub struct DecodedJournal {
    pub generation: u64,
    pub records: Vec<Record>,
    /// Bytes of valid records (header included): where appends continue.
    pub valid_bytes: u64,
    /// A torn final record was dropped.
    pub torn_tail: Option<String>,
}

/// Decodes a journal file's bytes (pure: used by recovery and fuzzing).
pub fn decode_journal(path: &Path, bytes: &[u8]) -> Result<DecodedJournal, MetaError> {
    if bytes.len() < JOURNAL_HEADER_BYTES {
        return Err(corrupt(
            path,
            0,
            format!(
                "journal is {} bytes, shorter than its {JOURNAL_HEADER_BYTES}-byte header",
                bytes.len()
            ),
        ));
    }
    if &bytes[0..8] != JOURNAL_MAGIC {
        return Err(corrupt(path, 0, "not a tierd journal (bad magic)"));
    }
    if crc(&bytes[0..20]) != read_u32(bytes, 20) {
        return Err(corrupt(path, 0, "journal header fails its CRC-32 checksum"));
    }
    let version = read_u32(bytes, 8);
    if version != FORMAT_VERSION {
        return Err(corrupt(
            path,
            8,
            format!("journal format version {version}, this tierd reads {FORMAT_VERSION}"),
        ));
    }
    let mut decoded = DecodedJournal {
        generation: read_u64(bytes, 12),
        ..DecodedJournal::default()
    };
    let mut at = JOURNAL_HEADER_BYTES;
    while at < bytes.len() {
        let remaining = bytes.len() - at;
        if remaining < 8 {
            decoded.torn_tail = Some(format!(
                "dropped a torn record header of {remaining} bytes at offset {at}"
            ));
            break;
        }
        let length = read_u32(bytes, at);
        let expected_crc = read_u32(bytes, at + 4);
        if length > MAX_RECORD_BYTES {
            // A length this large is never written: either garbage in the
            // middle (corruption) or a torn header at the very end.
            return Err(corrupt(
                path,
                at as u64,
                format!("journal record claims {length} bytes (at most {MAX_RECORD_BYTES})"),
            ));
        }
        let end = at + 8 + length as usize;
        if end > bytes.len() {
            decoded.torn_tail = Some(format!(
                "dropped a torn record at offset {at} ({} of {} bytes present)",
                bytes.len() - at - 8,
                length
            ));
            break;
        }
        let payload = &bytes[at + 8..end];
        if crc(payload) != expected_crc {
            if end == bytes.len() {
                decoded.torn_tail = Some(format!(
                    "dropped the last record at offset {at}: checksum fails (a crash during its append)"
                ));
                break;
            }
            return Err(corrupt(
                path,
                at as u64,
                "journal record fails its CRC-32 checksum and more records follow it",
            ));
        }
        let record: Record = serde_json::from_slice(payload).map_err(|error| {
            corrupt(
                path,
                at as u64,
                format!("journal record passes its checksum but does not decode: {error}"),
            )
        })?;
        decoded.records.push(record);
        at = end;
    }
    decoded.valid_bytes = at.min(bytes.len()) as u64;
    if decoded.torn_tail.is_some() {
        decoded.valid_bytes = (bytes.len() as u64).min(decoded.valid_bytes);
    }
    Ok(decoded)
}

fn encode_journal_header(generation: u64) -> Vec<u8> {
    let mut header = Vec::with_capacity(JOURNAL_HEADER_BYTES);
    header.extend_from_slice(JOURNAL_MAGIC);
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header.extend_from_slice(&generation.to_le_bytes());
    let header_crc = crc(&header);
    header.extend_from_slice(&header_crc.to_le_bytes());
    header
}

fn encode_record(record: &Record) -> Vec<u8> {
    let payload = serde_json::to_vec(record).expect("journal records always serialise");
    let mut bytes = Vec::with_capacity(payload.len() + 8);
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&crc(&payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    bytes
}

/// The placement the metadata in `dir` describes (checkpoint, then its
/// journal's records), read without changing anything; `None` when there is
/// no checkpoint. Used to say which segments a reset would give up.
pub fn peek_placement(dir: &Path) -> Result<Option<Vec<Location>>, MetaError> {
    let checkpoint_path = MetaStore::checkpoint_path(dir);
    let Some(bytes) = read_whole(&checkpoint_path)? else {
        return Ok(None);
    };
    let (generation, checkpoint) = decode_checkpoint(&checkpoint_path, &bytes)?;
    let mut placement = checkpoint.placement;
    let journal_path = MetaStore::journal_path(dir);
    if let Some(bytes) = read_whole(&journal_path)? {
        let decoded = decode_journal(&journal_path, &bytes)?;
        if decoded.generation == generation {
            for record in decoded.records {
                if let Record::Place {
                    segment, location, ..
                } = record
                {
                    if let Some(slot) = placement.get_mut(segment as usize) {
                        *slot = location;
                    }
                }
            }
        }
    }
    Ok(Some(placement))
}

impl MetaStore {
    pub fn checkpoint_path(dir: &Path) -> PathBuf {
        dir.join("checkpoint")
    }

    pub fn journal_path(dir: &Path) -> PathBuf {
        dir.join("journal")
    }

    /// Opens (creating if needed) the metadata directory and recovers what it
    /// holds. Fails on corruption (see the module docs).
    pub fn open(dir: &Path) -> Result<(MetaStore, Recovered), MetaError> {
        fs::create_dir_all(dir)
            .map_err(|error| io_error(dir, "creating the metadata directory", error))?;
        let checkpoint_path = Self::checkpoint_path(dir);
        let journal_path = Self::journal_path(dir);
        let mut recovered = Recovered::default();
        let mut generation = 0;
        if let Some(bytes) = read_whole(&checkpoint_path)? {
            let (checkpoint_generation, checkpoint) = decode_checkpoint(&checkpoint_path, &bytes)?;
            generation = checkpoint_generation;
            recovered.checkpoint = Some(checkpoint);
        }
        let mut journal_bytes = JOURNAL_HEADER_BYTES as u64;
        let mut rewrite_journal = true;
        if let Some(bytes) = read_whole(&journal_path)? {
            let decoded = decode_journal(&journal_path, &bytes)?;
            if decoded.generation == generation {
                recovered.records = decoded.records;
                if let Some(note) = decoded.torn_tail {
                    recovered.repaired.push(format!(
                        "{}: {note}; the change it recorded never took effect (a crash during its append)",
                        journal_path.display()
                    ));
                }
                journal_bytes = decoded.valid_bytes;
                rewrite_journal = false;
                if decoded.valid_bytes < bytes.len() as u64 {
                    let file = OpenOptions::new()
                        .write(true)
                        .open(&journal_path)
                        .map_err(|error| io_error(&journal_path, "opening", error))?;
                    file.set_len(decoded.valid_bytes)
                        .and_then(|()| file.sync_all())
                        .map_err(|error| {
                            io_error(&journal_path, "truncating a torn tail", error)
                        })?;
                }
            } else if decoded.generation < generation {
                recovered.notes.push(format!(
                    "{}: generation {} predates checkpoint generation {generation} (a crash between writing the checkpoint and resetting the journal); its records are already in the checkpoint",
                    journal_path.display(),
                    decoded.generation
                ));
            } else {
                return Err(corrupt(
                    &journal_path,
                    12,
                    format!(
                        "journal generation {} is newer than the checkpoint's {generation}: the checkpoint is missing or older than its journal",
                        decoded.generation
                    ),
                ));
            }
        }
        if rewrite_journal {
            Self::write_fresh_journal(dir, generation)?;
        }
        let journal = OpenOptions::new()
            .append(true)
            .open(&journal_path)
            .map_err(|error| io_error(&journal_path, "opening for append", error))?;
        Ok((
            MetaStore {
                dir: dir.to_path_buf(),
                generation,
                journal,
                journal_bytes,
                faults: MetaFaults::default(),
                dead: false,
                stale_tail: false,
            },
            recovered,
        ))
    }

    fn write_fresh_journal(dir: &Path, generation: u64) -> Result<(), MetaError> {
        let journal_path = Self::journal_path(dir);
        let temporary = dir.join("journal.tmp");
        let mut file =
            File::create(&temporary).map_err(|error| io_error(&temporary, "creating", error))?;
        file.write_all(&encode_journal_header(generation))
            .and_then(|()| file.sync_all())
            .map_err(|error| io_error(&temporary, "writing", error))?;
        fs::rename(&temporary, &journal_path).map_err(|error| {
            io_error(&journal_path, "renaming the new journal into place", error)
        })?;
        sync_dir(dir)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes in the journal now (header included).
    pub fn journal_bytes(&self) -> u64 {
        self.journal_bytes
    }

    /// The fault-injection handle of this store (shared with clones).
    pub fn faults(&self) -> MetaFaults {
        self.faults.clone()
    }

    fn refuse_if_dead(&self, what: &'static str) -> Result<(), MetaError> {
        if self.dead {
            return Err(io_error(
                &self.dir,
                what,
                std::io::Error::other(
                    "the process died in an earlier journal append (injected torn append); reopen to recover",
                ),
            ));
        }
        Ok(())
    }

    /// Appends `record` and makes it durable before returning. When it
    /// fails, the journal is cut back to its last good record (the caller
    /// treats the change as not made, so no part of it may stay: a later
    /// record written after a partial one would make recovery refuse the
    /// journal, and a whole record whose fsync failed could be replayed).
    /// If even that fails, appends refuse until the next checkpoint.
    pub fn append(&mut self, record: &Record) -> Result<(), MetaError> {
        self.refuse_if_dead("appending a record")?;
        let path = Self::journal_path(&self.dir);
        if self.stale_tail {
            return Err(io_error(
                &path,
                "appending a record",
                std::io::Error::other(
                    "an earlier failed append could not be cut off; the next checkpoint starts a fresh journal",
                ),
            ));
        }
        let bytes = encode_record(record);
        let written = match self.faults.disarm() {
            None => self
                .journal
                .write_all(&bytes)
                .and_then(|()| self.journal.sync_data()),
            Some(AppendFault::Tear { after_bytes }) => {
                let cut = after_bytes.min(bytes.len() - 1);
                let _ = self.journal.write_all(&bytes[..cut]);
                self.dead = true;
                return Err(io_error(
                    &path,
                    "appending a record",
                    std::io::Error::other(format!(
                        "injected: the process died after {cut} of the record's {} bytes",
                        bytes.len()
                    )),
                ));
            }
            Some(AppendFault::NoSpace { written_bytes }) => {
                let cut = written_bytes.min(bytes.len() - 1);
                self.journal
                    .write_all(&bytes[..cut])
                    .and_then(|()| Err(std::io::Error::from_raw_os_error(libc::ENOSPC)))
            }
        };
        if let Err(error) = written {
            let cut_back = self
                .journal
                .set_len(self.journal_bytes)
                .and_then(|()| self.journal.sync_data());
            if cut_back.is_err() {
                self.stale_tail = true;
            }
            return Err(io_error(&path, "appending a record", error));
        }
        self.journal_bytes += bytes.len() as u64;
        Ok(())
    }

    /// Writes `checkpoint` atomically as the next generation and starts an
    /// empty journal for it.
    pub fn write_checkpoint(&mut self, checkpoint: &Checkpoint) -> Result<(), MetaError> {
        self.refuse_if_dead("writing a checkpoint")?;
        let next_generation = self.generation + 1;
        let payload = serde_json::to_vec(checkpoint).expect("checkpoints always serialise");
        let mut bytes = Vec::with_capacity(CHECKPOINT_HEADER_BYTES + payload.len());
        bytes.extend_from_slice(CHECKPOINT_MAGIC);
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&next_generation.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&crc(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        let path = Self::checkpoint_path(&self.dir);
        let temporary = self.dir.join("checkpoint.tmp");
        let fault = self.faults.disarm_checkpoint();
        let mut file =
            File::create(&temporary).map_err(|error| io_error(&temporary, "creating", error))?;
        match fault {
            Some(CheckpointFault::TearTemporary { after_bytes }) => {
                let _ = file.write_all(&bytes[..after_bytes.min(bytes.len() - 1)]);
                self.dead = true;
                return Err(io_error(
                    &temporary,
                    "writing",
                    io::Error::other("injected fault: the process died writing the checkpoint"),
                ));
            }
            Some(CheckpointFault::NoSpace { written_bytes }) => {
                let _ = file.write_all(&bytes[..written_bytes.min(bytes.len() - 1)]);
                return Err(io_error(
                    &temporary,
                    "writing",
                    io::Error::from_raw_os_error(libc::ENOSPC),
                ));
            }
            Some(CheckpointFault::DieAfterRename) | None => {}
        }
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(|error| io_error(&temporary, "writing", error))?;
        fs::rename(&temporary, &path)
            .map_err(|error| io_error(&path, "renaming the new checkpoint into place", error))?;
        sync_dir(&self.dir)?;
        if fault == Some(CheckpointFault::DieAfterRename) {
            self.dead = true;
            return Err(io_error(
                &path,
                "resetting the journal after",
                io::Error::other("injected fault: the process died after renaming the checkpoint"),
            ));
        }
        // The checkpoint now covers every journal record; a crash here leaves
        // an older-generation journal that recovery ignores.
        Self::write_fresh_journal(&self.dir, next_generation)?;
        let journal_path = Self::journal_path(&self.dir);
        self.journal = OpenOptions::new()
            .append(true)
            .open(&journal_path)
            .map_err(|error| io_error(&journal_path, "opening for append", error))?;
        self.journal_bytes = JOURNAL_HEADER_BYTES as u64;
        self.generation = next_generation;
        self.stale_tail = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(segments: u32) -> Checkpoint {
        Checkpoint {
            volume: "v".into(),
            size_bytes: u64::from(segments) << 20,
            segment_bytes: 1 << 20,
            tiers: vec!["fast".into(), "home".into()],
            placement: (0..segments)
                .map(|segment| Location {
                    tier: 1,
                    slot: segment,
                })
                .collect(),
            policy: "none".into(),
            policy_state: serde_json::json!({}),
            history: Vec::new(),
            completed_moves: 0,
            mean_move_ns: None,
            recent_moves: Vec::new(),
            timed_moves: None,
            pins: Vec::new(),
            last_plan: None,
            cache: None,
        }
    }

    fn place(segment: u32, tier: u8, slot: u32) -> Record {
        Record::Place {
            segment,
            location: Location { tier, slot },
            move_ns: None,
        }
    }

    #[test]
    fn records_and_checkpoints_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, recovered) = MetaStore::open(dir.path()).unwrap();
        assert!(recovered.checkpoint.is_none());
        assert!(recovered.records.is_empty());
        store.append(&place(3, 0, 0)).unwrap();
        store.append(&place(4, 0, 1)).unwrap();
        drop(store);
        let (mut store, recovered) = MetaStore::open(dir.path()).unwrap();
        assert_eq!(recovered.records, vec![place(3, 0, 0), place(4, 0, 1)]);
        store.write_checkpoint(&checkpoint(8)).unwrap();
        store.append(&place(5, 0, 2)).unwrap();
        drop(store);
        let (_store, recovered) = MetaStore::open(dir.path()).unwrap();
        assert_eq!(recovered.checkpoint.unwrap(), checkpoint(8));
        assert_eq!(recovered.records, vec![place(5, 0, 2)]);
        assert!(recovered.notes.is_empty());
    }

    #[test]
    fn torn_tail_is_dropped_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = MetaStore::open(dir.path()).unwrap();
        store.append(&place(1, 0, 0)).unwrap();
        store.append(&place(2, 0, 1)).unwrap();
        drop(store);
        let path = MetaStore::journal_path(dir.path());
        let full = fs::read(&path).unwrap();
        // Cut the last record in half, as a crash during the append would.
        fs::write(&path, &full[..full.len() - 5]).unwrap();
        let (mut store, recovered) = MetaStore::open(dir.path()).unwrap();
        assert_eq!(recovered.records, vec![place(1, 0, 0)]);
        assert_eq!(recovered.repaired.len(), 1, "{:?}", recovered.repaired);
        // Appends continue after the last good record.
        store.append(&place(7, 0, 3)).unwrap();
        drop(store);
        let (_, recovered) = MetaStore::open(dir.path()).unwrap();
        assert_eq!(recovered.records, vec![place(1, 0, 0), place(7, 0, 3)]);
    }

    #[test]
    fn corruption_in_the_middle_refuses_with_path_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = MetaStore::open(dir.path()).unwrap();
        store.append(&place(1, 0, 0)).unwrap();
        store.append(&place(2, 0, 1)).unwrap();
        drop(store);
        let path = MetaStore::journal_path(dir.path());
        let mut bytes = fs::read(&path).unwrap();
        let first_payload = JOURNAL_HEADER_BYTES + 8;
        bytes[first_payload + 2] ^= 0x40;
        fs::write(&path, &bytes).unwrap();
        let error = MetaStore::open(dir.path()).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("journal"), "{text}");
        assert!(
            text.contains(&format!("byte offset {JOURNAL_HEADER_BYTES}")),
            "{text}"
        );
        assert!(text.contains("checksum"), "{text}");
    }

    /// Regression (found by DST, seeds 197 and 200): a journal append that
    /// failed part-way (a short write on a full device) left its bytes in
    /// the file; the next append landed after them and the restart refused
    /// the journal as corrupt (or dropped a "torn" tail nobody tore).
    #[test]
    fn failed_append_leaves_no_partial_record() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = MetaStore::open(dir.path()).unwrap();
        store.append(&place(1, 0, 0)).unwrap();
        let good_bytes = store.journal_bytes();
        for written_bytes in [0, 3, 11, 1000] {
            store.faults().arm(AppendFault::NoSpace { written_bytes });
            let error = store.append(&place(2, 0, 1)).unwrap_err();
            assert!(error.to_string().contains("appending"), "{error}");
            assert_eq!(store.faults().armed(), None, "the fault fires once");
            assert_eq!(store.journal_bytes(), good_bytes);
            assert_eq!(
                fs::metadata(MetaStore::journal_path(dir.path()))
                    .unwrap()
                    .len(),
                good_bytes,
                "{written_bytes} bytes of the failed record were left"
            );
        }
        store.append(&place(3, 0, 2)).unwrap();
        drop(store);
        let (_, recovered) = MetaStore::open(dir.path()).unwrap();
        assert_eq!(recovered.records, vec![place(1, 0, 0), place(3, 0, 2)]);
        assert!(recovered.notes.is_empty(), "{:?}", recovered.notes);
    }

    #[test]
    fn torn_append_kills_the_store_and_is_dropped_at_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = MetaStore::open(dir.path()).unwrap();
        store.append(&place(1, 0, 0)).unwrap();
        store.faults().arm(AppendFault::Tear { after_bytes: 20 });
        assert!(store.append(&place(2, 0, 1)).is_err());
        // The process is dead: nothing more reaches the files.
        assert!(store.append(&place(3, 0, 2)).is_err());
        assert!(store.write_checkpoint(&checkpoint(4)).is_err());
        drop(store);
        let (_, recovered) = MetaStore::open(dir.path()).unwrap();
        assert!(recovered.checkpoint.is_none());
        assert_eq!(recovered.records, vec![place(1, 0, 0)]);
        assert_eq!(recovered.repaired.len(), 1, "{:?}", recovered.repaired);
        assert!(
            recovered.repaired[0].contains("dropped"),
            "{:?}",
            recovered.repaired
        );
    }

    #[test]
    fn checkpoint_faults_keep_the_last_good_state() {
        // Died writing checkpoint.tmp: the old checkpoint and journal hold.
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = MetaStore::open(dir.path()).unwrap();
        store.write_checkpoint(&checkpoint(4)).unwrap();
        store.append(&place(1, 0, 0)).unwrap();
        store
            .faults()
            .arm_checkpoint(CheckpointFault::TearTemporary { after_bytes: 30 });
        assert!(store.write_checkpoint(&checkpoint(5)).is_err());
        assert!(store.append(&place(2, 0, 1)).is_err(), "the store is dead");
        drop(store);
        let (_, recovered) = MetaStore::open(dir.path()).unwrap();
        assert_eq!(recovered.checkpoint.unwrap().placement.len(), 4);
        assert_eq!(recovered.records, vec![place(1, 0, 0)]);

        // Died after the rename: the new checkpoint covers the old journal,
        // which reopening ignores and resets.
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = MetaStore::open(dir.path()).unwrap();
        store.append(&place(1, 0, 0)).unwrap();
        store
            .faults()
            .arm_checkpoint(CheckpointFault::DieAfterRename);
        assert!(store.write_checkpoint(&checkpoint(6)).is_err());
        drop(store);
        let (mut store, recovered) = MetaStore::open(dir.path()).unwrap();
        assert_eq!(recovered.checkpoint.unwrap().placement.len(), 6);
        assert!(recovered.records.is_empty());
        assert!(
            recovered.notes[0].contains("predates"),
            "{:?}",
            recovered.notes
        );
        store.append(&place(3, 0, 1)).unwrap();
        drop(store);
        let (_, recovered) = MetaStore::open(dir.path()).unwrap();
        assert_eq!(recovered.records, vec![place(3, 0, 1)]);

        // A full device: the checkpoint fails, the journal goes on, the
        // next checkpoint replaces the partial checkpoint.tmp.
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = MetaStore::open(dir.path()).unwrap();
        store
            .faults()
            .arm_checkpoint(CheckpointFault::NoSpace { written_bytes: 10 });
        let error = store.write_checkpoint(&checkpoint(4)).unwrap_err();
        assert!(error.to_string().contains("checkpoint.tmp"), "{error}");
        store.append(&place(1, 0, 0)).unwrap();
        drop(store);
        let (mut store, recovered) = MetaStore::open(dir.path()).unwrap();
        assert!(recovered.checkpoint.is_none());
        assert_eq!(recovered.records, vec![place(1, 0, 0)]);
        store.write_checkpoint(&checkpoint(4)).unwrap();
        drop(store);
        let (_, recovered) = MetaStore::open(dir.path()).unwrap();
        assert_eq!(recovered.checkpoint.unwrap().placement.len(), 4);
    }

    #[test]
    fn damaged_checkpoint_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = MetaStore::open(dir.path()).unwrap();
        store.write_checkpoint(&checkpoint(4)).unwrap();
        drop(store);
        let path = MetaStore::checkpoint_path(dir.path());
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let text = MetaStore::open(dir.path()).unwrap_err().to_string();
        assert!(text.contains("checkpoint"), "{text}");
        assert!(text.contains("byte offset 32"), "{text}");
    }

    #[test]
    fn stale_journal_after_checkpoint_crash_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = MetaStore::open(dir.path()).unwrap();
        store.append(&place(1, 0, 0)).unwrap();
        let old_journal = fs::read(MetaStore::journal_path(dir.path())).unwrap();
        store.write_checkpoint(&checkpoint(4)).unwrap();
        drop(store);
        // Simulate the crash between the checkpoint rename and the journal reset.
        fs::write(MetaStore::journal_path(dir.path()), &old_journal).unwrap();
        let (_, recovered) = MetaStore::open(dir.path()).unwrap();
        assert!(recovered.records.is_empty());
        assert_eq!(recovered.notes.len(), 1);
    }

    /// Metadata written before pins, plan reasons and move times existed
    /// still loads (every new field has a serde default), and the new
    /// records survive a reopen.
    #[test]
    fn old_metadata_loads_and_pin_records_round_trip() {
        let old_record: Record =
            serde_json::from_str(r#"{"type":"place","segment":3,"location":{"tier":0,"slot":1}}"#)
                .unwrap();
        assert_eq!(old_record, place(3, 0, 1));
        let mut value = serde_json::to_value(checkpoint(4)).unwrap();
        let object = value.as_object_mut().unwrap();
        for key in ["timed_moves", "pins", "last_plan"] {
            assert!(object.remove(key).is_some(), "{key}");
        }
        let old: Checkpoint = serde_json::from_value(value).unwrap();
        assert_eq!(old, checkpoint(4));

        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = MetaStore::open(dir.path()).unwrap();
        let records = [
            Record::Pin {
                segment: 2,
                tier: 0,
                until_unix_ns: Some(5),
            },
            Record::Place {
                segment: 2,
                location: Location { tier: 0, slot: 0 },
                move_ns: Some(1234),
            },
            Record::Unpin { segment: 2 },
        ];
        for record in &records {
            store.append(record).unwrap();
        }
        drop(store);
        let (_, recovered) = MetaStore::open(dir.path()).unwrap();
        assert_eq!(recovered.records, records);
    }

    #[test]
    fn decoders_never_panic_on_garbage() {
        use tierd_common::rng::Rng;
        let path = Path::new("fuzz");
        let mut rng = tierd_common::rng::SeededRng::new(7);
        let mut valid = encode_journal_header(0);
        valid.extend(encode_record(&place(1, 0, 0)));
        for _ in 0..2000 {
            let mut bytes = valid.clone();
            let flips = 1 + (rng.next_u64() % 4) as usize;
            for _ in 0..flips {
                let at = (rng.next_u64() as usize) % bytes.len();
                bytes[at] = rng.next_u64() as u8;
            }
            let cut = (rng.next_u64() as usize) % (bytes.len() + 1);
            let _ = decode_journal(path, &bytes[..cut]);
            let _ = decode_checkpoint(path, &bytes[..cut]);
        }
    }
}
