//! The fast CPU kernels (`CpuBackend<HostBackend>` is the host backend): weight rows split into tiles shared by the calling thread and a few
//! helpers (team.rs); each weight row is dotted with every input row by a fused kernel that reads
//! the row's stored bytes directly (row_dot.rs). One output element is one kernel computation
//! over the whole reduction, so neither the tiling, nor the thread that runs a tile, nor the
//! batch size changes its bits.
//!
//! Two precisions: `exact` keeps the activations f32 (row_dot.rs's kernels, every weight type);
//! `fast` rounds each activation row to 8 bits per 32-element block once per matmul and runs
//! the integer kernels (int8.rs) against the block-quantized weights, the float weight types
//! staying on the f32 kernels. The weights are the mapped bytes in both, but for one case: at
//! `fast` on x86-64, the matrices of the 32-element block formats run through group kernels,
//! sixteen rows at a time for AVX-512 VNNI, eight for AVX2 (packed/). The open reads none of
//! their bytes; after it, a thread of the backend's own copies each matrix's block headers into
//! a side table (a pass that needs one first builds it itself), then writes an interleaved copy
//! of each matrix. Until a matrix's copy is written the kernels interleave its stored rows in
//! registers; they take the copy up a piece at a time, handing the mapped pages back so that
//! the process holds one copy. That
//! thread runs at the scheduler's idle priority (packed/'s `background_priority`) once the side
//! tables are built, and waits while a prefill runs on every core (`WIDE_ROWS`); the pool's
//! helpers write pieces of the copies between calls (team.rs's idle work), since passes on
//! every core leave that thread no core; and a prefill stages the groups not copied yet for
//! itself (packed/kernels.rs). The bits are those of every other
//! kernel path, whichever order a pass reads.

pub mod act;
mod dot;
pub mod int8;
pub mod row_dot;
mod team;

// The kernels, one function per weight type and instruction set; the types' rows (quant/) name
// them.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2_int8;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2_k;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon_int8;
pub mod packed;
pub(crate) mod portable;

use parking_lot::Mutex;

use crate::backend::attention::{self, AttentionArgs};
use crate::backend::{pass, Precision};
use crate::backend::cpu::{CpuWeight, Kernels, Prepared};
use crate::error::{Error, Result, Status};
use crate::pack::tensor::WeightTensor;
use crate::sample;
use crate::semantics::Activation;

pub use dot::dot;
use int8::{Int8Isa, Int8Kernel, Q8Rows, QTile};
use packed::Packed;
use row_dot::{block_sums, Isa, RowKernel};
use team::Team;

/// Multiply-adds per task (some 20 us on one core): small enough that a thread losing its core
/// in the middle of a task holds up the end of the call by little, large enough that handing
/// out tasks (an atomic add and a lock) costs nothing in comparison.
const TASK_MACS: usize = 1 << 18;
/// Multiply-adds per task when there are several activation rows (prefill): a task sweeps every
/// activation row, a group (8 rows of 640 f32: 20 KiB) staying in L1 while the task's weight rows
/// pass, so more weight rows per task mean fewer reloads of the activations from L2. With the
/// smaller size a 640-wide Gemma3 projection got 3 weight rows per task, and a 2048-wide one 1.
/// Timed on Gemma3-270m's shapes, this size cut the K-quant matmuls by a tenth or more; the
/// fewest-tasks rule below still keeps every thread busy.
const PREFILL_TASK_MACS: usize = 1 << 22;
/// Matmuls and attention over this many rows or more (prefill) are wide (team::wide): while they
/// run on every core, the thread writing the interleaved copies waits between its pieces. Two
/// threads on two cores prefilled Gemma3-270m Q4_0 (128 tokens) in 134-176 ms while the copies
/// were written beside them and in about 83 ms afterwards; with the writer waiting (and the
/// groups not yet copied staged per call, packed/kernels.rs), in 85-125 ms.
const WIDE_ROWS: usize = 16;
/// Elements per run of a split activation (`gated_activation`): below two of them it stays on
/// the calling thread.
const ACT_CHUNK: usize = 4096;
/// Values per task of a split `argmax` (a whole number of `sample::ARGMAX_BLOCK`s): below two
/// of them it stays on the calling thread.
const ARGMAX_RUN: usize = 32 * sample::ARGMAX_BLOCK;
/// Fewest tasks per thread, so that every thread gets work and a slow one leaves its share to
/// the others.
const MIN_TASKS_PER_THREAD: usize = 4;
/// Multiply-adds below which a matmul runs on the calling thread alone: waking a helper costs
/// a few microseconds, what some 30k multiply-adds take. Results are the same bits either way.
const SERIAL_MACS: usize = 1 << 15;

