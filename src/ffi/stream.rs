//! `packlm_detokenizer`: a streaming detokenizer over a model's vocabulary. Owned as
//! `Box<packlm_detokenizer>`, holding its own `Arc` of the model (so freeing the model first is
//! safe). Safe to move to any thread; one thread at a time (its calls change it).

use std::ffi::c_char;

use crate::error::Error;
use crate::ffi::guard::{ffi_boundary, free_box, try_mut, try_ref, write_text};
use crate::ffi::model::packlm_model;
use crate::ffi::text::PACKLM_DETOKENIZE_SKIP_SPECIAL;
use crate::Detokenizer;

/// A streaming detokenizer (opaque): fed one token at a time, it gives out only text that no
/// later token can change, holding back a partial multi-byte character until a later token
/// completes it, and a run of byte tokens (`<0xNN>`) until a token that is not one ends it (a
/// run that ends badly decodes to U+FFFD as a whole). A feed costs the same however long the
/// stream is. Every
/// output of packlm_detokenizer_feed plus that of packlm_detokenizer_flush, concatenated, equals
/// packlm_detokenize of the same tokens with the same flags, byte for byte. Created by
/// packlm_detokenizer_new, freed by packlm_detokenizer_free. Safe to move to any thread; not
/// to be used from two threads at once.
pub struct packlm_detokenizer {
    stream: Detokenizer,
}

/// A new, empty stream over `model`'s vocabulary into `*out`. `flags`: 0 or
/// PACKLM_DETOKENIZE_SKIP_SPECIAL (another bit gives PACKLM_ERR_INVALID_ARGUMENT). The stream
/// keeps the model alive. `*out` is written only on success.
#[no_mangle]
pub unsafe extern "C" fn packlm_detokenizer_new(model: *const packlm_model, flags: u32, out: *mut *mut packlm_detokenizer) -> crate::error::Status {
    ffi_boundary!("packlm_detokenizer_new", {
        let m = try_ref(model, "model")?;
        let out = try_mut(out, "out")?;
        if flags & !PACKLM_DETOKENIZE_SKIP_SPECIAL != 0 {
            return Err(Error::invalid(format!("unknown detokenize flags {flags:#x}")));
        }
        let stream = m.inner.detokenizer(flags & PACKLM_DETOKENIZE_SKIP_SPECIAL != 0);
        *out = Box::into_raw(Box::new(packlm_detokenizer { stream }));
        Ok(())
    })
}

/// Feeds `token`: the text it completes (possibly empty), NUL-terminated, goes into `buf`
/// (capacity `cap`) and its byte length into `*n`. With PACKLM_ERR_BUFFER_TOO_SMALL, `*n`
/// receives the capacity needed (length + 1) and the token is NOT consumed: call again with a
/// larger buffer. An id outside the vocabulary gives PACKLM_ERR_TOKEN_OUT_OF_RANGE and is not
/// consumed either. On any failure the stream is as it was.
#[no_mangle]
pub unsafe extern "C" fn packlm_detokenizer_feed(d: *mut packlm_detokenizer, token: u32, buf: *mut c_char, cap: usize, n: *mut usize) -> crate::error::Status {
    ffi_boundary!("packlm_detokenizer_feed", {
        let d = try_mut(d, "detokenizer")?;
        let text = d.stream.peek(token)?;
        write_text(&text, buf, cap, n)?;
        d.stream.commit(token, &text);
        Ok(())
    })
}

/// End of the stream: writes what is held back (an incomplete trailing sequence becomes what
/// packlm_detokenize gives for it), with the buffer rules of packlm_detokenizer_feed; on
/// success the stream is empty and the next token starts a new text. On failure (buffer too
/// small included) the stream is as it was.
#[no_mangle]
pub unsafe extern "C" fn packlm_detokenizer_flush(d: *mut packlm_detokenizer, buf: *mut c_char, cap: usize, n: *mut usize) -> crate::error::Status {
    ffi_boundary!("packlm_detokenizer_flush", {
        let d = try_mut(d, "detokenizer")?;
        let text = d.stream.pending()?;
        write_text(&text, buf, cap, n)?;
        d.stream.reset();
        Ok(())
    })
}

/// Frees a stream. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn packlm_detokenizer_free(d: *mut packlm_detokenizer) {
    free_box(d);
}
