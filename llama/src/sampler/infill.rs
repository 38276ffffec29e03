//! The infill sampler (`llama_sampler_init_infill`), for fill-in-the-middle, as llama.cpp's
//! src/llama-sampler.cpp defines it: when 3 * p(end of generation) * (candidates) > p(text),
//! only the end-of-generation tokens stay; else a token whose text begins another's takes the
//! other's probability, and unlikely text tokens go, in two rounds.

use std::ptr;

use super::{new_sampler, softmax_impl, Kind};
use crate::abi::{Sampler, Token, TokenData};
use crate::adapter::Vocab;
use crate::log::{error, guard};
use crate::model::{model_ref, LlamaModel};

#[derive(Clone)]
pub struct Infill {
    pub vocab: Vocab,
}

impl Infill {
    fn is_eog(&self, id: Token) -> bool {
        u32::try_from(id).is_ok_and(|t| self.vocab.is_eog(t))
    }

    /// llama.cpp's `token_to_piece(id, buf, 512, 0, false)`: control tokens give nothing.
    fn piece(&self, id: Token) -> Vec<u8> {
        u32::try_from(id).map(|t| self.vocab.piece(t, false)).unwrap_or_default()
    }

    pub fn apply(&self, v: &mut Vec<TokenData>, sorted: &mut bool) {
        if v.is_empty() {
            // llama.cpp asserts on an empty array.
            return;
        }
        softmax_impl(v, sorted, true);
        let mut p_txt_sum = 0.0f32;
        let mut p_eog_sum = 0.0f32;
        for d in v.iter() {
            if self.is_eog(d.id) {
                p_eog_sum += d.p;
            } else {
                p_txt_sum += d.p;
            }
        }
        if 3.0 * p_eog_sum * v.len() as f32 > p_txt_sum {
            // Keep the end-of-generation tokens only, their probabilities renormalized.
            v.retain(|d| self.is_eog(d.id));
            let p_sum = v.iter().fold(0.0f32, |s, d| s + d.p);
            for d in v.iter_mut() {
                d.p /= p_sum;
            }
            return;
        }
        self.combine_prefixes(v);

        // Text tokens below 0.2 go; then, renormalized, text tokens below 1 / (n + 1), n the
        // text tokens left. Each pass moves what stays to the front, as llama.cpp does.
        let mut n_non_eog = 0usize;
        let mut p_sum = 0.0f32;
        let mut size = 0;
        for i in 0..v.len() {
            let is_eog = self.is_eog(v[i].id);
            if v[i].p < 0.2 && !is_eog {
                continue;
            }
            if !is_eog {
                n_non_eog += 1;
            }
            p_sum += v[i].p;
            v[size] = v[i];
            size += 1;
        }
        if n_non_eog == 0 {
            // One candidate remains: the first slot (an end-of-generation token moved there,
            // else the most probable candidate), made the end of turn (else the EOS) with
            // logit 1 and its p as it was.
            v.truncate(1);
            match self.vocab.eot().or(self.vocab.eos()) {
                Some(t) => v[0].id = t as Token,
                None => error("llama_sampler_infill", "the vocabulary has neither an end-of-turn nor an EOS token (llama.cpp aborts here); the candidate is left as it was"),
            }
            v[0].logit = 1.0;
            return;
        }
        v.truncate(size);
        for d in v.iter_mut() {
            d.p /= p_sum;
        }
        let thold = (1.0f64 / (n_non_eog + 1) as f64) as f32;
        let mut p_sum = 0.0f32;
        v.retain(|d| {
            if d.p < thold && !self.is_eog(d.id) {
                return false;
            }
            p_sum += d.p;
            true
        });
        for d in v.iter_mut() {
            d.p /= p_sum;
        }
    }

    /// Where one candidate's text begins another's, the less probable of the two gives its
    /// probability to the other and becomes impossible (logit -infinity, p 0); pairs in
    /// llama.cpp's order, each seeing the changes before it.
    fn combine_prefixes(&self, v: &mut [TokenData]) {
        let pieces: Vec<Vec<u8>> = v.iter().map(|d| self.piece(d.id)).collect();
        for i0 in 0..v.len() {
            for i1 in 0..v.len() {
                if v[i0].logit == f32::NEG_INFINITY {
                    break;
                }
                if i0 == i1 || v[i1].logit == f32::NEG_INFINITY {
                    continue;
                }
                let (a, b) = (&pieces[i0], &pieces[i1]);
                if !a.is_empty() && a.len() <= b.len() && b[..a.len()] == a[..] {
                    let (dst, src) = if v[i1].p > v[i0].p { (i1, i0) } else { (i0, i1) };
                    v[dst].p += v[src].p;
                    v[src].logit = f32::NEG_INFINITY;
                    v[src].p = 0.0;
                }
            }
        }
    }
}

/// Infill over `vocab` (the model), for fill-in-the-middle: end of generation when it is
/// likely enough, else tokens whose text begins another's merged and unlikely ones dropped.
/// NULL `vocab` is refused.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_infill(vocab: *const LlamaModel) -> *mut Sampler {
    const F: &str = "llama_sampler_init_infill";
    guard(F, ptr::null_mut(), || match model_ref(F, vocab) {
        Some(m) => new_sampler(Kind::Infill(Box::new(Infill { vocab: m.engine.vocab() }))),
        None => ptr::null_mut(),
    })
}
