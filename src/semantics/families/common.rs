//! What several families share: `base` reads what every family states the same way (sizes,
//! rope, layer kinds, token ids), the Llama-like builder serves the pre-norm SiLU families, and
//! the GGUF key defaults of those families. Each family's file then states only what differs.

use serde_json::{json, Map, Value};

use crate::error::{Error, Result, Status};
use crate::pack::gguf_pack::ArchKeys;
use crate::semantics::config::Cfg;
use crate::semantics::rope::{read_rope, LegacyRope};
use crate::semantics::{MoeSpec, Routing, MAX_EXPERTS, MAX_EXPERTS_PER_TOKEN, MAX_HEADS, MAX_HEAD_DIM, MAX_LAYERS};
use crate::semantics::{Activation, AttentionKind, KvSource, LayerNorms, LayerSpec, ModelSpec, NormForm};

/// Llama-style pre-norm layer: `input_layernorm` before attention, `post_attention_layernorm`
/// before the MLP (HF's name for the pre-feed-forward norm in these families).
const LLAMA_NORMS: LayerNorms = LayerNorms {
    pre_attention: Some("input_layernorm"),
    post_attention: None,
    pre_feedforward: Some("post_attention_layernorm"),
    post_feedforward: None,
};

/// Gemma2/3 sandwich: a norm before and after both attention and MLP.
pub(super) const SANDWICH_NORMS: LayerNorms = LayerNorms {
    pre_attention: Some("input_layernorm"),
    post_attention: Some("post_attention_layernorm"),
    pre_feedforward: Some("pre_feedforward_layernorm"),
    post_feedforward: Some("post_feedforward_layernorm"),
};

/// How a family picks layer kinds when `layer_types` is absent.
#[derive(Clone, Copy)]
pub(super) enum SlidingRule {
    /// No sliding layers.
    None,
    /// Every layer slides when `sliding_window` is set (Mistral).
    AllWhenWindowSet,
    /// Layers from `max_window_layers` on slide when `use_sliding_window` (Qwen2, Qwen3).
    FromMaxWindowLayers,
    /// Layer i is full when (i + 1) % pattern == 0, else sliding (Gemma2: 2; Gemma3: the
    /// `sliding_window_pattern` key, default 6).
    Pattern { key: Option<&'static str>, default: usize },
}

/// What `base` needs from a family.
pub(super) struct Base<'a> {
    pub model_type: &'a str,
    pub head_dim_default: Option<usize>,
    pub tie_default: bool,
    pub sliding: SlidingRule,
    pub activation: Activation,
    /// Rope of each layer kind in the older spelling: (full, sliding).
    pub legacy_rope: (LegacyRope, LegacyRope),
}

/// The activation of a SiLU family (`hidden_act`, default silu).
fn silu(cfg: Cfg, key: &str) -> Result<Activation> {
    match cfg.opt_str(key)?.unwrap_or("silu") {
        "silu" => Ok(Activation::Silu),
        _ => Err(cfg.refuse(key, "only silu is implemented for this family")),
    }
}

/// What a Llama-like family states beyond `base`.
pub(super) struct LlamaLike {
    /// (q/k/v bias, o bias) given the config's `attention_bias` (false when absent).
    pub biases: fn(bool) -> (bool, bool),
    /// q_norm / k_norm over each head before rope.
    pub qk_norm: bool,
    pub head_dim_default: Option<usize>,
    pub sliding: SlidingRule,
    /// A true `mlp_bias` is refused (MLP biases are not implemented); false where the family's
    /// MLP has no such key and ignores it.
    pub refuse_mlp_bias: bool,
}

/// Llama, Mistral, Qwen2, Qwen3: pre-norm layers, SiLU-gated MLP, 1/sqrt(head_dim).
pub(super) fn llama_like(cfg: Cfg, model_type: &str, family: &LlamaLike) -> Result<ModelSpec> {
    let (qkv_bias, o_bias) = (family.biases)(cfg.opt_bool("attention_bias")?.unwrap_or(false));
    if family.refuse_mlp_bias && cfg.opt_bool("mlp_bias")?.unwrap_or(false) {
        return Err(cfg.refuse("mlp_bias", "MLP biases are not implemented"));
    }
    let std = LegacyRope::STANDARD;
    let b = Base {
        model_type,
        head_dim_default: family.head_dim_default,
        tie_default: false,
        sliding: family.sliding,
        activation: silu(cfg, "hidden_act")?,
        legacy_rope: (std, std),
    };
    let mut spec = base(cfg, b)?;
    for l in &mut spec.layers {
        l.qkv_bias = qkv_bias;
        l.o_bias = o_bias;
        l.qk_norm = family.qk_norm;
    }
    Ok(spec)
}

