//! Sizes stated by a config (or GGUF metadata) checked against the tensors the pack actually
//! holds, before the per-layer table is built from them: the layer count must be the number of
//! layers whose tensors exist, and no width or count may exceed every tensor dimension (a
//! width that no tensor has cannot be right). The exact shape of every tensor is checked again
//! when the weights are resolved against the table.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::error::{Error, Result};
use crate::pack::tensor::WeightTensor;

/// Keys that size a tensor dimension (or a factor of one).
const WIDTH_KEYS: [&str; 10] = [
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "global_head_dim",
    "num_global_key_value_heads",
    "hidden_size_per_layer_input",
    "vocab_size_per_layer_input",
];

/// The layer indices N of tensors named `model.layers.N.*`.
fn layer_indices(tensors: &BTreeMap<String, WeightTensor>) -> BTreeSet<u64> {
    tensors
        .keys()
        .filter_map(|name| name.strip_prefix("model.layers.")?.split('.').next()?.parse::<u64>().ok())
        .collect()
}

/// Checks the config's counts and widths against `tensors`. `source` names the config in
/// messages; `layer_key` is the key the layer count came from (`llama.block_count` in a GGUF).
pub fn check_against_tensors(
    config: &Value,
    source: &str,
    layer_key: &str,
    tensors: &BTreeMap<String, WeightTensor>,
) -> Result<()> {
    let mismatch = |key: &str, v: &Value, why: String| Error::tensor(format!("{source}: {key} = {v}: {why}"));
    if let Some(v) = config.get("num_hidden_layers").filter(|v| !v.is_null()) {
        let layers = layer_indices(tensors);
        let n = layers.len() as u64;
        // Layers 0..n-1, each with tensors: the only count the weights can serve.
        let contiguous = layers.iter().next_back().is_none_or(|&last| last + 1 == n);
        if v.as_u64() != Some(n) || !contiguous {
            let held = match (layers.first(), layers.last()) {
                (Some(a), Some(b)) => format!("the tensors hold {n} layers ({a}..={b})"),
                _ => "the tensors hold no model.layers.N tensors".to_string(),
            };
            return Err(mismatch(layer_key, v, held));
        }
    }
    let largest = tensors.values().flat_map(|t| t.shape.iter().copied()).max().unwrap_or(0) as u64;
    for key in WIDTH_KEYS {
        if let Some(v) = config.get(key) {
            if let Some(x) = v.as_u64() {
                if x > largest {
                    return Err(mismatch(
                        key,
                        v,
                        format!("larger than every tensor dimension (the largest is {largest})"),
                    ));
                }
            }
        }
    }
    // q_proj has n_heads x head_dim rows: the product too must fit a tensor.
    let get = |k: &str| config.get(k).and_then(Value::as_u64);
    if let (Some(h), Some(d)) = (get("num_attention_heads"), get("head_dim")) {
        if h.checked_mul(d).is_none_or(|p| p > largest) {
            return Err(mismatch(
                "num_attention_heads x head_dim",
                &Value::from(format!("{h} x {d}")),
                format!("larger than every tensor dimension (the largest is {largest})"),
            ));
        }
    }
    Ok(())
}