pub struct HostBackend {
    team: Team,
    /// The row kernels' instruction set: the CPU's best, or one forced by tests so that every
    /// path (AVX2 on an AVX-512 machine, portable everywhere) runs through the whole backend.
    isa: Isa,
    /// `Fast` lets matmuls against block-quantized weights round the activations to 8 bits
    /// (int8.rs); `Exact` keeps them f32.
    precision: Precision,
    /// The matrices prepared for the group kernels so far (packed/), by their bytes' address
    /// and length: a tied embedding and output matrix are prepared twice and packed once.
    packed: Mutex<Vec<(usize, usize, std::sync::Weak<Packed>)>>,
    /// Writes their interleaved copies after the open, and holds the memory they are cut from.
    interleaver: packed::Interleaver,
}

impl HostBackend {
    /// `threads` threads in all, the calling thread included; 0 means one per core; more than
    /// `MAX_THREADS` is refused. The helpers come from the process's shared pool (team.rs).
    pub fn new(threads: usize) -> Result<HostBackend> {
        HostBackend::with_isa(threads, Isa::best())
    }

    /// As `new`, with the row kernels of `isa`; an instruction set this CPU lacks is refused.
    pub fn with_isa(threads: usize, isa: Isa) -> Result<HostBackend> {
        if !isa.available() {
            return Err(Error::new(Status::ErrBackendUnavailable, format!("this CPU cannot run the {isa:?} kernels")));
        }
        Ok(HostBackend {
            team: Team::new(threads)?,
            isa,
            precision: Precision::Exact,
            packed: Mutex::new(Vec::new()),
            interleaver: packed::Interleaver::new(true),
        })
    }

    /// The same kernels at `precision`.
    pub fn with_precision(self, precision: Precision) -> HostBackend {
        HostBackend { precision, ..self }
    }

    /// With `background` false, the interleaved copies (packed/) are written only by
    /// `interleave_now`, so that tests can run the group kernels over the stored order and
    /// over the copies in turn. Call it before preparing any matrix.
    pub fn with_background_interleave(self, background: bool) -> HostBackend {
        HostBackend { interleaver: packed::Interleaver::new(background), ..self }
    }

    /// Writes every interleaved copy not yet written, on the calling thread.
    pub fn interleave_now(&self) {
        self.interleaver.finish();
    }

    pub fn threads(&self) -> usize {
        self.team.threads()
    }

    /// Weight rows per task for `n_out` x `n_in` weights and `rows` activation rows, a
    /// multiple of `align`.
    fn tile_rows(&self, n_out: usize, n_in: usize, rows: usize, align: usize) -> usize {
        let macs = if rows > 1 { PREFILL_TASK_MACS } else { TASK_MACS };
        let tile = (macs / (n_in * rows)).min(n_out.div_ceil(self.threads() * MIN_TASKS_PER_THREAD)).max(1);
        tile.next_multiple_of(align)
    }

    /// The rows per group `prepare` packs matrices in (packed/), if it does: at `fast`, 16
    /// for the VNNI kernels, 8 for the AVX2 ones.
    fn packs(&self) -> Option<usize> {
        match (self.precision, Int8Isa::for_isa(self.isa)) {
            (Precision::Fast, Int8Isa::Avx512Vnni) => Some(packed::GROUP),
            (Precision::Fast, Int8Isa::Avx2) => Some(packed::GROUP_AVX2),
            _ => None,
        }
    }

    /// `task(i)` for i in 0..n, on the team (or on this thread alone when `serial`). A rider
    /// left by `matmul_prepared_with` runs first among the tasks, on the team.
    fn for_tasks(&self, n: usize, serial: bool, task: impl Fn(usize) + Sync) {
        if let Some((rn, rider)) = RIDER.take() {
            // SAFETY: `matmul_prepared_with` set the rider for the length of its call, which
            // encloses this one, and its guard clears it before the closure goes away.
            let rider = unsafe { &*rider };
            let both = |i: usize| if i < rn { rider(i) } else { task(i - rn) };
            return self.run_list(rn + n, false, &both);
        }
        self.run_list(n, serial, &task)
    }

    /// `for_tasks` without a rider.
    fn run_list(&self, n: usize, serial: bool, task: &(dyn Fn(usize) + Sync)) {
        if serial || self.threads() == 1 {
            // One relaxed load per task, as on the team (team.rs): a long call stops early
            // when the pass is aborted.
            let stop = pass::current();
            for i in 0..n {
                if stop.as_ref().is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed)) {
                    pass::note_cut_short();
                    return;
                }
                task(i);
            }
            return;
        }
        self.team.run(n, task);
    }

    /// `task(i, chunk i)` for the consecutive `chunk`-element pieces of `buf`, on the team (or
    /// on this thread alone when `serial`).
    fn for_chunks(&self, buf: &mut [f32], chunk: usize, serial: bool, task: impl Fn(usize, &mut [f32]) + Sync) {
        let chunk = chunk.max(1);
        let shared = SharedOut { ptr: buf.as_mut_ptr(), len: buf.len() };
        self.for_tasks(buf.len().div_ceil(chunk), serial, |i| {
            // (The whole struct, so that the closure captures it and not its raw pointer.)
            let shared = &shared;
            let (a, b) = (i * chunk, ((i + 1) * chunk).min(shared.len));
            // SAFETY: a < b <= len for i below the task count, so the piece lies in `buf`; task
            // i alone gets piece i, and `buf` stays borrowed until every task has ended.
            task(i, unsafe { std::slice::from_raw_parts_mut(shared.ptr.add(a), b - a) })
        });
    }
}

