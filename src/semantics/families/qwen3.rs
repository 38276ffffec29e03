//! Qwen3 (transformers `models/qwen3`): Llama's layer with q_norm / k_norm over each head
//! before rope (Qwen3Attention), biases per `attention_bias`, head_dim 128 by default
//! (Qwen3Config), and Qwen2's sliding rule.

use crate::error::Result;
use crate::semantics::families::common::{llama_like, silu_gguf_keys, LlamaLike, SlidingRule};
use crate::semantics::families::{Family, GgufRead};
use crate::semantics::config::Cfg;
use crate::semantics::{Container, ModelSpec};

pub(super) static QWEN3: Family = Family { gguf: Some(GgufRead::plain("qwen3", silu_gguf_keys)), ..Family::new(&["qwen3"], "qwen3", rule) };

fn rule(cfg: Cfg, model_type: &str, _: Container) -> Result<ModelSpec> {
    let family = LlamaLike { biases: |b| (b, b), qk_norm: true, head_dim_default: Some(128), sliding: SlidingRule::FromMaxWindowLayers, refuse_mlp_bias: true };
    llama_like(cfg, model_type, &family)
}
