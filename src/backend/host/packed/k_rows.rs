//! The K formats' side tables and interleaved copies (packed/mod.rs's module notes): each
//! 32-element block decoded as the portable kernel decodes it (int8.rs), its integers written
//! as Q4_1's nibbles and its scale and min as the 6-bit values and the super-block's d and dmin.

use super::super::row_dot::{f16_at, scale_min_k4};
use super::{block_bytes, chunk_bytes, has_masks, masks_at, stride, Q4_K};

/// A K format's group of `l` stored rows (`rows`, `rb` bytes each, `nb` blocks) into its side
/// table (`side`, where given: `nb * stride` bytes, zeroed) and its interleaved quants
/// (`quants`, where given). The side table holds, per super-block, the rows' d and dmin as f32
/// (`8l` bytes), then per block the rows' 6-bit scales and mins a byte each (`2l`) and Q5_K's
/// masks (`4l`, as `side_block`'s); the copy, each block's integers (int8.rs's decoders) as
/// Q4_1's nibbles (byte j: element j low, j + 16 high).
pub(super) fn k_rows(f: u8, l: usize, rows: &[u8], rb: usize, nb: usize, mut side: Option<&mut [u8]>, mut quants: Option<&mut [u8]>) {
    let (st, cs, c) = (stride(f, l), chunk_bytes(f, l), 4 * l);
    let bb = block_bytes(f);
    for r in 0..l {
        let row = &rows[r * rb..(r + 1) * rb];
        for b in 0..nb {
            let (sb, k) = (b / 8, b % 8);
            let stored = &row[sb * bb..(sb + 1) * bb];
            if let Some(d) = side.as_deref_mut() {
                let head = sb * 8 * st;
                if k == 0 {
                    d[head + 4 * r..head + 4 * r + 4].copy_from_slice(&f16_at(stored, 0).to_le_bytes());
                    d[head + 4 * l + 4 * r..head + 4 * l + 4 * r + 4].copy_from_slice(&f16_at(stored, 2).to_le_bytes());
                }
                let (sc, m) = scale_min_k4(k, &stored[4..16]);
                let at = k_block_at(f, l, b);
                (d[at + r], d[at + l + r]) = (sc, m);
            }
            if quants.is_none() && !has_masks(f) {
                continue;
            }
            let blk = if f == Q4_K { super::super::int8::decode_q4_k(row, b) } else { super::super::int8::decode_q5_k(row, b) };
            for kk in 0..4 {
                for i in 0..4 {
                    let (lo, hi) = (blk.q[4 * kk + i] as u8, blk.q[16 + 4 * kk + i] as u8);
                    if let Some(q) = quants.as_deref_mut() {
                        q[b * cs + c * kk + 4 * r + i] = (lo & 0x0F) | (hi & 0x0F) << 4;
                    }
                    if let (true, Some(d)) = (has_masks(f), side.as_deref_mut()) {
                        // As `side_block`: mask 2kk + half, row r's four bits a nibble of byte r / 2.
                        let at = k_block_at(f, l, b) + masks_at(f, l);
                        for (half, v) in [(0, lo), (1, hi)] {
                            d[at + l / 2 * (2 * kk + half) + r / 2] |= ((v >> 4) & 1) << (4 * (r % 2) + i);
                        }
                    }
                }
            }
        }
    }
}

/// Where block b's scales start in a K format's side table for a group of `l` rows (`k_rows`):
/// after its super-block's d and dmin and the blocks before it.
pub(super) const fn k_block_at(f: u8, l: usize, b: usize) -> usize {
    (b / 8) * 8 * stride(f, l) + 8 * l + (b % 8) * (stride(f, l) - l)
}
