//! The DRY ("don't repeat yourself") sampler, as llama.cpp's src/llama-sampler.cpp defines it
//! (p-e-w's design, text-generation-webui PR 5677, by way of koboldcpp PR 982): a token that
//! would extend a repeat of at least `allowed_length` tokens of the recent history loses
//! `multiplier * base^(length - allowed_length)` from its logit. A repeat does not reach back
//! past a sequence breaker (a text such as "\n", matched over token boundaries).

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, CStr};
use std::ptr;

use super::{new_sampler, Kind};
use crate::abi::{Sampler, Token, TokenData};
use crate::adapter::Vocab;
use crate::log::guard;
use crate::model::{model_ref, LlamaModel};

/// llama.cpp's bounds on a breaker: its bytes, and the tokens of its tail.
const MAX_CHAR_LEN: usize = 40;
const MAX_SEQ_LEN: usize = 20;

/// ln of the largest float, approximately: the exponent is capped so that the penalty stays
/// finite. llama.cpp's literal, digits and all.
#[allow(clippy::excessive_precision)]
const FLOAT_MAX_LOG: f32 = 88.722_839_1;

#[derive(Clone)]
pub struct Dry {
    pub multiplier: f32,
    pub base: f32,
    pub allowed_length: i32,
    /// At least 1 (a sampler with 0 is llama.cpp's empty "?dry").
    pub penalty_last_n: i32,
    /// Each token that can begin a breaker, with the tokens that must follow it to complete
    /// one (empty: the token alone is one).
    pub breakers: HashMap<Token, Vec<Vec<Token>>>,
    /// The last `penalty_last_n` tokens accepted, oldest first.
    pub last_tokens: VecDeque<Token>,
}

/// Whether llama.cpp makes a working DRY sampler of these settings (else its "?dry", which
/// does nothing).
pub fn enabled(multiplier: f32, base: f32, penalty_last_n: i32) -> bool {
    multiplier != 0.0 && base >= 1.0 && penalty_last_n != 0
}

/// Text as llama.cpp's tokenizer reads bytes: each byte that does not begin a valid UTF-8
/// character becomes U+FFFD (unicode_cpts_from_utf8).
fn lossy_per_byte(mut bytes: &[u8]) -> String {
    let mut out = String::new();
    while !bytes.is_empty() {
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                out.push_str(s);
                break;
            }
            Err(e) => {
                let (good, rest) = bytes.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(good).unwrap_or_default());
                out.push('\u{FFFD}');
                bytes = &rest[1..];
            }
        }
    }
    out
}

/// llama.cpp's `get_overlapping_token_sequences`: every token whose text (control tokens'
/// included) contains `text` is a breaker alone; a token whose text ends with a beginning of
/// `text` begins one, completed by the tokens of the rest of `text` (at most `MAX_SEQ_LEN`).
fn add_breaker(vocab: &Vocab, text: &[u8], out: &mut HashMap<Token, Vec<Vec<Token>>>) {
    let Some(&first) = text.first() else { return };
    for id in 0..vocab.n_vocab() as u32 {
        let word = vocab.piece(id, true);
        let token = id as Token;
        if word.windows(text.len()).any(|w| w == text) {
            out.entry(token).or_default().push(Vec::new());
            continue;
        }
        for pos in (0..word.len()).filter(|&p| word[p] == first) {
            // What follows `pos` must be a beginning of `text` (all of the word's end).
            let n = (word.len() - pos).min(text.len());
            if word[pos..pos + n] != text[..n] {
                continue;
            }
            let mut tail: Vec<Token> = vocab.tokenize(&lossy_per_byte(&text[n..])).unwrap_or_default().into_iter().map(|t| t as Token).collect();
            tail.truncate(MAX_SEQ_LEN);
            let tails = out.entry(token).or_default();
            if !tails.contains(&tail) {
                tails.push(tail);
            }
        }
    }
}

