//! gpt-oss (transformers `models/gpt_oss`): pre-norm layers whose attention has q/k/v/o biases
//! (`attention_bias`, default true) and one learned sink logit per head (`self_attn.sinks`),
//! alternating sliding and full layers (`layer_types`; by default layer i slides when i is
//! even), yarn rope, and on every layer a mixture of experts: the router (GptOssTopKRouter) is
//! a linear map with a bias, takes the top `num_experts_per_tok` logits and the softmax over
//! them; each expert (GptOssExperts) has biased gate, up and down projections of
//! `intermediate_size` and the clamped SwiGLU (`swiglu_alpha`, default 1.702; `swiglu_limit`,
//! default 7).
//!
//! HF folders store each layer's experts fused: `mlp.experts.gate_up_proj` (n_experts, hidden,
//! 2 * width), the gate in the even columns and up in the odd ones, multiplied from the left
//! (x @ W); `down_proj` (n_experts, width, hidden); the biases `gate_up_proj_bias` and
//! `down_proj_bias`; the router is `mlp.router`. `folder_tensors` turns them into the common
//! stacked names (`mlp.experts.gate_proj.weight`, (n_experts, width, hidden), ...), as
//! llama.cpp's converter (conversion/gpt_oss.py) does for its GGUF files.
//!
//! GGUF: llama.cpp's "gpt-oss" files (`attn_sinks`, `post_attention_norm` before the mixture,
//! stacked `ffn_*_exps` with `.bias`, `ffn_gate_inp.bias`); `expert_feed_forward_length` is the
//! experts' width. The clamp and gain are not in the file (llama.cpp fixes them at 7 and
//! 1.702: the config class's defaults). Yarn's correction range is not rounded (`truncate`
//! false), as the config class's default rope states it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::pack::gguf_pack::ArchKeys;
use crate::pack::tensor::{TensorBytes, WeightTensor};
use crate::quant::WeightType;
use crate::semantics::config::Cfg;
use crate::semantics::families::common::{base, experts, Base, MoeKeys, SlidingRule};
use crate::semantics::families::{Family, GgufRead};
use crate::semantics::rope::LegacyRope;
use crate::semantics::{Activation, Container, ModelSpec};

pub(super) static GPT_OSS: Family = Family {
    gguf: Some(GgufRead { tensor_names: GGUF_NAMES, ..GgufRead::plain("gpt_oss", gguf_keys) }),
    folder_tensors: Some(folder_tensors),
    ..Family::new(&["gpt_oss"], "gpt-oss", rule)
};

/// `attn_sinks.weight` is the whole tensor `self_attn.sinks` (HF's parameter has no `.weight`).
const GGUF_NAMES: &[(&str, &str)] = &[("attn_sinks.weight", "self_attn.sinks")];

fn rule(cfg: Cfg, model_type: &str, _: Container) -> Result<ModelSpec> {
    if cfg.get("rope_parameters").is_none() && cfg.get("rope_scaling").is_none() {
        return Err(cfg.refuse("rope_parameters", "is absent (the config class's implicit yarn is not implemented); state it"));
    }
    let alpha = cfg.opt_f64("swiglu_alpha")?.unwrap_or(1.702) as f32;
    let limit = cfg.opt_f64("swiglu_limit")?.unwrap_or(7.0) as f32;
    if !(limit > 0.0 && limit.is_finite()) {
        return Err(cfg.invalid("swiglu_limit", "must be a positive number"));
    }
    if !alpha.is_finite() {
        return Err(cfg.invalid("swiglu_alpha", "must be a number"));
    }
    let b = Base {
        model_type,
        head_dim_default: Some(64),
        tie_default: false,
        sliding: SlidingRule::Pattern { key: None, default: 2 },
        activation: Activation::ClampedSwiglu { alpha, limit },
        legacy_rope: (LegacyRope { default_theta: 150000.0, ..LegacyRope::STANDARD }, LegacyRope { default_theta: 150000.0, ..LegacyRope::STANDARD }),
    };
    let mut spec = base(cfg, b)?;
    let bias = cfg.opt_bool("attention_bias")?.unwrap_or(true);
    for l in &mut spec.layers {
        l.qkv_bias = bias;
        l.o_bias = bias;
        l.attn_sinks = true;
    }
    experts(cfg, &mut spec, &MoeKeys { width: "intermediate_size", norm_topk_prob_default: None, sparse_layers: false, top_k_first: true, biases: true, shared_width: None })?;
    if spec.layers.iter().any(|l| l.moe.is_none()) {
        return Err(cfg.invalid("num_local_experts", "must be positive (every gpt-oss layer is a mixture)"));
    }
    Ok(spec)
}

fn gguf_keys(k: &ArchKeys, c: &mut Map<String, Value>) -> Result<()> {
    c.insert("hidden_act".into(), json!("silu"));
    c.insert("attention_bias".into(), json!(true));
    if let Some(w) = k.u64("expert_feed_forward_length")? {
        c.insert("intermediate_size".into(), json!(w));
    }
    match c.get_mut("rope_scaling") {
        Some(s) => s["truncate"] = json!(false),
        None => {
            c.insert("rope_parameters".into(), json!({"rope_type": "default", "rope_theta": c["rope_theta"].clone()}));
        }
    }
    Ok(())
}

