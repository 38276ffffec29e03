//! The BPE model of a tokenizer rebuilt from GGUF metadata.
//!
//! It gives what `tokenizers::models::bpe::BPE` gives for the same vocabulary and merges
//! (tokenizers 0.22, models/bpe/model.rs `merge_word`, `tokenize_with_cache` and word.rs
//! `merge_all`, followed step by step below), but it is built straight from the token list of the
//! file, which is what makes opening a GGUF fast:
//!
//! - the token texts live in one buffer with one hash index over them, where `BPE` keeps two maps
//!   of owned strings (text to id and id to text) built through a builder that clones each;
//! - for SentencePiece vocabularies without a merges list, HF rebuilds the merges from the
//!   vocabulary (transformers tokenization_utils_base.py `generate_merges`: every split of every
//!   token into two tokens, sorted by the token's score, then the lengths of the two parts). For
//!   Gemma 3 that is half a million merges to generate, sort, format and hash at every open.
//!   This model keeps no merge table for them: a pair of adjacent pieces merges exactly when
//!   their concatenation is a token, and the rank of that merge is computed from the same sort
//!   key (see [`MergeRule::Generated`]), so the order in which merges apply is HF's.
//!
//! The rest of the pipeline (normalizer, pre-tokenizer, added tokens, post-processor, decoder)
//! stays HF's: this type is the `Model` of a `tokenizers::TokenizerImpl`.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use ahash::AHashMap;
use dary_heap::QuaternaryHeap;
use tokenizers::models::bpe::BpeTrainer;
use tokenizers::{Model, Token};

use crate::pack::token_texts::TextTable;

/// How the merges of a vocabulary are ranked.
pub enum MergeSource<'a> {
    /// `tokenizer.ggml.merges`, "left right" in rank order (HF `get_merges`).
    Listed(&'a [&'a str]),
    /// HF `generate_merges` over the tokens in file order, each scored by minus its position
    /// (GemmaTokenizer's `{token: -index}`).
    TokenOrder,
    /// HF `generate_merges` over the tokens scored by `tokenizer.ggml.scores` (LlamaTokenizer).
    Scores(&'a [f32]),
}

/// The BPE options `BpeBuilder` is given for a GGUF vocabulary.
pub struct BpeOptions<'a> {
    /// Bytes of a character missing from the vocabulary become "<0xNN>" tokens.
    pub byte_fallback: bool,
    /// The unknown token for characters nothing else covers (None: they are dropped, as `BPE`
    /// does without one).
    pub unk_token: Option<&'a str>,
    /// Consecutive unknown characters make one unknown token.
    pub fuse_unk: bool,
}

/// packlm's BPE model for GGUF vocabularies (see the module doc). A handle: its tables are
/// shared, so cloning a tokenizer does not copy the vocabulary.
#[derive(Clone)]
pub struct GgufBpe {
    tables: Arc<Tables>,
}

struct Tables {
    texts: TextTable,
    merges: MergeRule,
    /// With byte fallback: the id of "<0xNN>" for each byte value, when the vocabulary has it.
    byte_ids: Option<Box<[Option<u32>; 256]>>,
    unk_token: Option<String>,
    /// The id of `unk_token`, None when the vocabulary lacks it (an error only once needed, as
    /// in `BPE::merge_word`).
    unk_id: Option<u32>,
    fuse_unk: bool,
    cache: WordCache,
}

/// The rank of a merge: lower applies first. Listed merges use their position; generated ones
/// the sort key of [`MergeRule::Generated`], packed into 64 bits (see [`Scoring`]).
type Rank = u64;

enum MergeRule {
    /// (left id, right id) -> (rank, merged id); a pair listed twice keeps its later rank, as
    /// `BpeBuilder` (a map collected in list order) does.
    Listed(AHashMap<(u32, u32), (u32, u32)>),
    /// `generate_merges` ranks: the merges sorted (stably) by the merged token's score, high
    /// first, then by the character lengths of the left and right part, long first; before the
    /// sort they are in the order of the tokens (first occurrence of a text) and within a token
    /// by (left id, right id). Two merges of one token with the same left length are the same
    /// split, so the rank of a merge into token t with a left part of `lc` characters is the key
    /// (score(t) descending, lc descending, rc descending, first occurrence of t ascending),
    /// where rc = chars(t) - lc: for equal score and lc, rc descending is chars(t) descending.
    Generated(Scoring),
}

