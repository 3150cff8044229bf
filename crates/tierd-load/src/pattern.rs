//! The bytes a replay writes: a deterministic function of the export offset,
//! so overlapping writes in flight leave defined contents and a reader can
//! check what landed (`docs/engine/replay.md`, "Writes").

/// Seed of the write pattern (see [`pattern_word`]): "tierdRPL".
pub const PATTERN_SEED: u64 = 0x7469_6572_6452_504c;

/// The pattern word of the 8-byte block at `aligned_offset` (a multiple of
/// 8): byte `x` of the export written by a replay holds byte `x % 8`
/// (little-endian) of `pattern_word(x - x % 8)`. The same offset always gets
/// the same bytes, so overlapping writes in flight leave defined contents
/// and a reader can check what landed.
pub fn pattern_word(aligned_offset: u64) -> u64 {
    (aligned_offset ^ PATTERN_SEED).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Fills `buffer` with the pattern of the bytes from `offset_bytes` on.
pub fn fill_pattern(buffer: &mut [u8], offset_bytes: u64) {
    let mut index = 0usize;
    // Up to the first 8-byte boundary byte by byte, then whole words.
    while index < buffer.len() && !(offset_bytes + index as u64).is_multiple_of(8) {
        let at = offset_bytes + index as u64;
        buffer[index] = pattern_word(at - at % 8).to_le_bytes()[(at % 8) as usize];
        index += 1;
    }
    let mut chunks = buffer[index..].chunks_exact_mut(8);
    let mut at = offset_bytes + index as u64;
    for chunk in &mut chunks {
        chunk.copy_from_slice(&pattern_word(at).to_le_bytes());
        at += 8;
    }
    let tail = chunks.into_remainder();
    let word = pattern_word(at).to_le_bytes();
    tail.copy_from_slice(&word[..tail.len()]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_a_function_of_the_offset() {
        let mut whole = vec![0u8; 64];
        fill_pattern(&mut whole, 1000);
        for start in 0..20 {
            let mut part = vec![0u8; 31];
            fill_pattern(&mut part, 1000 + start as u64);
            assert_eq!(&part[..], &whole[start..start + 31], "from {start}");
        }
        assert_eq!(&whole[0..8], &pattern_word(1000).to_le_bytes());
        assert_ne!(whole[0..8], whole[8..16]);
    }

    /// The documented formula, byte by byte (docs/engine/replay.md).
    #[test]
    fn pattern_matches_the_documented_formula() {
        let offset = 4093u64;
        let mut buffer = vec![0u8; 37];
        fill_pattern(&mut buffer, offset);
        for (index, byte) in buffer.iter().enumerate() {
            let x = offset + index as u64;
            let word = ((x - x % 8) ^ 0x7469_6572_6452_504c).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            assert_eq!(*byte, word.to_le_bytes()[(x % 8) as usize], "byte {x}");
        }
    }
}
