//! The graph backend: the engine's op stream captured as a static-shape ONNX graph and run by
//! ONNX Runtime on an execution provider (the CPU, or an NPU or GPU through OpenVINO, VitisAI,
//! QNN, CoreML, CUDA or DirectML).
//!
//! No layer is written here. The ops of [`Backend`] record nodes instead of computing: a
//! [`Tensor`] holds either host values or the name of the graph value that will hold them. The
//! graph runs when a value must leave the backend (`read_into`, a KV store read for a snapshot,
//! truncate or fork) or when a pass ends (`KvStore::advance`): every tensor still alive that
//! holds a graph value then becomes an output, written into its host memory, and the next ops
//! read it as an input, but for those the engine has said it will not read again
//! (`Backend::forget`: its pass buffers), so that a decode step's only output is its logits.
//!
//! Shapes are static, as NPU compilers require. A graph is known by its bytes (ops, shapes,
//! small constants and the names of the weights it reads; never the values of its inputs), and
//! is compiled once per model and kept: a decode step's graph is the same at every position
//! (the position is an input), so a session compiles one per pass shape: decode (1 row), a
//! verify of k drafts (k + 1 rows, as parts of powers of two like any pass), a prefill's parts (powers of two up to `PASS_ROWS` rows,
//! `part_rows`, each with or without its logits), each times the KV length bucket below.
//! `GraphOptions::compile_ahead` compiles them at open instead (`ahead_passes`).
//!
//! - **Weights** are f32, dequantized from whatever type the pack stores. On the cpu provider
//!   they are graph inputs read in place from one copy the model keeps; on a device provider,
//!   initializers held outside the graph bytes (ONNX external data), handed to ONNX Runtime
//!   when a graph is compiled (`weights_as_inputs`); the sessions of one model share the
//!   weights ONNX Runtime repacks (a prepacked-weights container). `MatMulNBits` is not used:
//!   ONNX Runtime 1.32's sums for a product of 9 rows and of the same rows one at a time
//!   differ in their last bits, which would break step_batch == steps (BENCHMARKS.md).
//! - **KV**: each layer's keys and values live in host memory ([`GraphKv`]), fed to a graph as
//!   a fixed-capacity input of `kv_bucket(positions held + rows)` rows (the powers of two from 64; rows
//!   past the positions held are zeros and masked out); the pass's new rows are scattered in at
//!   their positions inside the graph and are outputs written into the planes' next rows. On the
//!   CPU provider both are the host buffers themselves, read and written in place, not copies;
//!   a device provider copies them each run (planes kept on the device are not built).
//! - **Attention** is written in ONNX ops (MatMul, Where, Exp) with the masks computed in the
//!   graph from the start position, so the graph does not change with it. Every key sits at the
//!   index of its position and the softmax's sum is a matrix product in key order, so a row's
//!   bits do not depend on its pass: step_batch == steps, truncate and restore == a fresh
//!   session, any thread count == one, bit for bit (tests/graph_backend.rs), as on every
//!   backend. The bits are ONNX Runtime's kernels', not the host backend's: the two agree
//!   within the f32 tolerance.
//!
//! Mixtures of experts route in the graph and run every expert over every row, each row's
//! output weighted by its routing (zero for the experts it did not choose): a graph whose shapes
//! followed the routing would be compiled anew for nearly every pass (engine/moe.rs
//! `moe_block_dense`).

mod export;
mod kv;
pub mod onnx;
pub mod ort;
mod recorder;
mod run;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use onnx::{Attr, Elem};
use export::Export;
pub use kv::GraphKv;
use kv::{graph_kv, grow, new_plane, PlaneRef};
use ort::{Provider, Runtime, Session};
use recorder::Recorder;

use crate::backend::{AttentionShape, Backend, DeviceCounters, KvStore, Tensor, Vector, Weight};
use crate::error::{Error, Result};
use crate::pack::tensor::WeightTensor;
use crate::semantics::rope::RopeSpec;
use crate::semantics::{Activation, KvSource, LayerSpec, ModelSpec};

/// The smallest KV capacity a graph is compiled for; larger ones double.
const MIN_KV_BUCKET: usize = 64;

/// Most rows one pass carries on this backend: longer prefills run as parts of this many.
pub const PASS_ROWS: usize = 128;

/// KV rows a graph reads for a pass whose last position is `end - 1` (`end` = start + rows):
/// the powers of two from `MIN_KV_BUCKET`.
pub fn kv_bucket(end: usize) -> usize {
    end.next_power_of_two().max(MIN_KV_BUCKET)
}

