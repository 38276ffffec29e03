//! Gemma, Gemma2 and Gemma3 (text) (transformers `models/gemma`, `models/gemma2`,
//! `models/gemma3`). One file for the three: they are one rule set whose steps differ by
//! generation (each adds to the one before), so their rule is one function and they are three
//! descriptors only because each has its own model types, GGUF architecture and tensor names.
//! Gemma4 changes too much of the layer to share this rule and has its own file.

use serde_json::{json, Map, Value};

use crate::error::Result;
use crate::semantics::families::common::{base, Base, SlidingRule, SANDWICH_NORMS};
use crate::semantics::families::{Family, GgufRead, SpmTokenizer};
use crate::pack::gguf_pack::ArchKeys;
use crate::semantics::config::Cfg;
use crate::semantics::rope::LegacyRope;
use crate::semantics::{Activation, AttentionKind, Container, ModelSpec, NormForm};

pub(super) static GEMMA: Family =
    Family { gguf: Some(gguf("gemma", &[])), ..Family::new(&["gemma"], "gemma", |cfg, model_type, container| gemma(cfg, model_type, container, Generation::One)) };
pub(super) static GEMMA2: Family =
    Family { gguf: Some(gguf("gemma2", SANDWICH_GGUF_NAMES)), ..Family::new(&["gemma2"], "gemma2", |cfg, model_type, container| gemma(cfg, model_type, container, Generation::Two)) };
pub(super) static GEMMA3: Family = Family {
    gguf: Some(gguf("gemma3_text", SANDWICH_GGUF_NAMES)),
    ..Family::new(&["gemma3", "gemma3_text"], "gemma3", |cfg, model_type, container| gemma(cfg, model_type, container, Generation::Three))
};

/// `ffn_norm` is the norm before the MLP: HF calls it `post_attention_layernorm` in
/// Llama-style models and `pre_feedforward_layernorm` in Gemma2/3, whose
/// `post_attention_layernorm` is GGUF's `post_attention_norm` (gguf-py tensor_mapping.py).
const SANDWICH_GGUF_NAMES: &[(&str, &str)] = &[("ffn_norm", "pre_feedforward_layernorm")];

/// A Gemma GGUF, read as `model_type`: the family's keys and tensor names, HF's Gemma tokenizer.
const fn gguf(model_type: &'static str, tensor_names: &'static [(&'static str, &'static str)]) -> GgufRead {
    GgufRead { tensor_names, spm_tokenizer: SpmTokenizer::Gemma, ..GgufRead::plain(model_type, gguf_keys) }
}

/// Which Gemma a rule runs for: each generation adds to the one before.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Generation {
    One,
    Two,
    Three,
}

/// Keys a Gemma GGUF does not carry take the config class's defaults (the activation; the
/// query_pre_attn_scalar, local rope base and pattern are left to the rule's defaults); the
/// softcaps are copied when the file states them.
fn gguf_keys(keys: &ArchKeys, c: &mut Map<String, Value>) -> Result<()> {
    c.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
    c.insert("hidden_act".into(), json!("gelu_pytorch_tanh"));
    for key in ["attn_logit_softcapping", "final_logit_softcapping"] {
        if let Some(cap) = keys.float(key)? {
            c.insert(key.into(), json!(cap));
        }
    }
    Ok(())
}

/// Gemma, Gemma2, Gemma3 (text): embedding x sqrt(hidden), RMSNorm x (1 + w), gelu-tanh MLP,
/// tied embeddings; Gemma2/3 add sandwich norms and 1/sqrt(query_pre_attn_scalar); Gemma2 adds
/// softcapping and alternating sliding layers; Gemma3 adds qk-norm, a local rope base for
/// sliding layers and rope scaling on full layers only.
fn gemma(cfg: Cfg, model_type: &str, container: Container, generation: Generation) -> Result<ModelSpec> {
    let v1 = generation == Generation::One;
    let v3 = generation == Generation::Three;
    // GemmaMLP reads `hidden_act`; Gemma2/3 read `hidden_activation`. The legacy value "gelu"
    // means the tanh approximation (GemmaConfig.__post_init__).
    let act_key = if v1 { "hidden_act" } else { "hidden_activation" };
    let activation = match cfg.opt_str(act_key)?.unwrap_or("gelu_pytorch_tanh") {
        "gelu_pytorch_tanh" | "gelu" => Activation::GeluTanh,
        _ => return Err(cfg.refuse(act_key, "only gelu_pytorch_tanh is implemented for Gemma")),
    };
    let sliding = match generation {
        Generation::One => SlidingRule::None,
        Generation::Two => SlidingRule::Pattern { key: None, default: 2 },
        Generation::Three => SlidingRule::Pattern { key: Some("sliding_window_pattern"), default: 6 },
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
        match (generation, cfg.value.get(key)) {
            (Generation::Two, None) => Ok(Some(gemma2_default as f32)),
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

#[cfg(test)]
mod tests {
    use crate::semantics::families::common::tests::spec;
    use crate::semantics::{AttentionKind, NormForm};
    use serde_json::json;

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
    fn gemma2_alternates_starting_with_sliding() {
        let s = spec("gemma2", 4, json!({"sliding_window": 6, "query_pre_attn_scalar": 24}));
        let full: Vec<usize> = (0..4).filter(|&i| s.layers[i].attention == AttentionKind::Full).collect();
        assert_eq!(full, vec![1, 3]);
        assert_eq!(s.layers[0].attn_scale, (24f64.powf(-0.5)) as f32);
        assert_eq!(s.norm_form, NormForm::OnePlusWeight);
    }
}