/// Task boundaries over `units` (groups of weight rows) into `bounds` (0, ..., units): tasks
/// of `cap` units while more than two rounds of them are left for `threads` threads, then
/// tasks of a `2 * threads`-th of what is left, down to one unit, so that a thread that
/// finishes first waits for little at the end of the call. With tasks of one size the last
/// one, up to a seventh of a 576-row projection, was often left to one thread (in a verify at
/// 2 threads the caller spent a tenth of its time waiting for it; `perf`). Which rows a task
/// takes never changes what they compute. Only the group kernels (x86_64) split this way.
#[cfg(target_arch = "x86_64")]
fn taper(bounds: &mut Vec<usize>, units: usize, cap: usize, threads: usize) {
    let cap = cap.max(1);
    bounds.clear();
    bounds.push(0);
    let mut at = 0;
    while at < units {
        let left = units - at;
        let take = if threads <= 1 || left > 2 * threads * cap { cap } else { left.div_ceil(2 * threads).min(cap) };
        at += take.max(1).min(left);
        bounds.push(at);
    }
}

/// Whether `a` and `b` hold the same f32 bits (a NaN equal to itself, 0.0 unequal to -0.0).
#[cfg(target_arch = "x86_64")]
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.chunks(64).zip(b.chunks(64)).all(|(a, b)| a.iter().zip(b).fold(0, |d, (x, y)| d | (x.to_bits() ^ y.to_bits())) == 0)
}

