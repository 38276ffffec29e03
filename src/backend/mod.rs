//! The seam between the forward engine and the hardware that computes it.
//!
//! The engine (src/engine/forward.rs) writes the order of a layer's operations once and calls
//! them through [`Backend`], a small op set on memory the backend owns:
//!
//! - [`Weight`] and [`Vector`]: a model's matrices and small vectors (norm weights, biases),
//!   prepared by the backend once at open (`prepare_matrix`, `prepare_vector`). The host keeps
//!   the memory-mapped bytes as they are, and at `fast` gives the block formats its integer
//!   kernels read in groups of rows a side table at open and an interleaved copy after it
//!   (host/packed/); the GPU uploads them once.
//! - [`Tensor`]: an activation buffer of f32 elements (`tensor`), where the backend computes.
//!   The engine never reads one: only [`Backend::read`] brings values back to host memory, and
//!   the engine uses it for the wanted rows' logits only.
//! - [`KvStore`]: a session's keys and values (`new_kv`), one plane per layer that owns one at
//!   that layer's own width. The engine sees positions held, truncate, and the export/import
//!   of planes that the portable snapshot encoding (kv::snapshot) is written from.
//!
//! Every op takes its row count (and widths) explicitly, so that a backend that compiles kernels
//! for fixed shapes can round the row count up to a bucket and ignore the padding rows; the only
//! data-dependent size is the attention length (positions held).
//!
//! The handles are type-erased (`dyn Any` inside) rather than associated types of a generic
//! engine: a model picks its backend at open from the C options, so `Model` holds a
//! `Box<dyn Backend>`, and a handle is checked back to the backend's own type with one type-id
//! comparison per op (a few hundred per token, against millions of multiply-adds per op).
//!
//! Backends here: [`cpu::CpuBackend`] over [`cpu::Kernels`], with host memory; its two kernel sets
//! are `reference` (plain scalar Rust, the oracle every faster kernel is tested against) and
//! `host` (SIMD row kernels and shared worker threads). To add a backend, implement [`Backend`]
//! (and a [`KvStore`] for it), and run tests/backend_conformance.rs against it: every op against
//! the reference on odd sizes, batched == sequential, truncate/restore == fresh, threads 1 == N.
//!
//! Cancellation: a long kernel may stop early when the session's abort flag is set; the flag
//! reaches the backend through the per-pass context in [`pass`], and the engine then refuses
//! the pass, so skipped work never shows in a result.
//!
//! Exactness rule for every backend: an output element is computed by the same sequence of
//! floating-point operations whatever the number of rows in the batch and whatever the thread
//! count. Work is split over output columns and rows, never over the reduction dimension.

pub mod attention;
pub mod cpu;
pub mod exp;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod graph;
pub mod host;
pub mod lora;
pub mod pass;
pub mod reference;
pub mod watched;

use std::any::Any;

use crate::error::{Error, Result, Status};
pub use crate::kv::KvStore;

/// One adapter's update of a map (`Backend::matmul_lora`): A (rank x n_in), B (n_out x rank),
/// B transposed, and the scale.
pub struct LoraArgs<'a> {
    pub a: &'a Weight,
    pub b: &'a Weight,
    pub bt: &'a Weight,
    pub s: f32,
}
use crate::pack::tensor::WeightTensor;
use crate::semantics::rope::RopeSpec;
use crate::semantics::{Activation, LayerSpec, ModelSpec};

/// An activation buffer owned by a backend: `len` f32 elements, laid out as rows of the width
/// each op is given. Opaque to the engine.
pub struct Tensor {
    len: usize,
    inner: Box<dyn Any + Send + Sync>,
}

/// A matrix `[rows, cols]` prepared by a backend at open (an embedding table, a projection).
pub struct Weight {
    rows: usize,
    cols: usize,
    inner: Box<dyn Any + Send + Sync>,
}