/// The key of [`MergeRule::Generated`] packed into a [`Rank`].
enum Scoring {
    /// GemmaTokenizer's score, minus the position of the token's last occurrence: score
    /// descending is merged id ascending, and ids are unique, so the rank is (merged id, lc
    /// descending) and needs no tie-break.
    TokenOrder,
    /// Scores from the file (a repeated text takes its last occurrence's score, a Python
    /// dict's value). `base[t]` holds t's dense score rank (descending; Python compares -0.0
    /// and 0.0 as equal) in the high bits and t's rank by (chars descending, first occurrence
    /// ascending) in the low `lc_shift` bits; the rank of a merge puts `lc_max - lc` between.
    Scores { base: Vec<u64>, lc_shift: u32, lc_max: u64 },
}

impl GgufBpe {
    /// The model over `tokens` (the texts as the vocabulary spells them, in id order).
    /// Err names the metadata entry that is wrong.
    pub fn new<I>(tokens: I, merges: MergeSource, opts: &BpeOptions) -> Result<GgufBpe, String>
    where
        I: ExactSizeIterator,
        I::Item: AsRef<str>,
    {
        let texts = TextTable::new(tokens)?;
        let merges = match merges {
            MergeSource::Listed(list) => MergeRule::Listed(listed_merges(&texts, list)?),
            MergeSource::TokenOrder => MergeRule::Generated(Scoring::TokenOrder),
            MergeSource::Scores(scores) => MergeRule::Generated(Scoring::from_scores(&texts, scores)?),
        };
        let byte_ids = opts.byte_fallback.then(|| {
            let mut ids = Box::new([None; 256]);
            for (b, id) in ids.iter_mut().enumerate() {
                // `BPE::merge_word`: format!("<{b:#04X}>"), i.e. "<0x0A>".
                *id = texts.get(&format!("<0x{b:02X}>"));
            }
            ids
        });
        let unk_id = opts.unk_token.and_then(|t| texts.get(t));
        let unk_token = opts.unk_token.map(str::to_string);
        let tables = Tables { texts, merges, byte_ids, unk_token, unk_id, fuse_unk: opts.fuse_unk, cache: WordCache::default() };
        Ok(GgufBpe { tables: Arc::new(tables) })
    }
}

/// `BpeBuilder::build` over `tokenizer.ggml.merges`: every part and their concatenation must be
/// tokens.
fn listed_merges(texts: &TextTable, list: &[&str]) -> Result<AHashMap<(u32, u32), (u32, u32)>, String> {
    let mut map = AHashMap::with_capacity(list.len());
    let mut joined = String::new();
    for (rank, m) in list.iter().enumerate() {
        // HF `get_merges`: `tuple(merge.split(" "))`, which must give two parts.
        let (left, right) = match m.split_once(' ') {
            Some((l, r)) if !r.contains(' ') => (l, r),
            _ => return Err(format!("tokenizer.ggml.merges[{rank}] is {m:?}, expected \"left right\"")),
        };
        joined.clear();
        joined.push_str(left);
        joined.push_str(right);
        let id = |part: &str| {
            texts.get(part).ok_or_else(|| format!("tokenizer.ggml.merges[{rank}] is {m:?}: {part:?} is not a token"))
        };
        let pair = (id(left)?, id(right)?);
        let merged = id(&joined)?;
        let rank = u32::try_from(rank).map_err(|_| "tokenizer.ggml.merges has more than 2^32 entries".to_string())?;
        map.insert(pair, (rank, merged));
    }
    Ok(map)
}

