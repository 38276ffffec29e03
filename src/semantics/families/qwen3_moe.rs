//! Qwen3-MoE (transformers `models/qwen3_moe`): Qwen3's attention (q_norm / k_norm, head_dim
//! 128 by default) with a mixture of experts in place of the MLP on the sparse layers
//! (Qwen3MoeDecoderLayer: layer i is sparse unless it is in `mlp_only_layers`, when
//! `num_experts` > 0 and (i + 1) % `decoder_sparse_step` == 0; the others keep a dense MLP of
//! `intermediate_size`). The router (Qwen3MoeTopKRouter) takes the softmax over all experts,
//! the top `num_experts_per_tok`, and divides them by their sum when `norm_topk_prob`.
//!
//! GGUF: llama.cpp's "qwen3moe" files. Their experts are stacked (`ffn_*_exps`), and llama.cpp
//! always renormalizes the top-k weights (its qwen3moe graph passes norm_w = true), so a file
//! reads as `norm_topk_prob` = true; `expert_feed_forward_length` is the experts' width.

use serde_json::{json, Map, Value};

use crate::error::Result;
use crate::semantics::families::common::{experts, llama_like, silu_gguf_keys, LlamaLike, MoeKeys, SlidingRule};
use crate::semantics::families::{Family, GgufRead};
use crate::pack::gguf_pack::ArchKeys;
use crate::semantics::config::Cfg;
use crate::semantics::{Container, ModelSpec};

pub(super) static QWEN3_MOE: Family = Family { gguf: Some(GgufRead::plain("qwen3_moe", gguf_keys)), ..Family::new(&["qwen3_moe"], "qwen3moe", rule) };

fn rule(cfg: Cfg, model_type: &str, _: Container) -> Result<ModelSpec> {
    let family = LlamaLike {
        biases: |b| (b, b),
        qk_norm: true,
        head_dim_default: Some(128),
        sliding: SlidingRule::FromMaxWindowLayers,
        refuse_mlp_bias: true,
    };
    let mut spec = llama_like(cfg, model_type, &family)?;
    experts(cfg, &mut spec, &MoeKeys { width: "moe_intermediate_size", norm_topk_prob_default: Some(false), sparse_layers: true, top_k_first: false, biases: false, shared_width: None })?;
    Ok(spec)
}

fn gguf_keys(k: &ArchKeys, c: &mut Map<String, Value>) -> Result<()> {
    silu_gguf_keys(k, c)?;
    c.insert("norm_topk_prob".into(), json!(true));
    if let Some(w) = k.u64("expert_feed_forward_length")? {
        c.insert("moe_intermediate_size".into(), json!(w));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::semantics::config::Cfg;
    use crate::semantics::{Container, ModelSpec, Routing};
    use crate::Status;

    fn spec(extra: serde_json::Value) -> crate::Result<ModelSpec> {
        let mut v = json!({
            "model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 10,
            "intermediate_size": 96, "moe_intermediate_size": 32, "num_local_experts": 8,
            "num_experts_per_tok": 2, "rms_norm_eps": 1e-6, "max_position_embeddings": 128
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        crate::semantics::build_spec(Cfg::new(&v, "config.json"), Container::Folder)
    }

    fn sparse(s: &ModelSpec) -> Vec<usize> {
        (0..s.layers.len()).filter(|&i| s.layers[i].moe.is_some()).collect()
    }

    /// Qwen3MoeDecoderLayer's rule worked by hand: step 2 makes layers 1 and 3 sparse; layer 3
    /// in mlp_only_layers leaves only 1; the older `num_experts` spelling reads the same.
    #[test]
    fn sparse_layers_follow_the_step_and_the_dense_list() {
        assert_eq!(sparse(&spec(json!({})).unwrap()), vec![0, 1, 2, 3]);
        assert_eq!(sparse(&spec(json!({"decoder_sparse_step": 2})).unwrap()), vec![1, 3]);
        assert_eq!(sparse(&spec(json!({"decoder_sparse_step": 2, "mlp_only_layers": [3]})).unwrap()), vec![1]);
        let s = spec(json!({"num_local_experts": null, "num_experts": 8, "norm_topk_prob": true})).unwrap();
        let m = s.layers[0].moe.unwrap();
        assert_eq!((m.n_experts, m.top_k, m.width, m.routing), (8, 2, 32, Routing::SoftmaxTopK { renormalize: true }));
        // Qwen3MoeConfig's default: the top-k weights are not renormalized.
        assert_eq!(spec(json!({})).unwrap().layers[0].moe.unwrap().routing, Routing::SoftmaxTopK { renormalize: false });
        assert!(sparse(&spec(json!({"num_local_experts": 0})).unwrap()).is_empty());
    }

    #[test]
    fn bad_mixture_keys_are_refused_by_name() {
        for (extra, key, status) in [
            (json!({"num_experts_per_tok": 9}), "num_experts_per_tok", Status::ErrFormat),
            (json!({"num_experts_per_tok": 0}), "num_experts_per_tok", Status::ErrFormat),
            (json!({"num_experts_per_tok": 65, "num_local_experts": 100}), "num_experts_per_tok", Status::ErrLimitExceeded),
            (json!({"num_local_experts": 5000}), "num_local_experts", Status::ErrLimitExceeded),
            (json!({"num_experts": 4}), "num_experts", Status::ErrFormat),
            (json!({"decoder_sparse_step": 0}), "decoder_sparse_step", Status::ErrFormat),
            (json!({"mlp_only_layers": [4]}), "mlp_only_layers", Status::ErrFormat),
            (json!({"mlp_only_layers": "1"}), "mlp_only_layers", Status::ErrFormat),
            (json!({"moe_intermediate_size": 0}), "moe_intermediate_size", Status::ErrFormat),
        ] {
            let e = spec(extra.clone()).unwrap_err();
            assert_eq!(e.status, status, "{extra}: {e}");
            assert!(e.message.contains(key), "{extra}: {e}");
        }
    }
}
