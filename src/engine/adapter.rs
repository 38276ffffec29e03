//! LoRA adapters: low-rank updates of a model's seven linear maps (q, k, v, o, gate, up, down),
//! applied at run time per session, never merged into the shared weights. A session holds a
//! list of (adapter, scale) (`AdapterSet`); each adapted projection computes
//! `y = x W^T (+ b)`, then for each adapter `y += (s * scaling) * ((x A^T) B^T)` in list
//! order, as PEFT's `Linear.forward` does (`result + lora_B(lora_A(x)) * scaling`), over the
//! session's own rows of a pass, so that sessions of one model with different adapters share
//! a pass over the base weights.
//!
//! Opened from a PEFT folder (`adapter_config.json` + `adapter_model.safetensors`) or a
//! llama.cpp adapter GGUF (`general.type = adapter`, `adapter.type = lora`,
//! `adapter.lora.alpha`, tensors `blk.N.<stem>.weight.lora_a` / `.lora_b`). Every tensor is
//! checked against the model's shapes and the adapter's rank before anything is prepared; a
//! mismatch names the tensor.
//!
//! Scaling: PEFT's `lora_alpha / r` (`alpha / sqrt(r)` with `use_rslora`); llama.cpp's
//! `alpha / rank` (`1` when alpha is 0). The session's scale multiplies it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::backend::Weight;
use crate::engine::control::ControlVector;
use crate::engine::Model;
use crate::error::{Error, Result, Status};
use crate::pack::files::{self, FileKind};
use crate::pack::gguf::GgufFile;
use crate::pack::safetensors_files;
use crate::pack::tensor::{TensorBytes, WeightTensor};

/// The linear maps an adapter may change, in the order a layer runs them.
pub const TARGETS: [&str; 7] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];
/// llama.cpp's names of the same maps.
const GGUF_STEMS: [&str; 7] = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"];

pub const Q: usize = 0;
pub const K: usize = 1;
pub const V: usize = 2;
pub const O: usize = 3;
pub const GATE: usize = 4;
pub const UP: usize = 5;
pub const DOWN: usize = 6;

/// Most rank an adapter may have (PEFT's are 4 to 256).
pub const MAX_RANK: usize = 4096;

/// One adapted map: A (rank x in), B (out x rank), prepared on the model's backend.
pub struct LoraPair {
    pub a: Weight,
    pub b: Weight,
    /// B transposed (rank x out), for a backend's own `Backend::lora`.
    pub bt: Weight,
    pub rank: usize,
    /// alpha / rank (or alpha / sqrt(rank)): multiplied by the session's scale.
    pub scaling: f32,
}

/// An opened adapter: its pairs per layer and target, for one model.
pub struct Adapter {
    model: Arc<Model>,
    /// `layers[il][t]`: the pair of target t of layer il, when the adapter changes it.
    pub(crate) layers: Vec<[Option<LoraPair>; 7]>,
    rank: usize,
    alpha: f32,
    /// Hash of its tensors and scalings (part of a session's snapshot fingerprint).
    hash: u64,
    source: String,
    /// GGUF key/values as text, or the PEFT config's scalar entries.
    metadata: Vec<(String, String)>,
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter").field("source", &self.source).field("rank", &self.rank).field("alpha", &self.alpha).finish()
    }
}

/// A pair's tensors before they are prepared, with where they came from.
struct Raw {
    a: WeightTensor,
    b: WeightTensor,
}

impl Adapter {
    /// Opens a PEFT folder or an adapter GGUF for `model`, checked against its shapes.
    pub fn open(model: &Arc<Model>, path: &Path) -> Result<Adapter> {
        if path.is_dir() {
            Adapter::open_peft(model, path)
        } else if path.is_file() {
            Adapter::open_gguf(model, path)
        } else {
            Err(Error::new(Status::ErrIo, format!("{}: no such adapter file or folder", path.display())))
        }
    }

