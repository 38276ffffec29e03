//! What a pack declares about embeddings: the pooling, whether vectors are L2-normalized, and
//! the Dense layers that follow the pooling. An HF folder says it in sentence-transformers'
//! files (`modules.json`, then each module's folder: `1_Pooling/config.json`, `2_Dense/`
//! `config.json` + `model.safetensors`, a `Normalize` module); a GGUF in
//! `<arch>.pooling_type`. A pack that declares nothing has pooling None (one vector per
//! token), as llama.cpp's default for a model without a pooling type.
//!
//! What sentence-transformers can declare but packlm does not compute (max, mean_sqrt_len and
//! weightedmean pooling, several modes at once, prompts left out of the pooling, a residual
//! Dense, an activation other than Identity and Tanh) is refused at open, naming the file and
//! the key, rather than computed some other way.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result, Status};
use crate::pack::files::{self, FileKind};
use crate::pack::safetensors_files;

/// How token vectors become one vector per text. The numbers are llama.cpp's
/// `llama_pooling_type` (and packlm's C constants).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// One vector per token: the final hidden states (after the final norm).
    None = 0,
    /// The mean of the text's token vectors.
    Mean = 1,
    /// The first token's vector.
    Cls = 2,
    /// The last token's vector.
    Last = 3,
}

impl Pooling {
    pub fn from_code(code: i64) -> Option<Pooling> {
        match code {
            0 => Some(Pooling::None),
            1 => Some(Pooling::Mean),
            2 => Some(Pooling::Cls),
            3 => Some(Pooling::Last),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }
    pub fn from_name(name: &str) -> Option<Pooling> {
        [Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last].into_iter().find(|p| p.name() == name)
    }
}

/// The activation after a Dense layer's linear map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenseActivation {
    Identity,
    Tanh,
}

/// A sentence-transformers Dense module: `act(W x + b)`, W of `n_out` rows of `n_in`.
#[derive(Clone, Debug)]
pub struct Dense {
    pub n_in: usize,
    pub n_out: usize,
    /// Row-major, `n_out x n_in`, f32.
    pub weight: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    pub activation: DenseActivation,
}

impl Dense {
    /// `act(W x + b)`: each output a sum in input order in f64, rounded once (the same bits for
    /// a text whatever texts share its call).
    pub fn apply(&self, x: &[f32]) -> Vec<f32> {
        (0..self.n_out)
            .map(|j| {
                let row = &self.weight[j * self.n_in..(j + 1) * self.n_in];
                let mut s: f64 = row.iter().zip(x).map(|(&w, &v)| w as f64 * v as f64).sum();
                if let Some(b) = &self.bias {
                    s += b[j] as f64;
                }
                let y = s as f32;
                match self.activation {
                    DenseActivation::Identity => y,
                    DenseActivation::Tanh => y.tanh(),
                }
            })
            .collect()
    }
}

/// The pack's embedding rules.
#[derive(Clone, Debug)]
pub struct EmbedConfig {
    /// The declared pooling (None when the pack declares none: `Pooling::None` is used).
    pub pooling: Option<Pooling>,
    /// A pooling the pack declares that packlm does not compute (a GGUF's RANK): refused when
    /// the pack's default pooling is asked for.
    pub unsupported_pooling: Option<String>,
    /// L2-normalize pooled vectors (a Normalize module).
    pub normalize: bool,
    /// Applied in order to pooled vectors (never to per-token ones, as sentence-transformers).
    pub dense: Vec<Dense>,
}

impl Default for EmbedConfig {
    fn default() -> Self {
        EmbedConfig { pooling: None, unsupported_pooling: None, normalize: false, dense: Vec::new() }
    }
}

impl EmbedConfig {
    /// The pooling used when the caller asks for the pack's own.
    pub fn default_pooling(&self) -> Result<Pooling> {
        match &self.unsupported_pooling {
            Some(why) => Err(Error::unsupported(why.clone())),
            None => Ok(self.pooling.unwrap_or(Pooling::None)),
        }
    }

