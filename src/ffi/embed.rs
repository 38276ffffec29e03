//! Embeddings through a session: the vectors of token runs, pooled as the pack declares
//! (sentence-transformers' modules.json, a GGUF's pooling_type) or as the caller asks, and the
//! facts a caller sizes its buffer from. The bodies drive `Session::embed`,
//! `Model::embedding_defaults` and `Model::embedding_dim`.

use crate::error::{Error, Result, Status};
use crate::ffi::guard::{checked_len, ffi_boundary, read_prefix, try_mut, try_ref, try_slice, try_slice_mut, AbiStruct};
use crate::ffi::model::packlm_model;
use crate::ffi::session::{packlm_session, session_in_use};
use crate::{EmbedOptions, Model, Pooling};

/// `pooling` of packlm_embed_params and packlm_embed_info: the pack's own (sentence-transformers'
/// modules.json, a GGUF's pooling_type; PACKLM_POOLING_NONE when it declares none).
pub const PACKLM_POOLING_DEFAULT: i32 = -1;
/// One vector per token of every text: the final hidden states, after the final norm.
pub const PACKLM_POOLING_NONE: i32 = 0;
/// One vector per text: the mean of its token vectors.
pub const PACKLM_POOLING_MEAN: i32 = 1;
/// One vector per text: its first token's vector.
pub const PACKLM_POOLING_CLS: i32 = 2;
/// One vector per text: its last token's vector.
pub const PACKLM_POOLING_LAST: i32 = 3;
// llama.cpp's numbers (LLAMA_POOLING_TYPE_*), which Pooling keeps.
const _: () = assert!(
    PACKLM_POOLING_NONE == Pooling::None as i32
        && PACKLM_POOLING_MEAN == Pooling::Mean as i32
        && PACKLM_POOLING_CLS == Pooling::Cls as i32
        && PACKLM_POOLING_LAST == Pooling::Last as i32
);

/// Options of `packlm_embed`. Passing NULL instead takes the pack's own pooling and
/// normalization. Note that a zeroed struct with `size` set asks for PACKLM_POOLING_NONE and no
/// normalization: set both fields to -1 for the pack's own.
#[repr(C)]
pub struct packlm_embed_params {
    /// sizeof(packlm_embed_params) as the caller compiled it.
    pub size: usize,
    /// PACKLM_POOLING_DEFAULT (-1), _NONE (0), _MEAN (1), _CLS (2) or _LAST (3); other values
    /// give PACKLM_ERR_INVALID_ARGUMENT.
    pub pooling: i32,
    /// L2-normalize each vector: -1 as the pack says (its Normalize module, for pooled vectors
    /// only; per-token vectors never are), 0 off, 1 on; other values give
    /// PACKLM_ERR_INVALID_ARGUMENT.
    pub normalize: i32,
}

// SAFETY: repr(C), starts with the usize size, every other field an integer.
unsafe impl AbiStruct for packlm_embed_params {
    const NAME: &'static str = "packlm_embed_params";
    const FIRST_SIZE: usize = std::mem::offset_of!(packlm_embed_params, normalize) + std::mem::size_of::<i32>();
    const FIRST_ABI: u32 = 2;
    fn defaults() -> Self {
        packlm_embed_params { size: std::mem::size_of::<packlm_embed_params>(), pooling: PACKLM_POOLING_DEFAULT, normalize: -1 }
    }
}

/// A pooling code: None for PACKLM_POOLING_DEFAULT; anything outside -1..3 is refused naming
/// `what`.
fn pooling_from_code(code: i32, what: &str) -> Result<Option<Pooling>> {
    if code == PACKLM_POOLING_DEFAULT {
        return Ok(None);
    }
    Pooling::from_code(code as i64).map(Some).ok_or_else(|| {
        Error::invalid(format!("{what} {code} is not one of -1 (the pack's own), 0 (none), 1 (mean), 2 (cls), 3 (last)"))
    })
}

/// A normalize code: -1 the pack's own (None), 0 off, 1 on.
fn normalize_from_code(code: i32) -> Result<Option<bool>> {
    match code {
        -1 => Ok(None),
        0 => Ok(Some(false)),
        1 => Ok(Some(true)),
        other => Err(Error::invalid(format!("params.normalize {other} is not one of -1 (the pack's own), 0 (off), 1 (on)"))),
    }
}