impl Tables {
    /// The merge of the adjacent pieces `left` and `right`, if any: its rank and merged id.
    fn merge_of(&self, left: &Symbol, right: &Symbol, memo: &mut PairMemo) -> Option<(Rank, u32)> {
        match &self.merges {
            MergeRule::Listed(map) => map.get(&(left.c, right.c)).map(|&(rank, id)| (Rank::from(rank), id)),
            MergeRule::Generated(scoring) => {
                let merged = memo.get_or(left.c, right.c, || {
                    let hash = self.texts.hasher.concat(left.hash, right.hash, right.pow);
                    self.texts.get_pair(hash, left.c, right.c)
                })?;
                Some((scoring.rank(merged, left.chars), merged))
            }
        }
    }

    /// A new piece for token `id` covering `len` bytes of the word.
    fn symbol(&self, id: u32, len: u32) -> Symbol {
        self.symbol_with_text(id, len, self.texts.text(id))
    }

    /// As `symbol`, given the token's text (`symbol` looks it up).
    fn symbol_with_text(&self, id: u32, len: u32, text: &str) -> Symbol {
        let mut s = Symbol { c: id, prev: -1, next: -1, len, chars: 0, hash: 0, pow: 1 };
        // Only generated merges look pairs up by text and rank them by length.
        if let MergeRule::Generated(_) = self.merges {
            s.chars = chars(text);
            (s.hash, s.pow) = self.texts.hasher.hash(text.as_bytes());
        }
        s
    }

    /// `BPE::merge_word`: one piece per character (or its byte tokens, or the unknown token),
    /// then every merge in rank order.
    fn merge_word(&self, w: &str) -> tokenizers::Result<Word> {
        if w.len() > i32::MAX as usize {
            return Err(format!("a word of {} bytes is too long to tokenize (at most 2^31 - 1)", w.len()).into());
        }
        let mut word = Word { symbols: Vec::with_capacity(w.len()) };
        // (id, bytes covered); the word is under 2^31 bytes.
        let mut unk: Option<(u32, u32)> = None;
        let mut buf = [0u8; 4];
        for c in w.chars() {
            let s: &str = c.encode_utf8(&mut buf);
            let byte_len = s.len() as u32;
            if let Some(id) = self.texts.char_id(c, s) {
                if let Some((unk_id, unk_len)) = unk.take() {
                    word.add(self.symbol(unk_id, unk_len));
                }
                // The token's text is the character itself.
                word.add(self.symbol_with_text(id, byte_len, s));
                continue;
            }
            if let Some(byte_ids) = &self.byte_ids {
                let ids: Option<Vec<u32>> = s.bytes().map(|b| byte_ids[b as usize]).collect();
                if let Some(ids) = ids {
                    // As `merge_word`: a pending unknown token is not flushed here.
                    for id in ids {
                        word.add(self.symbol(id, 1));
                    }
                    continue;
                }
            }
            if let Some(unk_token) = &self.unk_token {
                let unk_id = || {
                    self.unk_id.ok_or_else(|| -> tokenizers::Error {
                        format!("the unknown token {unk_token:?} is not in the vocabulary").into()
                    })
                };
                unk = match (unk, self.fuse_unk) {
                    (Some((id, len)), true) => Some((id, len + byte_len)),
                    (Some((id, len)), false) => {
                        word.add(self.symbol(id, len));
                        Some((unk_id()?, byte_len))
                    }
                    (None, _) => Some((unk_id()?, byte_len)),
                };
            }
        }
        if let Some((unk_id, unk_len)) = unk {
            word.add(self.symbol(unk_id, unk_len));
        }
        self.merge_all(&mut word);
        Ok(word)
    }