/// A vector prepared by a backend at open (a norm weight in its effective form, a bias).
pub struct Vector {
    len: usize,
    inner: Box<dyn Any + Send + Sync>,
}

/// Panics on a handle of another backend: the engine only passes a backend its own handles, so
/// this is a bug in the engine, never a consequence of input.
fn foreign(what: &str) -> ! {
    panic!("a {what} of another backend was passed to this one")
}

macro_rules! handle_access {
    ($ty:ident, $what:literal) => {
        impl $ty {
            /// The backend's own representation; panics on another backend's handle.
            pub fn get<T: Any>(&self) -> &T {
                self.inner.downcast_ref().unwrap_or_else(|| foreign($what))
            }
            /// As `get`, mutable.
            pub fn get_mut<T: Any>(&mut self) -> &mut T {
                self.inner.downcast_mut().unwrap_or_else(|| foreign($what))
            }
        }
    };
}
handle_access!(Tensor, "tensor");
handle_access!(Weight, "weight");
handle_access!(Vector, "vector");

impl Tensor {
    /// Wraps a backend's representation of a buffer of `len` f32 elements.
    pub fn new<T: Any + Send + Sync>(len: usize, inner: T) -> Tensor {
        Tensor { len, inner: Box::new(inner) }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Weight {
    /// Wraps a backend's representation of a `[rows, cols]` matrix.
    pub fn new<T: Any + Send + Sync>(rows: usize, cols: usize, inner: T) -> Weight {
        Weight { rows, cols, inner: Box::new(inner) }
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
}

impl Vector {
    /// Wraps a backend's representation of a vector of `len` f32.
    pub fn new<T: Any + Send + Sync>(len: usize, inner: T) -> Vector {
        Vector { len, inner: Box::new(inner) }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The geometry and rules of one attention call (see `Backend::attention`).
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub softcap: Option<f32>,
    /// Keys visible to a query at position p: (p - window, p]; None for full attention.
    /// Bidirectional: (p - window, p + window).
    pub window: Option<usize>,
    /// A query sees only keys at or before its position. False for a bidirectional model
    /// (`ModelSpec::causal`): it sees every key of its pass, within the window.
    pub causal: bool,
}

/// How far a backend may round activations (the open option `precision`).
///
/// Both precisions keep every bit-level invariant of one backend: batched == sequential,
/// truncate/restore == fresh, any thread count == one thread. Only the distance to HF differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// Activations stay f32 end to end (logits within 1e-4 of HF on the golden fixtures).
    Exact,
    /// Activations may be rounded per 32-element block to 8 bits for integer dot products
    /// against block-quantized weights, as llama.cpp does, and functions may take faster forms
    /// (on the host: a polynomial exponent in GELU; attention and SiLU keep `Exact`'s
    /// arithmetic). A backend without such kernels runs `Exact` and says so through
    /// `Backend::precision`.
    Fast,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Exact => "exact",
            Precision::Fast => "fast",
        }
    }
    /// The default for a pack: `Fast` when its weights are block-quantized (8 bits or fewer),
    /// `Exact` for float packs, where rounding activations would lose what the weights keep.
    pub fn default_for(any_quantized_matrix: bool) -> Precision {
        if any_quantized_matrix {
            Precision::Fast
        } else {
            Precision::Exact
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Precision> {
        match s {
            "exact" => Ok(Precision::Exact),
            "fast" => Ok(Precision::Fast),
            other => Err(Error::new(Status::ErrUnsupportedPrecision, format!("precision {other:?} is not exact or fast"))),
        }
    }
}

/// What a device backend has done, cumulative since it was made (`Backend::counters`): the
/// tests read differences around a pass to show the device path is real.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceCounters {
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Buffer-to-buffer copies recorded (KV appends, plane growth, activation copies).
    pub copies: u64,
    /// Queue submissions.
    pub submissions: u64,
    /// Bytes of activations brought back to host memory by `Backend::read` (the logits).
    pub bytes_read: u64,
    /// Bytes of KV planes brought back to host memory (snapshots).
    pub kv_bytes_read: u64,
    /// Bytes of weights resident on the device (matrices and vectors).
    pub weight_bytes: u64,
    /// Graphs compiled (the graph backend: one per pass shape and KV bucket).
    pub graphs_compiled: u64,
    /// Bytes of inputs handed to the device (the graph backend: token ids, positions, and
    /// any activation a graph reads from host memory).
    pub bytes_written: u64,
}

/// Most threads one model may ask for, the calling thread included: a larger request is
/// refused with `ErrLimitExceeded`, not clamped.
pub const MAX_THREADS: usize = 256;

/// Whether every value is finite (no NaN, no infinity): one pass, in 16 lanes of the largest
/// magnitude bits, which vectorizes (a value's exponent bits all set is NaN or infinity).
/// `Backend::add_rows_scaled` on host slices: the one definition every backend's result equals.
pub fn add_rows_scaled(out: &mut [f32], y: &[f32], rows: &[usize], weights: &[f32], width: usize) {
    for ((&r, &w), y) in rows.iter().zip(weights).zip(y.chunks_exact(width)) {
        for (o, &v) in out[r * width..(r + 1) * width].iter_mut().zip(y) {
            *o += w * v;
        }
    }
}

pub fn all_finite(values: &[f32]) -> bool {
    const EXPONENT: u32 = 0x7f80_0000;
    let mut lanes = [0u32; 16];
    let chunks = values.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = (*m).max(v.to_bits() & 0x7fff_ffff);
        }
    }
    let largest = tail.iter().map(|v| v.to_bits() & 0x7fff_ffff).chain(lanes).max().unwrap_or(0);
    largest < EXPONENT
}

