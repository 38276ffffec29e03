//! Causal attention of a block of query rows against one layer's KV plane. Each (row, head)
//! result is computed alone, in one fixed order, so a row gives the same bits whether it comes
//! alone or inside a batch: its raw scores (`dot`, each key alone), then the softmax over them
//! (`softmax`), then the value sums in key order (`values`). `head` does that for one query;
//! `group` for several queries of one KV head at once, tiling the keys so that a tile, read
//! once from memory, serves every query in L1. A tile only changes when each query's
//! operations run, never which or in what order, so `group` gives `head`'s bits.

use crate::backend::exp::exp_sub_scalar;
use crate::backend::reference::dot_sequential;
use crate::backend::AttentionShape;
use crate::kv::pages::{page_end, PagedPlane};

/// One attention call: its geometry and rules, the layer's KV plane, and where the queries start.
pub struct AttentionArgs<'a> {
    pub shape: AttentionShape,
    /// Keys and values, rows of n_kv_heads * head_dim, in pages (kv/pages.rs): every run of keys
    /// below is split at page boundaries, which changes no operation and no order.
    pub plane: &'a PagedPlane,
    /// Position of the first query row.
    pub first_position: usize,
    /// Keys the plane holds for this call (the queries' own included): the end of what a
    /// query of a bidirectional model (`AttentionShape::causal` false) sees.
    pub keys: usize,
    /// Each query head's sink logit (`Backend::attention`), when the layer has them.
    pub sinks: Option<&'a [f32]>,
}

/// The reference backend's arithmetic: `dot_sequential`, one product after another.
#[derive(Clone, Copy)]
pub struct Sequential;

impl Arith for Sequential {
    fn dot(&self, a: &[f32], b: &[f32]) -> f32 {
        dot_sequential(a, b)
    }
}

/// `q`: (rows, n_heads * head_dim) -> `out`: (rows, n_heads * head_dim).
pub fn attention_scalar(a: &AttentionArgs, q: &[f32], rows: usize, out: &mut [f32]) {
    let qw = a.shape.n_heads * a.shape.head_dim;
    for r in 0..rows {
        for h in 0..a.shape.n_heads {
            let o = &mut out[r * qw + h * a.shape.head_dim..r * qw + (h + 1) * a.shape.head_dim];
            head(a, &q[r * qw + h * a.shape.head_dim..r * qw + (h + 1) * a.shape.head_dim], h, a.first_position + r, o, Sequential);
        }
    }
}

/// The arithmetic a backend lends attention. Each backend keeps one `dot`, so a row's bits
/// never depend on the batch.
pub trait Arith: Copy {
    /// The q.k product.
    fn dot(&self, a: &[f32], b: &[f32]) -> f32;
    /// `dot(q, &k[i * stride..][..q.len()])` for the eight keys i < 8: the same bits, in
    /// whatever way is faster.
    fn dot8(&self, q: &[f32], k: &[f32], stride: usize) -> [f32; 8] {
        dots8(*self, q, k, stride)
    }
    /// `s[i] = expf(s[i] - max)` (exp.rs: the same bits on every path).
    fn exp_sub(&self, s: &mut [f32], max: f32) {
        exp_sub_scalar(s, max)
    }
    /// Keys per call of `dots_transposed` at head size `d`; 0 (the default) where there is none.
    fn transposed_keys(&self, _d: usize) -> usize {
        0
    }
    /// `out[i] = dot(q, key i)` for the `transposed_keys(q.len())` keys whose elements `kt`
    /// holds transposed (element j of key i at `kt[j * transposed_keys(q.len()) + i]`): the
    /// same bits.
    fn dots_transposed(&self, q: &[f32], kt: &[f32], out: &mut [f32]) {
        let n = self.transposed_keys(q.len());
        for (i, o) in out[..n].iter_mut().enumerate() {
            let key: Vec<f32> = (0..q.len()).map(|j| kt[j * n + i]).collect();
            *o = self.dot(q, &key);
        }
    }
    /// `dots_transposed` for two queries of the same length: the same bits, each element of
    /// the keys read once for both.
    fn dots_transposed2(&self, q: [&[f32]; 2], kt: &[f32], out: [&mut [f32]; 2]) {
        let [o0, o1] = out;
        self.dots_transposed(q[0], kt, o0);
        self.dots_transposed(q[1], kt, o1);
    }
    /// Eight keys' elements into `kt` as `dots_transposed` reads them, in lanes
    /// `first..first + 8` of each element's `lanes`.
    fn transpose8(&self, keys: [&[f32]; 8], kt: &mut [f32], lanes: usize, first: usize) {
        for (i, k) in keys.iter().enumerate() {
            for (j, &x) in k.iter().enumerate() {
                kt[j * lanes + first + i] = x;
            }
        }
    }
}