/// `out` shared by the tasks of one matmul, each writing its own columns (`tiled`).
struct SharedOut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the tasks that share it write disjoint elements (`tiled`'s column ranges), and the
// matmul holds `out` mutably borrowed until they have all finished.
unsafe impl Sync for SharedOut {}

/// A task list's pointer with its lifetime erased (`RIDER`).
type RiderPtr = *const (dyn Fn(usize) + Sync + 'static);

/// Clears `RIDER` when the call that set it ends, also by a panic.
struct RiderGuard;

impl Drop for RiderGuard {
    fn drop(&mut self) {
        RIDER.set(None);
    }
}

thread_local! {
    /// Tasks to run among the next `for_tasks` call's (`matmul_prepared_with`): their count and
    /// the task.
    static RIDER: std::cell::Cell<Option<(usize, RiderPtr)>> = const { std::cell::Cell::new(None) };
    /// The calling thread's rounded activations (the `fast` matmuls), reused across calls.
    static Q8_SCRATCH: std::cell::RefCell<Q8Rows> = std::cell::RefCell::new(Q8Rows::default());
    /// The packed matmuls' rounded activations (`matmul_packed`), with the rows they were
    /// rounded from.
    static PACKED_Q8: std::cell::RefCell<(Vec<f32>, Q8Rows)> = std::cell::RefCell::new(Default::default());
    /// A task's matmul results before they move into place (`tiled`), reused across calls.
    static TILE_OUT: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The f32 matmuls' block sums of the activation rows, reused across calls.
    static BLOCK_SUMS: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
    /// A matmul's task boundaries (`taper`), reused across calls.
    static TASK_BOUNDS: std::cell::Cell<Vec<usize>> = const { std::cell::Cell::new(Vec::new()) };
    /// A split `argmax`'s block maxima, reused across calls.
    static MAXIMA: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// An attention task's results before they move into place, reused across calls.
    static GROUP_OUT: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl HostBackend {
    /// The `fast` matmul: the activation rows rounded to 8 bits once (int8.rs), then the
    /// integer kernel over tiles of weight rows, split as the f32 matmul splits them.
    fn matmul_int8(&self, w: &WeightTensor, kernel: &Int8Kernel, x: &[f32], rows: usize, out: &mut [f32]) {
        let (n_in, rb) = (w.cols(), w.row_bytes());
        Q8_SCRATCH.with_borrow_mut(|q8| {
            q8.quantize_for(x, n_in, kernel);
            let q8 = &*q8;
            self.tiled(w, rows, 1, out, |j0, j1, chunk| {
                kernel.run(QTile { w: &w.bytes()[j0 * rb..j1 * rb], row_bytes: rb, n_in, x: q8, m: rows, out: chunk })
            });
        })
    }

    /// The `fast` matmul over a packed matrix: tiles of whole groups take the VNNI kernels
    /// (packed/), the rows after the last group the row-order ones, the same bits.
    #[cfg(target_arch = "x86_64")]
    fn matmul_packed(&self, w: &WeightTensor, p: &Packed, kernel: &Int8Kernel, x: &[f32], rows: usize, out: &mut [f32]) {
        let (n_out, n_in, rb) = (w.rows(), w.cols(), w.row_bytes());
        let tile = self.tile_rows(n_out, n_in, rows, p.lanes);
        let serial = n_out * n_in * rows <= SERIAL_MACS;
        assert!(out.len() >= rows * n_out);
        let mut bounds = TASK_BOUNDS.take();
        taper(&mut bounds, n_out.div_ceil(p.lanes), tile / p.lanes, if serial { 1 } else { self.threads() });
        let shared = &SharedOut { ptr: out.as_mut_ptr(), len: out.len() };
        PACKED_Q8.with_borrow_mut(|(from, q8)| {
            // A layer's q, k and v projections read one normed input, and its gate and up
            // another: the rounding is a function of the rows' bits alone, so rows equal bit for
            // bit to the last packed matmul's on this thread reuse its result (a twentieth of the
            // caller's own time in a verify at 2 threads went to rounding).
            if !same_bits(from, x) {
                q8.quantize_for_packed(x, n_in);
                from.clear();
                from.extend_from_slice(x);
            }
            // One row keeps the sign trick (packed/kernels.rs), which does not read them.
            if p.reads_q16() && rows > 1 {
                q8.fill_q16();
            }
            let q8 = &*q8;
            // Task t: weight rows j0..j1, a multiple of the lanes from j0; the packed kernels
            // store each result in its place in `out` (rows, n_out), so that nothing is moved
            // afterwards (`tiled`'s transposition took a twentieth of a verify).
            let bounds = &bounds;
            self.for_tasks(bounds.len() - 1, serial, |t| {
                let (j0, j1) = (bounds[t] * p.lanes, (bounds[t + 1] * p.lanes).min(n_out));
                let split = j1.min(p.rows()).max(j0);
                if split > j0 {
                    // SAFETY: `matmul_prepared` runs a packed matrix only where `packs` gives its
                    // lanes, so the integer kernels are the ones its layout is for (16: VNNI,
                    // 8: AVX2), which `Int8Isa::available` found this CPU runs; j0 is a
                    // multiple of the lanes (the tiles are), so j0..split is whole groups. Row r's
                    // run r * n_out + j0 .. r * n_out + split lies below rows * n_out <= len
                    // (asserted), and columns j0..j1 belong to this task alone.
                    unsafe { p.run(j0 / p.lanes, split / p.lanes, q8, n_in, rows, shared.ptr.add(j0), n_out) };
                }
                if j1 > split {
                    // The rows after the last group: the row-order kernel, laid out (weight rows,
                    // rows), then into place.
                    let mut buf = TILE_OUT.take();
                    buf.resize((j1 - split) * rows, 0.0);
                    kernel.run(QTile { w: &w.bytes()[split * rb..j1 * rb], row_bytes: rb, n_in, x: q8, m: rows, out: &mut buf });
                    for (jj, src) in buf.chunks_exact(rows).enumerate() {
                        for (r, &v) in src.iter().enumerate() {
                            // SAFETY: r < rows and split + jj < j1 <= n_out: below rows * n_out;
                            // this task's column.
                            unsafe { *shared.ptr.add(r * n_out + split + jj) = v };
                        }
                    }
                    TILE_OUT.set(buf);
                }
            });
        });
        TASK_BOUNDS.set(bounds);
    }

    /// `run(j0, j1, chunk)` over tiles of consecutive weight rows j0..j1 (j0 a multiple of
    /// `align`), the chunk laid out (weight rows, rows); the results land in `out` as (rows,
    /// n_out).
    fn tiled(&self, w: &WeightTensor, rows: usize, align: usize, out: &mut [f32], run: impl Fn(usize, usize, &mut [f32]) + Sync) {
        let (n_out, n_in) = (w.rows(), w.cols());
        let tile = self.tile_rows(n_out, n_in, rows, align);
        let serial = n_out * n_in * rows <= SERIAL_MACS;
        // Tile t: weight rows t * tile.., into a chunk laid out (weight rows, rows).
        let task = |t: usize, chunk: &mut [f32]| {
            let (j0, n) = (t * tile, chunk.len() / rows);
            run(j0, j0 + n, chunk);
        };
        if rows == 1 {
            // One activation row: the output is already in weight-row order.
            self.for_chunks(out, tile, serial, task);
            return;
        }
        // Each task computes its tile into a buffer of its thread laid out (weight rows, rows),
        // L1-sized (PREFILL_TASK_MACS), then moves it into its own columns of `out` (rows,
        // n_out): the transposition runs on every thread and from the cache, where moving one
        // (n_out, rows) buffer afterwards ran on one thread and took 5% of a prefill.
        let n_tiles = n_out.div_ceil(tile);
        let shared = SharedOut { ptr: out.as_mut_ptr(), len: out.len() };
        assert!(shared.len >= rows * n_out);
        self.for_tasks(n_tiles, serial, |t| {
            let (j0, j1) = (t * tile, ((t + 1) * tile).min(n_out));
            let mut buf = TILE_OUT.take();
            buf.resize((j1 - j0) * rows, 0.0);
            run(j0, j1, &mut buf);
            // (The whole struct, so that the closure captures it and not its raw pointer.)
            let shared = &shared;
            for m in 0..rows {
                // SAFETY: m < rows and j0 <= j1 <= n_out, so the run m * n_out + j0 .. m *
                // n_out + j1 lies below rows * n_out <= len (asserted above); columns j0..j1
                // belong to this task's tile alone, so no other task writes the run.
                let dst = unsafe { std::slice::from_raw_parts_mut(shared.ptr.add(m * n_out + j0), j1 - j0) };
                for (o, src) in dst.iter_mut().zip(buf.chunks_exact(rows)) {
                    *o = src[m];
                }
            }
            TILE_OUT.set(buf);
        });
    }
}

impl Kernels for HostBackend {
    fn name(&self) -> &'static str {
        "host"
    }

    fn threads(&self) -> usize {
        self.team.threads()
    }

    fn set_threads(&self, threads: usize) -> Result<()> {
        self.team.set_threads(threads)
    }

    fn precision(&self) -> Precision {
        self.precision
    }

    /// At `fast` on AVX2 without VNNI: 2. A matrix the size of Gemma3-270M's 180 MB Q8_0 output
    /// (`kernel_time avx2`, KT_MIB=180, AMD EPYC, one thread) took 31.5 ns a weight row for 1
    /// activation row, 29.3 for 2 and 42.3 for 3, and Gemma3's output projection after 200
    /// positions 9.2, 9.0 and 12.0 ms (5.5-6.0, 5.4-6.1 and 6.6-6.8 at two threads): a second
    /// row rides on the reading of the weights, a third costs arithmetic. Elsewhere a pass of 9
    /// rows costs about 1.5 of one (VNNI, docs/benchmarks/) or the bound is unmeasured: all rows at once.
    fn rows_for_one(&self) -> usize {
        match self.packs() {
            Some(packed::GROUP_AVX2) => 2,
            _ => usize::MAX,
        }
    }
    /// Elementwise, so split across the team in runs of `ACT_CHUNK` (a multiple of every
    /// kernel's lanes) where there are several of them: at 2 threads, a verify's activations
    /// on the calling thread alone were a twentieth of its time, the helper idle meanwhile.
    fn gated_activation(&self, act: Activation, gate: &mut [f32], up: &[f32]) {
        let one = |gate: &mut [f32], up: &[f32]| {
            // SiLU takes one arithmetic at both precisions (act.rs); GELU's depends on it.
            match (act, self.precision) {
                (Activation::Silu, _) => act::gated_silu(gate, up, self.isa),
                // One arithmetic at both precisions (the experts' activations are a small share).
                (_, Precision::Exact) | (Activation::ClampedSwiglu { .. }, _) => crate::backend::cpu::gated_activation(act, gate, up),
                (_, Precision::Fast) => act::gated_fast(act, gate, up, self.isa),
            }
        };
        let len = gate.len().min(up.len());
        let chunk = len.div_ceil(self.threads()).next_multiple_of(ACT_CHUNK);
        if len <= ACT_CHUNK * 2 || self.threads() == 1 {
            return one(gate, up);
        }
        self.for_chunks(&mut gate[..len], chunk, false, |i, g| one(g, &up[i * chunk..i * chunk + g.len()]));
    }

    /// Split across the team in runs of `ARGMAX_RUN` values where there are two or more: the
    /// threads find the largest value of each of `sample::argmax`'s blocks, and the calling
    /// thread the block the index lies in and the index in it, the same index as
    /// `sample::argmax`.
    fn argmax(&self, x: &[f32]) -> u32 {
        if x.len() < 2 * ARGMAX_RUN || self.threads() == 1 {
            return sample::argmax(x);
        }
        // Every run is searched even while the pass that made `x` is being aborted: the index
        // is taken from the maxima only when all of them are there.
        let _whole = pass::outside();
        MAXIMA.with_borrow_mut(|maxima| {
            maxima.clear();
            maxima.resize(x.len().div_ceil(sample::ARGMAX_BLOCK), f32::NAN);
            self.for_chunks(maxima, ARGMAX_RUN / sample::ARGMAX_BLOCK, false, |i, m| {
                let run = &x[i * ARGMAX_RUN..((i + 1) * ARGMAX_RUN).min(x.len())];
                sample::largest_of_blocks(run, m)
            });
            sample::argmax_of_blocks(x, maxima.iter().copied())
        })
    }

    fn run_tasks(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        self.for_tasks(n, false, task)
    }

    /// The extra tasks ride on the matmul's own call to the team (`for_tasks`), first in its
    /// list: no second hand-off, and the threads share both.
    fn matmul_prepared_with(&self, w: &CpuWeight, x: &[f32], rows: usize, out: &mut [f32], n: usize, task: &(dyn Fn(usize) + Sync)) {
        if n == 0 {
            return self.matmul_prepared(w, x, rows, out);
        }
        let _clear = RiderGuard;
        // SAFETY: only the lifetime changes; the guard clears the pointer before `task` goes away.
        let ptr: RiderPtr = unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), RiderPtr>(task) };
        RIDER.set(Some((n, ptr)));
        self.matmul_prepared(w, x, rows, out);
        // A matmul that ran without the team (nothing to multiply) left it.
        if let Some((n, _)) = RIDER.take() {
            self.for_tasks(n, false, task);
        }
    }

    fn matmul(&self, w: &WeightTensor, x: &[f32], rows: usize, out: &mut [f32]) {
        let _wide = (rows >= WIDE_ROWS).then(team::wide);
        let (n_out, n_in) = (w.rows(), w.cols());
        if rows == 0 || n_out == 0 || n_in == 0 {
            return;
        }
        let (x, out) = (&x[..rows * n_in], &mut out[..rows * n_out]);
        if self.precision == Precision::Fast {
            if let Some(kernel) = Int8Kernel::new(w.ty, Int8Isa::for_isa(self.isa)) {
                return self.matmul_int8(w, &kernel, x, rows, out);
            }
        }
        let kernel = RowKernel::new(w.ty, self.isa);
        // Once per activation row, reused by every weight row (Q4_1's and Q4_K's min terms).
        let mut sums = BLOCK_SUMS.take();
        sums.clear();
        if kernel.needs_block_sums() {
            sums.extend(x.chunks_exact(n_in).flat_map(block_sums));
        }
        let rb = w.row_bytes();
        self.tiled(w, rows, 1, out, |j0, j1, chunk| kernel.dot_rows(&w.bytes()[j0 * rb..j1 * rb], n_in, x, &sums, chunk));
        BLOCK_SUMS.set(sums);
    }

    /// At `fast` on the VNNI kernels, the block-sum formats' matrices of 16 rows or more are
    /// packed (packed/), once per tensor.
    fn prepare(&self, w: &WeightTensor) -> Result<Option<Prepared>> {
        let Some(lanes) = self.packs() else { return Ok(None) };
        if !packed::takes(w.ty) {
            return Ok(None);
        }
        let key = (w.bytes().as_ptr() as usize, w.bytes().len());
        let mut cache = self.packed.lock();
        cache.retain(|(_, _, p)| p.strong_count() > 0);
        if let Some(p) = cache.iter().find(|(a, l, _)| (*a, *l) == key).and_then(|(_, _, p)| p.upgrade()) {
            return Ok(Some(p));
        }
        let Some(p) = Packed::new(w, lanes) else { return Ok(None) };
        let p = std::sync::Arc::new(p);
        cache.push((key.0, key.1, std::sync::Arc::downgrade(&p)));
        self.interleaver.submit(&p);
        Ok(Some(p))
    }

    fn weights_prepared(&self) {
        self.interleaver.start();
    }

    /// Every packed matrix read from its interleaved copy alone.
    fn weights_ready(&self) -> bool {
        self.packed.lock().iter().all(|(_, _, p)| p.upgrade().is_none_or(|p| p.is_interleaved()))
    }

    fn matmul_prepared(&self, w: &CpuWeight, x: &[f32], rows: usize, out: &mut [f32]) {
        let _wide = (rows >= WIDE_ROWS).then(team::wide);
        #[cfg(target_arch = "x86_64")]
        if let Some(p) = w.prepared.as_ref().and_then(|p| p.as_any().downcast_ref::<Packed>()) {
            let (n_out, n_in) = (w.tensor.rows(), w.tensor.cols());
            // The side table, where the writer thread has not built it yet, is built here, on
            // the pass's threads, whole even if the pass is aborted meanwhile: it is kept for
            // every pass after. Where another thread is building it, this call takes the
            // row-order kernels below instead of waiting (`Packed::side_table`).
            let side = || {
                p.has_side_table() || {
                    let _whole = crate::backend::pass::outside();
                    p.side_table(self.interleaver.arena(), &|n, task| self.for_tasks(n, false, task), false)
                }
            };
            if rows > 0 && n_out > 0 && n_in > 0 && self.packs() == Some(p.lanes) && side() {
                if let Some(kernel) = Int8Kernel::new(w.tensor.ty, Int8Isa::for_isa(self.isa)) {
                    return self.matmul_packed(&w.tensor, p, &kernel, &x[..rows * n_in], rows, &mut out[..rows * n_out]);
                }
            }
        }
        self.matmul(&w.tensor, x, rows, out)
    }

    /// The queries of each KV head are taken a few at a time (one task each), so that a tile of
    /// keys read once serves all of them (attention.rs's `group`); each (row, head) result has
    /// the arithmetic of attention.rs's `head`, whatever the grouping.
    fn attention(&self, a: &AttentionArgs, q: &[f32], rows: usize, out: &mut [f32]) {
        let _wide = (rows >= WIDE_ROWS).then(team::wide);
        let (d, nh, nkv) = (a.shape.head_dim, a.shape.n_heads, a.shape.n_kv_heads);
        if d == 0 || nh == 0 || nkv == 0 {
            return;
        }
        let out = &mut out[..rows * nh * d];
        // Scores and values over the visible keys: below a few thousand multiply-adds per head
        // in all, helpers cost more than they save.
        let visible = a.shape.window.map_or(a.keys, |w| w.min(a.keys));
        let serial = rows * nh * visible * d * 2 <= SERIAL_MACS;
        // Query i of KV head g is row i / per, head g * per + i % per. Tasks of `take` queries:
        // as many as fit a group, but at least two per thread where there are that many. On one
        // thread a task has every query of its KV head (up to a group): each task reads the
        // layer's keys and values once, and on Gemma3-270m (one KV head, 256 dims) at 460
        // positions that is 0.9 MB a layer, read 3 times per layer by a verify of 8 drafts (36
        // queries) in tasks of 16, and twice by a decode step in tasks of 2.
        let per = nh / nkv;
        let queries = rows * per;
        let spread = if self.threads() == 1 { queries } else { nkv * queries / (2 * self.threads()) };
        // Then evened out: a KV head's 27 queries (a verify of 8 on SmolLM2 at 2 threads) in
        // tasks of 20 and 7 left one thread 47 queries and the other 34; in 14 and 13, 41 and 40.
        let tasks_per_head = queries.div_ceil(spread.clamp(1, attention::GROUP_QUERIES));
        let take = queries.div_ceil(tasks_per_head);
        let shared = &SharedOut { ptr: out.as_mut_ptr(), len: out.len() };
        self.for_tasks(nkv * tasks_per_head, serial, |t| {
            let (g, i0) = (t / tasks_per_head, t % tasks_per_head * take);
            let i1 = (i0 + take).min(queries);
            let mut list = [(0usize, 0usize); attention::GROUP_QUERIES];
            for (l, i) in list.iter_mut().zip(i0..i1) {
                *l = (i / per, g * per + i % per);
            }
            let list = &list[..i1 - i0];
            let mut outs = GROUP_OUT.with_borrow_mut(std::mem::take);
            outs.resize(list.len() * d, 0.0);
            // The same bits on every path where the CPU has AVX2 and FMA, Portable's too
            // (HostArith's `dot` takes the same products there; attention.rs, dot.rs); Avx512's
            // 512-bit registers halve the instructions of the products and value sums.
            #[cfg(target_arch = "x86_64")]
            if self.isa == Isa::Avx512 {
                // SAFETY: Avx512 was checked available at construction (`with_isa`): AVX2, FMA
                // and AVX-512 F and VL (row_dot.rs's `Isa::available`), the features
                // `group_avx512` and `Avx512Arith` are compiled for.
                unsafe { attention::group_avx512(a, q, g, list, &mut outs, Avx512Arith(())) }
            } else if self.isa != Isa::Portable {
                // SAFETY: an Isa other than Portable was checked available at construction
                // (`with_isa`), and on x86-64 both imply AVX2 and FMA (row_dot.rs's
                // `Isa::available`), the features `group_avx2` and `Avx2Arith` are compiled for.
                unsafe { attention::group_avx2(a, q, g, list, &mut outs, Avx2Arith(())) }
            } else {
                attention::group(a, q, g, list, &mut outs, HostArith);
            }
            #[cfg(not(target_arch = "x86_64"))]
            attention::group(a, q, g, list, &mut outs, HostArith);
            for (&(r, h), o) in list.iter().zip(outs.chunks_exact(d)) {
                let at = r * nh * d + h * d;
                assert!(at + d <= shared.len);
                // SAFETY: in bounds (asserted); each (row, head) belongs to one task, so the
                // tasks write disjoint elements, and `out` stays borrowed until they all end.
                unsafe { std::ptr::copy_nonoverlapping(o.as_ptr(), shared.ptr.add(at), d) };
            }
            GROUP_OUT.with_borrow_mut(|b| *b = outs);
        });
    }
}