/// How to make the graph backend (the open options of `PACKLM_BACKEND_NPU`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GraphOptions {
    /// ONNX Runtime's library; None: `PACKLM_ONNXRUNTIME`, then the system's search path.
    pub library: Option<String>,
    /// The execution provider by packlm's name (`ort::PROVIDERS`); None: "cpu".
    pub provider: Option<String>,
    /// The provider's options, "key=value" pairs separated by ';'.
    pub provider_options: String,
    /// A folder to write each graph into as it is compiled (`packlm export-onnx`): `NAME.onnx`
    /// files whose weights are in one `weights.bin` beside them (ONNX external data), and
    /// `graphs.json` saying what each input and output is.
    pub export: Option<std::path::PathBuf>,
    /// Weights as initializers compiled into each graph even on the cpu provider, as the device
    /// providers take them (the tests run that path on the CPU this way).
    pub initializers: bool,
    /// Compile at open the graphs of sessions of up to this many positions (0: none, each graph
    /// is compiled at its first use): see `ahead_passes`.
    pub compile_ahead: usize,
}

/// The passes `(start, rows)` whose graphs an open with `compile_ahead` = `positions` compiles,
/// each wanting no logits, the last row's and every row's: for every KV bucket up to that of
/// `positions`, a part of every power of two rows up to `PASS_ROWS` that fits it, ending at the
/// bucket's end (or at `positions`, in the last). A graph depends on a pass's rows, its KV bucket
/// and the logits it wants, not on where in the bucket it starts, so these are every shape a
/// prefill, a decode step, or a pass of `step_batch` takes in sessions of up to `positions`
/// positions. A verify's logits come in tiles that follow the drafts' acceptance: its graphs of
/// the layers are among these, its projection tiles are compiled at first use.
pub fn ahead_passes(positions: usize) -> Vec<(usize, usize)> {
    let mut passes = Vec::new();
    if positions == 0 {
        return passes;
    }
    let mut bucket = MIN_KV_BUCKET;
    loop {
        let end = bucket.min(positions);
        let mut rows = 1;
        while rows <= PASS_ROWS.min(end) {
            passes.push((end - rows, rows));
            rows *= 2;
        }
        if bucket >= positions {
            return passes;
        }
        bucket *= 2;
    }
}

/// A tensor's values: on the host, or (`sym`) the first `n` elements are the graph value
/// `name` of the pending recording.
struct TData {
    host: Vec<f32>,
    sym: Option<(String, usize)>,
    /// The engine said its values are not read again before they are written
    /// (`Backend::forget`): they were not brought back, and reading them is an error.
    forgotten: bool,
}

type TRef = Arc<Mutex<TData>>;

/// What feeds a graph input when the graph runs.
enum Feed {
    F32(Vec<f32>),
    I64(Vec<i64>),
    /// Keys (true) or values of a plane, as many rows as the input declares.
    Kv(PlaneRef, bool),
}

/// Where a matrix or vector of the model comes from when a graph that reads it is compiled.
enum Source {
    Matrix(WeightTensor),
    Vector(Arc<Vec<f32>>),
}

/// A weight's handle inner: its index in `Inner::weights`.
struct WId(usize);

/// A compiled graph and what its run feeds and takes.
struct Compiled {
    session: Session,
    output_names: Vec<CString>,
}

/// What the backend and its KV stores share.
struct Inner {
    // Field order is drop order: the sessions before the provider (its shared weights
    // container) and both before the runtime.
    state: Mutex<State>,
    provider: Provider,
    rt: Arc<Runtime>,
    threads: AtomicUsize,
    compiles: AtomicU64,
    runs: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    kv_bytes_read: AtomicU64,
    /// The first failure of a graph run or compile since the engine last asked (`take_error`).
    error: Mutex<Option<Error>>,
    /// Where each graph is written as it is compiled (`GraphOptions::export`).
    export: Mutex<Option<Export>>,
    /// The weights are graph inputs, fed from one f32 copy the model keeps, rather than
    /// initializers each compiled graph holds its own copy of: on the CPU provider, where an
    /// input is read in place (a model's graphs then share one copy instead of one each; the
    /// arithmetic is the same). Device providers take initializers, which they place on the
    /// device once.
    weights_as_inputs: bool,
    /// The provider's memory is the host's (the cpu provider): inputs and outputs over host
    /// memory are read and written in place.
    host_memory: bool,
}

/// The recordings in progress (one per thread: passes of sessions on several threads record
/// apart and run apart), the model's weights and the compiled graphs.
#[derive(Default)]
struct State {
    recs: HashMap<std::thread::ThreadId, Recorder>,
    /// The f32 values of each weight a graph has read, where weights are inputs.
    dense: HashMap<usize, Arc<Vec<f32>>>,
    weights: Vec<Source>,
    cache: HashMap<Vec<u8>, Arc<Compiled>>,
}

