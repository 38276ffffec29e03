//! Family rules: config keys -> `ModelSpec`. Each family is a small function that states what
//! differs; everything shared (sizes, rope, layer kinds) is read once in `common`.
//! Sources: transformers 5 `models/<family>/configuration_<family>.py` and `modeling_<family>.py`.

use crate::error::{Error, Result};
use crate::semantics::config::Cfg;
use crate::semantics::rope::read_rope;
use crate::semantics::{
    Activation, AttentionKind, KvSource, LayerNorms, LayerSpec, ModelSpec, NormForm,
};

/// Llama-style pre-norm layer: `input_layernorm` before attention, `post_attention_layernorm`
/// before the MLP (HF's name for the pre-feed-forward norm in these families).
const LLAMA_NORMS: LayerNorms = LayerNorms {
    pre_attention: Some("input_layernorm"),
    post_attention: None,
    pre_feedforward: Some("post_attention_layernorm"),
    post_feedforward: None,
};

/// What a family decides beyond the shared keys.
struct FamilyRules {
    /// q, k, v carry biases.
    qkv_bias: bool,
    /// o carries a bias.
    o_bias: bool,
    qk_norm: bool,
    /// Default of `tie_word_embeddings` when the config omits it.
    tie_default: bool,
    /// Default head_dim when the config omits it (None: hidden_size / num_attention_heads).
    head_dim_default: Option<usize>,
    /// How layer kinds are chosen when `layer_types` is absent.
    sliding: SlidingRule,
}

enum SlidingRule {
    /// Every layer slides when `sliding_window` is set (Mistral).
    AllWhenWindowSet,
    /// Layers from `max_window_layers` on slide when `use_sliding_window` (Qwen2, Qwen3).
    FromMaxWindowLayers,
    /// No sliding layers (Llama).
    None,
}

pub fn build_spec(cfg: Cfg) -> Result<ModelSpec> {
    let model_type = cfg.str("model_type")?;
    let attention_bias = cfg.opt_bool("attention_bias")?.unwrap_or(false);
    let rules = match model_type {
        // LlamaAttention: q/k/v/o all use `attention_bias`.
        "llama" => FamilyRules {
            qkv_bias: attention_bias,
            o_bias: attention_bias,
            qk_norm: false,
            tie_default: false,
            head_dim_default: None,
            sliding: SlidingRule::None,
        },
        // MistralAttention: no biases; sliding_window applies to every layer.
        "mistral" => FamilyRules {
            qkv_bias: false,
            o_bias: false,
            qk_norm: false,
            tie_default: false,
            head_dim_default: None,
            sliding: SlidingRule::AllWhenWindowSet,
        },
        // Qwen2Attention: q/k/v with bias=True, o without.
        "qwen2" => FamilyRules {
            qkv_bias: true,
            o_bias: false,
            qk_norm: false,
            tie_default: false,
            head_dim_default: None,
            sliding: SlidingRule::FromMaxWindowLayers,
        },
        // Qwen3Attention: q_norm/k_norm over head_dim before rope; biases per attention_bias;
        // Qwen3Config.head_dim defaults to 128.
        "qwen3" => FamilyRules {
            qkv_bias: attention_bias,
            o_bias: attention_bias,
            qk_norm: true,
            tie_default: false,
            head_dim_default: Some(128),
            sliding: SlidingRule::FromMaxWindowLayers,
        },
        other => {
            return Err(Error::unsupported(format!(
                "{}: model_type \"{other}\" is not implemented (llama, mistral, qwen2, qwen3 are)",
                cfg.source
            )))
        }
    };
    if model_type != "qwen2" && cfg.opt_bool("mlp_bias")?.unwrap_or(false) {
        return Err(cfg.refuse("mlp_bias", "MLP biases are not implemented"));
    }
    let act = match cfg.opt_str("hidden_act")?.unwrap_or("silu") {
        "silu" => Activation::Silu,
        _ => return Err(cfg.refuse("hidden_act", "only silu is implemented for this family")),
    };
    common(cfg, model_type, &rules, act)
}

fn common(cfg: Cfg, model_type: &str, rules: &FamilyRules, act: Activation) -> Result<ModelSpec> {
    let hidden = cfg.positive("hidden_size")?;
    let n_layers = cfg.positive("num_hidden_layers")?;
    let n_heads = cfg.positive("num_attention_heads")?;
    let n_kv_heads = cfg.opt_usize("num_key_value_heads")?.unwrap_or(n_heads);
    if n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
        return Err(cfg.refuse("num_key_value_heads", "must divide num_attention_heads"));
    }
    let head_dim = match cfg.opt_usize("head_dim")? {
        Some(d) => d,
        None => rules.head_dim_default.unwrap_or(hidden / n_heads),
    };
    if head_dim == 0 || head_dim % 2 != 0 {
        return Err(cfg.refuse("head_dim", "must be even and non-zero"));
    }
    let vocab = cfg.positive("vocab_size")?;
    let mlp_width = cfg.positive("intermediate_size")?;
    let eps = cfg.f64("rms_norm_eps")?;
    let max_context = cfg.positive("max_position_embeddings")?;
    let kinds = layer_kinds(cfg, n_layers, &rules.sliding)?;
    let mut layers = Vec::with_capacity(n_layers);
    for kind in kinds {
        let rope = read_rope(cfg, head_dim, Some(layer_type_name(kind)))?;
        layers.push(LayerSpec {
            attention: kind,
            n_heads,
            n_kv_heads,
            head_dim,
            rope,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            attn_softcap: None,
            qk_norm: rules.qk_norm,
            qkv_bias: rules.qkv_bias,
            o_bias: rules.o_bias,
            norms: LLAMA_NORMS,
            activation: act,
            mlp_width,
            kv_source: KvSource::Own,
        });
    }
    Ok(ModelSpec {
        family: model_type.to_string(),
        hidden_size: hidden,
        vocab_size: vocab,
        max_context,
        norm_eps: eps as f32,
        norm_form: NormForm::Weight,
        embed_scale: None,
        final_softcap: None,
        tie_word_embeddings: cfg.opt_bool("tie_word_embeddings")?.unwrap_or(rules.tie_default),
        bos_token_id: cfg.token_ids("bos_token_id")?.first().copied(),
        eos_token_ids: cfg.token_ids("eos_token_id")?,
        layers,
    })
}

fn layer_type_name(kind: AttentionKind) -> &'static str {
    match kind {
        AttentionKind::Full => "full_attention",
        AttentionKind::Sliding { .. } => "sliding_attention",
    }
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
            (0..n_layers)
                .map(|i| if i >= from { sliding() } else { Ok(AttentionKind::Full) })
                .collect()
        }
    }
}