/// The pooling a call computes: the one asked for, or the pack's.
fn resolve(model: &Model, pooling: Option<Pooling>) -> Result<Pooling> {
    match pooling {
        Some(p) => Ok(p),
        None => Ok(model.embedding_defaults()?.0),
    }
}

/// What `model` embeds by default, and the length of one vector. `pooling` is a PACKLM_POOLING_*
/// code (-1 = the pack's own); `*dim` receives the length of one vector under it (the pack's
/// last Dense layer's width for a pooled vector, else the hidden size). `*default_pooling`
/// receives the pack's own pooling (PACKLM_POOLING_NONE when it declares none) and
/// `*default_normalize` whether its vectors are L2-normalized by default (its Normalize module,
/// for a pooled default). Any out pointer may be NULL; nothing is written on failure. A pooling
/// code outside -1..3 gives PACKLM_ERR_INVALID_ARGUMENT; a pooling the pack declares but packlm
/// does not compute gives PACKLM_ERR_UNSUPPORTED when the pack's own is asked for (as
/// `pooling` -1 or through `default_pooling` / `default_normalize`). Safe from any thread.
#[no_mangle]
pub unsafe extern "C" fn packlm_embed_info(model: *const packlm_model, pooling: i32, default_pooling: *mut i32, default_normalize: *mut bool, dim: *mut usize) -> Status {
    ffi_boundary!("packlm_embed_info", {
        let m = &try_ref(model, "model")?.inner;
        let asked = pooling_from_code(pooling, "pooling")?;
        // The pack's defaults are read only when needed, so that a pack whose declared pooling
        // packlm does not compute still answers for an explicit one.
        let defaults = if asked.is_none() || !default_pooling.is_null() || !default_normalize.is_null() { Some(m.embedding_defaults()?) } else { None };
        let d = m.embedding_dim(resolve(m, asked)?);
        if let (Some(out), Some((p, _))) = (default_pooling.as_mut(), defaults) {
            *out = p as i32;
        }
        if let (Some(out), Some((_, n))) = (default_normalize.as_mut(), defaults) {
            *out = n;
        }
        if let Some(out) = dim.as_mut() {
            *out = d;
        }
        Ok(())
    })
}