/// Fewest queries of a `group` for which its scores come from keys transposed once per tile
/// (`transposed_scores`): the transposition is shared by the queries, and a decode step's 2 to
/// 4 queries a KV head would pay more for it than they gain.
const TRANSPOSED_QUERIES: usize = 8;

/// `m.dot8` as eight calls of `m.dot`: the default, and what a faster `dot8` falls back to.
#[inline(always)]
pub fn dots8(m: impl Arith, q: &[f32], k: &[f32], stride: usize) -> [f32; 8] {
    std::array::from_fn(|i| m.dot(q, &k[i * stride..i * stride + q.len()]))
}

/// One query head at position `pos`: softmax over the visible keys (max-subtracted, f32, as
/// HF's eager attention), then the probability-weighted sum of values, in key order, with the
/// products of `m`. Both precisions take this arithmetic: a `fast` that changed it (a
/// polynomial exponent, lane sums, fused value sums) fell below llama.cpp's top-1 agreement
/// with `exact` on SmolLM2 (0.953 against 0.959; 0.967 with it unchanged).
pub fn head(a: &AttentionArgs, qh: &[f32], h: usize, pos: usize, out: &mut [f32], m: impl Arith) {
    head_inline(a, qh, h, pos, out, m)
}

#[inline(always)]
fn head_inline(a: &AttentionArgs, qh: &[f32], h: usize, pos: usize, out: &mut [f32], m: impl Arith) {
    let kvh = h / (a.shape.n_heads / a.shape.n_kv_heads);
    let (lo, end) = key_span(a, pos);
    // The buffer is taken out of the thread-local and put back (no allocation) rather than
    // used inside a `with` closure: a closure is compiled without its caller's target
    // features, so an AVX2 caller's value loop would run 4 lanes wide there.
    let mut scores = SCORES.with_borrow_mut(std::mem::take);
    scores.clear();
    scores.resize(end - lo, 0.0);
    raw_scores(a, qh, kvh, lo, end, &mut scores, m);
    softmax(a, &mut scores, h, m);
    out.iter_mut().for_each(|x| *x = 0.0);
    values(a, kvh, lo, end, &scores, out);
    SCORES.with_borrow_mut(|s| *s = scores);
}

/// The keys a query at `pos` sees, first and last + 1. Causal: (pos - window, pos], or every
/// key up to pos. Bidirectional (an encoder, such as EmbeddingGemma): keys k with
/// |pos - k| < window, or every key the plane holds (HF's `_bidirectional_window_overlay`
/// over the sliding layers' window, which Gemma3TextConfig sets to its config value / 2 + 1).
pub fn key_span(a: &AttentionArgs, pos: usize) -> (usize, usize) {
    let lo = match a.shape.window {
        Some(w) if pos + 1 > w => pos + 1 - w,
        _ => 0,
    };
    if a.shape.causal {
        return (lo, pos + 1);
    }
    let end = match a.shape.window {
        Some(w) => pos.saturating_add(w).min(a.keys),
        None => a.keys,
    };
    (lo, end.max(pos + 1))
}

/// Most queries a `group` call takes: every query of a verify of up to 15 drafts on a model with
/// 4 query heads per KV head (Gemma3-270m: 4 x 16 = 64), so that one call reads each key and
/// value once.
pub const GROUP_QUERIES: usize = 64;

/// Several queries of KV head `kvh`: `queries[i]` = (row of the call, query head), all of that
/// KV head, at most GROUP_QUERIES; query i's result into `outs[i * d..(i + 1) * d]`. Each
/// result has `head`'s bits (with the same `m`).
pub fn group(a: &AttentionArgs, q: &[f32], kvh: usize, queries: &[(usize, usize)], outs: &mut [f32], m: impl Arith) {
    group_inline(a, q, kvh, queries, outs, m)
}

