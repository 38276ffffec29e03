//! Mistral (transformers `models/mistral`): Llama's layer without biases (MistralAttention),
//! and `sliding_window`, when set, applies to every layer. llama.cpp's converter writes Mistral
//! checkpoints as "llama" GGUF files, which the Llama family reads; an HF folder of Mistral
//! reports "mistral".

use crate::error::Result;
use crate::semantics::families::common::{llama_like, LlamaLike, SlidingRule};
use crate::semantics::families::Family;
use crate::semantics::config::Cfg;
use crate::semantics::{Container, ModelSpec};

pub(super) static MISTRAL: Family = Family::new(&["mistral"], "mistral", rule);

fn rule(cfg: Cfg, model_type: &str, _: Container) -> Result<ModelSpec> {
    let family = LlamaLike { biases: |_| (false, false), qk_norm: false, head_dim_default: None, sliding: SlidingRule::AllWhenWindowSet, refuse_mlp_bias: true };
    llama_like(cfg, model_type, &family)
}