/// The op set the forward engine is written against. Row counts are explicit; `len`s count f32
/// elements; a buffer may be longer than what an op uses (scratch is sized for the widest layer).
pub trait Backend: Send + Sync {
    fn name(&self) -> &'static str;
    /// Worker threads one pass may use (1 for a backend without any).
    fn threads(&self) -> usize {
        1
    }
    /// Caps the threads of this model's later passes (`threads <= MAX_THREADS`, checked by the
    /// caller; 0 = one per core). A backend without worker threads ignores it. On failure the
    /// cap is unchanged.
    fn set_threads(&self, _threads: usize) -> Result<()> {
        Ok(())
    }
    /// The precision this backend computes in (what `packlm_info` reports).
    fn precision(&self) -> Precision {
        Precision::Exact
    }
    /// The device a backend computes on, for `packlm info` (None for host memory).
    fn device(&self) -> Option<String> {
        None
    }
    /// What a device backend has done so far (None for host memory).
    fn counters(&self) -> Option<DeviceCounters> {
        None
    }
    /// Refuses, at open, a model this backend cannot run (a head wider than its kernels take).
    fn accepts(&self, _spec: &ModelSpec) -> Result<()> {
        Ok(())
    }
    /// Most rows one pass may carry; the engine splits a longer one (the bits of a row do not
    /// depend on the pass it is in). A device backend bounds it by its largest binding.
    fn max_pass_rows(&self, _spec: &ModelSpec) -> usize {
        usize::MAX
    }
    /// The rows of the next part of a pass with `rows` rows left (at most `max_pass_rows`):
    /// `rows` itself but where a backend compiles a graph per pass shape, which takes fewer so
    /// that a few shapes serve every length (the bits of a row do not depend on its pass).
    fn part_rows(&self, rows: usize) -> usize {
        rows
    }
    /// Most positions a session may hold on this backend (sessions are capped to it).
    fn max_positions(&self, _spec: &ModelSpec) -> usize {
        usize::MAX
    }
    /// Most activation rows a matmul over a large matrix takes for about the time of one (up to
    /// there the weights' reading bounds the pass, not the arithmetic); usize::MAX where the
    /// backend knows no such bound. `verify` projects its first rows to logits in a tile of this
    /// many, so that a draft rejected early does not pay for the rows after it (all its rows at
    /// once where the session's last verify took all its drafts).
    fn rows_for_one(&self) -> usize {
        usize::MAX
    }
    /// The engine's call after each layer of a pass: a device backend submits the layer's work
    /// here, so that the abort flag, checked between layers, is seen while a pass runs.
    fn layer_done(&self) {}
    /// The first failure of deferred device work since the last call (a graph the provider
    /// rejected, a run that failed), which the ops themselves cannot return: the values it
    /// should have made are NaN, and the engine fails the pass with this error instead of
    /// `ErrNonFinite`. None for a backend that computes as it is called.
    fn take_error(&self) -> Option<Error> {
        None
    }
    /// The engine's word that `t`'s values are not read again before an op writes them (its
    /// pass buffers once a pass is done with them): a backend that would copy them back to host
    /// memory when its deferred work runs need not. Backends that compute as they are called
    /// ignore it.
    fn forget(&self, _t: &Tensor) {}

