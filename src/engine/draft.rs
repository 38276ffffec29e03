//! Drafters: where the speculative step's proposals come from.
//!
//! - `NgramDrafter` (prompt lookup): find the earlier occurrences of the last n tokens (n from
//!   `max_ngram` down to `min_ngram`) and propose what they agree followed them
//!   (`ngram_lookup`), as many tokens as its last proposals earned (`adapt`). No model.
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

/// The longest suffix `NgramDrafter::default` looks up.
pub const DEFAULT_MAX_NGRAM: usize = 5;

pub struct NgramDrafter {
    pub max_ngram: usize,
    /// Shortest suffix that counts as a match. One-token matches are mostly chance on prose and
    /// each costs a verify pass, so the default asks for two.
    pub min_ngram: usize,
    /// The most tokens the next proposal may have (`adapt`); 0 before the first.
    cap: usize,
    /// The last proposal, and the length of the sequence it followed.
    last: Vec<u32>,
    last_at: usize,
}

impl Default for NgramDrafter {
    /// Suffixes of 5 tokens down to 2 (`ngram_lookup` says why 5).
    fn default() -> Self {
        NgramDrafter::new(DEFAULT_MAX_NGRAM, 2)
    }
}

impl NgramDrafter {
    pub fn new(max_ngram: usize, min_ngram: usize) -> NgramDrafter {
        NgramDrafter { max_ngram, min_ngram, cap: 0, last: Vec::new(), last_at: 0 }
    }

    /// The proposal length from how much of the last proposal `seq` took: a rejected token
    /// costs a row of a verify pass for nothing, so after a proposal was cut the next may have
    /// half as many tokens as allowed before (at least one more than were taken); after one
    /// taken whole, twice as many as it had, up to `k`. After a proposal that found no match,
    /// the allowance stays; where `seq` is no longer than the sequence the last proposal
    /// followed (a truncated session), it starts again at `k`.
    fn adapt(&mut self, seq: &[u32], k: usize) -> usize {
        let prior = std::mem::take(&mut self.last);
        let cap = if self.cap == 0 || seq.len() <= self.last_at {
            k
        } else if prior.is_empty() {
            self.cap
        } else {
            let taken = seq[self.last_at..].iter().zip(&prior).take_while(|(a, b)| a == b).count();
            if taken >= prior.len() {
                2 * prior.len().max(self.cap / 2)
            } else {
                (taken + 1).max(self.cap / 2)
            }
        };
        cap.clamp(1, k.max(1))
    }
}

impl Drafter for NgramDrafter {
    fn propose(&mut self, history: &[u32], pending: u32, k: usize) -> Result<Vec<u32>> {
        let mut seq = history.to_vec();
        seq.push(pending);
        let cap = self.adapt(&seq, k);
        let draft = ngram_lookup(&seq, self.min_ngram, self.max_ngram, cap);
        self.cap = cap;
        self.last.clone_from(&draft);
        self.last_at = seq.len();
        Ok(draft)
    }
}