/// The graph backend (see the module's documentation).
pub struct GraphBackend {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl GraphBackend {
    /// Loads ONNX Runtime and checks the provider; `threads` (0 = one per core) are ONNX
    /// Runtime's threads per graph run.
    pub fn new(opts: &GraphOptions, threads: usize) -> Result<GraphBackend> {
        let rt = Runtime::load(opts.library.as_deref())?;
        let provider = Provider::new(&rt, opts.provider.as_deref().unwrap_or("cpu"), &opts.provider_options)?;
        let host_memory = provider.name == "cpu";
        let weights_as_inputs = host_memory && !opts.initializers;
        let threads = if threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { threads };
        Ok(GraphBackend {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                provider,
                rt,
                threads: AtomicUsize::new(threads),
                compiles: AtomicU64::new(0),
                runs: AtomicU64::new(0),
                bytes_in: AtomicU64::new(0),
                bytes_out: AtomicU64::new(0),
                kv_bytes_read: AtomicU64::new(0),
                error: Mutex::new(None),
                weights_as_inputs,
                host_memory,
                export: Mutex::new(match &opts.export {
                    Some(dir) => Some(Export::new(dir)?),
                    None => None,
                }),
            }),
        })
    }

    /// Graphs compiled so far (one per pass shape and KV bucket).
    pub fn compiles(&self) -> u64 {
        self.inner.compiles.load(Ordering::Relaxed)
    }

    /// The ONNX Runtime version loaded.
    pub fn runtime_version(&self) -> &str {
        &self.inner.rt.version
    }

    fn record<R>(&self, f: impl FnOnce(&mut Recorder) -> R) -> R {
        let mut st = lock(&self.inner.state);
        f(st.recs.entry(std::thread::current().id()).or_default())
    }
}


