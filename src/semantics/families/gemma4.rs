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
//! A GGUF file is read in llama.cpp's "gemma4" layout (convert_hf_to_gguf.py's Gemma4Model,
//! llama.cpp src/models/gemma4.cpp); see `gguf_keys`.

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::semantics::families::common::{base, Base, SlidingRule, SANDWICH_NORMS};
use crate::semantics::families::{Family, GgufRead};
use crate::pack::gguf_pack::ArchKeys;
use crate::semantics::config::Cfg;
use crate::semantics::rope::{read_rope, LegacyRope};
use crate::semantics::{Activation, AttentionKind, Container, KvSource, ModelSpec, NormForm, PerLayerInput};

pub(super) static GEMMA4: Family = Family {
    gguf: Some(GgufRead {
        tensor_names: GGUF_NAMES,
        config_tensors: &["rope_freqs.weight"],
        ..GgufRead::plain("gemma4_text", gguf_keys)
    }),
    ..Family::new(&["gemma4", "gemma4_text"], "gemma4", gemma4)
};

/// gguf-py tensor_mapping.py for MODEL_ARCH.GEMMA4: `ffn_norm` is the pre-MLP norm, the
/// per-layer inputs take gemma3n's names, `layer_scalar` is `layer_output_scale.weight`
/// (Gemma4Model.filter_tensors appends ".weight"; HF's name has none).
const GGUF_NAMES: &[(&str, &str)] = &[
    ("ffn_norm", "pre_feedforward_layernorm"),
    ("inp_gate", "per_layer_input_gate"),
    ("proj", "per_layer_projection"),
    ("post_norm", "post_per_layer_input_norm"),
    ("layer_output_scale.weight", "layer_scalar"),
    ("per_layer_token_embd.weight", "embed_tokens_per_layer.weight"),
    ("per_layer_model_proj.weight", "per_layer_model_projection.weight"),
    ("per_layer_proj_norm.weight", "per_layer_projection_norm.weight"),
];

/// llama.cpp's gemma4 keys -> Gemma4TextConfig's. The converter (Gemma4Model.set_gguf_parameters)
/// writes key_length / value_length as the full layers' head_dim and `*_swa` as the sliding
/// ones'; `sliding_window_pattern` one bool per layer; `head_count_kv` and
/// `feed_forward_length` per layer where they differ (full layers' kv heads; the doubled MLP
/// of KV-shared layers); norms as stored (norm_shift 0: Gemma4RMSNorm multiplies by w). The
/// full layers' "proportional" rope is NeoX rope over the whole head with `rope_freqs.weight`
/// factors 1 on the rotated pairs and 1e30 on the others (generate_extra_tensors). A layer
/// without attn_v takes values from its keys (llama.cpp's use_alternative_attention): HF's
/// attention_k_eq_v, on full layers only.
fn gguf_keys(keys: &ArchKeys, c: &mut Map<String, Value>) -> Result<()> {
    let bad = |k: &str, why: &str| Error::unsupported(format!("GGUF: {} {why}", keys.name(k)));
    c.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
    if let Some(cap) = keys.float("final_logit_softcapping")? {
        c.insert("final_logit_softcapping".into(), json!(cap));
    }
    let n = c["num_hidden_layers"].as_u64().unwrap_or(0) as usize;
    let swa = keys.bools("attention.sliding_window_pattern")?.ok_or_else(|| bad("attention.sliding_window_pattern", "is missing"))?;
    if swa.len() != n {
        return Err(bad("attention.sliding_window_pattern", &format!("must hold {n} values (one per layer)")));
    }
    let kind = |s: bool| if s { "sliding_attention" } else { "full_attention" };
    c.insert("layer_types".into(), json!(swa.iter().map(|&s| kind(s)).collect::<Vec<_>>()));
    let head_full = keys.u64("attention.key_length")?.ok_or_else(|| bad("attention.key_length", "is missing"))?;
    let head_swa = keys.u64("attention.key_length_swa")?.ok_or_else(|| bad("attention.key_length_swa", "is missing"))?;
    for (k, want) in [("attention.value_length", head_full), ("attention.value_length_swa", head_swa)] {
        if keys.u64(k)?.is_some_and(|v| v != want) {
            return Err(bad(k, "differs from the key length (Gemma4 requires equal ones)"));
        }
    }
    c.insert("head_dim".into(), json!(head_swa));
    let kv = keys.per_layer("attention.head_count_kv", n)?;
    let n_heads = c["num_attention_heads"].clone();
    let kv_of = |i: usize| kv.as_ref().map_or(n_heads.clone(), |v| json!(v[i]));
    // HF has one kv head count for the sliding layers; the full layers' go per layer.
    let sliding: Vec<usize> = (0..n).filter(|&i| swa[i]).collect();
    let top = sliding.first().copied().unwrap_or(0);
    if sliding.iter().any(|&i| kv_of(i) != kv_of(top)) {
        return Err(bad("attention.head_count_kv", "differs between sliding layers"));
    }
    c.insert("num_key_value_heads".into(), kv_of(top));
    let plc: Map<String, Value> =
        (0..n).filter(|&i| !swa[i]).map(|i| (i.to_string(), json!({"head_dim": head_full, "num_key_value_heads": kv_of(i)}))).collect();
    c.insert("per_layer_config".into(), Value::Object(plc));
    let shared = keys.u64("attention.shared_kv_layers")?.unwrap_or(0) as usize;
    c.insert("num_kv_shared_layers".into(), json!(shared));
    let ff = keys.per_layer("feed_forward_length", n)?.unwrap_or_default();
    let first_shared = n.saturating_sub(shared);
    let double = ff.iter().any(|&f| f != ff[0]);
    let expect = |i: usize| if double && i >= first_shared { 2 * ff[0] } else { ff[0] };
    if ff.iter().enumerate().any(|(i, &f)| f != expect(i)) {
        return Err(bad("feed_forward_length", "differs by layer other than the doubled MLP of KV-shared layers"));
    }
    c.insert("intermediate_size".into(), json!(ff.first()));
    c.insert("use_double_wide_mlp".into(), json!(double));
    c.insert("hidden_size_per_layer_input".into(), json!(keys.u64("embedding_length_per_layer_input")?.unwrap_or(0)));
    c.insert("attention_k_eq_v".into(), json!(k_eq_v(keys, &swa, first_shared)?));
    c.insert("rope_parameters".into(), rope_parameters(keys, c, head_full, head_swa)?);
    c.remove("partial_rotary_factor");
    Ok(())
}

