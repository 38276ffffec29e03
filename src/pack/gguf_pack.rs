//! A GGUF file as a pack: its metadata turned into the HF config.json spelling (so that one set
//! of family rules serves both containers), its tensors renamed to HF names, and permuted Q/K
//! rows put back into HF order. What differs by architecture comes from the family descriptors
//! (src/semantics/families/). Key names follow llama.cpp's gguf-py constants; the inverse
//! mapping is transformers' integrations/ggml.py (GGUF_CONFIG_MAPPING, GGUF_TENSOR_MAPPING).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::semantics::families::{self, GgufRead};
use crate::pack::gguf::{GgufFile, GgufValue};
use crate::pack::tensor::{TensorBytes, WeightTensor};
use crate::quant::WeightType;

/// The `<arch>.*` metadata keys of a GGUF file, read with the checks every family's keys get.
pub(crate) struct ArchKeys<'a> {
    g: &'a GgufFile,
    arch: &'a str,
}

impl ArchKeys<'_> {
    /// The full key name, `<arch>.<k>`.
    pub fn name(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    /// A float key, finite when present (JSON has no NaN: it would turn into null, i.e. absent,
    /// and a default would be silently guessed).
    pub fn float(&self, k: &str) -> Result<Option<f64>> {
        match self.g.get_f64(&self.name(k))? {
            Some(x) if !x.is_finite() => Err(Error::format(format!("GGUF: {} = {x} is not finite", self.name(k)))),
            other => Ok(other),
        }
    }

    pub fn u64(&self, k: &str) -> Result<Option<u64>> {
        self.g.get_u64(&self.name(k))
    }

    fn need(&self, k: &str) -> Result<u64> {
        self.u64(k)?.ok_or_else(|| Error::format(format!("GGUF: missing {}", self.name(k))))
    }

    /// A key llama.cpp reads per layer (`get_key_or_arr`): one value for each of `n` layers,
    /// from a scalar or an array of `n` integers. A scalar is repeated `n` times: the caller
    /// has bounded `n` (by an array of the file that holds one entry per layer).
    pub fn per_layer(&self, k: &str, n: usize) -> Result<Option<Vec<u64>>> {
        let name = self.name(k);
        if self.g.get(&name).is_some_and(|v| v.as_array().is_none()) {
            return Ok(self.u64(k)?.map(|x| vec![x; n]));
        }
        let Some(a) = self.g.get_int_array(&name)? else { return Ok(None) };
        if a.len() != n || a.iter().any(|&x| x < 0) {
            return Err(Error::format(format!("GGUF: {name} must hold {n} non-negative values (one per layer), not {a:?}")));
        }
        Ok(Some(a.into_iter().map(|x| x as u64).collect()))
    }

    /// A per-layer key whose layers all agree, as one value; None when absent or when the
    /// layers differ (the family's hook reads those with `per_layer`).
    fn uniform(&self, k: &str, n: usize) -> Result<Option<u64>> {
        if self.g.get(&self.name(k)).is_some_and(|v| v.as_array().is_none()) {
            return self.u64(k);
        }
        Ok(self.per_layer(k, n)?.filter(|v| v.windows(2).all(|w| w[0] == w[1])).and_then(|v| v.first().copied()))
    }

    /// An array of bools (llama.cpp's `sliding_window_pattern`).
    pub fn bools(&self, k: &str) -> Result<Option<Vec<bool>>> {
        let Some(a) = self.g.get_array(&self.name(k))? else { return Ok(None) };
        let each = a.iter().map(|v| match v {
            GgufValue::Bool(b) => Some(*b),
            _ => None,
        });
        each.collect::<Option<Vec<_>>>()
            .map(Some)
            .ok_or_else(|| Error::format(format!("GGUF: {} must be an array of bools", self.name(k))))
    }

    /// Whether the file holds a tensor of this (GGUF) name.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.g.tensor(name).is_some()
    }

    /// The values of a float32 tensor the config is read from (one of the family's
    /// `config_tensors`), or None when the file has no such tensor.
    pub fn f32_tensor(&self, name: &str) -> Result<Option<Vec<f32>>> {
        let Some(t) = self.g.tensor(name) else { return Ok(None) };
        if t.ty != WeightType::F32 {
            return Err(Error::unsupported(format!("GGUF: tensor {name} is {}, expected F32", t.ty.name())));
        }
        Ok(Some(self.g.tensor_data(t).chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()))
    }
}

