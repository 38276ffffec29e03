//! The token texts of a vocabulary and a hash index over them.
//!
//! One buffer holds every text and one open-addressing table maps a text to its id, where a
//! vocabulary in `tokenizers` is two maps of owned strings. The hash composes over
//! concatenation, so BPE can look up the token made of two adjacent pieces without building
//! their text (src/pack/gguf_bpe.rs does, for merges generated from the vocabulary).

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

/// The token texts in one buffer and an open-addressing hash index from text to id. A text
/// that occurs more than once maps to its last id (a Python dict built from the list, which is
/// what HF's vocabulary is).
pub(crate) struct TextTable {
    texts: String,
    /// ends[i]: the end of token i's text in `texts` (its start is ends[i - 1], or 0).
    ends: Vec<u32>,
    /// (hash tag, id + 1), 0 for an empty slot; linear probing; a power of two, at least twice
    /// the number of tokens.
    slots: Vec<(u32, u32)>,
    /// Distinct texts.
    pub(crate) n_keys: usize,
    pub(crate) hasher: PolyHash,
    /// Ids whose text occurs again later: not keys of the vocabulary.
    shadowed: HashSet<u32>,
    /// For a text that occurs more than once: its last id -> its first id.
    pub(crate) first_ids: HashMap<u32, u32>,
    /// Id + 1 of each one-character text in the Basic Multilingual Plane, by code point (0:
    /// none): BPE looks up every character of the input first, and most of them are here.
    bmp_chars: Vec<u32>,
}