/// `group`, compiled for AVX2 and FMA: the value sums run 8 lanes wide instead of baseline
/// x86_64's 4, and an `m` whose products are compiled for the same features is inlined into
/// the score loop (through a function pointer it was a call per key). Every element still gets
/// the same operations in the same order, so the bits are `group`'s with the same `m`.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub fn group_avx2(a: &AttentionArgs, q: &[f32], kvh: usize, queries: &[(usize, usize)], outs: &mut [f32], m: impl Arith) {
    group_inline(a, q, kvh, queries, outs, m)
}

/// `group`, compiled for AVX-512 F as well: the value sums run 16 lanes wide, and an `m` whose
/// products are 512-bit (the host's `Avx512Arith`) is inlined into the score loop. The same
/// operations on every element, in the same order, so `group`'s bits with the same `m`.
///
/// Compiled with AVX-512 VL too (Isa::Avx512 has it): with F alone, a nightly LLVM built with
/// sanitizer coverage (the fuzz build) failed to select the softmax's masked 8-lane maxima.
///
/// # Safety
/// The CPU has AVX2, FMA and AVX-512 F and VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
pub fn group_avx512(a: &AttentionArgs, q: &[f32], kvh: usize, queries: &[(usize, usize)], outs: &mut [f32], m: impl Arith) {
    group_inline(a, q, kvh, queries, outs, m)
}

/// Bytes of keys (and of values) per tile: a quarter of a 32 KiB L1, so that a tile of each
/// stays there while the group's queries pass.
const TILE_BYTES: usize = 8 << 10;

#[inline(always)]
fn group_inline(a: &AttentionArgs, q: &[f32], kvh: usize, queries: &[(usize, usize)], outs: &mut [f32], m: impl Arith) {
    let (d, qw) = (a.shape.head_dim, a.shape.n_heads * a.shape.head_dim);
    let n = queries.len();
    assert!(n <= GROUP_QUERIES && outs.len() >= n * d);
    // Each query's first and last-plus-one key, and where its scores start in `scores`.
    let mut spans = [(0usize, 0usize, 0usize); GROUP_QUERIES];
    let mut total = 0;
    for (span, &(r, _)) in spans.iter_mut().zip(queries) {
        let (lo, end) = key_span(a, a.first_position + r);
        *span = (lo, end, total);
        total += end - lo;
    }
    let spans = &spans[..n];
    let (t_lo, t_hi) = (spans.iter().map(|s| s.0).min().unwrap_or(0), spans.iter().map(|s| s.1).max().unwrap_or(0));
    let tile = (TILE_BYTES / (4 * d.max(1))).max(8) / 8 * 8;
    let qh = |i: usize| {
        let (r, h) = queries[i];
        &q[r * qw + h * d..r * qw + (h + 1) * d]
    };
    // Taken out and put back, as in `head_inline`.
    let mut scores = SCORES.with_borrow_mut(std::mem::take);
    scores.clear();
    scores.resize(total, 0.0);
    if m.transposed_keys(d) > 0 && n >= TRANSPOSED_QUERIES {
        transposed_scores(a, qh, kvh, spans, t_lo..t_hi, tile, &mut scores, m);
    } else {
        each_tile(t_lo..t_hi, tile, spans, |i, keys, at, next| {
            prefetch_share(a, kvh, next, i, n, Plane::Keys);
            raw_scores(a, qh(i), kvh, keys.start, keys.end, &mut scores[at..at + keys.len()], m)
        });
    }
    // `softmax` for each query, with the queries' sums side by side (`key_order_sums`).
    let mut sink_terms = [0.0f32; GROUP_QUERIES];
    for (i, &(lo, end, off)) in spans.iter().enumerate() {
        sink_terms[i] = scale_exp(a, &mut scores[off..off + end - lo], queries[i].1, m);
    }
    let mut sums = [0.0f32; GROUP_QUERIES];
    key_order_sums(&scores, spans, &mut sums);
    if a.sinks.is_some() {
        for (s, t) in sums.iter_mut().zip(sink_terms) {
            *s += t;
        }
    }
    for (&(lo, end, off), &sum) in spans.iter().zip(&sums) {
        divide(&mut scores[off..off + end - lo], sum);
    }
    outs[..n * d].iter_mut().for_each(|x| *x = 0.0);
    each_tile(t_lo..t_hi, tile, spans, |i, keys, at, next| {
        values(a, kvh, keys.start, keys.end, &scores[at..at + keys.len()], &mut outs[i * d..(i + 1) * d]);
        prefetch_share(a, kvh, next, i, n, Plane::Values);
    });
    SCORES.with_borrow_mut(|s| *s = scores);
}

