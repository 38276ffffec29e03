//! The forward pass: M token rows through every layer in one pass over the weights, with one
//! layer body for every family (it branches on LayerSpec fields only). This file is the only
//! place the order of a layer's operations is written; each operation is a call to the model's
//! backend on tensors the backend owns (see backend/mod.rs). The engine never reads activation
//! or KV memory: the wanted rows' logits are the only values brought back to the host, besides
//! a mixture's router logits, from which the host picks each row's experts (engine/moe.rs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::backend::{all_finite, pass, AttentionShape, Backend, LoraArgs, Tensor, Vector, Weight};
use crate::engine::adapter::{self, AdapterSet};
use crate::engine::moe::{moe_block, MoeScratch, MoeWeights};
use crate::engine::weights::{FeedForward, LayerWeights};
use crate::engine::Model;
use crate::error::{Error, Result, Status};
use crate::kv::KvStore;
use crate::semantics::{AttentionKind, KvSource, LayerSpec};

pub use crate::engine::shared_pass::{forward_many, Item};

/// Which rows' logits a pass returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    None,
    Last,
    All,
}

/// Runs `tokens` at positions `kv.positions() ..`, appends their keys and values, and returns the
/// logits of the wanted rows (`rows x vocab`). On failure (abort), and also when the pass
/// panics, the cache is as before: the rows a pass appended are dropped while unwinding, so a
/// caller that catches the panic (the C boundary does) keeps a usable session.
///
/// A pass longer than the backend's `max_pass_rows` runs as consecutive passes of at most that
/// many rows (a row's bits do not depend on the pass it is in), rolled back together on failure.
///
/// Logits handed back are finite: a NaN or infinite one (weights that hold such values, or an
/// overflow) fails the pass with `ErrNonFinite`, naming the first layer whose output was not
/// finite (`non_finite_error`), and the cache is as before. One pass over the returned values.
pub fn forward(
    model: &Model,
    kv: &mut dyn KvStore,
    bufs: &mut PassBuffers,
    tokens: &[u32],
    want: Want,
    abort: &Arc<AtomicBool>,
    adapters: &AdapterSet,
) -> Result<Vec<f32>> {
    let cap = model.backend.max_pass_rows(&model.spec).max(1);
    let mut pass = Rollback { start: kv.positions(), kv, done: false };
    let mut logits = Vec::new();
    let mut at = 0;
    while at < tokens.len() {
        let n = model.backend.part_rows((tokens.len() - at).min(cap)).clamp(1, cap);
        let part = &tokens[at..(at + n).min(tokens.len())];
        at += part.len();
        let part_want = match want {
            Want::All => Want::All,
            Want::Last if at == tokens.len() => Want::Last,
            _ => Want::None,
        };
        logits.extend(forward_part(model, &mut *pass.kv, bufs, part, part_want, abort, adapters)?);
    }
    device_error(model)?;
    if !all_finite(&logits) {
        let vocab = model.spec.vocab_size;
        let bad = logits.iter().position(|x| !x.is_finite()).unwrap_or(0);
        let row = match want {
            Want::All => bad / vocab,
            _ => tokens.len() - 1,
        };
        pass.kv.truncate(pass.start);
        return Err(non_finite_error(model, &mut *pass.kv, bufs, tokens, row, bad % vocab, logits[bad], abort, adapters));
    }
    pass.done = true;
    Ok(logits)
}

