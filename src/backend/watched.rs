//! A backend that passes every call on to another and lets a `Watch` see each one: which op,
//! or which prepared matrix and over how many rows, and the call itself to run (so it may time
//! it). Every method is passed on, the defaulted ones too, so that the engine sees the inner
//! backend's own behaviour. examples/verify_breakdown.rs times a pass's kinds of work with it;
//! the tests count how often each expert's matrices are read in a pass.

use crate::backend::{AttentionShape, Backend, DeviceCounters, KvStore, LoraArgs, Precision, Tensor, Vector, Weight};
use crate::error::Result;
use crate::pack::tensor::WeightTensor;
use crate::semantics::rope::RopeSpec;
use crate::semantics::{Activation, LayerSpec, ModelSpec};

/// What a watched call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// A product with the matrix `Watch::matrix` numbered `id`, over `rows` activation rows
    /// (`matmul`, or `matmul_lora` with its adapters).
    Matrix { id: usize, rows: usize },
    /// Any other call, by its method's name (`attention`, `rms_norm`, `read_into`, ...).
    Op(&'static str),
}

/// What sees the calls.
pub trait Watch: Send + Sync + 'static {
    /// A matrix is being prepared; returns the number its products are reported under.
    fn matrix(&self, w: &WeightTensor) -> usize;
    /// `call` is about to run: `run` runs it (exactly once).
    fn around(&self, call: Call, run: &mut dyn FnMut());
}

/// `inner` with every call shown to `watcher`.
pub struct Watched<W> {
    pub inner: Box<dyn Backend>,
    pub watcher: W,
}

impl<W: Watch> Watched<W> {
    fn watch<R>(&self, call: Call, f: impl FnOnce() -> R) -> R {
        let (mut f, mut r) = (Some(f), None);
        self.watcher.around(call, &mut || r = f.take().map(|f| f()));
        r.expect("Watch::around runs the call once")
    }
}

/// The inner backend's weight behind a watched one.
fn inner(w: &Weight) -> &Weight {
    &w.get::<(usize, Weight)>().1
}

fn id(w: &Weight) -> usize {
    w.get::<(usize, Weight)>().0
}

