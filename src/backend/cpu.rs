//! Backends that compute in host memory: activations are `Vec<f32>`, weights the pack's tensors
//! as they are (memory-mapped, not copied) with whatever the kernels prepared of them at open
//! ([`CpuWeight`]: the host kernels' packed layouts), KV planes `Vec<f32>`s. What differs between them is
//! only the two heavy kernels, matmul and attention ([`Kernels`]): `reference` (scalar) and
//! `host` (SIMD, worker threads). The row operations (norms, rope, activations, adds) are the
//! plain functions below, shared by both.

use std::any::Any;

use crate::backend::attention::AttentionArgs;
use crate::kv::pages::{Ledger, PagedPlane};
use crate::backend::{AttentionShape, Backend, KvStore, LoraArgs, Precision, Tensor, Vector, Weight};
use crate::error::Result;
use crate::pack::tensor::WeightTensor;
use crate::semantics::rope::{apply_rope, apply_rope_table, cos_sin, RopeSpec};
use crate::semantics::{Activation, KvSource, LayerSpec};

/// Most rope pairs (rotary_dims / 2) that `rope` makes a table of; more rotate each head
/// through `apply_rope`.
const MAX_PAIRS: usize = 512;

/// Most rows whose (cos, sin) tables `RopeTables` keeps: decode, verify and short prefill, where
/// the sin_cos calls are a visible part of a pass (about 2% of a verify of 8 drafted rows on
/// Gemma3 in `perf`, recomputed for q and k of every layer). A long prefill's tables would be
/// large and its matmuls dwarf them.
const ROPE_TABLE_MAX_ROWS: usize = 64;

/// Tables `RopeTables` keeps: a pass uses one rope or two (Gemma3: the sliding layers' base
/// and the full layers'), in the same pattern at every layer.
const ROPE_TABLES_KEPT: usize = 2;

/// The (cos, sin) pairs of `rows` positions from `start` for one rope, row after row.
#[derive(Default)]
struct RopeTable {
    inv_freq: Vec<f32>,
    factor: u32,
    start: usize,
    rows: usize,
    pairs: Vec<(f32, f32)>,
}

/// The last tables a thread's `rope` calls made: a pass ropes q and k of every layer at the
/// same positions, so all but the first call for each rope read a kept table. A table is found
/// by what its values depend on (the inverse frequencies and the factor, compared by bits, and
/// the positions), not by where the spec lies, so a spec of another model at a reused address
/// cannot match. The values are the same `cos_sin` calls, so the same bits.
#[derive(Default)]
struct RopeTables {
    kept: Vec<RopeTable>,
    /// The table used last; a miss replaces the other (least recently used of two).
    recent: usize,
}

impl RopeTables {
    fn get(&mut self, rope: &RopeSpec, start: usize, rows: usize) -> &[(f32, f32)] {
        let half = rope.rotary_dims / 2;
        let freqs = &rope.inv_freq[..half];
        let factor = rope.attention_factor.to_bits();
        let same = |t: &RopeTable| {
            t.start == start && t.rows == rows && t.factor == factor && t.inv_freq.len() == half && t.inv_freq.iter().zip(freqs).all(|(a, b)| a.to_bits() == b.to_bits())
        };
        let i = match self.kept.iter().position(same) {
            Some(i) => i,
            None => {
                let i = if self.kept.len() < ROPE_TABLES_KEPT {
                    self.kept.push(RopeTable::default());
                    self.kept.len() - 1
                } else {
                    (self.recent + 1) % ROPE_TABLES_KEPT
                };
                let t = &mut self.kept[i];
                (t.start, t.rows, t.factor) = (start, rows, factor);
                t.inv_freq.clear();
                t.inv_freq.extend_from_slice(freqs);
                t.pairs.clear();
                t.pairs.reserve(rows * half);
                for r in 0..rows {
                    for i in 0..half {
                        t.pairs.push(cos_sin(rope, start + r, i));
                    }
                }
                i
            }
        };
        self.recent = i;
        &self.kept[i].pairs
    }
}

