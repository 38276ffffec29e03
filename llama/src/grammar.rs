//! The grammar sampler (`llama_sampler_init_grammar`, `_lazy`, `_lazy_patterns`) with
//! llama.cpp's semantics (src/llama-sampler.cpp's `llama_sampler_grammar`, and
//! src/llama-grammar.cpp's `llama_grammar_apply_impl`, `llama_grammar_accept_impl` and
//! `llama_grammar_trigger_pattern::find`) over packlm's GBNF constraint.
//!
//! llama.cpp's grammar walks characters; packlm's takes tokens. Where llama.cpp gives its
//! grammar a piece of text rather than a token (the text after a trigger pattern's start, cut
//! inside a token), the text's own tokens are given instead, which take the grammar through
//! the same bytes.
//!
//! One difference stays: in front of text the grammar forces (the rest of a literal), packlm's
//! mask (llguidance's) allows only the first token of the tokenizer's own tokenization of that
//! text, where llama.cpp allows every token whose piece fits (`"re"` forced: the token "re",
//! not "r"). What is generated is in the language either way, and `accept` takes every token
//! llama.cpp's grammar takes.

use std::ffi::{c_char, CStr};

use regex::bytes::Regex;

use crate::abi::{Token, TokenData};
use crate::adapter::Grammar;
use crate::log::error;
use crate::model::{model_ref, LlamaModel};

/// A grammar sampler's state. Cloning gives an independent copy.
#[derive(Clone)]
pub struct GrammarSampler {
    /// The grammar as it was made, for `reset` (llama.cpp parses the text again; a copy of the
    /// fresh grammar is the same state without the work).
    initial: Grammar,
    grammar: Grammar,
    lazy: bool,
    /// Lazy and no trigger seen yet: `apply` changes nothing and `accept` collects text.
    awaiting_trigger: bool,
    trigger_tokens: Vec<Token>,
    trigger_patterns: Vec<Regex>,
    /// The pieces of the tokens taken while awaiting a trigger, and where each one is in it.
    buffer: Vec<u8>,
    positions: Vec<Placed>,
}

/// A token of the trigger buffer and its bytes' range there.
#[derive(Clone, Copy)]
struct Placed {
    token: Token,
    start: usize,
    end: usize,
}

/// The triggers of a lazy grammar, as the C call gives them.
pub enum Lazy {
    No,
    /// llama_sampler_init_grammar_lazy's words: one pattern matching any of them.
    Words(Vec<String>, Vec<Token>),
    Patterns(Vec<String>, Vec<Token>),
}

/// The one pattern llama.cpp makes of trigger words: any text, then one of the words
/// (escaped), then any text; the group starts the constrained text at the word.
fn words_pattern(words: &[String]) -> String {
    let alternatives: Vec<String> = words.iter().map(|w| regex::escape(w)).collect();
    format!("[\\s\\S]*?({})[\\s\\S]*", alternatives.join("|"))
}

/// Where the constrained text starts in `buffer`, or None when `pattern` does not match: the
/// start of the match's first non-empty capture group, else of the whole match
/// (`llama_grammar_trigger_pattern::find`). llama.cpp matches a `^...$` pattern against the
/// whole buffer and any other anywhere; anchored as it is, a search finds exactly the former.
fn trigger_start(pattern: &Regex, buffer: &[u8]) -> Option<usize> {
    let caps = pattern.captures(buffer)?;
    let group = caps.iter().skip(1).flatten().find(|m| !m.is_empty());
    group.or_else(|| caps.get(0)).map(|m| m.start())
}

/// A C string argument as text; None (logged) when NULL or not UTF-8.
pub unsafe fn c_text(function: &str, what: &str, p: *const c_char) -> Option<String> {
    if p.is_null() {
        error(function, &format!("{what} is NULL"));
        return None;
    }
    match CStr::from_ptr(p).to_str() {
        Ok(s) => Some(s.to_string()),
        Err(_) => {
            error(function, &format!("{what} is not valid UTF-8"));
            None
        }
    }
}