impl Dry {
    /// The breakers are texts (NULL or empty ones skipped, each cut to `MAX_CHAR_LEN` bytes,
    /// as llama.cpp does, which logs a warning for each).
    pub fn new(vocab: Option<&Vocab>, multiplier: f32, base: f32, allowed_length: i32, penalty_last_n: i32, breakers: &[Vec<u8>]) -> Dry {
        let mut processed = HashMap::new();
        if let Some(vocab) = vocab {
            for b in breakers.iter().filter(|b| !b.is_empty()) {
                add_breaker(vocab, &b[..b.len().min(MAX_CHAR_LEN)], &mut processed);
            }
        }
        Dry { multiplier, base, allowed_length, penalty_last_n, breakers: processed, last_tokens: VecDeque::new() }
    }

    fn active(&self) -> bool {
        enabled(self.multiplier, self.base, self.penalty_last_n)
    }

    pub fn accept(&mut self, token: Token) {
        if !self.active() {
            return;
        }
        if self.last_tokens.len() == self.penalty_last_n as usize {
            self.last_tokens.pop_front();
        }
        self.last_tokens.push_back(token);
    }

    pub fn reset(&mut self) {
        self.last_tokens.clear();
    }

    /// The token `i` places from the newest (llama.cpp's ring buffer `rat`).
    fn rat(&self, i: usize) -> Token {
        self.last_tokens[self.last_tokens.len() - 1 - i]
    }

    /// How far back from the newest token a repeat may reach: up to the newest breaker.
    fn rep_limit(&self, last_n_repeat: usize) -> usize {
        for i in 0..last_n_repeat {
            let Some(tails) = self.breakers.get(&self.rat(i)) else { continue };
            let mut longest: Option<usize> = None;
            for tail in tails {
                let seq_len = tail.len();
                if longest.is_none_or(|l| seq_len > l) && seq_len <= i && (0..seq_len).all(|o| tail[o] == self.rat(i - o - 1)) {
                    longest = Some(seq_len);
                }
            }
            if let Some(l) = longest {
                return i - l;
            }
        }
        last_n_repeat
    }

    /// `counts[last - k]`: how many tokens of the history, ending `k` places before the
    /// newest, equal the newest ones (a suffix match), capped at `rep_limit`; by the
    /// Z-algorithm run backwards, as llama.cpp runs it.
    fn repeat_counts(&self, last_n_repeat: usize, rep_limit: usize) -> Vec<usize> {
        let mut counts = vec![0usize; last_n_repeat];
        let last = last_n_repeat - 1;
        let (mut lt, mut rt) = (0usize, 0usize);
        for k in 1..last_n_repeat {
            if k > rt {
                let mut n = 0;
                while n + k < last_n_repeat && self.rat(n) == self.rat(n + k) {
                    n += 1;
                }
                counts[last - k] = n.min(rep_limit);
                if n > 0 {
                    lt = k;
                    rt = k + n - 1;
                }
            } else {
                let p = k - lt;
                let right_part_len = rt - k + 1;
                if counts[last - p] < right_part_len {
                    counts[last - k] = counts[last - p].min(rep_limit);
                } else {
                    let mut i = rt + 1;
                    while i < last_n_repeat && self.rat(i) == self.rat(i - k) {
                        i += 1;
                    }
                    counts[last - k] = (i - k).min(rep_limit);
                    lt = k;
                    rt = i - 1;
                }
            }
        }
        counts
    }

