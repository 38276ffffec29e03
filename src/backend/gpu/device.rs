//! The device: one wgpu adapter and queue per process, shared by every model opened on the GPU
//! backend, with its compiled pipelines; and the per-model recorder that turns ops into
//! dispatches, submits them, and brings buffers back to host memory.

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};

pub use crate::backend::DeviceCounters;
use crate::error::{Error, Result, Status};
use crate::quant::WeightType;

/// Drives a wgpu future to completion on this thread. Native wgpu resolves its futures inside
/// the call (or on `poll`), so this only spins when the driver is slow to answer.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// The process's GPU: adapter, device, queue, limits, and pipelines compiled on first use.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    /// The largest storage buffer one binding may cover.
    pub max_binding: u64,
    /// Alignment of a binding's offset (uniform and storage, the larger of the two).
    pub offset_align: u64,
    pipelines: Mutex<HashMap<(Kernel, Option<WeightType>), Arc<wgpu::ComputePipeline>>>,
    /// The first validation or device error wgpu reported, if any.
    error: Arc<Mutex<Option<String>>>,
}

/// The shader entry points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    Matmul,
    Embed,
    RmsNorm,
    RmsNormInplace,
    Add,
    AddBias,
    Scale,
    Gated,
    Gather,
    Rope,
    Attention,
}

impl Kernel {
    fn entry(self) -> &'static str {
        match self {
            Kernel::Matmul => "matmul",
            Kernel::Embed => "embed",
            Kernel::RmsNorm => "rms_norm",
            Kernel::RmsNormInplace => "rms_norm_inplace",
            Kernel::Add => "add",
            Kernel::AddBias => "add_bias",
            Kernel::Scale => "scale",
            Kernel::Gated => "gated",
            Kernel::Gather => "gather",
            Kernel::Rope => "rope",
            Kernel::Attention => "attention",
        }
    }
}

const COMMON: &str = include_str!("shaders/common.wgsl");
const FORMATS: &str = include_str!("shaders/formats.wgsl");
const MATMUL: &str = include_str!("shaders/matmul.wgsl");
const ROWS: &str = include_str!("shaders/rows.wgsl");
const ATTENTION: &str = include_str!("shaders/attention.wgsl");

/// The WGSL of a kernel: the common part, then the kernel's file; a weight kernel gets the
/// loaders and its type's loader and unit substituted.
fn source(kernel: Kernel, ty: Option<WeightType>) -> String {
    match (kernel, ty) {
        (Kernel::Matmul | Kernel::Embed, Some(ty)) => {
            // `upload` (weights.rs) refuses a type without a loader, so none reaches here.
            let load = ty.format().gpu.get().map_or("", |g| g.loader);
            let unit = if ty.is_quantized() { 32 } else { 1 };
            // Only the type's own loader is kept: the others would index a unit array of
            // another size.
            let loader = FORMATS
                .split("\nfn ")
                .enumerate()
                .filter(|(i, part)| *i == 0 || part.starts_with("w_") || part.starts_with("moved_scale") || part.starts_with(&load[..]) && part[load.len()..].starts_with('('))
                .map(|(i, part)| if i == 0 { part.to_string() } else { format!("\nfn {part}") })
                .collect::<String>();
            format!("{COMMON}\n{loader}\n{MATMUL}").replace("LOAD_UNIT", load).replace("UNIT_SIZE", &format!("{unit}u"))
        }
        (Kernel::Attention, _) => format!("{COMMON}\n{ATTENTION}"),
        _ => format!("{COMMON}\n{ROWS}"),
    }
}

static GPU: OnceLock<std::result::Result<Arc<Gpu>, String>> = OnceLock::new();

impl Gpu {
    /// The process's GPU, found on first call; `ErrBackendUnavailable` saying why when there
    /// is no usable adapter (the answer is kept: adapters do not appear while a process runs).
    pub fn get() -> Result<Arc<Gpu>> {
        GPU.get_or_init(Gpu::open).clone().map_err(|why| Error::new(Status::ErrBackendUnavailable, why))
    }