/// The GGUF config keys of a SiLU family: the activation, which GGUF files do not carry.
pub(super) fn silu_gguf_keys(_: &ArchKeys, c: &mut Map<String, Value>) -> Result<()> {
    c.insert("hidden_act".into(), json!("silu"));
    Ok(())
}

pub(super) fn base(cfg: Cfg, b: Base) -> Result<ModelSpec> {
    let hidden = cfg.positive("hidden_size")?;
    let n_layers = cfg.positive("num_hidden_layers")?;
    cfg.limit("num_hidden_layers", n_layers, MAX_LAYERS)?;
    let n_heads = cfg.positive("num_attention_heads")?;
    cfg.limit("num_attention_heads", n_heads, MAX_HEADS)?;
    let n_kv_heads = cfg.opt_usize("num_key_value_heads")?.unwrap_or(n_heads);
    if n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
        return Err(cfg.refuse("num_key_value_heads", "must divide num_attention_heads"));
    }
    let head_dim = match cfg.opt_usize("head_dim")? {
        Some(d) => d,
        None => b.head_dim_default.unwrap_or(hidden / n_heads),
    };
    if head_dim == 0 || head_dim % 2 != 0 {
        return Err(cfg.refuse("head_dim", "must be even and non-zero"));
    }
    cfg.limit("head_dim", head_dim, MAX_HEAD_DIM)?;
    let vocab = cfg.positive("vocab_size")?;
    let mlp_width = cfg.positive("intermediate_size")?;
    // 0 is allowed (x / sqrt(mean(x^2) + 0)); a negative epsilon can make the root NaN.
    let eps = cfg.f64("rms_norm_eps")?;
    if eps < 0.0 || !(eps as f32).is_finite() {
        return Err(cfg.invalid("rms_norm_eps", "must be 0 or more (and within f32 range)"));
    }
    let max_context = cfg.positive("max_position_embeddings")?;
    // packlm_info.n_ctx and session options carry the context as a u32: a longer one is
    // refused rather than truncated.
    if u32::try_from(max_context).is_err() {
        return Err(cfg.refuse("max_position_embeddings", "context lengths above 2^32 - 1 are not supported"));
    }
    let kinds = layer_kinds(cfg, n_layers, &b.sliding)?;
    let mut layers = Vec::new();
    layers.try_reserve_exact(n_layers).map_err(|_| {
        Error::new(Status::ErrOutOfMemory, format!("{}: no memory for {n_layers} layers", cfg.source))
    })?;
    for kind in kinds {
        let (name, legacy) = match kind {
            AttentionKind::Full => ("full_attention", b.legacy_rope.0),
            AttentionKind::Sliding { .. } => ("sliding_attention", b.legacy_rope.1),
        };
        let rope = read_rope(cfg, head_dim, Some(name), legacy)?;
        layers.push(LayerSpec {
            attention: kind,
            n_heads,
            n_kv_heads,
            head_dim,
            rope,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            attn_softcap: None,
            qk_norm: false,
            qkv_bias: false,
            o_bias: false,
            attn_sinks: false,
            norms: LLAMA_NORMS,
            activation: b.activation,
            mlp_width,
            moe: None,
            kv_source: KvSource::Own,
            v_norm: false,
            value_from_key: false,
            per_layer_input: false,
            layer_scalar: false,
        });
    }
    Ok(ModelSpec {
        family: b.model_type.to_string(),
        hidden_size: hidden,
        vocab_size: vocab,
        max_context,
        norm_eps: eps as f32,
        norm_form: NormForm::Weight,
        embed_scale: None,
        final_softcap: None,
        tie_word_embeddings: cfg.opt_bool("tie_word_embeddings")?.unwrap_or(b.tie_default),
        bos_token_id: cfg.token_ids("bos_token_id")?.first().copied(),
        eos_token_ids: cfg.token_ids("eos_token_id")?,
        per_layer_input: None,
        causal: true,
        layers,
    })
}