    /// The model it was opened for.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }
    /// Its largest rank.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// Its alpha (PEFT's `lora_alpha`, llama.cpp's `adapter.lora.alpha`).
    pub fn alpha(&self) -> f32 {
        self.alpha
    }
    pub fn hash(&self) -> u64 {
        self.hash
    }
    pub fn source(&self) -> &str {
        &self.source
    }
    /// Its metadata as (key, text) pairs.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }
    /// Maps it changes: (layer, target name) pairs.
    pub fn targets(&self) -> Vec<(usize, &'static str)> {
        let mut out = Vec::new();
        for (il, l) in self.layers.iter().enumerate() {
            for (t, p) in l.iter().enumerate() {
                if p.is_some() {
                    out.push((il, TARGETS[t]));
                }
            }
        }
        out
    }

    fn open_peft(model: &Arc<Model>, dir: &Path) -> Result<Adapter> {
        let cfg_path = dir.join("adapter_config.json");
        if !files::exists(&cfg_path) {
            return Err(Error::new(Status::ErrIo, format!("{}: missing (a PEFT adapter folder has adapter_config.json)", cfg_path.display())));
        }
        let bytes = files::read_bytes(&cfg_path, FileKind::Config)?;
        let cfg: Value = serde_json::from_slice(&bytes).map_err(|e| Error::format(format!("{}: {e}", cfg_path.display())))?;
        let src = cfg_path.display().to_string();
        let refuse = |key: &str, why: &str| Error::unsupported(format!("{src}: \"{key}\" {why}"));
        if let Some(t) = cfg.get("peft_type").and_then(Value::as_str) {
            if t != "LORA" {
                return Err(refuse("peft_type", &format!("= {t:?}: only LORA adapters are implemented")));
            }
        }
        let r = cfg.get("r").and_then(Value::as_u64).filter(|&r| r > 0 && r as usize <= MAX_RANK).ok_or_else(|| {
            Error::format(format!("{src}: \"r\" is missing or not a rank from 1 to {MAX_RANK}"))
        })? as usize;
        let alpha = cfg.get("lora_alpha").and_then(Value::as_f64).ok_or_else(|| Error::format(format!("{src}: \"lora_alpha\" is missing")))?;
        if !alpha.is_finite() {
            return Err(Error::format(format!("{src}: \"lora_alpha\" is not finite")));
        }
        let rslora = cfg.get("use_rslora").and_then(Value::as_bool).unwrap_or(false);
        if cfg.get("use_dora").and_then(Value::as_bool) == Some(true) {
            return Err(refuse("use_dora", "= true: DoRA is not implemented"));
        }
        if cfg.get("fan_in_fan_out").and_then(Value::as_bool) == Some(true) {
            return Err(refuse("fan_in_fan_out", "= true: only nn.Linear layouts are implemented"));
        }
        match cfg.get("bias").and_then(Value::as_str) {
            None | Some("none") => {}
            Some(b) => return Err(refuse("bias", &format!("= {b:?}: adapters that train biases are not implemented"))),
        }
        for key in ["rank_pattern", "alpha_pattern"] {
            if cfg.get(key).and_then(Value::as_object).is_some_and(|o| !o.is_empty()) {
                return Err(refuse(key, "is not empty: per-module ranks and alphas are not implemented"));
            }
        }
        for key in ["lora_bias", "use_qalora", "use_bdlora"] {
            if cfg.get(key).and_then(Value::as_bool) == Some(true) {
                return Err(refuse(key, "= true: not implemented"));
            }
        }
        for key in ["layer_replication", "trainable_token_indices", "target_parameters"] {
            if cfg.get(key).is_some_and(|v| !v.is_null()) {
                return Err(refuse(key, "is set: not implemented"));
            }
        }
        if cfg.get("modules_to_save").is_some_and(|v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty())) {
            return Err(refuse("modules_to_save", "is set: adapters that replace whole modules are not implemented"));
        }
        let scaling = if rslora { alpha / (r as f64).sqrt() } else { alpha / r as f64 } as f32;
        let st = dir.join("adapter_model.safetensors");
        if !files::exists(&st) {
            return Err(Error::new(Status::ErrIo, format!("{}: missing (adapter_model.bin is not read)", st.display())));
        }
        let mut tensors = BTreeMap::new();
        safetensors_files::load_file(&st, &mut tensors)?;
        let mut raw: BTreeMap<(usize, usize), (Option<WeightTensor>, Option<WeightTensor>)> = BTreeMap::new();
        for (name, t) in tensors {
            let (il, target, which) = peft_name(&name).ok_or_else(|| {
                Error::unsupported(format!("{}: tensor {name} is not a LoRA A or B of {}", st.display(), TARGETS.join(", ")))
            })?;
            let e = raw.entry((il, target)).or_default();
            if which == 'A' {
                e.0 = Some(t);
            } else {
                e.1 = Some(t);
            }
        }
        let pairs = pair_up(raw, &st.display().to_string())?;
        let mut metadata: Vec<(String, String)> = cfg
            .as_object()
            .map(|o| o.iter().filter(|(_, v)| !v.is_array() && !v.is_object()).map(|(k, v)| (k.clone(), v.as_str().map(String::from).unwrap_or_else(|| v.to_string()))).collect())
            .unwrap_or_default();
        metadata.sort();
        Adapter::build(model, pairs, Some(r), alpha as f32, |_| scaling, dir.display().to_string(), metadata)
    }

    fn open_gguf(model: &Arc<Model>, path: &Path) -> Result<Adapter> {
        let g = GgufFile::open(path)?;
        let src = path.display().to_string();
        match g.get_str("general.type")? {
            Some("adapter") => {}
            other => return Err(Error::format(format!("{src}: general.type is {other:?}, not \"adapter\""))),
        }
        match g.get_str("adapter.type")? {
            Some("lora") => {}
            other => return Err(Error::unsupported(format!("{src}: adapter.type is {other:?}: only \"lora\" is implemented"))),
        }
        let arch = g.architecture()?.to_string();
        let model_arch = model.metadata().iter().find(|(k, _)| k == "general.architecture").map(|(_, v)| v.as_str());
        if model_arch.is_some_and(|m| m != arch) {
            return Err(Error::tensor(format!("{src}: the adapter is for architecture {arch}, the model is {} (an adapter for another base)", model_arch.unwrap_or(""))));
        }
        let alpha = g.get_f64("adapter.lora.alpha")?.unwrap_or(0.0);
        if !alpha.is_finite() {
            return Err(Error::format(format!("{src}: adapter.lora.alpha is not finite")));
        }
        // The rows of Q's and K's B are permuted as the base weights' are; put them back.
        let cfg = model.config();
        let n_heads = cfg["num_attention_heads"].as_u64().unwrap_or(1) as usize;
        let n_kv_heads = cfg["num_key_value_heads"].as_u64().map_or(n_heads, |h| h as usize);
        let heads = |t: usize| crate::pack::gguf_pack::rope_permuted_heads(&arch, GGUF_STEMS[t], n_heads, n_kv_heads);
        let mut raw: BTreeMap<(usize, usize), (Option<WeightTensor>, Option<WeightTensor>)> = BTreeMap::new();
        for t in &g.tensors {
            let (il, target, which) = gguf_name(&t.name).ok_or_else(|| Error::unsupported(format!("{src}: tensor {} is not a LoRA A or B of {}", t.name, GGUF_STEMS.join(", "))))?;
            let shape: Vec<usize> = t.dims.iter().rev().map(|&d| usize::try_from(d).unwrap_or(usize::MAX)).collect();
            let bytes = match (which, heads(target)) {
                ('B', Some(h)) => TensorBytes::Owned(Arc::new(crate::pack::gguf_pack::unpermute_rows(g.tensor_data(t), &shape, t.ty, h, &t.name)?)),
                _ => TensorBytes::Mapped { map: g.part_maps[t.part].clone(), offset: t.offset, len: t.n_bytes },
            };
            let w = WeightTensor::new(t.name.clone(), t.ty, shape, bytes)?;
            let e = raw.entry((il, target)).or_default();
            if which == 'A' {
                e.0 = Some(w);
            } else {
                e.1 = Some(w);
            }
        }
        let pairs = pair_up(raw, &src)?;
        let metadata: Vec<(String, String)> = crate::pack::gguf_metadata(&g);
        // llama-adapter.cpp: scale * alpha / rank, or scale alone when alpha is 0.
        let scaling = move |rank: usize| if alpha == 0.0 { 1.0 } else { (alpha / rank as f64) as f32 };
        Adapter::build(model, pairs, None, alpha as f32, scaling, src, metadata)
    }

    /// Checks every pair against the model and `rank` (when the format states one), then
    /// prepares them on the model's backend.
    fn build(
        model: &Arc<Model>,
        pairs: BTreeMap<(usize, usize), Raw>,
        rank: Option<usize>,
        alpha: f32,
        scaling: impl Fn(usize) -> f32,
        source: String,
        metadata: Vec<(String, String)>,
    ) -> Result<Adapter> {
        if pairs.is_empty() {
            return Err(Error::format(format!("{source}: the adapter has no LoRA tensors")));
        }
        let spec = model.spec();
        let n_layers = spec.layers.len();
        let mut checked = Vec::with_capacity(pairs.len());
        for ((il, t), p) in pairs {
            let ls = spec.layers.get(il).ok_or_else(|| {
                Error::tensor(format!("{source}: tensor {} is for layer {il}, the model has {n_layers} layers: an adapter for another base", p.a.name))
            })?;
            let (n_in, n_out) = match t {
                Q => (spec.hidden_size, ls.q_width()),
                K | V => (spec.hidden_size, ls.kv_width()),
                O => (ls.q_width(), spec.hidden_size),
                GATE | UP => (spec.hidden_size, ls.mlp_width),
                _ => (ls.mlp_width, spec.hidden_size),
            };
            if matches!(t, GATE | UP | DOWN) && ls.moe.is_some() {
                return Err(Error::unsupported(format!("{source}: tensor {} adapts {} of layer {il}, whose feed-forward is a mixture of experts (adapters for experts are not implemented)", p.a.name, TARGETS[t])));
            }
            if t == V && ls.value_from_key {
                return Err(Error::unsupported(format!("{source}: tensor {} adapts v_proj of layer {il}, whose values are its keys (no v projection)", p.a.name)));
            }
            if (t == K || t == V) && ls.kv_source != crate::semantics::KvSource::Own {
                return Err(Error::unsupported(format!("{source}: tensor {} adapts {} of layer {il}, which reads another layer's keys and values", p.a.name, TARGETS[t])));
            }
            if p.a.shape.len() != 2 || p.b.shape.len() != 2 {
                return Err(Error::tensor(format!("{source}: tensors {} and {} must be matrices", p.a.name, p.b.name)));
            }
            let r = p.a.shape[0];
            if r == 0 || r > MAX_RANK {
                return Err(Error::tensor(format!("{source}: tensor {} has rank {r} (1 to {MAX_RANK} are allowed)", p.a.name)));
            }
            if let Some(want) = rank {
                if r != want {
                    return Err(Error::tensor(format!("{source}: tensor {} has rank {r}, the adapter's config says r = {want}", p.a.name)));
                }
            }
            if p.a.shape[1] != n_in {
                return Err(Error::tensor(format!(
                    "{source}: tensor {} has shape {:?}: layer {il}'s {} takes {n_in} inputs on this model (an adapter for another base?)",
                    p.a.name, p.a.shape, TARGETS[t]
                )));
            }
            if p.b.shape != [n_out, r] {
                return Err(Error::tensor(format!(
                    "{source}: tensor {} has shape {:?}, layer {il}'s {} needs [{n_out}, {r}] (its outputs by the A tensor's rank)",
                    p.b.name, p.b.shape, TARGETS[t]
                )));
            }
            checked.push((il, t, r, p));
        }
        let be = model.backend();
        let mut layers: Vec<[Option<LoraPair>; 7]> = (0..n_layers).map(|_| Default::default()).collect();
        let mut hash_text = format!("{source}\n");
        let mut max_rank = 0;
        for (il, t, r, p) in checked {
            for w in [&p.a, &p.b] {
                if !w.to_f32().iter().all(|x| x.is_finite()) {
                    return Err(Error::tensor(format!("{source}: tensor {} holds a value that is not finite", w.name)));
                }
            }
            let s = scaling(r);
            hash_text.push_str(&format!("{il}:{t}:{r}:{}:{:016x}:{:016x}\n", s.to_bits(), crate::kv::snapshot::fnv1a64(p.a.bytes()), crate::kv::snapshot::fnv1a64(p.b.bytes())));
            let bt = transposed(&p.b)?;
            layers[il][t] = Some(LoraPair { a: be.prepare_matrix(&p.a)?, b: be.prepare_matrix(&p.b)?, bt: be.prepare_matrix(&bt)?, rank: r, scaling: s });
            max_rank = max_rank.max(r);
        }
        let hash = crate::kv::snapshot::fnv1a64(hash_text.as_bytes());
        Ok(Adapter { model: model.clone(), layers, rank: max_rank, alpha, hash, source, metadata })
    }
}