    pub fn apply(&mut self, v: &mut [TokenData], sorted: &mut bool) {
        if !self.active() {
            return;
        }
        let last_n_repeat = self.last_tokens.len().min(self.penalty_last_n as usize);
        if last_n_repeat as i64 <= self.allowed_length as i64 {
            return;
        }
        let rep_limit = self.rep_limit(last_n_repeat);
        if (rep_limit as i64) < self.allowed_length as i64 {
            return;
        }
        let counts = self.repeat_counts(last_n_repeat, rep_limit);
        // The token after each repeat would extend it: the longest repeat each would extend.
        let mut max_repeat: HashMap<Token, usize> = HashMap::new();
        for (i, &len) in counts.iter().enumerate().take(last_n_repeat - 1) {
            if len as i64 >= self.allowed_length as i64 {
                let token = self.rat(last_n_repeat - 2 - i);
                let m = max_repeat.entry(token).or_insert(len);
                *m = (*m).max(len);
            }
        }
        let max_exponent = if self.base > 1.000_001 { (FLOAT_MAX_LOG / self.base.ln()) as i32 } else { 0 };
        for d in v.iter_mut() {
            let Some(&len) = max_repeat.get(&d.id) else { continue };
            // A token that is a breaker by itself is never penalized.
            if self.breakers.get(&d.id).is_some_and(|tails| tails.iter().any(Vec::is_empty)) {
                continue;
            }
            let mut exponent = len as i32 - self.allowed_length;
            if max_exponent > 0 && exponent > max_exponent {
                exponent = max_exponent;
            }
            // float penalty = multiplier * std::pow(base, exponent): the power in double
            // (std::pow(float, int) promotes), the product rounded to float. The exponent is
            // hidden from the optimizer, which may turn pow of an integer into powi.
            let power = (self.base as f64).powf(std::hint::black_box(exponent as f64));
            let penalty = (self.multiplier as f64 * power) as f32;
            d.logit -= penalty;
        }
        *sorted = false;
    }
}

/// DRY over `vocab` (the model): penalizes the token that would extend a repeat of the last
/// `dry_penalty_last_n` tokens longer than `dry_allowed_length`, by
/// `dry_multiplier * dry_base^(length - allowed)`; repeats stop at the texts `seq_breakers`
/// (NULL or empty ones skipped, each cut to 40 bytes). With `dry_multiplier` 0, `dry_base`
/// below 1 or `dry_penalty_last_n` <= 0 llama.cpp's empty "?dry". The vocabulary is read once,
/// here (NULL is refused unless there are no breakers).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_dry(
    vocab: *const LlamaModel,
    dry_multiplier: f32,
    dry_base: f32,
    dry_allowed_length: i32,
    dry_penalty_last_n: i32,
    seq_breakers: *const *const c_char,
    num_breakers: usize,
) -> *mut Sampler {
    const F: &str = "llama_sampler_init_dry";
    guard(F, ptr::null_mut(), || {
        let last_n = dry_penalty_last_n.max(0);
        if !enabled(dry_multiplier, dry_base, last_n) {
            return new_sampler(Kind::Empty(c"?dry"));
        }
        let mut breakers = Vec::new();
        if !seq_breakers.is_null() {
            for i in 0..num_breakers {
                let b = *seq_breakers.add(i);
                if b.is_null() {
                    continue;
                }
                breakers.push(CStr::from_ptr(b).to_bytes().to_vec());
            }
        }
        let v = if breakers.iter().any(|b| !b.is_empty()) {
            match model_ref(F, vocab) {
                Some(m) => Some(m.engine.vocab()),
                None => return ptr::null_mut(),
            }
        } else {
            None
        };
        new_sampler(Kind::Dry(Box::new(Dry::new(v.as_ref(), dry_multiplier, dry_base, dry_allowed_length, last_n, &breakers))))
    })
}

#[cfg(test)]
mod tests {
    //! Values worked by hand from llama.cpp's definitions, with breakers given as tokens (as
    //! llama.cpp's own test-sampling.cpp does through llama_sampler_init_dry_testing).
    use super::*;

    fn dry(history: &[Token], breakers: &[&[Token]]) -> Dry {
        let mut d = Dry { multiplier: 1.0, base: 2.0, allowed_length: 2, penalty_last_n: 16, breakers: HashMap::new(), last_tokens: VecDeque::new() };
        for b in breakers {
            d.breakers.entry(b[0]).or_default().push(b[1..].to_vec());
        }
        for &t in history {
            d.accept(t);
        }
        d
    }

