//! Who a tier file and a metadata directory belong to, written on first use
//! and checked at every start, so that tierd never serves a file that is not
//! what it was (another volume's, another tier's, a restored backup, a
//! truncated copy).
//!
//! Two records, checked against each other:
//! - the **superblock** of each file tier: [`SUPERBLOCK_BYTES`] after the
//!   tier's data area (the end of the file or block device, as mdadm's v1.0
//!   metadata, so data offsets are the same as without it and a file from
//!   before identities can be adopted by extending it): `TIERDSB1`, format
//!   version (u32 LE), payload length (u32 LE), CRC-32 of the payload (u32
//!   LE), then the JSON [`TierSuperblock`] (volume name and UUID, tier name,
//!   index and count, data size, generation);
//! - the volume's **identity file** `metadata_dir/VOLUME/identity`: `TIERDID1`,
//!   version, length, CRC-32, JSON [`VolumeIdentity`] (volume name and UUID,
//!   the generation every tier must carry, and a pending generation while a
//!   start is stamping a new one). Written tmp + fsync + rename + dir fsync.
//!
//! The generation advances at every start, in three durable steps: the
//! identity file records `pending = G + 1`, every tier's superblock is
//! rewritten with `G + 1`, then the identity file records `G + 1`. A crash
//! between the steps leaves tiers at G or G + 1 and a pending G + 1, which
//! the next start accepts; anything else — a tier file older than the
//! metadata (a restored backup of the file), newer (a restored backup of the
//! metadata) — is refused. Memory tiers carry no identity (they hold nothing
//! across a restart).
//!
//! [`verify`] compares; the engine turns its problems into one error that
//! names the volume, tier, path and what differs, and what the operator can
//! do (`--accept-reset TIER`, which lists the segments whose data that
//! gives up).

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::device::file::SUPERBLOCK_BYTES;

const SUPERBLOCK_MAGIC: &[u8; 8] = b"TIERDSB1";
const IDENTITY_MAGIC: &[u8; 8] = b"TIERDID1";
const FORMAT_VERSION: u32 = 1;
const HEADER_BYTES: usize = 8 + 4 + 4 + 4;
/// Largest identity file accepted (a bad length is damage, not an allocation).
const MAX_IDENTITY_BYTES: usize = 1 << 20;

/// The identity a tier file carries after its data area.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierSuperblock {
    pub volume: String,
    pub volume_uuid: String,
    pub tier: String,
    /// Position in the volume's stack, fastest first (the last is home).
    pub tier_index: u32,
    pub tier_count: u32,
    /// The data area's size in bytes (the superblock follows it).
    pub data_bytes: u64,
    pub generation: u64,
}

/// The identity of a volume's metadata directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeIdentity {
    pub volume: String,
    pub volume_uuid: String,
    /// Every file tier's superblock carries this generation.
    pub generation: u64,
    /// Set while a start stamps `pending` on the tiers: each may carry
    /// `generation` or `pending`.
    #[serde(default)]
    pub pending: Option<u64>,
    /// The tier stack when stamped, fastest first.
    pub tiers: Vec<String>,
}

/// True when `block` starts with the superblock magic.
pub fn has_superblock_magic(block: &[u8]) -> bool {
    block.starts_with(SUPERBLOCK_MAGIC)
}

fn frame(magic: &[u8; 8], payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER_BYTES + payload.len());
    bytes.extend_from_slice(magic);
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// The payload of a framed record, or why it is not one.
fn unframe<'a>(magic: &[u8; 8], bytes: &'a [u8]) -> Result<&'a [u8], String> {
    if bytes.len() < HEADER_BYTES || &bytes[..8] != magic {
        return Err("no tierd magic".to_string());
    }
    let word =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let version = word(8);
    if version != FORMAT_VERSION {
        return Err(format!(
            "format version {version}, this tierd reads {FORMAT_VERSION} (written by a newer tierd?)"
        ));
    }
    let length = word(12) as usize;
    let payload = bytes
        .get(HEADER_BYTES..HEADER_BYTES.saturating_add(length))
        .ok_or_else(|| format!("its length field ({length} bytes) runs past its end"))?;
    if crc32fast::hash(payload) != word(16) {
        return Err("it fails its CRC-32 checksum (damaged)".to_string());
    }
    Ok(payload)
}

