//! A chain's samplers run at `llama_decode` ("backend sampling", llama.h's [EXPERIMENTAL]
//! `llama_set_sampler`): llama.cpp runs a chain's leading samplers that have a backend form
//! inside its graph, on each output row of the sequence the chain is attached to, and keeps
//! four results per row (llama-graph.cpp's `build_sampling`): the logits the samplers left,
//! their token ids when a sampler narrowed them ("candidates"), the probabilities a `dist`
//! computed, and the token a `greedy` or `dist` selected. The rest of the chain runs in
//! `llama_sampler_sample` on what they left.
//!
//! Here the leading samplers run on the host right after the pass, with each backend form's
//! arithmetic as llama-sampler.cpp builds it in ggml:
//! - `greedy`: the first largest logit (ggml_argmax);
//! - `dist`: probabilities softmax(logits) in f32, their running sum in f32, one uniform double
//!   from the sampler's generator (cast to float, as `backend_set_input` does), and the first
//!   entry whose running sum is above it (the last when none is: the clamp of its index);
//! - `top-k` (k > 0): the k largest logits and their ids (llama.cpp's order is unspecified,
//!   "in no particular order"; here largest first);
//! - `temp`: logits times 1/t; t <= 0 keeps only the first largest logit and its id;
//! - the empty samplers ("?temp", "?top-k", ...): nothing.
//! The prefix ends at the first other sampler (top-p, min-p, penalties, logit-bias and
//! temp-ext have backend forms in llama.cpp that are not reproduced here; they, and
//! every sampler after them, run in `llama_sampler_sample`, with the same result for the
//! chain as a whole). One difference on purpose: llama.cpp's backend `greedy` gives the index
//! of the largest logit without mapping it through the candidates a top-k before it left;
//! here the token is the candidate's id, the token llama.h documents.

use super::{kind, Kind};
use crate::abi::{Sampler, Token};

/// One output row's results (llama-context.cpp's `sampling` buffers for that row); an empty
/// vector is llama.cpp's count 0 ("not generated").
#[derive(Default)]
pub struct RowSample {
    /// LLAMA_TOKEN_NULL (-1) when no sampler selected one.
    pub sampled: Token,
    pub logits: Vec<f32>,
    pub probs: Vec<f32>,
    pub candidates: Vec<Token>,
}

impl RowSample {
    /// A row of a sequence with no sampler attached: nothing generated.
    pub fn none() -> RowSample {
        RowSample { sampled: -1, ..RowSample::default() }
    }
}

/// Whether a sampler has a backend form here (see the module's list).
unsafe fn runs_at_decode(s: *const Sampler) -> bool {
    match kind(s) {
        Some(Kind::Greedy | Kind::Dist { .. } | Kind::Temp(_) | Kind::Empty(_)) => true,
        Some(Kind::TopK(k)) => *k > 0,
        _ => false,
    }
}

/// llama.cpp's `llama_sampler_chain_backend_init`: marks the chain's longest prefix of
/// samplers with a backend form as run at decode; returns its length. None when `chain` is
/// not one of this library's chains. A chain already initialized keeps its prefix (llama.cpp
/// asserts against a second init).
pub unsafe fn init(chain: *mut Sampler) -> Option<usize> {
    match kind(chain) {
        Some(Kind::Chain { samplers, backend, .. }) => {
            if backend.is_none() {
                let n = samplers.iter().take_while(|&&s| runs_at_decode(s)).count();
                *backend = Some(n);
            }
            *backend
        }
        _ => None,
    }
}

