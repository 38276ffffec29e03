//! The GPU backend: the op set of the seam as WGSL compute shaders through wgpu (Vulkan on
//! Linux, Android and Windows, Metal on Apple platforms, DX12 on Windows).
//!
//! - Weights are uploaded once at open in their stored block format (weights.rs) and
//!   dequantized in the shaders; a tensor larger than the device's largest binding is split by
//!   rows across buffers, and every op over it runs once per chunk.
//! - Activations, KV planes (kv.rs) and norm vectors live in device buffers for the whole pass.
//!   Only `read` brings values back: the engine calls it for the wanted rows' logits.
//! - Ops are recorded into one command encoder (device.rs); the engine's `layer_done` submits
//!   each layer and waits for the layer before it, so that an abort is noticed between layers.
//!   A pass's tokens and rope tables (cos/sin made on the host in f64, as
//!   semantics::rope::apply_rope does) travel in a staged parameter ring, not as activations.
//! - Exactness: every output element is computed by one fixed sequence of f32 operations
//!   whatever the batch size (a matmul row's partial sums are split over threads by column
//!   units and meet in a fixed tree; attention runs per (head, row)); so step_batch == steps,
//!   and truncate / restore == fresh, bit for bit on one device. Against HF the difference is
//!   f32 summation order and the shader's exp: within 1e-4 on the golden fixtures.
//! - Precision: always f32 activations, so `precision()` is exact whatever was asked.

pub mod device;
pub mod kv;
pub mod weights;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::{AttentionShape, Backend, DeviceCounters, KvStore, Tensor, Vector, Weight};
use crate::error::{Error, Result, Status};
use crate::pack::tensor::WeightTensor;
use crate::semantics::rope::{self, RopeSpec};
use crate::semantics::{Activation, LayerSpec, ModelSpec};
use device::{bytes_of, f32s_into, Bind, Gpu, Kernel, Recorder};
use kv::GpuKv;
use weights::{units_per_row, GpuWeight};

/// Widest head the attention shader takes (its per-thread dims x 64 threads).
pub const MAX_HEAD_DIM: usize = 512;

/// A device buffer of f32 (activations and vectors).
struct Buf(wgpu::Buffer);

pub struct GpuBackend {
    gpu: Arc<Gpu>,
    rec: Arc<Mutex<Recorder>>,
    /// The largest binding this backend uses: the device's, or less when a test asks.
    max_binding: u64,
    /// The most bytes of one weight chunk (at most `max_binding`).
    chunk_bytes: u64,
    /// Prepared matrices by their bytes' address, so that a tied embedding and output
    /// projection are one upload.
    prepared: Mutex<HashMap<(usize, usize), Arc<GpuWeight>>>,
    /// Bound where a kernel declares a binding an op does not use.
    dummy: wgpu::Buffer,
}

impl GpuBackend {
    /// The backend on the process's GPU; `ErrBackendUnavailable` saying why without one.
    pub fn new() -> Result<GpuBackend> {
        let gpu = Gpu::get()?;
        let max_binding = gpu.max_binding;
        GpuBackend::with_max_binding(gpu, max_binding, max_binding)
    }

    /// As `new`, as if the device's largest binding were `max_binding` bytes: weights split,
    /// passes and sessions capped, and buffers bound no further (tests run the tiny fixtures
    /// so, to exercise every split path).
    pub fn with_binding_limit(max_binding: u64) -> Result<GpuBackend> {
        let gpu = Gpu::get()?;
        let limit = max_binding.min(gpu.max_binding) & !3;
        GpuBackend::with_max_binding(gpu, limit, limit)
    }

    /// As `new`, splitting weights into chunks of at most `chunk_bytes` (and nothing else:
    /// op-level tests feed activations of any size).
    pub fn with_chunk_limit(chunk_bytes: u64) -> Result<GpuBackend> {
        let gpu = Gpu::get()?;
        let max_binding = gpu.max_binding;
        GpuBackend::with_max_binding(gpu, max_binding, chunk_bytes.min(max_binding) & !3)
    }

    fn with_max_binding(gpu: Arc<Gpu>, max_binding: u64, chunk_bytes: u64) -> Result<GpuBackend> {
        let dummy = gpu.buffer(16);
        let rec = Arc::new(Mutex::new(Recorder::new(gpu.clone(), max_binding)));
        Ok(GpuBackend { gpu, rec, max_binding, chunk_bytes, prepared: Mutex::new(HashMap::new()), dummy })
    }

