//! A session's keys and values on the graph backend: host planes a graph reads at a fixed
//! capacity and appends its pass's rows to after it runs.

use std::sync::{Arc, Mutex};
use std::sync::atomic::Ordering;

use super::{kv_bucket, lock, Inner};
use crate::backend::KvStore;
use crate::error::Result;

/// A layer's keys and values in host memory: `len` rows of `width`, the buffers at least
/// `kv_bucket(len)` rows long (zeros past `len`), and the rows a recorded pass will append.
pub(super) struct Plane {
    pub(super) width: usize,
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) len: usize,
    pub(super) pending: Option<usize>,
}

pub(super) type PlaneRef = Arc<Mutex<Plane>>;

/// A session's keys and values for the graph backend (see `Plane`).
pub struct GraphKv {
    pub(super) inner: Arc<Inner>,
    pub(super) planes: Vec<Option<PlaneRef>>,
    pub(super) positions: usize,
}

impl GraphKv {
    pub(super) fn plane(&self, layer: usize) -> Option<&PlaneRef> {
        self.planes.get(layer)?.as_ref()
    }
}

pub(super) fn new_plane(width: usize, k: Vec<f32>, v: Vec<f32>, len: usize) -> PlaneRef {
    let mut p = Plane { width, k, v, len, pending: None };
    grow(&mut p, len);
    Arc::new(Mutex::new(p))
}

/// Makes room for `rows` rows and the bucket a pass at `rows` reads.
pub(super) fn grow(p: &mut Plane, rows: usize) {
    let n = rows.max(kv_bucket(rows)) * p.width;
    if p.k.len() < n {
        p.k.resize(n, 0.0);
        p.v.resize(n, 0.0);
    }
}

impl KvStore for GraphKv {
    fn positions(&self) -> usize {
        self.positions
    }
    /// The end of a pass that succeeded: what it recorded and left unread (a prefill's layers,
    /// a verify's residual stream) runs now, so that nothing of it waits for another pass, a
    /// snapshot or another thread.
    fn advance(&mut self, rows: usize) {
        self.inner.flush();
        self.positions += rows;
    }
    /// After a failed or aborted pass (the engine's rollback) the recording is dropped unrun;
    /// between passes there is none.
    fn truncate(&mut self, n: usize) {
        self.inner.discard();
        for p in self.planes.iter().flatten() {
            let mut p = lock(p);
            if p.len > n {
                let w = p.width;
                let len = p.len;
                p.k[n * w..len * w].fill(0.0);
                p.v[n * w..len * w].fill(0.0);
                p.len = n;
            }
        }
        self.positions = self.positions.min(n);
    }
    fn n_layers(&self) -> usize {
        self.planes.len()
    }
    fn plane_width(&self, layer: usize) -> Option<usize> {
        self.plane(layer).map(|p| lock(p).width)
    }
    fn export_plane(&self, layer: usize, visit: &mut dyn FnMut(&[f32], &[f32])) {
        self.inner.flush();
        if let Some(p) = self.plane(layer) {
            let p = lock(p);
            let n = p.len * p.width;
            self.inner.kv_bytes_read.fetch_add(2 * n as u64 * 4, Ordering::Relaxed);
            visit(&p.k[..n], &p.v[..n]);
        }
    }
    fn import(&mut self, planes: Vec<Option<(Vec<f32>, Vec<f32>)>>, positions: usize) -> Result<()> {
        self.inner.flush();
        let widths: Vec<Option<usize>> = (0..self.planes.len()).map(|l| self.plane_width(l)).collect();
        let made = crate::kv::pair_planes(widths, planes, |width, k, v| new_plane(width, k, v, positions));
        self.planes = made;
        self.positions = positions;
        Ok(())
    }
    fn fork(&self) -> Box<dyn KvStore> {
        self.inner.flush();
        let planes = self
            .planes
            .iter()
            .map(|p| {
                p.as_ref().map(|p| {
                    let p = lock(p);
                    new_plane(p.width, p.k.clone(), p.v.clone(), p.len)
                })
            })
            .collect();
        Box::new(GraphKv { inner: self.inner.clone(), planes, positions: self.positions })
    }
    fn family_bytes(&self) -> usize {
        self.planes.iter().flatten().map(|p| 2 * lock(p).k.len() * 4).sum()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

pub(super) fn graph_kv(kv: &dyn KvStore) -> &GraphKv {
    kv.as_any().downcast_ref().unwrap_or_else(|| panic!("a KV store of another backend was passed to this one"))
}

