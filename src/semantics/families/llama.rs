//! Llama (transformers `models/llama`): the pre-norm SiLU family the others here follow.
//! LlamaAttention gives q/k/v/o all the bias `attention_bias` says. llama.cpp's converter
//! permutes the rows of a "llama" GGUF's Q and K for ggml's interleaved rope. It also writes
//! Mixtral as "llama", with `expert_count` and stacked experts: such a file is read as a
//! Mixtral config (mixtral.rs).

use crate::error::Result;
use serde_json::{json, Map, Value};

use crate::semantics::families::common::{llama_like, silu_gguf_keys, LlamaLike, SlidingRule};
use crate::semantics::families::{Family, GgufRead};
use crate::pack::gguf_pack::ArchKeys;
use crate::semantics::config::Cfg;
use crate::semantics::{Container, ModelSpec};

pub(super) static LLAMA: Family =
    Family { gguf: Some(GgufRead { rope_permuted: true, ..GgufRead::plain("llama", gguf_keys) }), ..Family::new(&["llama"], "llama", rule) };

fn rule(cfg: Cfg, model_type: &str, _: Container) -> Result<ModelSpec> {
    let family = LlamaLike { biases: |b| (b, b), qk_norm: false, head_dim_default: None, sliding: SlidingRule::None, refuse_mlp_bias: true };
    llama_like(cfg, model_type, &family)
}

fn gguf_keys(k: &ArchKeys, c: &mut Map<String, Value>) -> Result<()> {
    silu_gguf_keys(k, c)?;
    if k.u64("expert_count")?.is_some_and(|n| n > 0) {
        c.insert("model_type".into(), json!("mixtral"));
    }
    Ok(())
}
