//! Gemma4 text decoder rules (transformers 5 `models/gemma4/configuration_gemma4.py`,
//! `modeling_gemma4.py`), on top of the Gemma ones:
//! - plain-weight RMSNorm everywhere (Gemma4RMSNorm multiplies by w, not 1 + w), a weightless
//!   `v_norm` on values, q/k-norm, attention scale 1.0;
//! - two attention geometries: `per_layer_config` (or the older `global_head_dim` /
//!   `num_global_key_value_heads`) overrides head_dim and kv heads on full layers; the last layer
//!   is always full;
//! - `attention_k_eq_v`: full layers take values from the raw key projection;
//! - KV sharing: the last `num_kv_shared_layers` layers hold no plane and read the plane of the
//!   last non-shared layer of the same kind (`kv_sharing_modes`); `use_double_wide_mlp` doubles
//!   their MLP;
//! - per-layer inputs (PLE) and a per-layer `layer_scalar`.
//!
//! packlm reads Gemma4 from HF folders only: no GGUF architecture maps to it.

use crate::error::Result;
use crate::families::common::{base, Base, SlidingRule, SANDWICH_NORMS};
use crate::families::Family;
use crate::semantics::config::Cfg;
use crate::semantics::rope::{read_rope, LegacyRope};
use crate::semantics::{Activation, AttentionKind, Container, KvSource, ModelSpec, NormForm, PerLayerInput};

pub(super) static GEMMA4: Family = Family::new(&["gemma4", "gemma4_text"], "gemma4", gemma4);

/// The rule for either model type; the table is named "gemma4_text", the text decoder's.
fn gemma4(cfg: Cfg, _: &str, container: Container) -> Result<ModelSpec> {
    if container == Container::Gguf {
        return Err(cfg.refuse("model_type", "Gemma4 GGUF files are not implemented (HF folders are)"));
    }
    if cfg.opt_bool("enable_moe_block")?.unwrap_or(false) {
        return Err(cfg.refuse("enable_moe_block", "the Gemma4 MoE block is not implemented"));
    }
    if cfg.get("use_bidirectional_attention").is_some() {
        return Err(cfg.refuse("use_bidirectional_attention", "only causal attention is implemented"));
    }
    let activation = match cfg.opt_str("hidden_activation")?.unwrap_or("gelu_pytorch_tanh") {
        "gelu_pytorch_tanh" => Activation::GeluTanh,
        _ => return Err(cfg.refuse("hidden_activation", "only gelu_pytorch_tanh is implemented for Gemma4")),
    };
    let std = LegacyRope::STANDARD;
    let mut spec = base(
        cfg,
        Base {
            model_type: "gemma4_text",
            head_dim_default: Some(256),
            tie_default: true,
            sliding: SlidingRule::Pattern { key: None, default: 6 },
            activation,
            legacy_rope: (LegacyRope { default_theta: 1_000_000.0, ..std }, std),
        },
    )?;
    let n = spec.layers.len();
    // Gemma4TextConfig.__post_init__ forces the last layer to full attention.
    spec.layers[n - 1].attention = AttentionKind::Full;
    spec.embed_scale = Some((spec.hidden_size as f64).sqrt() as f32);
    spec.norm_form = NormForm::Weight;
    spec.final_softcap = cfg.opt_positive_f64("final_logit_softcapping")?.map(|c| c as f32);
    let k_eq_v = cfg.opt_bool("attention_k_eq_v")?.unwrap_or(false);
    let overrides = geometry_overrides(cfg, n, &spec)?;
    for (i, l) in spec.layers.iter_mut().enumerate() {
        l.norms = SANDWICH_NORMS;
        l.attn_scale = 1.0;
        l.qk_norm = true;
        l.v_norm = true;
        l.layer_scalar = true;
        l.qkv_bias = cfg.opt_bool("attention_bias")?.unwrap_or(false);
        l.o_bias = l.qkv_bias;
        if let Some((head_dim, n_kv)) = overrides[i] {
            l.head_dim = head_dim;
            l.n_kv_heads = n_kv;
        }
        if l.n_kv_heads == 0 || l.n_heads % l.n_kv_heads != 0 {
            return Err(cfg.refuse("per_layer_config", &format!("layer {i}: kv heads must divide attention heads")));
        }
        l.value_from_key = k_eq_v && l.attention == AttentionKind::Full;
        let kind = if l.attention == AttentionKind::Full { "full_attention" } else { "sliding_attention" };
        let legacy = if l.attention == AttentionKind::Full { LegacyRope { default_theta: 1_000_000.0, ..std } } else { std };
        l.rope = read_rope(cfg, l.head_dim, Some(kind), legacy)?;
    }
    kv_sharing(cfg, &mut spec)?;
    let ple_dim = cfg.opt_usize("hidden_size_per_layer_input")?.unwrap_or(0);
    if ple_dim > 0 {
        let vocab = cfg.opt_usize("vocab_size_per_layer_input")?.unwrap_or(spec.vocab_size);
        spec.per_layer_input = Some(PerLayerInput { dim: ple_dim, vocab });
        spec.layers.iter_mut().for_each(|l| l.per_layer_input = true);
    }
    Ok(spec)
}