/// `n` C strings from `p`; None (logged) when one is NULL or not UTF-8.
pub unsafe fn c_texts(function: &str, what: &str, p: *const *const c_char, n: usize) -> Option<Vec<String>> {
    if n == 0 {
        return Some(Vec::new());
    }
    if p.is_null() {
        error(function, &format!("{what} is NULL with a count of {n}"));
        return None;
    }
    std::slice::from_raw_parts(p, n).iter().enumerate().map(|(i, &s)| c_text(function, &format!("{what}[{i}]"), s)).collect()
}

/// `n` tokens from `p`; None (logged) when `p` is NULL with a count.
pub unsafe fn c_tokens(function: &str, p: *const Token, n: usize) -> Option<Vec<Token>> {
    if n == 0 {
        return Some(Vec::new());
    }
    if p.is_null() {
        error(function, &format!("trigger_tokens is NULL with a count of {n}"));
        return None;
    }
    Some(std::slice::from_raw_parts(p, n).to_vec())
}

/// A grammar, pattern or argument was refused; the log says why.
pub struct Refused;

/// The sampler's state from the C call's arguments: Ok(None) for a NULL or empty grammar (a
/// sampler that does nothing).
pub unsafe fn from_c(function: &str, vocab: *const LlamaModel, grammar_str: *const c_char, grammar_root: *const c_char, lazy: Lazy) -> Result<Option<GrammarSampler>, Refused> {
    if grammar_str.is_null() || *grammar_str == 0 {
        return Ok(None);
    }
    let text = c_text(function, "grammar_str", grammar_str).ok_or(Refused)?;
    let root = c_text(function, "grammar_root", grammar_root).ok_or(Refused)?;
    let model = model_ref(function, vocab).ok_or(Refused)?;
    let (is_lazy, patterns, trigger_tokens) = match lazy {
        Lazy::No => (false, Vec::new(), Vec::new()),
        Lazy::Words(words, tokens) if words.is_empty() => (true, Vec::new(), tokens),
        Lazy::Words(words, tokens) => (true, vec![words_pattern(&words)], tokens),
        Lazy::Patterns(patterns, tokens) => (true, patterns, tokens),
    };
    // llama.cpp compiles patterns with std::regex (ECMAScript); Rust's regex syntax agrees on
    // what clients send (classes, groups, alternation, lazy repetition) and has no
    // backreferences or lookaround, which are refused here.
    let mut trigger_patterns = Vec::with_capacity(patterns.len());
    for p in &patterns {
        match Regex::new(p) {
            Ok(r) => trigger_patterns.push(r),
            Err(e) => {
                error(function, &format!("trigger pattern {p:?} does not compile: {e}"));
                return Err(Refused);
            }
        }
    }
    let grammar = match model.engine.gbnf(&text, &root) {
        Ok(g) => g,
        Err(e) => {
            error(function, &format!("failed to parse grammar: {e}"));
            return Err(Refused);
        }
    };
    Ok(Some(GrammarSampler {
        initial: grammar.clone(),
        grammar,
        lazy: is_lazy,
        awaiting_trigger: is_lazy,
        trigger_tokens,
        trigger_patterns,
        buffer: Vec::new(),
        positions: Vec::new(),
    }))
}

impl GrammarSampler {
    /// Sets the logit of every candidate the grammar does not allow next to -infinity (nothing
    /// while awaiting a trigger); an end-of-generation token is allowed exactly where the
    /// grammar may end. Returns whether a logit changed.
    pub fn apply(&mut self, candidates: &mut [TokenData]) -> bool {
        if self.awaiting_trigger {
            return false;
        }
        // One mask of the whole vocabulary, then a look-up per candidate.
        let mut row = vec![0.0f32; self.grammar.n_vocab()];
        if let Err(e) = self.grammar.mask(&mut row) {
            error("llama_sampler_apply", &format!("the grammar gave no mask ({e}); no token is allowed"));
            row.fill(f32::NEG_INFINITY);
        }
        let mut changed = false;
        for d in candidates.iter_mut() {
            let allowed = usize::try_from(d.id).ok().and_then(|i| row.get(i)).is_some_and(|l| l.is_finite());
            if !allowed && d.logit != f32::NEG_INFINITY {
                d.logit = f32::NEG_INFINITY;
                changed = true;
            }
        }
        changed
    }