impl TierSuperblock {
    /// The bytes to write (at most a few hundred; padded by the device).
    pub fn encode(&self) -> Vec<u8> {
        frame(
            SUPERBLOCK_MAGIC,
            &serde_json::to_vec(self).expect("superblocks always serialise"),
        )
    }

    /// `Ok(None)` when the block carries no superblock at all (zeroes or
    /// foreign data); `Err` when it starts like one but is damaged.
    pub fn decode(block: &[u8]) -> Result<Option<TierSuperblock>, String> {
        if !has_superblock_magic(block) {
            return Ok(None);
        }
        let payload = unframe(SUPERBLOCK_MAGIC, block)?;
        serde_json::from_slice(payload)
            .map(Some)
            .map_err(|error| format!("its contents do not parse: {error}"))
    }
}

impl VolumeIdentity {
    pub fn path(meta_dir: &Path) -> PathBuf {
        meta_dir.join("identity")
    }

    /// Reads the identity file: `Ok(None)` when there is none.
    pub fn load(meta_dir: &Path) -> Result<Option<VolumeIdentity>, String> {
        let path = Self::path(meta_dir);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("{}: cannot read: {error}", path.display())),
        };
        if bytes.len() > MAX_IDENTITY_BYTES {
            return Err(format!(
                "{}: {} bytes is not an identity file",
                path.display(),
                bytes.len()
            ));
        }
        let payload = unframe(IDENTITY_MAGIC, &bytes)
            .map_err(|reason| format!("{}: {reason}", path.display()))?;
        serde_json::from_slice(payload)
            .map(Some)
            .map_err(|error| format!("{}: contents do not parse: {error}", path.display()))
    }

    /// Writes the identity file atomically and durably.
    pub fn store(&self, meta_dir: &Path) -> Result<(), String> {
        let path = Self::path(meta_dir);
        let temporary = meta_dir.join("identity.tmp");
        let bytes = frame(
            IDENTITY_MAGIC,
            &serde_json::to_vec(self).expect("identities always serialise"),
        );
        let written = File::create(&temporary)
            .and_then(|mut file| file.write_all(&bytes).and_then(|()| file.sync_all()))
            .and_then(|()| fs::rename(&temporary, &path))
            .and_then(|()| File::open(meta_dir).and_then(|dir| dir.sync_all()));
        written.map_err(|error| format!("{}: cannot write: {error}", path.display()))
    }
}

/// A new random volume UUID (RFC 4122 version 4 text form), from the OS.
/// Identities are not part of any simulated run, so this is the one place
/// the engine takes randomness from the OS.
pub fn new_volume_uuid() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut bytes))
        .map_err(|error| format!("cannot read /dev/urandom for a volume UUID: {error}"))?;
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

/// What one file tier of a volume looked like at start.
pub struct TierAtStart {
    pub name: String,
    /// Position in the volume's stack.
    pub index: usize,
    pub path: PathBuf,
    /// Length of the regular file before tierd opened it (`None`: it did
    /// not exist; block devices: `Some(size)`).
    pub length_before: Option<u64>,
    pub block_device: bool,
    /// The data area tierd uses.
    pub data_bytes: u64,
    /// The block after the data area (`None`: unreadable).
    pub superblock: Option<Vec<u8>>,
    /// A superblock found at the end of the file instead (a file made for
    /// another tier size), to say whose file it is.
    pub trailing: Option<Vec<u8>>,
}

/// One thing that differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The tier at fault, or `None` for the metadata itself.
    pub tier: Option<String>,
    pub path: PathBuf,
    pub what: String,
}

