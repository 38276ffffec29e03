//! Family rules: config keys -> `ModelSpec`. `base` reads what every family shares (sizes, rope,
//! layer kinds); each family function then states only what differs.
//! Sources: transformers 5 `models/<family>/configuration_<family>.py` and `modeling_<family>.py`.

use crate::error::{Error, Result, Status};
use crate::semantics::config::Cfg;
use crate::semantics::rope::{read_rope, LegacyRope};
use crate::semantics::{MAX_HEADS, MAX_HEAD_DIM, MAX_LAYERS};
use crate::semantics::{Activation, AttentionKind, Container, KvSource, LayerNorms, LayerSpec, ModelSpec, NormForm};

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

pub fn build_spec(cfg: Cfg, container: Container) -> Result<ModelSpec> {
    let model_type = cfg.str("model_type")?;
    match model_type {
        "llama" | "mistral" | "qwen2" | "qwen3" => llama_like(cfg, model_type),
        "gemma" | "gemma2" | "gemma3" | "gemma3_text" => gemma(cfg, model_type, container),
        "gemma4" | "gemma4_text" => super::gemma4::gemma4(cfg, container),
        other => Err(Error::unsupported(format!(
            "{}: model_type \"{other}\" is not implemented (llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, gemma4_text are)",
            cfg.source
        ))),
    }
}

fn silu(cfg: Cfg, key: &str) -> Result<Activation> {
    match cfg.opt_str(key)?.unwrap_or("silu") {
        "silu" => Ok(Activation::Silu),
        _ => Err(cfg.refuse(key, "only silu is implemented for this family")),
    }
}

/// Llama, Mistral, Qwen2, Qwen3: pre-norm layers, SiLU-gated MLP, 1/sqrt(head_dim).
fn llama_like(cfg: Cfg, model_type: &str) -> Result<ModelSpec> {
    let attention_bias = cfg.opt_bool("attention_bias")?.unwrap_or(false);
    // (qkv bias, o bias, qk-norm, head_dim default, sliding rule)
    let (qkv_bias, o_bias, qk_norm, head_dim_default, sliding) = match model_type {
        // LlamaAttention: q/k/v/o all use `attention_bias`.
        "llama" => (attention_bias, attention_bias, false, None, SlidingRule::None),
        // MistralAttention: no biases; sliding_window applies to every layer.
        "mistral" => (false, false, false, None, SlidingRule::AllWhenWindowSet),
        // Qwen2Attention: q/k/v with bias=True, o without.
        "qwen2" => (true, false, false, None, SlidingRule::FromMaxWindowLayers),
        // Qwen3Attention: q_norm/k_norm over head_dim before rope; biases per attention_bias;
        // Qwen3Config.head_dim defaults to 128.
        _ => (attention_bias, attention_bias, true, Some(128), SlidingRule::FromMaxWindowLayers),
    };
    if model_type != "qwen2" && cfg.opt_bool("mlp_bias")?.unwrap_or(false) {
        return Err(cfg.refuse("mlp_bias", "MLP biases are not implemented"));
    }
    let std = LegacyRope::STANDARD;
    let mut spec = base(
        cfg,
        Base { model_type, head_dim_default, tie_default: false, sliding, activation: silu(cfg, "hidden_act")?, legacy_rope: (std, std) },
    )?;
    for l in &mut spec.layers {
        l.qkv_bias = qkv_bias;
        l.o_bias = o_bias;
        l.qk_norm = qk_norm;
    }
    Ok(spec)
}