/// An HF folder's fused experts under the common stacked names, and `mlp.router` as `mlp.gate`:
/// `gate_up_proj` (E, hidden, 2W) -> `gate_proj.weight` / `up_proj.weight` (E, W, hidden), the
/// even and odd columns transposed; `down_proj` (E, W, hidden) -> `down_proj.weight` (E,
/// hidden, W); the biases split the same way. The bytes are copied (in their own type).
fn folder_tensors(tensors: BTreeMap<String, WeightTensor>) -> Result<BTreeMap<String, WeightTensor>> {
    let mut out = BTreeMap::new();
    for (name, t) in tensors {
        let Some((head, part)) = name.split_once(".mlp.") else {
            out.insert(name, t);
            continue;
        };
        let mut put = |part: &str, mut t: WeightTensor| {
            t.name = format!("{head}.mlp.{part}");
            out.insert(t.name.clone(), t);
        };
        match part {
            "router.weight" => put("gate.weight", t),
            "router.bias" => put("gate.bias", t),
            // MXFP4 (the `_blocks` / `_scales` pairs, safetensors_files.rs) is stored the other
            // way round, (E, 2W, hidden) and (E, hidden, W): gate and up are the even and odd rows.
            "experts.gate_up_proj" if t.ty == WeightType::MXFP4 => {
                put("experts.gate_proj.weight", strided_rows(&t, 2, 0)?);
                put("experts.up_proj.weight", strided_rows(&t, 2, 1)?);
            }
            "experts.down_proj" if t.ty == WeightType::MXFP4 => put("experts.down_proj.weight", t),
            "experts.gate_up_proj" => {
                put("experts.gate_proj.weight", transposed_columns(&t, 2, 0)?);
                put("experts.up_proj.weight", transposed_columns(&t, 2, 1)?);
            }
            "experts.down_proj" => put("experts.down_proj.weight", transposed_columns(&t, 1, 0)?),
            "experts.gate_up_proj_bias" => {
                put("experts.gate_proj.bias", strided_columns(&t, 2, 0)?);
                put("experts.up_proj.bias", strided_columns(&t, 2, 1)?);
            }
            "experts.down_proj_bias" => put("experts.down_proj.bias", t),
            _ => put(part, t),
        }
    }
    Ok(out)
}

/// The bytes of one element of a plain (unquantized) tensor, or a refusal naming it.
fn element_bytes(t: &WeightTensor) -> Result<usize> {
    match t.ty {
        WeightType::F32 => Ok(4),
        WeightType::F16 | WeightType::BF16 => Ok(2),
        other => Err(Error::tensor(format!("tensor {}: fused experts of type {} are not implemented", t.name, other.name()))),
    }
}

/// `t` (n, r, c) -> (n, c / step, r): out[e][j][i] = t[e][i][j * step + offset].
fn transposed_columns(t: &WeightTensor, step: usize, offset: usize) -> Result<WeightTensor> {
    let [n, r, c] = t.shape[..] else {
        return Err(Error::tensor(format!("tensor {}: shape {:?} is not (experts, rows, columns)", t.name, t.shape)));
    };
    if c % step != 0 {
        return Err(Error::tensor(format!("tensor {}: {c} columns do not split in {step}", t.name)));
    }
    let (es, w) = (element_bytes(t)?, c / step);
    let src = t.bytes();
    let mut dst = vec![0u8; n * w * r * es];
    for e in 0..n {
        for j in 0..w {
            for i in 0..r {
                let from = ((e * r + i) * c + j * step + offset) * es;
                let to = ((e * w + j) * r + i) * es;
                dst[to..to + es].copy_from_slice(&src[from..from + es]);
            }
        }
    }
    WeightTensor::new(t.name.clone(), t.ty, vec![n, w, r], TensorBytes::Owned(Arc::new(dst)))
}

/// `t` (n, r, c), of any type -> (n, r / step, c): row j of matrix e is its row j * step + offset.
fn strided_rows(t: &WeightTensor, step: usize, offset: usize) -> Result<WeightTensor> {
    let [n, r, c] = t.shape[..] else {
        return Err(Error::tensor(format!("tensor {}: shape {:?} is not (experts, rows, columns)", t.name, t.shape)));
    };
    if r % step != 0 {
        return Err(Error::tensor(format!("tensor {}: {r} rows do not split in {step}", t.name)));
    }
    let rb = t.row_bytes();
    let dst: Vec<u8> = (0..n * r).filter(|i| i % r % step == offset).flat_map(|i| t.row(i).iter().copied()).collect();
    debug_assert_eq!(dst.len(), n * (r / step) * rb);
    WeightTensor::new(t.name.clone(), t.ty, vec![n, r / step, c], TensorBytes::Owned(Arc::new(dst)))
}