/// What the metadata directory holds.
#[derive(Clone, Debug, Default)]
pub struct MetaAtStart {
    pub identity: Option<VolumeIdentity>,
    pub checkpoint: bool,
    pub journal: bool,
}

/// Compares the tiers with the metadata. An empty result means the volume
/// may start (fresh, adopted from before identities, or matching).
pub fn verify(
    volume: &str,
    meta_dir: &Path,
    meta: &MetaAtStart,
    tiers: &[TierAtStart],
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let meta_problem = |path: PathBuf, what: String| Problem {
        tier: None,
        path,
        what,
    };
    if meta.identity.is_some() && !meta.checkpoint {
        problems.push(meta_problem(
            crate::meta::MetaStore::checkpoint_path(meta_dir),
            "the checkpoint is missing although the volume's identity file is there: the placement of every segment is in it".to_string(),
        ));
    }
    if meta.checkpoint && !meta.journal {
        problems.push(meta_problem(
            crate::meta::MetaStore::journal_path(meta_dir),
            "the journal is missing beside its checkpoint: the moves recorded since the checkpoint would be forgotten and those segments read from where they were before".to_string(),
        ));
    }
    let has_metadata = meta.identity.is_some() || meta.checkpoint || meta.journal;
    // An identity of generation 0 was written by a first start that died
    // before stamping any tier: its tiers may carry nothing yet.
    let stamped = meta
        .identity
        .as_ref()
        .filter(|identity| identity.generation > 0);
    for tier in tiers {
        let fail = |what: String| Problem {
            tier: Some(tier.name.clone()),
            path: tier.path.clone(),
            what,
        };
        let wanted_length = tier.data_bytes + SUPERBLOCK_BYTES;
        // A superblock at the end of a file of the wrong size says whose it is.
        let mixed_up = |identity: &VolumeIdentity| {
            let found = TierSuperblock::decode(tier.trailing.as_deref()?)
                .ok()
                .flatten()?;
            Some(if found.volume_uuid == identity.volume_uuid {
                format!(
                    "it is this volume's tier {:?} file (its superblock sits after {} bytes of data), not tier {:?}'s: tier paths swapped?",
                    found.tier, found.data_bytes, tier.name
                )
            } else {
                format!(
                    "it is tier {:?} of volume {:?} (uuid {}), not of this volume {volume:?} (uuid {}): another volume's file",
                    found.tier, found.volume, found.volume_uuid, identity.volume_uuid
                )
            })
        };
        if stamped.is_some() && !tier.block_device {
            match tier.length_before {
                None => {
                    problems.push(fail(
                        "the file is missing (tierd created an empty one in its place)".to_string(),
                    ));
                    continue;
                }
                Some(0) => {
                    problems.push(fail("the file is empty".to_string()));
                    continue;
                }
                Some(length) if length < wanted_length => {
                    if let Some(what) = stamped.and_then(mixed_up) {
                        problems.push(fail(what));
                        continue;
                    }
                    problems.push(fail(format!(
                        "the file is {length} bytes, shorter than the {wanted_length} bytes tierd gave it ({} of data and {SUPERBLOCK_BYTES} of superblock): truncated, or replaced by another file",
                        tier.data_bytes
                    )));
                    continue;
                }
                Some(_) => {}
            }
        } else if has_metadata && !tier.block_device {
            // Metadata from before identities: the file may be its old size
            // (tierd adds the superblock), never shorter.
            if let Some(length) = tier.length_before {
                if length > 0 && length < tier.data_bytes {
                    problems.push(fail(format!(
                        "the file is {length} bytes, shorter than the tier's {} bytes: truncated",
                        tier.data_bytes
                    )));
                    continue;
                }
            }
        }
        let superblock = match &tier.superblock {
            None => Ok(None),
            Some(block) => TierSuperblock::decode(block),
        };
        let superblock = match superblock {
            Ok(superblock) => superblock,
            Err(reason) => {
                problems.push(fail(format!(
                    "its tierd superblock (the {SUPERBLOCK_BYTES} bytes after byte {}) is unreadable: {reason}",
                    tier.data_bytes
                )));
                continue;
            }
        };
        match (&meta.identity, superblock) {
            (None, None) => {}
            (None, Some(found)) => problems.push(fail(format!(
                "it carries tier {:?} of volume {:?} (uuid {}, generation {}), but {} has no identity for it: the metadata was lost, moved, or metadata_dir points elsewhere",
                found.tier,
                found.volume,
                found.volume_uuid,
                found.generation,
                meta_dir.display()
            ))),
            (Some(identity), None) if identity.generation == 0 => {}
            (Some(identity), None) => {
                problems.push(fail(match mixed_up(identity) {
                    Some(what) => what,
                    None => format!(
                        "it has no tierd superblock where one belongs (after byte {}), but volume {volume:?} (uuid {}) stamped one on every file tier: this is not the file tierd used (replaced by another file?)",
                        tier.data_bytes, identity.volume_uuid
                    ),
                }));
            }
            (Some(identity), Some(found)) => {
                if found.volume_uuid != identity.volume_uuid {
                    problems.push(fail(format!(
                        "it belongs to volume {:?} (uuid {}), not to this volume {volume:?} (uuid {}): another volume's file",
                        found.volume, found.volume_uuid, identity.volume_uuid
                    )));
                } else if found.tier != tier.name || found.tier_index as usize != tier.index {
                    problems.push(fail(format!(
                        "it is tier {:?} (position {} of {}) of this volume, but is configured as tier {:?} (position {}): tier paths swapped?",
                        found.tier,
                        found.tier_index + 1,
                        found.tier_count,
                        tier.name,
                        tier.index + 1
                    )));
                } else if found.data_bytes != tier.data_bytes {
                    problems.push(fail(format!(
                        "it was stamped with {} bytes of data, the configuration now gives it {}: changing a tier's size is not supported",
                        found.data_bytes, tier.data_bytes
                    )));
                } else {
                    let newest = identity.pending.unwrap_or(identity.generation).max(identity.generation);
                    let accepted = found.generation == identity.generation || Some(found.generation) == identity.pending;
                    if !accepted && found.generation < identity.generation {
                        problems.push(fail(format!(
                            "it is older than the metadata (generation {} < {}): a restored backup of the tier file; the data on it predates what the metadata describes",
                            found.generation, identity.generation
                        )));
                    } else if !accepted && found.generation > newest {
                        problems.push(fail(format!(
                            "it is newer than the metadata (generation {} > {}): the metadata in {} was restored from an older backup",
                            found.generation,
                            identity.generation,
                            meta_dir.display()
                        )));
                    } else if !accepted {
                        problems.push(fail(format!(
                            "its generation {} matches neither the metadata's {} nor the pending {:?}",
                            found.generation, identity.generation, identity.pending
                        )));
                    }
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(generation: u64, pending: Option<u64>) -> VolumeIdentity {
        VolumeIdentity {
            volume: "vol0".into(),
            volume_uuid: "u-1".into(),
            generation,
            pending,
            tiers: vec!["ssd".into(), "hdd".into()],
        }
    }

    fn tier(name: &str, index: usize, superblock: Option<TierSuperblock>) -> TierAtStart {
        TierAtStart {
            name: name.into(),
            index,
            path: PathBuf::from(format!("{name}.img")),
            length_before: Some(1 << 20 | SUPERBLOCK_BYTES),
            block_device: false,
            data_bytes: 1 << 20,
            superblock: superblock.map(|superblock| {
                let mut block = superblock.encode();
                block.resize(SUPERBLOCK_BYTES as usize, 0);
                block
            }),
            trailing: None,
        }
    }

    fn stamp(tier: &str, index: u32, uuid: &str, generation: u64) -> TierSuperblock {
        TierSuperblock {
            volume: "vol0".into(),
            volume_uuid: uuid.into(),
            tier: tier.into(),
            tier_index: index,
            tier_count: 2,
            data_bytes: 1 << 20,
            generation,
        }
    }

    fn meta(identity: Option<VolumeIdentity>) -> MetaAtStart {
        MetaAtStart {
            identity,
            checkpoint: true,
            journal: true,
        }
    }

    fn check(meta: &MetaAtStart, tiers: &[TierAtStart]) -> Vec<String> {
        verify("vol0", Path::new("meta/vol0"), meta, tiers)
            .into_iter()
            .map(|problem| format!("{:?}: {}", problem.tier, problem.what))
            .collect()
    }

    #[test]
    fn superblocks_round_trip_and_damage_is_told_apart_from_absence() {
        let superblock = stamp("hdd", 1, "u-1", 3);
        let mut block = superblock.encode();
        block.resize(SUPERBLOCK_BYTES as usize, 0);
        assert_eq!(TierSuperblock::decode(&block), Ok(Some(superblock)));
        assert_eq!(TierSuperblock::decode(&[0u8; 4096]), Ok(None));
        block[30] ^= 1;
        assert!(TierSuperblock::decode(&block)
            .unwrap_err()
            .contains("CRC-32"));
    }

    #[test]
    fn matching_tiers_pass_and_pending_generation_is_accepted() {
        let tiers = [
            tier("ssd", 0, Some(stamp("ssd", 0, "u-1", 4))),
            tier("hdd", 1, Some(stamp("hdd", 1, "u-1", 5))),
        ];
        assert!(check(&meta(Some(identity(4, Some(5)))), &tiers).is_empty());
        assert_eq!(check(&meta(Some(identity(4, None))), &tiers).len(), 1);
    }

    #[test]
    fn each_kind_of_difference_is_named() {
        let cases: [(TierAtStart, &str); 6] = [
            (
                tier("hdd", 1, Some(stamp("hdd", 1, "u-2", 4))),
                "another volume's file",
            ),
            (
                tier("hdd", 1, Some(stamp("ssd", 0, "u-1", 4))),
                "tier paths swapped",
            ),
            (
                tier("hdd", 1, Some(stamp("hdd", 1, "u-1", 3))),
                "restored backup of the tier file",
            ),
            (
                tier("hdd", 1, Some(stamp("hdd", 1, "u-1", 9))),
                "restored from an older backup",
            ),
            (tier("hdd", 1, None), "no tierd superblock"),
            (
                TierAtStart {
                    length_before: Some(4096),
                    ..tier("hdd", 1, Some(stamp("hdd", 1, "u-1", 4)))
                },
                "shorter than",
            ),
        ];
        for (tier, expected) in cases {
            let problems = check(&meta(Some(identity(4, None))), &[tier]);
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(
                problems[0].contains(expected),
                "{problems:?} lacks {expected:?}"
            );
        }
    }

    #[test]
    fn missing_metadata_pieces_and_lost_metadata_are_refused() {
        let missing_journal = MetaAtStart {
            identity: Some(identity(4, None)),
            checkpoint: true,
            journal: false,
        };
        let tiers = [tier("hdd", 1, Some(stamp("hdd", 1, "u-1", 4)))];
        assert!(check(&missing_journal, &tiers)[0].contains("journal is missing"));
        let missing_checkpoint = MetaAtStart {
            identity: Some(identity(4, None)),
            checkpoint: false,
            journal: true,
        };
        assert!(check(&missing_checkpoint, &tiers)[0].contains("checkpoint is missing"));
        // Fresh metadata beside a stamped tier: the metadata went missing.
        let fresh = MetaAtStart::default();
        assert!(check(&fresh, &tiers)[0].contains("has no identity"));
        // Fresh metadata and a file without a superblock: a new volume.
        assert!(check(&fresh, &[tier("hdd", 1, None)]).is_empty());
    }
}