/// attention.rs's arithmetic on the host: dot.rs's `dot` (AVX2 and FMA where the CPU has them,
/// whichever kernels are chosen, so every path gets the same products).
#[derive(Clone, Copy)]
struct HostArith;

impl attention::Arith for HostArith {
    fn dot(&self, a: &[f32], b: &[f32]) -> f32 {
        dot(a, b)
    }
}

/// `HostArith` with the AVX2 products called directly, so that they inline into
/// `group_avx2`: made only where the CPU has AVX2 and FMA (`HostBackend::attention`; the
/// private field keeps it from being made elsewhere).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx2Arith(());

#[cfg(target_arch = "x86_64")]
impl attention::Arith for Avx2Arith {
    #[inline(always)]
    fn dot(&self, a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: an Avx2Arith exists only on a CPU with AVX2 and FMA; `dot` itself calls
        // `dot_avx2_fma` there, so the bits are HostArith's.
        unsafe { dot::dot_avx2_fma(a, b) }
    }

    #[inline(always)]
    fn dot8(&self, q: &[f32], k: &[f32], stride: usize) -> [f32; 8] {
        if q.len() % 32 != 0 {
            return attention::dots8(*self, q, k, stride);
        }
        // SAFETY: as `dot`; dot8_avx2_fma gives dot_avx2_fma's bits (dot.rs).
        unsafe { dot::dot8_avx2_fma(q, k, stride) }
    }