/// A failure of the backend's deferred work during the pass (`Backend::take_error`): a graph
/// its runtime rejected or a run that failed. The values it should have made are NaN, so this
/// is checked before the logits are judged.
pub(crate) fn device_error(model: &Model) -> Result<()> {
    match model.backend.take_error() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The failure of a pass over `tokens` (at the cache's positions) whose logit `column` of row
/// `row` was `value`, not finite: the pass runs again, in the parts `forward` used, reading
/// the residual stream back after the embedding and after each layer, and the message names
/// the first of them that held a value that is not finite (or the output projection, when
/// none did). The cache is as before when it returns. Only a failing pass pays for this.
#[allow(clippy::too_many_arguments)]
pub fn non_finite_error(model: &Model, kv: &mut dyn KvStore, bufs: &mut PassBuffers, tokens: &[u32], row: usize, column: usize, value: f32, abort: &Arc<AtomicBool>, adapters: &AdapterSet) -> Error {
    let start = kv.positions();
    let at = match first_non_finite_stage(model, kv, bufs, tokens, abort, adapters) {
        Ok(Some(Stage::Embedding)) => "the token embedding is the first output that is not finite".to_string(),
        Ok(Some(Stage::Layer(il))) => format!("layer {il} (of {}) is the first whose output is not finite", model.spec.layers.len()),
        Ok(None) => "every layer's output is finite: the output projection (final norm, lm_head) made it".to_string(),
        Err(e) => return e,
    };
    Error::new(
        Status::ErrNonFinite,
        format!(
            "logit {column} of position {} (token {}) is {value}: {at}; the pack's weights may hold NaN or infinity",
            start + row,
            tokens.get(row).copied().unwrap_or_default()
        ),
    )
}

/// Where a pass first held a value that is not finite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Embedding,
    Layer(usize),
}

/// The diagnostic pass of `non_finite_error`: None when the residual stream stayed finite.
fn first_non_finite_stage(model: &Model, kv: &mut dyn KvStore, bufs: &mut PassBuffers, tokens: &[u32], abort: &Arc<AtomicBool>, adapters: &AdapterSet) -> Result<Option<Stage>> {
    let cap = model.backend.max_pass_rows(&model.spec).max(1);
    let pass = Rollback { start: kv.positions(), kv, done: false };
    let hidden = model.spec.hidden_size;
    for part in tokens.chunks(cap) {
        let m = part.len();
        let mut found = None;
        let mut check = |stage: Stage, x: &Tensor| {
            if found.is_none() && !all_finite(&model.backend.read(x, m * hidden)) {
                found = Some(stage);
            }
            found.is_none()
        };
        let start = pass.kv.positions();
        let seg = Seg { kv: &mut *pass.kv, row0: 0, rows: m, start, adapters };
        let x = layers_checked(model, &mut [seg], bufs, part, std::slice::from_ref(abort), Some(&mut check))?;
        drop(x);
        if found.is_some() {
            return Ok(found);
        }
        pass.kv.advance(m);
    }
    Ok(None)
}

/// One part of `forward` (at most `max_pass_rows` rows): its logits, its rows counted as held.
/// On failure the caller's rollback drops what it appended.
fn forward_part(model: &Model, kv: &mut dyn KvStore, bufs: &mut PassBuffers, tokens: &[u32], want: Want, abort: &Arc<AtomicBool>, adapters: &AdapterSet) -> Result<Vec<f32>> {
    let x = layers(model, kv, bufs, tokens, abort, adapters)?;
    let m = tokens.len();
    let last = [m - 1];
    let all: Vec<usize>;
    let rows: &[usize] = match want {
        Want::None => &[],
        Want::Last => &last,
        Want::All => {
            all = (0..m).collect();
            &all
        }
    };
    // Nothing reads the residual stream after the output projection (or, without logits,
    // after the layers): forgotten before the logits are read.
    let logits = if rows.is_empty() {
        model.backend.forget(&x);
        Vec::new()
    } else {
        let mut out = bufs.take_output(model, rows.len());
        let logits = out.compute(model, &x, rows, abort).map(|()| {
            model.backend.forget(&x);
            out.read(model, rows.len())
        });
        bufs.keep_output(out);
        logits?
    };
    bufs.keep_x(x, m);
    kv.advance(m);
    Ok(logits)
}

/// Activation buffers a session keeps between passes of at most `KEPT_ROWS` rows (decode
/// steps, verify blocks, short chunks), so that such a pass allocates nothing but the logits it
/// returns. A longer pass (a prefill) allocates its own and frees them when it ends, so a
/// session does not hold memory for the longest prompt it has seen. Stale contents never
/// matter: every op writes its output rows before any op reads them.
#[derive(Default)]
pub struct PassBuffers {
    scratch: Option<Scratch>,
    /// (rows, hidden): the residual stream, with the row count it was made for.
    x: Option<(usize, Tensor)>,
    out: Option<OutputTile>,
    /// A vocabulary-sized row for a verify's logits (`take_row`).
    row: Vec<f32>,
}

/// Most rows of a pass whose buffers a session keeps (see `PassBuffers`).
pub const KEPT_ROWS: usize = 64;

impl PassBuffers {
    /// The kept row buffer (empty the first time): a verify reads each row it judges into it,
    /// and the one its new token comes from becomes the session's last logits.
    pub fn take_row(&mut self) -> Vec<f32> {
        std::mem::take(&mut self.row)
    }

    /// Keeps `row`'s allocation for the next `take_row`.
    pub fn keep_row(&mut self, row: Vec<f32>) {
        self.row = row;
    }

    /// The kept output tile when it has room for `rows` rows, else a new one.
    pub fn take_output(&mut self, model: &Model, rows: usize) -> OutputTile {
        self.out.take().filter(|o| o.rows >= rows).unwrap_or_else(|| OutputTile::new(model, rows))
    }
    /// Keeps `out` for the next pass (up to `KEPT_ROWS` rows).
    pub fn keep_output(&mut self, out: OutputTile) {
        if out.rows <= KEPT_ROWS {
            self.out = Some(out);
        }
    }
    pub(crate) fn keep_x(&mut self, x: Tensor, rows: usize) {
        if rows <= KEPT_ROWS && self.x.as_ref().is_none_or(|(r, _)| *r < rows) {
            self.x = Some((rows, x));
        }
    }
}

/// Runs `tokens` through every layer as `forward` does and returns the final residual stream
/// (`tokens.len() x hidden`, before the final norm) instead of logits, for a caller that
/// projects the rows itself in bounded tiles (`OutputTile`). Same rollback rules as `forward`.
pub fn forward_hidden(model: &Model, kv: &mut dyn KvStore, bufs: &mut PassBuffers, tokens: &[u32], abort: &Arc<AtomicBool>, adapters: &AdapterSet) -> Result<Tensor> {
    let mut pass = Rollback { start: kv.positions(), kv, done: false };
    let x = layers(model, &mut *pass.kv, bufs, tokens, abort, adapters)?;
    pass.kv.advance(tokens.len());
    pass.done = true;
    Ok(x)
}

/// Most rows `verify` projects to logits at once: it holds at most this many rows of n_vocab.
pub const OUTPUT_TILE_ROWS: usize = 16;

/// Buffers of the output projection (final norm, lm_head, final softcap) for up to `rows` rows
/// at a time. A row's logits are the same bits whatever tile it is projected in (the backend's
/// exactness rule: an output element does not depend on the row count).
pub struct OutputTile {
    rows: usize,
    /// (rows, hidden)
    h: Tensor,
    /// (rows, hidden)
    normed: Tensor,
    /// (rows, vocab)
    logits: Tensor,
}

impl OutputTile {
    pub fn new(model: &Model, rows: usize) -> OutputTile {
        let be = model.backend.as_ref();
        let (hidden, vocab) = (model.spec.hidden_size, model.spec.vocab_size);
        OutputTile { rows, h: be.tensor(rows * hidden), normed: be.tensor(rows * hidden), logits: be.tensor(rows * vocab) }
    }

    /// Logits (`rows.len() x vocab`, `rows.len() <= self.rows`) of the given rows of the
    /// residual stream `x`: `compute`, then all of them read back.
    pub fn project(&mut self, model: &Model, x: &Tensor, rows: &[usize], abort: &Arc<AtomicBool>) -> Result<Vec<f32>> {
        self.compute(model, x, rows, abort)?;
        Ok(self.read(model, rows.len()))
    }

    /// The first `n` rows of the last `compute`'s logits, read back.
    pub fn read(&self, model: &Model, n: usize) -> Vec<f32> {
        model.backend.read(&self.logits, n * model.spec.vocab_size)
    }

    /// Computes the logits of the given rows of the residual stream `x` (`rows.len() <=
    /// self.rows`), left in the backend for `read_row`. Checks `abort` before, and inside the
    /// matmul when the backend does (backend::pass): on a 262k vocabulary this costs more than a
    /// token's layers.
    pub fn compute(&mut self, model: &Model, x: &Tensor, rows: &[usize], abort: &Arc<AtomicBool>) -> Result<()> {
        debug_assert!(rows.len() <= self.rows);
        let _pass = pass::enter(abort);
        check_abort(abort, || "before the output projection".into())?;
        #[cfg(test)]
        if ABORT_IN_PROJECTION.with(|p| p.get()) {
            abort.store(true, Ordering::Relaxed);
        }
        let spec = &model.spec;
        let be = model.backend.as_ref();
        let (hidden, n) = (spec.hidden_size, rows.len());
        be.gather_rows(x, rows, hidden, &mut self.h);
        be.rms_norm(&self.h, &model.weights.final_norm, spec.norm_eps, n, hidden, &mut self.normed);
        be.matmul(&model.weights.lm_head, &self.normed, n, &mut self.logits);
        if let Some(cap) = spec.final_softcap {
            be.softcap(&mut self.logits, cap, n * spec.vocab_size);
        }
        // Only the logits are read after this.
        be.forget(&self.h);
        be.forget(&self.normed);
        if pass::cut_short() {
            return Err(Error::new(Status::ErrAborted, "aborted during the output projection"));
        }
        Ok(())
    }

    /// The argmax of row `j` of the last `compute` (`Backend::argmax`), and whether `out`
    /// (`vocab` values) now holds the row.
    pub fn argmax_row(&self, model: &Model, j: usize, out: &mut [f32]) -> (u32, bool) {
        let vocab = model.spec.vocab_size;
        model.backend.argmax(&self.logits, j * vocab, &mut out[..vocab])
    }

    /// Row `j` of the last `compute` (its j-th row) into `out` (`vocab` values).
    pub fn read_row(&self, model: &Model, j: usize, out: &mut [f32]) {
        let vocab = model.spec.vocab_size;
        model.backend.read_into(&self.logits, j * vocab, &mut out[..vocab]);
    }

    /// Whether row `j` of the last `compute` is all finite, checked where it lies
    /// (`Backend::all_finite`), for a row an argmax judged without reading it back.
    pub fn row_is_finite(&self, model: &Model, j: usize) -> bool {
        let vocab = model.spec.vocab_size;
        model.backend.all_finite(&self.logits, j * vocab, vocab)
    }
}

/// Until `done`, dropping it truncates the cache back to `start`: on `Err` and on unwind alike.
struct Rollback<'a> {
    kv: &'a mut dyn KvStore,
    start: usize,
    done: bool,
}