    fn rec(&self) -> MutexGuard<'_, Recorder> {
        self.rec.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Widest row of any tensor a pass makes, in f32 elements.
    fn widest_row(spec: &ModelSpec) -> usize {
        let widest = |f: fn(&LayerSpec) -> usize| spec.layers.iter().map(f).max().unwrap_or(0);
        let ple = spec.per_layer_input.map_or(0, |p| p.dim * spec.layers.len());
        [spec.hidden_size, spec.vocab_size, widest(LayerSpec::q_width), widest(LayerSpec::kv_width), widest(|l| l.mlp_width), ple]
            .into_iter()
            .max()
            .unwrap_or(1)
            .max(1)
    }
}

fn buf(t: &Tensor) -> &wgpu::Buffer {
    &t.get::<Buf>().0
}

fn vbuf(v: &Vector) -> &wgpu::Buffer {
    &v.get::<Buf>().0
}

fn gpu_kv(kv: &dyn KvStore) -> &GpuKv {
    kv.as_any().downcast_ref().unwrap_or_else(|| panic!("a KV store of another backend was passed to this one"))
}

fn bits(f: f32) -> u32 {
    f.to_bits()
}

/// Parameter words from the four vectors the shaders name a, b, c, d (d.x is set by the
/// recorder).
fn params(a: [u32; 4], b: [u32; 4], c: [u32; 4]) -> [u32; 16] {
    let mut p = [0u32; 16];
    p[..4].copy_from_slice(&a);
    p[4..8].copy_from_slice(&b);
    p[8..12].copy_from_slice(&c);
    p
}

fn u(n: usize) -> u32 {
    u32::try_from(n).expect("a GPU op size beyond u32 (passes are capped by max_pass_rows)")
}

/// Workgroups of 64 for `n` elements.
fn groups(n: usize) -> u32 {
    u(n.div_ceil(64))
}

impl GpuBackend {
    /// A table lookup (embedding, mode 0; per-layer combine, mode 1) of `tokens` into `out`.
    fn lookup(&self, table: &Weight, tokens: &[u32], mode: u32, scale: Option<f32>, combine: f32, out: &Tensor) {
        let w = table.get::<Arc<GpuWeight>>();
        let mut rec = self.rec();
        let ids: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        let at = rec.stage(&ids);
        let units = u(units_per_row(w.ty, w.cols));
        for c in &w.chunks {
            let p = params(
                [u(c.rows), u(c.row0), 0, u(w.cols)],
                [u(tokens.len()), c.scale_word, 0, units],
                [mode, bits(scale.unwrap_or(1.0)), bits(combine), scale.is_some() as u32],
            );
            rec.dispatch(Kernel::Embed, Some(w.ty), p, &[(1, Bind::Buffer(&c.buf)), (3, Bind::Buffer(buf(out))), (4, Bind::Staged(at, ids.len() as u64))], u(tokens.len()), 1);
        }
    }