impl TextTable {
    pub(crate) fn new<I>(tokens: I) -> Result<TextTable, String>
    where
        I: ExactSizeIterator,
        I::Item: AsRef<str>,
    {
        let n = tokens.len();
        // Ids and id + 1 fit in u32 (GgufVocab checks the count; this is the table's own bound).
        if u32::try_from(n).map_or(true, |n| n == u32::MAX) {
            return Err(format!("tokenizer.ggml.tokens has {n} entries, more than a u32 id can number"));
        }
        let n_slots = n.saturating_mul(2).next_power_of_two().max(2);
        let mut t = TextTable {
            texts: String::new(),
            ends: Vec::with_capacity(n),
            slots: vec![(0, 0); n_slots],
            n_keys: 0,
            hasher: PolyHash::new(),
            shadowed: HashSet::new(),
            first_ids: HashMap::new(),
            // Zeroed memory: pages without a character of the vocabulary are never touched.
            bmp_chars: vec![0; 0x1_0000],
        };
        for (id, token) in tokens.enumerate() {
            let token = token.as_ref();
            t.texts.push_str(token);
            let end = u32::try_from(t.texts.len()).map_err(|_| "tokenizer.ggml.tokens: the token texts add up to more than 4 GiB".to_string())?;
            t.ends.push(end);
            t.insert(id as u32, token);
            let mut chars = token.chars();
            if let (Some(c), None) = (chars.next(), chars.next()) {
                // In id order, so a repeated character keeps its last id, as the index does.
                if let Some(entry) = t.bmp_chars.get_mut(c as usize) {
                    *entry = id as u32 + 1;
                }
            }
        }
        t.texts.shrink_to_fit();
        Ok(t)
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The text of token `id` ("" for an id outside the table).
    pub(crate) fn text(&self, id: u32) -> &str {
        let i = id as usize;
        let end = self.ends.get(i).map_or(0, |&e| e as usize);
        let start = if i == 0 { 0 } else { self.ends.get(i - 1).map_or(end, |&e| e as usize) };
        self.texts.get(start..end).unwrap_or("")
    }

    /// The text of `id` when it is the id its text maps to.
    pub(crate) fn key_text(&self, id: u32) -> Option<&str> {
        ((id as usize) < self.len() && !self.shadowed.contains(&id)).then(|| self.text(id))
    }

    fn insert(&mut self, id: u32, text: &str) {
        let hash = self.hasher.hash_value(text.as_bytes());
        let (tag, mut slot) = self.tag_slot(hash);
        let mask = self.slots.len() - 1;
        loop {
            let (t, entry) = self.slots[slot];
            if entry == 0 {
                self.slots[slot] = (tag, id + 1);
                self.n_keys += 1;
                return;
            }
            if t == tag && self.text(entry - 1) == text {
                let old = entry - 1;
                self.shadowed.insert(old);
                let first = self.first_ids.remove(&old).unwrap_or(old);
                self.first_ids.insert(id, first);
                self.slots[slot].1 = id + 1;
                return;
            }
            slot = (slot + 1) & mask;
        }
    }

    /// The id of `text`.
    pub(crate) fn get(&self, text: &str) -> Option<u32> {
        let hash = self.hasher.hash_value(text.as_bytes());
        self.find(hash, |t| t == text)
    }

    /// The id of the text of `left` followed by that of `right`, whose hash is `hash`, without
    /// building the concatenation.
    pub(crate) fn get_pair(&self, hash: u64, left: u32, right: u32) -> Option<u32> {
        self.find(hash, |t| {
            let (l, r) = (self.text(left), self.text(right));
            t.len() == l.len() + r.len() && t.starts_with(l) && t.ends_with(r)
        })
    }

    /// The id of the one-character text `c` (`text` is its UTF-8).
    pub(crate) fn char_id(&self, c: char, text: &str) -> Option<u32> {
        match self.bmp_chars.get(c as usize) {
            Some(&entry) => entry.checked_sub(1),
            None => self.get(text),
        }
    }

    /// The id whose text has hash `hash` and satisfies `is`.
    fn find(&self, hash: u64, is: impl Fn(&str) -> bool) -> Option<u32> {
        let (tag, mut slot) = self.tag_slot(hash);
        let mask = self.slots.len() - 1;
        loop {
            let (t, entry) = self.slots[slot];
            if entry == 0 {
                return None;
            }
            if t == tag && is(self.text(entry - 1)) {
                return Some(entry - 1);
            }
            slot = (slot + 1) & mask;
        }
    }

    /// The tag stored with a text and the first slot to probe for it. The hash of a short
    /// string is small (one byte: 1..=256), so it is mixed first (MurmurHash3's fmix64); the
    /// low bits then pick the slot and the high bits tag it.
    fn tag_slot(&self, hash: u64) -> (u32, usize) {
        let mut h = hash;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 33;
        ((h >> 32) as u32, (h as usize) & (self.slots.len() - 1))
    }
}

/// A polynomial hash of byte strings modulo the Mersenne prime 2^61 - 1, with a base drawn at
/// random for each table: h(s) = sum of (s[i] + 1) base^(n - 1 - i). It composes,
/// h(a + b) = h(a) base^|b| + h(b), so a pair of pieces is looked up without building their
/// concatenation; and since two different strings of at most L bytes differ by a nonzero
/// polynomial of degree below L, they collide for at most L of the 2^61 bases: no vocabulary
/// can be made to collide on purpose (the byte + 1 keeps leading zero bytes from vanishing).
#[derive(Clone)]
pub(crate) struct PolyHash {
    base: u64,
    /// base^4, and digits[k][b] = (b + 1) base^(3 - k): four bytes at a time take one
    /// multiplication and four lookups (the table is 8 KiB).
    base4: u64,
    digits: Box<[[u64; 256]; 4]>,
}

impl PolyHash {
    const P: u64 = (1 << 61) - 1;

    pub(crate) fn new() -> PolyHash {
        // std's RandomState is seeded from the OS for each process.
        let random = std::collections::hash_map::RandomState::new().hash_one(0x9e37_79b9_7f4a_7c15u64);
        let base = random % (Self::P - 2) + 2;
        let mut h = PolyHash { base, base4: 1, digits: Box::new([[0; 256]; 4]) };
        let mut pow = 1;
        for k in (0..4).rev() {
            for b in 0..256u64 {
                h.digits[k][b as usize] = h.mul(b + 1, pow);
            }
            pow = h.mul(pow, base);
        }
        h.base4 = pow;
        h
    }

