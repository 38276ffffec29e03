//! Control vectors (llama.cpp's "cvec"): one vector of the hidden width per layer, added to the
//! residual stream at the end of the layer (after its last residual add and any layer scalar),
//! for the layers of an inclusive range. llama.cpp adds it in `llama_adapter_cvec::apply_to`,
//! which `build_cvec` calls as the last op of each layer of src/models/llama.cpp, qwen2.cpp,
//! qwen3.cpp and gemma3.cpp. A session holds one (in its `AdapterSet`), applied to its own rows
//! of a pass, so that sessions of one model with different vectors share a pass.
//!
//! Made from data (packlm's layout: `n_layers x hidden` floats, layer 0 first, and a layer
//! range), or read from llama.cpp control-vector GGUFs: tensors `direction.N` (f32, one
//! dimension of the hidden width) for layer N, N from 1 (llama.cpp never adds one to layer 0),
//! several files summed, each direction times its file's scale, as common/common.cpp's
//! `common_control_vector_load` does.
//!
//! A layer whose vector is all zeros holds none: adding +0.0 keeps every value's bits but
//! turns -0.0 into +0.0, so skipping it makes a zero vector give exactly the bits of no vector.

use std::path::Path;
use std::sync::Arc;

use crate::backend::Vector;
use crate::engine::Model;
use crate::error::{Error, Result, Status};
use crate::pack::gguf::GgufFile;
use crate::quant::WeightType;

/// A model's control vector: per layer, the vector its passes add at the layer's end, if any.
pub struct ControlVector {
    model: Arc<Model>,
    /// `layers[il]`: (hidden) the vector added to layer il's output, prepared on the model's
    /// backend; None outside the range and where it is all zeros.
    pub(crate) layers: Vec<Option<Vector>>,
    /// `values[il]`: (hidden) the same vectors on the host (read back by `values`).
    values: Vec<Option<Vec<f32>>>,
    /// Hash of the layers and their values (part of a session's snapshot fingerprint); 0 when
    /// no layer holds a vector.
    hash: u64,
    source: String,
}

impl std::fmt::Debug for ControlVector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlVector").field("source", &self.source).field("layers", &self.applied_layers()).finish()
    }
}

impl ControlVector {
    /// A vector per layer from `data` (`n_layers x n_embd` floats, layer 0 first), added to the
    /// layers `layer_start ..= layer_end` (0-based) of `model`. `n_embd` must be the model's
    /// hidden size, `data` exactly one vector per layer, the range within the model's layers,
    /// every value finite; each refusal names what was wrong.
    pub fn from_data(model: &Arc<Model>, data: &[f32], n_embd: usize, layer_start: usize, layer_end: usize) -> Result<ControlVector> {
        let (n_layers, hidden) = (model.spec.layers.len(), model.spec.hidden_size);
        if n_embd != hidden {
            return Err(Error::invalid(format!("control vector width {n_embd}: the model's hidden size is {hidden}")));
        }
        if data.len() != n_layers * hidden {
            return Err(Error::invalid(format!(
                "control vector of {} floats: the model needs {n_layers} layers x {hidden} = {} (layer 0 first)",
                data.len(),
                n_layers * hidden
            )));
        }
        check_range(layer_start, layer_end, n_layers)?;
        if let Some(i) = data.iter().position(|x| !x.is_finite()) {
            return Err(Error::new(Status::ErrNonFinite, format!("control vector value {} (layer {}, element {}) is {}: not finite", i, i / hidden, i % hidden, data[i])));
        }
        let per_layer = (0..n_layers).map(|il| (layer_start..=layer_end).contains(&il).then(|| data[il * hidden..(il + 1) * hidden].to_vec())).collect();
        ControlVector::build(model, per_layer, format!("data, layers {layer_start}..={layer_end}"))
    }

    /// The sum of llama.cpp control-vector GGUFs, each direction times its file's scale, added
    /// to the layers `layer_start ..= layer_end` of `model` (llama.cpp's own default is
    /// 1 ..= n_layers - 1 of packlm's layers: there is never a direction for layer 0). A file
    /// whose tensors are not `direction.N` f32 vectors, a direction of another width than the
    /// model's hidden size or for a layer the model lacks (or layer 0), a scale or value that
    /// is not finite, or a range past the model's layers is refused, naming the file and tensor.
    pub fn open_gguf(model: &Arc<Model>, files: &[(&Path, f32)], layer_start: usize, layer_end: usize) -> Result<ControlVector> {
        let (n_layers, hidden) = (model.spec.layers.len(), model.spec.hidden_size);
        if files.is_empty() {
            return Err(Error::invalid("no control vector files given"));
        }
        check_range(layer_start, layer_end, n_layers)?;
        let mut sum: Vec<Option<Vec<f32>>> = vec![None; n_layers];
        let mut names = Vec::new();
        for &(path, scale) in files {
            let src = path.display().to_string();
            if !scale.is_finite() {
                return Err(Error::invalid(format!("{src}: scale {scale} is not finite")));
            }
            read_directions(path, scale, hidden, n_layers, &mut sum)?;
            names.push(format!("{src}:{scale}"));
        }
        let per_layer = sum.into_iter().enumerate().map(|(il, v)| v.filter(|_| (layer_start..=layer_end).contains(&il))).collect();
        ControlVector::build(model, per_layer, format!("{}, layers {layer_start}..={layer_end}", names.join(" + ")))
    }

