//! A session's keys and values on the device: one pair of buffers per layer that owns a plane,
//! at that layer's own width, grown by doubling (the held rows copied on the device). Rows an
//! unfinished pass appended are dropped by `truncate`, as on the host.

use std::any::Any;
use std::sync::{Arc, Mutex};

use crate::backend::gpu::device::{bytes_of, f32s, Recorder};
use crate::error::Result;
use crate::kv::KvStore;
use crate::semantics::{KvSource, LayerSpec};

pub struct Plane {
    pub width: usize,
    /// Rows written (held, plus those of a pass in flight).
    pub len: usize,
    /// Rows the buffers hold.
    pub cap: usize,
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
}

pub struct GpuKv {
    rec: Arc<Mutex<Recorder>>,
    pub planes: Vec<Option<Plane>>,
    positions: usize,
}

/// Rows a new plane holds before it first grows.
const FIRST_ROWS: usize = 256;

impl GpuKv {
    pub fn new(rec: Arc<Mutex<Recorder>>, layers: &[LayerSpec]) -> GpuKv {
        let planes = {
            let r = rec.lock().unwrap_or_else(|p| p.into_inner());
            layers
                .iter()
                .map(|l| match l.kv_source {
                    KvSource::Own => Some(Plane { width: l.kv_width(), len: 0, cap: 0, k: r.gpu.buffer(4), v: r.gpu.buffer(4) }),
                    KvSource::SharedWith { .. } => None,
                })
                .collect()
        };
        GpuKv { rec, planes, positions: 0 }
    }
}

impl Plane {
    /// Room for `rows` more rows, growing on the device (at most `max_rows`, which
    /// `GpuBackend::max_positions` keeps every session within).
    pub fn reserve(&mut self, rec: &mut Recorder, rows: usize, max_rows: usize) {
        let need = self.len + rows;
        if need <= self.cap {
            return;
        }
        assert!(need <= max_rows, "a KV plane of {need} rows exceeds the GPU's largest binding ({max_rows} rows)");
        let cap = need.max(self.cap * 2).max(FIRST_ROWS).min(max_rows);
        let bytes = (cap * self.width * 4) as u64;
        let (k, v) = (rec.gpu.buffer(bytes), rec.gpu.buffer(bytes));
        let held = (self.len * self.width * 4) as u64;
        rec.copy(&self.k, 0, &k, 0, held);
        rec.copy(&self.v, 0, &v, 0, held);
        (self.k, self.v, self.cap) = (k, v, cap);
    }
}

impl KvStore for GpuKv {
    fn positions(&self) -> usize {
        self.positions
    }
    fn advance(&mut self, rows: usize) {
        self.positions += rows;
    }
    fn truncate(&mut self, n: usize) {
        for p in self.planes.iter_mut().flatten() {
            p.len = p.len.min(n);
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
        let Some(Some(p)) = self.planes.get(layer) else { return };
        let bytes = (p.len * p.width * 4) as u64;
        let mut rec = self.rec.lock().unwrap_or_else(|e| e.into_inner());
        let k = f32s(&rec.download(&p.k, 0, bytes));
        let v = f32s(&rec.download(&p.v, 0, bytes));
        rec.counters.kv_bytes_read += 2 * bytes;
        visit(&k, &v);
    }
    fn import(&mut self, planes: Vec<Option<(Vec<f32>, Vec<f32>)>>, positions: usize) -> Result<()> {
        let gpu = self.rec.lock().unwrap_or_else(|e| e.into_inner()).gpu.clone();
        let widths: Vec<Option<usize>> = self.planes.iter().map(|p| p.as_ref().map(|p| p.width)).collect();
        self.planes = crate::kv::pair_planes(widths, planes, |width, k, v| {
            let rows = k.len() / width.max(1);
            Plane { width, len: rows, cap: rows, k: gpu.buffer_with(&bytes_of(&k)), v: gpu.buffer_with(&bytes_of(&v)) }
        });
        self.positions = positions;
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