impl<W: Watch> Backend for Watched<W> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn threads(&self) -> usize {
        self.inner.threads()
    }
    fn set_threads(&self, threads: usize) -> Result<()> {
        self.inner.set_threads(threads)
    }
    fn precision(&self) -> Precision {
        self.inner.precision()
    }
    fn device(&self) -> Option<String> {
        self.inner.device()
    }
    fn counters(&self) -> Option<DeviceCounters> {
        self.inner.counters()
    }
    fn accepts(&self, spec: &ModelSpec) -> Result<()> {
        self.inner.accepts(spec)
    }
    fn max_pass_rows(&self, spec: &ModelSpec) -> usize {
        self.inner.max_pass_rows(spec)
    }
    fn max_positions(&self, spec: &ModelSpec) -> usize {
        self.inner.max_positions(spec)
    }
    fn part_rows(&self, rows: usize) -> usize {
        self.inner.part_rows(rows)
    }
    fn take_error(&self) -> Option<crate::error::Error> {
        self.inner.take_error()
    }
    fn forget(&self, t: &Tensor) {
        self.inner.forget(t)
    }
    fn routes_where_the_logits_are(&self) -> bool {
        self.inner.routes_where_the_logits_are()
    }
    fn route(&self, logits: &mut Tensor, moe: &crate::semantics::MoeSpec, rows: usize) {
        self.watch(Call::Op("route"), || self.inner.route(logits, moe, rows))
    }
    fn add_rows_weighted(&self, out: &mut Tensor, y: &Tensor, weights: &Tensor, column: usize, n: usize, rows: usize, width: usize) {
        self.watch(Call::Op("add_rows_weighted"), || self.inner.add_rows_weighted(out, y, weights, column, n, rows, width))
    }
    fn sigmoid(&self, x: &mut Tensor, len: usize) {
        self.watch(Call::Op("sigmoid"), || self.inner.sigmoid(x, len))
    }
    fn rows_for_one(&self) -> usize {
        self.inner.rows_for_one()
    }
    fn layer_done(&self) {
        self.inner.layer_done()
    }
    fn prepare_matrix(&self, w: &WeightTensor) -> Result<Weight> {
        let prepared = self.inner.prepare_matrix(w)?;
        let id = self.watcher.matrix(w);
        Ok(Weight::new(prepared.rows(), prepared.cols(), (id, prepared)))
    }
    fn prepare_vector(&self, v: &[f32]) -> Result<Vector> {
        self.inner.prepare_vector(v)
    }
    fn weights_prepared(&self) {
        self.inner.weights_prepared()
    }
    fn weights_ready(&self) -> bool {
        self.inner.weights_ready()
    }
    fn tensor(&self, len: usize) -> Tensor {
        self.inner.tensor(len)
    }
    fn read_into(&self, t: &Tensor, start: usize, out: &mut [f32]) {
        self.watch(Call::Op("read_into"), || self.inner.read_into(t, start, out))
    }
    fn read(&self, t: &Tensor, len: usize) -> Vec<f32> {
        self.watch(Call::Op("read"), || self.inner.read(t, len))
    }
    fn argmax(&self, t: &Tensor, start: usize, row: &mut [f32]) -> (u32, bool) {
        self.watch(Call::Op("argmax"), || self.inner.argmax(t, start, row))
    }
    fn all_finite(&self, t: &Tensor, start: usize, len: usize) -> bool {
        self.watch(Call::Op("all_finite"), || self.inner.all_finite(t, start, len))
    }
    fn upload(&self, data: &[f32], t: &mut Tensor) {
        self.watch(Call::Op("upload"), || self.inner.upload(data, t))
    }
    fn new_kv(&self, layers: &[LayerSpec]) -> Box<dyn KvStore> {
        self.inner.new_kv(layers)
    }
    fn embed(&self, table: &Weight, tokens: &[u32], scale: Option<f32>, out: &mut Tensor) {
        self.watch(Call::Op("embed"), || self.inner.embed(inner(table), tokens, scale, out))
    }
    fn rms_norm(&self, x: &Tensor, w: &Vector, eps: f32, rows: usize, width: usize, out: &mut Tensor) {
        self.watch(Call::Op("rms_norm"), || self.inner.rms_norm(x, w, eps, rows, width, out))
    }
    fn rms_norm_inplace(&self, x: &mut Tensor, w: &Vector, eps: f32, rows: usize, width: usize) {
        self.watch(Call::Op("rms_norm_inplace"), || self.inner.rms_norm_inplace(x, w, eps, rows, width))
    }
    fn copy(&self, src: &Tensor, dst: &mut Tensor, len: usize) {
        self.watch(Call::Op("copy"), || self.inner.copy(src, dst, len))
    }
    fn matmul(&self, w: &Weight, x: &Tensor, rows: usize, out: &mut Tensor) {
        self.watch(Call::Matrix { id: id(w), rows }, || self.inner.matmul(inner(w), x, rows, out))
    }
    fn add_bias(&self, x: &mut Tensor, bias: &Vector, rows: usize) {
        self.watch(Call::Op("add_bias"), || self.inner.add_bias(x, bias, rows))
    }
    fn head_norm(&self, x: &mut Tensor, w: Option<&Vector>, eps: f32, rows: usize, width: usize, head_dim: usize) {
        self.watch(Call::Op("head_norm"), || self.inner.head_norm(x, w, eps, rows, width, head_dim))
    }
    fn rope(&self, x: &mut Tensor, rope: &RopeSpec, rows: usize, width: usize, head_dim: usize, start: usize) {
        self.watch(Call::Op("rope"), || self.inner.rope(x, rope, rows, width, head_dim, start))
    }
    fn gated_activation(&self, act: Activation, gate: &mut Tensor, up: &Tensor, len: usize) {
        self.watch(Call::Op("gated_activation"), || self.inner.gated_activation(act, gate, up, len))
    }
    fn add(&self, x: &mut Tensor, y: &Tensor, len: usize) {
        self.watch(Call::Op("add"), || self.inner.add(x, y, len))
    }
    fn scale(&self, x: &mut Tensor, s: f32, len: usize) {
        self.watch(Call::Op("scale"), || self.inner.scale(x, s, len))
    }
    fn softcap(&self, x: &mut Tensor, cap: f32, len: usize) {
        self.watch(Call::Op("softcap"), || self.inner.softcap(x, cap, len))
    }
    fn copy_rows(&self, src: &Tensor, src_row: usize, dst: &mut Tensor, dst_row: usize, rows: usize, width: usize) {
        self.watch(Call::Op("copy_rows"), || self.inner.copy_rows(src, src_row, dst, dst_row, rows, width))
    }
    fn lora(&self, a: &Weight, b: &Weight, bt: &Weight, x: &Tensor, rows: usize, s: f32, r: &mut Tensor, delta: &mut Tensor, out: &mut Tensor) {
        self.watch(Call::Op("adapters"), || self.inner.lora(inner(a), inner(b), inner(bt), x, rows, s, r, delta, out))
    }
    fn matmul_lora(&self, w: &Weight, bias: Option<&Vector>, x: &Tensor, rows: usize, out: &mut Tensor, updates: &[LoraArgs], r: &mut Tensor, delta: &mut Tensor) {
        let updates: Vec<LoraArgs> = updates.iter().map(|u| LoraArgs { a: inner(u.a), b: inner(u.b), bt: inner(u.bt), s: u.s }).collect();
        self.watch(Call::Matrix { id: id(w), rows }, || self.inner.matmul_lora(inner(w), bias, x, rows, out, &updates, r, delta))
    }
    fn gather_rows(&self, x: &Tensor, rows: &[usize], width: usize, out: &mut Tensor) {
        self.watch(Call::Op("gather_rows"), || self.inner.gather_rows(x, rows, width, out))
    }
    fn add_rows_scaled(&self, out: &mut Tensor, y: &Tensor, rows: &[usize], weights: &[f32], width: usize) {
        self.watch(Call::Op("add_rows_scaled"), || self.inner.add_rows_scaled(out, y, rows, weights, width))
    }
    fn gather_columns(&self, src: &Tensor, rows: usize, src_width: usize, offset: usize, width: usize, out: &mut Tensor) {
        self.watch(Call::Op("gather_columns"), || self.inner.gather_columns(src, rows, src_width, offset, width, out))
    }
    fn per_layer_combine(&self, c: &mut Tensor, table: &Weight, tokens: &[u32], table_scale: f32, combine: f32) {
        self.watch(Call::Op("per_layer_combine"), || self.inner.per_layer_combine(c, inner(table), tokens, table_scale, combine))
    }
    fn kv_append(&self, kv: &mut dyn KvStore, layer: usize, k: &Tensor, v: &Tensor, rows: usize) {
        self.watch(Call::Op("kv_append"), || self.inner.kv_append(kv, layer, k, v, rows))
    }
    fn attention(&self, kv: &dyn KvStore, plane: usize, shape: &AttentionShape, sinks: Option<&[f32]>, q: &Tensor, rows: usize, start: usize, out: &mut Tensor) {
        self.watch(Call::Op("attention"), || self.inner.attention(kv, plane, shape, sinks, q, rows, start, out))
    }
}