thread_local! {
    static ROPE_TABLES: std::cell::RefCell<RopeTables> = std::cell::RefCell::new(RopeTables::default());
}

/// The heavy kernels of a host-memory backend, on plain slices.
pub trait Kernels: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    /// Worker threads the kernels use.
    fn threads(&self) -> usize {
        1
    }
    /// See `Backend::set_threads`.
    fn set_threads(&self, _threads: usize) -> Result<()> {
        Ok(())
    }
    /// The precision `matmul` computes in (see `Backend::precision`).
    fn precision(&self) -> Precision {
        Precision::Exact
    }
    /// See `Backend::rows_for_one`.
    fn rows_for_one(&self) -> usize {
        usize::MAX
    }
    /// `out[m * n_out + j] = sum_k x[m * n_in + k] * w[j, k]` for `m < rows`, where
    /// `w` is `[n_out, n_in]` in any weight type. `x.len() == rows * n_in`,
    /// `out.len() == rows * n_out`. Each weight row is read once for all `rows`.
    fn matmul(&self, w: &WeightTensor, x: &[f32], rows: usize, out: &mut [f32]);
    /// What the kernels keep of a matrix beside its stored bytes, made once at open (the host
    /// kernels' packed layouts); None: the bytes alone.
    fn prepare(&self, _w: &WeightTensor) -> Result<Option<Prepared>> {
        Ok(None)
    }
    /// See `Backend::weights_prepared`.
    fn weights_prepared(&self) {}
    /// See `Backend::weights_ready`.
    fn weights_ready(&self) -> bool {
        true
    }
    /// `matmul` over a prepared matrix, the same bits as `matmul` over its tensor.
    fn matmul_prepared(&self, w: &CpuWeight, x: &[f32], rows: usize, out: &mut [f32]) {
        self.matmul(&w.tensor, x, rows, out)
    }
    /// `sample::argmax(x)`; a kernel set may split the search across its threads (the same
    /// index).
    fn argmax(&self, x: &[f32]) -> u32 {
        crate::sample::argmax(x)
    }
    /// `gate[i] = act(gate[i]) * up[i]`; a kernel set may use faster forms at `fast`.
    fn gated_activation(&self, act: Activation, gate: &mut [f32], up: &[f32]) {
        gated_activation(act, gate, up)
    }
    /// Causal attention of `rows` query rows (`q`: rows x n_heads*head_dim) against a KV plane;
    /// see `attention::AttentionArgs`.
    fn attention(&self, args: &AttentionArgs, q: &[f32], rows: usize, out: &mut [f32]);
    /// `task(i)` once for each i < n, on any of the kernels' threads; returns when all have run.
    fn run_tasks(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..n).for_each(task)
    }
    /// `matmul_prepared`, and `task(i)` for each i < n (work that does not touch `out`) run
    /// with it, on any of the kernels' threads; returns when both are done.
    fn matmul_prepared_with(&self, w: &CpuWeight, x: &[f32], rows: usize, out: &mut [f32], n: usize, task: &(dyn Fn(usize) + Sync)) {
        self.matmul_prepared(w, x, rows, out);
        self.run_tasks(n, task);
    }
}

/// What `Kernels::prepare` made of a matrix, for its own `matmul_prepared` to read.
pub trait PreparedMatrix: Send + Sync + 'static {
    /// Row r, dequantized into `dst` exactly as the stored row gives it; false where this copy
    /// does not hold row r. Embedding lookups read it, so that a matrix kept only in its
    /// prepared form (the stored pages handed back) is not read twice.
    fn row_f32(&self, r: usize, dst: &mut [f32]) -> bool;
    fn as_any(&self) -> &dyn Any;
}

pub type Prepared = std::sync::Arc<dyn PreparedMatrix>;

/// A host-memory backend's matrix: the pack's tensor (embedding rows are read from it) and what
/// the kernels prepared.
pub struct CpuWeight {
    pub tensor: WeightTensor,
    pub prepared: Option<Prepared>,
}

impl CpuWeight {
    /// The tensor as `prepare` leaves it for `kernels`.
    pub fn new(kernels: &impl Kernels, tensor: &WeightTensor) -> Result<CpuWeight> {
        Ok(CpuWeight { prepared: kernels.prepare(tensor)?, tensor: tensor.clone() })
    }