    // Memory.
    /// Prepares a matrix once at open.
    fn prepare_matrix(&self, w: &WeightTensor) -> Result<Weight>;
    /// Prepares a small f32 vector once at open.
    fn prepare_vector(&self, v: &[f32]) -> Result<Vector>;
    /// The engine's call once every weight of a model is prepared (the end of an open): a
    /// backend may start work it put off, on threads of its own, as long as every result keeps
    /// its bits whether that work is done or not.
    fn weights_prepared(&self) {}
    /// Whether every weight is in the layout the backend keeps for the rest of the model's
    /// life: false while work started by `weights_prepared` is queued or running (or if it
    /// could not be done), true once it is done or where there is none. Results are the same
    /// bits either way; speed and memory are what change.
    fn weights_ready(&self) -> bool {
        true
    }
    /// A zeroed activation buffer of `len` f32 elements.
    fn tensor(&self, len: usize) -> Tensor;
    /// Elements `start..start + out.len()` of `t` into `out`, in host memory: the only way
    /// values leave the backend (a verify reads its logits one row at a time into a buffer it
    /// keeps, and stops at the row its new token comes from).
    fn read_into(&self, t: &Tensor, start: usize, out: &mut [f32]);
    /// The first `len` elements of `t`, in host memory (`read_into`).
    fn read(&self, t: &Tensor, len: usize) -> Vec<f32> {
        let mut out = vec![0.0; len];
        self.read_into(t, 0, &mut out);
        out
    }
    /// The index of the largest of the `row.len()` elements of `t` from `start`, by
    /// `sample::argmax`'s rule (the first on ties; a NaN is never larger, but one at the first
    /// element is kept), and whether `row` now holds those elements. A greedy verify judges its
    /// rows this way and reads back only the row its new token comes from. The provided form
    /// reads the row into `row` and searches it there; a host-memory backend searches it where
    /// it lies.
    fn argmax(&self, t: &Tensor, start: usize, row: &mut [f32]) -> (u32, bool) {
        self.read_into(t, start, row);
        (crate::sample::argmax(row), true)
    }
    /// Whether the `len` elements of `t` from `start` are all finite (no NaN, no infinity): a
    /// greedy verify checks the rows `argmax` judged where they lie. The provided form reads
    /// them back a block at a time; a host-memory backend checks them in place.
    fn all_finite(&self, t: &Tensor, start: usize, len: usize) -> bool {
        let mut block = [0.0f32; 1024];
        let mut at = start;
        while at < start + len {
            let n = block.len().min(start + len - at);
            self.read_into(t, at, &mut block[..n]);
            if !all_finite(&block[..n]) {
                return false;
            }
            at += n;
        }
        true
    }
    /// Writes `data` into the first `data.len()` elements of `t` (tests feed ops this way; the
    /// engine's inputs are token ids).
    fn upload(&self, data: &[f32], t: &mut Tensor);
    /// A session's empty KV storage for this model's layers.
    fn new_kv(&self, layers: &[LayerSpec]) -> Box<dyn KvStore>;