/// `layer_types` when stated (it wins over any pattern key); otherwise the family's rule.
fn layer_kinds(cfg: Cfg, n_layers: usize, rule: &SlidingRule) -> Result<Vec<AttentionKind>> {
    let window = cfg.opt_usize("sliding_window")?;
    let sliding = || -> Result<AttentionKind> {
        match window {
            Some(w) if w > 0 => Ok(AttentionKind::Sliding { window: w }),
            _ => Err(cfg.refuse("sliding_window", "sliding layers need a positive window")),
        }
    };
    if let Some(types) = cfg.opt_str_list("layer_types")? {
        if types.len() != n_layers {
            return Err(cfg.refuse("layer_types", &format!("needs {n_layers} entries")));
        }
        return types
            .iter()
            .map(|t| match *t {
                "full_attention" => Ok(AttentionKind::Full),
                "sliding_attention" => sliding(),
                other => Err(cfg.refuse("layer_types", &format!("unknown layer type \"{other}\""))),
            })
            .collect();
    }
    match rule {
        SlidingRule::None => Ok(vec![AttentionKind::Full; n_layers]),
        SlidingRule::AllWhenWindowSet => match window {
            Some(_) => Ok(vec![sliding()?; n_layers]),
            None => Ok(vec![AttentionKind::Full; n_layers]),
        },
        SlidingRule::FromMaxWindowLayers => {
            if !cfg.opt_bool("use_sliding_window")?.unwrap_or(false) {
                return Ok(vec![AttentionKind::Full; n_layers]);
            }
            let from = cfg.opt_usize("max_window_layers")?.unwrap_or(n_layers);
            (0..n_layers).map(|i| if i >= from { sliding() } else { Ok(AttentionKind::Full) }).collect()
        }
        SlidingRule::Pattern { key, default } => {
            let pattern = match key {
                Some(k) => cfg.opt_usize(k)?.unwrap_or(*default),
                None => *default,
            };
            if pattern == 0 {
                return Err(cfg.refuse(key.unwrap_or("sliding_window_pattern"), "must be positive"));
            }
            // HF: "sliding_attention" if bool((i + 1) % pattern) else "full_attention".
            (0..n_layers).map(|i| if (i + 1) % pattern != 0 { sliding() } else { Ok(AttentionKind::Full) }).collect()
        }
    }
}

/// The config keys of a family's mixture of experts (transformers' Qwen3MoeConfig,
/// MixtralConfig).
pub(super) struct MoeKeys {
    /// The experts' inner width (`moe_intermediate_size`; Mixtral's `intermediate_size`).
    pub width: &'static str,
    /// `norm_topk_prob`'s default where the family reads it; None where the top-k weights are
    /// always renormalized. Unread when `top_k_first`.
    pub norm_topk_prob_default: Option<bool>,
    /// The router takes the top k logits, then the softmax over them (`Routing::TopKSoftmax`).
    pub top_k_first: bool,
    /// The router and the experts carry biases.
    pub biases: bool,
    /// The config key of a shared expert's width (`shared_expert_intermediate_size`), where the
    /// family has one.
    pub shared_width: Option<&'static str>,
    /// The family reads `decoder_sparse_step` and `mlp_only_layers` (Qwen3-MoE); otherwise every
    /// layer is sparse.
    pub sparse_layers: bool,
}

