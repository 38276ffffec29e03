//! Matrices of the block-sum formats (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, Q4_K, Q5_K: their rows' `groups` column, quant/) run
//! by kernels that take weight rows L at a time: 16 for the AVX-512 VNNI kernels, 8 for the
//! AVX2 ones, the i32 lanes of one register. One `vpdpbusd` (or `vpmaddubsw` + `vpmaddwd`)
//! makes four products for each of the L rows, and after a block's eight the L lanes hold the
//! rows' exact block sums. The float steps (`acc = fma(s_b, ws * d_x, acc)`, and for the
//! formats with a min `acc = fma(wm, s_x, acc)`) then run on all L rows' chains at once, with no lane reduction at the
//! end (AVX2's Q8_0 over the copy for several activation rows widens to 16 bits instead, its
//! pairs' sums meeting in one `vphaddd` a block: kernels.rs). The bits are int8.rs's block-sum
//! arithmetic, as every other kernel path gives them (tests/host_int8.rs, tests/host_int8_k.rs).
//!
//! # Layout
//!
//! The kernels read the quants in one of two places, with the same arithmetic and bits:
//!
//! - Where the pack stores them (the mapped file), from the open on: for each block the
//!   kernel loads the L rows' quant bytes and interleaves them in registers (a transposition
//!   of 4-byte groups: 24 shuffles for Q8_0's 32 bytes a row, 8 for the nibble formats' 16),
//!   so that register k holds bytes 4k..4k+4 of every row, row r in lane r.
//! - In an interleaved copy (`Interleaver`), written after the open on a thread of its own and
//!   by the pool's helpers between calls (`Shared::help`), and taken up by the kernels a group
//!   at a time as it is written (`Packed::ready`): group g's block b is those
//!   registers as they are loaded, chunks of 4L bytes in which bytes 4r..4r+4 belong to row r
//!   (Q8_0: eight chunks, for VNNI as unsigned bytes q + 128, `vpdpbusd`'s unsigned operand,
//!   the activations' `cb` taking the offset back; for AVX2 as stored. Q4_0, Q5_0, Q4_1, Q5_1: four
//!   chunks of the stored nibble bytes). Once a piece of the copy is written, the mapped pages
//!   it came from are handed back (`WeightTensor::release_pages`), so that the process holds
//!   one copy, and embedding rows are read from the copy.
//!
//! The K formats (Q4_K, Q5_K) are read only from the copy's layout: their copy holds each
//! 32-element block's integers as Q4_1's nibbles (byte j: element j low, j + 16 high), which
//! the Q4_1 and Q5_1 kernels take, and a group not yet copied is put in that layout in a
//! buffer of the calling thread first (`k_rows`; kernels.rs's `run_format`). Their embedding
//! rows are read from the stored rows.
//!
//! Why both: the copy is the size of the weights, and writing it into fresh memory (page
//! faults, while the file's pages are already in the page cache) was most of an open, while
//! the shuffles cost a decode step a large share of its time on a machine of modest read
//! bandwidth (the numbers: docs/benchmarks/behind.md, "Open (fixed in run 6)"). So the open
//! pays for neither, and decode runs at the copy's speed soon after it.
//!
//! What would need a gather per block in the stored order, the rows' block headers, is copied
//! into a side table (`Packed::side_table`: after the open, by the writer thread before any
//! copy, or by the first pass that needs it): rows are taken L at a time (a group); the rows after
//! the last whole group take the row-order kernels. Group g's block b is `stride` bytes of the
//! table: the L rows' f16 scales as stored; for Q4_1 and Q5_1 then their f16 mins; for Q5_0 and
//! Q5_1 then the fifth bits as eight masks of 4L bits, two per register of nibbles (its low and
//! its high elements), bit 4r+i standing for row r's element i of the register. The table is
//! 2/34 of a Q8_0 matrix's bytes, 2/18 of Q4_0's, 4/20 of Q4_1's, 6/22 of Q5_0's and 8/24 of
//! Q5_1's. A K format's table holds per super-block the rows' d and dmin as f32, and per block
//! their 6-bit scales and mins a byte each (and Q5_K's masks), from which the kernels make
//! `d * sc` and `-(dmin * m)`, exact products (f16 values times 6-bit integers), the decoders'
//! values: 3/18 of a Q4_K matrix's bytes per block (the copy 16/18), 7/22 of Q5_K's.
//!
//! # Memory
//!
//! Side tables and copies are cut, one after the other, from large anonymous regions
//! (`Arena`), advised into huge pages: each in a mapping of its own took one page fault (and
//! one zeroed 4 KiB page) per 4 KiB. A region is address space until written, so its unused
//! end costs no memory.

