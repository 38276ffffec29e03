//! The tensors each layer needs, found by HF name, shape-checked against the LayerSpec table,
//! with small vectors (norms, biases) turned into f32 once at open, and every one of them
//! prepared by the model's backend (`Backend::prepare_matrix` / `prepare_vector`): the engine
//! holds the backend's handles, not the pack's tensors.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::backend::{Backend, Vector, Weight};
use crate::pack::tensor::WeightTensor;
use crate::semantics::{KvSource, LayerSpec, ModelSpec, MoeSpec, NormForm};

/// RMSNorm weight as it multiplies: `w` or `1 + w` already applied (per the spec's form).
pub type NormWeight = Vector;

pub struct LayerWeights {
    /// (n_heads * head_dim, hidden)
    pub q: Weight,
    /// (n_kv_heads * head_dim, hidden); None on a layer that reads another layer's plane
    pub k: Option<Weight>,
    /// (n_kv_heads * head_dim, hidden); None also when values come from the key projection
    pub v: Option<Weight>,
    /// (hidden, n_heads * head_dim)
    pub o: Weight,
    /// (n_heads * head_dim,) / (kv_width,) / (kv_width,) when the layer has qkv bias
    pub qkv_bias: Option<[Vector; 3]>,
    /// (hidden,) when the layer has an output bias
    pub o_bias: Option<Vector>,
    /// (n_heads,): each query head's sink logit, when the layer has them
    pub sinks: Option<Vec<f32>>,
    /// (head_dim,) each, when the layer has qk-norm
    pub q_norm: Option<NormWeight>,
    pub k_norm: Option<NormWeight>,
    /// (hidden,) each, for the norms the layer has
    pub pre_attention_norm: Option<NormWeight>,
    pub post_attention_norm: Option<NormWeight>,
    pub pre_feedforward_norm: Option<NormWeight>,
    pub post_feedforward_norm: Option<NormWeight>,
    /// Per-layer input: gate (ple_dim, hidden), projection (hidden, ple_dim), post-norm (hidden,)
    pub per_layer: Option<PerLayerWeights>,
    /// Multiplies the residual stream at the end of the layer.
    pub layer_scalar: Option<f32>,
    pub feed_forward: FeedForward,
}

/// A gated MLP: `down(act(gate(x)) * up(x))`.
pub struct Mlp {
    /// (width, hidden)
    pub gate: Weight,
    /// (width, hidden)
    pub up: Weight,
    /// (hidden, width)
    pub down: Weight,
    /// (width,), (width,), (hidden,): the biases of gate, up and down, where they have them
    /// (gpt-oss's experts)
    pub bias: Option<[Vector; 3]>,
}

/// A layer's feed-forward: one MLP of `mlp_width`, or a mixture of experts (`LayerSpec::moe`).
pub enum FeedForward {
    Dense(Mlp),
    Experts {
        moe: MoeSpec,
        /// (n_experts, hidden): one logit per expert
        router: Weight,
        /// (n_experts,), where the router has a bias
        router_bias: Option<Vector>,
        /// n_experts MLPs of the mixture's width
        experts: Vec<Mlp>,
        /// The shared expert (`MoeSpec::shared_width`) and its gate, (1, hidden)
        shared: Option<(Mlp, Weight)>,
    },
}

pub struct PerLayerWeights {
    /// (ple_dim, hidden)
    pub gate: Weight,
    /// (hidden, ple_dim)
    pub projection: Weight,
    /// (hidden,)
    pub post_norm: NormWeight,
}

/// The model-level tensors of per-layer inputs.
pub struct PerLayerInputWeights {
    /// (ple_vocab, n_layers * ple_dim)
    pub table: Weight,
    /// (n_layers * ple_dim, hidden)
    pub model_projection: Weight,
    /// (ple_dim,)
    pub projection_norm: NormWeight,
}

pub struct Weights {
    /// (vocab, hidden)
    pub embed: Weight,
    pub per_layer_input: Option<PerLayerInputWeights>,
    pub layers: Vec<LayerWeights>,
    /// (hidden,)
    pub final_norm: NormWeight,
    /// (vocab, hidden): the embedding itself when tied
    pub lm_head: Weight,
}

struct Lookup<'a> {
    tensors: &'a BTreeMap<String, WeightTensor>,
    backend: &'a dyn Backend,
}