/// `w` (rows x cols) transposed (cols x rows): f32, f16 and bf16 keep their type (the host
/// reads a half-precision adapter in half the bytes), other types become f32.
fn transposed(w: &WeightTensor) -> Result<WeightTensor> {
    use crate::quant::WeightType;
    let (rows, cols) = (w.rows(), w.cols());
    let (ty, size, bytes) = match w.ty {
        WeightType::F32 | WeightType::F16 | WeightType::BF16 => (w.ty, if w.ty == WeightType::F32 { 4 } else { 2 }, w.bytes().to_vec()),
        _ => (WeightType::F32, 4, w.to_f32().iter().flat_map(|v| v.to_le_bytes()).collect()),
    };
    let mut out = Vec::with_capacity(bytes.len());
    for c in 0..cols {
        for r in 0..rows {
            let at = (r * cols + c) * size;
            out.extend_from_slice(&bytes[at..at + size]);
        }
    }
    WeightTensor::new(format!("{}^T", w.name), ty, vec![cols, rows], TensorBytes::Owned(Arc::new(out)))
}

/// Matches each A with its B; one without the other names the tensor.
fn pair_up(raw: BTreeMap<(usize, usize), (Option<WeightTensor>, Option<WeightTensor>)>, src: &str) -> Result<BTreeMap<(usize, usize), Raw>> {
    raw.into_iter()
        .map(|((il, t), (a, b))| match (a, b) {
            (Some(a), Some(b)) => Ok(((il, t), Raw { a, b })),
            (Some(a), None) => Err(Error::tensor(format!("{src}: tensor {} has no matching B tensor", a.name))),
            (None, Some(b)) => Err(Error::tensor(format!("{src}: tensor {} has no matching A tensor", b.name))),
            (None, None) => Err(Error::tensor(format!("{src}: layer {il} {} has no tensors", TARGETS[t]))),
        })
        .collect()
}