/// Per-layer keys with a generic HF spelling: the layers must agree unless the family's hook
/// writes the HF key itself.
const PER_LAYER_KEYS: &[(&str, &str)] = &[("feed_forward_length", "intermediate_size"), ("attention.head_count_kv", "num_key_value_heads")];

/// How a GGUF of `general.architecture` `arch` is read (its family's descriptor).
fn family_read(arch: &str) -> Result<&'static GgufRead> {
    families::gguf_read(arch).ok_or_else(|| {
        Error::unsupported(format!("general.architecture \"{arch}\" is not implemented ({} are)", families::gguf_archs()))
    })
}

/// Builds the HF-style config.json value from the GGUF metadata.
pub fn config_from_gguf(g: &GgufFile, vocab_size: usize) -> Result<Value> {
    let arch = g.architecture()?;
    let family = family_read(arch)?;
    let keys = ArchKeys { g, arch };
    let n_heads = keys.need("attention.head_count")?;
    let hidden = keys.need("embedding_length")?;
    let n_layers = keys.need("block_count")?;
    let mut c = Map::new();
    c.insert("model_type".into(), json!(family.model_type));
    c.insert("hidden_size".into(), json!(hidden));
    c.insert("num_hidden_layers".into(), json!(n_layers));
    let n = usize::try_from(n_layers).map_err(|_| Error::format(format!("GGUF: {} too large", keys.name("block_count"))))?;
    if g.get(&keys.name("feed_forward_length")).is_none() {
        return Err(Error::format(format!("GGUF: missing {}", keys.name("feed_forward_length"))));
    }
    if let Some(ff) = keys.uniform("feed_forward_length", n)? {
        c.insert("intermediate_size".into(), json!(ff));
    }
    c.insert("num_attention_heads".into(), json!(n_heads));
    if g.get(&keys.name("attention.head_count_kv")).is_none() {
        c.insert("num_key_value_heads".into(), json!(n_heads));
    } else if let Some(kv) = keys.uniform("attention.head_count_kv", n)? {
        c.insert("num_key_value_heads".into(), json!(kv));
    }
    c.insert("max_position_embeddings".into(), json!(keys.need("context_length")?));
    let eps = keys
        .float("attention.layer_norm_rms_epsilon")?
        .ok_or_else(|| Error::format(format!("GGUF: missing {}", keys.name("attention.layer_norm_rms_epsilon"))))?;
    c.insert("rms_norm_eps".into(), json!(eps));
    let head_dim = keys.u64("attention.key_length")?.unwrap_or(hidden / n_heads.max(1));
    c.insert("head_dim".into(), json!(head_dim));
    let theta = keys.float("rope.freq_base")?.unwrap_or(10000.0);
    if theta <= 0.0 {
        return Err(Error::format(format!("GGUF: {} = {theta}: must be greater than 0", keys.name("rope.freq_base"))));
    }
    c.insert("rope_theta".into(), json!(theta));
    if let Some(rot) = keys.u64("rope.dimension_count")? {
        if rot != head_dim {
            c.insert("partial_rotary_factor".into(), json!(rot as f64 / head_dim as f64));
        }
    }
    match g.get_str(&keys.name("rope.scaling.type"))? {
        None | Some("none") => {}
        Some(kind @ ("linear" | "yarn")) => {
            let factor = keys.float("rope.scaling.factor")?.ok_or_else(|| {
                Error::format(format!("GGUF: {} without a factor", keys.name("rope.scaling.type")))
            })?;
            let mut s = json!({ "rope_type": kind, "factor": factor });
            if let Some(o) = keys.u64("rope.scaling.original_context_length")? {
                s["original_max_position_embeddings"] = json!(o);
            }
            // Yarn's correction range (llama.cpp's LLM_KV_ROPE_SCALING_YARN_BETA_FAST / _SLOW);
            // absent, HF's defaults (32, 1) hold.
            for (k, hf) in [("rope.scaling.yarn_beta_fast", "beta_fast"), ("rope.scaling.yarn_beta_slow", "beta_slow")] {
                if let Some(b) = keys.float(k)? {
                    s[hf] = json!(b);
                }
            }
            c.insert("rope_scaling".into(), s);
        }
        Some(other) => {
            return Err(Error::unsupported(format!(
                "GGUF: {} = \"{other}\" is not implemented",
                keys.name("rope.scaling.type")
            )))
        }
    }
    if g.tensors.iter().any(|t| t.name == "rope_freqs.weight") && !family.config_tensors.contains(&"rope_freqs.weight") {
        return Err(Error::unsupported(
            "GGUF: tensor rope_freqs.weight (per-frequency rope factors) is not implemented",
        ));
    }
    // llama.cpp's `<arch>.attention.causal` = false: an encoder (HF's use_bidirectional_attention).
    if g.get_bool(&keys.name("attention.causal"))? == Some(false) {
        c.insert("use_bidirectional_attention".into(), json!(true));
    }
    if let Some(w) = keys.u64("attention.sliding_window")? {
        c.insert("sliding_window".into(), json!(w));
    }
    // A mixture (llama.cpp's LLM_KV_EXPERT_COUNT / _USED_COUNT, the same keys in every
    // architecture); the experts' width is the family's (its descriptor's config hook).
    if let Some(n) = keys.u64("expert_count")? {
        c.insert("num_local_experts".into(), json!(n));
        if let Some(k) = keys.u64("expert_used_count")? {
            c.insert("num_experts_per_tok".into(), json!(k));
        }
    }
    c.insert("vocab_size".into(), json!(vocab_size));
    let tied = !g.tensors.iter().any(|t| t.name == "output.weight");
    c.insert("tie_word_embeddings".into(), json!(tied));
    // What the family's config needs beyond these (its activation, softcaps, config-class
    // defaults a GGUF does not carry).
    (family.config)(&keys, &mut c)?;
    for (k, hf) in PER_LAYER_KEYS {
        if !c.contains_key(*hf) {
            return Err(Error::unsupported(format!("GGUF: {} differs by layer, which \"{arch}\" files do not implement", keys.name(k))));
        }
    }
    Ok(Value::Object(c))
}