    /// Checks the sums are finite, drops all-zero layers, hashes and prepares the rest.
    fn build(model: &Arc<Model>, per_layer: Vec<Option<Vec<f32>>>, source: String) -> Result<ControlVector> {
        let mut text = String::new();
        let mut layers = Vec::with_capacity(per_layer.len());
        let mut values = Vec::with_capacity(per_layer.len());
        for (il, v) in per_layer.into_iter().enumerate() {
            let v = v.filter(|v| v.iter().any(|&x| x != 0.0));
            if let Some(v) = &v {
                if let Some(j) = v.iter().position(|x| !x.is_finite()) {
                    return Err(Error::new(Status::ErrNonFinite, format!("{source}: the sum for layer {il} is {} at element {j}: not finite", v[j])));
                }
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                text.push_str(&format!("{il}:{:016x}\n", crate::kv::snapshot::fnv1a64(&bytes)));
                layers.push(Some(model.backend.prepare_vector(v)?));
            } else {
                layers.push(None);
            }
            values.push(v);
        }
        let hash = if text.is_empty() { 0 } else { crate::kv::snapshot::fnv1a64(text.as_bytes()).max(1) };
        Ok(ControlVector { model: model.clone(), layers, values, hash, source })
    }

    /// The model it was made for.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }
    /// 0 when no layer holds a vector; else a hash of each layer's vector.
    pub fn hash(&self) -> u64 {
        self.hash
    }
    /// Whether no layer holds a vector (then passes are those of no control vector).
    pub fn is_empty(&self) -> bool {
        self.hash == 0
    }
    pub fn source(&self) -> &str {
        &self.source
    }
    /// Layers that get a vector (in the range and not all zeros).
    pub fn applied_layers(&self) -> Vec<usize> {
        (0..self.layers.len()).filter(|&il| self.layers[il].is_some()).collect()
    }
    /// Layer il's vector (hidden floats), or None.
    pub fn values(&self, il: usize) -> Option<&[f32]> {
        self.values.get(il).and_then(|v| v.as_deref())
    }
}

fn check_range(layer_start: usize, layer_end: usize, n_layers: usize) -> Result<()> {
    if layer_start > layer_end || layer_end >= n_layers {
        return Err(Error::invalid(format!("control vector layer range {layer_start}..={layer_end}: the model's layers are 0..={}", n_layers.saturating_sub(1))));
    }
    Ok(())
}

/// Adds `scale` times each `direction.N` of the GGUF at `path` to `sum[N]`.
fn read_directions(path: &Path, scale: f32, hidden: usize, n_layers: usize, sum: &mut [Option<Vec<f32>>]) -> Result<()> {
    let g = GgufFile::open(path)?;
    let src = path.display().to_string();
    if let Some(arch) = g.get_str("general.architecture")? {
        if arch != "controlvector" {
            return Err(Error::format(format!("{src}: general.architecture is {arch:?}, not \"controlvector\": not a control vector")));
        }
    }
    if g.tensors.is_empty() {
        return Err(Error::format(format!("{src}: no direction.N tensors: not a control vector")));
    }
    for t in &g.tensors {
        let il = t.name.strip_prefix("direction.").and_then(|n| n.parse::<usize>().ok()).ok_or_else(|| {
            Error::format(format!("{src}: tensor {} is not a direction.N (a control vector holds only those)", t.name))
        })?;
        if il == 0 || il >= n_layers {
            return Err(Error::tensor(format!("{src}: tensor {} is for layer {il}: directions are for layers 1 to {} of this model", t.name, n_layers - 1)));
        }
        if t.ty != WeightType::F32 || t.dims.len() != 1 {
            return Err(Error::tensor(format!("{src}: tensor {} must be a one-dimensional f32 vector (it is {:?} {:?})", t.name, t.ty, t.dims)));
        }
        if t.dims[0] != hidden as u64 {
            return Err(Error::tensor(format!("{src}: tensor {} has {} values: the model's hidden size is {hidden} (a control vector for another model)", t.name, t.dims[0])));
        }
        let bytes = g.tensor_data(t);
        if bytes.len() != hidden * 4 {
            return Err(Error::format(format!("{src}: tensor {}'s data is truncated", t.name)));
        }
        let acc = sum[il].get_or_insert_with(|| vec![0.0; hidden]);
        for (j, c) in bytes.chunks_exact(4).enumerate() {
            let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            if !x.is_finite() {
                return Err(Error::new(Status::ErrNonFinite, format!("{src}: tensor {} holds {x} at element {j}: not finite", t.name)));
            }
            acc[j] += x * scale;
        }
    }
    Ok(())
}