/// `t` (n, c) -> (n, c / step): out[e][j] = t[e][j * step + offset].
fn strided_columns(t: &WeightTensor, step: usize, offset: usize) -> Result<WeightTensor> {
    let [n, c] = t.shape[..] else {
        return Err(Error::tensor(format!("tensor {}: shape {:?} is not (experts, columns)", t.name, t.shape)));
    };
    if c % step != 0 {
        return Err(Error::tensor(format!("tensor {}: {c} columns do not split in {step}", t.name)));
    }
    let es = element_bytes(t)?;
    let dst: Vec<u8> = t.bytes().chunks_exact(es).enumerate().filter(|(i, _)| i % c % step == offset).flat_map(|(_, e)| e.iter().copied()).collect();
    WeightTensor::new(t.name.clone(), t.ty, vec![n, c / step], TensorBytes::Owned(Arc::new(dst)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::{AttentionKind, Routing};
    use crate::Status;

    fn spec(extra: serde_json::Value) -> Result<ModelSpec> {
        let mut v = json!({
            "model_type": "gpt_oss", "hidden_size": 64, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 10,
            "intermediate_size": 32, "num_local_experts": 8, "num_experts_per_tok": 2,
            "rms_norm_eps": 1e-5, "max_position_embeddings": 128, "sliding_window": 4,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
                                "beta_slow": 1.0, "truncate": false, "original_max_position_embeddings": 32}
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        crate::semantics::build_spec(Cfg::new(&v, "config.json"), Container::Folder)
    }

    /// GptOssConfig's defaults: even layers slide, every layer has biases, sinks and a mixture
    /// routed top-k first, and the clamped SwiGLU at 1.702 / 7.
    #[test]
    fn the_config_class_defaults() {
        let s = spec(json!({})).unwrap();
        let kinds: Vec<_> = s.layers.iter().map(|l| l.attention).collect();
        let sliding = AttentionKind::Sliding { window: 4 };
        assert_eq!(kinds, vec![sliding, AttentionKind::Full, sliding, AttentionKind::Full]);
        for l in &s.layers {
            assert!(l.qkv_bias && l.o_bias && l.attn_sinks);
            let m = l.moe.unwrap();
            assert_eq!((m.n_experts, m.top_k, m.width, m.routing, m.biases), (8, 2, 32, Routing::TopKSoftmax, true));
            assert_eq!(l.activation, Activation::ClampedSwiglu { alpha: 1.702, limit: 7.0 });
        }
        let s = spec(json!({"swiglu_limit": 3.5, "attention_bias": false})).unwrap();
        assert!(!s.layers[0].qkv_bias && s.layers[0].attn_sinks);
        assert_eq!(s.layers[0].activation, Activation::ClampedSwiglu { alpha: 1.702, limit: 3.5 });
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        for (extra, key) in [
            (json!({"swiglu_limit": 0.0}), "swiglu_limit"),
            (json!({"num_local_experts": 0}), "num_local_experts"),
            (json!({"rope_parameters": null}), "rope_parameters"),
        ] {
            let e = spec(extra.clone()).unwrap_err();
            assert!(matches!(e.status, Status::ErrFormat | Status::ErrUnsupported), "{extra}: {e}");
            assert!(e.message.contains(key), "{extra}: {e}");
        }
    }

    /// The fused experts of a folder, worked on a 1-expert, 2 x 4 example: gate = the even
    /// columns transposed, up = the odd ones; down transposed; biases split.
    #[test]
    fn fused_experts_split_and_transpose() {
        let f32s = |name: &str, shape: Vec<usize>, v: &[f32]| {
            let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            WeightTensor::new(name.into(), WeightType::F32, shape, TensorBytes::Owned(Arc::new(bytes))).unwrap()
        };
        let p = "model.layers.0.mlp.";
        let mut t = BTreeMap::new();
        // gate_up (1, hidden 2, 2W 4): row i = [g0 u0 g1 u1] of input i.
        t.insert(format!("{p}experts.gate_up_proj"), f32s("a", vec![1, 2, 4], &[1., 2., 3., 4., 5., 6., 7., 8.]));
        t.insert(format!("{p}experts.gate_up_proj_bias"), f32s("b", vec![1, 4], &[10., 20., 30., 40.]));
        t.insert(format!("{p}experts.down_proj"), f32s("c", vec![1, 2, 2], &[1., 2., 3., 4.]));
        t.insert(format!("{p}router.weight"), f32s("d", vec![1, 2], &[0., 0.]));
        let out = folder_tensors(t).unwrap();
        let get = |n: &str| out[&format!("{p}{n}")].to_f32();
        assert_eq!(get("experts.gate_proj.weight"), vec![1., 5., 3., 7.]);
        assert_eq!(get("experts.up_proj.weight"), vec![2., 6., 4., 8.]);
        assert_eq!(out[&format!("{p}experts.gate_proj.weight")].shape, vec![1, 2, 2]);
        assert_eq!(get("experts.down_proj.weight"), vec![1., 3., 2., 4.]);
        assert_eq!(get("experts.gate_proj.bias"), vec![10., 30.]);
        assert_eq!(get("experts.up_proj.bias"), vec![20., 40.]);
        assert!(out.contains_key(&format!("{p}gate.weight")));
    }
}