/// GGUF tensor stems (`blk.N.<stem>.weight`) -> HF names (`model.layers.N.<name>.weight`) that
/// hold for every family unless its descriptor names the stem (gguf-py tensor_mapping.py).
const COMMON_NAMES: &[(&str, &str)] = &[
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("attn_norm", "input_layernorm"),
    // The norm before the MLP, as Llama-style models name it.
    ("ffn_norm", "post_attention_layernorm"),
    ("post_attention_norm", "post_attention_layernorm"),
    ("post_ffw_norm", "post_feedforward_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
    // A mixture: the router, and each projection's experts stacked in one tensor
    // (n_experts, rows, cols), which engine/weights.rs reads as one matrix per expert.
    ("ffn_gate_inp", "mlp.gate"),
    ("ffn_gate_exps", "mlp.experts.gate_proj"),
    ("ffn_up_exps", "mlp.experts.up_proj"),
    ("ffn_down_exps", "mlp.experts.down_proj"),
    // A shared expert beside them, and its gate ((hidden,) in GGUF, (1, hidden) in HF).
    ("ffn_gate_inp_shexp", "mlp.shared_expert_gate"),
    ("ffn_gate_shexp", "mlp.shared_expert.gate_proj"),
    ("ffn_up_shexp", "mlp.shared_expert.up_proj"),
    ("ffn_down_shexp", "mlp.shared_expert.down_proj"),
];

/// GGUF tensor name -> HF name (`blk.N.x` -> `model.layers.N.y`): the family's own names
/// (`family_names`) first, then the common stems. A family entry whose GGUF side has a suffix
/// names a whole tensor: a top-level one (`x.weight` -> `model.y`) or a layer's part
/// (`blk.N.x.weight` -> `model.layers.N.y`); the others are stems, as in `COMMON_NAMES`.
fn hf_name(name: &str, family_names: &[(&str, &str)]) -> Option<String> {
    let whole = |n: &str| family_names.iter().find(|(s, _)| s.contains('.') && *s == n).map(|(_, hf)| *hf);
    let fixed = match name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let Some(rest) = name.strip_prefix("blk.") else { return whole(name).map(|hf| format!("model.{hf}")) };
    let (layer, part) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    if let Some(hf) = whole(part) {
        return Some(format!("model.layers.{layer}.{hf}"));
    }
    let (stem, suffix) = part.rsplit_once('.')?;
    let (_, hf) = family_names.iter().chain(COMMON_NAMES).find(|(s, _)| *s == stem)?;
    Some(format!("model.layers.{layer}.{hf}.{suffix}"))
}

/// The tensors under HF names, mapped in place except llama-arch Q/K (see `unpermute_rows`).
pub fn tensors_from_gguf(g: &GgufFile, config: &Value) -> Result<BTreeMap<String, WeightTensor>> {
    let family = family_read(g.architecture()?)?;
    let n_heads = config["num_attention_heads"].as_u64().unwrap_or(1) as usize;
    let n_kv_heads = config["num_key_value_heads"].as_u64().unwrap_or(1) as usize;
    let mut out = BTreeMap::new();
    for t in g.tensors.iter().filter(|t| !family.config_tensors.contains(&t.name.as_str())) {
        let name = hf_name(&t.name, family.tensor_names).ok_or_else(|| {
            Error::unsupported(format!("GGUF: tensor {} has no known role", t.name))
        })?;
        let shape: Vec<usize> = t
            .dims
            .iter()
            .rev()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| Error::format(format!("GGUF: tensor {} dims {:?} too large", t.name, t.dims)))?;
        let heads = t.name.rsplit('.').nth(1).and_then(|stem| permuted_heads(family, stem, n_heads, n_kv_heads));
        let bytes = match heads {
            Some(h) => TensorBytes::Owned(Arc::new(unpermute_rows(g.tensor_data(t), &shape, t.ty, h, &t.name)?)),
            None => TensorBytes::Mapped { map: g.part_maps[t.part].clone(), offset: t.offset, len: t.n_bytes },
        };
        let w = WeightTensor::new(name.clone(), t.ty, shape, bytes)?;
        out.insert(name, w);
    }
    Ok(out)
}