/// Embeds `n_texts` texts (at least 1) of token ids (as packlm_tokenize gives them with
/// PACKLM_TOKENIZE_ADD_SPECIAL): the texts are consecutive runs of `tokens`, `lengths[i]` ids
/// each (none 0). `params` may be NULL for the pack's own pooling and normalization. The
/// vectors go to `out`, row-major: one row per text when pooled, one per token of every text in
/// order (sum of `lengths` rows) for PACKLM_POOLING_NONE; `*n_rows` and `*dim` receive their
/// count and length. All texts run in one pass over the weights, each attending to itself only:
/// a text's vector is bit-identical whatever texts share the call. The session's adapters
/// (packlm_session_set_adapters) apply; its positions, tokens and logits are untouched.
///
/// `out` holds `cap` floats. A capacity below rows x dim gives PACKLM_ERR_BUFFER_TOO_SMALL with
/// the rows and dim needed in `*n_rows` and `*dim`; then nothing else is written and nothing is
/// computed (`out` may be NULL with `cap` 0 to ask the size). Refused before anything runs:
/// NULL `session`, `n_rows`, `dim`, `lengths` or `tokens` (PACKLM_ERR_NULL_ARGUMENT); `n_texts`
/// 0, a length of 0, `params` with a size out of range or a pooling or normalize code it does
/// not know (PACKLM_ERR_INVALID_ARGUMENT, naming the field); lengths whose sum or rows x dim
/// overflows size_t (PACKLM_ERR_LIMIT_EXCEEDED). Then, as the session checks them: a text longer
/// than the session's context (PACKLM_ERR_CONTEXT_OVERFLOW), an id outside the vocabulary
/// (PACKLM_ERR_TOKEN_OUT_OF_RANGE), more than 2^20 texts (PACKLM_ERR_LIMIT_EXCEEDED), a pack
/// pooling packlm does not compute (PACKLM_ERR_UNSUPPORTED). On any failure `out`, `*n_rows`
/// and `*dim` are untouched (but with PACKLM_ERR_BUFFER_TOO_SMALL) and the session is as it
/// was. The session is used by one thread at a time (PACKLM_ERR_SESSION_BUSY while another call
/// holds it).
#[no_mangle]
pub unsafe extern "C" fn packlm_embed(
    session: *mut packlm_session,
    tokens: *const u32,
    lengths: *const usize,
    n_texts: usize,
    params: *const packlm_embed_params,
    out: *mut f32,
    cap: usize,
    n_rows: *mut usize,
    dim: *mut usize,
) -> Status {
    ffi_boundary!("packlm_embed", {
        let mut s = session_in_use(session)?;
        let n_rows = try_mut(n_rows, "n_rows")?;
        let dim = try_mut(dim, "dim")?;
        let p = if params.is_null() { packlm_embed_params::defaults() } else { read_prefix(params, "params")? };
        let options = EmbedOptions { pooling: pooling_from_code(p.pooling, "params.pooling")?, normalize: normalize_from_code(p.normalize)? };
        if n_texts == 0 {
            return Err(Error::invalid("n_texts is 0: no texts given"));
        }
        let lengths = try_slice(lengths, n_texts, "lengths")?;
        let mut total = 0usize;
        for (i, &len) in lengths.iter().enumerate() {
            if len == 0 {
                return Err(Error::invalid(format!("lengths[{i}] is 0: text {i} has no tokens")));
            }
            total = total
                .checked_add(len)
                .ok_or_else(|| Error::new(Status::ErrLimitExceeded, format!("lengths: the sum of the first {} lengths overflows size_t", i + 1)))?;
        }
        let tokens = try_slice(tokens, total, "tokens")?;
        let pooling = resolve(s.model(), options.pooling)?;
        let d = s.model().embedding_dim(pooling);
        let rows = if pooling == Pooling::None { total } else { n_texts };
        let need = checked_len(rows, d, "rows x dim")?;
        if cap < need {
            *n_rows = rows;
            *dim = d;
            return Err(Error::new(Status::ErrBufferTooSmall, format!("out needs {need} floats ({rows} rows x {d}), its capacity is {cap}")));
        }
        let out = try_slice_mut(out, need, "out")?;
        let mut texts: Vec<&[u32]> = Vec::with_capacity(n_texts);
        let mut start = 0;
        for &len in lengths {
            texts.push(&tokens[start..start + len]);
            start += len;
        }
        // The pooling resolved above, so the rows computed are the rows sized.
        let e = s.embed(&texts, &EmbedOptions { pooling: Some(pooling), ..options })?;
        if e.values.len() != need || e.dim != d {
            return Err(Error::new(Status::ErrPanic, format!("an embedding of {} floats of dim {} where {need} of dim {d} were sized", e.values.len(), e.dim)));
        }
        out.copy_from_slice(&e.values);
        *n_rows = rows;
        *dim = d;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_outside_their_range_are_refused_naming_the_field() {
        assert_eq!(pooling_from_code(-1, "pooling").ok(), Some(None));
        assert_eq!(pooling_from_code(3, "pooling").ok(), Some(Some(Pooling::Last)));
        for bad in [-2, 4, i32::MAX, i32::MIN] {
            let Err(e) = pooling_from_code(bad, "params.pooling") else { panic!("pooling {bad} was accepted") };
            assert_eq!(e.status, Status::ErrInvalidArgument);
            assert!(e.message.starts_with(&format!("params.pooling {bad} ")), "{}", e.message);
        }
        assert_eq!(normalize_from_code(-1).ok(), Some(None));
        assert_eq!(normalize_from_code(1).ok(), Some(Some(true)));
        for bad in [-2, 2] {
            let Err(e) = normalize_from_code(bad) else { panic!("normalize {bad} was accepted") };
            assert_eq!(e.status, Status::ErrInvalidArgument);
            assert!(e.message.starts_with(&format!("params.normalize {bad} ")), "{}", e.message);
        }
    }

    /// The first published layout: size, pooling, normalize (16 bytes on LP64, no padding).
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn embed_params_first_size_is_its_abi_2_layout() {
        assert_eq!(packlm_embed_params::FIRST_SIZE, 16);
        assert_eq!(std::mem::size_of::<packlm_embed_params>(), 16);
    }
}
