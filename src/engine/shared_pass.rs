//! A pass over several sessions' rows (`forward_many`): the row-wise ops of the layer body over
//! every row at once, rope, the KV append and attention per session (`forward::Seg`), and the
//! all-or-nothing rollback of every session's cache.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::backend::{all_finite, Tensor};
use crate::engine::adapter::AdapterSet;
use crate::engine::forward::{layers_checked, non_finite_error, PassBuffers, Seg, Want};
use crate::engine::Model;
use crate::error::{Error, Result};
use crate::kv::KvStore;

/// One session's part of a pass over several sessions (`forward_many`).
pub struct Item<'a> {
    pub kv: &'a mut dyn KvStore,
    pub tokens: &'a [u32],
    pub want: Want,
    /// Keep the rows' final residual stream (`Many::hidden`) for the caller to project (a
    /// verify judges its rows itself); such an item is never split across passes.
    pub hidden: bool,
    pub abort: &'a Arc<AtomicBool>,
    /// The session's LoRA adapters (applied to its rows only).
    pub adapters: &'a AdapterSet,
}

/// What `forward_many` hands back: each item's logits (as `forward` gives them), and for an item
/// that asked for its hidden rows, where they lie: (index into `xs`, first row).
pub struct Many {
    pub logits: Vec<Vec<f32>>,
    pub hidden: Vec<Option<(usize, usize)>>,
    pub xs: Vec<Tensor>,
}

/// The passes of `forward_many`: each a list of (item, first row, end row) of the item's tokens.
/// A pass holds at most `cap` rows, except a `hidden` item longer than `cap`, which has a pass of
/// its own (as a lone verify has); other items are split where the cap falls.
fn plan_parts(items: &[Item], cap: usize) -> Vec<Vec<(usize, usize, usize)>> {
    let mut parts: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new()];
    let mut rows = 0;
    for (i, it) in items.iter().enumerate() {
        let n = it.tokens.len();
        if it.hidden {
            if rows > 0 && rows + n > cap {
                parts.push(Vec::new());
                rows = 0;
            }
            parts.last_mut().expect("a part").push((i, 0, n));
            rows += n;
            continue;
        }
        let mut a = 0;
        while a < n {
            if rows >= cap {
                parts.push(Vec::new());
                rows = 0;
            }
            let b = n.min(a + cap - rows);
            parts.last_mut().expect("a part").push((i, a, b));
            rows += b - a;
            a = b;
        }
    }
    parts.retain(|p| !p.is_empty());
    parts
}

/// Runs several sessions' tokens as one pass over the weights: the rows of every item, in
/// order, go through each layer's matmuls together, while rope, the KV append and attention
/// run per item over its own cache (`attention_block`). Returns each item's logits, as
/// `forward` would for that item alone, bit for bit: every op but those is row-wise and a row's
/// bits do not depend on the rows beside it (the backends' exactness rule).
///
/// All or nothing: when the pass fails (abort, a logit that is not finite, a panic) every cache
/// is as before. A pass longer than the backend's `max_pass_rows` runs as consecutive passes
/// (`plan_parts`), an item's rows split across them where the boundary falls (as `forward`
/// splits one item). The first item's flag is the kernels' pass flag; every item's flag is
/// checked between layers. `ErrNonFinite` names the item (`item i: ...`) and, as `forward`
/// does, its first layer whose output was not finite.
pub fn forward_many(model: &Model, items: &mut [Item], bufs: &mut PassBuffers) -> Result<Many> {
    let mut many = Many { logits: vec![Vec::new(); items.len()], hidden: vec![None; items.len()], xs: Vec::new() };
    if items.is_empty() {
        return Ok(many);
    }
    let cap = model.backend.max_pass_rows(&model.spec).max(1);
    let vocab = model.spec.vocab_size;
    let aborts: Vec<Arc<AtomicBool>> = items.iter().map(|it| it.abort.clone()).collect();
    let parts = plan_parts(items, cap);
    let mut pass = ManyRollback { starts: items.iter().map(|it| it.kv.positions()).collect(), items, done: false };
    for part in &parts {
        // The part's tokens, each item's rows in it, and the rows whose logits are wanted.
        let mut tokens = Vec::new();
        let mut spans: Vec<(usize, usize, usize)> = Vec::with_capacity(part.len());
        let mut wanted: Vec<usize> = Vec::new();
        let mut wanted_by: Vec<(usize, usize)> = Vec::new();
        let mut keep = false;
        for &(i, a, b) in part {
            let it = &pass.items[i];
            let row0 = tokens.len();
            tokens.extend_from_slice(&it.tokens[a..b]);
            spans.push((i, row0, b - a));
            if it.hidden {
                many.hidden[i] = Some((many.xs.len(), row0));
                keep = true;
            }
            let rows: Vec<usize> = match it.want {
                Want::All => (row0..row0 + (b - a)).collect(),
                Want::Last if b == it.tokens.len() => vec![row0 + (b - a) - 1],
                _ => Vec::new(),
            };
            wanted_by.push((i, rows.len()));
            wanted.extend(rows);
        }
        let mut segs: Vec<Seg> = Vec::with_capacity(spans.len());
        let mut next = spans.iter().peekable();
        for (i, it) in pass.items.iter_mut().enumerate() {
            if let Some(&&(j, row0, rows)) = next.peek() {
                if j == i {
                    let start = it.kv.positions();
                    segs.push(Seg { kv: &mut *it.kv, row0, rows, start, adapters: it.adapters });
                    next.next();
                }
            }
        }
        let x = layers_checked(model, &mut segs, bufs, &tokens, &aborts, None)?;
        drop(segs);
        if !wanted.is_empty() {
            let mut out = bufs.take_output(model, wanted.len());
            let part_logits = out.project(model, &x, &wanted, &aborts[0]);
            bufs.keep_output(out);
            let part_logits = part_logits?;
            let mut at = 0;
            for &(i, k) in &wanted_by {
                many.logits[i].extend_from_slice(&part_logits[at * vocab..(at + k) * vocab]);
                at += k;
            }
        }
        if keep {
            many.xs.push(x);
        } else {
            bufs.keep_x(x, tokens.len());
        }
        for &(i, _, rows) in &spans {
            pass.items[i].kv.advance(rows);
        }
    }
    if let Err(e) = crate::engine::forward::device_error(model) {
        pass.rollback();
        return Err(e);
    }
    for (i, l) in many.logits.iter().enumerate() {
        if all_finite(l) {
            continue;
        }
        let bad = l.iter().position(|x| !x.is_finite()).unwrap_or(0);
        let it = &pass.items[i];
        let r = match it.want {
            Want::All => bad / vocab,
            _ => it.tokens.len() - 1,
        };
        let value = l[bad];
        pass.rollback();
        let it = &mut pass.items[i];
        let e = non_finite_error(model, &mut *it.kv, bufs, it.tokens, r, bad % vocab, value, it.abort, it.adapters);
        return Err(Error::new(e.status, format!("item {i}: {}", e.message)));
    }
    pass.done = true;
    Ok(many)
}

/// `Rollback` over every item of `forward_many`.
struct ManyRollback<'s, 'a> {
    items: &'s mut [Item<'a>],
    starts: Vec<usize>,
    done: bool,
}

impl ManyRollback<'_, '_> {
    fn rollback(&mut self) {
        for (it, &start) in self.items.iter_mut().zip(&self.starts) {
            it.kv.truncate(start);
        }
    }
}

impl Drop for ManyRollback<'_, '_> {
    fn drop(&mut self) {
        if !self.done {
            self.rollback();
        }
    }
}
