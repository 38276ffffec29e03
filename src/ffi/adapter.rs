//! `packlm_adapter`: a LoRA adapter opened for one model (a PEFT folder or a llama.cpp adapter
//! GGUF), given to sessions with packlm_session_set_adapters. Owned as `Box<packlm_adapter>`
//! holding an `Adapter`, whose tensors are shared (an `Arc`): a session that uses the adapter
//! holds its own reference, so freeing the handle while sessions use it is safe. Immutable
//! after open: safe to move to any thread and to use from many threads at once.

use std::ffi::c_char;
use std::path::Path;

use crate::error::{Error, Status};
use crate::ffi::guard::{ffi_boundary, free_box, try_cstr, try_mut, try_ref, try_slice};
use crate::ffi::model::packlm_model;
use crate::ffi::session::{packlm_session, session_in_use};
use crate::Adapter;

/// A LoRA adapter opened for one model (opaque). Created by packlm_adapter_open, freed by
/// packlm_adapter_free. Immutable: safe to move to any thread and to use from any number of
/// threads at once; the sessions it is set on keep it alive, and it keeps its model alive.
pub struct packlm_adapter {
    inner: Adapter,
}

/// Opens the LoRA adapter at the NUL-terminated UTF-8 `path` for `model`: a PEFT folder
/// (adapter_config.json + adapter_model.safetensors) or a llama.cpp adapter GGUF. Its tensors
/// are checked against the model's shapes: an adapter for another base (a tensor whose shape or
/// layer does not fit) gives PACKLM_ERR_TENSOR naming it; a missing file PACKLM_ERR_IO; a kind
/// of adapter packlm does not compute (DoRA, trained biases, per-module ranks)
/// PACKLM_ERR_UNSUPPORTED naming the key. On success `*out` receives an adapter the caller owns
/// (free with packlm_adapter_free); on failure `*out` is untouched. Safe from any thread.
#[no_mangle]
pub unsafe extern "C" fn packlm_adapter_open(model: *const packlm_model, path: *const c_char, out: *mut *mut packlm_adapter) -> Status {
    ffi_boundary!("packlm_adapter_open", {
        let m = &try_ref(model, "model")?.inner;
        let path = try_cstr(path, "path")?;
        let out = try_mut(out, "out")?;
        let inner = Adapter::open(m, Path::new(path))?;
        *out = Box::into_raw(Box::new(packlm_adapter { inner }));
        Ok(())
    })
}

/// Frees an adapter handle; NULL is a no-op. Sessions it was set on keep using it (they hold
/// their own reference) until their adapters are changed or they are freed.
#[no_mangle]
pub unsafe extern "C" fn packlm_adapter_free(adapter: *mut packlm_adapter) {
    free_box(adapter);
}

/// The adapter's rank (its largest, when modules differ) into `*rank` and its alpha (PEFT's
/// `lora_alpha`; a GGUF's `adapter.lora.alpha`) into `*alpha`; a module's update is scaled by
/// alpha / rank times the scale given to packlm_session_set_adapters. Either out pointer may
/// be NULL; nothing is written on failure. Safe from any thread.
#[no_mangle]
pub unsafe extern "C" fn packlm_adapter_info(adapter: *const packlm_adapter, rank: *mut u32, alpha: *mut f32) -> Status {
    ffi_boundary!("packlm_adapter_info", {
        let a = &try_ref(adapter, "adapter")?.inner;
        let r = u32::try_from(a.rank()).map_err(|_| Error::new(Status::ErrLimitExceeded, format!("rank {} does not fit a uint32_t", a.rank())))?;
        if let Some(out) = rank.as_mut() {
            *out = r;
        }
        if let Some(out) = alpha.as_mut() {
            *out = a.alpha();
        }
        Ok(())
    })
}

/// Applies `n` adapters to `session`'s passes from now on, `adapters[i]` with the finite scale
/// `scales[i]` (1.0 as trained), in order; `n` 0 returns the session to the base model
/// (`adapters` and `scales` may be NULL then). The adapters are applied at run time to this
/// session's rows only, never merged into the shared weights, so sessions of one model may use
/// different adapters at once, in packlm_step_sessions too; packlm_embed uses them as well. The
/// session keeps its own reference to each adapter: the handles may be freed after the call.
///
/// Allowed on an empty session only (no positions held: a new one, or after
/// packlm_truncate(session, 0)), so that every key and value it holds was computed with the same
/// adapters; otherwise PACKLM_ERR_INVALID_ARGUMENT. A snapshot carries the set's fingerprint and
/// a session with another set refuses it. Also refused with PACKLM_ERR_INVALID_ARGUMENT: an
/// adapter opened for another model handle, a scale that is not finite; with
/// PACKLM_ERR_NULL_ARGUMENT a NULL `session`, array (when `n` > 0) or `adapters[i]` (the
/// message names i). On failure the session's adapters are as they were. The session is used by
/// one thread at a time (PACKLM_ERR_SESSION_BUSY while another call holds it).
#[no_mangle]
pub unsafe extern "C" fn packlm_session_set_adapters(session: *mut packlm_session, adapters: *const *const packlm_adapter, scales: *const f32, n: usize) -> Status {
    ffi_boundary!("packlm_session_set_adapters", {
        let mut s = session_in_use(session)?;
        let handles = try_slice(adapters, n, "adapters")?;
        let scales = try_slice(scales, n, "scales")?;
        let mut set = Vec::with_capacity(n);
        for (i, (&a, &scale)) in handles.iter().zip(scales).enumerate() {
            let a = try_ref(a, &format!("adapters[{i}]"))?;
            set.push((a.inner.clone(), scale));
        }
        s.set_adapters(&set)
    })
}