    /// word.rs `Word::merge_all` without dropout: a min-heap of candidate merges ordered by
    /// (rank, position). A popped merge is stale when its pair has changed since it was
    /// queued; `merge_all` tells that by looking the current pair up and comparing merged ids.
    /// Comparing the bytes of the word the pair covers is the same test and needs no lookup:
    /// a piece only grows, by taking in its right neighbour, and every piece covers at least
    /// one byte, so a changed pair covers more bytes (and has a longer text, hence another
    /// merged token).
    fn merge_all(&self, word: &mut Word) {
        let symbols = &mut word.symbols;
        let mut memo = PairMemo::new(match self.merges {
            MergeRule::Generated(_) => symbols.len(),
            MergeRule::Listed(_) => 0,
        });
        let mut queue: QuaternaryHeap<Reverse<Candidate>> = QuaternaryHeap::with_capacity(symbols.len());
        // merge_word refuses words of 2^31 bytes or more: positions and spans fit.
        let candidate = |rank, pos: usize, left: &Symbol, right: &Symbol| {
            Reverse(Candidate { rank, pos: pos as u32, span: left.len + right.len })
        };
        for pos in 0..symbols.len().saturating_sub(1) {
            let (left, right) = (&symbols[pos], &symbols[pos + 1]);
            if let Some((rank, _)) = self.merge_of(left, right, &mut memo) {
                queue.push(candidate(rank, pos, left, right));
            }
        }
        while let Some(Reverse(Candidate { pos, span, .. })) = queue.pop() {
            let pos = pos as usize;
            if symbols[pos].len == 0 || symbols[pos].next == -1 {
                continue;
            }
            let next_pos = symbols[pos].next as usize;
            let right = symbols[next_pos];
            if symbols[pos].len + right.len != span {
                continue;
            }
            let Some((_, new_id)) = self.merge_of(&symbols[pos], &right, &mut memo) else { continue };
            let merged = &mut symbols[pos];
            merged.c = new_id;
            merged.len += right.len;
            merged.chars = merged.chars.saturating_add(right.chars);
            merged.hash = self.texts.hasher.concat(merged.hash, right.hash, right.pow);
            merged.pow = self.texts.hasher.mul(merged.pow, right.pow);
            merged.next = right.next;
            symbols[next_pos].len = 0;
            if right.next > -1 && (right.next as usize) < symbols.len() {
                symbols[right.next as usize].prev = pos as i32;
            }
            let current = symbols[pos];
            if current.prev >= 0 {
                let prev = &symbols[current.prev as usize];
                if let Some((rank, _)) = self.merge_of(prev, &current, &mut memo) {
                    queue.push(candidate(rank, current.prev as usize, prev, &current));
                }
            }
            let next = current.next as usize;
            if next < symbols.len() {
                let next_symbol = &symbols[next];
                if let Some((rank, _)) = self.merge_of(&current, next_symbol, &mut memo) {
                    queue.push(candidate(rank, pos, &current, next_symbol));
                }
            }
        }
        symbols.retain(|s| s.len != 0);
    }
}

/// The generated merges looked up during one word, direct-mapped by (left id, right id):
/// text repeats the same few pairs, and looking one up in the vocabulary takes a hash probe
/// and a comparison of texts. It only saves time.
struct PairMemo {
    /// (left, right, merged id + 1 or 0 for no merge); left u32::MAX marks an empty entry
    /// (ids are below the vocabulary size, at most MAX_METADATA_VALUES).
    entries: Vec<(u32, u32, u32)>,
}

impl PairMemo {
    /// A memo for a word of `n` pieces (none for 0).
    fn new(n: usize) -> PairMemo {
        let size = if n == 0 { 0 } else { n.saturating_mul(2).next_power_of_two().clamp(16, 4096) };
        PairMemo { entries: vec![(u32::MAX, 0, 0); size] }
    }

    fn get_or(&mut self, left: u32, right: u32, find: impl FnOnce() -> Option<u32>) -> Option<u32> {
        if self.entries.is_empty() {
            return find();
        }
        let key = (u64::from(left) << 32 | u64::from(right)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let slot = (key >> 32) as usize & (self.entries.len() - 1);
        let (l, r, merged) = self.entries[slot];
        if (l, r) == (left, right) {
            return merged.checked_sub(1);
        }
        let found = find();
        self.entries[slot] = (left, right, found.map_or(0, |id| id + 1));
        found
    }
}

/// A queued merge of the pair at `pos`, which then covered `span` bytes of the word. Ordered
/// by (rank, position) as word.rs `Merge` is; two candidates equal in both are the same merge.
#[derive(Clone, Copy)]
struct Candidate {
    rank: Rank,
    pos: u32,
    span: u32,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        (self.rank, self.pos) == (other.rank, other.pos)
    }
}

impl Eq for Candidate {}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.rank, self.pos).cmp(&(other.rank, other.pos))
    }
}

