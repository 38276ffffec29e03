//! Qwen2 (transformers `models/qwen2`): Qwen2Attention's q/k/v carry a bias (bias=True), its
//! o projection none; layers from `max_window_layers` on slide when `use_sliding_window`.
//! Qwen2MLP has no bias and no `mlp_bias` key, so one in a config is ignored.

use serde_json::{json, Map, Value};

use crate::error::Result;
use crate::semantics::families::common::{llama_like, silu_gguf_keys, LlamaLike, SlidingRule};
use crate::semantics::families::{Family, GgufRead};
use crate::pack::gguf_pack::ArchKeys;
use crate::semantics::config::Cfg;
use crate::semantics::{Container, ModelSpec};

pub(super) static QWEN2: Family = Family { gguf: Some(GgufRead::plain("qwen2", gguf_keys)), ..Family::new(&["qwen2"], "qwen2", rule) };

fn rule(cfg: Cfg, model_type: &str, _: Container) -> Result<ModelSpec> {
    let family = LlamaLike { biases: |_| (true, false), qk_norm: false, head_dim_default: None, sliding: SlidingRule::FromMaxWindowLayers, refuse_mlp_bias: false };
    llama_like(cfg, model_type, &family)
}

/// The SiLU activation, and Qwen2Config's `use_sliding_window` default (false), which the
/// GGUF metadata does not state.
fn gguf_keys(keys: &ArchKeys, c: &mut Map<String, Value>) -> Result<()> {
    silu_gguf_keys(keys, c)?;
    c.insert("use_sliding_window".into(), json!(false));
    Ok(())
}