    // Row operations; `rows` rows of the given width.
    /// Row i of `out` = `table` row `tokens[i]` (as f32), times `scale` when given.
    fn embed(&self, table: &Weight, tokens: &[u32], scale: Option<f32>, out: &mut Tensor);
    /// RMSNorm of each `width`-wide row of `x` into `out` (`w` already in its effective form).
    fn rms_norm(&self, x: &Tensor, w: &Vector, eps: f32, rows: usize, width: usize, out: &mut Tensor);
    /// In-place RMSNorm of each `width`-wide row.
    fn rms_norm_inplace(&self, x: &mut Tensor, w: &Vector, eps: f32, rows: usize, width: usize);
    /// `dst[..len] = src[..len]`.
    fn copy(&self, src: &Tensor, dst: &mut Tensor, len: usize);
    /// `out[m][j] = sum_k x[m][k] * w[j][k]` for `m < rows`.
    fn matmul(&self, w: &Weight, x: &Tensor, rows: usize, out: &mut Tensor);
    /// Adds `bias` to each of `rows` rows of width `bias.len()`.
    fn add_bias(&self, x: &mut Tensor, bias: &Vector, rows: usize);
    /// RMS-normalizes each `head_dim`-wide head of `rows` rows of width `width`, times `w`
    /// (`head_dim` wide) when given (q/k-norm), without a weight otherwise (v-norm).
    fn head_norm(&self, x: &mut Tensor, w: Option<&Vector>, eps: f32, rows: usize, width: usize, head_dim: usize);
    /// Rotary embedding of every `head_dim`-wide head of row r at position `start + r`.
    fn rope(&self, x: &mut Tensor, rope: &RopeSpec, rows: usize, width: usize, head_dim: usize, start: usize);
    /// `gate[i] = act(gate[i]) * up[i]` for `i < len`.
    fn gated_activation(&self, act: Activation, gate: &mut Tensor, up: &Tensor, len: usize);
    /// `x[i] += y[i]` for `i < len`.
    fn add(&self, x: &mut Tensor, y: &Tensor, len: usize);
    /// `x[i] *= s` for `i < len`.
    fn scale(&self, x: &mut Tensor, s: f32, len: usize);
    /// `x[i] = tanh(x[i] / cap) * cap` for `i < len`.
    fn softcap(&self, x: &mut Tensor, cap: f32, len: usize);
    /// Rows `dst_row..dst_row + rows` of `dst` = rows `src_row..src_row + rows` of `src`, each
    /// `width` wide (a pass over several sessions moves each session's rows to and from its
    /// attention with it).
    #[allow(clippy::too_many_arguments)]
    fn copy_rows(&self, src: &Tensor, src_row: usize, dst: &mut Tensor, dst_row: usize, rows: usize, width: usize);
    /// A LoRA update of `rows` rows: `out += s * ((x A^T) B^T)`, A (rank x n_in), B (n_out x
    /// rank) and `bt` the same B transposed (rank x n_out); `r` (rows x rank) and `delta` (rows
    /// x n_out) are scratch. The default is two matmuls, a scale and an add (PEFT's order); a
    /// backend may compute it otherwise, each row's bits depending on nothing but the row.
    #[allow(clippy::too_many_arguments)]
    fn lora(&self, a: &Weight, b: &Weight, bt: &Weight, x: &Tensor, rows: usize, s: f32, r: &mut Tensor, delta: &mut Tensor, out: &mut Tensor) {
        let _ = bt;
        let n_out = b.rows();
        self.matmul(a, x, rows, r);
        self.matmul(b, r, rows, delta);
        self.scale(delta, s, rows * n_out);
        self.add(out, delta, rows * n_out);
    }
    /// `out = x W^T` (`matmul`), `+= bias` (`add_bias`), then each update in order (`lora`, over
    /// the same `x`): a map with its adapters. The default is those calls; a backend may run
    /// them together, with the bits of those calls.
    #[allow(clippy::too_many_arguments)]
    fn matmul_lora(&self, w: &Weight, bias: Option<&Vector>, x: &Tensor, rows: usize, out: &mut Tensor, updates: &[LoraArgs], r: &mut Tensor, delta: &mut Tensor) {
        self.matmul(w, x, rows, out);
        if let Some(b) = bias {
            self.add_bias(out, b, rows);
        }
        for u in updates {
            self.lora(u.a, u.b, u.bt, x, rows, u.s, r, delta, out);
        }
    }
    /// Row i of `out` (`width` wide) = row `rows[i]` of `x`.
    fn gather_rows(&self, x: &Tensor, rows: &[usize], width: usize, out: &mut Tensor);
    /// Whether a mixture of experts routes on this backend (`route`, `add_rows_weighted`) with
    /// every expert over every row, instead of reading the router's logits back to pick each
    /// expert's rows: a backend whose passes are static graphs cannot follow shapes that depend
    /// on values (engine/moe.rs `moe_block_dense`).
    fn routes_where_the_logits_are(&self) -> bool {
        false
    }
    /// Each of `rows` rows of router logits (`moe.n_experts` wide) -> the row's weight for every
    /// expert, in place: `engine::moe::route`'s weights where it chooses, zero elsewhere. The
    /// provided form reads the logits back and routes on the host.
    fn route(&self, logits: &mut Tensor, moe: &crate::semantics::MoeSpec, rows: usize) {
        let n = moe.n_experts;
        let mut p = self.read(logits, rows * n);
        let mut dense = vec![0.0f32; rows * n];
        for (r, row) in p.chunks_exact_mut(n).enumerate() {
            crate::engine::moe::route(row, moe, |e, w| dense[r * n + e] = w);
        }
        self.upload(&dense, logits);
    }
    /// Row r of `out` (`width` wide) += `weights[r * n + column]` x row r of `y`, for r < rows;
    /// the product and the sum each rounded to f32, as `add_rows_scaled`. The provided form
    /// reads both back and writes `out`.
    #[allow(clippy::too_many_arguments)]
    fn add_rows_weighted(&self, out: &mut Tensor, y: &Tensor, weights: &Tensor, column: usize, n: usize, rows: usize, width: usize) {
        let w: Vec<f32> = self.read(weights, rows * n).chunks_exact(n).map(|r| r[column]).collect();
        let all: Vec<usize> = (0..rows).collect();
        self.add_rows_scaled(out, y, &all, &w, width);
    }
    /// `x[i] = 1 / (1 + e^-x[i])` for `i < len` (a shared expert's gate). The provided form
    /// computes it on the host (`engine::moe::sigmoid`).
    fn sigmoid(&self, x: &mut Tensor, len: usize) {
        let v: Vec<f32> = self.read(x, len).into_iter().map(crate::engine::moe::sigmoid).collect();
        self.upload(&v, x);
    }
    /// Row `rows[j]` of `out` += `weights[j]` x row j of `y` (rows `width` wide), for each j in
    /// order: a mixture of experts adds each expert's output rows, scaled by the router's weight,
    /// into the rows routed to it. The product and the sum are each rounded to f32 (no fused
    /// multiply-add), as HF's `expert_out * routing_weight` then `index_add_`. This default reads
    /// both tensors and writes `out` back; a backend computes it in place where it can.
    fn add_rows_scaled(&self, out: &mut Tensor, y: &Tensor, rows: &[usize], weights: &[f32], width: usize) {
        let mut o = self.read(out, out.len());
        let y = self.read(y, rows.len() * width);
        add_rows_scaled(&mut o, &y, rows, weights, width);
        self.upload(&o, out);
    }
    /// Row r of `out` (`width` wide) = columns `offset..offset + width` of row r of `src`
    /// (`src_width` wide), for `r < rows`.
    fn gather_columns(&self, src: &Tensor, rows: usize, src_width: usize, offset: usize, width: usize, out: &mut Tensor);
    /// Gemma4 per-layer inputs: `c[r][i] = (c[r][i] + table[tokens[r]][i] * table_scale) * combine`.
    fn per_layer_combine(&self, c: &mut Tensor, table: &Weight, tokens: &[u32], table_scale: f32, combine: f32);

