//! Matrices of the block-sum formats (Q8_0, Q4_0, Q5_0, Q4_1: int8.rs's `sums_per_block`)
//! packed at open, weight rows interleaved L at a time: 16 for the AVX-512 VNNI kernels, 8 for
//! the AVX2 ones, the i32 lanes of one register. One `vpdpbusd` (or `vpmaddubsw` + `vpmaddwd`)
//! makes four products for each of the L rows, and after a block's eight the L lanes hold the
//! rows' exact block sums. The float steps (`acc = fma(s_b, ws * d_x, acc)`, and Q4_1's `acc =
//! fma(wm, s_x, acc)`) then run on all L rows' chains at once, with no lane reduction at the
//! end. The bits are int8.rs's block-sum arithmetic, as every other kernel path gives them
//! (tests/host_int8.rs).
//!
//! # Layout
//!
//! Rows are taken L at a time (a group); the rows after the last whole group stay in the stored
//! bytes and take the row-order kernels. Group g's block b is `stride` bytes: the L rows' f16
//! scales as stored (Q4_1: then their f16 mins), then chunks of 4L bytes in which bytes
//! 4r..4r+4 belong to row r:
//!
//! - Q8_0: eight chunks, chunk k holding elements 4k..4k+4 of each row. For VNNI as unsigned
//!   bytes (q + 128: the sign bit flipped), `vpdpbusd`'s unsigned operand, the activations'
//!   `cb` (-128 times the block's sum) taking the offset back; for AVX2 as stored, since
//!   `vpmaddubsw` would overflow i16 on q + 128 and takes |q| against x with q's sign instead.
//! - Q4_0, Q5_0, Q4_1: four chunks, chunk k holding stored bytes 4k..4k+4 of each row's
//!   nibbles: their low nibbles are elements 4k..4k+4, their high nibbles elements
//!   16+4k..16+4k+4. Q4_0's offset (8) is taken back by `cb / 16`, Q5_0's (16) by `cb / 8`;
//!   Q4_1 has none. Q5_0's fifth bits follow as eight masks of 4L bits, two per chunk (its low
//!   and its high elements), bit 4r+i standing for row r's element i of the chunk.
//!
//! The packed copy is the same size as the stored bytes. After packing, the mapped pages of the
//! tensor are handed back to the kernel (`WeightTensor::release_pages`), so that the process
//! holds one copy; the few reads of the stored bytes that remain (the last rows, an embedding
//! row) fault their pages in again.
//!
//! # Memory
//!
//! Packed matrices are cut, one after the other, from large anonymous regions (`Arena`),
//! advised into huge pages: a model's layer matrices are mostly under 2 MiB, and each in a
//! mapping of its own took one page fault (and one zeroed 4 KiB page) per 4 KiB, some half of
//! the open's time. A region is address space until written, so its unused end costs no memory.

use crate::backend::cpu::PreparedMatrix;
use crate::pack::tensor::WeightTensor;
use crate::quant::{dequantize_row, WeightType, QK};

use super::int8::sums_per_block;
#[cfg(target_arch = "x86_64")]
use super::int8::Q8Rows;

/// Weight rows per group for the VNNI kernels: the lanes of a 512-bit register of i32.
pub const GROUP: usize = 16;
/// Weight rows per group for the AVX2 kernels: the lanes of a 256-bit register.
pub const GROUP_AVX2: usize = 8;

/// Bytes of the source handed back at a time while packing (`WeightTensor::release_pages`).
const RELEASE_BYTES: usize = 1 << 20;

/// Address space reserved per region of an `Arena`; a larger matrix gets a region of its own.
const REGION_BYTES: usize = 256 << 20;
/// The huge-page size the regions are aligned to.
const HUGE_PAGE: usize = 2 << 20;
/// Alignment of each matrix in its region: a cache line.
const SLAB_ALIGN: usize = 64;

/// An anonymous mapping, written only through the disjoint slabs `Arena::slab` hands out.
struct Region {
    map: memmap2::MmapMut,
    /// `map`'s first byte, taken once from `as_mut_ptr`, so that slabs can be cut from a shared
    /// region.
    base: *mut u8,
}