impl Drop for Rollback<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.kv.truncate(self.start);
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Test-only fault injection: a pass on this thread panics after this layer's attention
    /// block (its keys and values already appended). Not compiled into the library.
    pub(crate) static PANIC_AFTER_LAYER: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    /// Test-only: the output projection on this thread raises its own abort flag after its
    /// first check, so that only a check inside the lm_head matmul can notice it.
    pub(crate) static ABORT_IN_PROJECTION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Every layer over `tokens`; returns the residual stream x (m, hidden). The pass's scratch is
/// freed before it returns, so the output projection runs beside x alone.
fn layers(model: &Model, kv: &mut dyn KvStore, bufs: &mut PassBuffers, tokens: &[u32], abort: &Arc<AtomicBool>, adapters: &AdapterSet) -> Result<Tensor> {
    let start = kv.positions();
    layers_checked(model, &mut [Seg { kv, row0: 0, rows: tokens.len(), start, adapters }], bufs, tokens, std::slice::from_ref(abort), None)
}

/// One session's rows in a pass: its KV store, where its rows lie among the pass's rows, and
/// the position of its first row. A pass of one session has one segment over every row.
pub(crate) struct Seg<'k> {
    pub(crate) kv: &'k mut dyn KvStore,
    pub(crate) row0: usize,
    pub(crate) rows: usize,
    pub(crate) start: usize,
    /// The session's LoRA adapters, applied to its rows (engine/adapter.rs).
    pub(crate) adapters: &'k AdapterSet,
}

