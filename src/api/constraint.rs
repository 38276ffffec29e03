//! [`Constraint`]: structured output. A grammar (a JSON schema, llguidance's Lark, llama.cpp's
//! GBNF, or a regular expression) over a model's vocabulary, used alone (mask a logits row, accept a token, roll
//! back) or held by a session ([`Session::set_constraint`](crate::Session::set_constraint)),
//! whose logits it then masks, steps and verifies included.

use crate::api::Model;
use crate::constrain;
use crate::error::Result;

pub use crate::constrain::{GrammarKind, MAX_GRAMMAR_BYTES};

/// A grammar and the tokens it has taken. Keeps its model alive.
#[derive(Clone, Debug)]
pub struct Constraint {
    pub(crate) inner: constrain::Constraint,
    pub(crate) model: Model,
}

impl Constraint {
    /// A constraint of `kind` over `text` for `model`. The model's token table is built at its
    /// first constraint and shared by the others. A bad grammar or schema is refused with
    /// llguidance's message; text over [`MAX_GRAMMAR_BYTES`] or holding a NUL byte is refused.
    pub fn new(model: &Model, kind: GrammarKind, text: &str) -> Result<Constraint> {
        let env = model.engine().constraint_env()?;
        Ok(Constraint { inner: constrain::Constraint::new(env, kind, text)?, model: model.clone() })
    }
    /// A constraint of llama.cpp's GBNF `text` whose start is rule `root` (where `new` with
    /// [`GrammarKind::Gbnf`] starts at `root`).
    pub fn gbnf(model: &Model, text: &str, root: &str) -> Result<Constraint> {
        let env = model.engine().constraint_env()?;
        Ok(Constraint { inner: constrain::Constraint::with_start(env, GrammarKind::Gbnf, text, root)?, model: model.clone() })
    }
    /// The model it was made for.
    pub fn model(&self) -> &Model {
        &self.model
    }
    pub fn kind(&self) -> GrammarKind {
        self.inner.kind()
    }
    /// Sets the logit of every token that may not come next to -infinity.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        self.inner.mask(logits)
    }
    /// Whether `token` may come next.
    pub fn allows(&mut self, token: u32) -> Result<bool> {
        self.inner.allows(token)
    }
    /// Takes `token`; refused, with nothing changed, when the grammar does not allow it.
    pub fn accept(&mut self, token: u32) -> Result<()> {
        self.inner.accept(token)
    }
    /// Undoes the last `n` tokens taken.
    pub fn rollback(&mut self, n: usize) -> Result<()> {
        self.inner.rollback(n)
    }
    /// Tokens taken (less those rolled back).
    pub fn taken(&self) -> usize {
        self.inner.taken()
    }
    /// Whether it has ended: a stop token was taken, or the grammar allows nothing more.
    pub fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }
    /// Whether the output so far is a complete match (a stop token may come now).
    pub fn can_end(&mut self) -> Result<bool> {
        self.inner.can_end()
    }
    /// The tokens the grammar forces next (empty where it has a choice); nothing is taken.
    pub fn forced(&mut self) -> Vec<u32> {
        self.inner.forced()
    }
}