    // The session's keys and values.
    /// Appends `rows` rows of keys and values (`kv_width` wide) to `layer`'s own plane.
    fn kv_append(&self, kv: &mut dyn KvStore, layer: usize, k: &Tensor, v: &Tensor, rows: usize);
    /// Causal attention of `rows` query rows (`q`: rows x n_heads*head_dim) at positions
    /// `start..start + rows` over the plane of layer `plane` (the layer's own, or its owner's)
    /// into `out` (rows x n_heads*head_dim). `sinks` (n_heads), when given, are each head's sink
    /// logit: it joins the softmax (its maximum and its sum, unscaled) and takes no value
    /// (transformers gpt-oss `eager_attention_forward`).
    #[allow(clippy::too_many_arguments)]
    fn attention(&self, kv: &dyn KvStore, plane: usize, shape: &AttentionShape, sinks: Option<&[f32]>, q: &Tensor, rows: usize, start: usize, out: &mut Tensor);
}

/// Which backend the open options ask for (`packlm_open_options.backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    Host,
    Reference,
    Accelerator,
    /// ONNX Runtime on an execution provider (the graph backend, `graph`).
    Npu,
}


impl std::str::FromStr for BackendKind {
    type Err = Error;
    /// The names of the CLI and bench: host, reference, gpu (accelerator is an alias).
    fn from_str(s: &str) -> Result<BackendKind> {
        match s {
            "host" => Ok(BackendKind::Host),
            "reference" => Ok(BackendKind::Reference),
            "gpu" | "accelerator" => Ok(BackendKind::Accelerator),
            "npu" => Ok(BackendKind::Npu),
            other => Err(Error::invalid(format!("backend {other:?} is not host, reference, gpu or npu"))),
        }
    }
}

