//! Embeddings: texts through the model's layers and final norm, then pooled (none, mean, first,
//! last), through the pack's Dense layers and L2-normalized, as sentence-transformers'
//! `encode` computes them (its `token_embeddings` are the final hidden states after the final
//! norm, HF's `last_hidden_state`).
//!
//! Several texts run as one pass over the weights with no padding: each text is its own
//! segment of a shared pass (engine/shared_pass.rs), with its own scratch KV cache, so its rows
//! attend to its own rows only, causally or both ways as the model declares
//! (`ModelSpec::causal`). A text's vector is the same bits whatever texts share its call: the
//! pass's ops are row-wise or per segment, and the pooling, Dense layers and norm run per text
//! on the host in a fixed order. The session's adapters apply; its positions are untouched.

use crate::backend::Tensor;
use crate::engine::forward::{forward_many, Item, Want};
use crate::engine::{Model, Session};
use crate::error::{Error, Result, Status};
use crate::kv::KvStore;
pub use crate::pack::embedding::Pooling;

/// How to embed; None fields take the pack's declaration (`pack::embedding::EmbedConfig`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmbedOptions {
    pub pooling: Option<Pooling>,
    /// L2-normalize each vector. Default: the pack's Normalize module for pooled vectors;
    /// never for per-token vectors (sentence-transformers' `token_embeddings` are not).
    pub normalize: Option<bool>,
}

/// The vectors of an `embed` call: one row of `dim` values per text (pooled), or per token of
/// every text in order (pooling None).
#[derive(Clone, Debug, PartialEq)]
pub struct Embeddings {
    pub dim: usize,
    pub pooling: Pooling,
    pub normalized: bool,
    /// rows x dim, row-major.
    pub values: Vec<f32>,
}

impl Embeddings {
    pub fn rows(&self) -> usize {
        self.values.len() / self.dim.max(1)
    }
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.dim..(i + 1) * self.dim]
    }
}

/// The length of one vector of `model` under `pooling` (the last Dense layer's width, or the
/// hidden size).
pub fn dim(model: &Model, pooling: Pooling) -> usize {
    match pooling {
        Pooling::None => model.spec.hidden_size,
        _ => model.embedding.dense.last().map_or(model.spec.hidden_size, |d| d.n_out),
    }
}

/// Most texts one call takes.
pub const MAX_TEXTS: usize = 1 << 20;