/// A check `layers` may run on the residual stream after the embedding and after each layer;
/// it returns false to stop the pass there (the pass then returns what it has).
type StageCheck<'a> = &'a mut dyn FnMut(Stage, &Tensor) -> bool;

/// `layers`, with `check` (the diagnostic pass of `non_finite_error`; None on every other pass).
/// `aborts`: the flags of the pass's sessions (at least one); the first is the kernels' pass flag
/// (backend::pass), and every one is checked between layers.
pub(crate) fn layers_checked(model: &Model, segs: &mut [Seg], bufs: &mut PassBuffers, tokens: &[u32], aborts: &[Arc<AtomicBool>], check: Option<StageCheck>) -> Result<Tensor> {
    for seg in segs.iter_mut() {
        seg.kv.reserve(seg.rows)?;
    }
    let _pass = pass::enter(&aborts[0]);
    let spec = &model.spec;
    let be = model.backend.as_ref();
    let hidden = spec.hidden_size;
    let m = tokens.len();
    let mut s = bufs.scratch.take().filter(|s| s.rows >= m).unwrap_or_else(|| Scratch::new(be, model, m));
    if segs.len() > 1 && s.seg.is_none() {
        s.seg = Some(SegScratch::new(be, model, s.rows));
    }
    let rank = segs.iter().map(|g| g.adapters.max_rank()).max().unwrap_or(0);
    if rank > 0 && s.lora.as_ref().is_none_or(|l| l.rank < rank) {
        s.lora = Some(LoraScratch::new(be, model, s.rows, rank));
    }
    // x: (m, hidden), the residual stream.
    let mut x = match bufs.x.take() {
        Some((rows, x)) if rows >= m => x,
        _ => be.tensor(m * hidden),
    };
    let x_out = layers_into(model, segs, tokens, aborts, &mut s, &mut x, check);
    // The layers' buffers are read by nothing after the layers (see `PassBuffers`).
    s.forget(be);
    if m <= KEPT_ROWS {
        bufs.scratch = Some(s);
    }
    x_out.map(|()| x)
}

/// The layers of `layers`, over buffers it provides (`x`: (m, hidden), written by the
/// embedding first).
fn layers_into(model: &Model, segs: &mut [Seg], tokens: &[u32], aborts: &[Arc<AtomicBool>], s: &mut Scratch, x: &mut Tensor, mut check: Option<StageCheck>) -> Result<()> {
    let spec = &model.spec;
    let m = tokens.len();
    debug_assert_eq!(segs.iter().map(|g| g.rows).sum::<usize>(), m);
    let be = model.backend.as_ref();
    be.embed(&model.weights.embed, tokens, spec.embed_scale, x);
    if let Some(check) = check.as_mut() {
        if !check(Stage::Embedding, x) {
            return Ok(());
        }
    }
    let ple = per_layer_inputs(model, tokens, x);
    for (il, (ls, lw)) in spec.layers.iter().zip(&model.weights.layers).enumerate() {
        check_aborts(aborts, || format!("before layer {il}"))?;
        attention_block(model, segs, il, ls, lw, x, m, s);
        #[cfg(test)]
        if PANIC_AFTER_LAYER.with(|p| p.get()) == Some(il) {
            panic!("injected panic after layer {il}");
        }
        mlp_block(model, segs, il, ls, lw, x, m, ple.as_ref(), s);
        control_vector(model, segs, il, x, &mut s.h);
        be.layer_done();
        if let Some(check) = check.as_mut() {
            if !check(Stage::Layer(il), x) {
                return Ok(());
            }
        }
    }
    // A kernel of the last layer may have stopped early.
    check_aborts(aborts, || "after the last layer".into())
}