impl Backend for GraphBackend {
    fn name(&self) -> &'static str {
        "npu"
    }
    fn threads(&self) -> usize {
        self.inner.threads.load(Ordering::Relaxed)
    }
    /// Applies to graphs compiled after the call (ONNX Runtime fixes a session's threads).
    fn set_threads(&self, threads: usize) -> Result<()> {
        let t = if threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { threads };
        self.inner.threads.store(t, Ordering::Relaxed);
        Ok(())
    }
    fn device(&self) -> Option<String> {
        Some(format!("ONNX Runtime {}, {} execution provider", self.inner.rt.version, self.inner.provider.name))
    }
    fn counters(&self) -> Option<DeviceCounters> {
        let i = &self.inner;
        Some(DeviceCounters {
            dispatches: i.runs.load(Ordering::Relaxed),
            submissions: i.runs.load(Ordering::Relaxed),
            graphs_compiled: i.compiles.load(Ordering::Relaxed),
            bytes_written: i.bytes_in.load(Ordering::Relaxed),
            bytes_read: i.bytes_out.load(Ordering::Relaxed),
            kv_bytes_read: i.kv_bytes_read.load(Ordering::Relaxed),
            ..DeviceCounters::default()
        })
    }
    /// Mixtures of experts run every expert over every row, weighted by the routing computed in
    /// the graph (engine/moe.rs `moe_block_dense`): a graph whose shapes followed the routing
    /// would be compiled anew for nearly every pass.
    fn routes_where_the_logits_are(&self) -> bool {
        true
    }
    /// Softmax and TopK in the graph (ties to the lower index, as `engine::moe::route`), the
    /// chosen weights scattered into zeros.
    fn route(&self, logits: &mut Tensor, moe: &crate::semantics::MoeSpec, rows: usize) {
        use crate::semantics::{Routing, MAX_EXPERTS_PER_TOKEN};
        let n = moe.n_experts;
        let k = moe.top_k.min(n).min(MAX_EXPERTS_PER_TOKEN);
        self.record(|r| {
            let l = r.get(logits, rows * n);
            let l = r.reshape(&l, &[rows as i64, n as i64]);
            let kk = r.i64s(&[k as i64]);
            let topk = |r: &mut Recorder, x: &str| r.node2("TopK", &[x, &kk], vec![("axis", Attr::Int(-1)), ("largest", Attr::Int(1)), ("sorted", Attr::Int(1))]);
            let (w, idx) = match moe.routing {
                Routing::SoftmaxTopK { renormalize } => {
                    let p = r.node("Softmax", &[&l], vec![("axis", Attr::Int(-1))]);
                    let (v, idx) = topk(r, &p);
                    if renormalize {
                        let axis = r.i64s(&[-1]);
                        let s = r.node("ReduceSum", &[&v, &axis], vec![("keepdims", Attr::Int(1))]);
                        (r.op("Div", &[&v, &s]), idx)
                    } else {
                        (v, idx)
                    }
                }
                Routing::TopKSoftmax => {
                    let (v, idx) = topk(r, &l);
                    (r.node("Softmax", &[&v], vec![("axis", Attr::Int(-1))]), idx)
                }
            };
            let zeros = r.f32s(&vec![0.0; rows * n], &[rows as i64, n as i64]);
            let dense = r.node("ScatterElements", &[&zeros, &idx, &w], vec![("axis", Attr::Int(1))]);
            let dense = r.flat(&dense);
            r.set(logits, dense, rows * n);
        });
    }
    fn add_rows_weighted(&self, out: &mut Tensor, y: &Tensor, weights: &Tensor, column: usize, n: usize, rows: usize, width: usize) {
        self.record(|r| {
            let w = r.get(weights, rows * n);
            let w = r.reshape(&w, &[rows as i64, n as i64]);
            let w = r.slice(&w, 1, column, column + 1);
            let yv = r.get(y, rows * width);
            let yv = r.reshape(&yv, &[rows as i64, width as i64]);
            let p = r.op("Mul", &[&w, &yv]);
            let o = r.get(out, rows * width);
            let o = r.reshape(&o, &[rows as i64, width as i64]);
            let s = r.op("Add", &[&o, &p]);
            let s = r.flat(&s);
            r.set(out, s, rows * width);
        });
    }
    fn sigmoid(&self, x: &mut Tensor, len: usize) {
        self.record(|r| {
            let v = r.get(x, len);
            let y = r.op("Sigmoid", &[&v]);
            r.set(x, y, len);
        });
    }
    fn max_pass_rows(&self, _spec: &ModelSpec) -> usize {
        PASS_ROWS
    }
    /// The largest power of two in `rows`: a prefill of any length runs as parts of 128, 64,
    /// .., 1 rows, so at most eight pass shapes (per KV bucket) are ever compiled for it.
    fn part_rows(&self, rows: usize) -> usize {
        if rows == 0 {
            0
        } else {
            1 << rows.ilog2()
        }
    }
    fn take_error(&self) -> Option<Error> {
        lock(&self.inner.error).take()
    }
    /// The value is left out of the outputs of the graph that makes it (it is not brought back
    /// to host memory); a later read of it before a write fails the pass.
    fn forget(&self, t: &Tensor) {
        let mut d = lock(t.get::<TRef>());
        d.sym = None;
        d.forgotten = true;
    }

    fn prepare_matrix(&self, w: &WeightTensor) -> Result<Weight> {
        let mut st = lock(&self.inner.state);
        st.weights.push(Source::Matrix(w.clone()));
        Ok(Weight::new(w.rows(), w.cols(), WId(st.weights.len() - 1)))
    }
    fn prepare_vector(&self, v: &[f32]) -> Result<Vector> {
        let mut st = lock(&self.inner.state);
        st.weights.push(Source::Vector(Arc::new(v.to_vec())));
        Ok(Vector::new(v.len(), WId(st.weights.len() - 1)))
    }
    fn tensor(&self, len: usize) -> Tensor {
        Tensor::new(len, Arc::new(Mutex::new(TData { host: vec![0.0; len], sym: None, forgotten: false })))
    }
    fn read_into(&self, t: &Tensor, start: usize, out: &mut [f32]) {
        if lock(t.get::<TRef>()).sym.is_some() {
            self.inner.flush_reading(Some(t.get::<TRef>()));
        }
        if lock(t.get::<TRef>()).forgotten {
            out.fill(f32::NAN);
            self.inner.fail(Error::new(crate::error::Status::ErrPanic, "internal: a read of values the engine said were not read again"));
            return;
        }
        out.copy_from_slice(&lock(t.get::<TRef>()).host[start..start + out.len()]);
    }
    fn upload(&self, data: &[f32], t: &mut Tensor) {
        // A later op reads these host values; a pending value of the tensor is replaced.
        let mut d = lock(t.get::<TRef>());
        d.forgotten = false;
        d.host[..data.len()].copy_from_slice(data);
        if let Some((name, n)) = d.sym.take() {
            if n > data.len() {
                drop(d);
                self.record(|r| {
                    let tail = r.slice(&name, 0, data.len(), n);
                    let head = r.input(Elem::F32, vec![data.len() as i64], Feed::F32(data.to_vec()));
                    let all = r.concat(&[&head, &tail], 0);
                    r.set(t, all, n);
                });
            }
        }
    }
    fn new_kv(&self, layers: &[LayerSpec]) -> Box<dyn KvStore> {
        let planes = layers
            .iter()
            .map(|l| match l.kv_source {
                KvSource::Own => Some(new_plane(l.kv_width(), Vec::new(), Vec::new(), 0)),
                KvSource::SharedWith { .. } => None,
            })
            .collect();
        Box::new(GraphKv { inner: self.inner.clone(), planes, positions: 0 })
    }

    fn embed(&self, table: &Weight, tokens: &[u32], scale: Option<f32>, out: &mut Tensor) {
        let (id, hidden) = (table.get::<WId>().0, table.cols());
        self.record(|r| {
            let w = r.weight(id);
            let ids = r.input_as("token ids", Elem::I64, vec![tokens.len() as i64], Feed::I64(tokens.iter().map(|&t| t as i64).collect()));
            let mut y = r.node("Gather", &[&w, &ids], vec![("axis", Attr::Int(0))]);
            if let Some(s) = scale {
                let s = r.scalar(s);
                y = r.op("Mul", &[&y, &s]);
            }
            let y = r.flat(&y);
            r.set(out, y, tokens.len() * hidden);
        });
    }
    fn rms_norm(&self, x: &Tensor, w: &Vector, eps: f32, rows: usize, width: usize, out: &mut Tensor) {
        let id = w.get::<WId>().0;
        self.record(|r| {
            let xv = r.get(x, rows * width);
            let wv = r.weight(id);
            let y = r.rms(&xv, Some(&wv), eps, rows, width);
            r.set(out, y, rows * width);
        });
    }
    fn rms_norm_inplace(&self, x: &mut Tensor, w: &Vector, eps: f32, rows: usize, width: usize) {
        let id = w.get::<WId>().0;
        self.record(|r| {
            let xv = r.get(x, rows * width);
            let wv = r.weight(id);
            let y = r.rms(&xv, Some(&wv), eps, rows, width);
            r.set(x, y, rows * width);
        });
    }
    fn copy(&self, src: &Tensor, dst: &mut Tensor, len: usize) {
        self.record(|r| {
            let v = r.get(src, len);
            r.set(dst, v, len);
        });
    }
    fn matmul(&self, w: &Weight, x: &Tensor, rows: usize, out: &mut Tensor) {
        let (id, n_out, n_in) = (w.get::<WId>().0, w.rows(), w.cols());
        self.record(|r| {
            let xv = r.get(x, rows * n_in);
            let x2 = r.reshape(&xv, &[rows as i64, n_in as i64]);
            let wv = r.weight(id);
            let y = r.product(&x2, &[rows as i64, n_in as i64], &wv, true);
            let y = r.flat(&y);
            r.set(out, y, rows * n_out);
        });
    }
    fn add_bias(&self, x: &mut Tensor, bias: &Vector, rows: usize) {
        let (id, n) = (bias.get::<WId>().0, bias.len());
        self.record(|r| {
            let xv = r.get(x, rows * n);
            let x2 = r.reshape(&xv, &[rows as i64, n as i64]);
            let b = r.weight(id);
            let y = r.op("Add", &[&x2, &b]);
            let y = r.flat(&y);
            r.set(x, y, rows * n);
        });
    }
    fn head_norm(&self, x: &mut Tensor, w: Option<&Vector>, eps: f32, rows: usize, width: usize, head_dim: usize) {
        let id = w.map(|w| w.get::<WId>().0);
        self.record(|r| {
            let xv = r.get(x, rows * width);
            let wv = id.map(|id| r.weight(id));
            let y = r.rms(&xv, wv.as_deref(), eps, rows * width / head_dim, head_dim);
            r.set(x, y, rows * width);
        });
    }
    fn rope(&self, x: &mut Tensor, rope: &RopeSpec, rows: usize, width: usize, head_dim: usize, start: usize) {
        let half = rope.rotary_dims / 2;
        let heads = width / head_dim;
        self.record(|r| {
            let xv = r.get(x, rows * width);
            let s = r.position(start);
            let ar = r.range(rows);
            let pos = r.op("Add", &[&s, &ar]);
            let pos = r.node("Cast", &[&pos], vec![("to", Attr::Int(Elem::F32 as i64))]);
            let pos = r.reshape(&pos, &[rows as i64, 1, 1]);
            let inv = r.f32s(&rope.inv_freq[..half], &[1, 1, half as i64]);
            let angle = r.op("Mul", &[&pos, &inv]);
            let af = r.scalar(rope.attention_factor);
            let c = r.op("Cos", &[&angle]);
            let c = r.op("Mul", &[&c, &af]);
            let sn = r.op("Sin", &[&angle]);
            let sn = r.op("Mul", &[&sn, &af]);
            let x3 = r.reshape(&xv, &[rows as i64, heads as i64, head_dim as i64]);
            let x0 = r.slice(&x3, 2, 0, half);
            let x1 = r.slice(&x3, 2, half, 2 * half);
            let (a, b) = (r.op("Mul", &[&x0, &c]), r.op("Mul", &[&x1, &sn]));
            let y0 = r.op("Sub", &[&a, &b]);
            let (a, b) = (r.op("Mul", &[&x1, &c]), r.op("Mul", &[&x0, &sn]));
            let y1 = r.op("Add", &[&a, &b]);
            let y = if 2 * half < head_dim {
                let rest = r.slice(&x3, 2, 2 * half, head_dim);
                r.concat(&[&y0, &y1, &rest], 2)
            } else {
                r.concat(&[&y0, &y1], 2)
            };
            let y = r.flat(&y);
            r.set(x, y, rows * width);
        });
    }
    fn gated_activation(&self, act: Activation, gate: &mut Tensor, up: &Tensor, len: usize) {
        self.record(|r| {
            let g = r.get(gate, len);
            let u = r.get(up, len);
            let y = match act {
                Activation::Silu => {
                    let s = r.op("Sigmoid", &[&g]);
                    let a = r.op("Mul", &[&g, &s]);
                    r.op("Mul", &[&a, &u])
                }
                Activation::GeluTanh => {
                    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
                    let x3 = r.op("Mul", &[&g, &g]);
                    let x3 = r.op("Mul", &[&x3, &g]);
                    let k = r.scalar(0.044715);
                    let t = r.op("Mul", &[&x3, &k]);
                    let t = r.op("Add", &[&g, &t]);
                    let c = r.scalar(crate::backend::cpu::GELU_C);
                    let t = r.op("Mul", &[&t, &c]);
                    let t = r.op("Tanh", &[&t]);
                    let one = r.scalar(1.0);
                    let t = r.op("Add", &[&t, &one]);
                    let half = r.scalar(0.5);
                    let h = r.op("Mul", &[&g, &half]);
                    let a = r.op("Mul", &[&h, &t]);
                    r.op("Mul", &[&a, &u])
                }
                Activation::ClampedSwiglu { alpha, limit } => {
                    let (lim, neg) = (r.scalar(limit), r.scalar(-limit));
                    let x = r.op("Min", &[&g, &lim]);
                    let uc = r.op("Clip", &[&u, &neg, &lim]);
                    let a = r.scalar(alpha);
                    let xa = r.op("Mul", &[&x, &a]);
                    let s = r.op("Sigmoid", &[&xa]);
                    let glu = r.op("Mul", &[&x, &s]);
                    let one = r.scalar(1.0);
                    let u1 = r.op("Add", &[&uc, &one]);
                    r.op("Mul", &[&u1, &glu])
                }
            };
            r.set(gate, y, len);
        });
    }
    fn add(&self, x: &mut Tensor, y: &Tensor, len: usize) {
        self.record(|r| {
            let a = r.get(x, len);
            let b = r.get(y, len);
            let s = r.op("Add", &[&a, &b]);
            r.set(x, s, len);
        });
    }
    fn scale(&self, x: &mut Tensor, s: f32, len: usize) {
        self.record(|r| {
            let a = r.get(x, len);
            let k = r.scalar(s);
            let y = r.op("Mul", &[&a, &k]);
            r.set(x, y, len);
        });
    }
    fn softcap(&self, x: &mut Tensor, cap: f32, len: usize) {
        self.record(|r| {
            let a = r.get(x, len);
            let y = r.softcap(&a, cap);
            r.set(x, y, len);
        });
    }
    fn copy_rows(&self, src: &Tensor, src_row: usize, dst: &mut Tensor, dst_row: usize, rows: usize, width: usize) {
        self.record(|r| {
            let s = r.get(src, (src_row + rows) * width);
            let part = r.slice(&s, 0, src_row * width, (src_row + rows) * width);
            let have = {
                let d = lock(dst.get::<TRef>());
                d.sym.as_ref().map_or(0, |s| s.1)
            };
            let end = (dst_row + rows) * width;
            let total = have.max(end);
            let mut pieces = Vec::new();
            if dst_row > 0 || total > end {
                let d = r.get(dst, total);
                if dst_row > 0 {
                    pieces.push(r.slice(&d, 0, 0, dst_row * width));
                }
                pieces.push(part.clone());
                if total > end {
                    pieces.push(r.slice(&d, 0, end, total));
                }
            } else {
                pieces.push(part.clone());
            }
            let refs: Vec<&str> = pieces.iter().map(|s| s.as_str()).collect();
            let y = if refs.len() == 1 { part } else { r.concat(&refs, 0) };
            r.set(dst, y, total);
        });
    }
    fn gather_rows(&self, x: &Tensor, rows: &[usize], width: usize, out: &mut Tensor) {
        let n = rows.iter().max().map_or(0, |m| m + 1);
        self.record(|r| {
            let xv = r.get(x, n * width);
            let x2 = r.reshape(&xv, &[n as i64, width as i64]);
            let idx = r.i64s(&rows.iter().map(|&i| i as i64).collect::<Vec<_>>());
            let y = r.node("Gather", &[&x2, &idx], vec![("axis", Attr::Int(0))]);
            let y = r.flat(&y);
            r.set(out, y, rows.len() * width);
        });
    }
    fn gather_columns(&self, src: &Tensor, rows: usize, src_width: usize, offset: usize, width: usize, out: &mut Tensor) {
        self.record(|r| {
            let s = r.get(src, rows * src_width);
            let s2 = r.reshape(&s, &[rows as i64, src_width as i64]);
            let y = r.slice(&s2, 1, offset, offset + width);
            let y = r.flat(&y);
            r.set(out, y, rows * width);
        });
    }
    fn per_layer_combine(&self, c: &mut Tensor, table: &Weight, tokens: &[u32], table_scale: f32, combine: f32) {
        let (id, width) = (table.get::<WId>().0, table.cols());
        self.record(|r| {
            let n = tokens.len() * width;
            let cv = r.get(c, n);
            let w = r.weight(id);
            let ids = r.input_as("token ids", Elem::I64, vec![tokens.len() as i64], Feed::I64(tokens.iter().map(|&t| t as i64).collect()));
            let t = r.node("Gather", &[&w, &ids], vec![("axis", Attr::Int(0))]);
            let t = r.flat(&t);
            let ts = r.scalar(table_scale);
            let t = r.op("Mul", &[&t, &ts]);
            let s = r.op("Add", &[&cv, &t]);
            let k = r.scalar(combine);
            let y = r.op("Mul", &[&s, &k]);
            r.set(c, y, n);
        });
    }

    fn kv_append(&self, kv: &mut dyn KvStore, layer: usize, k: &Tensor, v: &Tensor, rows: usize) {
        let kv: &GraphKv = graph_kv(kv);
        let Some(plane) = kv.plane(layer).cloned() else { return };
        if lock(&plane).pending.is_some() {
            // An earlier pass's rows are still pending: they run first.
            self.inner.flush();
        }
        let width = {
            let mut p = lock(&plane);
            p.pending = Some(rows);
            let len = p.len;
            grow(&mut p, len + rows);
            p.width
        };
        self.record(|r| {
            let kn = r.get(k, rows * width);
            let vn = r.get(v, rows * width);
            r.kv_out.push((plane, kn, vn, rows, layer));
        });
    }
    fn attention(&self, kv: &dyn KvStore, plane: usize, shape: &AttentionShape, sinks: Option<&[f32]>, q: &Tensor, rows: usize, start: usize, out: &mut Tensor) {
        let kv = graph_kv(kv);
        let Some(pl) = kv.plane(plane).cloned() else { return };
        let (nh, nkv, hd) = (shape.n_heads, shape.n_kv_heads, shape.head_dim);
        let g = nh / nkv;
        self.record(|r| {
            // The keys: the plane's `held` rows in host memory, then the rows this recording
            // appends to it (the engine's pattern: held == start, the pass's own rows pending).
            let pending = r.kv_out.iter().rev().find(|(p, ..)| Arc::ptr_eq(p, &pl)).map(|(_, k, v, n, _)| (k.clone(), v.clone(), *n));
            let (width, held) = {
                let p = lock(&pl);
                (p.width, p.len)
            };
            let end = held + pending.as_ref().map_or(0, |p| p.2);
            assert!(end >= start + rows, "attention at {start}..{} over a plane of {end} positions", start + rows);
            // Every key at its own position: the plane's buffer (`cap` rows, zeros past the
            // rows held) with the pending rows scattered in at `held`. A query's sums then run
            // over the same keys at the same indices whatever pass it is in (the padding adds
            // exact zeros), which is what keeps a row's bits independent of its pass.
            let cap = kv_bucket(end);
            let s = r.position(start);
            let ar = r.range(rows);
            let qpos = r.op("Add", &[&s, &ar]);
            let mut kall = r.input_as(&format!("keys of layer {plane}"), Elem::F32, vec![cap as i64, width as i64], Feed::Kv(pl.clone(), true));
            let mut vall = r.input_as(&format!("values of layer {plane}"), Elem::F32, vec![cap as i64, width as i64], Feed::Kv(pl.clone(), false));
            if let Some((kn, vn, n)) = pending {
                let h = r.position(held);
                let arn = r.range(n);
                let at = r.op("Add", &[&h, &arn]);
                let at = r.reshape(&at, &[n as i64, 1]);
                let (kn, vn) = (r.reshape(&kn, &[n as i64, width as i64]), r.reshape(&vn, &[n as i64, width as i64]));
                kall = r.op("ScatterND", &[&kall, &at, &kn]);
                vall = r.op("ScatterND", &[&vall, &at, &vn]);
            }
            // q: [rows, nh*hd] -> [nkv, g*rows, hd]; k: [cap, nkv*hd] -> [nkv, hd, cap].
            let qv = r.get(q, rows * nh * hd);
            let q4 = r.reshape(&qv, &[rows as i64, nkv as i64, g as i64, hd as i64]);
            let q4 = r.node("Transpose", &[&q4], vec![("perm", Attr::Ints(vec![1, 2, 0, 3]))]);
            let q3 = r.reshape(&q4, &[nkv as i64, (g * rows) as i64, hd as i64]);
            let k3 = r.reshape(&kall, &[cap as i64, nkv as i64, hd as i64]);
            let kt = r.node("Transpose", &[&k3], vec![("perm", Attr::Ints(vec![1, 2, 0]))]);
            let v3 = r.reshape(&vall, &[cap as i64, nkv as i64, hd as i64]);
            let vt = r.node("Transpose", &[&v3], vec![("perm", Attr::Ints(vec![1, 0, 2]))]);
            let sc = r.product(&q3, &[nkv as i64, (g * rows) as i64, hd as i64], &kt, false);
            let k = r.scalar(shape.scale);
            let mut sc = r.op("Mul", &[&sc, &k]);
            if let Some(cap) = shape.softcap {
                sc = r.softcap(&sc, cap);
            }
            // Visible keys: held or new (below start + rows), and by the causal and window rules.
            let kpos = r.range(cap);
            let qcol = r.reshape(&qpos, &[rows as i64, 1]);
            let krow = r.reshape(&kpos, &[1, cap as i64]);
            let diff = r.op("Sub", &[&qcol, &krow]);
            let n = r.i64s(&[rows as i64]);
            let ends = r.op("Add", &[&s, &n]);
            let held = r.op("Less", &[&krow, &ends]);
            let mut mask = held;
            if shape.causal {
                let zero = r.i64s(&[0]);
                let c = r.op("GreaterOrEqual", &[&diff, &zero]);
                mask = r.op("And", &[&mask, &c]);
            }
            if let Some(w) = shape.window {
                let wv = r.i64s(&[w as i64]);
                let d = if shape.causal { diff.clone() } else { r.op("Abs", &[&diff]) };
                let c = r.op("Less", &[&d, &wv]);
                mask = r.op("And", &[&mask, &c]);
            }
            // [rows, cap] (or [1, cap]) -> [g*rows, cap] (query row index gi*rows + r).
            let dims = r.i64s(&[rows as i64, cap as i64]);
            let full = r.op("Expand", &[&mask, &dims]);
            let reps = r.i64s(&[g as i64, 1]);
            let tiled = r.op("Tile", &[&full, &reps]);
            let ninf = r.scalar(f32::NEG_INFINITY);
            let sc = r.op("Where", &[&tiled, &sc, &ninf]);
            // The softmax written out, its sum a MatMul against ones in key order (ONNX
            // Runtime's Softmax sums in vector lanes split by the row's length); a sink joins
            // the maximum and is added last to the sum, as on the host.
            let mut mx = r.node("ReduceMax", &[&sc], vec![("axes", Attr::Ints(vec![-1])), ("keepdims", Attr::Int(1))]);
            let sink = sinks.map(|sk| {
                let col: Vec<f32> = (0..nh).flat_map(|h| std::iter::repeat_n(sk[h], rows)).collect();
                r.f32s(&col, &[nkv as i64, (g * rows) as i64, 1])
            });
            if let Some(sk) = &sink {
                mx = r.op("Max", &[&mx, sk]);
            }
            let d = r.op("Sub", &[&sc, &mx]);
            let e = r.op("Exp", &[&d]);
            let ones = r.f32s(&vec![1.0; cap], &[cap as i64, 1]);
            let mut sum = r.product(&e, &[nkv as i64, (g * rows) as i64, cap as i64], &ones, false);
            if let Some(sk) = &sink {
                let ds = r.op("Sub", &[sk, &mx]);
                let es = r.op("Exp", &[&ds]);
                sum = r.op("Add", &[&sum, &es]);
            }
            let probs = r.op("Div", &[&e, &sum]);
            let o = r.product(&probs, &[nkv as i64, (g * rows) as i64, cap as i64], &vt, false);
            let o = r.reshape(&o, &[nkv as i64, g as i64, rows as i64, hd as i64]);
            let o = r.node("Transpose", &[&o], vec![("perm", Attr::Ints(vec![2, 0, 1, 3]))]);
            let o = r.flat(&o);
            r.set(out, o, rows * nh * hd);
        });
    }
}