    /// Row r dequantized into `dst`, from the prepared copy where it holds the row.
    pub fn row_f32(&self, r: usize, dst: &mut [f32]) {
        if !self.prepared.as_ref().is_some_and(|p| p.row_f32(r, dst)) {
            self.tensor.row_f32(r, dst);
        }
    }
}

/// A backend over host memory, with kernels `K`.
pub struct CpuBackend<K> {
    kernels: K,
}

impl<K: Kernels> CpuBackend<K> {
    pub fn new(kernels: K) -> CpuBackend<K> {
        CpuBackend { kernels }
    }
    pub fn kernels(&self) -> &K {
        &self.kernels
    }
}

/// A session's KV planes in host memory, in pages shared copy-on-write with its forks
/// (kv/pages.rs). Every position ever stepped is kept (sliding layers included), so any
/// rollback is exact.
#[derive(Clone, Debug, Default)]
pub struct CpuKv {
    /// Indexed by layer; None for a layer that reads another layer's plane.
    planes: Vec<Option<PagedPlane>>,
    /// Positions held (the same in every plane, outside a pass).
    positions: usize,
    /// Bytes of the pages of this store and of every store it shares pages with.
    ledger: Ledger,
}

impl CpuKv {
    pub fn new(layers: &[LayerSpec]) -> CpuKv {
        let planes = layers
            .iter()
            .map(|l| match l.kv_source {
                KvSource::Own => Some(PagedPlane::new(l.kv_width())),
                KvSource::SharedWith { .. } => None,
            })
            .collect();
        CpuKv { planes, positions: 0, ledger: Ledger::default() }
    }

    /// `layer`'s own plane, with the rows appended so far.
    pub fn plane(&self, layer: usize) -> Option<&PagedPlane> {
        self.planes.get(layer)?.as_ref()
    }
}