    /// Takes `token`: into the trigger buffer while awaiting a trigger, else into the grammar.
    /// A token the grammar refuses (llama.cpp aborts) is logged and changes nothing.
    pub fn accept(&mut self, token: Token) {
        if self.awaiting_trigger {
            self.await_trigger(token);
        } else if let Err(e) = self.take(token) {
            error("llama_sampler_accept", &format!("{e}; the grammar is left as it was"));
        }
    }

    /// Back to the state it was made in.
    pub fn reset(&mut self) {
        self.grammar = self.initial.clone();
        self.awaiting_trigger = self.lazy;
        self.buffer.clear();
        self.positions.clear();
    }

    /// `token`'s piece; empty (logged) for a token outside the vocabulary.
    fn piece(&self, token: Token) -> Vec<u8> {
        match u32::try_from(token).map_err(|_| format!("token {token} is negative")).and_then(|t| self.grammar.piece(t).map_err(|e| e.to_string())) {
            Ok(p) => p,
            Err(e) => {
                error("llama_sampler_accept", &e);
                Vec::new()
            }
        }
    }

    /// Gives `token` to the grammar as llama.cpp does: an end-of-generation token is taken
    /// where the grammar may end and changes nothing (it is not part of the text).
    fn take(&mut self, token: Token) -> Result<(), String> {
        let Ok(t) = u32::try_from(token) else { return Err(self.refusal(token)) };
        if self.grammar.is_stop(t) {
            return match self.grammar.can_end() {
                Ok(true) => Ok(()),
                _ => Err(self.refusal(token)),
            };
        }
        self.grammar.accept(t).map_err(|e| format!("{}: {e}", self.refusal(token)))
    }

    fn refusal(&self, token: Token) -> String {
        format!("token {token} ({:?}) is not allowed by the grammar here", String::from_utf8_lossy(&self.piece(token)))
    }

    /// llama.cpp's awaiting branch of `llama_grammar_accept_impl`: a trigger token starts the
    /// grammar with itself; any other token's piece joins the buffer, and the first pattern that
    /// matches it starts the grammar with the buffer's text from the pattern's start.
    fn await_trigger(&mut self, token: Token) {
        if self.trigger_tokens.contains(&token) {
            self.awaiting_trigger = false;
            self.buffer.clear();
            self.positions.clear();
            let piece = self.piece(token);
            self.replay(token, &piece, true);
            return;
        }
        let start = self.buffer.len();
        let piece = self.piece(token);
        self.buffer.extend_from_slice(&piece);
        self.positions.push(Placed { token, start, end: self.buffer.len() });
        let Some(from) = self.trigger_patterns.iter().find_map(|p| trigger_start(p, &self.buffer)) else { return };
        self.awaiting_trigger = false;
        let buffer = std::mem::take(&mut self.buffer);
        for p in std::mem::take(&mut self.positions) {
            if p.end > from {
                let cut = p.start.max(from);
                self.replay(p.token, &buffer[cut..p.end], cut == p.start);
            }
        }
    }