// SAFETY: the region is plain memory; the only writes are through slabs, each a range handed
// out once (`Arena::slab`) and written by its one owner before it is shared (`Packed::new`).
unsafe impl Send for Region {}
// SAFETY: as for Send: shared access is reads of ranges no longer written.
unsafe impl Sync for Region {}

/// Where the packed matrices of one backend are cut from (see the module notes).
#[derive(Default)]
pub struct Arena {
    /// The region being filled and the offset of its first free byte.
    current: parking_lot::Mutex<Option<(std::sync::Arc<Region>, usize)>>,
}

/// `len` bytes at `off` in `region`: one packed matrix.
struct Slab {
    region: std::sync::Arc<Region>,
    off: usize,
    len: usize,
}

impl Slab {
    fn bytes(&self) -> &[u8] {
        // SAFETY: off..off + len lies in the region's map (`Arena::slab`), which lives as long
        // as the Arc; once `Packed::new` returns nothing writes it.
        unsafe { std::slice::from_raw_parts(self.region.base.add(self.off), self.len) }
    }
}

impl Arena {
    pub fn new() -> Arena {
        Arena::default()
    }

    /// `len` bytes no other slab overlaps, zeroed, and a pointer to write them through; None
    /// when the address space cannot be had.
    fn slab(&self, len: usize) -> Option<(Slab, *mut u8)> {
        let mut cur = self.current.lock();
        let fits = |c: &Option<(std::sync::Arc<Region>, usize)>| c.as_ref().is_some_and(|(r, at)| at + len <= r.map.len());
        if !fits(&cur) {
            let size = REGION_BYTES.max(len + HUGE_PAGE);
            let mut map = memmap2::MmapMut::map_anon(size).ok()?;
            #[cfg(target_os = "linux")]
            let _ = map.advise(memmap2::Advice::HugePage);
            let base = map.as_mut_ptr();
            // The first 2 MiB boundary: from there every whole huge page of the range can be one.
            let start = (base as usize).next_multiple_of(HUGE_PAGE) - base as usize;
            *cur = Some((std::sync::Arc::new(Region { map, base }), start));
        }
        let (region, at) = cur.as_mut()?;
        let off = *at;
        *at = (off + len).next_multiple_of(SLAB_ALIGN);
        // SAFETY: off..off + len lies in the map (`fits`, or the fresh region's size).
        let ptr = unsafe { region.base.add(off) };
        Some((Slab { region: region.clone(), off, len }, ptr))
    }
}

/// A matrix packed for the block-sum kernels (see the module notes).
pub struct Packed {
    pub ty: WeightType,
    /// Rows per group: 16 (VNNI) or 8 (AVX2).
    pub lanes: usize,
    /// Whole groups packed: rows 0..groups * lanes.
    pub groups: usize,
    /// 32-element blocks per row.
    pub nb: usize,
    data: Slab,
}

/// The packed formats, as the kernels' const parameter.
const Q8_0: u8 = 0;
const Q4_0: u8 = 1;
const Q5_0: u8 = 2;
const Q4_1: u8 = 3;

/// Bytes of one block of a group of `l` rows, and where its chunks (of 4l bytes) start.
const fn layout(f: u8, l: usize) -> (usize, usize) {
    match f {
        Q8_0 => (2 * l + 8 * 4 * l, 2 * l),
        Q4_0 => (2 * l + 4 * 4 * l, 2 * l),
        Q5_0 => (2 * l + 4 * 4 * l + 8 * l / 2, 2 * l),
        _ => (4 * l + 4 * 4 * l, 4 * l),
    }
}

fn format(ty: WeightType) -> u8 {
    match ty {
        WeightType::Q8_0 => Q8_0,
        WeightType::Q4_0 => Q4_0,
        WeightType::Q5_0 => Q5_0,
        _ => Q4_1,
    }
}

