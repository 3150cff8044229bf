//! The journal and checkpoint decoders of `tierd_engine::meta`.
//!
//! First byte % 4:
//! - 0: the rest is a journal file, as is;
//! - 1: the rest is a checkpoint file, as is;
//! - 2: a journal whose checksums the harness computes: generation 0
//!   header, then the rest cut into records, each `[length u8][payload]`
//!   (length 255 = "the rest"), with a correct CRC-32 — except that a
//!   record of odd length gets a wrong one, to reach the torn-tail and
//!   corruption paths;
//! - 3: a checkpoint with a correct header and checksum around the rest as
//!   its JSON payload.
//!
//! Properties beyond "no panic": `valid_bytes` never exceeds the file and
//! equals its length when no torn tail was dropped; every error names the
//! file.

use std::path::Path;

use tierd_engine::meta::{decode_checkpoint, decode_journal, MetaError};

const PATH: &str = "/fuzz/meta";

fn check_error(error: MetaError) {
    let message = error.to_string();
    assert!(
        message.starts_with(PATH),
        "error without the file: {message}"
    );
}

fn journal(bytes: &[u8]) {
    match decode_journal(Path::new(PATH), bytes) {
        Ok(decoded) => {
            assert!(decoded.valid_bytes <= bytes.len() as u64);
            if decoded.torn_tail.is_none() {
                assert_eq!(decoded.valid_bytes, bytes.len() as u64);
            }
        }
        Err(error) => check_error(error),
    }
}

fn checkpoint(bytes: &[u8]) {
    match decode_checkpoint(Path::new(PATH), bytes) {
        Ok((_generation, checkpoint)) => drop(format!("{checkpoint:?}")),
        Err(error) => check_error(error),
    }
}

/// A journal header of generation 0 with its CRC.
fn journal_header() -> Vec<u8> {
    let mut bytes = Vec::with_capacity(24);
    bytes.extend_from_slice(b"TIERDJN1");
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

pub fn run(data: &[u8]) {
    let Some((mode, rest)) = crate::split_mode(data) else {
        return;
    };
    match mode % 4 {
        0 => journal(rest),
        1 => checkpoint(rest),
        2 => {
            let mut file = journal_header();
            let mut remaining = rest;
            while let Some((&length, after)) = remaining.split_first() {
                let length = if length == 255 {
                    after.len()
                } else {
                    usize::from(length).min(after.len())
                };
                let (payload, next) = after.split_at(length);
                let mut crc = crc32fast::hash(payload);
                if length % 2 == 1 {
                    crc = !crc;
                }
                file.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                file.extend_from_slice(&crc.to_le_bytes());
                file.extend_from_slice(payload);
                remaining = next;
            }
            journal(&file);
        }
        _ => {
            let mut file = Vec::with_capacity(32 + rest.len());
            file.extend_from_slice(b"TIERDCK1");
            file.extend_from_slice(&1u32.to_le_bytes());
            file.extend_from_slice(&1u64.to_le_bytes());
            file.extend_from_slice(&(rest.len() as u64).to_le_bytes());
            file.extend_from_slice(&crc32fast::hash(rest).to_le_bytes());
            file.extend_from_slice(rest);
            checkpoint(&file);
        }
    }
}