/// `check_abort` over every session of a pass.
fn check_aborts(aborts: &[Arc<AtomicBool>], at: impl FnOnce() -> String) -> Result<()> {
    if aborts.iter().any(|a| a.load(Ordering::Relaxed)) || pass::cut_short() {
        return Err(Error::new(Status::ErrAborted, format!("aborted {}", at())));
    }
    Ok(())
}

/// `ErrAborted` when the flag is set, or when a kernel of this pass skipped work because it was
/// (even if the host has cleared the flag since): a cut-short kernel never yields a result.
fn check_abort(abort: &AtomicBool, at: impl FnOnce() -> String) -> Result<()> {
    if abort.load(Ordering::Relaxed) || pass::cut_short() {
        return Err(Error::new(Status::ErrAborted, format!("aborted {}", at())));
    }
    Ok(())
}

/// Activation buffers of one pass, each sized for the widest layer and reused by every layer.
struct Scratch {
    /// Rows the buffers hold.
    rows: usize,
    /// (m, hidden)
    h: Tensor,
    /// (m, n_heads * head_dim)
    q: Tensor,
    /// (m, kv_width) each
    k: Tensor,
    v: Tensor,
    /// (m, n_heads * head_dim)
    attn: Tensor,
    /// (m, hidden)
    proj: Tensor,
    /// (m, mlp_width), or (m, ple dim) for the per-layer input
    gate: Tensor,
    /// (m, mlp_width), or (m, ple dim): the layer's per-layer input
    up: Tensor,
    /// A pass over several sessions: each session's rows, moved out for its rope, KV and
    /// attention (made at the first such pass).
    seg: Option<SegScratch>,
    /// A pass with LoRA adapters: their low-rank products (made at the first such pass).
    lora: Option<LoraScratch>,
    /// The mixtures' buffers, when the model has a mixture of experts.
    moe: Option<MoeScratch>,
}

/// Buffers of the LoRA updates of a pass (`lora`), for up to `rows` rows and rank `rank`.
struct LoraScratch {
    rank: usize,
    /// (rows, widest input): a session's input rows of a shared pass
    x: Tensor,
    /// (rows, rank): x A^T
    r: Tensor,
    /// (rows, widest output): (x A^T) B^T, scaled
    delta: Tensor,
    /// (rows, widest output): a session's output rows of a shared pass
    acc: Tensor,
}

impl LoraScratch {
    fn new(be: &dyn Backend, model: &Model, rows: usize, rank: usize) -> LoraScratch {
        let spec = &model.spec;
        let widest = spec.layers.iter().map(|l| l.q_width().max(l.kv_width()).max(l.mlp_width)).max().unwrap_or(0).max(spec.hidden_size);
        LoraScratch { rank, x: be.tensor(rows * widest), r: be.tensor(rows * rank), delta: be.tensor(rows * widest), acc: be.tensor(rows * widest) }
    }
}

/// `out += (scale * scaling) * ((x A^T) B^T)` for each adapter of each session that changes
/// target `t` of layer `il`, over that session's rows (`input`: (m, n_in), `out`: (m, n_out)),
/// after the base projection and its bias, as PEFT's `Linear.forward` (`Backend::lora`). A session's rows move
/// to `LoraScratch` and back in a shared pass: each row gets the ops it gets alone.
#[allow(clippy::too_many_arguments)]
fn lora(model: &Model, segs: &[Seg], il: usize, t: usize, input: &Tensor, n_in: usize, out: &mut Tensor, n_out: usize, l: &mut Option<LoraScratch>) {
    let Some(l) = l.as_mut() else { return };
    let be = model.backend.as_ref();
    let single = segs.len() == 1;
    for g in segs {
        for (a, scale) in g.adapters.list() {
            let Some(p) = &a.layers[il][t] else { continue };
            let LoraScratch { x, r, delta, acc, .. } = l;
            let src: &Tensor = if single {
                input
            } else {
                be.copy_rows(input, g.row0, x, 0, g.rows, n_in);
                x
            };
            if single {
                be.lora(&p.a, &p.b, &p.bt, src, g.rows, p.scaling * scale, r, delta, out);
            } else {
                be.copy_rows(out, g.row0, acc, 0, g.rows, n_out);
                be.lora(&p.a, &p.b, &p.bt, src, g.rows, p.scaling * scale, r, delta, acc);
                be.copy_rows(acc, 0, out, g.row0, g.rows, n_out);
            }
        }
    }
}

