//! A context's settings that change no result: thread counts, warmup, causal attention and
//! the abort callback (`llama_set_n_threads`, `llama_set_causal_attn`, ...). Embeddings are
//! turned on and off in `embeddings`.
//!
//! Thread counts are applied: before each pass of a context the model's worker-thread cap
//! (packlm's `Model::set_threads`) is set to the context's `n_threads` for a pass of one
//! token, its `n_threads_batch` for more, as llama.cpp chooses (llama-context.cpp,
//! `graph_compute`: `batched` is a ubatch of more than one token, whatever its sequences).
//! packlm's cap belongs to the model, so the contexts of one model share it: while two of
//! them run passes at once, each pass runs under the count set last. That changes speed
//! only: packlm's results are the same bits for any thread count.

use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::Duration;

use packlm::AbortHandle;

use crate::adapter::Engine;
use crate::context::{ctx_ref, LlamaContext};
use crate::log::{error, guard};

/// The threads ggml computes with when asked for 0 or fewer (ggml.h, GGML_DEFAULT_N_THREADS).
const GGML_DEFAULT_N_THREADS: usize = 4;
/// The most worker threads packlm runs a model with (packlm's MAX_THREADS; more is refused).
pub const MAX_THREADS: usize = 256;

/// `ggml_abort_callback`: true asks the computation to stop.
pub type AbortCallback = unsafe extern "C" fn(*mut c_void) -> bool;

/// The settings of one context; every field may be read and set from the context's calls
/// while a decode runs (the abort callback is read by the decode's watcher).
pub struct Settings {
    /// `llama_n_threads` / `llama_n_threads_batch`: what the params or `llama_set_n_threads`
    /// gave (reported as given); `apply_threads` sets them on the model before each pass.
    n_threads: AtomicI32,
    n_threads_batch: AtomicI32,
    /// The abort callback and its data (as an address: the pointer is the client's).
    abort: Mutex<Option<(AbortCallback, usize)>>,
}

impl Settings {
    /// From `llama_context_params`: thread counts and `abort_callback` / `abort_callback_data`
    /// (`abort_callback` must be NULL or a `ggml_abort_callback`).
    pub unsafe fn new(n_threads: i32, n_threads_batch: i32, abort_callback: *mut c_void, abort_data: *mut c_void) -> Settings {
        // SAFETY: llama.h types the field as ggml_abort_callback; NULL is None.
        let callback = (!abort_callback.is_null()).then(|| std::mem::transmute::<*mut c_void, AbortCallback>(abort_callback));
        Settings {
            n_threads: AtomicI32::new(n_threads),
            n_threads_batch: AtomicI32::new(n_threads_batch),
            abort: Mutex::new(callback.map(|cb| (cb, abort_data as usize))),
        }
    }

    /// Sets the model's worker-thread cap to this context's count for a pass of `n_tokens`
    /// tokens (see the module's doc): `n_threads` for one, `n_threads_batch` for more. A count
    /// of 0 or less is ggml's default, 4 (ggml-cpu.c, `ggml_graph_plan`); one over packlm's
    /// 256 is 256. A cap packlm refuses (its pool cannot grow) is logged under `f` and the
    /// pass runs under the cap in force.
    pub fn apply_threads(&self, f: &str, engine: &Engine, n_tokens: usize) {
        let asked = if n_tokens == 1 { &self.n_threads } else { &self.n_threads_batch };
        let threads = threads_for(asked.load(Ordering::Relaxed));
        if let Err(e) = engine.set_threads(threads) {
            error(f, &format!("{threads} threads: {e}; the pass runs under the model's thread count in force"));
        }
    }

    /// The abort callback and its data, if one is set.
    pub fn abort_callback(&self) -> Option<(AbortCallback, *mut c_void)> {
        let a = *self.abort.lock().unwrap_or_else(|e| e.into_inner());
        a.map(|(cb, data)| (cb, data as *mut c_void))
    }
}

/// The threads a pass runs with for a context's count `asked` (see `Settings::apply_threads`).
fn threads_for(asked: i32) -> usize {
    match usize::try_from(asked) {
        Ok(0) | Err(_) => GGML_DEFAULT_N_THREADS,
        Ok(n) => n.min(MAX_THREADS),
    }
}

#[no_mangle]
pub unsafe extern "C" fn llama_n_threads(ctx: *mut LlamaContext) -> i32 {
    guard("llama_n_threads", -1, || ctx_ref("llama_n_threads", ctx).map_or(-1, |c| c.settings.n_threads.load(Ordering::Relaxed)))
}

#[no_mangle]
pub unsafe extern "C" fn llama_n_threads_batch(ctx: *mut LlamaContext) -> i32 {
    guard("llama_n_threads_batch", -1, || ctx_ref("llama_n_threads_batch", ctx).map_or(-1, |c| c.settings.n_threads_batch.load(Ordering::Relaxed)))
}