/// `f(i, keys, at, next)` for each tile of `tile` keys in `all`, and in it for each query i
/// (of `spans`: first key, last key + 1, where its scores start) that sees some of the tile:
/// the keys it sees there, where the first one's score is, and the next tile's keys.
#[inline(always)]
fn each_tile(all: std::ops::Range<usize>, tile: usize, spans: &[(usize, usize, usize)], mut f: impl FnMut(usize, std::ops::Range<usize>, usize, std::ops::Range<usize>)) {
    let mut t0 = all.start;
    while t0 < all.end {
        let t1 = (t0 + tile).min(all.end);
        for (i, &(lo, end, off)) in spans.iter().enumerate() {
            let (s, e) = (t0.max(lo), t1.min(end));
            if s < e {
                f(i, s..e, off + s - lo, t1..(t1 + tile).min(all.end));
            }
        }
        t0 = t1;
    }
}

/// `group_inline`'s raw scores with each tile's keys transposed once (`Arith::transpose8`) and
/// the queries' products taken `m.transposed_keys(d)` keys at a time from that
/// (`Arith::dots_transposed`); the keys of a query's span outside whole transposed runs (its
/// first or last few) one at a time. Every score is `m.dot`'s bits, as in `raw_scores`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn transposed_scores<'q>(
    a: &AttentionArgs,
    qh: impl Fn(usize) -> &'q [f32],
    kvh: usize,
    spans: &[(usize, usize, usize)],
    all: std::ops::Range<usize>,
    tile: usize,
    scores: &mut [f32],
    m: impl Arith,
) {
    let d = a.shape.head_dim;
    let lanes = m.transposed_keys(d);
    let tile = tile.next_multiple_of(lanes);
    let key = |t: usize| {
        let (k, _) = a.plane.span(t, t + 1);
        &k[kvh * d..(kvh + 1) * d]
    };
    // Taken out and put back, as in `head_inline`.
    let mut kt = KEYS_T.with_borrow_mut(std::mem::take);
    let mut t0 = all.start;
    while t0 < all.end {
        let t1 = (t0 + tile).min(all.end);
        // Keys t0..whole, in runs of `lanes`, transposed.
        let whole = t0 + (t1 - t0) / lanes * lanes;
        kt.clear();
        kt.resize((whole - t0) * d, 0.0);
        for (g, run) in kt.chunks_exact_mut(lanes * d).enumerate() {
            for first in (0..lanes).step_by(8) {
                let at = t0 + g * lanes + first;
                m.transpose8(std::array::from_fn(|i| key(at + i)), run, lanes, first);
            }
        }
        // The whole runs of query i's keys in this tile.
        let runs = |i: usize| {
            let (lo, end, _) = spans[i];
            let (s, e) = (t0.max(lo), t1.min(end).min(whole));
            if s >= e {
                return 0..0;
            }
            (s - t0).div_ceil(lanes)..(e - t0) / lanes
        };
        let run_at = |i: usize, g: usize| spans[i].2 + t0 + g * lanes - spans[i].0;
        // Queries two by two: the runs both see, in one pass over their keys for both
        // (`dots_transposed2`: a pass of one query loads a key register for each product).
        for i0 in (0..spans.len()).step_by(2) {
            let pair = (i0 + 1 < spans.len()).then_some(i0 + 1);
            let both = pair.map_or(0..0, |i1| {
                let (r0, r1) = (runs(i0), runs(i1));
                r0.start.max(r1.start)..r0.end.min(r1.end)
            });
            if let Some(i1) = pair {
                for g in both.clone() {
                    let run = &kt[g * lanes * d..(g + 1) * lanes * d];
                    m.dots_transposed2([qh(i0), qh(i1)], run, two_runs(scores, run_at(i0, g), run_at(i1, g), lanes));
                }
            }
            for i in std::iter::once(i0).chain(pair) {
                prefetch_share(a, kvh, t1..(t1 + tile).min(all.end), i, spans.len(), Plane::Keys);
                let (lo, end, off) = spans[i];
                let (s, e) = (t0.max(lo), t1.min(end));
                let mut t = s;
                while t < e {
                    let g = (t - t0) / lanes;
                    if t == t0 + g * lanes && t + lanes <= e.min(whole) {
                        if !both.contains(&g) {
                            m.dots_transposed(qh(i), &kt[g * lanes * d..(g + 1) * lanes * d], &mut scores[off + t - lo..off + t - lo + lanes]);
                        }
                        t += lanes;
                    } else {
                        scores[off + t - lo] = m.dot(qh(i), key(t));
                        t += 1;
                    }
                }
            }
        }
        t0 = t1;
    }
    KEYS_T.with_borrow_mut(|b| *b = kt);
}