/// Creates the backend; `threads == 0` means one per core. `precision` is what the backend may
/// use; one without reduced-precision kernels (reference) runs `Exact` whatever is asked.
pub fn create(kind: BackendKind, threads: usize, precision: Precision) -> Result<Box<dyn Backend>> {
    create_with(kind, threads, precision, &graph::GraphOptions::default())
}

/// `create`, with the graph backend's options (library, provider) for `BackendKind::Npu`.
pub fn create_with(kind: BackendKind, threads: usize, precision: Precision, graph_opts: &graph::GraphOptions) -> Result<Box<dyn Backend>> {
    match kind {
        // Exact arithmetic (f32 graphs) whatever precision is asked.
        BackendKind::Npu => Ok(Box::new(graph::GraphBackend::new(graph_opts, threads)?)),
        BackendKind::Host => Ok(Box::new(cpu::CpuBackend::new(host::HostBackend::new(threads)?.with_precision(precision)))),
        BackendKind::Reference => Ok(Box::new(cpu::CpuBackend::new(reference::ReferenceBackend))),
        // The GPU through wgpu.
        #[cfg(feature = "gpu")]
        BackendKind::Accelerator => Ok(Box::new(gpu::GpuBackend::new()?)),
        #[cfg(not(feature = "gpu"))]
        BackendKind::Accelerator => Err(Error::new(
            Status::ErrBackendUnavailable,
            "this build of packlm has no GPU backend (built without the cargo feature `gpu`)",
        )),
    }
}
