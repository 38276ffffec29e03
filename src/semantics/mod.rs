//! From a model's config to one plain `LayerSpec` per layer. The table's fields are what the
//! engine runs every layer through one body by; the rules that fill it are the families', one
//! descriptor file each in `families/` here, which `build_spec` looks up by `model_type`.

pub mod config;
pub(crate) mod families;
pub mod rope;

use serde_json::Value;

use crate::error::{Error, Result};
pub use rope::RopeSpec;

/// Stated limits on counts taken from a config, checked before anything is allocated from
/// them (`ErrLimitExceeded`). Far above any released model (Llama 3.1 405B: 126 layers,
/// 128 heads; Gemma4: head_dim 512), far below what could exhaust memory in a spec table.
pub const MAX_LAYERS: usize = 1024;
pub const MAX_HEADS: usize = 1024;
pub const MAX_HEAD_DIM: usize = 8192;
/// Experts of a mixture and experts per token (Qwen3-235B-A22B: 128 and 8; DeepSeek-V3: 256
/// and 8). A row's top-k lives in a fixed array of MAX_EXPERTS_PER_TOKEN (engine/moe.rs).
pub const MAX_EXPERTS: usize = 4096;
pub const MAX_EXPERTS_PER_TOKEN: usize = 64;

/// What kind of file the config and weights came from: a property of the container that some
/// family rules depend on (Gemma's norm weights are stored as w in HF folders, as w + 1 in GGUF).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Container {
    Folder,
    Gguf,
}

/// Full causal attention, or a sliding window of `window` keys (the query's own position
/// included: a query at q sees keys k with q - window < k <= q; transformers masking_utils
/// `sliding_window_overlay`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKind {
    Full,
    Sliding { window: usize },
}

/// How an RMSNorm applies its weight: HF Llama computes `x/rms * w`; Gemma `x/rms * (1 + w)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormForm {
    Weight,
    OnePlusWeight,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    Silu,
    GeluTanh,
    /// The clamped SwiGLU of gpt-oss's experts (transformers `GptOssExperts._apply_gate`):
    /// gate = min(gate, limit), up = clamp(up, -limit, limit), then
    /// `(up + 1) * gate * sigmoid(alpha * gate)`.
    ClampedSwiglu { alpha: f32, limit: f32 },
}

/// The four places a decoder layer may have an RMSNorm; each is the tensor name suffix
/// (`model.layers.N.<suffix>.weight`) when the layer has it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LayerNorms {
    pub pre_attention: Option<&'static str>,
    pub post_attention: Option<&'static str>,
    pub pre_feedforward: Option<&'static str>,
    pub post_feedforward: Option<&'static str>,
}

/// Where a layer's keys and values live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvSource {
    /// The layer has its own plane in the session.
    Own,
    /// The layer reads the plane of layer `owner` and holds none.
    SharedWith { owner: usize },
}

/// Everything that decides one decoder layer's arithmetic.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerSpec {
    pub attention: AttentionKind,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rope: RopeSpec,
    /// Multiplies q.k (1/sqrt(head_dim), or 1/sqrt(query_pre_attn_scalar)).
    pub attn_scale: f32,
    /// `tanh(x / cap) * cap` on attention logits, when set.
    pub attn_softcap: Option<f32>,
    /// RMSNorm over each q and k head before rope (Qwen3, Gemma3).
    pub qk_norm: bool,
    /// q, k, v projections carry a bias.
    pub qkv_bias: bool,
    /// The output projection carries a bias.
    pub o_bias: bool,
    /// Each query head has a learned sink logit (`self_attn.sinks`, one per head) that joins
    /// its softmax's denominator and takes no value (gpt-oss).
    pub attn_sinks: bool,
    pub norms: LayerNorms,
    pub activation: Activation,
    /// The dense MLP's inner width (unused on a layer with `moe`).
    pub mlp_width: usize,
    /// A mixture of experts in place of the dense MLP, when the layer has one.
    pub moe: Option<MoeSpec>,
    pub kv_source: KvSource,
    /// RMS-normalize each value head, without a weight (Gemma4 `v_norm`).
    pub v_norm: bool,
    /// Values are the raw key projection (before k-norm and rope), with no v projection
    /// (Gemma4 `attention_k_eq_v` on full layers).
    pub value_from_key: bool,
    /// The layer adds its per-layer input (PLE) after the MLP (see ModelSpec::per_layer_input).
    pub per_layer_input: bool,
    /// The residual stream is multiplied by the layer's `layer_scalar` tensor at the end.
    pub layer_scalar: bool,
}

/// How a router turns its logits (one per expert) into the chosen experts and their weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// Softmax over all experts, then the top k; with `renormalize`, the k weights are divided
    /// by their sum (Qwen3-MoE's `norm_topk_prob`; Mixtral always).
    SoftmaxTopK { renormalize: bool },
    /// The top k logits, then the softmax over those k (gpt-oss's router).
    TopKSoftmax,
}

/// A sparse feed-forward: `n_experts` gated MLPs of inner width `width`, of which the router
/// (a (n_experts, hidden) matrix) picks `top_k` per row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeSpec {
    pub n_experts: usize,
    pub top_k: usize,
    pub width: usize,
    pub routing: Routing,
    /// The router and each expert's three projections carry a bias (gpt-oss).
    pub biases: bool,
    /// A shared expert of this inner width runs on every row beside the routed ones, its output
    /// scaled by sigmoid(its gate, a (1, hidden) map) and added after theirs (Qwen2-MoE's
    /// `shared_expert` / `shared_expert_gate`; GGUF's `*_shexp`).
    pub shared_width: Option<usize>,
}