    /// A GGUF's `<arch>.pooling_type` (llama.cpp: 0 none, 1 mean, 2 cls, 3 last, 4 rank).
    pub fn from_gguf(key: &str, pooling_type: Option<u64>) -> EmbedConfig {
        let mut c = EmbedConfig::default();
        match pooling_type {
            None => {}
            Some(t) => match Pooling::from_code(t as i64) {
                Some(p) => c.pooling = Some(p),
                None => c.unsupported_pooling = Some(format!("{key} = {t}: only none (0), mean (1), cls (2) and last (3) pooling are implemented")),
            },
        }
        c
    }

    /// The sentence-transformers files of an HF folder; the default when it has no
    /// `modules.json`.
    pub fn from_folder(dir: &Path) -> Result<EmbedConfig> {
        let modules_path = dir.join("modules.json");
        if !files::exists(&modules_path) {
            return Ok(EmbedConfig::default());
        }
        let modules = read_json(&modules_path)?;
        let list = modules.as_array().ok_or_else(|| Error::format(format!("{}: not a list of modules", modules_path.display())))?;
        let mut c = EmbedConfig::default();
        for (i, m) in list.iter().enumerate() {
            let ty = m.get("type").and_then(Value::as_str).ok_or_else(|| Error::format(format!("{}: module {i} has no \"type\"", modules_path.display())))?;
            let sub = m.get("path").and_then(Value::as_str).unwrap_or("");
            if sub.contains("..") || sub.starts_with('/') || sub.contains('\\') {
                return Err(Error::format(format!("{}: module {i}'s path {sub:?} leaves the folder", modules_path.display())));
            }
            let folder = dir.join(sub);
            match ty.rsplit('.').next().unwrap_or(ty) {
                "Transformer" => {}
                "Pooling" => c.pooling = Some(read_pooling(&folder.join("config.json"))?),
                "Dense" => {
                    if c.pooling.is_none() {
                        return Err(Error::unsupported(format!("{}: module {i} is a Dense before any Pooling", modules_path.display())));
                    }
                    c.dense.push(read_dense(&folder)?);
                }
                "Normalize" => {
                    let cfg = folder.join("config.json");
                    if files::exists(&cfg) {
                        let v = read_json(&cfg)?;
                        if let Some(input) = v.get("module_input_name").and_then(Value::as_str) {
                            if input != "sentence_embedding" {
                                return Err(Error::unsupported(format!("{}: \"module_input_name\" = {input:?}: only the pooled vector is normalized", cfg.display())));
                            }
                        }
                    }
                    c.normalize = true;
                }
                other => {
                    return Err(Error::unsupported(format!(
                        "{}: module {i} is a {other} (Transformer, Pooling, Dense and Normalize are implemented)",
                        modules_path.display()
                    )))
                }
            }
        }
        // Each Dense reads what the one before it gives.
        let mut width = None;
        for (k, d) in c.dense.iter().enumerate() {
            if let Some(w) = width {
                if d.n_in != w {
                    return Err(Error::tensor(format!("{}: Dense layer {k} takes {} values, the layer before it gives {w}", dir.display(), d.n_in)));
                }
            }
            width = Some(d.n_out);
        }
        Ok(c)
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let bytes = files::read_bytes(path, FileKind::Config)?;
    serde_json::from_slice(&bytes).map_err(|e| Error::format(format!("{}: {e}", path.display())))
}

/// A Pooling module's config: `pooling_mode` (a name or a list), or the older
/// `pooling_mode_*` booleans; `include_prompt` must not be false.
fn read_pooling(path: &Path) -> Result<Pooling> {
    if !files::exists(path) {
        return Err(Error::new(Status::ErrIo, format!("{}: missing (the pack's modules.json names a Pooling module)", path.display())));
    }
    let v = read_json(path)?;
    if v.get("include_prompt").and_then(Value::as_bool) == Some(false) {
        return Err(Error::unsupported(format!("{}: \"include_prompt\" = false: pooling without the prompt's tokens is not implemented", path.display())));
    }
    let mut modes: Vec<String> = Vec::new();
    match v.get("pooling_mode") {
        Some(Value::String(s)) => modes.push(s.clone()),
        Some(Value::Array(a)) => modes.extend(a.iter().filter_map(Value::as_str).map(String::from)),
        Some(other) => return Err(Error::format(format!("{}: \"pooling_mode\" = {other} is not a name or a list of names", path.display()))),
        None => {
            for (key, mode) in [
                ("pooling_mode_cls_token", "cls"),
                ("pooling_mode_max_tokens", "max"),
                ("pooling_mode_mean_tokens", "mean"),
                ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
                ("pooling_mode_weightedmean_tokens", "weightedmean"),
                ("pooling_mode_lasttoken", "lasttoken"),
            ] {
                if v.get(key).and_then(Value::as_bool) == Some(true) {
                    modes.push(mode.to_string());
                }
            }
        }
    }
    match modes.as_slice() {
        // sentence-transformers' default mode.
        [] => Ok(Pooling::Mean),
        [one] => match one.as_str() {
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "lasttoken" => Ok(Pooling::Last),
            other => Err(Error::unsupported(format!("{}: pooling mode {other:?} is not implemented (mean, cls and lasttoken are)", path.display()))),
        },
        many => Err(Error::unsupported(format!("{}: several pooling modes at once ({}) are not implemented", path.display(), many.join(", ")))),
    }
}

/// A Dense module's folder: `config.json` (in_features, out_features, bias, activation_function,
/// use_residual) and `model.safetensors` (`linear.weight`, `linear.bias`).
fn read_dense(folder: &Path) -> Result<Dense> {
    let cfg_path = folder.join("config.json");
    if !files::exists(&cfg_path) {
        return Err(Error::new(Status::ErrIo, format!("{}: missing (the pack's modules.json names a Dense module)", cfg_path.display())));
    }
    let v = read_json(&cfg_path)?;
    let size = |key: &str| -> Result<usize> {
        v.get(key)
            .and_then(Value::as_u64)
            .filter(|&n| n > 0 && n <= 1 << 20)
            .map(|n| n as usize)
            .ok_or_else(|| Error::format(format!("{}: \"{key}\" is missing or not a count from 1 to 2^20", cfg_path.display())))
    };
    let (n_in, n_out) = (size("in_features")?, size("out_features")?);
    let has_bias = v.get("bias").and_then(Value::as_bool).unwrap_or(true);
    if v.get("use_residual").and_then(Value::as_bool) == Some(true) {
        return Err(Error::unsupported(format!("{}: \"use_residual\" = true is not implemented", cfg_path.display())));
    }
    // sentence-transformers' Dense defaults to Tanh when the config names no activation.
    let activation = match v.get("activation_function").and_then(Value::as_str).unwrap_or("torch.nn.modules.activation.Tanh") {
        "torch.nn.modules.linear.Identity" | "torch.nn.Identity" => DenseActivation::Identity,
        "torch.nn.modules.activation.Tanh" | "torch.nn.Tanh" => DenseActivation::Tanh,
        other => return Err(Error::unsupported(format!("{}: \"activation_function\" = {other:?} (Identity and Tanh are implemented)", cfg_path.display()))),
    };
    let weights_path = folder.join("model.safetensors");
    if !files::exists(&weights_path) {
        return Err(Error::new(Status::ErrIo, format!("{}: missing (the Dense layer's weights; pytorch_model.bin is not read)", weights_path.display())));
    }
    let mut tensors = BTreeMap::new();
    safetensors_files::load_file(&weights_path, &mut tensors)?;
    let take = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
        let t = tensors.get(name).ok_or_else(|| Error::tensor(format!("{}: no tensor {name}", weights_path.display())))?;
        if t.shape != shape {
            return Err(Error::tensor(format!("{}: {name} has shape {:?}, the config says {shape:?}", weights_path.display(), t.shape)));
        }
        Ok(t.to_f32())
    };
    let weight = take("linear.weight", &[n_out, n_in])?;
    let bias = if has_bias { Some(take("linear.bias", &[n_out])?) } else { None };
    if !weight.iter().chain(bias.iter().flatten()).all(|x| x.is_finite()) {
        return Err(Error::tensor(format!("{}: a Dense weight is not finite", weights_path.display())));
    }
    Ok(Dense { n_in, n_out, weight, bias, activation })
}