/// What the history says follows `seq`: for the longest suffix of n tokens (n from
/// `max_ngram` down to `min_ngram`) that occurred earlier, the tokens on which most of its
/// earlier occurrences agree, one at a time. Token j of the proposal is the one that more than
/// half of the occurrences still in the running (those that agreed on tokens 0..j and have a
/// token j) continue with; the proposal ends where no token has such a majority, after `k`
/// tokens, or at the end of the history. An occurrence that disagreed drops out, so after a
/// shared start the proposal follows the occurrences that share it.
///
/// A suffix seen once proposes what followed it (copying code, the common case). A suffix seen
/// after different tokens (", the" in prose, "# The" before varied comments) proposes only as
/// far as its occurrences agree: a rejected token costs a row of a verify pass for nothing.
/// Where the longest suffix that occurred has no majority at its first token, there is no
/// proposal: that is the longest context the history has seen, and it is divided.
///
/// Chosen on three code-editing requests other than the benchmark's (examples/draft_replay.rs,
/// which counts rounds instead of timing them, under a verify of d drafts costing 1.1 + 0.12 d
/// steps; geometric mean over SmolLM2 Q4_1 and Q8_0, Gemma3 Q4_K_M and Q4_0): the
/// latest-occurrence lookup with suffixes from 3 tokens gave 2.47x, this rule with suffixes
/// from 5, 2.98x (suffixes from 5 with the latest occurrence alone: about 2.7x, in a replica
/// of that count).
pub fn ngram_lookup(seq: &[u32], min_ngram: usize, max_ngram: usize, k: usize) -> Vec<u32> {
    let len = seq.len();
    for n in (min_ngram.max(1)..=max_ngram.min(len.saturating_sub(1))).rev() {
        let suffix = &seq[len - n..];
        // Where the token after each earlier occurrence lies: starts s < len - n, so at least
        // one token follows.
        let mut alive: Vec<usize> = (0..len - n).filter(|&s| &seq[s..s + n] == suffix).map(|s| s + n).collect();
        if alive.is_empty() {
            continue;
        }
        let mut out = Vec::new();
        // k may be any size (SIZE_MAX from C): the history bounds the loop.
        while out.len() < k {
            let j = out.len();
            alive.retain(|&c| c + j < len);
            let Some(t) = majority(alive.iter().map(|&c| seq[c + j])) else { break };
            out.push(t);
            alive.retain(|&c| seq[c + j] == t);
        }
        return out;
    }
    Vec::new()
}