use crate::backend::cpu::PreparedMatrix;
use crate::pack::tensor::WeightTensor;
use crate::quant::{dequantize_row, WeightType, QK, QK_K};

#[cfg(target_arch = "x86_64")]
use super::int8::Q8Rows;

#[cfg(target_arch = "x86_64")]
mod kernels;
mod k_rows;
mod writer;

use k_rows::k_rows;
// (Read by the group kernels alone, which are x86_64's.)
#[cfg(target_arch = "x86_64")]
use k_rows::k_block_at;
pub use writer::Interleaver;

/// Weight rows per group for the VNNI kernels: the lanes of a 512-bit register of i32.
pub const GROUP: usize = 16;
/// Weight rows per group for the AVX2 kernels: the lanes of a 256-bit register.
pub const GROUP_AVX2: usize = 8;

/// Stored bytes per task while building a side table, and per piece of an interleaved copy
/// (after which its pages are handed back and the stop flag is looked at).
const TASK_BYTES: usize = 1 << 20;
/// Stored bytes a pool helper interleaves per look between calls (`Shared::help`): a few
/// microseconds, so that a call posted meanwhile waits for it by about as long as a helper
/// takes to wake.
const HELP_BYTES: usize = 16 << 10;

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
// out once (`Arena::slab`) and written by its one owner before it is shared (`Packed::side_table`,
// `Packed::interleave`).
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
    /// The whole slab: a side table, written before `Packed::side_table` stores it.
    fn bytes(&self) -> &[u8] {
        // SAFETY: off..off + len lies in the region's map (`Arena::slab`), which lives as long
        // as the Arc; once it is stored in its `Packed` nothing writes it.
        unsafe { std::slice::from_raw_parts(self.region.base.add(self.off), self.len) }
    }

    /// The slab's first byte, to write through under the owner's rules (`Packed::write_groups`).
    fn ptr(&self) -> *mut u8 {
        // SAFETY: off lies in the region's map (`Arena::slab`).
        unsafe { self.region.base.add(self.off) }
    }

    /// Bytes at..at + len of the slab, which the caller knows no one writes any more (a copy's
    /// groups below `Packed::ready`).
    fn range(&self, at: usize, len: usize) -> &[u8] {
        assert!(at + len <= self.len);
        // SAFETY: the range lies in the slab (asserted) and so in the region's map, which lives
        // as long as the Arc; the caller's promise: nothing writes it while the slice lives.
        unsafe { std::slice::from_raw_parts(self.region.base.add(self.off + at), len) }
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

/// A matrix's side table for the block-sum kernels (see the module notes).
pub struct Packed {
    pub ty: WeightType,
    /// `ty` as the group kernels name it (its row's `groups` column).
    pub format: GroupFormat,
    /// Rows per group: 16 (VNNI) or 8 (AVX2).
    pub lanes: usize,
    /// Whole groups: rows 0..groups * lanes.
    pub groups: usize,
    /// 32-element blocks per row.
    pub nb: usize,
    /// Stored bytes per row.
    row_bytes: usize,
    /// The matrix as stored: the quants of the groups not yet in `copy`, and its last rows.
    tensor: WeightTensor,
    /// (groups, nb, stride): the rows' block headers, built once, after the open (`side_table`);
    /// None inside where the memory for it could not be had.
    side: std::sync::OnceLock<Option<Slab>>,
    /// Held while `side` is built, so that a pass that finds it held can run the row-order
    /// kernels instead of waiting (`side_table`).
    building: parking_lot::Mutex<()>,
    /// (groups, nb, chunks): the quants interleaved (see the module notes), set when its
    /// writing starts; the groups below `ready` are written.
    copy: std::sync::OnceLock<Slab>,
    /// Groups of `copy` written so far (stored with Release once their bytes are): the kernels
    /// and embedding lookups read those from the copy, the rest from the stored rows.
    ready: std::sync::atomic::AtomicUsize,
    /// Held by the one thread writing the next groups of `copy` (`write_groups`): the writer
    /// thread, or a pool helper with nothing else to do (team.rs). Holds the groups whose
    /// stored pages were handed back.
    writing: parking_lot::Mutex<usize>,
}

/// A format the group kernels take, as its row (quant/) names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[allow(non_camel_case_types)]
pub enum GroupFormat {
    Q8_0 = 0,
    Q4_0 = 1,
    Q5_0 = 2,
    Q4_1 = 3,
    Q5_1 = 4,
    /// Q4_K and Q5_K: their 32-element blocks as Q4_1's and Q5_1's, the side table holding each
    /// super-block's d and dmin and each block's 6-bit scale and min, the copy each block's
    /// integers in Q4_1's nibble order (`k_rows`).
    Q4_K = 5,
    Q5_K = 6,
}

/// The formats, as the kernels' const parameter.
const Q8_0: u8 = GroupFormat::Q8_0 as u8;
const Q4_0: u8 = GroupFormat::Q4_0 as u8;
const Q5_0: u8 = GroupFormat::Q5_0 as u8;
const Q4_1: u8 = GroupFormat::Q4_1 as u8;
const Q5_1: u8 = GroupFormat::Q5_1 as u8;
const Q4_K: u8 = GroupFormat::Q4_K as u8;
const Q5_K: u8 = GroupFormat::Q5_K as u8;

/// Whether the group kernels take matrices of type `ty` (its row's `groups` column).
pub fn takes(ty: WeightType) -> bool {
    ty.format().fast.groups.get().is_some()
}

/// Whether format `f` has a min per block (Q4_1, Q5_1, Q4_K, Q5_K: the side table's mins after
/// the scales).
const fn has_min(f: u8) -> bool {
    f == Q4_1 || f == Q5_1 || is_k(f)
}

/// Whether format `f` has fifth bits (Q5_0, Q5_1, Q5_K: the side table's masks).
const fn has_masks(f: u8) -> bool {
    f == Q5_0 || f == Q5_1 || f == Q5_K
}

/// Whether format `f` is a K format: a side table and a copy written from its decoded blocks
/// (`k_rows`), the copy's layout being what the kernels always read (a group not yet in the
/// copy is put in it first: kernels.rs's `run_format`).
const fn is_k(f: u8) -> bool {
    f == Q4_K || f == Q5_K
}

/// Where the masks start in a group block's headers for a group of `l` rows: after the f16
/// scales, and the f16 mins of the formats with one; for a K format, after the block's scale
/// and min bytes (`k_rows`).
const fn masks_at(f: u8, l: usize) -> usize {
    if has_min(f) && !is_k(f) {
        4 * l
    } else {
        2 * l
    }
}

/// Bytes of one group block's headers for a group of `l` rows: the scales, then the mins of the
/// formats with one, then the masks of those with fifth bits. A K format's blocks average this:
/// its super-block's d and dmin (`8l` bytes) are an eighth of a block's `l` more (`k_rows`).
const fn stride(f: u8, l: usize) -> usize {
    let masks = if has_masks(f) { 8 * l / 2 } else { 0 };
    masks_at(f, l) + masks + if is_k(f) { l } else { 0 }
}

/// Bytes of one group block's quants, interleaved: eight chunks of 4l bytes for Q8_0, four for
/// the nibble formats.
const fn chunk_bytes(f: u8, l: usize) -> usize {
    if f == Q8_0 {
        8 * 4 * l
    } else {
        4 * 4 * l
    }
}

/// Bytes of one stored block (a K format's super-block holds eight: its kernels never read the
/// stored rows, `is_k`).
const fn block_bytes(f: u8) -> usize {
    match f {
        Q8_0 => 34,
        Q4_0 => 18,
        Q5_0 => 22,
        Q5_1 => 24,
        // d, dmin, 12 bytes of 6-bit scales and mins, (Q5_K's 32 bytes of fifth bits,) 128 of nibbles.
        Q4_K => 4 + 12 + QK_K / 2,
        Q5_K => 4 + 12 + QK_K / 8 + QK_K / 2,
        _ => 20,
    }
}

/// Where the quant bytes start in a stored block (Q8_0's 32, the nibble formats' 16; the K
/// formats' stored rows are never read by the kernels).
const fn quants_at(f: u8) -> usize {
    match f {
        Q8_0 | Q4_0 => 2,
        Q5_0 => 6,
        Q5_1 => 8,
        _ => 4,
    }
}

/// Where a 5-bit format's qh (4 bytes) is in a stored block: just before its quants.
const fn qh_at(f: u8) -> usize {
    quants_at(f) - 4
}

/// `$f::<F, L, BB, { $size(F, L) }>($args)` for the format `f` and lanes `l` (GROUP or
/// GROUP_AVX2) at run time: the per-block copies are compiled for constant sizes.
macro_rules! by_format {
    ($f:ident, $size:ident, $fmt:expr, $l:expr, ($($arg:expr),*)) => {
        match ($fmt, $l == GROUP) {
            (GroupFormat::Q8_0, true) => $f::<Q8_0, GROUP, { block_bytes(Q8_0) }, { $size(Q8_0, GROUP) }>($($arg),*),
            (GroupFormat::Q4_0, true) => $f::<Q4_0, GROUP, { block_bytes(Q4_0) }, { $size(Q4_0, GROUP) }>($($arg),*),
            (GroupFormat::Q5_0, true) => $f::<Q5_0, GROUP, { block_bytes(Q5_0) }, { $size(Q5_0, GROUP) }>($($arg),*),
            (GroupFormat::Q5_1, true) => $f::<Q5_1, GROUP, { block_bytes(Q5_1) }, { $size(Q5_1, GROUP) }>($($arg),*),
            (GroupFormat::Q4_1, true) => $f::<Q4_1, GROUP, { block_bytes(Q4_1) }, { $size(Q4_1, GROUP) }>($($arg),*),
            (GroupFormat::Q8_0, false) => $f::<Q8_0, GROUP_AVX2, { block_bytes(Q8_0) }, { $size(Q8_0, GROUP_AVX2) }>($($arg),*),
            (GroupFormat::Q4_0, false) => $f::<Q4_0, GROUP_AVX2, { block_bytes(Q4_0) }, { $size(Q4_0, GROUP_AVX2) }>($($arg),*),
            (GroupFormat::Q5_0, false) => $f::<Q5_0, GROUP_AVX2, { block_bytes(Q5_0) }, { $size(Q5_0, GROUP_AVX2) }>($($arg),*),
            (GroupFormat::Q5_1, false) => $f::<Q5_1, GROUP_AVX2, { block_bytes(Q5_1) }, { $size(Q5_1, GROUP_AVX2) }>($($arg),*),
            (GroupFormat::Q4_1, false) => $f::<Q4_1, GROUP_AVX2, { block_bytes(Q4_1) }, { $size(Q4_1, GROUP_AVX2) }>($($arg),*),
            (GroupFormat::Q4_K | GroupFormat::Q5_K, _) => unreachable!("the K formats are written by k_rows"),
        }
    };
}

/// Row r's stored block `blk`'s headers into their places in group block `d` (see the module
/// notes). The sizes are constants, so that the copies need no checks.
#[inline(always)]
fn side_block<const F: u8, const L: usize, const BB: usize, const ST: usize>(blk: &[u8; BB], r: usize, d: &mut [u8; ST]) {
    d[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
    if has_min(F) {
        d[2 * L + 2 * r..2 * L + 2 * r + 2].copy_from_slice(&blk[2..4]);
    }
    if has_masks(F) {
        // Row r's four bits of each mask are one nibble of the mask's byte r / 2.
        let at = qh_at(F);
        let qh = u32::from_le_bytes([blk[at], blk[at + 1], blk[at + 2], blk[at + 3]]);
        let (shift, masks) = (4 * (r % 2), masks_at(F, L));
        for k in 0..4 {
            for (half, first) in [(0, 4 * k), (1, 16 + 4 * k)] {
                d[masks + L / 2 * (2 * k + half) + r / 2] |= (((qh >> first) & 0xF) as u8) << shift;
            }
        }
    }
}

/// Group g's L rows (of `rb` bytes in `bytes`) into `dst`, its `nb` blocks of ST bytes.
fn side_group<const F: u8, const L: usize, const BB: usize, const ST: usize>(bytes: &[u8], rb: usize, g: usize, dst: &mut [u8]) {
    for r in 0..L {
        let row = &bytes[(g * L + r) * rb..(g * L + r + 1) * rb];
        for (blk, d) in row.as_chunks::<BB>().0.iter().zip(dst.as_chunks_mut::<ST>().0) {
            side_block::<F, L, BB, ST>(blk, r, d);
        }
    }
}

/// Group g's L rows (of `rb` bytes in `bytes`) into `dst`, its `nb` blocks of CS bytes of
/// interleaved quants (see the module notes).
fn interleave_group<const F: u8, const L: usize, const BB: usize, const CS: usize>(bytes: &[u8], rb: usize, g: usize, dst: &mut [u8]) {
    let (c, qs) = (4 * L, quants_at(F));
    // VNNI reads Q8_0 as unsigned bytes (q + 128); AVX2 keeps q signed for its sign trick.
    let flip = if F == Q8_0 && L == GROUP { 0x8080_8080u32 } else { 0 };
    for r in 0..L {
        let row = &bytes[(g * L + r) * rb..(g * L + r + 1) * rb];
        for (blk, d) in row.as_chunks::<BB>().0.iter().zip(dst.as_chunks_mut::<CS>().0) {
            for k in 0..CS / c {
                let v = u32::from_le_bytes([blk[qs + 4 * k], blk[qs + 4 * k + 1], blk[qs + 4 * k + 2], blk[qs + 4 * k + 3]]) ^ flip;
                d[c * k + 4 * r..c * k + 4 * r + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
    }
}

impl Packed {
    /// `w` for the group kernels in groups of `lanes` rows (GROUP for the VNNI kernels,
    /// GROUP_AVX2 for the AVX2 ones), or None when its format is not a block-sum one or it has
    /// fewer rows. Nothing is read or written yet: the side table is built by `side_table`.
    pub fn new(w: &WeightTensor, lanes: usize) -> Option<Packed> {
        let ty = w.ty;
        let lanes = if lanes == GROUP { GROUP } else { GROUP_AVX2 };
        let format = ty.format().fast.groups.get()?;
        if w.rows() < lanes || w.cols() < QK {
            return None;
        }
        debug_assert_eq!(block_bytes(format as u8), ty.block_bytes());
        debug_assert!(!is_k(format as u8) || ty.block_elems() == QK_K);
        Some(Packed {
            ty,
            format,
            lanes,
            groups: w.rows() / lanes,
            nb: w.cols() / QK,
            row_bytes: w.row_bytes(),
            tensor: w.clone(),
            side: std::sync::OnceLock::new(),
            building: parking_lot::Mutex::new(()),
            copy: std::sync::OnceLock::new(),
            ready: std::sync::atomic::AtomicUsize::new(0),
            writing: parking_lot::Mutex::new(0),
        })
    }

    /// Whether the side table is there, building it (cut from `arena`; `run(n, task)` runs
    /// `task(i)` for every i < n, on any threads) if no one has: the writer thread does so
    /// first thing after the open (`Interleaver`), and a pass that comes first does it itself.
    /// Where another thread is building it, `wait` says whether to wait for it; a pass does
    /// not (false), and runs the row-order kernels for that call instead, the same bits: the
    /// writer runs at the idle priority, and on cores kept busy by other threads a pass
    /// waiting for it could wait without end. False too where the memory for the table cannot
    /// be had: the row-order kernels then serve.
    ///
    /// Why not at the open: the table is fresh memory (a fifth of a Q4_1 matrix), and on a VM
    /// that backs fresh memory slowly after an idle spell, zeroing its pages was three
    /// quarters of a 0.39 s open of SmolLM2-135M Q4_1 (`perf`, `clear_page_erms`), against
    /// 0.04 s right after another open.
    pub fn side_table(&self, arena: &Arena, run: &dyn Fn(usize, &(dyn Fn(usize) + Sync)), wait: bool) -> bool {
        if let Some(side) = self.side.get() {
            return side.is_some();
        }
        let _building = if wait {
            self.building.lock()
        } else {
            match self.building.try_lock() {
                Some(held) => held,
                None => return false,
            }
        };
        // Every builder holds `building`, so this never waits for another one.
        self.side.get_or_init(|| self.build_side(arena, run)).is_some()
    }

    /// Whether the side table has been built (`side_table`).
    pub fn has_side_table(&self) -> bool {
        self.side.get().is_some_and(Option::is_some)
    }

    /// The side table, and for a K format its interleaved copy too, written in the same tasks
    /// (see `write_k_copy_with_side`).
    fn build_side(&self, arena: &Arena, run: &dyn Fn(usize, &(dyn Fn(usize) + Sync))) -> Option<Slab> {
        let (f, lanes, nb, rb) = (self.format, self.lanes, self.nb, self.row_bytes);
        let (st, cs) = (stride(f as u8, lanes), chunk_bytes(f as u8, lanes));
        let (side, ptr) = arena.slab(self.groups * nb * st)?;
        // SAFETY: the slab's range is this call's alone (`Arena::slab`), and nothing reads it
        // before `side_table` stores it.
        let dst = unsafe { std::slice::from_raw_parts_mut(ptr, side.len) };
        let copy = if is_k(f as u8) { arena.slab(self.groups * nb * cs) } else { None };
        // SAFETY: as for the side table: this call's range, read by no one before `ready`
        // passes its groups (below).
        let copy_bytes = copy.as_ref().map(|(slab, ptr)| unsafe { std::slice::from_raw_parts_mut(*ptr, slab.len) });
        let bytes = self.tensor.bytes();
        let per_task = (TASK_BYTES / (lanes * rb)).max(1);
        let pieces: Vec<parking_lot::Mutex<&mut [u8]>> = dst.chunks_mut(per_task * nb * st).map(parking_lot::Mutex::new).collect();
        let copies: Vec<parking_lot::Mutex<&mut [u8]>> =
            copy_bytes.map_or_else(Vec::new, |c| c.chunks_mut(per_task * nb * cs).map(parking_lot::Mutex::new).collect());
        run(pieces.len(), &|t| {
            let mut piece = pieces[t].lock();
            let mut copy = copies.get(t).map(|c| c.lock());
            for (i, dst) in piece.chunks_exact_mut(nb * st).enumerate() {
                let g = t * per_task + i;
                if is_k(f as u8) {
                    let quants = copy.as_deref_mut().map(|c| &mut c[i * nb * cs..(i + 1) * nb * cs]);
                    k_rows(f as u8, lanes, &bytes[g * lanes * rb..(g + 1) * lanes * rb], rb, nb, Some(dst), quants);
                } else {
                    by_format!(side_group, stride, f, lanes, (bytes, rb, g, dst))
                }
            }
        });
        drop((pieces, copies));
        if let Some((slab, _)) = copy {
            self.write_k_copy_with_side(slab);
        }
        Some(side)
    }

    /// Takes a K format's copy, written whole with its side table (`build_side`): the kernels
    /// read only the copy's layout, and a group not in the copy is put in it for every call
    /// (`k_rows`, about ten times the kernel's own time at one activation row), so the copy is
    /// not left to the writer thread, which on busy cores can come to it many steps later. The
    /// stored pages are handed back at once. Nothing else writes the copy meanwhile:
    /// `begin_copy` waits for the side table.
    fn write_k_copy_with_side(&self, slab: Slab) {
        let mut released = self.writing.lock();
        if self.copy.set(slab).is_ok() {
            self.ready.store(self.groups, std::sync::atomic::Ordering::Release);
            self.tensor.release_pages(0..self.rows() * self.row_bytes);
            *released = self.groups;
        }
    }

    /// The side table's bytes; built (`side_table` returned true) before any kernel runs.
    fn side_bytes(&self) -> &[u8] {
        self.side.get().and_then(Option::as_ref).map_or(&[][..], Slab::bytes)
    }

    /// Writes the interleaved copy of the quants (see the module notes) from `arena`, a piece
    /// of about TASK_BYTES at a time: each piece is given to the kernels as soon as it is
    /// written, and its stored pages handed back, so that the process never holds much of a
    /// matrix twice (a pass reading the stored order meanwhile would fault them in again).
    /// Stops, leaving the rest in the stored order, when `stop` is set or the memory cannot be
    /// had. Other threads may write groups of the same copy meanwhile (`write_groups`): each
    /// group is written once, by whoever comes to it first. `before_piece` runs before each
    /// piece (the background writer waits there for the passes, team::make_way).
    pub fn interleave(&self, arena: &Arena, stop: &std::sync::atomic::AtomicBool, before_piece: &mut dyn FnMut()) {
        if !self.begin_copy(arena) {
            return;
        }
        // A piece is written HELP_BYTES at a time, each under `writing`: the writer runs at the
        // idle priority, and a writer that lost its core holding the lock for a whole piece
        // kept the helpers from writing until it had one again.
        let (per_piece, unit) = ((TASK_BYTES / (self.lanes * self.row_bytes)).max(1), (HELP_BYTES / (self.lanes * self.row_bytes)).max(1));
        while !self.is_interleaved() {
            before_piece();
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            let mut left = per_piece;
            while left > 0 && self.write_groups(unit.min(left), true) {
                left = left.saturating_sub(unit);
            }
        }
    }

    /// Whether the copy's memory is there to write into, cut from `arena` by the first call
    /// (false where it cannot be had, or where the side table, which the copy is read with, is
    /// not built: the stored order then serves).
    pub fn begin_copy(&self, arena: &Arena) -> bool {
        if !self.has_side_table() {
            return false;
        }
        let _one = self.writing.lock();
        if self.copy.get().is_none() {
            let cs = chunk_bytes(self.format as u8, self.lanes);
            let Some((slab, _)) = arena.slab(self.groups * self.nb * cs) else { return false };
            let _ = self.copy.set(slab);
        }
        true
    }

    /// Writes up to `max` groups of the copy after those written (`begin_copy` returned true
    /// before), waiting for another writer's groups where `wait`, else doing nothing while
    /// another thread writes (a helper between calls must not wait). Hands back the stored
    /// pages of each TASK_BYTES written, and once the copy is whole, all of them again (for
    /// those that passes reading the stored order faulted in meanwhile). Returns whether it
    /// wrote any group.
    pub fn write_groups(&self, max: usize, wait: bool) -> bool {
        use std::sync::atomic::Ordering;
        let mut released = if wait {
            self.writing.lock()
        } else {
            match self.writing.try_lock() {
                Some(held) => held,
                None => return false,
            }
        };
        let Some(copy) = self.copy.get() else { return false };
        let (f, l, nb, rb) = (self.format, self.lanes, self.nb, self.row_bytes);
        let cs = chunk_bytes(f as u8, l);
        // Only this thread writes groups from `ready` on while it holds `writing`.
        let g0 = self.ready.load(Ordering::Acquire);
        let g1 = (g0 + max).min(self.groups);
        if g0 == g1 {
            return false;
        }
        // SAFETY: groups g0..g1 of the slab lie in it (its size is groups * nb * cs); no one
        // else writes them (`writing` is held), and no one reads them before `ready` passes
        // them below.
        let piece = unsafe { std::slice::from_raw_parts_mut(copy.ptr().add(g0 * nb * cs), (g1 - g0) * nb * cs) };
        let bytes = self.tensor.bytes();
        for (i, dst) in piece.chunks_exact_mut(nb * cs).enumerate() {
            let g = g0 + i;
            if is_k(f as u8) {
                k_rows(f as u8, l, &bytes[g * l * rb..(g + 1) * l * rb], rb, nb, None, Some(dst));
            } else {
                by_format!(interleave_group, chunk_bytes, f, l, (bytes, rb, g, dst))
            }
        }
        self.ready.store(g1, Ordering::Release);
        // A pass that looked at `ready` just before reads these from the page cache again: the
        // same bytes.
        let per_piece = (TASK_BYTES / (l * rb)).max(1);
        if g1 == self.groups {
            self.tensor.release_pages(0..self.rows() * rb);
            *released = g1;
        } else if g1 - *released >= per_piece {
            self.tensor.release_pages(*released * l * rb..g1 * l * rb);
            *released = g1;
        }
        true
    }

    /// Whether the kernels read every group from the interleaved copy.
    pub fn is_interleaved(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::Acquire) == self.groups
    }

    /// Group g's interleaved quants, where they are written.
    fn copy_group(&self, g: usize) -> Option<&[u8]> {
        self.written().group(g)
    }

    /// The part of the interleaved copy written so far, looked at once for a whole call.
    fn written(&self) -> Written<'_> {
        let ready = self.ready.load(std::sync::atomic::Ordering::Acquire);
        let cs = self.nb * chunk_bytes(self.format as u8, self.lanes);
        // Groups below `ready` are no longer written (`interleave`).
        let bytes = if ready == 0 { &[][..] } else { self.copy.get().map_or(&[][..], |c| c.range(0, ready * cs)) };
        Written { bytes, group_bytes: cs }
    }

    /// Rows the group kernels take (the rest take the row-order ones).
    pub fn rows(&self) -> usize {
        self.groups * self.lanes
    }
}

/// The groups of an interleaved copy written when it was looked at (`Packed::written`).
#[derive(Clone, Copy)]
struct Written<'a> {
    bytes: &'a [u8],
    group_bytes: usize,
}

impl<'a> Written<'a> {
    /// Group g's interleaved quants, if they were written.
    #[inline(always)]
    fn group(self, g: usize) -> Option<&'a [u8]> {
        self.bytes.get(g * self.group_bytes..(g + 1) * self.group_bytes)
    }
}

impl Packed {
    /// Whether `run` reads the activations' 16-bit copy (`Q8Rows::fill_q16`): the AVX2 Q8_0
    /// kernel over the interleaved copy does.
    pub fn reads_q16(&self) -> bool {
        self.format == GroupFormat::Q8_0 && self.lanes == GROUP_AVX2
    }

    /// Row j's stored bytes (j < `rows()`), rebuilt from the side table and the interleaved
    /// copy into `row`; false where its group is not in the copy yet.
    /// A K format's rows are not rebuilt (its copy holds decoded blocks): false.
    fn stored_row(&self, j: usize, row: &mut Vec<u8>) -> bool {
        let (f, l) = (self.format as u8, self.lanes);
        if is_k(f) {
            return false;
        }
        let (st, cs, c) = (stride(f, l), chunk_bytes(f, l), 4 * l);
        let (g, r, bb) = (j / l, j % l, block_bytes(f));
        let Some(quants) = self.copy_group(g) else { return false };
        row.clear();
        row.resize(self.nb * bb, 0);
        let side = &self.side_bytes()[g * self.nb * st..(g + 1) * self.nb * st];
        let flip = if f == Q8_0 && l == GROUP { 0x80 } else { 0 };
        let qs = quants_at(f);
        for ((blk, d), q) in row.chunks_exact_mut(bb).zip(side.chunks_exact(st)).zip(quants.chunks_exact(cs)) {
            blk[..2].copy_from_slice(&d[2 * r..2 * r + 2]);
            for k in 0..cs / c {
                for i in 0..4 {
                    blk[qs + 4 * k + i] = q[c * k + 4 * r + i] ^ flip;
                }
            }
            if has_min(f) {
                blk[2..4].copy_from_slice(&d[2 * l + 2 * r..2 * l + 2 * r + 2]);
            }
            if has_masks(f) {
                let mut qh = 0u32;
                for k in 0..4 {
                    for (half, first) in [(0, 4 * k), (1, 16 + 4 * k)] {
                        let m = d[masks_at(f, l) + l / 2 * (2 * k + half) + r / 2];
                        qh |= (((m >> (4 * (r % 2))) & 0xF) as u32) << first;
                    }
                }
                let at = qh_at(f);
                blk[at..at + 4].copy_from_slice(&qh.to_le_bytes());
            }
        }
        true
    }
}

thread_local! {
    /// A stored row rebuilt for `row_f32`, reused across calls.
    static ROW: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl PreparedMatrix for Packed {
    /// Where the copy is written, embedding rows are read from it, so that the stored pages
    /// handed back are not faulted in again one row at a time; elsewhere from the stored rows.
    fn row_f32(&self, r: usize, dst: &mut [f32]) -> bool {
        if r >= self.rows() {
            return false;
        }
        let mut row = ROW.take();
        let rebuilt = self.stored_row(r, &mut row);
        if rebuilt {
            dequantize_row(self.ty, &row, dst);
        }
        ROW.set(row);
        rebuilt
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Packed {
    /// Groups g0..g1 against the m activation rows of `x` (`n_in` wide, `cb` filled: `Q8Rows::quantize` or
    /// `quantize_for_packed`): the result of weight row g0 * lanes + j and activation row r
    /// goes to `out + r * stride + j`, a group's lanes in one store. With `stride` the
    /// output's width that is its place in a (rows, n_out) result, so that nothing is moved
    /// afterwards.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C, and for 16 lanes also AVX-512 F, VL, BW, DQ and VNNI
    /// (`Int8Isa::Avx512Vnni`). For every r < m, `out + r * stride .. + (g1 - g0) * lanes` is
    /// valid for writes and written by no one else during the call.
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run(&self, g0: usize, g1: usize, x: &Q8Rows, n_in: usize, m: usize, out: *mut f32, stride: usize) {
        assert!(g1 <= self.groups && self.has_side_table(), "groups {g0}..{g1} of {} without their side table", self.groups);
        // SAFETY: the caller's promise.
        unsafe {
            if self.lanes == GROUP {
                kernels::vnni::run(self, g0, g1, x, n_in, m, out, stride)
            } else {
                kernels::avx2::run(self, g0, g1, x, n_in, m, out, stride)
            }
        }
    }
}