/// `out = input W^T + bias`, then map `t` of layer `il`'s LoRA updates (`lora`). A pass of one
/// session hands the backend the map and its adapters in one call (`Backend::matmul_lora`: the
/// host runs the adapters' pieces among the matmul's tasks); a shared pass adds each session's
/// updates to its own rows after (the same bits).
#[allow(clippy::too_many_arguments)]
fn project(model: &Model, segs: &[Seg], il: usize, t: usize, w: &Weight, bias: Option<&Vector>, input: &Tensor, n_in: usize, m: usize, out: &mut Tensor, n_out: usize, l: &mut Option<LoraScratch>) {
    let be = model.backend.as_ref();
    if let (Some(ls), [g]) = (l.as_mut(), segs) {
        debug_assert_eq!((g.row0, g.rows), (0, m));
        let updates: Vec<LoraArgs> =
            g.adapters.list().iter().filter_map(|(a, scale)| a.layers[il][t].as_ref().map(|p| LoraArgs { a: &p.a, b: &p.b, bt: &p.bt, s: p.scaling * scale })).collect();
        if !updates.is_empty() {
            return be.matmul_lora(w, bias, input, m, out, &updates, &mut ls.r, &mut ls.delta);
        }
    }
    be.matmul(w, input, m, out);
    if let Some(b) = bias {
        be.add_bias(out, b, m);
    }
    lora(model, segs, il, t, input, n_in, out, n_out, l);
}

/// One session's rows of a shared pass (`Seg`), in buffers of up to `rows` rows.
struct SegScratch {
    /// (rows, n_heads * head_dim) each
    q: Tensor,
    attn: Tensor,
    /// (rows, kv_width) each
    k: Tensor,
    v: Tensor,
}

impl SegScratch {
    fn new(be: &dyn Backend, model: &Model, rows: usize) -> SegScratch {
        let spec = &model.spec;
        let widest = |f: fn(&LayerSpec) -> usize| spec.layers.iter().map(f).max().unwrap_or(0);
        let (qw, kvw) = (widest(LayerSpec::q_width), widest(LayerSpec::kv_width));
        SegScratch { q: be.tensor(rows * qw), attn: be.tensor(rows * qw), k: be.tensor(rows * kvw), v: be.tensor(rows * kvw) }
    }
}

impl Scratch {
    /// `Backend::forget` of every buffer, once the pass's layers are done with them.
    fn forget(&self, be: &dyn Backend) {
        for t in [&self.h, &self.q, &self.k, &self.v, &self.attn, &self.proj, &self.gate, &self.up] {
            be.forget(t);
        }
        if let Some(t) = &self.seg {
            for t in [&t.q, &t.attn, &t.k, &t.v] {
                be.forget(t);
            }
        }
        if let Some(t) = &self.lora {
            for t in [&t.x, &t.r, &t.delta, &t.acc] {
                be.forget(t);
            }
        }
        if let Some(t) = &self.moe {
            t.forget(be);
        }
    }

    fn new(be: &dyn Backend, model: &Model, m: usize) -> Scratch {
        let spec = &model.spec;
        let widest = |f: fn(&LayerSpec) -> usize| spec.layers.iter().map(f).max().unwrap_or(0);
        let (qw, kvw) = (widest(LayerSpec::q_width), widest(LayerSpec::kv_width));
        let mlp = widest(|l| l.mlp_width).max(spec.per_layer_input.map_or(0, |p| p.dim));
        let hidden = spec.hidden_size;
        Scratch {
            rows: m,
            h: be.tensor(m * hidden),
            q: be.tensor(m * qw),
            k: be.tensor(m * kvw),
            v: be.tensor(m * kvw),
            attn: be.tensor(m * qw),
            proj: be.tensor(m * hidden),
            gate: be.tensor(m * mlp),
            up: be.tensor(m * mlp),
            seg: None,
            lora: None,
            moe: MoeScratch::new(be, spec, m),
        }
    }
}

/// `h = pre_norm(x)`, or a copy of `x` when the layer has no such norm.
fn pre_norm(model: &Model, w: Option<&crate::backend::Vector>, x: &Tensor, m: usize, h: &mut Tensor) {
    let (be, hidden) = (model.backend.as_ref(), model.spec.hidden_size);
    match w {
        Some(w) => be.rms_norm(x, w, model.spec.norm_eps, m, hidden, h),
        None => be.copy(x, h, m * hidden),
    }
}