/// Runs the chain's decode-time prefix on one output row's logits (`llama_sampler_data`
/// starts as the whole row, no candidates, no probabilities, nothing sampled).
pub unsafe fn run(chain: *mut Sampler, row: &[f32]) -> RowSample {
    let Some(Kind::Chain { samplers, backend: Some(n), .. }) = kind(chain) else { return RowSample::none() };
    let mut out = RowSample { sampled: -1, logits: row.to_vec(), probs: Vec::new(), candidates: Vec::new() };
    let mut candidates: Option<Vec<Token>> = None;
    let mut sampled: Option<usize> = None;
    for &s in samplers.iter().take(*n) {
        match kind(s) {
            Some(Kind::Greedy) => sampled = Some(first_max(&out.logits)),
            Some(Kind::Dist { rng, .. }) => {
                let probs = softmax_f32(&out.logits);
                let u = rng.uniform() as f32;
                let mut run = 0.0f32;
                let mut idx = probs.len().saturating_sub(1);
                for (i, p) in probs.iter().enumerate() {
                    run += p;
                    if run - u > 0.0 {
                        idx = i;
                        break;
                    }
                }
                sampled = Some(idx);
                out.probs = probs;
            }
            Some(Kind::TopK(k)) => {
                let mut order: Vec<usize> = (0..out.logits.len()).collect();
                order.sort_by(|&a, &b| out.logits[b].total_cmp(&out.logits[a]).then(a.cmp(&b)));
                order.truncate(*k as usize);
                candidates = Some(order.iter().map(|&i| id_of(&candidates, i)).collect());
                out.logits = order.iter().map(|&i| out.logits[i]).collect();
            }
            Some(Kind::Temp(t)) if *t <= 0.0 => {
                let i = first_max(&out.logits);
                candidates = Some(vec![id_of(&candidates, i)]);
                out.logits = vec![out.logits[i]];
            }
            Some(Kind::Temp(t)) => {
                let scale = 1.0f32 / *t;
                for l in out.logits.iter_mut() {
                    *l *= scale;
                }
            }
            _ => {}
        }
    }
    out.sampled = sampled.map_or(-1, |i| id_of(&candidates, i));
    out.candidates = candidates.unwrap_or_default();
    out
}

/// The token id of entry `i`: the candidate's, or `i` itself over the whole vocabulary.
fn id_of(candidates: &Option<Vec<Token>>, i: usize) -> Token {
    match candidates {
        Some(c) => c.get(i).copied().unwrap_or(-1),
        None => i as Token,
    }
}

/// ggml_argmax: the first largest value (0 for an empty row).
fn first_max(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// ggml_soft_max on the host: exp(x - max) in f32, summed in f64, each scaled by 1/sum.
fn softmax_f32(v: &[f32]) -> Vec<f32> {
    let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = v.iter().map(|&x| (x - max).exp()).collect();
    let sum: f64 = e.iter().map(|&x| x as f64).sum();
    let scale = (1.0 / sum) as f32;
    e.iter().map(|&x| x * scale).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::SamplerChainParams;
    use crate::sampler::{llama_sampler_chain_add, llama_sampler_chain_init, llama_sampler_free, llama_sampler_init_dist, llama_sampler_init_greedy, llama_sampler_init_top_k, llama_sampler_init_top_p};

    #[test]
    fn prefix_stops_at_the_first_sampler_without_a_backend_form() {
        unsafe {
            let chain = llama_sampler_chain_init(SamplerChainParams { no_perf: true });
            llama_sampler_chain_add(chain, llama_sampler_init_top_k(2));
            llama_sampler_chain_add(chain, llama_sampler_init_top_p(0.5, 1));
            llama_sampler_chain_add(chain, llama_sampler_init_greedy());
            assert_eq!(init(chain), Some(1));
            // Logits 1, 4, 3, 2: the top two are ids 1 and 2 (logits 4 and 3); nothing selected.
            let r = run(chain, &[1.0, 4.0, 3.0, 2.0]);
            assert_eq!((r.sampled, r.candidates, r.logits, r.probs.len()), (-1, vec![1, 2], vec![4.0, 3.0], 0));
            llama_sampler_free(chain);
        }
    }

    #[test]
    fn greedy_maps_through_top_k_and_dist_gives_probabilities() {
        unsafe {
            let chain = llama_sampler_chain_init(SamplerChainParams { no_perf: true });
            llama_sampler_chain_add(chain, llama_sampler_init_top_k(3));
            llama_sampler_chain_add(chain, llama_sampler_init_greedy());
            assert_eq!(init(chain), Some(2));
            // The largest logit is id 2's: greedy's index 0 among the candidates maps to it.
            assert_eq!(run(chain, &[0.0, 1.0, 5.0, 2.0]).sampled, 2);
            llama_sampler_free(chain);
            // dist over logits ln 1, ln 3: probabilities 1/4, 3/4 (by hand).
            let chain = llama_sampler_chain_init(SamplerChainParams { no_perf: true });
            llama_sampler_chain_add(chain, llama_sampler_init_dist(7));
            init(chain);
            let r = run(chain, &[0.0, 3f32.ln()]);
            assert!((r.probs[0] - 0.25).abs() < 1e-6 && (r.probs[1] - 0.75).abs() < 1e-6);
            assert!(r.sampled == 0 || r.sampled == 1);
            assert_eq!(r.logits.len(), 2);
            llama_sampler_free(chain);
        }
    }
}
