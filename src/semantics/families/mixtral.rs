//! Mixtral (transformers `models/mixtral`): Mistral's layer (no biases; `sliding_window`, when
//! set, on every layer) with a mixture of `num_local_experts` experts of `intermediate_size` in
//! place of the MLP on every layer. The router (MixtralTopKRouter) takes the softmax over all
//! experts and the top `num_experts_per_tok`, always divided by their sum.
//!
//! Checkpoints name the mixture `block_sparse_moe` with experts `w1` (gate), `w3` (up) and `w2`
//! (down), renamed here to the common names. llama.cpp's converter writes Mixtral as a "llama"
//! GGUF with `expert_count` and stacked experts; the Llama family reads those files as this
//! family (llama.rs).

use crate::error::Result;
use crate::semantics::families::common::{experts, llama_like, LlamaLike, MoeKeys, SlidingRule};
use crate::semantics::families::Family;
use crate::semantics::config::Cfg;
use crate::semantics::{Container, ModelSpec};

pub(super) static MIXTRAL: Family = Family { folder_tensor_name: Some(tensor_name), ..Family::new(&["mixtral"], "mixtral", rule) };

fn rule(cfg: Cfg, model_type: &str, _: Container) -> Result<ModelSpec> {
    let family = LlamaLike {
        biases: |_| (false, false),
        qk_norm: false,
        head_dim_default: None,
        sliding: SlidingRule::AllWhenWindowSet,
        refuse_mlp_bias: true,
    };
    let mut spec = llama_like(cfg, model_type, &family)?;
    experts(cfg, &mut spec, &MoeKeys { width: "intermediate_size", norm_topk_prob_default: None, sparse_layers: false, top_k_first: false, biases: false, shared_width: None })?;
    Ok(spec)
}

/// `model.layers.N.block_sparse_moe.gate` -> `...mlp.gate`; `block_sparse_moe.experts.E.w1` /
/// `w3` / `w2` -> `mlp.experts.E.gate_proj` / `up_proj` / `down_proj`.
fn tensor_name(name: &str) -> Option<String> {
    let (head, rest) = name.split_once(".block_sparse_moe.")?;
    let rest = match rest.strip_prefix("experts.") {
        Some(expert) => {
            let mut parts = expert.splitn(3, '.');
            let (e, w, suffix) = (parts.next()?, parts.next()?, parts.next()?);
            let proj = match w {
                "w1" => "gate_proj",
                "w3" => "up_proj",
                "w2" => "down_proj",
                _ => return None,
            };
            format!("experts.{e}.{proj}.{suffix}")
        }
        None => rest.to_string(),
    };
    Some(format!("{head}.mlp.{rest}"))
}

#[cfg(test)]
mod tests {
    use super::tensor_name;

    #[test]
    fn checkpoint_names_map_to_the_common_ones() {
        let t = |n: &str| tensor_name(n);
        assert_eq!(t("model.layers.3.block_sparse_moe.gate.weight").as_deref(), Some("model.layers.3.mlp.gate.weight"));
        assert_eq!(t("model.layers.3.block_sparse_moe.experts.7.w1.weight").as_deref(), Some("model.layers.3.mlp.experts.7.gate_proj.weight"));
        assert_eq!(t("model.layers.3.block_sparse_moe.experts.7.w3.weight").as_deref(), Some("model.layers.3.mlp.experts.7.up_proj.weight"));
        assert_eq!(t("model.layers.3.block_sparse_moe.experts.7.w2.weight").as_deref(), Some("model.layers.3.mlp.experts.7.down_proj.weight"));
        assert_eq!(t("model.layers.3.self_attn.q_proj.weight"), None);
    }
}