/// Sets the context's thread counts: `n_threads` for a pass of one token, `n_threads_batch`
/// for more, applied to the model before each of the context's passes (see the module's
/// doc); `llama_n_threads` and `llama_n_threads_batch` report them as given.
#[no_mangle]
pub unsafe extern "C" fn llama_set_n_threads(ctx: *mut LlamaContext, n_threads: i32, n_threads_batch: i32) {
    guard("llama_set_n_threads", (), || {
        if let Some(c) = ctx_ref("llama_set_n_threads", ctx) {
            c.settings.n_threads.store(n_threads, Ordering::Relaxed);
            c.settings.n_threads_batch.store(n_threads_batch, Ordering::Relaxed);
        }
    })
}

/// Accepted with no effect: llama.cpp's warmup runs a pass to load the weights into caches;
/// packlm has nothing to warm, and no result depends on it.
#[no_mangle]
pub unsafe extern "C" fn llama_set_warmup(ctx: *mut LlamaContext, _warmup: bool) {
    let _ = ctx_ref("llama_set_warmup", ctx);
}

/// A model's attention is the one packlm computes for it: causal for a decoder, both ways for
/// an embedding model that declares it (Gemma3's use_bidirectional_attention). Asking for the
/// other (llama.cpp allows it) is refused with a log line; attention stays the model's.
#[no_mangle]
pub unsafe extern "C" fn llama_set_causal_attn(ctx: *mut LlamaContext, causal_attn: bool) {
    const F: &str = "llama_set_causal_attn";
    let Some(c) = ctx_ref(F, ctx) else { return };
    let causal = (*c.model).engine.is_causal();
    if causal_attn != causal {
        let (asked, is) = if causal { ("non-causal", "causal") } else { ("causal", "bidirectional") };
        error(F, &format!("{asked} attention is not supported for this model; attention stays {is}"));
    }
}

/// Whether the context's attention is causal: the model's (see `llama_set_causal_attn`).
#[no_mangle]
pub unsafe extern "C" fn llama_get_causal_attn(ctx: *const LlamaContext) -> bool {
    ctx_ref("llama_get_causal_attn", ctx).is_some_and(|c| (*c.model).engine.is_causal())
}

/// Sets (NULL: clears) the callback `llama_decode` asks whether to stop: before a pass, and
/// while it runs (from a watcher thread, as llama.cpp asks from its compute threads). A
/// stop gives 2 and leaves every sequence as it was.
#[no_mangle]
pub unsafe extern "C" fn llama_set_abort_callback(ctx: *mut LlamaContext, callback: Option<AbortCallback>, data: *mut c_void) {
    guard("llama_set_abort_callback", (), || {
        if let Some(c) = ctx_ref("llama_set_abort_callback", ctx) {
            *c.settings.abort.lock().unwrap_or_else(|e| e.into_inner()) = callback.map(|cb| (cb, data as usize));
        }
    })
}

/// How often the watcher asks the abort callback while a pass runs.
const ABORT_POLL: Duration = Duration::from_millis(1);

/// Runs `pass` (the steps of `handles`' sequences) under the abort callback, if one is set:
/// None when the callback asks to stop before the pass (nothing is run). While the pass runs a
/// watcher thread asks the callback every `ABORT_POLL`; a stop sets the sequences' abort
/// flags, and the pass returns packlm's ErrAborted with the sequences as they were. The flags
/// are cleared before returning.
pub fn run_abortable<T>(settings: &Settings, handles: &[AbortHandle], pass: impl FnOnce() -> T) -> Option<T> {
    let Some((callback, data)) = settings.abort_callback() else { return Some(pass()) };
    // SAFETY: the client's callback and data, as llama.h's contract gives them.
    if unsafe { callback(data) } {
        return None;
    }
    let data = data as usize;
    let done = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Acquire) {
                // SAFETY: as above; llama.cpp too asks it from threads other than the caller's.
                if unsafe { callback(data as *mut c_void) } {
                    handles.iter().for_each(AbortHandle::abort);
                    return;
                }
                std::thread::sleep(ABORT_POLL);
            }
        });
        let result = pass();
        done.store(true, Ordering::Release);
        result
    });
    handles.iter().for_each(AbortHandle::clear);
    Some(result)
}

#[cfg(test)]
mod tests {
    use super::threads_for;

    #[test]
    fn thread_counts_map_as_ggml_and_packlm_take_them() {
        // 0 or less: ggml's GGML_DEFAULT_N_THREADS; past packlm's 256: 256.
        assert_eq!([-3, 0, 1, 2, 16, 256, 257, i32::MAX].map(threads_for), [4, 4, 1, 2, 16, 256, 256, 256]);
    }
}