impl Lookup<'_> {
    fn tensor(&self, name: &str, shape: &[usize]) -> Result<&WeightTensor> {
        let t = self
            .tensors
            .get(name)
            .ok_or_else(|| Error::tensor(format!("tensor {name} is missing")))?;
        t.expect_shape(shape)?;
        Ok(t)
    }
    fn get(&self, name: &str, shape: &[usize]) -> Result<Weight> {
        self.backend.prepare_matrix(self.tensor(name, shape)?)
    }
    fn f32s(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        Ok(self.tensor(name, &[len])?.to_f32())
    }
    /// A (1, len) matrix stored as such or as a (len,) vector (GGUF's `ffn_gate_inp_shexp`).
    fn row_vector_matrix(&self, name: &str, len: usize) -> Result<Weight> {
        let t = self.tensors.get(name).ok_or_else(|| Error::tensor(format!("tensor {name} is missing")))?;
        if t.shape == [len] {
            let mut t = t.clone();
            t.shape = vec![1, len];
            return self.backend.prepare_matrix(&t);
        }
        self.get(name, &[1, len])
    }
    fn vector(&self, name: &str, len: usize) -> Result<Vector> {
        self.backend.prepare_vector(&self.f32s(name, len)?)
    }
    fn norm(&self, name: &str, len: usize, form: NormForm) -> Result<NormWeight> {
        let w = self.f32s(name, len)?;
        let w: Vec<f32> = match form {
            NormForm::Weight => w,
            // The (1 + w) form of HF's RMSNorm: output * (1.0 + weight.float()), in f32.
            NormForm::OnePlusWeight => w.into_iter().map(|x| 1.0 + x).collect(),
        };
        self.backend.prepare_vector(&w)
    }
}

impl Weights {
    /// Finds, checks and prepares every weight. `progress(done, total)` is called after each
    /// of `total` steps (the model-level tensors, then each layer); an error it returns stops
    /// the resolve, and everything prepared so far is dropped.
    pub fn resolve(spec: &ModelSpec, tensors: &BTreeMap<String, WeightTensor>, backend: &dyn Backend, progress: &mut dyn FnMut(usize, usize) -> Result<()>) -> Result<Weights> {
        let lk = Lookup { tensors, backend };
        let total = spec.layers.len() + 1;
        let (hidden, vocab) = (spec.hidden_size, spec.vocab_size);
        let embed = lk.get("model.embed_tokens.weight", &[vocab, hidden])?;
        // Tied: the embedding table prepared a second time, as the output projection (the host
        // keeps both as views of the same mapped bytes).
        let lm_head_name = if spec.tie_word_embeddings { "model.embed_tokens.weight" } else { "lm_head.weight" };
        let lm_head = lk.get(lm_head_name, &[vocab, hidden])?;
        let final_norm = lk.norm("model.norm.weight", hidden, spec.norm_form)?;
        let mut layers = Vec::with_capacity(spec.layers.len());
        for (i, l) in spec.layers.iter().enumerate() {
            layers.push(layer(&lk, spec, i, l)?);
            progress(i + 1, total)?;
        }
        let per_layer_input = match spec.per_layer_input {
            None => None,
            Some(p) => {
                let width = spec.layers.len() * p.dim;
                Some(PerLayerInputWeights {
                    table: lk.get("model.embed_tokens_per_layer.weight", &[p.vocab, width])?,
                    model_projection: lk.get("model.per_layer_model_projection.weight", &[width, hidden])?,
                    projection_norm: lk.norm("model.per_layer_projection_norm.weight", p.dim, spec.norm_form)?,
                })
            }
        };
        progress(total, total)?;
        Ok(Weights { embed, per_layer_input, layers, final_norm, lm_head })
    }
}