/// Row r's stored block `blk` into its places in group block `d` (see the module notes). The
/// sizes are constants, so that the copies need no checks: packing runs at open.
#[inline(always)]
fn pack_block<const F: u8, const L: usize, const BB: usize, const ST: usize>(blk: &[u8; BB], r: usize, d: &mut [u8; ST]) {
    let (_, at) = layout(F, L);
    let c = 4 * L;
    d[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
    if F == Q8_0 {
        // VNNI reads unsigned bytes (q + 128); AVX2 keeps q signed for its sign trick.
        let flip = if L == GROUP { 0x8080_8080 } else { 0 };
        for k in 0..8 {
            let v = u32::from_le_bytes([blk[2 + 4 * k], blk[3 + 4 * k], blk[4 + 4 * k], blk[5 + 4 * k]]) ^ flip;
            d[at + c * k + 4 * r..at + c * k + 4 * r + 4].copy_from_slice(&v.to_le_bytes());
        }
        return;
    }
    let qs = quants_at(F);
    for k in 0..4 {
        d[at + c * k + 4 * r..at + c * k + 4 * r + 4].copy_from_slice(&blk[qs + 4 * k..qs + 4 * k + 4]);
    }
    if F == Q4_1 {
        d[2 * L + 2 * r..2 * L + 2 * r + 2].copy_from_slice(&blk[2..4]);
    }
    if F == Q5_0 {
        // Row r's four bits of each mask are one nibble of the mask's byte r / 2.
        let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
        let shift = 4 * (r % 2);
        for k in 0..4 {
            for (half, first) in [(0, 4 * k), (1, 16 + 4 * k)] {
                d[at + 4 * c + L / 2 * (2 * k + half) + r / 2] |= (((qh >> first) & 0xF) as u8) << shift;
            }
        }
    }
}

/// Group g's L rows (of `rb` bytes in `bytes`) into `dst`, its `nb` blocks of ST bytes.
fn pack_group<const F: u8, const L: usize, const BB: usize, const ST: usize>(bytes: &[u8], rb: usize, g: usize, dst: &mut [u8]) {
    for r in 0..L {
        let row = &bytes[(g * L + r) * rb..(g * L + r + 1) * rb];
        for (blk, d) in row.as_chunks::<BB>().0.iter().zip(dst.as_chunks_mut::<ST>().0) {
            pack_block::<F, L, BB, ST>(blk, r, d);
        }
    }
}

/// Where a nibble format's 16 quant bytes start in its stored block.
fn quants_at(f: u8) -> usize {
    match f {
        Q4_0 => 2,
        Q5_0 => 6,
        _ => 4,
    }
}

impl Packed {
    /// `w` packed in groups of `lanes` rows (GROUP for the VNNI kernels, GROUP_AVX2 for the
    /// AVX2 ones), or None when its format is not a block-sum one, it has fewer rows, or the
    /// memory for the copy cannot be had (the stored bytes then serve, the same bits).
    /// The copy is cut from `arena`. `run(n, task)` runs `task(i)` for every i < n, on any
    /// threads.
    pub fn new(w: &WeightTensor, lanes: usize, arena: &Arena, run: &dyn Fn(usize, &(dyn Fn(usize) + Sync))) -> Option<Packed> {
        let ty = w.ty;
        let lanes = if lanes == GROUP { GROUP } else { GROUP_AVX2 };
        if !sums_per_block(ty) || w.rows() < lanes || w.cols() < QK {
            return None;
        }
        let f = format(ty);
        let (nb, rb, st) = (w.cols() / QK, w.row_bytes(), layout(f, lanes).0);
        let groups = w.rows() / lanes;
        let (data, ptr) = arena.slab(groups * nb * st)?;
        // SAFETY: the slab's range is this call's alone (`Arena::slab`), and nothing reads it
        // before this call returns.
        let dst = unsafe { std::slice::from_raw_parts_mut(ptr, data.len) };
        let bytes = w.bytes();
        // Tasks of about RELEASE_BYTES of the source each, whose pages they hand back when done.
        let per_task = (RELEASE_BYTES / (lanes * rb)).max(1);
        let pieces: Vec<parking_lot::Mutex<&mut [u8]>> = dst.chunks_mut(per_task * nb * st).map(parking_lot::Mutex::new).collect();
        run(pieces.len(), &|t| {
            let mut piece = pieces[t].lock();
            for (i, dst) in piece.chunks_exact_mut(nb * st).enumerate() {
                let g = t * per_task + i;
                match (f, lanes == GROUP) {
                    (Q8_0, true) => pack_group::<Q8_0, GROUP, 34, { layout(Q8_0, GROUP).0 }>(bytes, rb, g, dst),
                    (Q4_0, true) => pack_group::<Q4_0, GROUP, 18, { layout(Q4_0, GROUP).0 }>(bytes, rb, g, dst),
                    (Q5_0, true) => pack_group::<Q5_0, GROUP, 22, { layout(Q5_0, GROUP).0 }>(bytes, rb, g, dst),
                    (_, true) => pack_group::<Q4_1, GROUP, 20, { layout(Q4_1, GROUP).0 }>(bytes, rb, g, dst),
                    (Q8_0, false) => pack_group::<Q8_0, GROUP_AVX2, 34, { layout(Q8_0, GROUP_AVX2).0 }>(bytes, rb, g, dst),
                    (Q4_0, false) => pack_group::<Q4_0, GROUP_AVX2, 18, { layout(Q4_0, GROUP_AVX2).0 }>(bytes, rb, g, dst),
                    (Q5_0, false) => pack_group::<Q5_0, GROUP_AVX2, 22, { layout(Q5_0, GROUP_AVX2).0 }>(bytes, rb, g, dst),
                    (_, false) => pack_group::<Q4_1, GROUP_AVX2, 20, { layout(Q4_1, GROUP_AVX2).0 }>(bytes, rb, g, dst),
                }
            }
            let g1 = (t * per_task + piece.len() / (nb * st)).min(groups);
            w.release_pages(t * per_task * lanes * rb..g1 * lanes * rb);
        });
        drop(pieces);
        Some(Packed { ty, lanes, groups, nb, data })
    }

    /// Rows packed (the rest take the stored bytes).
    pub fn rows(&self) -> usize {
        self.groups * self.lanes
    }

    /// Row j's stored bytes (j < `rows()`), rebuilt from the packed copy into `row`.
    pub fn stored_row(&self, j: usize, row: &mut Vec<u8>) {
        let (f, l) = (format(self.ty), self.lanes);
        let ((st, at), c) = (layout(f, l), 4 * l);
        let (g, r, bb) = (j / l, j % l, self.ty.block_bytes());
        row.clear();
        row.resize(self.nb * bb, 0);
        let group = &self.data.bytes()[g * self.nb * st..(g + 1) * self.nb * st];
        for (blk, d) in row.chunks_exact_mut(bb).zip(group.chunks_exact(st)) {
            blk[..2].copy_from_slice(&d[2 * r..2 * r + 2]);
            if f == Q8_0 {
                let flip = if l == GROUP { 0x80 } else { 0 };
                for k in 0..8 {
                    for i in 0..4 {
                        blk[2 + 4 * k + i] = d[at + c * k + 4 * r + i] ^ flip;
                    }
                }
                continue;
            }
            let qs = quants_at(f);
            for k in 0..4 {
                blk[qs + 4 * k..qs + 4 * k + 4].copy_from_slice(&d[at + c * k + 4 * r..at + c * k + 4 * r + 4]);
            }
            if f == Q4_1 {
                blk[2..4].copy_from_slice(&d[2 * l + 2 * r..2 * l + 2 * r + 2]);
            }
            if f == Q5_0 {
                let mut qh = 0u32;
                for k in 0..4 {
                    for (half, first) in [(0, 4 * k), (1, 16 + 4 * k)] {
                        let m = d[at + 4 * c + l / 2 * (2 * k + half) + r / 2];
                        qh |= (((m >> (4 * (r % 2))) & 0xF) as u32) << first;
                    }
                }
                blk[2..6].copy_from_slice(&qh.to_le_bytes());
            }
        }
    }
}

thread_local! {
    /// A stored row rebuilt for `row_f32`, reused across calls.
    static ROW: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl PreparedMatrix for Packed {
    fn row_f32(&self, r: usize, dst: &mut [f32]) -> bool {
        if r >= self.rows() {
            return false;
        }
        let mut row = ROW.take();
        self.stored_row(r, &mut row);
        dequantize_row(self.ty, &row, dst);
        ROW.set(row);
        true
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Packed {
    /// Groups g0..g1 against the m activation rows of `x` (`n_in` wide, `cb` filled:
    /// `Q8Rows::quantize` or `quantize_for_packed`): the result of weight row g0 * lanes + j
    /// and activation row r goes to `out + r * stride + j`, a group's lanes in one store.
    /// With `stride` the output's width that is its place in a (rows, n_out) result, so that
    /// nothing is moved afterwards.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C, and for 16 lanes also AVX-512 F, VL, BW, DQ and VNNI
    /// (`Int8Isa::Avx512Vnni`). For every r < m, `out + r * stride .. + (g1 - g0) * lanes` is
    /// valid for writes and written by no one else during the call.
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run(&self, g0: usize, g1: usize, x: &Q8Rows, n_in: usize, m: usize, out: *mut f32, stride: usize) {
        // SAFETY: the caller's promise.
        unsafe {
            if self.lanes == GROUP {
                vnni::run(self, g0, g1, x, n_in, m, out, stride)
            } else {
                avx2::run(self, g0, g1, x, n_in, m, out, stride)
            }
        }
    }
}

/// The reads of a kernel's `group` over `nb` blocks (of `st` bytes in `blocks`) and RX
/// activation rows (values, scales, sums for Q4_1, corrections), checked once so that its loop
/// needs no checks.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::type_complexity)]
#[inline(always)]
fn check_rows<const F: u8, const RX: usize>(blocks: &[u8], nb: usize, st: usize, (xq, xd, xs, cb): ([&[i8]; RX], [&[f32]; RX], [&[f32]; RX], [&[i32]; RX])) {
    assert!(blocks.len() >= nb * st);
    for r in 0..RX {
        assert!(xq[r].len() >= nb * QK && xd[r].len() >= nb && cb[r].len() >= nb && (F != Q4_1 || xs[r].len() >= nb));
    }
}

/// Bytes ahead of the block being read that a pass prefetches, whatever its activation rows.
/// Passes of 3 or more rows used to be left to the hardware prefetcher: 4 rows of Q8_0 read
/// about 24 GB/s that way and 40 with this (`kernel_time`), and 4096 bytes ahead took 5-10%
/// more off a verify of 8 drafted rows than 2048.
#[cfg(target_arch = "x86_64")]
const PREFETCH_BYTES: usize = 4096;

/// Asks for the cache lines of the block `PREFETCH_BYTES` past `base` (`st` bytes). The address
/// may lie past the matrix: a prefetch never faults or reads it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_block(base: *const u8, st: usize) {
    for line in (0..st).step_by(64) {
        // SAFETY: a prefetch is a hint; it reads nothing and cannot fault.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(base.wrapping_add(PREFETCH_BYTES + line).cast()) };
    }
}

/// A kernel module's `rows` (one call of its `group`, stored into place) and `run` (every group
/// and activation row), for its lanes, store and the activation-row counts its `chunk` gives.
#[cfg(target_arch = "x86_64")]
macro_rules! rows_and_run {
    ($features:literal, $lanes:expr, $store:ident, [$($rx:literal)*]) => {
        /// Activation rows r0..r0 + RX of group g into `out` (weight rows from `row0`, rows
        /// `stride` apart: `Packed::run`).
        ///
        /// # Safety
        /// `Packed::run`'s promise about `out`, for these rows and group.
        #[target_feature(enable = $features)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        unsafe fn rows<const F: u8, const RX: usize>(p: &Packed, g: usize, x: &Q8Rows, n_in: usize, r0: usize, out: *mut f32, stride: usize, row0: usize) {
            let (nb, st) = (p.nb, layout(F, $lanes).0);
            let blocks = &p.data.bytes()[g * nb * st..(g + 1) * nb * st];
            let mut xq: [&[i8]; RX] = [&[]; RX];
            let mut xd: [&[f32]; RX] = [&[]; RX];
            let mut xs: [&[f32]; RX] = [&[]; RX];
            let mut cb: [&[i32]; RX] = [&[]; RX];
            for r in 0..RX {
                (xq[r], xd[r], xs[r]) = x.row(r0 + r, n_in);
                cb[r] = &x.cb[(r0 + r) * nb..(r0 + r + 1) * nb];
            }
            let acc = group::<F, RX>(blocks, nb, xq, xd, xs, cb);
            for (r, a) in acc.iter().enumerate() {
                // SAFETY: the caller's promise: activation row r0 + r's lanes of group g lie in
                // the writable run; storeu has no alignment requirement.
                unsafe { $store(out.add((r0 + r) * stride + g * $lanes - row0), *a) };
            }
        }

        /// Groups g0..g1 of format F against all m activation rows, `chunk` rows at a time.
        ///
        /// # Safety
        /// `Packed::run`'s promise about `out`.
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn run_format<const F: u8>(p: &Packed, g0: usize, g1: usize, x: &Q8Rows, n_in: usize, m: usize, out: *mut f32, stride: usize) {
            for g in g0..g1 {
                let mut r0 = 0;
                while r0 < m {
                    let rx = chunk(m - r0);
                    // SAFETY: the caller's promise, for rows r0..r0 + rx < m and group g.
                    match rx {
                        $($rx => unsafe { rows::<F, $rx>(p, g, x, n_in, r0, out, stride, g0 * $lanes) },)*
                        _ => unreachable!("chunk gives {rx} rows"),
                    }
                    r0 += rx;
                }
            }
        }

        /// # Safety
        /// `Packed::run`'s promise about `out`.
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        pub(super) unsafe fn run(p: &Packed, g0: usize, g1: usize, x: &Q8Rows, n_in: usize, m: usize, out: *mut f32, stride: usize) {
            // SAFETY: the caller's promise.
            unsafe {
                match format(p.ty) {
                    Q8_0 => run_format::<Q8_0>(p, g0, g1, x, n_in, m, out, stride),
                    Q4_0 => run_format::<Q4_0>(p, g0, g1, x, n_in, m, out, stride),
                    Q5_0 => run_format::<Q5_0>(p, g0, g1, x, n_in, m, out, stride),
                    _ => run_format::<Q4_1>(p, g0, g1, x, n_in, m, out, stride),
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use super::{check_rows, format, layout, prefetch_block, Packed, GROUP, Q4_0, Q4_1, Q5_0, Q8_0};
    use crate::backend::host::int8::Q8Rows;
    use crate::quant::QK;

    /// One group's `nb` blocks (`blocks`, of format F) against RX activation rows: lane l of
    /// result r is the group's row l . activation row r, int8.rs's block-sum arithmetic.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")]
    #[inline]
    fn group<const F: u8, const RX: usize>(
        blocks: &[u8],
        nb: usize,
        xq: [&[i8]; RX],
        xd: [&[f32]; RX],
        xs: [&[f32]; RX],
        cb: [&[i32]; RX],
    ) -> [__m512; RX] {
        let (st, at) = layout(F, GROUP);
        check_rows::<F, RX>(blocks, nb, st, (xq, xd, xs, cb));
        let mut acc = [_mm512_setzero_ps(); RX];
        let p = blocks.as_ptr();
        for b in 0..nb {
            // SAFETY (the loads below): b < nb, and the asserts above keep block b's stride
            // bytes of `blocks`, the 32 bytes of each activation row's block b, and its scale,
            // sum and correction inside their slices; the loads have no alignment requirement.
            unsafe {
                let base = p.add(b * st);
                prefetch_block(base, st);
                let ws = _mm512_cvtph_ps(_mm256_loadu_si256(base.cast()));
                let wm = if F == Q4_1 { _mm512_cvtph_ps(_mm256_loadu_si256(base.add(2 * GROUP).cast())) } else { ws };
                let chunks = base.add(at);
                let mut wv = [_mm512_setzero_si512(); 8];
                if F == Q8_0 {
                    for (k, v) in wv.iter_mut().enumerate() {
                        *v = _mm512_loadu_si512(chunks.add(64 * k).cast());
                    }
                } else {
                    let m4 = _mm512_set1_epi8(0x0F);
                    for k in 0..4 {
                        let c = _mm512_loadu_si512(chunks.add(64 * k).cast());
                        wv[k] = _mm512_and_si512(c, m4);
                        wv[k + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(c), m4);
                    }
                    if F == Q5_0 {
                        let masks = chunks.add(4 * 64).cast::<u64>();
                        let bit = _mm512_set1_epi8(0x10);
                        for k in 0..4 {
                            let (lo, hi) = (masks.add(2 * k).read_unaligned(), masks.add(2 * k + 1).read_unaligned());
                            wv[k] = _mm512_mask_add_epi8(wv[k], lo, wv[k], bit);
                            wv[k + 4] = _mm512_mask_add_epi8(wv[k + 4], hi, wv[k + 4], bit);
                        }
                    }
                }
                for r in 0..RX {
                    let xp = xq[r].as_ptr().add(b * QK).cast::<i32>();
                    let c = *cb[r].get_unchecked(b);
                    let mut s = _mm512_set1_epi32(match F {
                        Q8_0 => c,
                        Q4_0 => c >> 4,
                        Q5_0 => c >> 3,
                        _ => 0,
                    });
                    for (k, &v) in wv.iter().enumerate() {
                        s = _mm512_dpbusd_epi32(s, v, _mm512_set1_epi32(xp.add(k).read_unaligned()));
                    }
                    let t = _mm512_mul_ps(ws, _mm512_set1_ps(*xd[r].get_unchecked(b)));
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), t, acc[r]);
                    if F == Q4_1 {
                        acc[r] = _mm512_fmadd_ps(wm, _mm512_set1_ps(*xs[r].get_unchecked(b)), acc[r]);
                    }
                }
            }
        }
        acc
    }

    /// Activation rows per call of `group` for `left` rows still to do: all of them up to 12 (a
    /// verify of 8 drafted rows is 9), else 8, so that the accumulators and a block's eight
    /// weight registers stay in the 32 registers.
    fn chunk(left: usize) -> usize {
        if left > 12 {
            8
        } else {
            left
        }
    }

    rows_and_run!("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni", GROUP, _mm512_storeu_ps, [1 2 3 4 5 6 7 8 9 10 11 12]);
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{check_rows, format, layout, prefetch_block, Packed, GROUP_AVX2 as L, Q4_0, Q4_1, Q5_0, Q8_0};
    use crate::backend::host::int8::Q8Rows;
    use crate::quant::QK;

    /// Byte j of a 64-bit pattern selecting bit j % 8 (for the Q5_0 masks).
    const BIT_OF_BYTE: i64 = 0x8040_2010_0804_0201u64 as i64;

    /// One group's `nb` blocks (format F, 8 rows) against RX activation rows: lane l of result r
    /// is the group's row l . activation row r, int8.rs's block-sum arithmetic. `vpmaddubsw`
    /// multiplies unsigned by signed bytes: the nibble formats go in as they are (pair sums at
    /// most 2 * 31 * 127, so four pairs add in i16 without overflow), Q8_0 as |q| against x
    /// with q's sign.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn group<const F: u8, const RX: usize>(
        blocks: &[u8],
        nb: usize,
        xq: [&[i8]; RX],
        xd: [&[f32]; RX],
        xs: [&[f32]; RX],
        cb: [&[i32]; RX],
    ) -> [__m256; RX] {
        let (st, at) = layout(F, L);
        check_rows::<F, RX>(blocks, nb, st, (xq, xd, xs, cb));
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); RX];
        let p = blocks.as_ptr();
        for b in 0..nb {
            // SAFETY (the loads below): b < nb, and the asserts above keep block b's stride
            // bytes of `blocks`, the 32 bytes of each activation row's block b, and its scale,
            // sum and correction inside their slices; the loads have no alignment requirement.
            unsafe {
                let base = p.add(b * st);
                prefetch_block(base, st);
                let ws = _mm256_cvtph_ps(_mm_loadu_si128(base.cast()));
                let wm = if F == Q4_1 { _mm256_cvtph_ps(_mm_loadu_si128(base.add(2 * L).cast())) } else { ws };
                let chunks = base.add(at);
                let mut wv = [_mm256_setzero_si256(); 8];
                if F == Q8_0 {
                    for (k, v) in wv.iter_mut().enumerate() {
                        *v = _mm256_abs_epi8(_mm256_loadu_si256(chunks.add(32 * k).cast()));
                    }
                } else {
                    let m4 = _mm256_set1_epi8(0x0F);
                    for k in 0..4 {
                        let c = _mm256_loadu_si256(chunks.add(32 * k).cast());
                        wv[k] = _mm256_and_si256(c, m4);
                        wv[k + 4] = _mm256_and_si256(_mm256_srli_epi16::<4>(c), m4);
                    }
                    if F == Q5_0 {
                        // Mask i's 32 bits, bit 4r + j for byte 4r + j: each byte picks its
                        // mask byte, tests its bit, and gains 16 where it is set.
                        let masks = chunks.add(4 * 32).cast::<u32>();
                        let spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
                        let bits = _mm256_set1_epi64x(BIT_OF_BYTE);
                        let sixteen = _mm256_set1_epi8(0x10);
                        for i in 0..8 {
                            let m = _mm256_shuffle_epi8(_mm256_set1_epi32(masks.add(i).read_unaligned() as i32), spread);
                            let hit = _mm256_cmpeq_epi8(_mm256_and_si256(m, bits), bits);
                            let v = (i / 2) + 4 * (i % 2);
                            wv[v] = _mm256_or_si256(wv[v], _mm256_and_si256(hit, sixteen));
                        }
                    }
                }
                for r in 0..RX {
                    let xp = xq[r].as_ptr().add(b * QK).cast::<i32>();
                    let x = |k: usize| _mm256_set1_epi32(xp.add(k).read_unaligned());
                    let c = *cb[r].get_unchecked(b);
                    let s = if F == Q8_0 {
                        let mut s = _mm256_setzero_si256();
                        for (k, &v) in wv.iter().enumerate() {
                            let q = _mm256_loadu_si256(chunks.add(32 * k).cast());
                            s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(v, _mm256_sign_epi8(x(k), q)), ones));
                        }
                        s
                    } else {
                        let half = |k0: usize| {
                            let mut h = _mm256_maddubs_epi16(wv[k0], x(k0));
                            for k in k0 + 1..k0 + 4 {
                                h = _mm256_add_epi16(h, _mm256_maddubs_epi16(wv[k], x(k)));
                            }
                            _mm256_madd_epi16(h, ones)
                        };
                        let corr = match F {
                            Q4_0 => c >> 4,
                            Q5_0 => c >> 3,
                            _ => 0,
                        };
                        _mm256_add_epi32(_mm256_add_epi32(half(0), half(4)), _mm256_set1_epi32(corr))
                    };
                    let t = _mm256_mul_ps(ws, _mm256_set1_ps(*xd[r].get_unchecked(b)));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), t, acc[r]);
                    if F == Q4_1 {
                        acc[r] = _mm256_fmadd_ps(wm, _mm256_set1_ps(*xs[r].get_unchecked(b)), acc[r]);
                    }
                }
            }
        }
        acc
    }

    /// Activation rows per call of `group`: AVX2's 16 registers hold a block's 8 weight
    /// registers and a few rows' accumulators.
    fn chunk(left: usize) -> usize {
        left.min(3)
    }

    rows_and_run!("avx2,fma,f16c", L, _mm256_storeu_ps, [1 2 3]);
}