    fn penalized(d: &mut Dry, n: usize) -> Vec<f32> {
        let mut v: Vec<TokenData> = (0..n).map(|i| TokenData { id: i as Token, logit: 0.0, p: 0.0 }).collect();
        d.apply(&mut v, &mut true);
        v.iter().map(|d| d.logit).collect()
    }

    #[test]
    fn the_token_that_would_extend_a_repeat_is_penalized() {
        // History 0 1 2 3 0 1 2: its newest three tokens came before, followed by 3, so 3
        // would extend a repeat of 3 tokens: exponent 3 - allowed 2 = 1, penalty 1 * 2^1.
        let mut d = dry(&[0, 1, 2, 3, 0, 1, 2], &[]);
        assert_eq!(penalized(&mut d, 5), vec![0.0, 0.0, 0.0, -2.0, 0.0]);
        // "1 2" again, once followed by 4: a repeat of 2 = allowed, exponent 0, penalty 1.
        let mut d = dry(&[1, 2, 4, 1, 2], &[]);
        assert_eq!(penalized(&mut d, 5), vec![0.0, 0.0, 0.0, 0.0, -1.0]);
        // A repeat shorter than allowed_length ("2" alone): nothing.
        let mut d = dry(&[2, 4, 0, 2], &[]);
        assert_eq!(penalized(&mut d, 5), vec![0.0; 5]);
    }

    #[test]
    fn a_breaker_stops_the_repeat_and_is_never_penalized() {
        // With 0 a breaker, the newest 0 (two places back) bounds the repeat "0 1 2" to 2
        // tokens: exponent 0, penalty 1 instead of 2.
        let mut d = dry(&[0, 1, 2, 3, 0, 1, 2], &[&[0]]);
        assert_eq!(penalized(&mut d, 5), vec![0.0, 0.0, 0.0, -1.0, 0.0]);
        // 1 would extend the repeat "3 0" (history 3 0 1 5 3 0) but is a breaker: spared.
        let mut d = dry(&[3, 0, 1, 5, 3, 0], &[&[1]]);
        assert_eq!(penalized(&mut d, 5), vec![0.0; 5]);
        // History 4 3 0 1 4 3 0 1: 4 would extend a repeat of 4 (penalty 2^2) ...
        let mut d = dry(&[4, 3, 0, 1, 4, 3, 0, 1], &[]);
        assert_eq!(penalized(&mut d, 5), vec![0.0, 0.0, 0.0, 0.0, -4.0]);
        // ... but with the two-token breaker "4 3" (head 4, tail 3), its newest match (the 4
        // three places back) bounds the repeat to 3 - 1 = 2: penalty 2^0. The head of a
        // longer breaker is not a breaker alone, so 4 is penalized.
        let mut d = dry(&[4, 3, 0, 1, 4, 3, 0, 1], &[&[4, 3]]);
        assert_eq!(penalized(&mut d, 5), vec![0.0, 0.0, 0.0, 0.0, -1.0]);
    }

    #[test]
    fn the_history_keeps_the_last_n_and_reset_clears_it() {
        let mut d = dry(&[], &[]);
        d.penalty_last_n = 3;
        for t in [7, 8, 9, 10] {
            d.accept(t);
        }
        assert_eq!(d.last_tokens, VecDeque::from(vec![8, 9, 10]));
        d.reset();
        assert!(d.last_tokens.is_empty());
    }

    #[test]
    fn lossy_per_byte_replaces_each_bad_byte() {
        assert_eq!(lossy_per_byte(b"a\x80\x80b"), "a\u{FFFD}\u{FFFD}b");
        assert_eq!(lossy_per_byte("é:".as_bytes()), "é:");
    }
}
