//! Llama (transformers `models/llama`): the pre-norm SiLU family the others here follow.
//! LlamaAttention gives q/k/v/o all the bias `attention_bias` says. llama.cpp's converter
//! permutes the rows of a "llama" GGUF's Q and K for ggml's interleaved rope.

use crate::error::Result;
use crate::families::common::{llama_like, silu_gguf_keys, LlamaLike, SlidingRule};
use crate::families::{Family, GgufRead};
use crate::semantics::config::Cfg;
use crate::semantics::{Container, ModelSpec};

pub(super) static LLAMA: Family =
    Family { gguf: Some(GgufRead { rope_permuted: true, ..GgufRead::plain("llama", silu_gguf_keys) }), ..Family::new(&["llama"], "llama", rule) };

fn rule(cfg: Cfg, model_type: &str, _: Container) -> Result<ModelSpec> {
    let family = LlamaLike { biases: |b| (b, b), qk_norm: false, head_dim_default: None, sliding: SlidingRule::None, refuse_mlp_bias: true };
    llama_like(cfg, model_type, &family)
}
