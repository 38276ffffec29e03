//! A prefix cache over snapshots: store a session's state after a prompt; later, a session
//! about to process a prompt that shares a prefix with a stored one restores that snapshot,
//! truncates it to the shared prefix, and only feeds the rest.

use crate::engine::Session;
use crate::error::Result;

#[derive(Default)]
pub struct PrefixCache {
    /// (token history, snapshot bytes), most recently stored last.
    entries: Vec<(Vec<u32>, Vec<u8>)>,
    /// Most bytes kept; the oldest entries go first.
    pub capacity_bytes: usize,
}

impl PrefixCache {
    pub fn new(capacity_bytes: usize) -> PrefixCache {
        PrefixCache { entries: Vec::new(), capacity_bytes }
    }

    /// Stores the session's current state.
    pub fn store(&mut self, s: &Session) {
        self.entries.retain(|(t, _)| t != &s.tokens);
        self.entries.push((s.tokens.clone(), s.snapshot()));
        while self.bytes() > self.capacity_bytes && self.entries.len() > 1 {
            self.entries.remove(0);
        }
        if self.bytes() > self.capacity_bytes {
            self.entries.clear();
        }
    }

    pub fn bytes(&self) -> usize {
        self.entries.iter().map(|(_, b)| b.len()).sum()
    }

    /// Puts into `s` the stored state sharing the longest prefix with `prompt` (keeping at
    /// most `prompt.len() - 1` positions, so that the prompt's last token is still fed and
    /// gives logits, and at most the session's context: a snapshot longer than that is reused
    /// up to what fits). Returns how many prompt tokens the session now holds (0: nothing
    /// reused, session untouched).
    pub fn restore_longest(&self, s: &mut Session, prompt: &[u32]) -> Result<usize> {
        let limit = prompt.len().saturating_sub(1).min(s.n_ctx());
        let best = self
            .entries
            .iter()
            .map(|(t, b)| (t.iter().zip(prompt).take_while(|(a, b)| a == b).count().min(limit), b))
            .max_by_key(|(n, _)| *n);
        match best {
            Some((n, bytes)) if n > 0 => {
                s.restore_prefix(bytes, n)?;
                Ok(n)
            }
            _ => Ok(0),
        }
    }
}