impl KvStore for CpuKv {
    fn positions(&self) -> usize {
        self.positions
    }
    fn advance(&mut self, rows: usize) {
        self.positions += rows;
    }
    fn truncate(&mut self, n: usize) {
        for p in self.planes.iter_mut().flatten() {
            p.truncate(n);
        }
        self.positions = self.positions.min(n);
    }
    fn n_layers(&self) -> usize {
        self.planes.len()
    }
    fn plane_width(&self, layer: usize) -> Option<usize> {
        self.planes.get(layer)?.as_ref().map(|p| p.width)
    }
    fn export_plane(&self, layer: usize, visit: &mut dyn FnMut(&[f32], &[f32])) {
        if let Some(p) = self.plane(layer) {
            let (k, v) = p.gather(p.len);
            visit(&k, &v);
        }
    }
    fn import(&mut self, planes: Vec<Option<(Vec<f32>, Vec<f32>)>>, positions: usize) -> Result<()> {
        let widths: Vec<Option<usize>> = self.planes.iter().map(|p| p.as_ref().map(|p| p.width)).collect();
        let ledger = &self.ledger;
        self.planes = crate::kv::pair_planes(widths, planes, |width, k, v| PagedPlane::from_rows(width, &k, &v, ledger));
        self.positions = positions;
        Ok(())
    }
    fn fork(&self) -> Box<dyn KvStore> {
        let mut f = self.clone();
        f.truncate(self.positions);
        Box::new(f)
    }
    fn family_bytes(&self) -> usize {
        self.ledger.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

fn data(t: &Tensor) -> &[f32] {
    t.get::<Vec<f32>>()
}

fn data_mut(t: &mut Tensor) -> &mut [f32] {
    t.get_mut::<Vec<f32>>()
}

fn cpu_kv(kv: &dyn KvStore) -> &CpuKv {
    kv.as_any().downcast_ref().unwrap_or_else(|| panic!("a KV store of another backend was passed to this one"))
}

/// An adapter's A and B^T as `backend::lora` reads them.
fn lora_job<'a>(a: &'a Weight, bt: &'a Weight, s: f32) -> crate::backend::lora::Job<'a> {
    use crate::backend::lora::{Dims, Job, Rows};
    let (a, bt) = (&a.get::<CpuWeight>().tensor, &bt.get::<CpuWeight>().tensor);
    Job { a: Rows::of(a), bt: Rows::of(bt), d: Dims { rank: a.rows(), n_in: a.cols(), n_out: bt.cols() }, s }
}

impl<K: Kernels> Backend for CpuBackend<K> {
    fn name(&self) -> &'static str {
        self.kernels.name()
    }
    fn threads(&self) -> usize {
        self.kernels.threads()
    }
    fn set_threads(&self, threads: usize) -> Result<()> {
        self.kernels.set_threads(threads)
    }
    fn precision(&self) -> Precision {
        self.kernels.precision()
    }
    fn rows_for_one(&self) -> usize {
        self.kernels.rows_for_one()
    }

    fn prepare_matrix(&self, w: &WeightTensor) -> Result<Weight> {
        Ok(Weight::new(w.rows(), w.cols(), CpuWeight::new(&self.kernels, w)?))
    }
    /// `backend::lora`'s kernel (the same bits on every path and thread count); A and B^T are
    /// read in their own element type. Its pieces go to the kernels' threads where there is
    /// enough work to pay for the hand-off.
    fn lora(&self, a: &Weight, _b: &Weight, bt: &Weight, x: &Tensor, rows: usize, s: f32, _r: &mut Tensor, _delta: &mut Tensor, out: &mut Tensor) {
        let jobs = [lora_job(a, bt, s)];
        let (n_in, n_out) = (jobs[0].d.n_in, jobs[0].d.n_out);
        let threads = crate::backend::lora::worth_threads(&jobs, rows);
        crate::backend::lora::lora_rows(&jobs, &data(x)[..rows * n_in], rows, &mut data_mut(out)[..rows * n_out], |n, task, _| {
            if threads {
                self.kernels.run_tasks(n, task)
            } else {
                (0..n).for_each(task)
            }
        });
    }
    /// The updates' pieces run among the matmul's tasks (`Kernels::matmul_prepared_with`); their
    /// sums are added after it and the bias, as `lora` adds them.
    fn matmul_lora(&self, w: &Weight, bias: Option<&Vector>, x: &Tensor, rows: usize, out: &mut Tensor, updates: &[LoraArgs], _r: &mut Tensor, _delta: &mut Tensor) {
        let w = w.get::<CpuWeight>();
        let (n_out, n_in) = (w.tensor.rows(), w.tensor.cols());
        let jobs: Vec<_> = updates.iter().map(|u| lora_job(u.a, u.bt, u.s)).collect();
        let xs = &data(x)[..rows * n_in];
        crate::backend::lora::lora_rows(&jobs, xs, rows, &mut data_mut(out)[..rows * n_out], |n, task, out| {
            self.kernels.matmul_prepared_with(w, xs, rows, out, n, task);
            if let Some(b) = bias {
                add_bias(out, b.get::<Vec<f32>>());
            }
        });
    }
    fn prepare_vector(&self, v: &[f32]) -> Result<Vector> {
        Ok(Vector::new(v.len(), v.to_vec()))
    }
    fn weights_prepared(&self) {
        self.kernels.weights_prepared()
    }
    fn weights_ready(&self) -> bool {
        self.kernels.weights_ready()
    }
    fn tensor(&self, len: usize) -> Tensor {
        Tensor::new(len, vec![0.0f32; len])
    }
    // `read` without the zeroed buffer of the provided one: a step's logits each step.
    fn read(&self, t: &Tensor, len: usize) -> Vec<f32> {
        data(t)[..len].to_vec()
    }
    fn read_into(&self, t: &Tensor, start: usize, out: &mut [f32]) {
        out.copy_from_slice(&data(t)[start..start + out.len()]);
    }
    fn argmax(&self, t: &Tensor, start: usize, row: &mut [f32]) -> (u32, bool) {
        (self.kernels.argmax(&data(t)[start..start + row.len()]), false)
    }
    fn all_finite(&self, t: &Tensor, start: usize, len: usize) -> bool {
        crate::backend::all_finite(&data(t)[start..start + len])
    }
    fn upload(&self, src: &[f32], t: &mut Tensor) {
        data_mut(t)[..src.len()].copy_from_slice(src);
    }
    fn new_kv(&self, layers: &[LayerSpec]) -> Box<dyn KvStore> {
        Box::new(CpuKv::new(layers))
    }

    fn embed(&self, table: &Weight, tokens: &[u32], scale: Option<f32>, out: &mut Tensor) {
        let table = table.get::<CpuWeight>();
        let hidden = table.tensor.cols();
        for (row, &t) in data_mut(out).chunks_exact_mut(hidden).zip(tokens) {
            table.row_f32(t as usize, row);
            if let Some(s) = scale {
                row.iter_mut().for_each(|v| *v *= s);
            }
        }
    }
    fn rms_norm(&self, x: &Tensor, w: &Vector, eps: f32, rows: usize, width: usize, out: &mut Tensor) {
        rms_norm(&data(x)[..rows * width], w.get::<Vec<f32>>(), eps, width, &mut data_mut(out)[..rows * width]);
    }
    fn rms_norm_inplace(&self, x: &mut Tensor, w: &Vector, eps: f32, rows: usize, width: usize) {
        rms_norm_inplace(&mut data_mut(x)[..rows * width], w.get::<Vec<f32>>(), eps, width);
    }
    fn copy(&self, src: &Tensor, dst: &mut Tensor, len: usize) {
        data_mut(dst)[..len].copy_from_slice(&data(src)[..len]);
    }
    fn matmul(&self, w: &Weight, x: &Tensor, rows: usize, out: &mut Tensor) {
        let w = w.get::<CpuWeight>();
        let (n_out, n_in) = (w.tensor.rows(), w.tensor.cols());
        self.kernels.matmul_prepared(w, &data(x)[..rows * n_in], rows, &mut data_mut(out)[..rows * n_out]);
    }
    fn add_bias(&self, x: &mut Tensor, bias: &Vector, rows: usize) {
        add_bias(&mut data_mut(x)[..rows * bias.len()], bias.get::<Vec<f32>>());
    }
    fn head_norm(&self, x: &mut Tensor, w: Option<&Vector>, eps: f32, rows: usize, width: usize, head_dim: usize) {
        let x = &mut data_mut(x)[..rows * width];
        match w {
            Some(w) => {
                let w = w.get::<Vec<f32>>();
                // Every head of every row at once: rows of head_dim (`inverse_rms`).
                rms_norm_inplace(x, w, eps, head_dim);
            }
            None => x.chunks_exact_mut(head_dim).for_each(|head| rms_normalize_inplace(head, eps)),
        }
    }
    fn rope(&self, x: &mut Tensor, rope: &RopeSpec, rows: usize, width: usize, head_dim: usize, start: usize) {
        // One (cos, sin) table per row for all its heads (the sin_cos calls were 3% of a
        // decode step when each head made its own); the same bits either way. A pass of up to
        // ROPE_TABLE_MAX_ROWS rows keeps its tables (`RopeTables`).
        let half = rope.rotary_dims / 2;
        if half <= MAX_PAIRS && rows <= ROPE_TABLE_MAX_ROWS {
            ROPE_TABLES.with(|t| {
                let mut tables = t.borrow_mut();
                let pairs = tables.get(rope, start, rows);
                for (r, row) in data_mut(x)[..rows * width].chunks_exact_mut(width).enumerate() {
                    row.chunks_exact_mut(head_dim).for_each(|head| apply_rope_table(&pairs[r * half..(r + 1) * half], head));
                }
            });
            return;
        }
        let mut table = [(0.0f32, 0.0f32); MAX_PAIRS];
        for (r, row) in data_mut(x)[..rows * width].chunks_exact_mut(width).enumerate() {
            if half > MAX_PAIRS {
                row.chunks_exact_mut(head_dim).for_each(|head| apply_rope(rope, head, start + r));
                continue;
            }
            for (i, t) in table[..half].iter_mut().enumerate() {
                *t = cos_sin(rope, start + r, i);
            }
            row.chunks_exact_mut(head_dim).for_each(|head| apply_rope_table(&table[..half], head));
        }
    }
    fn gated_activation(&self, act: Activation, gate: &mut Tensor, up: &Tensor, len: usize) {
        self.kernels.gated_activation(act, &mut data_mut(gate)[..len], &data(up)[..len]);
    }
    fn add(&self, x: &mut Tensor, y: &Tensor, len: usize) {
        add_into(&mut data_mut(x)[..len], &data(y)[..len]);
    }
    fn scale(&self, x: &mut Tensor, s: f32, len: usize) {
        data_mut(x)[..len].iter_mut().for_each(|v| *v *= s);
    }
    fn softcap(&self, x: &mut Tensor, cap: f32, len: usize) {
        softcap(&mut data_mut(x)[..len], cap);
    }
    fn copy_rows(&self, src: &Tensor, src_row: usize, dst: &mut Tensor, dst_row: usize, rows: usize, width: usize) {
        let n = rows * width;
        data_mut(dst)[dst_row * width..][..n].copy_from_slice(&data(src)[src_row * width..][..n]);
    }
    fn gather_rows(&self, x: &Tensor, rows: &[usize], width: usize, out: &mut Tensor) {
        let x = data(x);
        for (o, &r) in data_mut(out).chunks_exact_mut(width).zip(rows) {
            o.copy_from_slice(&x[r * width..(r + 1) * width]);
        }
    }
    fn add_rows_scaled(&self, out: &mut Tensor, y: &Tensor, rows: &[usize], weights: &[f32], width: usize) {
        crate::backend::add_rows_scaled(data_mut(out), data(y), rows, weights, width);
    }
    fn gather_columns(&self, src: &Tensor, rows: usize, src_width: usize, offset: usize, width: usize, out: &mut Tensor) {
        let src = data(src);
        for (r, o) in data_mut(out)[..rows * width].chunks_exact_mut(width).enumerate() {
            o.copy_from_slice(&src[r * src_width + offset..r * src_width + offset + width]);
        }
    }
    fn per_layer_combine(&self, c: &mut Tensor, table: &Weight, tokens: &[u32], table_scale: f32, combine: f32) {
        let table = table.get::<CpuWeight>();
        let width = table.tensor.cols();
        let mut t = vec![0.0f32; width];
        for (row, &tok) in data_mut(c).chunks_exact_mut(width).zip(tokens) {
            table.row_f32(tok as usize, &mut t);
            for (cv, &tv) in row.iter_mut().zip(&t) {
                *cv = (*cv + tv * table_scale) * combine;
            }
        }
    }

    fn kv_append(&self, kv: &mut dyn KvStore, layer: usize, k: &Tensor, v: &Tensor, rows: usize) {
        let kv: &mut CpuKv =
            kv.as_any_mut().downcast_mut().unwrap_or_else(|| panic!("a KV store of another backend was passed to this one"));
        if let Some(Some(plane)) = kv.planes.get_mut(layer) {
            let n = rows * plane.width;
            plane.append(&data(k)[..n], &data(v)[..n], rows, &kv.ledger);
        }
    }
    fn attention(&self, kv: &dyn KvStore, plane: usize, shape: &AttentionShape, sinks: Option<&[f32]>, q: &Tensor, rows: usize, start: usize, out: &mut Tensor) {
        let Some(plane) = cpu_kv(kv).plane(plane) else { return };
        let args = AttentionArgs { shape: *shape, plane, first_position: start, keys: start + rows, sinks };
        let qw = shape.n_heads * shape.head_dim;
        self.kernels.attention(&args, &data(q)[..rows * qw], rows, &mut data_mut(out)[..rows * qw]);
    }
}

/// RMSNorm of each `width`-wide row of `x` into `out`: `w * (x * rsqrt(mean(x^2) + eps))`, as
/// HF's LlamaRMSNorm (f32; the weight already in its effective form, see engine::weights).
/// The mean is accumulated in f64 to keep it exact regardless of width.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, width: usize, out: &mut [f32]) {
    if width == 0 {
        return;
    }
    for (xc, oc) in x.chunks(4 * width).zip(out.chunks_mut(4 * width)) {
        let inv = inverse_rms(xc, eps, width);
        for ((xr, or), &inv) in xc.chunks_exact(width).zip(oc.chunks_exact_mut(width)).zip(&inv) {
            for ((o, &v), &g) in or.iter_mut().zip(xr).zip(w) {
                *o = g * (v * inv);
            }
        }
    }
}