impl Scoring {
    /// The packed keys of `scores` (one per token) over `texts`; Err when a score is NaN (no
    /// order) or the three parts do not fit 64 bits (a token of over about 2^18 characters).
    fn from_scores(texts: &TextTable, scores: &[f32]) -> Result<Scoring, String> {
        if scores.len() != texts.len() {
            return Err(format!("tokenizer.ggml.scores has {} entries for {} tokens", scores.len(), texts.len()));
        }
        if let Some(i) = scores.iter().position(|s| s.is_nan()) {
            return Err(format!("tokenizer.ggml.scores[{i}] is NaN: merges cannot be ordered by it"));
        }
        let keys: Vec<u32> = (0..texts.len() as u32).filter(|&id| texts.key_text(id).is_some()).collect();
        // Dense rank of the score, descending.
        let mut by_score: Vec<(u32, u32)> = keys.iter().map(|&id| (!ascending_bits(scores[id as usize]), id)).collect();
        by_score.sort_unstable();
        let mut score_rank = vec![0u64; texts.len()];
        let mut rank = 0u64;
        for (i, &(bits, id)) in by_score.iter().enumerate() {
            if i > 0 && bits != by_score[i - 1].0 {
                rank += 1;
            }
            score_rank[id as usize] = rank;
        }
        // Rank by (chars descending, first occurrence ascending): a total order of the texts.
        let first = |id: u32| texts.first_ids.get(&id).copied().unwrap_or(id);
        let char_counts: Vec<u32> = (0..texts.len() as u32).map(|id| chars(texts.text(id))).collect();
        let mut by_length: Vec<(Reverse<u32>, u32, u32)> =
            keys.iter().map(|&id| (Reverse(char_counts[id as usize]), first(id), id)).collect();
        by_length.sort_unstable();
        let lc_max = u64::from(char_counts.iter().copied().max().unwrap_or(0));
        let bits = |n: u64| u64::BITS - n.leading_zeros();
        let lc_shift = bits(by_length.len() as u64);
        let score_shift = lc_shift + bits(lc_max);
        if score_shift + bits(rank) > u64::BITS {
            return Err(format!(
                "tokenizer.ggml.tokens has a token of {lc_max} characters: merges generated from tokenizer.ggml.scores are ranked for tokens of up to about 2^18"
            ));
        }
        let mut base = vec![0u64; texts.len()];
        for (order, &(_, _, id)) in by_length.iter().enumerate() {
            base[id as usize] = score_rank[id as usize] << score_shift | order as u64;
        }
        Ok(Scoring::Scores { base, lc_shift, lc_max })
    }

    /// The rank of a generated merge into token `merged` whose left part has `left_chars`
    /// characters (see [`MergeRule::Generated`]).
    fn rank(&self, merged: u32, left_chars: u32) -> Rank {
        match self {
            Scoring::TokenOrder => u64::from(merged) << 32 | u64::from(!left_chars),
            Scoring::Scores { base, lc_shift, lc_max } => {
                let lc = u64::from(left_chars).min(*lc_max);
                base.get(merged as usize).copied().unwrap_or(u64::MAX) | (lc_max - lc) << lc_shift
            }
        }
    }
}

/// The bits of a (non-NaN) float, ordered as the floats are: Python compares -0.0 and 0.0 as
/// equal, so both give the bits of 0.0.
fn ascending_bits(x: f32) -> u32 {
    let x = if x == 0.0 { 0.0 } else { x };
    let bits = x.to_bits();
    if bits >> 31 == 1 {
        !bits
    } else {
        bits | 1 << 31
    }
}

/// Characters of a token text (its length in Python), saturated at u32::MAX.
fn chars(s: &str) -> u32 {
    u32::try_from(s.chars().count()).unwrap_or(u32::MAX)
}

/// word.rs `Symbol`: a piece of the word, linked to its neighbours; `len` 0 marks one merged
/// into its left neighbour.
#[derive(Clone, Copy)]
struct Symbol {
    c: u32,
    prev: i32,
    next: i32,
    /// Bytes of the word it covers.
    len: u32,
    /// Characters of token `c`'s text (kept only for generated merges, which rank by it).
    chars: u32,
    /// The [`TextTable`] hash of token `c`'s text and base^(its bytes), for generated merges
    /// (`TextTable::get_pair` takes it).
    hash: u64,
    pow: u64,
}