/// `x[a..a + len]` and `x[b..b + len]`, which do not overlap.
fn two_runs(x: &mut [f32], a: usize, b: usize, len: usize) -> [&mut [f32]; 2] {
    if a < b {
        let (l, r) = x.split_at_mut(b);
        [&mut l[a..a + len], &mut r[..len]]
    } else {
        let (l, r) = x.split_at_mut(a);
        [&mut r[..len], &mut l[b..b + len]]
    }
}

/// `dst[t - t0] = dot(qh, key t)` for keys t0..t1 of KV head `kvh`, page by page: eight keys
/// at once, then four side by side, so that their reductions overlap (each is the same `dot`'s
/// bits as one at a time).
#[inline(always)]
fn raw_scores(a: &AttentionArgs, qh: &[f32], kvh: usize, t0: usize, t1: usize, dst: &mut [f32], m: impl Arith) {
    // A loop, not a closure: a closure is compiled without its caller's target features (see
    // `head_inline`).
    let mut p0 = t0;
    while p0 < t1 {
        let p1 = page_end(p0).min(t1);
        let (k, _) = a.plane.span(p0, p1);
        page_scores(a, qh, kvh, k, &mut dst[p0 - t0..p1 - t0], m);
        p0 = p1;
    }
}

/// `raw_scores` over one page's keys `k` (rows of the plane), into `dst`, one score per row.
#[inline(always)]
fn page_scores(a: &AttentionArgs, qh: &[f32], kvh: usize, k: &[f32], dst: &mut [f32], m: impl Arith) {
    let (d, kvw) = (a.shape.head_dim, a.shape.n_kv_heads * a.shape.head_dim);
    let key = |t: usize| &k[t * kvw + kvh * d..t * kvw + (kvh + 1) * d];
    let n = dst.len();
    let mut t = 0;
    while t + 8 <= n {
        let raw = m.dot8(qh, &k[t * kvw + kvh * d..(t + 7) * kvw + (kvh + 1) * d], kvw);
        dst[t..t + 8].copy_from_slice(&raw);
        t += 8;
    }
    while t + 4 <= n {
        let raw = [m.dot(qh, key(t)), m.dot(qh, key(t + 1)), m.dot(qh, key(t + 2)), m.dot(qh, key(t + 3))];
        dst[t..t + 4].copy_from_slice(&raw);
        t += 4;
    }
    for t in t..n {
        dst[t] = m.dot(qh, key(t));
    }
}

/// Raw scores of query head `h` into probabilities in place: scaled (and capped),
/// max-subtracted, exponentiated (`m.exp_sub`: exp.rs's exponent, libm's `expf` bits on glibc)
/// and normalized, the sum in key order (f32, as HF's eager attention), the head's sink term
/// (when the layer has sinks) added last, as HF's softmax over `cat([scores, sink])`.
#[inline(always)]
fn softmax(a: &AttentionArgs, scores: &mut [f32], h: usize, m: impl Arith) {
    let sink = scale_exp(a, scores, h, m);
    let mut sum = scores.iter().fold(0.0f32, |sum, &s| sum + s);
    if a.sinks.is_some() {
        sum += sink;
    }
    divide(scores, sum);
}

/// `softmax` up to its sum: the scores scaled (and capped), max-subtracted and exponentiated;
/// returns head `h`'s sink term, exp(sink - max) (the maximum taken over the sink too), or 0
/// when the layer has no sinks.
#[inline(always)]
fn scale_exp(a: &AttentionArgs, scores: &mut [f32], h: usize, m: impl Arith) -> f32 {
    // Scaled (and capped) in place, and their maximum: `f32::max` ignores NaN and the maximum
    // of the others does not depend on the order they are taken in, so eight running maxima
    // (no chain through one variable) give the same value. Where two zeros of either sign tie,
    // s - max is the same for every s either way. Whole runs of eight, then the rest: with one
    // loop over both, the maxima were kept in memory, a store and a load on each run's chain
    // (`perf annotate`).
    let mut maxes = [f32::NEG_INFINITY; 8];
    let mut runs = scores.chunks_exact_mut(8);
    for c in &mut runs {
        for (s, m) in c.iter_mut().zip(maxes.iter_mut()) {
            scale_max(a, s, m);
        }
    }
    for (s, m) in runs.into_remainder().iter_mut().zip(maxes.iter_mut()) {
        scale_max(a, s, m);
    }
    let max = maxes.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    match a.sinks.map(|s| s[h]) {
        None => {
            m.exp_sub(scores, max);
            0.0
        }
        Some(sink) => {
            let max = max.max(sink);
            m.exp_sub(scores, max);
            let mut term = [sink];
            m.exp_sub(&mut term, max);
            term[0]
        }
    }
}

