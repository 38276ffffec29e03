//! A session's keys and values: the storage contract every backend implements, and the
//! portable snapshot encoding (snapshot.rs) written from it. One plane per layer that owns one,
//! each at that layer's own row width (n_kv_heads x head_dim of that layer); a KV-shared layer
//! holds none. The store is created by the model's backend (`Backend::new_kv`) and lives where
//! that backend computes; the session reaches it only through this trait.

pub mod pages;
pub mod snapshot;

use std::any::Any;

use crate::error::Result;

/// A session's keys and values, owned by the backend that created it: one plane per layer that
/// owns one, each `[positions][kv_width]` for keys and the same for values; a KV-shared layer
/// holds none. Rows appended inside a pass count as held only after `advance`.
pub trait KvStore: Any + Send + Sync {
    /// Positions held (the same in every plane).
    fn positions(&self) -> usize;
    /// Counts `rows` rows appended by the pass that just succeeded as held.
    fn advance(&mut self, rows: usize);
    /// Keeps the first `n` positions in every plane, dropping any rows appended beyond them
    /// (also those of an unfinished pass); `n <= positions()` or `n` the pass's start.
    fn truncate(&mut self, n: usize);
    /// Layers, owning or not.
    fn n_layers(&self) -> usize;
    /// The row width of `layer`'s own plane; None for a layer that holds none.
    fn plane_width(&self, layer: usize) -> Option<usize>;
    /// Calls `visit(keys, values)` with `layer`'s held rows, in host memory (a device backend
    /// downloads them); nothing for a layer without a plane.
    fn export_plane(&self, layer: usize, visit: &mut dyn FnMut(&[f32], &[f32]));
    /// Replaces every plane and the positions held (planes already validated against the
    /// model: one entry per layer, `(keys, values)` of `positions x width` each). On failure
    /// the store is unchanged.
    fn import(&mut self, planes: Vec<Option<(Vec<f32>, Vec<f32>)>>, positions: usize) -> Result<()>;
    /// A store holding this one's positions, sharing its storage copy-on-write: no key or value
    /// is copied now, and a later append by either store copies at most the one page per plane
    /// it writes into while the other still holds it. Called outside a pass.
    fn fork(&self) -> Box<dyn KvStore>;
    /// Bytes of KV storage alive for this store and every store it shares storage with (its
    /// forks, the store it was forked from, their forks): what the family costs together.
    fn family_bytes(&self) -> usize;
    /// Room for a pass to append `rows` rows to every plane, taken before it writes any, or a
    /// failure naming why (a device pool that cannot grow); the store is otherwise unchanged.
    fn reserve(&mut self, _rows: usize) -> Result<()> {
        Ok(())
    }
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}


/// The planes of a `KvStore::import` paired with the store's own plane widths (one per layer,
/// None where a layer holds no plane): `make(width, keys, values)` builds each owning layer's
/// plane; the others stay None.
pub fn pair_planes<P>(
    widths: impl IntoIterator<Item = Option<usize>>,
    planes: Vec<Option<(Vec<f32>, Vec<f32>)>>,
    mut make: impl FnMut(usize, Vec<f32>, Vec<f32>) -> P,
) -> Vec<Option<P>> {
    planes
        .into_iter()
        .zip(widths)
        .map(|(p, w)| match (p, w) {
            (Some((k, v)), Some(width)) => Some(make(width, k, v)),
            _ => None,
        })
        .collect()
}