struct Word {
    symbols: Vec<Symbol>,
}

impl Word {
    /// Appends `s`, linked after the last piece.
    fn add(&mut self, mut s: Symbol) {
        // merge_word refuses words of 2^31 bytes or more.
        let n = self.symbols.len() as i32;
        if let Some(last) = self.symbols.last_mut() {
            last.next = n;
            s.prev = n - 1;
        }
        self.symbols.push(s);
    }
}

/// tokenizers' BPE cache (utils/cache.rs `Cache`, as `BPE` uses it): the pieces of words
/// shorter than 256 bytes, for up to 10,000 words; a lock that another thread holds is skipped
/// rather than waited for. It only saves time: a word's pieces do not depend on it.
#[derive(Default)]
struct WordCache {
    /// word -> (id, bytes) of each piece.
    map: RwLock<AHashMap<String, Vec<(u32, usize)>>>,
}

impl WordCache {
    /// tokenizers utils/cache.rs `DEFAULT_CACHE_CAPACITY` and `MAX_LENGTH`.
    const CAPACITY: usize = 10_000;
    const MAX_WORD_BYTES: usize = 256;

    fn get(&self, word: &str) -> Option<Vec<(u32, usize)>> {
        if word.len() >= Self::MAX_WORD_BYTES {
            return None;
        }
        self.map.try_read().ok()?.get(word).cloned()
    }

    fn set(&self, word: &str, pieces: Vec<(u32, usize)>) {
        if word.len() >= Self::MAX_WORD_BYTES {
            return;
        }
        match self.map.try_read() {
            Ok(map) if map.len() < Self::CAPACITY => {}
            _ => return,
        }
        if let Ok(mut map) = self.map.try_write() {
            map.insert(word.to_string(), pieces);
        }
    }
}

impl Model for GgufBpe {
    // Never used: the model is built from a GGUF, not trained. `Model` asks for some trainer.
    type Trainer = BpeTrainer;

    /// `BPE::tokenize` (no dropout) and `tokenize_with_cache`.
    fn tokenize(&self, sequence: &str) -> tokenizers::Result<Vec<Token>> {
        if sequence.is_empty() {
            return Ok(Vec::new());
        }
        let t = &self.tables;
        let cacheable = sequence.len() < WordCache::MAX_WORD_BYTES;
        let pieces = match t.cache.get(sequence) {
            Some(pieces) => pieces,
            None => {
                let word = t.merge_word(sequence)?;
                let pieces: Vec<(u32, usize)> = word.symbols.iter().map(|s| (s.c, s.len as usize)).collect();
                if cacheable {
                    t.cache.set(sequence, pieces.clone());
                }
                pieces
            }
        };
        let mut offset = 0;
        Ok(pieces
            .into_iter()
            .map(|(id, len)| {
                let start = offset;
                offset += len;
                Token::new(id, t.texts.text(id).to_string(), (start, offset))
            })
            .collect())
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.tables.texts.get(token)
    }

    /// The text of `id`; None for an id whose text occurs again later in the list (the
    /// vocabulary keeps the last, as `BPE`'s id-to-text map built from it does).
    fn id_to_token(&self, id: u32) -> Option<String> {
        self.tables.texts.key_text(id).map(str::to_string)
    }

    fn get_vocab(&self) -> HashMap<String, u32> {
        let t = &self.tables.texts;
        (0..t.len() as u32).filter_map(|id| t.key_text(id).map(|s| (s.to_string(), id))).collect()
    }

    /// Distinct texts, as `BPE::get_vocab_size` (the size of its text-to-id map).
    fn get_vocab_size(&self) -> usize {
        self.tables.texts.n_keys
    }

    fn save(&self, _folder: &Path, _prefix: Option<&str>) -> tokenizers::Result<Vec<PathBuf>> {
        Err("a tokenizer rebuilt from GGUF metadata is not saved as files".into())
    }

    fn get_trainer(&self) -> BpeTrainer {
        BpeTrainer::default()
    }
}