/// The value that more than half of `items` equal, if any (Boyer-Moore vote, then a count).
fn majority(items: impl Iterator<Item = u32> + Clone) -> Option<u32> {
    let (mut cand, mut votes) = (0u32, 0usize);
    for t in items.clone() {
        if votes == 0 {
            cand = t;
        }
        votes = if t == cand { votes + 1 } else { votes - 1 };
    }
    let (mut total, mut count) = (0usize, 0usize);
    for t in items {
        total += 1;
        count += (t == cand) as usize;
    }
    (total > 0 && 2 * count > total).then_some(cand)
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
    fn ngram_proposes_what_the_earlier_occurrences_agree_on() {
        // One earlier "1 2 3" (at 0): what followed it, up to k or the end of the history.
        let seq = [1, 2, 3, 4, 5, 8, 9, 7, 1, 2, 3];
        assert_eq!(ngram_lookup(&seq, 1, 3, 2), vec![4, 5]);
        assert_eq!(ngram_lookup(&seq, 1, 3, 10), vec![4, 5, 8, 9, 7, 1, 2, 3]);
        // Two earlier "1 2 3", followed by 9 and by 4: no majority, no proposal (the shorter
        // suffixes are not tried: "2 3" and "3" have the same two occurrences).
        assert_eq!(ngram_lookup(&[1, 2, 3, 9, 7, 1, 2, 3, 4, 5, 8, 1, 2, 3], 1, 3, 4), Vec::<u32>::new());
        // Three, followed by 4 6, 4 5 and 9: 4 has two of three; then 6 against 5 is a tie.
        assert_eq!(ngram_lookup(&[1, 2, 3, 4, 6, 1, 2, 3, 4, 5, 1, 2, 3, 9, 1, 2, 3], 2, 3, 8), vec![4]);
        // "1 2" at 0, 6 and 12, followed by 4 5 7 0 1 2 4 5, 4 5 7 0 1 2 4 6 and 4 6: 4, then
        // 5 (two of three), then the two left agree up to 5 against 6.
        let seq = [1, 2, 4, 5, 7, 0, 1, 2, 4, 5, 7, 0, 1, 2, 4, 6, 0, 1, 2];
        assert_eq!(ngram_lookup(&seq, 2, 2, 4), vec![4, 5, 7, 0]);
        assert_eq!(ngram_lookup(&seq, 2, 2, 8), vec![4, 5, 7, 0, 1, 2, 4]);
        // An occurrence drops out where the history ends after it: "7 1" at 0 and 3 agree on
        // 2 7 1; then the one at 3 has no more tokens and the one at 0 goes on alone.
        assert_eq!(ngram_lookup(&[7, 1, 2, 7, 1, 2, 7, 1], 2, 2, 8), vec![2, 7, 1, 2, 7, 1]);
        // The longest suffix that occurred decides: "7 1" once (followed by 2) over "1" three
        // times (followed by 5, 5 and 2).
        assert_eq!(ngram_lookup(&[1, 5, 1, 5, 7, 1, 2, 0, 7, 1], 1, 3, 1), vec![2]);
        assert_eq!(ngram_lookup(&[1, 5, 1, 5, 7, 1, 2, 0, 8, 1], 1, 3, 1), vec![5]);
        // No match of any length: nothing.
        assert_eq!(ngram_lookup(&[1, 2, 3], 1, 3, 4), Vec::<u32>::new());
        // Falls back to shorter n-grams, down to the minimum.
        assert_eq!(ngram_lookup(&[5, 6, 1, 7, 1], 1, 3, 1), vec![7]);
        assert_eq!(ngram_lookup(&[5, 6, 1, 7, 1], 2, 3, 1), Vec::<u32>::new());
        // k = 0: nothing.
        assert_eq!(ngram_lookup(&seq, 1, 3, 0), Vec::<u32>::new());
    }

    #[test]
    fn majority_needs_more_than_half() {
        assert_eq!(majority([3, 1, 3].into_iter()), Some(3));
        assert_eq!(majority([1, 3, 3, 1].into_iter()), None);
        assert_eq!(majority([1, 2, 3].into_iter()), None);
        assert_eq!(majority([2, 1, 1, 2, 2].into_iter()), Some(2));
        assert_eq!(majority([9].into_iter()), Some(9));
        assert_eq!(majority(std::iter::empty()), None);
    }

    /// The proposal length follows what was taken: halved (but one past the taken part) after
    /// a cut, doubled after a proposal taken whole (up to k), kept after no match, reset by a
    /// history no longer than before.
    #[test]
    fn ngram_proposals_shrink_after_rejections_and_grow_after_acceptance() {
        let state = |cap: usize, last: Vec<u32>| {
            let mut d = NgramDrafter::default();
            (d.cap, d.last, d.last_at) = (cap, last, 5);
            d
        };
        let seq = |tail: &[u32]| [&[0u32; 5][..], tail].concat();
        assert_eq!(NgramDrafter::default().adapt(&seq(&[1]), 8), 8, "the first proposal: k");
        // Two of eight taken: max(2 + 1, 8 / 2).
        assert_eq!(state(8, (10..18).collect()).adapt(&seq(&[10, 11, 50]), 8), 4);
        // Six of eight taken: one more than that.
        assert_eq!(state(4, (10..18).collect()).adapt(&seq(&[10, 11, 12, 13, 14, 15, 50]), 8), 7);
        // None taken: half the allowance, at least one.
        assert_eq!(state(8, vec![10, 11]).adapt(&seq(&[50]), 8), 4);
        assert_eq!(state(1, vec![10]).adapt(&seq(&[50]), 8), 1);
        // Taken whole: twice as many, up to k.
        assert_eq!(state(4, vec![10, 11]).adapt(&seq(&[10, 11, 50]), 8), 4);
        assert_eq!(state(4, (10..14).collect()).adapt(&seq(&[10, 11, 12, 13, 50]), 8), 8);
        assert_eq!(state(8, (10..18).collect()).adapt(&seq(&(10..19).collect::<Vec<u32>>()), 8), 8);
        // No match last time: the allowance stays; a shorter history: k again.
        assert_eq!(state(3, vec![]).adapt(&seq(&[50]), 8), 3);
        assert_eq!(state(3, vec![10]).adapt(&[0, 0, 0], 8), 8);
        // Through propose: the allowance is what the lookup is capped at.
        let mut d = state(8, (10..18).collect());
        let mut h = vec![1u32, 2];
        h.extend(10..30);
        h.extend([0, 1]);
        d.last_at = h.len() - 2;
        // The tail after last_at is [0, 1] + pending 2: none of 10.. taken -> max(1, 4) = 4.
        assert_eq!(d.propose(&h, 2, 8).unwrap(), vec![10, 11, 12, 13]);
    }

    #[test]
    fn ngram_with_the_largest_k_proposes_the_whole_continuation() {
        let seq = [1, 2, 3, 4, 5, 8, 9, 7, 1, 2, 3];
        assert_eq!(ngram_lookup(&seq, 1, 3, usize::MAX), vec![4, 5, 8, 9, 7, 1, 2, 3]);
    }
}
