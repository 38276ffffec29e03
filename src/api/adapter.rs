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