    /// Gives the grammar `bytes`, the text of `token` (all of it when `whole`): the token
    /// itself where the grammar takes it, else the text's own tokens (a piece cut at the
    /// trigger's start, or a control token whose text the grammar spells out, as llama.cpp's
    /// grammar matches every token by its text). All or nothing; a refusal is logged.
    fn replay(&mut self, token: Token, bytes: &[u8], whole: bool) {
        const F: &str = "llama_sampler_accept";
        if whole && self.take(token).is_ok() {
            return;
        }
        let ids = match self.grammar.tokens_of(bytes) {
            Ok(Some(ids)) => ids,
            Ok(None) => {
                error(F, &format!("the text {:?} after the grammar's trigger has a byte no token spells; the grammar did not take it", String::from_utf8_lossy(bytes)));
                return;
            }
            Err(e) => {
                error(F, &format!("tokenizing the text after the grammar's trigger: {e}"));
                return;
            }
        };
        let before = self.grammar.clone();
        for id in ids {
            if let Err(e) = self.grammar.accept(id) {
                error(F, &format!("the grammar refuses the text {:?} after its trigger ({e}); it is left as it was", String::from_utf8_lossy(bytes)));
                self.grammar = before;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The grammar sampler through the C API, on the tiny llama fixture (a byte-level BPE of
    //! 300 tokens: single characters, and pairs such as "er" 266, "re" 262, "ac" 287, "The"
    //! 282; `</s>` 1 is its end of generation). Each mask is checked over the whole vocabulary
    //! against a hand-written oracle of the grammar's language, from llama.cpp's definition:
    //! a token may come next iff its piece keeps the text a prefix of the language (an
    //! end-of-generation token iff the text is in it). Where the grammar forces text, packlm's
    //! mask allows a part of that set (see the module comment), so there the check is that
    //! part.
    use std::ffi::CString;
    use std::ptr;

    use crate::abi::{Sampler, SamplerChainParams, Token, TokenData, TokenDataArray};
    use crate::model::{llama_model_free, LlamaModel};
    use crate::sampler::*;
    use crate::vocab::{llama_token_to_piece, llama_vocab_is_eog};

    const N_VOCAB: usize = 300;
    const THE: Token = 282;
    // The tiny fixture's tokens, as the sampler tests name them (and check), and "z" 91.
    use crate::sampler::tests::{tiny, A, EOS, ER, R, RE};
    const Z: Token = 91;

    /// The language `lit` then at least `min` characters of a..=e, as llama.cpp's GBNF
    /// `root ::= "lit" [a-e]+` (min 1) or `[a-e]*` (min 0) defines it.
    struct Lang {
        lit: &'static str,
        min: usize,
    }

    impl Lang {
        fn tail(&self, text: &[u8]) -> Option<usize> {
            let rest = text.strip_prefix(self.lit.as_bytes())?;
            rest.iter().all(|b| (b'a'..=b'e').contains(b)).then_some(rest.len())
        }
        /// Whether the grammar forces more text after `text` (the rest of the literal).
        fn forces(&self, text: &[u8]) -> bool {
            text.len() < self.lit.len() && self.lit.as_bytes().starts_with(text)
        }
        /// Whether `text` can still be completed to a word of the language.
        fn viable(&self, text: &[u8]) -> bool {
            self.lit.as_bytes().starts_with(text) || self.tail(text).is_some()
        }
        fn complete(&self, text: &[u8]) -> bool {
            self.tail(text).is_some_and(|n| n >= self.min)
        }
    }

    fn piece(model: *const LlamaModel, t: Token) -> Vec<u8> {
        let mut buf = [0u8; 64];
        let n = unsafe { llama_token_to_piece(model, t, buf.as_mut_ptr() as *mut _, 64, 0, true) };
        buf[..n as usize].to_vec()
    }

    /// Which tokens of the whole vocabulary `s` leaves finite, given them in reverse id order
    /// (any order is allowed) with distinct logits, sorted.
    fn allowed(s: *mut Sampler) -> Vec<bool> {
        let mut data: Vec<TokenData> = (0..N_VOCAB).rev().map(|i| TokenData { id: i as Token, logit: i as f32, p: 0.0 }).collect();
        let mut cur = TokenDataArray { data: data.as_mut_ptr(), size: data.len(), selected: -1, sorted: true };
        unsafe { llama_sampler_apply(s, &mut cur) };
        assert_eq!(cur.size, N_VOCAB);
        let mut out = vec![false; N_VOCAB];
        for d in &data {
            assert!(d.logit == d.id as f32 || d.logit == f32::NEG_INFINITY, "token {} got logit {}", d.id, d.logit);
            out[d.id as usize] = d.logit.is_finite();
        }
        // A masked array is no longer known to be sorted.
        assert_eq!(cur.sorted, out.iter().all(|&a| a));
        out
    }

    /// What the oracle allows after `text`.
    fn expected(model: *const LlamaModel, lang: &Lang, text: &[u8]) -> Vec<bool> {
        (0..N_VOCAB as Token)
            .map(|t| {
                if unsafe { llama_vocab_is_eog(model, t) } {
                    return lang.complete(text);
                }
                let p = piece(model, t);
                !p.is_empty() && lang.viable(&[text, &p[..]].concat())
            })
            .collect()
    }

    /// The mask of `s` after `text` is the oracle's (a non-empty part of it where the grammar
    /// forces text).
    fn assert_mask(model: *const LlamaModel, s: *mut Sampler, lang: &Lang, text: &str) {
        let got = allowed(s);
        let want = expected(model, lang, text.as_bytes());
        let part = lang.forces(text.as_bytes());
        let diff: Vec<(usize, String, bool)> = (0..N_VOCAB)
            .filter(|&t| if part { got[t] && !want[t] } else { got[t] != want[t] })
            .map(|t| (t, String::from_utf8_lossy(&piece(model, t as Token)).into_owned(), got[t]))
            .collect();
        assert!(diff.is_empty(), "after {text:?}: (token, piece, allowed) where the sampler differs from the language: {diff:?}");
        assert!(got.iter().any(|&a| a), "after {text:?}: something is allowed");
        assert!(want.iter().any(|&a| a) && !want.iter().all(|&a| a), "the case masks some tokens and allows some");
    }

    fn unchanged(s: *mut Sampler) {
        assert!(allowed(s).iter().all(|&a| a), "the sampler changed nothing");
    }

    unsafe fn grammar(model: *const LlamaModel, text: &str) -> *mut Sampler {
        let text = CString::new(text).unwrap();
        llama_sampler_init_grammar(model, text.as_ptr(), c"root".as_ptr())
    }

    const ER_PLUS: &str = "root ::= \"er\" [a-e]+";
    const ER_LANG: Lang = Lang { lit: "er", min: 1 };

    #[test]
    fn greedy_under_a_grammar_generates_a_prefix_of_its_language_and_masks_exactly_what_cannot_follow() {
        unsafe {
            let model = tiny();
            let params = crate::abi::ContextParams { n_ctx: 0, ..crate::context::llama_context_default_params() };
            let ctx = crate::context::llama_init_from_model(model, params);
            assert!(!ctx.is_null());
            let mut bos = [0 as Token];
            assert_eq!(crate::context::llama_decode(ctx, crate::context::llama_batch_get_one(bos.as_mut_ptr(), 1)), 0);

            let g = grammar(model, "root ::= \"re\" [a-e]+");
            assert!(!g.is_null());
            assert_eq!(std::ffi::CStr::from_ptr(llama_sampler_name(g)), c"grammar");
            let chain = llama_sampler_chain_init(SamplerChainParams { no_perf: true });
            llama_sampler_chain_add(chain, g);
            llama_sampler_chain_add(chain, llama_sampler_init_greedy());
            let lang = Lang { lit: "re", min: 1 };
            let mut text = Vec::new();
            for _ in 0..8 {
                // The chain still holds `g`: its mask now, over the whole vocabulary.
                assert_mask(model, g, &lang, std::str::from_utf8(&text).unwrap());
                let mut t = llama_sampler_sample(chain, ctx, -1);
                assert!(t >= 0);
                if llama_vocab_is_eog(model, t) {
                    assert!(lang.complete(&text), "ended at {:?}", String::from_utf8_lossy(&text));
                    break;
                }
                text.extend_from_slice(&piece(model, t));
                assert!(lang.viable(&text), "generated {:?}", String::from_utf8_lossy(&text));
                assert_eq!(crate::context::llama_decode(ctx, crate::context::llama_batch_get_one(&mut t, 1)), 0);
            }
            assert!(text.len() >= 3, "greedy generated {:?}", String::from_utf8_lossy(&text));
            llama_sampler_free(chain);
            crate::context::llama_free(ctx);
            llama_model_free(model);
        }
    }

    #[test]
    fn an_empty_or_null_grammar_gives_a_sampler_that_changes_nothing() {
        unsafe {
            let model = tiny();
            for (vocab, text) in [(model as *const _, c"".as_ptr()), (model as *const _, ptr::null()), (ptr::null(), c"".as_ptr())] {
                let s = llama_sampler_init_grammar(vocab, text, c"root".as_ptr());
                assert!(!s.is_null());
                assert_eq!(std::ffi::CStr::from_ptr(llama_sampler_name(s)), c"grammar");
                unchanged(s);
                llama_sampler_accept(s, Z);
                unchanged(s);
                let c = llama_sampler_clone(s);
                llama_sampler_reset(c);
                unchanged(c);
                llama_sampler_free(c);
                llama_sampler_free(s);
            }
            llama_model_free(model);
        }
    }

    #[test]
    fn a_grammar_or_pattern_refused_gives_null() {
        unsafe {
            let model = tiny();
            assert!(grammar(model, "root ::= \"er").is_null(), "unterminated string");
            assert!(grammar(model, "other ::= \"er\"").is_null(), "no rule named root");
            assert!(grammar(ptr::null(), ER_PLUS).is_null(), "a grammar needs the vocabulary");
            let text = CString::new(ER_PLUS).unwrap();
            assert!(llama_sampler_init_grammar(model, text.as_ptr(), ptr::null()).is_null(), "no root name");
            let bad = [c"(er".as_ptr()];
            assert!(llama_sampler_init_grammar_lazy_patterns(model, text.as_ptr(), c"root".as_ptr(), bad.as_ptr(), 1, ptr::null(), 0).is_null());
            assert!(llama_sampler_init_grammar_lazy(model, text.as_ptr(), c"root".as_ptr(), ptr::null(), 2, ptr::null(), 0).is_null(), "NULL words with a count");
            llama_model_free(model);
        }
    }

    #[test]
    fn a_lazy_grammar_starts_at_its_trigger_word_even_inside_a_token() {
        unsafe {
            let model = tiny();
            let text = CString::new(ER_PLUS).unwrap();
            let words = [c"er".as_ptr()];
            let s = llama_sampler_init_grammar_lazy(model, text.as_ptr(), c"root".as_ptr(), words.as_ptr(), 1, ptr::null(), 0);
            assert!(!s.is_null());
            unchanged(s);
            llama_sampler_accept(s, THE);
            unchanged(s);
            llama_sampler_accept(s, Z);
            unchanged(s);
            // "Thez" + "re": no "er" yet. Then "The" + "re" = "There": "er" starts inside "The",
            // so the grammar is given "e" then "re" and has taken "ere".
            llama_sampler_accept(s, RE);
            unchanged(s);
            llama_sampler_reset(s);
            llama_sampler_accept(s, THE);
            llama_sampler_accept(s, RE);
            assert_mask(model, s, &ER_LANG, "ere");
            llama_sampler_accept(s, A);
            assert_mask(model, s, &ER_LANG, "erea");
            llama_sampler_free(s);

            // A pattern `^...$` must match the whole text; its first group starts the grammar.
            let text = CString::new("root ::= \"ere\" [a-e]*").unwrap();
            let lang = Lang { lit: "ere", min: 0 };
            let patterns = [c"^Th(ere)$".as_ptr()];
            let s = llama_sampler_init_grammar_lazy_patterns(model, text.as_ptr(), c"root".as_ptr(), patterns.as_ptr(), 1, ptr::null(), 0);
            assert!(!s.is_null());
            for t in [THE, 258, RE] {
                llama_sampler_accept(s, t);
                unchanged(s);
            }
            llama_sampler_reset(s);
            llama_sampler_accept(s, THE);
            unchanged(s);
            llama_sampler_accept(s, RE);
            assert_mask(model, s, &lang, "ere");
            llama_sampler_free(s);
            llama_model_free(model);
        }
    }

    #[test]
    fn a_lazy_grammar_starts_with_its_trigger_token() {
        unsafe {
            let model = tiny();
            let text = CString::new(ER_PLUS).unwrap();
            let tokens = [ER];
            let s = llama_sampler_init_grammar_lazy(model, text.as_ptr(), c"root".as_ptr(), ptr::null(), 0, tokens.as_ptr(), 1);
            assert!(!s.is_null());
            for t in [THE, Z, RE] {
                llama_sampler_accept(s, t);
                unchanged(s);
            }
            llama_sampler_accept(s, ER);
            assert_mask(model, s, &ER_LANG, "er");
            llama_sampler_free(s);
            llama_model_free(model);
        }
    }

    #[test]
    fn a_clone_goes_on_alone_and_reset_returns_to_the_start() {
        unsafe {
            let model = tiny();
            let s = grammar(model, ER_PLUS);
            llama_sampler_accept(s, ER);
            let c = llama_sampler_clone(s);
            assert!(!c.is_null());
            llama_sampler_accept(s, A);
            assert_mask(model, c, &ER_LANG, "er");
            assert_mask(model, s, &ER_LANG, "era");
            llama_sampler_accept(c, 69);
            assert_mask(model, c, &ER_LANG, "erd");
            assert_mask(model, s, &ER_LANG, "era");
            llama_sampler_reset(s);
            assert_mask(model, s, &ER_LANG, "");
            llama_sampler_free(s);
            assert_mask(model, c, &ER_LANG, "erd");
            llama_sampler_free(c);

            // A triggered lazy grammar's reset awaits its trigger again.
            let text = CString::new(ER_PLUS).unwrap();
            let tokens = [ER];
            let s = llama_sampler_init_grammar_lazy(model, text.as_ptr(), c"root".as_ptr(), ptr::null(), 0, tokens.as_ptr(), 1);
            llama_sampler_accept(s, ER);
            let c = llama_sampler_clone(s);
            llama_sampler_reset(s);
            unchanged(s);
            assert_mask(model, c, &ER_LANG, "er");
            llama_sampler_free(s);
            llama_sampler_free(c);
            llama_model_free(model);
        }
    }

    #[test]
    fn a_refused_token_changes_nothing() {
        unsafe {
            let model = tiny();
            let s = grammar(model, ER_PLUS);
            llama_sampler_accept(s, ER);
            // "z", the end of generation before a letter, and ids outside the vocabulary.
            for t in [Z, EOS, RE, -1, 1000] {
                llama_sampler_accept(s, t);
                assert_mask(model, s, &ER_LANG, "er");
            }
            // Where the grammar may end, the end of generation is taken and changes nothing.
            llama_sampler_accept(s, A);
            llama_sampler_accept(s, EOS);
            assert_mask(model, s, &ER_LANG, "era");
            llama_sampler_free(s);

            // A token llama.cpp's grammar takes is taken, though the mask in front of forced
            // text left it out: "r" then "e" where "re" is forced.
            let s = grammar(model, "root ::= \"re\" [a-e]+");
            let lang = Lang { lit: "re", min: 1 };
            assert!(!allowed(s)[R as usize]);
            llama_sampler_accept(s, R);
            assert_mask(model, s, &lang, "r");
            llama_sampler_accept(s, 70);
            assert_mask(model, s, &lang, "re");
            llama_sampler_free(s);
            llama_model_free(model);
        }
    }
}