/// Whether the full layers take values from their keys: the non-shared full layers all lack
/// attn_v (llama.cpp then uses K as V) or all hold it; a sliding layer always holds it.
fn k_eq_v(keys: &ArchKeys, swa: &[bool], first_shared: usize) -> Result<bool> {
    let no_v = |i: usize| !keys.has_tensor(&format!("blk.{i}.attn_v.weight"));
    if (0..first_shared).any(|i| swa[i] && no_v(i)) {
        return Err(Error::unsupported("GGUF: a sliding layer without attn_v (values from keys) is not implemented"));
    }
    let full: Vec<bool> = (0..first_shared).filter(|&i| !swa[i]).map(no_v).collect();
    if full.iter().any(|&x| x != full[0]) {
        return Err(Error::unsupported("GGUF: full layers with and without attn_v are not implemented"));
    }
    Ok(full.first().copied().unwrap_or(false))
}

/// `rope_parameters` per layer kind: sliding layers rotate `rope.dimension_count_swa` dims at
/// `rope.freq_base_swa`; full layers rotate the whole head at `rope.freq_base`, and with
/// `rope_freqs.weight` the pairs whose factor is 1e30 (frequency ~0) pass through: HF's
/// "proportional" rope with partial_rotary_factor 2 x (rotated pairs) / head_dim.
fn rope_parameters(keys: &ArchKeys, c: &Map<String, Value>, head_full: u64, head_swa: u64) -> Result<Value> {
    let bad = |k: &str, why: &str| Error::unsupported(format!("GGUF: {k} {why}"));
    if keys.u64("rope.dimension_count")?.is_some_and(|d| d != head_full) {
        return Err(bad(&keys.name("rope.dimension_count"), "differs from the full layers' head_dim"));
    }
    let theta_full = c.get("rope_theta").cloned().unwrap_or(json!(1_000_000.0));
    let theta_swa = keys.float("rope.freq_base_swa")?.unwrap_or(10_000.0);
    let rot_swa = keys.u64("rope.dimension_count_swa")?.unwrap_or(head_swa);
    let mut sliding = json!({"rope_type": "default", "rope_theta": theta_swa});
    if rot_swa != head_swa {
        sliding["partial_rotary_factor"] = json!(rot_swa as f64 / head_swa as f64);
    }
    let full = match keys.f32_tensor("rope_freqs.weight")? {
        None => json!({"rope_type": "default", "rope_theta": theta_full}),
        Some(f) => {
            let rotated = f.iter().take_while(|&&x| x == 1.0).count();
            if f.len() as u64 != head_full / 2 || f[rotated..].iter().any(|&x| x < 1e30) {
                return Err(bad("rope_freqs.weight", "other than 1 on the first pairs and 1e30 on the rest is not implemented"));
            }
            json!({"rope_type": "proportional", "rope_theta": theta_full, "partial_rotary_factor": 2.0 * rotated as f64 / head_full as f64})
        }
    };
    Ok(json!({"full_attention": full, "sliding_attention": sliding}))
}

/// The rule for either model type; the table is named "gemma4_text", the text decoder's.
fn gemma4(cfg: Cfg, _: &str, _: Container) -> Result<ModelSpec> {
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