/// In-place RMSNorm of each row.
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32, width: usize) {
    if width == 0 {
        return;
    }
    for xc in x.chunks_mut(4 * width) {
        let inv = inverse_rms(xc, eps, width);
        for (xr, &inv) in xc.chunks_exact_mut(width).zip(&inv) {
            for (v, &g) in xr.iter_mut().zip(w) {
                *v = g * (*v * inv);
            }
        }
    }
}

/// `1 / sqrt(mean(row^2) + eps)` of each whole `width`-wide row of `x` (at most four), the
/// squares summed in f64 one element after another from the first. Four rows' sums run side by
/// side: each add waits for the one before, so one row at a time went at the add's latency (a
/// verify's norms of 9 rows took 5.7 times a decode step's 1 on SmolLM2). Each row's sum is the
/// same chain of operations, so the same bits, whatever rows it comes with.
fn inverse_rms(x: &[f32], eps: f32, width: usize) -> [f32; 4] {
    let inverse = |ss: f64| 1.0 / ((ss / width as f64) as f32 + eps).sqrt();
    let mut out = [0.0f32; 4];
    if x.len() >= 4 * width {
        let xs: [&[f32]; 4] = std::array::from_fn(|i| &x[i * width..(i + 1) * width]);
        let mut ss = [0.0f64; 4];
        for k in 0..width {
            for i in 0..4 {
                let v = xs[i][k] as f64;
                ss[i] += v * v;
            }
        }
        return ss.map(inverse);
    }
    for (o, xr) in out.iter_mut().zip(x.chunks_exact(width)) {
        *o = inverse(xr.iter().fold(0.0f64, |ss, &v| ss + (v as f64) * (v as f64)));
    }
    out
}

