//! A session's keys and values: one plane per layer that owns one, each at that layer's own
//! row width (n_kv_heads x head_dim of that layer). A KV-shared layer holds no plane.
//! Every position ever stepped is kept (sliding layers included), so any rollback is exact.

pub mod snapshot;

use crate::semantics::{KvSource, LayerSpec};

/// One layer's keys and values, `[positions][kv_width]` each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plane {
    pub kv_width: usize,
    /// (positions, kv_width)
    pub k: Vec<f32>,
    /// (positions, kv_width)
    pub v: Vec<f32>,
}

impl Plane {
    pub fn truncate(&mut self, n: usize) {
        self.k.truncate(n * self.kv_width);
        self.v.truncate(n * self.kv_width);
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct KvCache {
    /// Indexed by layer; None for a layer that reads another layer's plane.
    pub planes: Vec<Option<Plane>>,
    /// Positions held (the same in every plane).
    pub n_past: usize,
}

impl KvCache {
    pub fn new(layers: &[LayerSpec]) -> KvCache {
        let planes = layers
            .iter()
            .map(|l| match l.kv_source {
                KvSource::Own => Some(Plane { kv_width: l.kv_width(), ..Plane::default() }),
                KvSource::SharedWith { .. } => None,
            })
            .collect();
        KvCache { planes, n_past: 0 }
    }

    /// Keeps the first `n` positions (n <= n_past).
    pub fn truncate(&mut self, n: usize) {
        for p in self.planes.iter_mut().flatten() {
            p.truncate(n);
        }
        self.n_past = self.n_past.min(n);
    }

    /// The plane layer `layer` reads (its own, or its owner's).
    pub fn plane_for(&self, layers: &[LayerSpec], layer: usize) -> Option<&Plane> {
        let owner = match layers[layer].kv_source {
            KvSource::Own => layer,
            KvSource::SharedWith { owner } => owner,
        };
        self.planes.get(owner)?.as_ref()
    }
}