    /// The (cos, sin) table of rows `start..start + rows`, staged once per submission.
    fn rope_table(&self, rec: &mut Recorder, rope: &RopeSpec, rows: usize, start: usize) -> (u64, u64) {
        let key = (rope as *const RopeSpec as usize, start, rows);
        let half = rope.rotary_dims / 2;
        let len = (rows * half * 2 * 4) as u64;
        if let Some((a, s, r, at)) = rec.rope_table {
            if (a, s, r) == key {
                return (at, len);
            }
        }
        let mut table = Vec::with_capacity(rows * half * 2);
        for r in 0..rows {
            for i in 0..half {
                // The host's values (semantics::rope::apply_rope rotates by the same).
                let (c, s) = rope::cos_sin(rope, start + r, i);
                table.extend([c, s]);
            }
        }
        let at = rec.stage(&bytes_of(&table));
        rec.rope_table = Some((key.0, key.1, key.2, at));
        (at, len)
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn device(&self) -> Option<String> {
        Some(self.gpu.adapter())
    }

    fn counters(&self) -> Option<DeviceCounters> {
        Some(self.rec().counters)
    }

    fn accepts(&self, spec: &ModelSpec) -> Result<()> {
        if !spec.causal {
            return Err(Error::new(
                Status::ErrBackendUnavailable,
                "the model's attention is bidirectional (an embedding model): the GPU backend's attention is causal only; open it on the host backend",
            ));
        }
        for (i, l) in spec.layers.iter().enumerate() {
            if l.head_dim > MAX_HEAD_DIM {
                return Err(Error::new(
                    Status::ErrBackendUnavailable,
                    format!("layer {i}: head_dim {} is wider than the GPU backend's {MAX_HEAD_DIM}", l.head_dim),
                ));
            }
        }
        if (Self::widest_row(spec) * 4) as u64 > self.max_binding {
            return Err(Error::new(Status::ErrBackendUnavailable, "a row of this model is larger than the GPU's largest binding"));
        }
        Ok(())
    }

    fn max_pass_rows(&self, spec: &ModelSpec) -> usize {
        ((self.max_binding / (4 * Self::widest_row(spec) as u64)) as usize).clamp(1, 65535)
    }

    fn max_positions(&self, spec: &ModelSpec) -> usize {
        // Whole pages of a plane's pool (kv.rs): 64 rows, or one binding's rows where fewer.
        let whole_pages = |rows: usize| {
            let page = crate::kv::pages::PAGE_ROWS.min(rows).max(1);
            rows / page * page
        };
        spec.layers.iter().map(|l| whole_pages((self.max_binding / (4 * l.kv_width().max(1) as u64)) as usize)).min().unwrap_or(usize::MAX)
    }

    fn layer_done(&self) {
        self.rec().layer_done();
    }

    fn prepare_matrix(&self, w: &WeightTensor) -> Result<Weight> {
        let bytes = w.bytes();
        // A tied embedding is uploaded once: mapped bytes are known by their address. Owned
        // bytes are not (one expert's copy, dropped after its upload, can leave its address to
        // the next one's), so each is uploaded.
        let key = w.is_mapped().then(|| (bytes.as_ptr() as usize, bytes.len()));
        let mut prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        let gw = match key.and_then(|k| prepared.get(&k)) {
            Some(g) if g.ty == w.ty && g.rows == w.rows() && g.cols == w.cols() => g.clone(),
            _ => {
                let g = Arc::new(weights::upload(&self.gpu, w, self.chunk_bytes)?);
                self.rec().counters.weight_bytes += g.bytes;
                if let Some(k) = key {
                    prepared.insert(k, g.clone());
                }
                g
            }
        };
        Ok(Weight::new(w.rows(), w.cols(), gw))
    }
    fn prepare_vector(&self, v: &[f32]) -> Result<Vector> {
        let b = self.gpu.buffer_with(&bytes_of(v));
        self.rec().counters.weight_bytes += b.size();
        Ok(Vector::new(v.len(), Buf(b)))
    }
    fn tensor(&self, len: usize) -> Tensor {
        Tensor::new(len, Buf(self.gpu.buffer(len as u64 * 4)))
    }
    fn read_into(&self, t: &Tensor, start: usize, out: &mut [f32]) {
        let mut rec = self.rec();
        f32s_into(&rec.download(buf(t), start as u64 * 4, out.len() as u64 * 4), out);
        rec.counters.bytes_read += out.len() as u64 * 4;
    }
    fn upload(&self, data: &[f32], t: &mut Tensor) {
        // Work recorded before must run before the write: submit it first.
        self.rec().flush();
        self.gpu.queue.write_buffer(buf(t), 0, &bytes_of(data));
    }
    fn new_kv(&self, layers: &[LayerSpec]) -> Box<dyn KvStore> {
        Box::new(GpuKv::new(self.rec.clone(), layers))
    }

    fn embed(&self, table: &Weight, tokens: &[u32], scale: Option<f32>, out: &mut Tensor) {
        self.lookup(table, tokens, 0, scale, 1.0, out);
    }
    fn rms_norm(&self, x: &Tensor, w: &Vector, eps: f32, rows: usize, width: usize, out: &mut Tensor) {
        let p = params([u(rows), u(width), bits(eps), 1], [0; 4], [0; 4]);
        self.rec().dispatch(Kernel::RmsNorm, None, p, &[(1, Bind::Buffer(buf(x))), (2, Bind::Buffer(vbuf(w))), (3, Bind::Buffer(buf(out)))], u(rows), 1);
    }
    fn rms_norm_inplace(&self, x: &mut Tensor, w: &Vector, eps: f32, rows: usize, width: usize) {
        let p = params([u(rows), u(width), bits(eps), 1], [0; 4], [0; 4]);
        self.rec().dispatch(Kernel::RmsNormInplace, None, p, &[(2, Bind::Buffer(vbuf(w))), (3, Bind::Buffer(buf(x)))], u(rows), 1);
    }
    fn copy(&self, src: &Tensor, dst: &mut Tensor, len: usize) {
        self.rec().copy(buf(src), 0, buf(dst), 0, len as u64 * 4);
    }
    fn matmul(&self, w: &Weight, x: &Tensor, rows: usize, out: &mut Tensor) {
        let w = w.get::<Arc<GpuWeight>>();
        let units = u(units_per_row(w.ty, w.cols));
        let mut rec = self.rec();
        for c in &w.chunks {
            let p = params([u(c.rows), u(c.row0), u(w.rows), u(w.cols)], [u(rows), c.scale_word, 0, units], [0; 4]);
            let binds = [(1, Bind::Buffer(&c.buf)), (2, Bind::Buffer(buf(x))), (3, Bind::Buffer(buf(out)))];
            // 8 weight rows and 8 batch rows per workgroup (shaders/matmul.wgsl).
            rec.dispatch(Kernel::Matmul, Some(w.ty), p, &binds, u(c.rows.div_ceil(8)), u(rows.div_ceil(8)));
        }
    }
    fn add_bias(&self, x: &mut Tensor, bias: &Vector, rows: usize) {
        let n = rows * bias.len();
        let p = params([u(n), u(bias.len()), 0, 0], [0; 4], [0; 4]);
        self.rec().dispatch(Kernel::AddBias, None, p, &[(2, Bind::Buffer(vbuf(bias))), (3, Bind::Buffer(buf(x)))], groups(n), 1);
    }
    fn head_norm(&self, x: &mut Tensor, w: Option<&Vector>, eps: f32, rows: usize, width: usize, head_dim: usize) {
        let heads = rows * width / head_dim;
        let p = params([u(heads), u(head_dim), bits(eps), w.is_some() as u32], [0; 4], [0; 4]);
        let wb = w.map_or(&self.dummy, vbuf);
        self.rec().dispatch(Kernel::RmsNormInplace, None, p, &[(2, Bind::Buffer(wb)), (3, Bind::Buffer(buf(x)))], u(heads), 1);
    }
    fn rope(&self, x: &mut Tensor, rope: &RopeSpec, rows: usize, width: usize, head_dim: usize, start: usize) {
        let pairs = rope.rotary_dims / 2;
        let mut rec = self.rec();
        let (at, len) = self.rope_table(&mut rec, rope, rows, start);
        let p = params([u(rows), u(width), u(head_dim), u(pairs)], [0; 4], [0; 4]);
        rec.dispatch(Kernel::Rope, None, p, &[(2, Bind::Staged(at, len)), (3, Bind::Buffer(buf(x)))], groups(rows * (width / head_dim) * pairs), 1);
    }
    fn gated_activation(&self, act: Activation, gate: &mut Tensor, up: &Tensor, len: usize) {
        let (code, alpha, limit) = match act {
            Activation::Silu => (0, 0.0, 0.0),
            Activation::GeluTanh => (1, 0.0, 0.0),
            Activation::ClampedSwiglu { alpha, limit } => (2, alpha, limit),
        };
        let p = params([u(len), code, bits(alpha), bits(limit)], [0; 4], [0; 4]);
        self.rec().dispatch(Kernel::Gated, None, p, &[(1, Bind::Buffer(buf(up))), (3, Bind::Buffer(buf(gate)))], groups(len), 1);
    }
    fn add(&self, x: &mut Tensor, y: &Tensor, len: usize) {
        let p = params([u(len), 0, 0, 0], [0; 4], [0; 4]);
        self.rec().dispatch(Kernel::Add, None, p, &[(1, Bind::Buffer(buf(y))), (3, Bind::Buffer(buf(x)))], groups(len), 1);
    }
    fn scale(&self, x: &mut Tensor, s: f32, len: usize) {
        let p = params([u(len), 0, bits(s), 0], [0; 4], [0; 4]);
        self.rec().dispatch(Kernel::Scale, None, p, &[(3, Bind::Buffer(buf(x)))], groups(len), 1);
    }
    fn softcap(&self, x: &mut Tensor, cap: f32, len: usize) {
        let p = params([u(len), 1, bits(cap), 0], [0; 4], [0; 4]);
        self.rec().dispatch(Kernel::Scale, None, p, &[(3, Bind::Buffer(buf(x)))], groups(len), 1);
    }
    fn copy_rows(&self, src: &Tensor, src_row: usize, dst: &mut Tensor, dst_row: usize, rows: usize, width: usize) {
        let row_bytes = width as u64 * 4;
        self.rec().copy(buf(src), src_row as u64 * row_bytes, buf(dst), dst_row as u64 * row_bytes, rows as u64 * row_bytes);
    }
    fn gather_rows(&self, x: &Tensor, rows: &[usize], width: usize, out: &mut Tensor) {
        let mut rec = self.rec();
        let idx: Vec<u8> = rows.iter().flat_map(|&r| u(r).to_le_bytes()).collect();
        let at = rec.stage(&idx);
        let p = params([u(rows.len()), u(width), 0, 1], [0; 4], [0; 4]);
        let binds = [(1, Bind::Buffer(buf(x))), (3, Bind::Buffer(buf(out))), (4, Bind::Staged(at, idx.len() as u64))];
        rec.dispatch(Kernel::Gather, None, p, &binds, groups(rows.len() * width), 1);
    }
    fn gather_columns(&self, src: &Tensor, rows: usize, src_width: usize, offset: usize, width: usize, out: &mut Tensor) {
        let p = params([u(rows), u(width), u(src_width), 0], [u(offset), 0, 0, 0], [0; 4]);
        let binds = [(1, Bind::Buffer(buf(src))), (3, Bind::Buffer(buf(out))), (4, Bind::Buffer(&self.dummy))];
        self.rec().dispatch(Kernel::Gather, None, p, &binds, groups(rows * width), 1);
    }
    fn per_layer_combine(&self, c: &mut Tensor, table: &Weight, tokens: &[u32], table_scale: f32, combine: f32) {
        self.lookup(table, tokens, 1, Some(table_scale), combine, c);
    }

    fn kv_append(&self, kv: &mut dyn KvStore, layer: usize, k: &Tensor, v: &Tensor, rows: usize) {
        let kv: &mut GpuKv = kv.as_any_mut().downcast_mut().unwrap_or_else(|| panic!("a KV store of another backend was passed to this one"));
        let Some(Some(plane)) = kv.planes.get_mut(layer) else { return };
        plane.append(&mut self.rec(), buf(k), buf(v), rows);
    }
    fn attention(&self, kv: &dyn KvStore, plane: usize, shape: &AttentionShape, sinks: Option<&[f32]>, q: &Tensor, rows: usize, start: usize, out: &mut Tensor) {
        let Some(Some(pl)) = gpu_kv(kv).planes.get(plane) else { return };
        // A window that reaches back past position 0 for every row of the pass is full
        // attention; clamped to the positions held after the pass (as the host's attention
        // does), so that a config's window beyond u32 (sliding_window: 2^40) still fits the
        // shader's word.
        let window = shape.window.map_or(0, |w| u(w.min(start + rows)));
        let (pk, pv, page_rows) = {
            let pool = pl.pool.lock().unwrap_or_else(|e| e.into_inner());
            (pool.k.clone(), pool.v.clone(), pool.page_rows)
        };
        // The sinks ride behind the page table in the same staged words (at `sink_at`; 0: none).
        let mut table = pl.table();
        let sink_at = match sinks {
            Some(s) => {
                let at = table.len() / 4;
                table.extend(s[..shape.n_heads].iter().flat_map(|x| x.to_bits().to_le_bytes()));
                u(at) + 1
            }
            None => 0,
        };
        let p = params(
            [u(shape.n_heads), u(shape.n_kv_heads), u(shape.head_dim), sink_at],
            [u(start), window, u(pl.width), u(page_rows)],
            [bits(shape.scale), shape.softcap.map_or(0, bits), 0, 0],
        );
        let mut rec = self.rec();
        let at = rec.stage(&table);
        let binds = [(1, Bind::Buffer(buf(q))), (2, Bind::Buffer(&pk)), (3, Bind::Buffer(&pv)), (4, Bind::Buffer(buf(out))), (5, Bind::Staged(at, table.len() as u64))];
        rec.dispatch(Kernel::Attention, None, p, &binds, u(shape.n_heads), u(rows));
    }
}