    fn open() -> std::result::Result<Arc<Gpu>, String> {
        // WGPU_BACKEND (vulkan, metal, dx12, ...) and WGPU_ADAPTER_NAME, when set, narrow the choice.
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            apply_limit_buckets: false,
        }))
        .map_err(|e| format!("no GPU adapter: wgpu found none for Vulkan, Metal or DX12 ({e})"))?;
        let info = adapter.get_info();
        let limits = adapter.limits();
        let downlevel = adapter.get_downlevel_capabilities();
        if !downlevel.flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS) {
            return Err(format!("GPU adapter {} has no compute shaders", info.name));
        }
        // The kernels' largest workgroup: 64 invocations, 2 KiB + 2 KiB of workgroup memory.
        if limits.max_compute_invocations_per_workgroup < 64 || limits.max_compute_workgroup_storage_size < 4096 {
            return Err(format!("GPU adapter {} is missing a feature: compute workgroups of 64 invocations with 4 KiB of shared memory", info.name));
        }
        if limits.max_storage_buffer_binding_size < (1 << 24) {
            return Err(format!(
                "GPU adapter {} has too little memory per binding: {} bytes, 16 MiB needed",
                info.name, limits.max_storage_buffer_binding_size
            ));
        }
        let (device, queue) = block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("packlm"),
            required_features: wgpu::Features::empty(),
            required_limits: limits.clone(),
            experimental_features: Default::default(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: Default::default(),
        }))
        .map_err(|e| format!("GPU adapter {}: no device ({e})", info.name))?;
        let error = Arc::new(Mutex::new(None::<String>));
        let sink = error.clone();
        // wgpu's default handler panics; keep the first error and fail the next read with it.
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut slot = sink.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(e.to_string());
            }
        }));
        // At most 2 GiB, so that every word and half index of a binding fits the shaders' u32.
        let max_binding = (limits.max_storage_buffer_binding_size as u64).min(limits.max_buffer_size).min(1 << 31) & !3;
        let offset_align = (limits.min_uniform_buffer_offset_alignment.max(limits.min_storage_buffer_offset_alignment) as u64).max(4);
        crate::log::log(
            crate::log::Level::Info,
            &format!("GPU adapter: {} ({:?}, {}, {})", info.name, info.backend, info.driver, info.driver_info),
        );
        Ok(Arc::new(Gpu { device, queue, info, max_binding, offset_align, pipelines: Mutex::new(HashMap::new()), error }))
    }

    /// "name (backend, driver, device type)", for `packlm info` and the log. The device type
    /// is wgpu's (`DiscreteGpu`, `IntegratedGpu`, `VirtualGpu`, `Cpu`, `Other`): `Cpu` is a
    /// software rasterizer such as Mesa's llvmpipe, which libllama (llama/src/offload.rs), as
    /// llama.cpp's Vulkan backend, does not count as a GPU.
    pub fn adapter(&self) -> String {
        format!("{} ({:?}, {}, {:?})", self.info.name, self.info.backend, self.info.driver, self.info.device_type)
    }

    /// The pipeline of `kernel` (for weight type `ty`), compiled on first use.
    pub fn pipeline(&self, kernel: Kernel, ty: Option<WeightType>) -> Arc<wgpu::ComputePipeline> {
        let mut map = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        map.entry((kernel, ty))
            .or_insert_with(|| {
                let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(kernel.entry()),
                    source: wgpu::ShaderSource::Wgsl(source(kernel, ty).into()),
                });
                Arc::new(self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(kernel.entry()),
                    layout: None,
                    module: &module,
                    entry_point: Some(kernel.entry()),
                    compilation_options: Default::default(),
                    cache: None,
                }))
            })
            .clone()
    }

    /// A zeroed buffer of `bytes` (at least 4) for storage and copies.
    pub fn buffer(&self, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes.max(4).next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// A storage buffer holding `bytes` (padded with zeros to a whole number of words).
    pub fn buffer_with(&self, bytes: &[u8]) -> wgpu::Buffer {
        let size = (bytes.len() as u64).max(4).next_multiple_of(4);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: true,
        });
        {
            let mut view = buf.slice(..).get_mapped_range_mut().expect("a buffer mapped at creation");
            view.slice(..bytes.len()).copy_from_slice(bytes);
        }
        buf.unmap();
        buf
    }

    /// Fails (panics, which the C boundary turns into a status) with the first error wgpu
    /// reported: the results of the work since then are not to be trusted.
    fn check(&self) {
        if let Some(e) = self.error.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            panic!("GPU error: {e}");
        }
    }
}