/// `scale_exp`'s first step for one score: scaled (and capped) in place, and into its maximum.
#[inline(always)]
fn scale_max(a: &AttentionArgs, s: &mut f32, max: &mut f32) {
    let mut x = *s * a.shape.scale;
    if let Some(cap) = a.shape.softcap {
        x = (x / cap).tanh() * cap;
    }
    *s = x;
    *max = max.max(x);
}

/// `softmax`'s last step: each probability over the sum.
#[inline(always)]
fn divide(scores: &mut [f32], sum: f32) {
    for s in scores.iter_mut() {
        *s /= sum;
    }
}

/// `sums[i]`: the sum of query i's exponentiated scores (`spans` as in `group_inline`), added
/// one after another in key order as `softmax` adds them. A query's sum is a chain of adds,
/// each waiting for the one before; eight queries' chains run side by side here, which changes
/// no operation of any chain (one query at a time, the chain was about a tenth of a verify's
/// attention on SmolLM2: `perf annotate`).
#[inline(always)]
fn key_order_sums(scores: &[f32], spans: &[(usize, usize, usize)], sums: &mut [f32]) {
    for (sp, su) in spans.chunks(8).zip(sums.chunks_mut(8)) {
        // Always eight runs, so that the eight sums stay in registers: lanes past the chunk's
        // queries repeat its first query, and their sums are dropped.
        let runs: [&[f32]; 8] = std::array::from_fn(|j| {
            let &(lo, end, off) = sp.get(j).unwrap_or(&sp[0]);
            &scores[off..off + end - lo]
        });
        let common = runs.iter().map(|r| r.len()).min().unwrap_or(0);
        let heads: [&[f32]; 8] = runs.map(|r| &r[..common]);
        let mut acc = [0.0f32; 8];
        for t in 0..common {
            for j in 0..8 {
                acc[j] += heads[j][t];
            }
        }
        for ((s, x), r) in su.iter_mut().zip(acc).zip(runs) {
            *s = r[common..].iter().fold(x, |x, &e| x + e);
        }
    }
}

/// out += p_t * v_t for keys t0..t1 of KV head `kvh` (`p[t - t0]`), in key order, page by page.
#[inline(always)]
fn values(a: &AttentionArgs, kvh: usize, t0: usize, t1: usize, p: &[f32], out: &mut [f32]) {
    let mut p0 = t0;
    while p0 < t1 {
        let p1 = page_end(p0).min(t1);
        let (_, v) = a.plane.span(p0, p1);
        page_values(a, kvh, v, &p[p0 - t0..p1 - t0], out);
        p0 = p1;
    }
}

/// `values` over one page's values `v` (rows of the plane, one per probability of `p`): for
/// each run of 64 dims the running sums stay in registers across the keys. One multiply then
/// one add per element and key, as a plain loop over keys would do it: the same bits however
/// the keys are split between calls (into pages, tiles or both).
#[inline(always)]
fn page_values(a: &AttentionArgs, kvh: usize, v: &[f32], p: &[f32], out: &mut [f32]) {
    let (d, kvw) = (a.shape.head_dim, a.shape.n_kv_heads * a.shape.head_dim);
    let base = kvh * d;
    // Key t's values of this KV head beside its probability (whole rows of the plane, so that
    // the per-key slicing below checks only offsets fixed for the call).
    let rows = || v[..p.len() * kvw].chunks_exact(kvw).map(|row| &row[base..base + d]).zip(p);
    let mut chunks = out.chunks_exact_mut(VALUE_RUN);
    for (c, oc) in (&mut chunks).enumerate() {
        let mut acc = [0.0f32; VALUE_RUN];
        acc.copy_from_slice(oc);
        for (vt, &p) in rows() {
            let vt: &[f32; VALUE_RUN] = vt[c * VALUE_RUN..(c + 1) * VALUE_RUN].try_into().expect("a run of VALUE_RUN");
            for (x, &v) in acc.iter_mut().zip(vt) {
                *x += p * v;
            }
        }
        oc.copy_from_slice(&acc);
    }
    let tail = chunks.into_remainder();
    let off = d - tail.len();
    for (vt, &p) in rows() {
        for (o, &v) in tail.iter_mut().zip(&vt[off..]) {
            *o += p * v;
        }
    }
}

