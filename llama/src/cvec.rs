//! `llama_set_adapter_cvec`: a context's control vector (llama.cpp's "cvec"), one vector of
//! n_embd floats per layer added to the residual stream at the end of each layer of
//! [il_start, il_end] (packlm's `ControlVector`, held by every sequence of the context).
//!
//! llama.cpp's rules (src/llama-adapter.cpp `llama_adapter_cvec::apply` and `tensor_for`):
//! `data` starts at layer 1 (there is never a vector for layer 0); layer il (1 to n_layer - 1)
//! takes the n_embd floats at (il - 1) x n_embd when they lie within `len`, and keeps the values
//! it had otherwise (zeros at first); a layer gets its vector when il_start <= il <= il_end.
//! NULL `data` clears the vector; an n_embd other than the model's gives -1 (llama.cpp's
//! `llama_set_adapter_cvec` returns -1, not 1, for its `false`).
//!
//! Differences, each logged: a value that is not finite is refused with -1 (llama.cpp adds it);
//! and the values a layer keeps when `data` does not reach it are those of the vector the
//! context has now, so a layer outside the previous range, or after a clear, restarts at zero
//! (llama.cpp keeps its buffer through both).
//!
//! As with LoRA adapters (lora.rs), every position a sequence holds is computed under one
//! vector: a new vector on a context whose sequences hold positions recomputes those positions
//! under it, one pass over each such sequence's tokens (logged as a warning), where llama.cpp
//! keeps the keys and values computed under the old one.

use crate::adapter::Sequence;
use crate::context::{hold, LlamaContext};
use crate::log::{error, guard};

/// Whether two control vectors add the same values to the same layers (None: none).
fn same(a: Option<&packlm::ControlVector>, b: Option<&packlm::ControlVector>, n_layer: usize) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => (0..n_layer).all(|il| match (a.values(il), b.values(il)) {
            (None, None) => true,
            (Some(x), Some(y)) => x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
            _ => false,
        }),
        _ => false,
    }
}

/// Sets (or, with NULL `data`, clears) the context's control vector; see the module's doc.
/// Returns 0, or -1 (logged, the context unchanged) for an n_embd other than the model's, a
/// value that is not finite, or a sequence that cannot be recomputed under the new vector.
#[no_mangle]
pub unsafe extern "C" fn llama_set_adapter_cvec(ctx: *mut LlamaContext, data: *const f32, len: usize, n_embd: i32, il_start: i32, il_end: i32) -> i32 {
    const F: &str = "llama_set_adapter_cvec";
    guard(F, -1, || {
        let Some(mut c) = hold(F, ctx) else { return -1 };
        let engine = &(*(*ctx).model).engine;
        let (n_layer, hidden) = (engine.n_layer(), engine.n_embd());
        let now = c.seqs.first().and_then(Sequence::control_vector);
        let new = if data.is_null() {
            None
        } else {
            if usize::try_from(n_embd).ok() != Some(hidden) {
                error(F, &format!("control vector n_embd {n_embd} does not match the model's {hidden}"));
                return -1;
            }
            // packlm's layout: layer 0 first (zeros: llama.cpp never adds one there).
            let mut full = vec![0.0f32; n_layer * hidden];
            for il in 1..n_layer {
                let off = (il - 1) * hidden;
                let dst = &mut full[il * hidden..(il + 1) * hidden];
                if off + hidden <= len {
                    dst.copy_from_slice(std::slice::from_raw_parts(data.add(off), hidden));
                } else if let Some(v) = now.as_ref().and_then(|c| c.values(il)) {
                    dst.copy_from_slice(v);
                }
            }
            // tensor_for: layers il_start..=il_end, of 1..n_layer - 1.
            let start = il_start.max(1) as usize;
            let end = (il_end.max(0) as usize).min(n_layer.saturating_sub(1));
            if start > end {
                None
            } else {
                match engine.control_vector(&full, start, end) {
                    Ok(v) if v.layers().is_empty() => None,
                    Ok(v) => Some(v),
                    Err(e) => {
                        error(F, &e.to_string());
                        return -1;
                    }
                }
            }
        };
        if same(now.as_ref(), new.as_ref(), n_layer) {
            return 0;
        }
        // New sequences under the new vector (and the context's adapters), swapped in only
        // when all are made and recomputed.
        let adapters: Vec<_> = c.loras.iter().map(|e| (e.lora.clone(), e.scale)).collect();
        if !crate::lora::remake_sequences(F, ctx, &mut c.seqs, "control vector", |s| {
            Sequence::new(engine, s.n_ctx()).and_then(|mut n| {
                n.set_adapters(&adapters)?;
                n.set_control_vector(new.as_ref())?;
                Ok(n)
            })
        }) {
            return -1;
        }
        0
    })
}