    #[inline(always)]
    fn exp_sub(&self, s: &mut [f32], max: f32) {
        // SAFETY: as `dot`; the 8-lane exponent gives the scalar one's bits (exp.rs).
        unsafe { crate::backend::exp::avx2::exp_sub(s, max) }
    }

    /// Head sizes 64 and 128: at 256 (Gemma3-270m) the transposed products took 5-10% longer
    /// than `dot8` (`examples/attention_time`, 9 rows), each product's two loads no longer paid
    /// for by the tree's shuffles they save.
    #[inline(always)]
    fn transposed_keys(&self, d: usize) -> usize {
        if matches!(d, 64 | 128) { 8 } else { 0 }
    }

    #[inline(always)]
    fn dots_transposed(&self, q: &[f32], kt: &[f32], out: &mut [f32]) {
        // SAFETY: as `dot`; dot8_transposed_avx2 gives dot_avx2_fma's bits (dot.rs).
        unsafe { dot::dots8_transposed_avx2([q], kt, [out]) }
    }

    #[inline(always)]
    fn dots_transposed2(&self, q: [&[f32]; 2], kt: &[f32], out: [&mut [f32]; 2]) {
        // SAFETY: as `dots_transposed`.
        unsafe { dot::dots8_transposed_avx2(q, kt, out) }
    }