/// Gives the sparse layers of `spec` their mixture (`LayerSpec::moe`). The expert count is
/// `num_local_experts` (what transformers 5 writes) or `num_experts` (older Qwen configs); a
/// count of 0 leaves every layer dense, as HF's `num_experts > 0` test does.
pub(super) fn experts(cfg: Cfg, spec: &mut ModelSpec, keys: &MoeKeys) -> Result<()> {
    let n = match (cfg.opt_usize("num_local_experts")?, cfg.opt_usize("num_experts")?) {
        (Some(a), Some(b)) if a != b => return Err(cfg.invalid("num_experts", "differs from num_local_experts")),
        (Some(n), _) | (None, Some(n)) => n,
        (None, None) => return Err(cfg.missing("num_local_experts")),
    };
    cfg.limit("num_local_experts", n, MAX_EXPERTS)?;
    if n == 0 {
        return Ok(());
    }
    let top_k = cfg.positive("num_experts_per_tok")?;
    cfg.limit("num_experts_per_tok", top_k, MAX_EXPERTS_PER_TOKEN)?;
    if top_k > n {
        return Err(cfg.invalid("num_experts_per_tok", &format!("more than the {n} experts")));
    }
    let width = cfg.positive(keys.width)?;
    let routing = match (keys.top_k_first, keys.norm_topk_prob_default) {
        (true, _) => Routing::TopKSoftmax,
        (false, Some(d)) => Routing::SoftmaxTopK { renormalize: cfg.opt_bool("norm_topk_prob")?.unwrap_or(d) },
        (false, None) => Routing::SoftmaxTopK { renormalize: true },
    };
    let (step, dense) = if keys.sparse_layers {
        (cfg.opt_usize("decoder_sparse_step")?.unwrap_or(1), cfg.opt_usize_list("mlp_only_layers")?.unwrap_or_default())
    } else {
        (1, Vec::new())
    };
    if step == 0 {
        return Err(cfg.invalid("decoder_sparse_step", "must be positive"));
    }
    if let Some(&i) = dense.iter().find(|&&i| i >= spec.layers.len()) {
        return Err(cfg.invalid("mlp_only_layers", &format!("layer {i} is past the model's {} layers", spec.layers.len())));
    }
    let shared_width = keys.shared_width.map(|k| cfg.positive(k)).transpose()?;
    let moe = MoeSpec { n_experts: n, top_k, width, routing, biases: keys.biases, shared_width };
    for (i, l) in spec.layers.iter_mut().enumerate() {
        // Qwen3MoeDecoderLayer: `(layer_idx not in mlp_only_layers) and (num_experts > 0 and
        // (layer_idx + 1) % decoder_sparse_step == 0)`.
        if !dense.contains(&i) && (i + 1) % step == 0 {
            l.moe = Some(moe);
        }
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::semantics::{build_spec, Container};
    use serde_json::json;

    /// A small config of `model_type` with `n_layers` (the geometry of a tiny Gemma), plus the
    /// `extra` keys, built from an HF folder.
    pub(in crate::semantics::families) fn spec(model_type: &str, n_layers: usize, extra: serde_json::Value) -> ModelSpec {
        let mut v = json!({
            "model_type": model_type, "hidden_size": 64, "num_hidden_layers": n_layers,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 10,
            "intermediate_size": 32, "rms_norm_eps": 1e-6, "max_position_embeddings": 128
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        build_spec(Cfg::new(&v, "test"), Container::Folder).unwrap()
    }

    #[test]
    fn layer_types_win_over_the_pattern() {
        let s = spec(
            "gemma3_text",
            3,
            json!({"sliding_window": 8, "sliding_window_pattern": 2,
                   "layer_types": ["full_attention", "full_attention", "sliding_attention"]}),
        );
        let kinds: Vec<_> = s.layers.iter().map(|l| l.attention).collect();
        assert_eq!(kinds, vec![AttentionKind::Full, AttentionKind::Full, AttentionKind::Sliding { window: 8 }]);
    }

    /// The stated limits hold without any tensor table (the config -> LayerSpec path alone):
    /// 1025 layers, 1025 heads or head_dim 8194 are refused before a table is built.
    #[test]
    fn counts_above_the_stated_limits_are_refused() {
        for (key, value) in [("num_hidden_layers", 1025), ("num_attention_heads", 1025), ("head_dim", 8194)] {
            let mut v = json!({
                "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 10,
                "intermediate_size": 32, "rms_norm_eps": 1e-6, "max_position_embeddings": 128
            });
            v[key] = json!(value);
            let e = build_spec(Cfg::new(&v, "test"), Container::Folder).unwrap_err();
            assert_eq!(e.status, crate::Status::ErrLimitExceeded, "{key}: {e}");
            assert!(e.message.contains(key), "{e}");
        }
        // Gemma4's full-layer head_dim is read per layer: the same limit applies there.
        let v = json!({
            "model_type": "gemma4_text", "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 10,
            "intermediate_size": 32, "rms_norm_eps": 1e-6, "max_position_embeddings": 128,
            "sliding_window": 8, "global_head_dim": 8194
        });
        let e = build_spec(Cfg::new(&v, "test"), Container::Folder).unwrap_err();
        assert_eq!(e.status, crate::Status::ErrLimitExceeded, "{e}");
    }
}