fn layer(lk: &Lookup, spec: &ModelSpec, i: usize, l: &LayerSpec) -> Result<LayerWeights> {
    let hidden = spec.hidden_size;
    let p = |s: &str| format!("model.layers.{i}.{s}");
    let (qw, kvw) = (l.q_width(), l.kv_width());
    let norm = |slot: Option<&'static str>| -> Result<Option<NormWeight>> {
        slot.map(|s| lk.norm(&p(&format!("{s}.weight")), hidden, spec.norm_form)).transpose()
    };
    let qkv_bias = if l.qkv_bias {
        Some([
            lk.vector(&p("self_attn.q_proj.bias"), qw)?,
            lk.vector(&p("self_attn.k_proj.bias"), kvw)?,
            lk.vector(&p("self_attn.v_proj.bias"), kvw)?,
        ])
    } else {
        None
    };
    let own = l.kv_source == KvSource::Own;
    let q_norm = if l.qk_norm { Some(lk.norm(&p("self_attn.q_norm.weight"), l.head_dim, spec.norm_form)?) } else { None };
    let k_norm = if l.qk_norm && own { Some(lk.norm(&p("self_attn.k_norm.weight"), l.head_dim, spec.norm_form)?) } else { None };
    let per_layer = match spec.per_layer_input {
        Some(ple) if l.per_layer_input => Some(PerLayerWeights {
            gate: lk.get(&p("per_layer_input_gate.weight"), &[ple.dim, hidden])?,
            projection: lk.get(&p("per_layer_projection.weight"), &[hidden, ple.dim])?,
            post_norm: lk.norm(&p("post_per_layer_input_norm.weight"), hidden, spec.norm_form)?,
        }),
        _ => None,
    };
    let layer_scalar = if l.layer_scalar { Some(lk.f32s(&p("layer_scalar"), 1)?[0]) } else { None };
    Ok(LayerWeights {
        q: lk.get(&p("self_attn.q_proj.weight"), &[qw, hidden])?,
        k: if own { Some(lk.get(&p("self_attn.k_proj.weight"), &[kvw, hidden])?) } else { None },
        v: if own && !l.value_from_key { Some(lk.get(&p("self_attn.v_proj.weight"), &[kvw, hidden])?) } else { None },
        o: lk.get(&p("self_attn.o_proj.weight"), &[hidden, qw])?,
        qkv_bias,
        o_bias: if l.o_bias { Some(lk.vector(&p("self_attn.o_proj.bias"), hidden)?) } else { None },
        sinks: if l.attn_sinks { Some(lk.f32s(&p("self_attn.sinks"), l.n_heads)?) } else { None },
        q_norm,
        k_norm,
        per_layer,
        layer_scalar,
        pre_attention_norm: norm(l.norms.pre_attention)?,
        post_attention_norm: norm(l.norms.post_attention)?,
        pre_feedforward_norm: norm(l.norms.pre_feedforward)?,
        post_feedforward_norm: norm(l.norms.post_feedforward)?,
        feed_forward: match &l.moe {
            None => FeedForward::Dense(Mlp {
                gate: lk.get(&p("mlp.gate_proj.weight"), &[l.mlp_width, hidden])?,
                up: lk.get(&p("mlp.up_proj.weight"), &[l.mlp_width, hidden])?,
                down: lk.get(&p("mlp.down_proj.weight"), &[hidden, l.mlp_width])?,
                bias: None,
            }),
            Some(moe) => FeedForward::Experts {
                moe: *moe,
                router: lk.get(&p("mlp.gate.weight"), &[moe.n_experts, hidden])?,
                router_bias: if moe.biases { Some(lk.vector(&p("mlp.gate.bias"), moe.n_experts)?) } else { None },
                experts: experts(lk, &p("mlp.experts"), moe, hidden)?,
                shared: match moe.shared_width {
                    None => None,
                    Some(w) => Some((
                        Mlp {
                            gate: lk.get(&p("mlp.shared_expert.gate_proj.weight"), &[w, hidden])?,
                            up: lk.get(&p("mlp.shared_expert.up_proj.weight"), &[w, hidden])?,
                            down: lk.get(&p("mlp.shared_expert.down_proj.weight"), &[hidden, w])?,
                            bias: None,
                        },
                        lk.row_vector_matrix(&p("mlp.shared_expert_gate.weight"), hidden)?,
                    )),
                },
            },
        },
    })
}

/// The experts of a mixture under `prefix` (`model.layers.N.mlp.experts`): each projection is
/// one stacked tensor (`<prefix>.gate_proj.weight`, (n_experts, rows, cols), as GGUF stores
/// them), each expert's matrix a view of it, or one tensor per expert
/// (`<prefix>.E.gate_proj.weight`, as HF folders store them); their biases (`moe.biases`) the
/// same way, stacked ((n_experts, rows)) or per expert.
fn experts(lk: &Lookup, prefix: &str, moe: &MoeSpec, hidden: usize) -> Result<Vec<Mlp>> {
    let n = moe.n_experts;
    let stacked = |name: &str, kind: &str| format!("{prefix}.{name}.{kind}");
    let projection = |name: &str, shape: [usize; 2]| -> Result<Vec<Weight>> {
        if lk.tensors.contains_key(&stacked(name, "weight")) {
            let t = lk.tensor(&stacked(name, "weight"), &[n, shape[0], shape[1]])?;
            (0..n).map(|e| lk.backend.prepare_matrix(&t.matrix_of_stack(e)?)).collect()
        } else {
            (0..n).map(|e| lk.get(&format!("{prefix}.{e}.{name}.weight"), &shape)).collect()
        }
    };
    let bias = |name: &str, len: usize| -> Result<Vec<Vector>> {
        if lk.tensors.contains_key(&stacked(name, "bias")) {
            let all = lk.tensor(&stacked(name, "bias"), &[n, len])?.to_f32();
            all.chunks_exact(len).map(|b| lk.backend.prepare_vector(b)).collect()
        } else {
            (0..n).map(|e| lk.vector(&format!("{prefix}.{e}.{name}.bias"), len)).collect()
        }
    };
    let gate = projection("gate_proj", [moe.width, hidden])?;
    let up = projection("up_proj", [moe.width, hidden])?;
    let down = projection("down_proj", [hidden, moe.width])?;
    let mut biases = if moe.biases {
        let (g, u, d) = (bias("gate_proj", moe.width)?, bias("up_proj", moe.width)?, bias("down_proj", hidden)?);
        g.into_iter().zip(u).zip(d).map(|((g, u), d)| Some([g, u, d])).collect()
    } else {
        Vec::new()
    };
    biases.resize_with(n, || None);
    Ok(gate.into_iter().zip(up).zip(down).zip(biases).map(|(((gate, up), down), bias)| Mlp { gate, up, down, bias }).collect())
}