    #[inline(always)]
    fn transpose8(&self, keys: [&[f32]; 8], kt: &mut [f32], lanes: usize, first: usize) {
        // SAFETY: as `dot`.
        unsafe { dot::transpose8_avx2(keys, kt, lanes, first) }
    }
}

/// `Avx2Arith` with the eight-key products in 512-bit registers (`dot8_avx512`, the same bits):
/// made only where the CPU has AVX2, FMA and AVX-512 F and VL (`HostBackend::attention`,
/// Isa::Avx512).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx512Arith(());

#[cfg(target_arch = "x86_64")]
impl attention::Arith for Avx512Arith {
    #[inline(always)]
    fn dot(&self, a: &[f32], b: &[f32]) -> f32 {
        Avx2Arith(()).dot(a, b)
    }

    #[inline(always)]
    fn dot8(&self, q: &[f32], k: &[f32], stride: usize) -> [f32; 8] {
        if q.len() % 32 != 0 {
            return Avx2Arith(()).dot8(q, k, stride);
        }
        // SAFETY: an Avx512Arith exists only on a CPU with AVX2, FMA and AVX-512 F and VL;
        // dot8_avx512 gives dot_avx2_fma's bits (dot.rs), as Avx2Arith's do.
        unsafe { dot::dot8_avx512(q, k, stride) }
    }

