//! Qwen2-MoE (transformers `models/qwen2_moe`): Qwen2's attention (q/k/v biases by `qkv_bias`,
//! default true; no o bias) with, on the sparse layers (the Qwen3-MoE rule: not in
//! `mlp_only_layers`, (i + 1) % `decoder_sparse_step` == 0), a mixture routed as Qwen3-MoE's
//! (softmax, top k, divided by their sum when `norm_topk_prob`, default false) plus a shared
//! expert of `shared_expert_intermediate_size` on every row, scaled by the sigmoid of
//! `shared_expert_gate` (Qwen2MoeSparseMoeBlock). Sliding layers are read from `layer_types`;
//! HF's rule without it (odd layers below `max_window_layers` when `use_sliding_window`) is
//! refused.
//!
//! GGUF: llama.cpp's "qwen2moe" files: stacked experts, the shared expert's `*_shexp` tensors,
//! `expert_feed_forward_length` and `expert_shared_feed_forward_length`; llama.cpp does not
//! renormalize (its qwen2moe graph passes norm_w = false), as the config class's default.

use serde_json::{json, Map, Value};

use crate::error::Result;
use crate::pack::gguf_pack::ArchKeys;
use crate::semantics::config::Cfg;
use crate::semantics::families::common::{experts, llama_like, silu_gguf_keys, LlamaLike, MoeKeys, SlidingRule};
use crate::semantics::families::{Family, GgufRead};
use crate::semantics::{Container, ModelSpec};

pub(super) static QWEN2_MOE: Family = Family { gguf: Some(GgufRead::plain("qwen2_moe", gguf_keys)), ..Family::new(&["qwen2_moe"], "qwen2moe", rule) };

fn rule(cfg: Cfg, model_type: &str, _: Container) -> Result<ModelSpec> {
    if cfg.opt_bool("use_sliding_window")?.unwrap_or(false) && cfg.get("layer_types").is_none() {
        return Err(cfg.refuse("use_sliding_window", "without layer_types is not implemented for this family"));
    }
    let family = LlamaLike { biases: |_| (false, false), qk_norm: false, head_dim_default: None, sliding: SlidingRule::None, refuse_mlp_bias: false };
    let mut spec = llama_like(cfg, model_type, &family)?;
    let qkv_bias = cfg.opt_bool("qkv_bias")?.unwrap_or(true);
    spec.layers.iter_mut().for_each(|l| l.qkv_bias = qkv_bias);
    let keys = MoeKeys {
        width: "moe_intermediate_size",
        norm_topk_prob_default: Some(false),
        sparse_layers: true,
        top_k_first: false,
        biases: false,
        shared_width: Some("shared_expert_intermediate_size"),
    };
    experts(cfg, &mut spec, &keys)?;
    Ok(spec)
}

fn gguf_keys(k: &ArchKeys, c: &mut Map<String, Value>) -> Result<()> {
    silu_gguf_keys(k, c)?;
    c.insert("norm_topk_prob".into(), json!(false));
    for (key, hf) in [("expert_feed_forward_length", "moe_intermediate_size"), ("expert_shared_feed_forward_length", "shared_expert_intermediate_size")] {
        if let Some(w) = k.u64(key)? {
            c.insert(hf.into(), json!(w));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::semantics::config::Cfg;
    use crate::semantics::{Container, Routing};

    /// Qwen2MoeConfig's defaults: q/k/v biases, raw softmax weights, a shared expert of its
    /// width on every sparse layer; `mlp_only_layers` leaves a dense layer with none.
    #[test]
    fn the_shared_expert_and_the_defaults() {
        let v = json!({
            "model_type": "qwen2_moe", "hidden_size": 64, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 10,
            "intermediate_size": 96, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
            "num_experts": 8, "num_experts_per_tok": 2, "rms_norm_eps": 1e-6, "max_position_embeddings": 128,
            "mlp_only_layers": [1]
        });
        let s = crate::semantics::build_spec(Cfg::new(&v, "config.json"), Container::Folder).unwrap();
        assert!(s.layers.iter().all(|l| l.qkv_bias && !l.o_bias));
        let m = s.layers[0].moe.unwrap();
        assert_eq!((m.width, m.shared_width, m.routing), (32, Some(48), Routing::SoftmaxTopK { renormalize: false }));
        assert!(s.layers[1].moe.is_none() && s.layers[2].moe.is_some());
        let mut v = v;
        v["use_sliding_window"] = json!(true);
        let e = crate::semantics::build_spec(Cfg::new(&v, "config.json"), Container::Folder).unwrap_err();
        assert!(e.message.contains("use_sliding_window"), "{e}");
    }
}