/// x += post_norm(o(attention(rope(qk_norm(q, k)), v)) over pre_norm(x)).
///
/// The projections run over every row of the pass at once (one read of each weight); rope, the
/// KV append and attention run per session (`segs`), on its own rows at its own positions. With
/// several sessions their rows move to `Scratch::seg` and back: the same ops on the same rows,
/// so each row's bits are those of its session's pass alone.
#[allow(clippy::too_many_arguments)]
fn attention_block(model: &Model, segs: &mut [Seg], il: usize, ls: &LayerSpec, lw: &LayerWeights, x: &mut Tensor, m: usize, s: &mut Scratch) {
    let spec = &model.spec;
    let be = model.backend.as_ref();
    let (hidden, d, eps) = (spec.hidden_size, ls.head_dim, spec.norm_eps);
    let (qw, kvw) = (ls.q_width(), ls.kv_width());
    pre_norm(model, lw.pre_attention_norm.as_ref(), x, m, &mut s.h);
    project(model, segs, il, adapter::Q, &lw.q, lw.qkv_bias.as_ref().map(|b| &b[0]), &s.h, hidden, m, &mut s.q, qw, &mut s.lora);
    if let Some(w) = &lw.q_norm {
        be.head_norm(&mut s.q, Some(w), eps, m, qw, d);
    }
    let single = segs.len() == 1;
    if single {
        be.rope(&mut s.q, &ls.rope, m, qw, d, segs[0].start);
    }
    let owns_plane = ls.kv_source == KvSource::Own;
    if let (true, Some(kw)) = (owns_plane, &lw.k) {
        project(model, segs, il, adapter::K, kw, lw.qkv_bias.as_ref().map(|b| &b[1]), &s.h, hidden, m, &mut s.k, kvw, &mut s.lora);
        match &lw.v {
            Some(vw) => {
                project(model, segs, il, adapter::V, vw, lw.qkv_bias.as_ref().map(|b| &b[2]), &s.h, hidden, m, &mut s.v, kvw, &mut s.lora);
            }
            // Values are the raw key projection (before k-norm and rope).
            None => be.copy(&s.k, &mut s.v, m * kvw),
        }
        if ls.v_norm {
            be.head_norm(&mut s.v, None, eps, m, kvw, d);
        }
        if let Some(w) = &lw.k_norm {
            be.head_norm(&mut s.k, Some(w), eps, m, kvw, d);
        }
        if single {
            be.rope(&mut s.k, &ls.rope, m, kvw, d, segs[0].start);
            be.kv_append(&mut *segs[0].kv, il, &s.k, &s.v, m);
        } else {
            let t = s.seg.as_mut().expect("a pass over several sessions has their buffers");
            for g in segs.iter_mut() {
                be.copy_rows(&s.k, g.row0, &mut t.k, 0, g.rows, kvw);
                be.copy_rows(&s.v, g.row0, &mut t.v, 0, g.rows, kvw);
                be.rope(&mut t.k, &ls.rope, g.rows, kvw, d, g.start);
                be.kv_append(&mut *g.kv, il, &t.k, &t.v, g.rows);
            }
        }
    }
    let plane = match ls.kv_source {
        KvSource::Own => il,
        KvSource::SharedWith { owner } => owner,
    };
    let shape = AttentionShape {
        n_heads: ls.n_heads,
        n_kv_heads: ls.n_kv_heads,
        head_dim: d,
        scale: ls.attn_scale,
        softcap: ls.attn_softcap,
        window: match ls.attention {
            AttentionKind::Full => None,
            AttentionKind::Sliding { window } => Some(window),
        },
        causal: spec.causal,
    };
    if single {
        be.attention(&*segs[0].kv, plane, &shape, lw.sinks.as_deref(), &s.q, m, segs[0].start, &mut s.attn);
    } else {
        let t = s.seg.as_mut().expect("a pass over several sessions has their buffers");
        for g in segs.iter() {
            be.copy_rows(&s.q, g.row0, &mut t.q, 0, g.rows, qw);
            be.rope(&mut t.q, &ls.rope, g.rows, qw, d, g.start);
            be.attention(&*g.kv, plane, &shape, lw.sinks.as_deref(), &t.q, g.rows, g.start, &mut t.attn);
            be.copy_rows(&t.attn, 0, &mut s.attn, g.row0, g.rows, qw);
        }
    }
    project(model, segs, il, adapter::O, &lw.o, lw.o_bias.as_ref(), &s.attn, qw, m, &mut s.proj, hidden, &mut s.lora);
    if let Some(w) = &lw.post_attention_norm {
        be.rms_norm_inplace(&mut s.proj, w, eps, m, hidden);
    }
    be.add(x, &s.proj, m * hidden);
}