/// In-place RMS normalization without a weight (Gemma4 `v_norm`, `with_scale=False`).
pub fn rms_normalize_inplace(x: &mut [f32], eps: f32) {
    let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    let inv = 1.0 / ((ss / x.len() as f64) as f32 + eps).sqrt();
    x.iter_mut().for_each(|v| *v *= inv);
}

/// sqrt(2/pi), of gelu_pytorch_tanh.
pub const GELU_C: f32 = 0.797_884_6;

/// x / (1 + e^-x), with exp.rs's exponent.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + crate::backend::exp::expf(-x))
}

/// `act(gate) * up`, written into `gate`.
pub fn gated_activation(act: Activation, gate: &mut [f32], up: &[f32]) {
    match act {
        Activation::Silu => {
            for (g, &u) in gate.iter_mut().zip(up) {
                *g = silu(*g) * u;
            }
        }
        // gelu_pytorch_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        Activation::GeluTanh => {
            for (g, &u) in gate.iter_mut().zip(up) {
                let x = *g;
                *g = 0.5 * x * (1.0 + (GELU_C * (x + 0.044715 * x * x * x)).tanh()) * u;
            }
        }
        // GptOssExperts._apply_gate: gate.clamp(max=limit), up.clamp(-limit, limit),
        // glu = gate * sigmoid(gate * alpha), (up + 1) * glu; a NaN stays NaN (torch's clamp).
        Activation::ClampedSwiglu { alpha, limit } => {
            for (g, &u) in gate.iter_mut().zip(up) {
                let x = if *g > limit { limit } else { *g };
                let u = if u > limit { limit } else if u < -limit { -limit } else { u };
                let sigmoid = 1.0 / (1.0 + crate::backend::exp::expf(-(x * alpha)));
                *g = (u + 1.0) * (x * sigmoid);
            }
        }
    }
}

