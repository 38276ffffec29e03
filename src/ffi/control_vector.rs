//! `packlm_control_vector`: a control vector (llama.cpp's "cvec") made for one model, from data
//! or from llama.cpp control-vector GGUFs, given to sessions with
//! packlm_session_set_control_vector. Owned as `Box<packlm_control_vector>` holding a
//! `ControlVector`, whose vectors are shared (an `Arc`): a session that uses it holds its own
//! reference, so freeing the handle while sessions use it is safe. Immutable after it is made:
//! safe to move to any thread and to use from many threads at once.

use std::ffi::c_char;
use std::path::Path;

use crate::error::{Error, Result, Status};
use crate::ffi::guard::{ffi_boundary, free_box, try_cstr, try_mut, try_ref, try_slice};
use crate::ffi::model::packlm_model;
use crate::ffi::session::{packlm_session, session_in_use};
use crate::ControlVector;

/// A control vector made for one model (opaque). Created by packlm_control_vector_from_data or
/// packlm_control_vector_open, freed by packlm_control_vector_free. Immutable: safe to move to
/// any thread and to use from any number of threads at once; the sessions it is set on keep it
/// alive, and it keeps its model alive.
pub struct packlm_control_vector {
    inner: ControlVector,
}

fn layer(v: u32) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::invalid(format!("layer {v} does not fit a usize")))
}

/// A control vector for `model` from `len` floats at `data`: one vector of `n_embd` floats per
/// layer, layer 0 first (so `len` = n_layers x n_embd), added to the residual stream at the end
/// of layers `layer_start` to `layer_end` (0-based, inclusive) of the sessions it is set on.
/// The floats are copied: `data` may be freed after the call. A layer whose vector is all zeros
/// gets nothing added (the bits of no vector).
///
/// Refused with PACKLM_ERR_INVALID_ARGUMENT: `n_embd` other than the model's hidden size, `len`
/// other than n_layers x n_embd, a range past the model's layers or with start after end; with
/// PACKLM_ERR_NON_FINITE a value that is not finite (the message names its layer and element);
/// with PACKLM_ERR_NULL_ARGUMENT a NULL `model`, `out` or `data` (when `len` > 0). On success
/// `*out` receives a vector the caller owns (free with packlm_control_vector_free); on failure
/// `*out` is untouched. Safe from any thread.
#[no_mangle]
pub unsafe extern "C" fn packlm_control_vector_from_data(
    model: *const packlm_model,
    data: *const f32,
    len: usize,
    n_embd: usize,
    layer_start: u32,
    layer_end: u32,
    out: *mut *mut packlm_control_vector,
) -> Status {
    ffi_boundary!("packlm_control_vector_from_data", {
        let m = &try_ref(model, "model")?.inner;
        let data = try_slice(data, len, "data")?;
        let out = try_mut(out, "out")?;
        let inner = ControlVector::from_data(m, data, n_embd, layer(layer_start)?, layer(layer_end)?)?;
        *out = Box::into_raw(Box::new(packlm_control_vector { inner }));
        Ok(())
    })
}

/// A control vector for `model` read from `n` (at least 1) llama.cpp control-vector GGUFs at
/// the NUL-terminated UTF-8 `paths`: each file's tensors `direction.N` (f32 vectors of the
/// hidden size, for layer N, N from 1) times `scales[i]`, summed over the files as llama.cpp's
/// common_control_vector_load does, and added to the end of layers `layer_start` to
/// `layer_end` (0-based, inclusive; llama.cpp's default is 1 to n_layers - 1: there is never a
/// direction for layer 0).
///
/// Refused, naming the file and tensor: PACKLM_ERR_IO a missing file; PACKLM_ERR_FORMAT a file
/// that is not a control vector (another general.architecture, no tensors, a tensor not named
/// direction.N); PACKLM_ERR_TENSOR a direction of another width than the model's hidden size,
/// for layer 0 or a layer the model lacks, or not a one-dimensional f32 vector;
/// PACKLM_ERR_NON_FINITE a value that is not finite; PACKLM_ERR_INVALID_ARGUMENT `n` 0, a scale
/// that is not finite, a range past the model's layers; PACKLM_ERR_NULL_ARGUMENT a NULL
/// `model`, `paths`, `scales`, `paths[i]` or `out`. On success `*out` receives a vector the
/// caller owns (free with packlm_control_vector_free); on failure `*out` is untouched. Safe
/// from any thread.
#[no_mangle]
pub unsafe extern "C" fn packlm_control_vector_open(
    model: *const packlm_model,
    paths: *const *const c_char,
    scales: *const f32,
    n: usize,
    layer_start: u32,
    layer_end: u32,
    out: *mut *mut packlm_control_vector,
) -> Status {
    ffi_boundary!("packlm_control_vector_open", {
        let m = &try_ref(model, "model")?.inner;
        if n == 0 {
            return Err(Error::invalid("no control vector files given (n is 0)"));
        }
        let paths = try_slice(paths, n, "paths")?;
        let scales = try_slice(scales, n, "scales")?;
        let out = try_mut(out, "out")?;
        let mut files = Vec::with_capacity(n);
        for (i, (&p, &s)) in paths.iter().zip(scales).enumerate() {
            files.push((Path::new(try_cstr(p, &format!("paths[{i}]"))?), s));
        }
        let inner = ControlVector::open_gguf(m, &files, layer(layer_start)?, layer(layer_end)?)?;
        *out = Box::into_raw(Box::new(packlm_control_vector { inner }));
        Ok(())
    })
}

/// Frees a control vector handle; NULL is a no-op. Sessions it was set on keep using it (they
/// hold their own reference) until their vector is changed or they are freed.
#[no_mangle]
pub unsafe extern "C" fn packlm_control_vector_free(control: *mut packlm_control_vector) {
    free_box(control);
}

/// Adds `control` to the end of each layer of its range in `session`'s passes from now on;
/// NULL removes the session's vector. The session's adapters (packlm_session_set_adapters)
/// stay. Applied to this session's rows only, so sessions of one model may use different
/// vectors at once, in packlm_step_sessions too; packlm_embed uses it as well. The session
/// keeps its own reference: the handle may be freed after the call.
///
/// Allowed on an empty session only (no positions held: a new one, or after
/// packlm_truncate(session, 0)), so that every key and value it holds was computed with the
/// same vector; otherwise PACKLM_ERR_INVALID_ARGUMENT. A snapshot carries the vector's
/// fingerprint and a session with another vector (or none) refuses it. Also refused with
/// PACKLM_ERR_INVALID_ARGUMENT: a vector made for another model handle; with
/// PACKLM_ERR_NULL_ARGUMENT a NULL `session`. On failure the session's vector is as it was. The
/// session is used by one thread at a time (PACKLM_ERR_SESSION_BUSY while another call holds it).
#[no_mangle]
pub unsafe extern "C" fn packlm_session_set_control_vector(session: *mut packlm_session, control: *const packlm_control_vector) -> Status {
    ffi_boundary!("packlm_session_set_control_vector", {
        let mut s = session_in_use(session)?;
        // SAFETY: NULL or a handle made by this library (the header's contract).
        let c = unsafe { control.as_ref() };
        s.set_control_vector(c.map(|c| &c.inner))
    })
}