/// `...layers.N.(self_attn|mlp).<target>.lora_(A|B).weight` -> (N, target, 'A' | 'B').
fn peft_name(name: &str) -> Option<(usize, usize, char)> {
    let rest = name.strip_suffix(".weight")?;
    let (rest, which) = if let Some(r) = rest.strip_suffix(".lora_A") {
        (r, 'A')
    } else {
        (rest.strip_suffix(".lora_B")?, 'B')
    };
    let (rest, module) = rest.rsplit_once('.')?;
    let target = TARGETS.iter().position(|&t| t == module)?;
    let (rest, parent) = rest.rsplit_once('.')?;
    let want_parent = if target <= O { "self_attn" } else { "mlp" };
    if parent != want_parent {
        return None;
    }
    let (rest, layer) = rest.rsplit_once('.')?;
    if !rest.ends_with("layers") {
        return None;
    }
    Some((layer.parse().ok()?, target, which))
}

/// `blk.N.<stem>.weight.lora_(a|b)` -> (N, target, 'A' | 'B').
fn gguf_name(name: &str) -> Option<(usize, usize, char)> {
    let (rest, which) = if let Some(r) = name.strip_suffix(".weight.lora_a") {
        (r, 'A')
    } else {
        (name.strip_suffix(".weight.lora_b")?, 'B')
    };
    let (layer, stem) = rest.strip_prefix("blk.")?.split_once('.')?;
    let target = GGUF_STEMS.iter().position(|&s| s == stem)?;
    Some((layer.parse().ok()?, target, which))
}