/// `tanh(x / cap) * cap` on every element.
pub fn softcap(x: &mut [f32], cap: f32) {
    for v in x {
        *v = (*v / cap).tanh() * cap;
    }
}

/// `x += y`.
pub fn add_into(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Adds `bias` to each `bias.len()`-wide row of `x`.
pub fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        add_into(row, bias);
    }
}

#[cfg(test)]
mod rope_table_tests {
    use super::*;

    fn spec(theta: f32, half: usize, attention_factor: f32) -> RopeSpec {
        RopeSpec {
            kind: "default".into(),
            theta: theta as f64,
            factor: None,
            rotary_dims: 2 * half,
            inv_freq: (0..half).map(|i| theta.powf(-((2 * i) as f32) / (2 * half) as f32)).collect(),
            attention_factor,
        }
    }

    /// Whatever was asked before, a kept table holds the `cos_sin` values of the rope and
    /// positions asked for now: ropes differing in base or in factor alone, other starts and
    /// row counts, two ropes alternating (Gemma3) and a third pushing one out.
    #[test]
    fn kept_rope_tables_are_those_of_the_rope_and_positions_asked_for() {
        let (local, global, scaled) = (spec(10000.0, 4, 1.0), spec(1e6, 4, 1.0), spec(10000.0, 4, 1.25));
        let mut tables = RopeTables::default();
        let calls = [
            (&local, 5, 3),
            (&local, 5, 3),
            (&global, 5, 3),
            (&local, 5, 3),
            (&global, 5, 3),
            (&local, 6, 3),
            (&local, 5, 2),
            (&scaled, 5, 3),
            (&global, 5, 3),
            (&local, 5, 3),
        ];
        for (n, &(rope, start, rows)) in calls.iter().enumerate() {
            let got: Vec<(u32, u32)> = tables.get(rope, start, rows).iter().map(|&(c, s)| (c.to_bits(), s.to_bits())).collect();
            let want: Vec<(u32, u32)> = (0..rows)
                .flat_map(|r| (0..4).map(move |i| cos_sin(rope, start + r, i)))
                .map(|(c, s)| (c.to_bits(), s.to_bits()))
                .collect();
            assert_eq!(got, want, "call {n}: theta {}, factor {}, start {start}, rows {rows}", rope.theta, rope.attention_factor);
            assert!(tables.kept.len() <= ROPE_TABLES_KEPT);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows normed four at a time (`inverse_rms`) give, row by row, the formula written
    /// out: the squares summed in f64 from the first element, the mean cast to f32, then
    /// `w * (x * inv)`; for heads' widths and a model's, row counts around the multiples of
    /// four, and rows of very different sizes side by side.
    #[test]
    fn rows_normed_together_are_each_row_alone() {
        let mut seed = 0x5eed_0000_0000_0031u64;
        let mut next = || (crate::sample::next_u64(&mut seed) >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        for (rows, width) in [(1, 37), (3, 64), (4, 64), (5, 5), (9, 576), (13, 256)] {
            let x: Vec<f32> = (0..rows * width).map(|i| next() * [1e-20, 1.0, 3e15][i / width % 3]).collect();
            let w: Vec<f32> = (0..width).map(|_| next() * 4.0).collect();
            let mut out = vec![f32::NAN; rows * width];
            rms_norm(&x, &w, 1e-6, width, &mut out);
            let mut inplace = x.clone();
            rms_norm_inplace(&mut inplace, &w, 1e-6, width);
            for r in 0..rows {
                let xr = &x[r * width..(r + 1) * width];
                let mut ss = 0.0f64;
                for &v in xr {
                    ss += (v as f64) * (v as f64);
                }
                let inv = 1.0 / ((ss / width as f64) as f32 + 1e-6).sqrt();
                for k in 0..width {
                    let want = w[k] * (xr[k] * inv);
                    assert_eq!(out[r * width + k].to_bits(), want.to_bits(), "{rows} x {width}: row {r}, element {k}");
                    assert_eq!(inplace[r * width + k].to_bits(), want.to_bits(), "{rows} x {width} in place: row {r}, element {k}");
                }
            }
        }
    }
}