    /// x mod P for x < 2^64 - 2^61 (a few values below P added up).
    fn reduce(x: u64) -> u64 {
        let r = (x & Self::P) + (x >> 61);
        if r >= Self::P {
            r - Self::P
        } else {
            r
        }
    }

    /// a * b mod P, for a, b < P.
    pub(crate) fn mul(&self, a: u64, b: u64) -> u64 {
        let x = u128::from(a) * u128::from(b);
        let r = (x as u64 & Self::P) + (x >> 61) as u64;
        if r >= Self::P {
            r - Self::P
        } else {
            r
        }
    }

    /// h(bytes), as [`PolyHash::hash`] gives it, four bytes a step.
    fn hash_value(&self, bytes: &[u8]) -> u64 {
        let mut chunks = bytes.chunks_exact(4);
        let mut h = 0;
        for c in &mut chunks {
            let d = &self.digits;
            // Five values below P: their sum is below 2^64 - 2^61.
            h = Self::reduce(
                self.mul(h, self.base4) + d[0][c[0] as usize] + d[1][c[1] as usize] + d[2][c[2] as usize] + d[3][c[3] as usize],
            );
        }
        chunks.remainder().iter().fold(h, |h, &b| self.add(self.mul(h, self.base), u64::from(b) + 1))
    }

    /// (h(bytes), base^len mod P).
    pub(crate) fn hash(&self, bytes: &[u8]) -> (u64, u64) {
        let (mut h, mut pow) = (0, 1);
        for &b in bytes {
            h = self.add(self.mul(h, self.base), u64::from(b) + 1);
            pow = self.mul(pow, self.base);
        }
        (h, pow)
    }

    /// h(a + b) from h(a), h(b) and base^|b|.
    pub(crate) fn concat(&self, a: u64, b: u64, pow_b: u64) -> u64 {
        self.add(self.mul(a, pow_b), b)
    }

    fn add(&self, a: u64, b: u64) -> u64 {
        let r = a + b;
        if r >= Self::P {
            r - Self::P
        } else {
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// h(bytes) the plain way, one byte a step.
    fn by_bytes(h: &PolyHash, bytes: &[u8]) -> u64 {
        bytes.iter().fold(0, |acc, &b| h.add(h.mul(acc, h.base), u64::from(b) + 1))
    }

    #[test]
    fn hash_four_bytes_a_step_equals_byte_by_byte_and_composes() {
        let h = PolyHash::new();
        let samples: [&[u8]; 7] = [b"", b"a", b"\0", b"\0\0a", b"abcd", b"\xff\xfe\xfd\xfc\xfb", "\u{2581}the quick brown fox".as_bytes()];
        for a in samples {
            assert_eq!(h.hash_value(a), by_bytes(&h, a), "{a:?}");
            assert_eq!(h.hash(a).0, by_bytes(&h, a), "{a:?}");
            for b in samples {
                let joined = [a, b].concat();
                let (hb, pow_b) = h.hash(b);
                assert_eq!(h.concat(h.hash_value(a), hb, pow_b), h.hash_value(&joined), "{a:?} + {b:?}");
            }
        }
        // The byte + 1 digit: leading zero bytes change the hash.
        assert_ne!(h.hash_value(b"a"), h.hash_value(b"\0a"));
    }

    #[test]
    fn a_repeated_text_keeps_its_last_id_and_pairs_are_found_without_joining() {
        let t = TextTable::new(["a", "b", "ab", "a", "\u{2581}"].iter()).unwrap();
        assert_eq!((t.len(), t.n_keys), (5, 4));
        assert_eq!(t.get("a"), Some(3));
        assert_eq!((t.key_text(0), t.key_text(3)), (None, Some("a")));
        assert_eq!(t.first_ids.get(&3), Some(&0));
        let (ha, _) = t.hasher.hash(b"a");
        let (hb, pow_b) = t.hasher.hash(b"b");
        assert_eq!(t.get_pair(t.hasher.concat(ha, hb, pow_b), 3, 1), Some(2));
        assert_eq!(t.char_id('\u{2581}', "\u{2581}"), Some(4));
        assert_eq!(t.char_id('c', "c"), None);
    }
}