/// Dims of a head whose value sums one pass over the keys keeps in registers (8 AVX2 registers:
/// 8 independent chains of adds, enough to hide the add latency).
const VALUE_RUN: usize = 64;

/// The keys or the values of a plane (`prefetch_share`).
#[derive(Clone, Copy, PartialEq)]
enum Plane {
    Keys,
    Values,
}

/// Asks for share `i` of `n` of KV head `kvh`'s keys or values `next` (the next tile's), where
/// the plane holds several KV heads: one head's keys then lie a row of the plane apart, a few to
/// a 4 KiB page, and the hardware prefetcher, which starts again at each page, left the loads
/// of a verify's attention waiting (`perf annotate`: a sixth of SmolLM2's in the transposition
/// of keys). Asked for while the tile before is worked on, by each query a share, so that no
/// query's pass waits for them all. A prefetch changes no value. With one KV head (Gemma3) a
/// head's keys are contiguous, and asking was slower. Only x86_64 asks: elsewhere Rust's
/// prefetch intrinsic is not stable, and no other way was measured.
#[inline(always)]
fn prefetch_share(a: &AttentionArgs, kvh: usize, next: std::ops::Range<usize>, i: usize, n: usize, plane: Plane) {
    if !cfg!(target_arch = "x86_64") || a.shape.n_kv_heads < 2 || next.is_empty() {
        return;
    }
    let d = a.shape.head_dim;
    let per = next.len().div_ceil(n.max(1));
    for t in (next.start + i * per)..(next.start + (i + 1) * per).min(next.end) {
        let (k, v) = a.plane.span(t, t + 1);
        let x = if plane == Plane::Keys { &k[kvh * d..(kvh + 1) * d] } else { &v[kvh * d..(kvh + 1) * d] };
        #[cfg(target_arch = "x86_64")]
        for j in (0..x.len()).step_by(16) {
            // SAFETY: a prefetch of an address inside `x`; it never faults.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(x.as_ptr().add(j).cast()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = x;
    }
}

thread_local! {
    /// Each thread's score buffer, reused by every head it computes: no allocation per head.
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Each thread's transposed keys of a tile (`transposed_scores`).
    static KEYS_T: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(seed: &mut u64, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| ((crate::sample::next_u64(seed) >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale).collect()
    }

    /// `head` over a plane in pages is the contract's plain loop: every key's `dot` alone, the
    /// softmax in key order (with the head's sink logit in its maximum and last in its sum,
    /// where the layer has sinks), the value sums one key after another, with no page boundary
    /// showing in any bit (queries on both sides of one, windows reaching across one).
    #[test]
    fn head_across_pages_is_the_plain_loop() {
        let mut seed = 0x5eed_1234_abcd_0002u64;
        let p = crate::kv::pages::PAGE_ROWS;
        let cases = [(64, 4, 2, None, None, false), (11, 2, 1, Some(p + 3), Some(3.0), false), (130, 2, 2, Some(5), None, false), (16, 4, 2, Some(5), None, true), (64, 4, 2, None, None, true)];
        for (d, nh, nkv, window, softcap, with_sinks) in cases {
            let n = 2 * p + 9;
            let kvw = nkv * d;
            let (k, v) = (values(&mut seed, n * kvw, 4.0), values(&mut seed, n * kvw, 4.0));
            // Sinks from -4 to 4: some above every score of a head, some below.
            let sinks = with_sinks.then(|| values(&mut seed, nh, 8.0));
            let plane = PagedPlane::from_rows(kvw, &k, &v, &Default::default());
            let shape = AttentionShape { n_heads: nh, n_kv_heads: nkv, head_dim: d, scale: 0.125, softcap, window, causal: true };
            let a = AttentionArgs { shape, plane: &plane, first_position: 0, keys: n, sinks: sinks.as_deref() };
            for pos in [0, p - 1, p, p + 1, 2 * p + 8] {
                for h in 0..nh {
                    let qh = values(&mut seed, d, 4.0);
                    let mut got = vec![0.0f32; d];
                    head(&a, &qh, h, pos, &mut got, Sequential);
                    let g = h / (nh / nkv);
                    let lo = window.map_or(0, |w| (pos + 1).saturating_sub(w));
                    let mut s: Vec<f32> = (lo..=pos)
                        .map(|t| {
                            let x = dot_sequential(&qh, &k[t * kvw + g * d..t * kvw + (g + 1) * d]) * 0.125;
                            softcap.map_or(x, |c| (x / c).tanh() * c)
                        })
                        .collect();
                    let sink = sinks.as_ref().map(|s| s[h]);
                    let max = s.iter().chain(&sink).fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                    exp_sub_scalar(&mut s, max);
                    let mut sum = s.iter().fold(0.0f32, |a, &x| a + x);
                    if let Some(sink) = sink {
                        let mut e = [sink];
                        exp_sub_scalar(&mut e, max);
                        sum += e[0];
                    }
                    let mut want = vec![0.0f32; d];
                    for (t, &e) in (lo..=pos).zip(&s) {
                        for (i, o) in want.iter_mut().enumerate() {
                            *o += (e / sum) * v[t * kvw + g * d + i];
                        }
                    }
                    let same = got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "d={d} window={window:?} pos {pos} head {h}");
                }
            }
        }
    }

    /// `Sequential`'s products with keys transposed eight at a time where the head size is a
    /// multiple of 32 (the trait's own `dots_transposed` and `transpose8`), so that `group`
    /// takes `transposed_scores` for eight queries or more.
    #[derive(Clone, Copy)]
    struct Transposing;

    impl Arith for Transposing {
        fn dot(&self, a: &[f32], b: &[f32]) -> f32 {
            dot_sequential(a, b)
        }
        fn transposed_keys(&self, d: usize) -> usize {
            if d % 32 == 0 { 8 } else { 0 }
        }
    }

    /// `group` gives each query `head`'s bits, over several key tiles, windows, caps, GQA, and
    /// head sizes on and off the eight-key path, with the scores from keys transposed per tile
    /// (`Transposing`) too: windows starting inside a run of transposed keys, spans ending
    /// inside one.
    #[test]
    fn group_is_head_for_every_query() {
        group_is_head_with(Sequential);
        group_is_head_with(Transposing);
    }

    fn group_is_head_with(m: impl Arith) {
        let mut seed = 0x5eed_1234_abcd_0001u64;
        for (d, nh, nkv, window, softcap) in
            [(64, 6, 2, None, None), (11, 4, 1, Some(37), Some(3.0)), (256, 4, 1, None, None), (32, 3, 3, Some(5), None), (64, 8, 2, Some(21), None)]
        {
            // Every other case with sinks.
            let sinks = (d % 64 == 0).then(|| values(&mut seed, nh, 8.0));
            let (first, rows) = (90usize, 7usize);
            let kvw = nkv * d;
            let (k, v) = (values(&mut seed, (first + rows) * kvw, 4.0), values(&mut seed, (first + rows) * kvw, 4.0));
            let q = values(&mut seed, rows * nh * d, 4.0);
            let plane = PagedPlane::from_rows(kvw, &k, &v, &Default::default());
            let a = AttentionArgs {
                shape: AttentionShape { n_heads: nh, n_kv_heads: nkv, head_dim: d, scale: 0.125, softcap, window, causal: true },
                plane: &plane,
                first_position: first,
                keys: first + rows,
                sinks: sinks.as_deref(),
            };
            let per = nh / nkv;
            for g in 0..nkv {
                let list: Vec<(usize, usize)> = (0..rows * per).map(|i| (i / per, g * per + i % per)).take(GROUP_QUERIES).collect();
                let mut outs = vec![0.0f32; list.len() * d];
                group(&a, &q, g, &list, &mut outs, m);
                for (&(r, h), got) in list.iter().zip(outs.chunks_exact(d)) {
                    let qh = &q[r * nh * d + h * d..r * nh * d + (h + 1) * d];
                    let mut want = vec![0.0f32; d];
                    head(&a, qh, h, first + r, &mut want, m);
                    let same = got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "d={d} window={window:?} row {r} head {h}: {got:?} vs {want:?}");
                }
            }
        }
    }
}