/// A session's adapters: (adapter, scale) in the order they apply, and its control vector
/// (engine/control.rs; llama.cpp calls both adapters); empty for the base model.
#[derive(Clone, Default)]
pub struct AdapterSet {
    list: Vec<(Arc<Adapter>, f32)>,
    hash: u64,
    control: Option<Arc<ControlVector>>,
}

impl AdapterSet {
    /// The set of `list`, each adapter of `model`; a scale that is not finite is refused.
    pub fn new(model: &Arc<Model>, list: Vec<(Arc<Adapter>, f32)>) -> Result<AdapterSet> {
        let mut text = String::new();
        for (i, (a, s)) in list.iter().enumerate() {
            if !Arc::ptr_eq(a.model(), model) {
                return Err(Error::invalid(format!("adapter {i} ({}) was opened for another model", a.source())));
            }
            if !s.is_finite() {
                return Err(Error::invalid(format!("adapter {i}'s scale {s} is not finite")));
            }
            text.push_str(&format!("{:016x}:{:08x}\n", a.hash(), s.to_bits()));
        }
        let hash = if list.is_empty() { 0 } else { crate::kv::snapshot::fnv1a64(text.as_bytes()) };
        Ok(AdapterSet { list, hash, control: None })
    }
    /// This set with `control` as its control vector (None, or one whose layers are all
    /// zeros: none); a vector made for another model is refused.
    pub fn with_control(&self, model: &Arc<Model>, control: Option<Arc<ControlVector>>) -> Result<AdapterSet> {
        if let Some(c) = &control {
            if !Arc::ptr_eq(c.model(), model) {
                return Err(Error::invalid(format!("the control vector ({}) was made for another model", c.source())));
            }
        }
        Ok(AdapterSet { list: self.list.clone(), hash: self.hash, control: control.filter(|c| !c.is_empty()) })
    }
    /// No adapters and no control vector.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty() && self.control.is_none()
    }
    pub fn list(&self) -> &[(Arc<Adapter>, f32)] {
        &self.list
    }
    /// The control vector, when one with a vector for some layer is set.
    pub fn control(&self) -> Option<&Arc<ControlVector>> {
        self.control.as_ref()
    }
    /// 0 for the empty set; else a hash of each adapter's hash and scale, in order, mixed with
    /// the control vector's hash when there is one (the adapters' hash alone when not, as
    /// before control vectors).
    pub fn hash(&self) -> u64 {
        match &self.control {
            None => self.hash,
            Some(c) => crate::kv::snapshot::fnv1a64(format!("{:016x}:cvec:{:016x}", self.hash, c.hash()).as_bytes()),
        }
    }
    /// Largest rank of its adapters (0 when empty).
    pub fn max_rank(&self) -> usize {
        self.list.iter().map(|(a, _)| a.rank()).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!(peft_name("base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight"), Some((3, Q, 'A')));
        assert_eq!(peft_name("base_model.model.model.layers.12.mlp.down_proj.lora_B.weight"), Some((12, DOWN, 'B')));
        assert_eq!(peft_name("base_model.model.model.layers.1.mlp.q_proj.lora_B.weight"), None);
        assert_eq!(peft_name("base_model.model.lm_head.lora_A.weight"), None);
        assert_eq!(gguf_name("blk.0.attn_output.weight.lora_b"), Some((0, O, 'B')));
        assert_eq!(gguf_name("blk.7.ffn_gate.weight.lora_a"), Some((7, GATE, 'A')));
        assert_eq!(gguf_name("blk.7.ffn_norm.weight.lora_a"), None);
    }
}
