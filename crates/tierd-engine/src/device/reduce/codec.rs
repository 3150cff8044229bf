//! What one block is reduced to: nothing (all zeroes), a fingerprint for
//! deduplication, and an lz4 block when that saves enough.
//!
//! Fingerprint: XXH3-128 (`xxhash-rust`). It is not cryptographic, so a
//! fingerprint match is only a candidate: the reduced tier reads the stored
//! block back and compares every byte before it shares it. That keeps dedup
//! right even against crafted collisions, and XXH3 hashes at tens of GB/s,
//! an order of magnitude faster than SHA-256 or BLAKE3 on one core, so the
//! reduction workers spend their time compressing.
//!
//! Compression: lz4 block format (`lz4_flex`, safe decoding: a block changed
//! on disk fails to decode rather than misbehave). A block is stored
//! compressed only when that saves at least an eighth of it; otherwise raw.

/// A block's 128-bit fingerprint.
pub type Fingerprint = u128;

/// True when every byte is zero (such a block takes no space).
pub fn is_zero(block: &[u8]) -> bool {
    // 64-byte chunks OR-ed as words: vectorised, one branch per chunk.
    let chunks = block.chunks_exact(64);
    let tail = chunks.remainder();
    chunks.into_iter().all(|chunk| {
        chunk.chunks_exact(8).fold(0u64, |acc, word| {
            acc | u64::from_ne_bytes(word.try_into().expect("8 bytes"))
        }) == 0
    }) && tail.iter().all(|&byte| byte == 0)
}

pub fn fingerprint(block: &[u8]) -> Fingerprint {
    xxhash_rust::xxh3::xxh3_128(block)
}

/// Compresses `block` into `out` (cleared first) when that saves at least
/// an eighth; returns whether it did.
pub fn compress(block: &[u8], out: &mut Vec<u8>) -> bool {
    let bound = lz4_flex::block::get_maximum_output_size(block.len());
    out.clear();
    out.resize(bound, 0);
    match lz4_flex::block::compress_into(block, out) {
        Ok(length) if length <= block.len() - block.len() / 8 => {
            out.truncate(length);
            true
        }
        _ => {
            out.clear();
            false
        }
    }
}

/// Decompresses a stored fragment into `block` (exactly its length);
/// `Err` names what is wrong (damage on disk).
pub fn decompress(fragment: &[u8], block: &mut [u8]) -> Result<(), String> {
    match lz4_flex::block::decompress_into(fragment, block) {
        Ok(length) if length == block.len() => Ok(()),
        Ok(length) => Err(format!(
            "a compressed fragment decodes to {length} bytes, not {}",
            block.len()
        )),
        Err(error) => Err(format!("a compressed fragment does not decode: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_blocks_are_found_at_any_length() {
        assert!(is_zero(&[0; 4096]));
        assert!(is_zero(&[0; 13]));
        let mut block = vec![0; 4096];
        block[4095] = 1;
        assert!(!is_zero(&block));
        block[4095] = 0;
        block[3] = 1;
        assert!(!is_zero(&block));
    }

    #[test]
    fn half_compressible_blocks_shrink_and_come_back() {
        // fio's buffer_compress_percentage=50 in kind: half random, half zeroes.
        let mut block = vec![0u8; 4096];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for byte in &mut block[..2048] {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *byte = x as u8;
        }
        let mut out = Vec::new();
        assert!(compress(&block, &mut out));
        assert!(out.len() < 2200, "{}", out.len());
        let mut back = vec![0u8; 4096];
        decompress(&out, &mut back).unwrap();
        assert_eq!(back, block);
        // Random data does not compress: stored raw.
        let random: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let _ = compress(&random, &mut out);
        let mut garbage = vec![0u8; 4096];
        assert!(decompress(&[0xff, 0xff, 0xff], &mut garbage).is_err());
    }

    #[test]
    fn fingerprints_differ_for_one_bit() {
        let a = vec![7u8; 4096];
        let mut b = a.clone();
        b[100] ^= 1;
        assert_ne!(fingerprint(&a), fingerprint(&b));
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
    }
}
