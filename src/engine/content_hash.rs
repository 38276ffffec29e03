//! A fast hash of a model's tensor bytes, so that a snapshot of one model never restores into
//! another with the same config and tensor table (a fine-tune, a file with flipped weight
//! bytes). It reads every mapped byte once, so it is computed at the first snapshot or restore
//! and cached, not at open.
//!
//! Four independent lanes over little-endian u64 words: lane = rotl((lane ^ word) * K, 31).
//! For a fixed word, `(x ^ word) * K` (K odd) and the rotation are bijections, so two inputs
//! that differ in one word always end in different lane states; four lanes keep four multiplies
//! in flight, so the pass runs at memory speed (several GB/s) rather than FNV's byte at a time.
//! Not a cryptographic hash: it detects accidents, not an adversary forging a collision.

use std::collections::BTreeMap;

use crate::pack::tensor::WeightTensor;

const K: [u64; 4] = [0x9E37_79B9_7F4A_7C15, 0xC2B2_AE3D_27D4_EB4F, 0x1656_67B1_9E37_79F9, 0xD6E8_FEB8_6659_FD93];

/// SplitMix64's finalizer: every input bit reaches every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn word(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(a)
}

/// The hash of `bytes`, continuing from `seed`.
pub fn hash_bytes(bytes: &[u8], seed: u64) -> u64 {
    let mut lanes = [seed ^ K[0], seed ^ K[1], seed ^ K[2], seed ^ K[3]];
    let step = |lane: &mut u64, k: u64, w: u64| *lane = (*lane ^ w).wrapping_mul(k).rotate_left(31);
    let mut blocks = bytes.chunks_exact(32);
    for b in &mut blocks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            step(lane, K[i], word(&b[i * 8..i * 8 + 8]));
        }
    }
    // The tail (under 32 bytes) in zero-padded words; the length below tells padding apart.
    for (i, w) in blocks.remainder().chunks(8).enumerate() {
        step(&mut lanes[i], K[i], word(w));
    }
    let mut h = mix(bytes.len() as u64 ^ seed);
    for lane in lanes {
        h = mix(h ^ lane);
    }
    h
}

/// The hash of every tensor's bytes, in name order (names, types and shapes are covered by the
/// model's table fingerprint).
pub fn tensors_hash(tensors: &BTreeMap<String, WeightTensor>) -> u64 {
    tensors.values().fold(0, |h, t| hash_bytes(t.bytes(), h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_single_bit_flip_changes_the_hash() {
        // 77 bytes: two whole blocks and a tail of 13 (one full word and a partial one).
        let base: Vec<u8> = (0..77u32).map(|i| (i * 37 + 11) as u8).collect();
        let h = hash_bytes(&base, 0);
        for i in 0..base.len() {
            for bit in 0..8 {
                let mut b = base.clone();
                b[i] ^= 1 << bit;
                assert_ne!(hash_bytes(&b, 0), h, "byte {i} bit {bit}");
            }
        }
        // Trailing zeros are not the same input as no bytes.
        assert_ne!(hash_bytes(&[1, 0], 0), hash_bytes(&[1], 0));
        assert_ne!(hash_bytes(&base, 1), h);
    }
}