impl LayerSpec {
    /// Width of one position's K (and V) row in this layer's plane.
    pub fn kv_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
    pub fn q_width(&self) -> usize {
        self.n_heads * self.head_dim
    }
}

/// The model-wide facts plus the per-layer table.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    /// The config's model_type (for `packlm info` only; nothing branches on it).
    pub family: String,
    pub hidden_size: usize,
    pub vocab_size: usize,
    pub max_context: usize,
    pub norm_eps: f32,
    pub norm_form: NormForm,
    /// Multiplies the token embedding (Gemma: sqrt(hidden_size)).
    pub embed_scale: Option<f32>,
    /// `tanh(x / cap) * cap` on the final logits, when set.
    pub final_softcap: Option<f32>,
    /// The output projection is the embedding matrix.
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// Per-layer embeddings (Gemma4 PLE), when the model has them.
    pub per_layer_input: Option<PerLayerInput>,
    /// Queries see only earlier keys. False for an encoder (Gemma3's
    /// `use_bidirectional_attention`, EmbeddingGemma): each text's rows see each other, within
    /// the sliding layers' window both ways. Such a model has no next-token logits: it serves
    /// embeddings only (engine/embed.rs), and its sessions refuse steps.
    pub causal: bool,
    pub layers: Vec<LayerSpec>,
}

/// Gemma4 per-layer inputs: a token table of `vocab` rows x (n_layers * dim), and a projection
/// of the scaled embedding to the same width; layer i reads columns i*dim .. (i+1)*dim. The
/// engine (engine/forward.rs) follows HF Gemma4TextModel.get_per_layer_inputs /
/// project_per_layer_inputs for the inputs and Gemma4TextDecoderLayer for the block: gate ->
/// activation -> * per-layer input -> projection -> norm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerLayerInput {
    pub dim: usize,
    pub vocab: usize,
}

/// The table of the family whose rule serves the config's `model_type`.
pub fn build_spec(cfg: config::Cfg, container: Container) -> Result<ModelSpec> {
    let model_type = cfg.str("model_type")?;
    match families::by_model_type(model_type) {
        Some(family) => (family.rule)(cfg, model_type, container),
        None => Err(Error::unsupported(format!(
            "{}: model_type \"{model_type}\" is not implemented ({} are)",
            cfg.source,
            families::model_types()
        ))),
    }
}

impl ModelSpec {
    /// Builds the table from a config.json value; `source` names the file in messages.
    pub fn from_config(config: &Value, source: &str, container: Container) -> Result<ModelSpec> {
        build_spec(config::Cfg::new(config, source), container)
    }

    /// The mixture of experts at a glance, for `packlm info`: the experts, experts per token
    /// and their width (those of the first sparse layer), and which layers are sparse and which
    /// dense; null for a model without one.
    pub fn moe_json(&self) -> Value {
        let Some(m) = self.layers.iter().find_map(|l| l.moe) else { return Value::Null };
        let (sparse, dense): (Vec<usize>, Vec<usize>) = (0..self.layers.len()).partition(|&i| self.layers[i].moe.is_some());
        let routing = match m.routing {
            Routing::SoftmaxTopK { renormalize: false } => "softmax_top_k",
            Routing::SoftmaxTopK { renormalize: true } => "softmax_top_k_renormalized",
            Routing::TopKSoftmax => "top_k_softmax",
        };
        serde_json::json!({
            "experts": m.n_experts,
            "experts_per_token": m.top_k,
            "expert_width": m.width,
            "routing": routing,
            "biases": m.biases,
            "shared_expert_width": m.shared_width,
            "sparse_layers": sparse,
            "dense_layers": dense,
        })
    }

    /// The table as JSON, for `packlm info` and `PACKLM_LOG=debug`.
    pub fn layers_json(&self) -> Value {
        Value::Array(
            self.layers
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let (kind, window) = match l.attention {
                        AttentionKind::Full => ("full", None),
                        AttentionKind::Sliding { window } => ("sliding", Some(window)),
                    };
                    serde_json::json!({
                        "layer": i,
                        "attention": kind,
                        "window": window,
                        "n_heads": l.n_heads,
                        "n_kv_heads": l.n_kv_heads,
                        "head_dim": l.head_dim,
                        "kv_width": l.kv_width(),
                        "kv_source": match l.kv_source { KvSource::Own => None, KvSource::SharedWith { owner } => Some(owner) },
                        "rope_theta": l.rope.theta,
                        "rope_type": l.rope.kind,
                        "rope_factor": l.rope.factor,
                        "rotary_dims": l.rope.rotary_dims,
                        "attn_scale": l.attn_scale,
                        "attn_softcap": l.attn_softcap,
                        "qk_norm": l.qk_norm,
                        "qkv_bias": l.qkv_bias,
                        "o_bias": l.o_bias,
                        "attention_sinks": l.attn_sinks,
                        "activation": match l.activation {
                            Activation::Silu => "silu",
                            Activation::GeluTanh => "gelu_tanh",
                            Activation::ClampedSwiglu { .. } => "clamped_swiglu",
                        },
                        "v_norm": l.v_norm,
                        "value_from_key": l.value_from_key,
                        "per_layer_input": l.per_layer_input,
                        "mlp_width": l.mlp_width,
                        "experts": l.moe.map(|m| m.n_experts),
                        "experts_per_token": l.moe.map(|m| m.top_k),
                        "expert_width": l.moe.map(|m| m.width),
                    })
                })
                .collect(),
        )
    }
}