    #[inline(always)]
    fn exp_sub(&self, s: &mut [f32], max: f32) {
        // SAFETY: as `dot8`; the 16-lane exponent gives the scalar one's bits (exp.rs).
        unsafe { crate::backend::exp::avx512::exp_sub(s, max) }
    }

    /// Head sizes 64, 128 and 256: with 512-bit registers Gemma3-270m's 256 gains too (18.1-18.4
    /// ns per query head and key at 9 rows against 19.3-20.5, `examples/attention_time`).
    #[inline(always)]
    fn transposed_keys(&self, d: usize) -> usize {
        if matches!(d, 64 | 128 | 256) { 16 } else { 0 }
    }

    #[inline(always)]
    fn dots_transposed(&self, q: &[f32], kt: &[f32], out: &mut [f32]) {
        // SAFETY: as `dot8`; dot16_transposed_avx512 gives dot_avx2_fma's bits (dot.rs).
        unsafe { dot::dots16_transposed_avx512([q], kt, [out]) }
    }

    #[inline(always)]
    fn dots_transposed2(&self, q: [&[f32]; 2], kt: &[f32], out: [&mut [f32]; 2]) {
        // SAFETY: as `dots_transposed`.
        unsafe { dot::dots16_transposed_avx512(q, kt, out) }
    }

    #[inline(always)]
    fn transpose8(&self, keys: [&[f32]; 8], kt: &mut [f32], lanes: usize, first: usize) {
        Avx2Arith(()).transpose8(keys, kt, lanes, first)
    }
}