/// Gemma, Gemma2, Gemma3 (text): embedding x sqrt(hidden), RMSNorm x (1 + w), gelu-tanh MLP,
/// tied embeddings; Gemma2/3 add sandwich norms and 1/sqrt(query_pre_attn_scalar); Gemma2 adds
/// softcapping and alternating sliding layers; Gemma3 adds qk-norm, a local rope base for
/// sliding layers and rope scaling on full layers only.
pub(super) fn gemma(cfg: Cfg, model_type: &str, container: Container) -> Result<ModelSpec> {
    let v1 = model_type == "gemma";
    let v3 = model_type.starts_with("gemma3");
    // GemmaMLP reads `hidden_act`; Gemma2/3 read `hidden_activation`. The legacy value "gelu"
    // means the tanh approximation (GemmaConfig.__post_init__).
    let act_key = if v1 { "hidden_act" } else { "hidden_activation" };
    let activation = match cfg.opt_str(act_key)?.unwrap_or("gelu_pytorch_tanh") {
        "gelu_pytorch_tanh" | "gelu" => Activation::GeluTanh,
        _ => return Err(cfg.refuse(act_key, "only gelu_pytorch_tanh is implemented for Gemma")),
    };
    let sliding = match model_type {
        "gemma" => SlidingRule::None,
        "gemma2" => SlidingRule::Pattern { key: None, default: 2 },
        _ => SlidingRule::Pattern { key: Some("sliding_window_pattern"), default: 6 },
    };
    // Gemma3TextConfig.default_theta: global 1e6, local 1e4; the old spelling's rope_scaling
    // applies to full layers only.
    let legacy_rope = if v3 {
        (
            LegacyRope { theta_key: "rope_theta", default_theta: 1_000_000.0, scaling: true },
            LegacyRope { theta_key: "rope_local_base_freq", default_theta: 10_000.0, scaling: false },
        )
    } else {
        (LegacyRope::STANDARD, LegacyRope::STANDARD)
    };
    let mut spec = base(cfg, Base { model_type, head_dim_default: Some(256), tie_default: true, sliding, activation, legacy_rope })?;
    // HF: hidden_size**0.5 as a Python float, cast to the compute dtype.
    spec.embed_scale = Some((spec.hidden_size as f64).sqrt() as f32);
    // HF folders store w and compute (1 + w); llama.cpp's converter writes w + 1 into GGUF
    // (convert_hf_to_gguf.py, Gemma*Model.modify_tensors: `data_torch + 1` on norm weights).
    spec.norm_form = match container {
        Container::Folder => NormForm::OnePlusWeight,
        Container::Gguf => NormForm::Weight,
    };
    // Gemma2Config defaults the caps to 30 (final) and 50 (attention) when the key is absent;
    // an explicit null turns them off. Gemma3 defaults both to None.
    let cap = |key: &str, gemma2_default: f64| -> Result<Option<f32>> {
        match (model_type, cfg.value.get(key)) {
            ("gemma2", None) => Ok(Some(gemma2_default as f32)),
            _ if v1 => Ok(None),
            // tanh(x / cap) * cap: a cap <= 0 makes every logit NaN or flips its sign.
            _ => Ok(cfg.opt_positive_f64(key)?.map(|c| c as f32)),
        }
    };
    spec.final_softcap = cap("final_logit_softcapping", 30.0)?;
    let attn_softcap = cap("attn_logit_softcapping", 50.0)?;
    let scale = if v1 {
        None
    } else {
        // Gemma2/3 config classes default query_pre_attn_scalar to 256.
        // The scale is query_pre_attn_scalar^-0.5: 0 or less gives inf or NaN.
        Some(cfg.opt_positive_f64("query_pre_attn_scalar")?.unwrap_or(256.0))
    };
    for l in &mut spec.layers {
        if !v1 {
            l.norms = SANDWICH_NORMS;
        }
        if let Some(s) = scale {
            l.attn_scale = (s.powf(-0.5)) as f32;
        }
        l.attn_softcap = attn_softcap;
        l.qk_norm = v3;
        l.qkv_bias = cfg.opt_bool("attention_bias")?.unwrap_or(false);
        l.o_bias = l.qkv_bias;
    }
    // Gemma3TextConfig: with `use_bidirectional_attention`, every key of the text is visible
    // on full layers, and on sliding layers keys within |q - k| < sliding_window / 2 + 1 (its
    // __post_init__ halves the window; modeling_gemma3's `_bidirectional_window_overlay`).
    if v3 && cfg.opt_bool("use_bidirectional_attention")?.unwrap_or(false) {
        spec.causal = false;
        for l in &mut spec.layers {
            if let AttentionKind::Sliding { window } = &mut l.attention {
                *window = *window / 2 + 1;
            }
        }
    } else if cfg.value.get("use_bidirectional_attention").is_some_and(|v| v.as_bool() == Some(true)) {
        return Err(cfg.refuse("use_bidirectional_attention", "bidirectional attention is implemented for gemma3_text only"));
    }
    Ok(spec)
}

pub(super) fn base(cfg: Cfg, b: Base) -> Result<ModelSpec> {
    let hidden = cfg.positive("hidden_size")?;
    let n_layers = cfg.positive("num_hidden_layers")?;
    limit(cfg, "num_hidden_layers", n_layers, MAX_LAYERS)?;
    let n_heads = cfg.positive("num_attention_heads")?;
    limit(cfg, "num_attention_heads", n_heads, MAX_HEADS)?;
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
    limit(cfg, "head_dim", head_dim, MAX_HEAD_DIM)?;
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

/// Refuses a count or size beyond a stated limit (see `semantics::MAX_LAYERS`...), so that
/// nothing is allocated from it.
pub(super) fn limit(cfg: Cfg, key: &str, value: usize, max: usize) -> Result<()> {
    if value > max {
        return Err(Error::new(
            Status::ErrLimitExceeded,
            format!("{}: \"{key}\" = {value} is above the limit of {max}", cfg.source),
        ));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A small Gemma config of `model_type` with `n_layers`, plus the `extra` keys.
    fn spec(model_type: &str, n_layers: usize, extra: serde_json::Value) -> ModelSpec {
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

    /// A 34-layer Gemma3 (the 4B's geometry) without layer_types: full layers are 5, 11, 17,
    /// 23, 29 (literal, from HF's (i + 1) % 6 rule worked by hand), and 33 is sliding.
    #[test]
    fn gemma3_pattern_six_puts_full_layers_at_5_11_17_23_29() {
        let s = spec("gemma3_text", 34, json!({"sliding_window": 512, "sliding_window_pattern": 6}));
        let full: Vec<usize> = (0..34).filter(|&i| s.layers[i].attention == AttentionKind::Full).collect();
        assert_eq!(full, vec![5, 11, 17, 23, 29]);
        // Sliding layers use the local base, full layers the global one.
        assert_eq!(s.layers[0].rope.theta, 10_000.0);
        assert_eq!(s.layers[5].rope.theta, 1_000_000.0);
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

    #[test]
    fn gemma2_alternates_starting_with_sliding() {
        let s = spec("gemma2", 4, json!({"sliding_window": 6, "query_pre_attn_scalar": 24}));
        let full: Vec<usize> = (0..4).filter(|&i| s.layers[i].attention == AttentionKind::Full).collect();
        assert_eq!(full, vec![1, 3]);
        assert_eq!(s.layers[0].attn_scale, (24f64.powf(-0.5)) as f32);
        assert_eq!(s.norm_form, NormForm::OnePlusWeight);
    }
}