impl Session {
    /// The vectors of `texts` (token ids, specials included as the caller tokenized them).
    /// Checked before anything runs: at least one text, none empty, each within the session's
    /// context and the vocabulary. On failure (abort, a value that is not finite) nothing is
    /// returned and the session is as before.
    pub fn embed(&mut self, texts: &[&[u32]], opts: &EmbedOptions) -> Result<Embeddings> {
        let model = self.model.clone();
        let cfg = &model.embedding;
        let pooling = match opts.pooling {
            Some(p) => p,
            None => cfg.default_pooling()?,
        };
        let normalize = opts.normalize.unwrap_or(cfg.normalize && pooling != Pooling::None);
        if texts.is_empty() {
            return Err(Error::invalid("no texts given"));
        }
        if texts.len() > MAX_TEXTS {
            return Err(Error::new(Status::ErrLimitExceeded, format!("{} texts is more than the {MAX_TEXTS} one call takes", texts.len())));
        }
        let vocab = model.spec.vocab_size;
        for (i, t) in texts.iter().enumerate() {
            if t.is_empty() {
                return Err(Error::invalid(format!("text {i} has no tokens")));
            }
            if t.len() > self.n_ctx {
                return Err(Error::new(Status::ErrContextOverflow, format!("text {i} has {} tokens, more than the session's context of {}", t.len(), self.n_ctx)));
            }
            if let Some(&bad) = t.iter().find(|&&x| x as usize >= vocab) {
                return Err(Error::new(Status::ErrTokenOutOfRange, format!("text {i}: token id {bad} is outside the vocabulary of {vocab}")));
            }
        }
        let hidden = model.spec.hidden_size;
        let dense: &[crate::pack::embedding::Dense] = if pooling == Pooling::None { &[] } else { &cfg.dense };
        let dim = dim(&model, pooling);
        let cap = model.backend.max_pass_rows(&model.spec).max(1);
        let mut values = Vec::new();
        let mut i = 0;
        while i < texts.len() {
            // Texts up to the backend's pass rows make one pass (a longer text a pass alone):
            // the hidden rows held at once are one pass's.
            let (mut j, mut rows) = (i, 0);
            while j < texts.len() && (j == i || rows + texts[j].len() <= cap) {
                rows += texts[j].len();
                j += 1;
            }
            let group = &texts[i..j];
            let mut kvs: Vec<Box<dyn KvStore>> = group.iter().map(|_| model.backend.new_kv(&model.spec.layers)).collect();
            let mut items: Vec<Item> = kvs
                .iter_mut()
                .zip(group)
                .map(|(kv, t)| Item { kv: kv.as_mut(), tokens: t, want: Want::None, hidden: true, abort: &self.abort, adapters: &self.adapters })
                .collect();
            let many = forward_many(&model, &mut items, &mut self.bufs)?;
            drop(items);
            for (k, t) in group.iter().enumerate() {
                let (xi, row0) = many.hidden[k].ok_or_else(|| Error::new(Status::ErrPanic, "an embedding pass kept no hidden rows"))?;
                let h = final_hidden(&model, &many.xs[xi], row0, t.len())?;
                let mut rows: Vec<Vec<f32>> = match pooling {
                    Pooling::None => h.chunks_exact(hidden).map(<[f32]>::to_vec).collect(),
                    Pooling::Mean => vec![mean(&h, hidden)],
                    Pooling::Cls => vec![h[..hidden].to_vec()],
                    Pooling::Last => vec![h[h.len() - hidden..].to_vec()],
                };
                for r in &mut rows {
                    for d in dense {
                        *r = d.apply(r);
                    }
                    if normalize {
                        l2_normalize(r);
                    }
                    if !r.iter().all(|x| x.is_finite()) {
                        return Err(Error::new(Status::ErrNonFinite, format!("the embedding of text {} holds a value that is not finite", i + k)));
                    }
                    values.extend_from_slice(r);
                }
            }
            i = j;
        }
        Ok(Embeddings { dim, pooling, normalized: normalize, values })
    }
}

/// Rows `row0 ..` (`n` of them) of the residual stream `x` through the final norm, read back;
/// a failure of the backend's deferred work in making them is the error (not NaN rows).
fn final_hidden(model: &Model, x: &Tensor, row0: usize, n: usize) -> Result<Vec<f32>> {
    let be = model.backend.as_ref();
    let hidden = model.spec.hidden_size;
    let rows: Vec<usize> = (row0..row0 + n).collect();
    let mut h = be.tensor(n * hidden);
    let mut normed = be.tensor(n * hidden);
    be.gather_rows(x, &rows, hidden, &mut h);
    be.rms_norm(&h, &model.weights.final_norm, model.spec.norm_eps, n, hidden, &mut normed);
    let h = be.read(&normed, n * hidden);
    crate::engine::forward::device_error(model)?;
    Ok(h)
}

/// The mean of `h`'s rows: an f32 sum in row order, divided by the count (sentence-transformers'
/// `sum(token_embeddings * mask) / sum(mask)`).
fn mean(h: &[f32], width: usize) -> Vec<f32> {
    let n = h.len() / width;
    let mut s = vec![0.0f32; width];
    for row in h.chunks_exact(width) {
        for (a, &v) in s.iter_mut().zip(row) {
            *a += v;
        }
    }
    s.iter_mut().for_each(|a| *a /= n as f32);
    s
}

/// `v / max(|v|, 1e-12)` (torch's `F.normalize`), the norm summed in f64.
fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt() as f32;
    let d = norm.max(1e-12);
    v.iter_mut().for_each(|x| *x /= d);
}