/// Records dispatches and copies for one model's backend and submits them: at the end of
/// each layer (`layer_done`), and before anything is brought back. Per-dispatch parameters and
/// small host-made tables (token ids, rope cos/sin) are staged in one ring buffer that is
/// written once per submission, before it.
pub struct Recorder {
    pub gpu: Arc<Gpu>,
    encoder: Option<wgpu::CommandEncoder>,
    ring: wgpu::Buffer,
    staged: Vec<u8>,
    /// The submission before the latest: `layer_done` waits for it, so that at most two
    /// layers are queued and an abort is seen within about one layer of device time.
    latest: Option<wgpu::SubmissionIndex>,
    previous: Option<wgpu::SubmissionIndex>,
    pub counters: DeviceCounters,
    /// The most bytes one binding covers: the device's, or less when a test simulates a
    /// smaller device (a buffer beyond it is bound only that far, as a device would refuse).
    pub max_binding: u64,
    /// The last rope table staged in this submission: (spec address, first position, rows, offset).
    pub rope_table: Option<(usize, usize, usize, u64)>,
}

/// A binding's source: a buffer (bound whole) or a staged range of the ring.
pub enum Bind<'a> {
    Buffer(&'a wgpu::Buffer),
    Staged(u64, u64),
}

const RING_BYTES: u64 = 1 << 20;

impl Recorder {
    pub fn new(gpu: Arc<Gpu>, max_binding: u64) -> Recorder {
        let ring = ring_buffer(&gpu, RING_BYTES);
        let counters = DeviceCounters::default();
        Recorder { gpu, encoder: None, ring, staged: Vec::new(), latest: None, previous: None, counters, max_binding, rope_table: None }
    }

    fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        let device = &self.gpu.device;
        self.encoder.get_or_insert_with(|| device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None }))
    }

    /// Stages `bytes` for this submission; returns their offset in the ring.
    pub fn stage(&mut self, bytes: &[u8]) -> u64 {
        let align = self.gpu.offset_align;
        let at = (self.staged.len() as u64).next_multiple_of(align);
        let need = at + (bytes.len() as u64).max(4);
        if need > self.ring.size() {
            self.flush();
            if (bytes.len() as u64).max(4) > self.ring.size() {
                self.ring = ring_buffer(&self.gpu, (bytes.len() as u64).next_power_of_two().max(RING_BYTES));
            }
            return self.stage(bytes);
        }
        self.staged.resize(at as usize, 0);
        self.staged.extend_from_slice(bytes);
        if bytes.is_empty() {
            self.staged.extend_from_slice(&[0; 4]);
        }
        at
    }

    /// Records one dispatch of `kernel` over `groups` workgroups (a 2-D grid past 65535) times
    /// `z`, with the 16 parameter words `params` (word 12 is set to the grid width here).
    pub fn dispatch(&mut self, kernel: Kernel, ty: Option<WeightType>, mut params: [u32; 16], binds: &[(u32, Bind)], groups: u32, z: u32) {
        if groups == 0 || z == 0 {
            return;
        }
        let (gx, gy) = if groups <= 65535 { (groups, 1) } else { (65535, groups.div_ceil(65535)) };
        params[12] = gx;
        let pbytes: Vec<u8> = params.iter().flat_map(|w| w.to_le_bytes()).collect();
        let poff = self.stage(&pbytes);
        let staged: Vec<(u32, u64, u64)> = binds
            .iter()
            .filter_map(|(i, b)| match b {
                Bind::Staged(off, len) => Some((*i, *off, *len)),
                Bind::Buffer(_) => None,
            })
            .collect();
        let pipeline = self.gpu.pipeline(kernel, ty);
        let ring = self.ring.clone();
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer: &ring, offset: poff, size: NonZeroU64::new(64) }),
        }];
        for (i, b) in binds {
            if let Bind::Buffer(buf) = b {
                let size = buf.size().min(self.max_binding);
                entries.push(wgpu::BindGroupEntry {
                    binding: *i,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer: buf, offset: 0, size: NonZeroU64::new(size) }),
                });
            }
        }
        for (i, off, len) in &staged {
            entries.push(wgpu::BindGroupEntry {
                binding: *i,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer: &ring, offset: *off, size: NonZeroU64::new((*len).max(4)) }),
            });
        }
        let group = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &pipeline.get_bind_group_layout(0), entries: &entries });
        let enc = self.encoder();
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups(gx, gy, z);
        }
        self.counters.dispatches += 1;
    }

    /// Records a copy of `bytes` bytes (a multiple of 4).
    pub fn copy(&mut self, src: &wgpu::Buffer, src_off: u64, dst: &wgpu::Buffer, dst_off: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.encoder().copy_buffer_to_buffer(src, src_off, dst, dst_off, bytes);
        self.counters.copies += 1;
    }

    /// Submits what is recorded (the staged ring first).
    pub fn flush(&mut self) {
        let Some(enc) = self.encoder.take() else {
            return;
        };
        if !self.staged.is_empty() {
            self.gpu.queue.write_buffer(&self.ring, 0, &self.staged);
            self.staged.clear();
        }
        let index = self.gpu.queue.submit([enc.finish()]);
        self.previous = self.latest.replace(index);
        self.rope_table = None;
        self.counters.submissions += 1;
    }

    /// End of a layer: submit it, and wait until the submission before it has run.
    pub fn layer_done(&mut self) {
        self.flush();
        if let Some(prev) = self.previous.take() {
            let _ = self.gpu.device.poll(wgpu::PollType::Wait { submission_index: Some(prev), timeout: None });
        }
    }

    /// The first `bytes` bytes of `buf` (from `offset`), in host memory, after all recorded work.
    pub fn download(&mut self, buf: &wgpu::Buffer, offset: u64, bytes: u64) -> Vec<u8> {
        if bytes == 0 {
            self.flush();
            return Vec::new();
        }
        let staging = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.encoder().copy_buffer_to_buffer(buf, offset, &staging, 0, bytes);
        self.flush();
        let (tx, rx) = std::sync::mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        let _ = self.gpu.device.poll(wgpu::PollType::wait_indefinitely());
        self.latest = None;
        self.previous = None;
        self.gpu.check();
        match rx.recv() {
            Ok(Ok(())) => {}
            other => panic!("GPU read-back failed: {other:?}"),
        }
        let out = staging.slice(..).get_mapped_range().expect("a mapped read-back buffer").to_vec();
        staging.unmap();
        out
    }
}

fn ring_buffer(gpu: &Gpu, bytes: u64) -> wgpu::Buffer {
    gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("packlm staged parameters"),
        size: bytes,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}

/// f32s from little-endian bytes.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0; bytes.len() / 4];
    f32s_into(bytes, &mut out);
    out
}

/// f32s from little-endian bytes into `out` (as many as both hold).
pub fn f32s_into(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

/// Little-endian bytes of f32s.
pub fn bytes_of(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