/// The rope heads whose rows llama.cpp's converter (LlamaModel.permute) reorders in tensor
/// `stem` (`attn_q`, `attn_k`) of an `arch` model, so that ggml's interleaved rope applies
/// (HF's rope pairs (i, i + d/2)); None where the rows are in HF order (the family's
/// `rope_permuted`). The same holds for the rows of an adapter's B of those maps.
pub(crate) fn rope_permuted_heads(arch: &str, stem: &str, n_heads: usize, n_kv_heads: usize) -> Option<usize> {
    permuted_heads(families::gguf_read(arch)?, stem, n_heads, n_kv_heads)
}

fn permuted_heads(family: &GgufRead, stem: &str, n_heads: usize, n_kv_heads: usize) -> Option<usize> {
    match stem {
        "attn_q" if family.rope_permuted => Some(n_heads),
        "attn_k" if family.rope_permuted => Some(n_kv_heads),
        _ => None,
    }
}

/// Inverse of `w.reshape(n_head, 2, head_dim/2, ...).swapaxes(1, 2)`: GGUF row
/// `h*hd + 2i + s` holds HF row `h*hd + s*hd/2 + i`. Rows are whole quantized blocks, so this
/// moves bytes and never touches values.
pub(crate) fn unpermute_rows(data: &[u8], shape: &[usize], ty: crate::quant::WeightType, n_head: usize, name: &str) -> Result<Vec<u8>> {
    let rows: usize = shape[..shape.len().saturating_sub(1)].iter().product::<usize>().max(1);
    let cols = if shape.len() == 1 { 1 } else { *shape.last().unwrap_or(&1) };
    let row_bytes = if shape.len() == 1 { data.len() / shape[0].max(1) } else {
        ty.row_bytes(cols).ok_or_else(|| Error::tensor(format!("GGUF: tensor {name} row size")))?
    };
    let rows = if shape.len() == 1 { shape[0] } else { rows };
    if n_head == 0 || rows % n_head != 0 || !(rows / n_head).is_multiple_of(2) || row_bytes * rows != data.len() {
        return Err(Error::tensor(format!(
            "GGUF: tensor {name} with {rows} rows cannot be split into {n_head} rope heads"
        )));
    }
    let hd = rows / n_head;
    let half = hd / 2;
    let mut out = Vec::new();
    out.try_reserve_exact(data.len()).map_err(|_| {
        Error::new(crate::Status::ErrOutOfMemory, format!("GGUF: no memory for a copy of tensor {name} ({} bytes)", data.len()))
    })?;
    // HF rows in order (dst = h*hd + s*half + i counts up), each appended from its GGUF row:
    // no zero fill to overwrite.
    for h in 0..n_head {
        for s in 0..2 {
            for i in 0..half {
                let src = h * hd + 2 * i + s;
                out.extend_from_slice(&data[src * row_bytes..(src + 1) * row_bytes]);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_the_converters_permutation() {
        // Two heads of head_dim 4, one f32 column: HF rows 0..8. The converter's permutation
        // (reshape(2, 2, 2).swapaxes(1, 2)) gives GGUF order 0,2,1,3, 4,6,5,7 (worked by hand).
        let gguf_order = [0.0f32, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0];
        let bytes: Vec<u8> = gguf_order.iter().flat_map(|x| x.to_le_bytes()).collect();
        let out = unpermute_rows(&bytes, &[8, 1], WeightType::F32, 2, "t").unwrap();
        let back: Vec<f32> = out.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert_eq!(back, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    }

    #[test]
    fn names_map_to_hf() {
        let hf_name = |name: &str, arch: &str| hf_name(name, family_read(arch).unwrap().tensor_names);
        assert_eq!(hf_name("blk.11.ffn_norm.weight", "llama").as_deref(), Some("model.layers.11.post_attention_layernorm.weight"));
        assert_eq!(hf_name("blk.11.ffn_norm.weight", "gemma3").as_deref(), Some("model.layers.11.pre_feedforward_layernorm.weight"));
        assert_eq!(hf_name("blk.2.post_attention_norm.weight", "gemma3").as_deref(), Some("model.layers.2.post_attention_layernorm.weight"));
        assert_eq!(hf_name("blk.0.attn_q.bias", "qwen2").as_deref(), Some("model.layers.0.self_attn.q_proj.bias"));
        assert_eq!(hf_name("token_embd.weight", "llama").as_deref(), Some("model.embed_tokens.weight"));
        assert_eq!(hf_name("blk.x.attn_q.weight", "llama"), None);
        assert_eq!(hf_name("blk.0.ffn_gate_inp.weight", "llama").as_deref(), Some("model.layers.0.mlp.gate.weight"));
        assert_eq!(hf_name("blk.0.ffn_down_exps.weight", "qwen3moe").as_deref(), Some("model.layers.0.mlp.experts.down_proj.weight"));
        assert_eq!(hf_name("blk.0.ffn_gate_shexp.weight", "qwen2moe").as_deref(), Some("model.layers.0.mlp.shared_expert.gate_proj.weight"));
        assert_eq!(hf_name("blk.0.ffn_gate_inp_shexp.weight", "qwen2moe").as_deref(), Some("model.layers.0.mlp.shared_expert_gate.weight"));
        // Whole names of a family: a top-level tensor, and a layer's part without a suffix.
        assert_eq!(hf_name("per_layer_token_embd.weight", "gemma4").as_deref(), Some("model.embed_tokens_per_layer.weight"));
        assert_eq!(hf_name("blk.3.layer_output_scale.weight", "gemma4").as_deref(), Some("model.layers.3.layer_scalar"));
        assert_eq!(hf_name("blk.3.inp_gate.weight", "gemma4").as_deref(), Some("model.layers.3.per_layer_input_gate.weight"));
        assert_eq!(hf_name("per_layer_token_embd.weight", "gemma3"), None);
    }

    /// Only a "llama" file's Q and K rows are permuted (LlamaModel.permute); adapters of an
    /// architecture packlm does not read are left as they are.
    #[test]
    fn only_llama_rows_are_permuted() {
        assert_eq!(rope_permuted_heads("llama", "attn_q", 8, 2), Some(8));
        assert_eq!(rope_permuted_heads("llama", "attn_k", 8, 2), Some(2));
        assert_eq!(rope_permuted_heads("llama", "attn_v", 8, 2), None);
        assert_eq!(rope_permuted_heads("qwen2", "attn_q", 8, 2), None);
        assert_eq!(rope_permuted_heads("gemma3", "attn_k", 8, 2), None);
        assert_eq!(rope_permuted_heads("mistral", "attn_q", 8, 2), None);
    }
}
