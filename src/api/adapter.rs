//! [`Adapter`]: a LoRA adapter opened for a [`Model`], and the embedding options and results
//! of [`Session::embed`](crate::Session::embed).

use std::path::Path;
use std::sync::Arc;

use crate::api::Model;
use crate::engine;
use crate::error::Result;

pub use crate::engine::embed::{EmbedOptions, Embeddings, Pooling};

/// A LoRA adapter opened for one model: a PEFT folder (`adapter_config.json` +
/// `adapter_model.safetensors`) or a llama.cpp adapter GGUF, its shapes checked against the
/// model's. Cheap to clone; keeps its model alive. Give it to sessions with
/// [`Session::set_adapters`](crate::Session::set_adapters): it is applied at run time to their
/// rows only, never merged into the shared weights, so sessions of one model can use different
/// adapters at once (in one shared pass too).
#[derive(Clone)]
pub struct Adapter {
    pub(crate) inner: Arc<engine::adapter::Adapter>,
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl Adapter {
    /// Opens `path` (a PEFT folder or an adapter GGUF) for `model`. An adapter for another base
    /// (a tensor whose shape or layer does not fit the model), a rank its tensors disagree
    /// with, or a kind of adapter packlm does not compute (DoRA, trained biases, per-module
    /// ranks) is refused, naming the tensor or the key.
    pub fn open(model: &Model, path: impl AsRef<Path>) -> Result<Adapter> {
        Ok(Adapter {
            inner: Arc::new(engine::adapter::Adapter::open(
                model.engine(),
                path.as_ref(),
            )?),
        })
    }
    /// Its largest rank.
    pub fn rank(&self) -> usize {
        self.inner.rank()
    }
    /// Its alpha (PEFT's `lora_alpha`; a GGUF's `adapter.lora.alpha`).
    pub fn alpha(&self) -> f32 {
        self.inner.alpha()
    }
    /// The (layer, map) pairs it changes; map is one of q_proj, k_proj, v_proj, o_proj,
    /// gate_proj, up_proj, down_proj.
    pub fn targets(&self) -> Vec<(usize, &'static str)> {
        self.inner.targets()
    }
    /// Its metadata as (key, text) pairs: a GGUF's key/values, or the PEFT config's scalars.
    pub fn metadata(&self) -> &[(String, String)] {
        self.inner.metadata()
    }
    /// The path it was opened from.
    pub fn source(&self) -> &str {
        self.inner.source()
    }
}

/// A control vector made for one model (llama.cpp's "cvec"): a vector of the hidden width per
/// layer, added to the residual stream at the end of each layer of its range. Cheap to clone;
/// keeps its model alive. Give it to sessions with
/// [`Session::set_control_vector`](crate::Session::set_control_vector): applied to their rows
/// only, so sessions of one model can use different vectors at once (in one shared pass too).
#[derive(Clone)]
pub struct ControlVector {
    pub(crate) inner: Arc<engine::control::ControlVector>,
}

impl std::fmt::Debug for ControlVector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl ControlVector {
    /// From `data` (`n_layers x n_embd` floats, layer 0 first), added to layers
    /// `layer_start ..= layer_end` (0-based). A width other than the model's hidden size, a
    /// length other than one vector per layer, a range past the model's layers, or a value that
    /// is not finite is refused, naming what was wrong. A layer whose vector is all zeros gets
    /// nothing added (the bits of no vector).
    pub fn from_data(model: &Model, data: &[f32], n_embd: usize, layer_start: usize, layer_end: usize) -> Result<ControlVector> {
        Ok(ControlVector { inner: Arc::new(engine::control::ControlVector::from_data(model.engine(), data, n_embd, layer_start, layer_end)?) })
    }
    /// The sum of llama.cpp control-vector GGUFs (tensors `direction.N` for layer N, from 1),
    /// each times its scale, added to layers `layer_start ..= layer_end` (llama.cpp's default
    /// range is 1 ..= n_layers - 1). A file that is not a control vector, a direction of
    /// another width or layer than the model has, or a value that is not finite is refused,
    /// naming the file and tensor.
    pub fn open_gguf<P: AsRef<Path>>(model: &Model, files: &[(P, f32)], layer_start: usize, layer_end: usize) -> Result<ControlVector> {
        let files: Vec<(&Path, f32)> = files.iter().map(|(p, s)| (p.as_ref(), *s)).collect();
        Ok(ControlVector { inner: Arc::new(engine::control::ControlVector::open_gguf(model.engine(), &files, layer_start, layer_end)?) })
    }
    /// The layers it adds a vector to (in its range, not all zeros), in order.
    pub fn layers(&self) -> Vec<usize> {
        self.inner.applied_layers()
    }
    /// Layer `il`'s vector (hidden-size floats), or None when it adds none there.
    pub fn values(&self, il: usize) -> Option<&[f32]> {
        self.inner.values(il)
    }
}