/// (head_dim, kv heads) per layer where they differ from the config's top level:
/// `per_layer_config` {"<layer>": {"head_dim": d, "num_key_value_heads": k}}, or in the older
/// spelling `global_head_dim` (default 512) and `num_global_key_value_heads` (only when
/// attention_k_eq_v) on full layers.
fn geometry_overrides(cfg: Cfg, n: usize, spec: &ModelSpec) -> Result<Vec<Option<(usize, usize)>>> {
    let mut out = vec![None; n];
    if let Some(plc) = cfg.opt_obj("per_layer_config")? {
        let obj = plc.value.as_object().map(|o| o.iter().collect::<Vec<_>>()).unwrap_or_default();
        for (key, entry) in obj {
            let layer: usize = key
                .parse()
                .ok()
                .filter(|&i| i < n)
                .ok_or_else(|| cfg.refuse("per_layer_config", &format!("\"{key}\" is not a layer index below {n}")))?;
            let e = Cfg::new(entry, cfg.source);
            if let Some(obj) = entry.as_object() {
                if let Some(k) = obj.keys().find(|k| *k != "head_dim" && *k != "num_key_value_heads") {
                    return Err(cfg.refuse("per_layer_config", &format!("layer {layer}: key \"{k}\" is not implemented")));
                }
            }
            let l = &spec.layers[layer];
            out[layer] = Some((e.opt_usize("head_dim")?.unwrap_or(l.head_dim), e.opt_usize("num_key_value_heads")?.unwrap_or(l.n_kv_heads)));
        }
        return Ok(out);
    }
    let global_dim = cfg.opt_usize("global_head_dim")?.unwrap_or(512);
    let k_eq_v = cfg.opt_bool("attention_k_eq_v")?.unwrap_or(false);
    let global_kv = if k_eq_v { cfg.opt_usize("num_global_key_value_heads")? } else { None };
    for (i, l) in spec.layers.iter().enumerate() {
        if l.attention == AttentionKind::Full {
            out[i] = Some((global_dim, global_kv.unwrap_or(l.n_kv_heads)));
        }
    }
    Ok(out)
}

/// `Gemma4TextConfig.kv_sharing_modes`: layers from L - num_kv_shared_layers on reuse the plane
/// of the last earlier non-shared layer of the same kind.
fn kv_sharing(cfg: Cfg, spec: &mut ModelSpec) -> Result<()> {
    let n = spec.layers.len();
    let shared = cfg.opt_usize("num_kv_shared_layers")?.unwrap_or(0);
    if shared == 0 {
        return Ok(());
    }
    if shared >= n {
        return Err(cfg.refuse("num_kv_shared_layers", "must leave at least one layer that computes keys and values"));
    }
    let first = n - shared;
    let double = cfg.opt_bool("use_double_wide_mlp")?.unwrap_or(false);
    for i in first..n {
        let kind = spec.layers[i].attention;
        let same_kind = |a: AttentionKind, b: AttentionKind| std::mem::discriminant(&a) == std::mem::discriminant(&b);
        let owner = (0..first).rev().find(|&j| same_kind(spec.layers[j].attention, kind)).ok_or_else(|| {
            cfg.refuse("num_kv_shared_layers", &format!("layer {i} has no earlier non-shared layer of its kind"))
        })?;
        let (o, l) = (&spec.layers[owner], &spec.layers[i]);
        if (o.head_dim, o.n_kv_heads) != (l.head_dim, l.n_kv_heads) {
            return Err(cfg.refuse("num_kv_shared_layers", &format!("layer {i} and its owner {owner} differ in geometry")));
        }
        let l = &mut spec.layers[i];
        l.kv_source = KvSource::SharedWith { owner };
        if double {
            l.mlp_width *= 2;
        }
    }
    Ok(())
}
