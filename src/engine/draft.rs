//! Drafters: where the speculative step's proposals come from.
//!
//! - `NgramDrafter` (prompt lookup): find the most recent earlier occurrence of the last n
//!   tokens (n from `max_ngram` down to 1) and propose what followed it. No model.
//! - `ModelDrafter`: a second, smaller model with the same tokenizer, in its own session; before
//!   each proposal its session is rolled back to the longest prefix it shares with the target's
//!   history and fed the rest, so it stays in step with what the target accepted.

use std::sync::Arc;

use crate::engine::{Model, Session, Want};
use crate::error::{Error, Result};
use crate::sample::argmax;

pub trait Drafter {
    /// Up to `k` tokens expected after `history` followed by `pending`.
    fn propose(&mut self, history: &[u32], pending: u32, k: usize) -> Result<Vec<u32>>;
}

pub struct NgramDrafter {
    pub max_ngram: usize,
    /// Shortest suffix that counts as a match. One-token matches are mostly chance on prose and
    /// each costs a verify pass, so the default asks for two.
    pub min_ngram: usize,
}

impl Default for NgramDrafter {
    fn default() -> Self {
        NgramDrafter { max_ngram: 3, min_ngram: 2 }
    }
}

impl Drafter for NgramDrafter {
    fn propose(&mut self, history: &[u32], pending: u32, k: usize) -> Result<Vec<u32>> {
        let mut seq = history.to_vec();
        seq.push(pending);
        Ok(ngram_lookup(&seq, self.min_ngram, self.max_ngram, k))
    }
}

/// The continuation of the latest earlier match of `seq`'s last n tokens, longest n first
/// (n from `max_ngram` down to `min_ngram`).
pub fn ngram_lookup(seq: &[u32], min_ngram: usize, max_ngram: usize, k: usize) -> Vec<u32> {
    let len = seq.len();
    for n in (min_ngram.max(1)..=max_ngram.min(len.saturating_sub(1))).rev() {
        let suffix = &seq[len - n..];
        // Latest start s < len - n with seq[s..s+n] == suffix and at least one token after it.
        for s in (0..len - n).rev() {
            if &seq[s..s + n] == suffix {
                let from = s + n;
                // k may be any size (SIZE_MAX from C): capped by what the history holds.
                let to = from.saturating_add(k).min(len);
                if to > from {
                    return seq[from..to].to_vec();
                }
            }
        }
    }
    Vec::new()
}

pub struct ModelDrafter {
    session: Session,
}

impl ModelDrafter {
    /// `target_vocab` must equal the draft model's vocabulary (same tokenizer).
    pub fn new(draft: Arc<Model>, target: &Model) -> Result<ModelDrafter> {
        if draft.vocab.size != target.vocab.size || draft.vocab.bos != target.vocab.bos || draft.vocab.eos != target.vocab.eos {
            return Err(Error::invalid(format!(
                "draft model {} does not share the target's tokenizer ({} vs {} tokens)",
                draft.source, draft.vocab.size, target.vocab.size
            )));
        }
        Ok(ModelDrafter { session: Session::new(draft, 0)? })
    }
}

impl Drafter for ModelDrafter {
    fn propose(&mut self, history: &[u32], pending: u32, k: usize) -> Result<Vec<u32>> {
        let s = &mut self.session;
        let mut seq = history.to_vec();
        seq.push(pending);
        let common = s.tokens.iter().zip(&seq).take_while(|(a, b)| a == b).count();
        // Keep at least one token to re-feed, so that last_logits belongs to seq's end.
        let keep = common.min(seq.len() - 1);
        s.truncate(keep)?;
        let room = s.n_ctx.saturating_sub(seq.len());
        let k = k.min(room);
        if k == 0 {
            return Ok(Vec::new());
        }
        s.step_batch(&seq[keep..], Want::Last)?;
        let mut out = Vec::with_capacity(k);
        for i in 0..k {
            let t = argmax(&s.last_logits);
            out.push(t);
            if i + 1 < k {
                s.step(t)?;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngram_proposes_what_followed_the_latest_match() {
        // "1 2 3 9 ... 1 2 3" -> the latest earlier "1 2 3" is followed by 4 5.
        let seq = [1, 2, 3, 9, 7, 1, 2, 3, 4, 5, 8, 1, 2, 3];
        assert_eq!(ngram_lookup(&seq, 1, 3, 2), vec![4, 5]);
        assert_eq!(ngram_lookup(&seq, 1, 3, 10), vec![4, 5, 8, 1, 2, 3]);
        // No match of any length: nothing.
        assert_eq!(ngram_lookup(&[1, 2, 3], 1, 3, 4), Vec::<u32>::new());
        // Falls back to shorter n-grams, down to the minimum.
        assert_eq!(ngram_lookup(&[5, 6, 1, 7, 1], 1, 3, 1), vec![7]);
        assert_eq!(ngram_lookup(&[5, 6, 1, 7, 1], 2, 3, 1), Vec::<u32>::new());
    }

    #[test]
    fn ngram_with_the_largest_k_proposes_the_whole_continuation() {
        let seq = [1, 2, 3, 9, 7, 1, 2, 3, 4, 5, 8, 1, 2, 3];
        assert_eq!(ngram_lookup(&seq, 1, 3, usize::MAX), vec![4, 5, 8, 1, 2, 3]);
    }
}