/// x += post_norm(down(act(gate(h)) * up(h))), h = pre_norm(x); then the per-layer input
/// (x += post_norm(projection(act(gate(x)) * P[layer]))) and the layer scalar, when present.
#[allow(clippy::too_many_arguments)]
fn mlp_block(model: &Model, segs: &[Seg], il: usize, ls: &LayerSpec, lw: &LayerWeights, x: &mut Tensor, m: usize, ple: Option<&Tensor>, s: &mut Scratch) {
    let spec = &model.spec;
    let be = model.backend.as_ref();
    let (hidden, eps) = (spec.hidden_size, spec.norm_eps);
    pre_norm(model, lw.pre_feedforward_norm.as_ref(), x, m, &mut s.h);
    match &lw.feed_forward {
        FeedForward::Dense(mlp) => {
            project(model, segs, il, adapter::GATE, &mlp.gate, None, &s.h, hidden, m, &mut s.gate, ls.mlp_width, &mut s.lora);
            project(model, segs, il, adapter::UP, &mlp.up, None, &s.h, hidden, m, &mut s.up, ls.mlp_width, &mut s.lora);
            be.gated_activation(ls.activation, &mut s.gate, &s.up, m * ls.mlp_width);
            project(model, segs, il, adapter::DOWN, &mlp.down, None, &s.gate, ls.mlp_width, m, &mut s.proj, hidden, &mut s.lora);
        }
        // Adapters for a mixture's layers are refused at load (engine/adapter.rs).
        FeedForward::Experts { moe, router, router_bias, experts, shared } => {
            let t = s.moe.as_mut().expect("a model with a mixture has its buffers");
            let w = MoeWeights { router, router_bias: router_bias.as_ref(), experts, shared: shared.as_ref() };
            moe_block(be, moe, ls.activation, &w, &s.h, m, hidden, &mut s.proj, t);
        }
    }
    if let Some(w) = &lw.post_feedforward_norm {
        be.rms_norm_inplace(&mut s.proj, w, eps, m, hidden);
    }
    be.add(x, &s.proj, m * hidden);
    if let (Some(pl), Some(p), Some(ple)) = (&lw.per_layer, spec.per_layer_input, ple) {
        // The per-layer input block (`ModelSpec::per_layer_input`, the rule's source cited at
        // `PerLayerInput`): gate -> activation -> * per-layer input -> projection -> norm.
        let width = spec.layers.len() * p.dim;
        be.matmul(&pl.gate, x, m, &mut s.gate);
        be.gather_columns(ple, m, width, il * p.dim, p.dim, &mut s.up);
        be.gated_activation(ls.activation, &mut s.gate, &s.up, m * p.dim);
        be.matmul(&pl.projection, &s.gate, m, &mut s.proj);
        be.rms_norm_inplace(&mut s.proj, &pl.post_norm, eps, m, hidden);
        be.add(x, &s.proj, m * hidden);
    }
    if let Some(scalar) = lw.layer_scalar {
        be.scale(x, scalar, m * hidden);
    }
}

/// x += v[il] on the rows of each session whose control vector has one for layer `il`
/// (engine/control.rs), the layer's last op as llama.cpp's `build_cvec`. In a shared pass a
/// session's rows move to `tmp` ((m, hidden), free at the layer's end) and back: each row gets
/// the add it gets alone.
fn control_vector(model: &Model, segs: &[Seg], il: usize, x: &mut Tensor, tmp: &mut Tensor) {
    let be = model.backend.as_ref();
    let hidden = model.spec.hidden_size;
    for g in segs {
        let Some(v) = g.adapters.control().and_then(|c| c.layers[il].as_ref()) else { continue };
        if segs.len() == 1 {
            be.add_bias(x, v, g.rows);
        } else {
            be.copy_rows(x, g.row0, tmp, 0, g.rows, hidden);
            be.add_bias(tmp, v, g.rows);
            be.copy_rows(tmp, 0, x, g.row0, g.rows, hidden);
        }
    }
}

/// The per-layer inputs (`ModelSpec::per_layer_input`) for `tokens` (m, n_layers * dim): the
/// token table scaled by sqrt(dim), plus the RMS-normed projection of the scaled embedding `e`
/// times 1/sqrt(hidden), times 1/sqrt(2) (the source is cited at `PerLayerInput`).
fn per_layer_inputs(model: &Model, tokens: &[u32], e: &Tensor) -> Option<Tensor> {
    let spec = &model.spec;
    let (Some(p), Some(w)) = (spec.per_layer_input, &model.weights.per_layer_input) else {
        return None;
    };
    let be = model.backend.as_ref();
    let m = tokens.len();
    let width = spec.layers.len() * p.dim;
    let mut c = be.tensor(m * width);
    be.matmul(&w.model_projection, e, m, &mut c);
    let proj_scale = (spec.hidden_size as f64).powf(-0.5) as f32;
    be.scale(&mut c, proj_scale, m * width);
    be.rms_norm_inplace(&mut c, &w.projection_norm, spec.norm_eps, m * spec.layers.len(), p.dim);
    let table_scale = (p.dim as f64).sqrt() as f32;
    let combine = std::f64::consts::FRAC_1_SQRT_2 as f32;
    be.per_layer_combine(&mut c, &w.table, tokens, table_scale, combine);
    Some(c)
}

// The unit tests name fixture folders, which are family names: they live outside the engine.
#[cfg(test)]
#[path = "../../tests/unit/forward.rs"]
mod tests;
