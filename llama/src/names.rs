//! The API's pure functions over names: enum values to text and back, split-file names, the
//! quantize defaults (llama.cpp's llama.cpp, llama-model-loader.cpp, llama-quant.cpp).

use std::ffi::{c_char, CStr};

use crate::abi::ModelQuantizeParams;
use crate::log::{error, guard};

/// `llama_flash_attn_type_name`; NULL and a log line for a value outside the enum (llama.cpp
/// aborts the process).
#[no_mangle]
pub extern "C" fn llama_flash_attn_type_name(flash_attn_type: i32) -> *const c_char {
    match flash_attn_type {
        -1 => c"auto".as_ptr(),
        0 => c"disabled".as_ptr(),
        1 => c"enabled".as_ptr(),
        _ => {
            error("llama_flash_attn_type_name", &format!("no flash attention type {flash_attn_type}"));
            std::ptr::null()
        }
    }
}

/// `enum llama_load_mode` and its names, one row each (llama.cpp's `llama_load_mode_name`).
const LOAD_MODES: [(i32, &CStr); 6] = [(-1, c"auto"), (0, c"none"), (1, c"mmap"), (2, c"mlock"), (3, c"mmap+mlock"), (4, c"dio")];

/// What `llama_load_mode_from_str` gives for a name it does not know (llama.cpp throws, which
/// ends a C caller): no value of the enum, so it cannot be taken for a mode.
pub const LOAD_MODE_UNKNOWN: i32 = -2;

/// `llama_load_mode_name`; NULL and a log line for a value outside the enum (llama.cpp aborts).
#[no_mangle]
pub extern "C" fn llama_load_mode_name(load_mode: i32) -> *const c_char {
    match LOAD_MODES.iter().find(|m| m.0 == load_mode) {
        Some(m) => m.1.as_ptr(),
        None => {
            error("llama_load_mode_name", &format!("no load mode {load_mode}"));
            std::ptr::null()
        }
    }
}

/// `llama_load_mode_from_str`: the mode of that exact name; `LOAD_MODE_UNKNOWN` and a log
/// line for NULL or any other name.
#[no_mangle]
pub unsafe extern "C" fn llama_load_mode_from_str(name: *const c_char) -> i32 {
    const F: &str = "llama_load_mode_from_str";
    if name.is_null() {
        error(F, "name is NULL");
        return LOAD_MODE_UNKNOWN;
    }
    let name = CStr::from_ptr(name);
    match LOAD_MODES.iter().find(|m| m.1 == name) {
        Some(m) => m.0,
        None => {
            error(F, &format!("unknown load mode: {}", name.to_string_lossy()));
            LOAD_MODE_UNKNOWN
        }
    }
}

/// `LLAMA_FTYPE_GUESSED`: set on a file type llama.cpp inferred rather than read.
const FTYPE_GUESSED: i32 = 1024;

/// Each `enum llama_ftype` and its name, as `llama_ftype_name` (llama-model-loader.cpp) gives
/// them, each with the "(guessed) " form beside it (the function returns static strings).
const FTYPE_NAMES: &[(i32, &CStr, &CStr)] = &[
    (0, c"all F32", c"(guessed) all F32"),
    (1, c"F16", c"(guessed) F16"),
    (32, c"BF16", c"(guessed) BF16"),
    (40, c"Q1_0", c"(guessed) Q1_0"),
    (41, c"Q2_0", c"(guessed) Q2_0"),
    (2, c"Q4_0", c"(guessed) Q4_0"),
    (3, c"Q4_1", c"(guessed) Q4_1"),
    (8, c"Q5_0", c"(guessed) Q5_0"),
    (9, c"Q5_1", c"(guessed) Q5_1"),
    (7, c"Q8_0", c"(guessed) Q8_0"),
    (38, c"MXFP4 MoE", c"(guessed) MXFP4 MoE"),
    (39, c"NVFP4", c"(guessed) NVFP4"),
    (10, c"Q2_K - Medium", c"(guessed) Q2_K - Medium"),
    (21, c"Q2_K - Small", c"(guessed) Q2_K - Small"),
    (11, c"Q3_K - Small", c"(guessed) Q3_K - Small"),
    (12, c"Q3_K - Medium", c"(guessed) Q3_K - Medium"),
    (13, c"Q3_K - Large", c"(guessed) Q3_K - Large"),
    (14, c"Q4_K - Small", c"(guessed) Q4_K - Small"),
    (15, c"Q4_K - Medium", c"(guessed) Q4_K - Medium"),
    (16, c"Q5_K - Small", c"(guessed) Q5_K - Small"),
    (17, c"Q5_K - Medium", c"(guessed) Q5_K - Medium"),
    (18, c"Q6_K", c"(guessed) Q6_K"),
    (36, c"TQ1_0 - 1.69 bpw ternary", c"(guessed) TQ1_0 - 1.69 bpw ternary"),
    (37, c"TQ2_0 - 2.06 bpw ternary", c"(guessed) TQ2_0 - 2.06 bpw ternary"),
    (19, c"IQ2_XXS - 2.0625 bpw", c"(guessed) IQ2_XXS - 2.0625 bpw"),
    (20, c"IQ2_XS - 2.3125 bpw", c"(guessed) IQ2_XS - 2.3125 bpw"),
    (28, c"IQ2_S - 2.5 bpw", c"(guessed) IQ2_S - 2.5 bpw"),
    (29, c"IQ2_M - 2.7 bpw", c"(guessed) IQ2_M - 2.7 bpw"),
    (22, c"IQ3_XS - 3.3 bpw", c"(guessed) IQ3_XS - 3.3 bpw"),
    (23, c"IQ3_XXS - 3.0625 bpw", c"(guessed) IQ3_XXS - 3.0625 bpw"),
    (24, c"IQ1_S - 1.5625 bpw", c"(guessed) IQ1_S - 1.5625 bpw"),
    (31, c"IQ1_M - 1.75 bpw", c"(guessed) IQ1_M - 1.75 bpw"),
    (25, c"IQ4_NL - 4.5 bpw", c"(guessed) IQ4_NL - 4.5 bpw"),
    (30, c"IQ4_XS - 4.25 bpw", c"(guessed) IQ4_XS - 4.25 bpw"),
    (26, c"IQ3_S - 3.4375 bpw", c"(guessed) IQ3_S - 3.4375 bpw"),
    (27, c"IQ3_S mix - 3.66 bpw", c"(guessed) IQ3_S mix - 3.66 bpw"),
];

/// `llama_ftype_name`'s answer for a value outside the enum.
const FTYPE_UNKNOWN: (i32, &CStr, &CStr) = (-1, c"unknown, may not work", c"(guessed) unknown, may not work");

/// `llama_ftype_name`: the file type's name, "(guessed) " before it when `LLAMA_FTYPE_GUESSED`
/// is set, "unknown, may not work" for a value outside the enum.
#[no_mangle]
pub extern "C" fn llama_ftype_name(ftype: i32) -> *const c_char {
    let base = ftype & !FTYPE_GUESSED;
    let row = FTYPE_NAMES.iter().find(|r| r.0 == base).unwrap_or(&FTYPE_UNKNOWN);
    if ftype & FTYPE_GUESSED != 0 { row.2.as_ptr() } else { row.1.as_ptr() }
}

/// The ending of split `split_no` (from 0) of `split_count`: "-%05d-of-%05d.gguf" with the
/// number counted from 1, as llama.cpp formats it.
pub(crate) fn split_postfix(split_no: i32, split_count: i32) -> String {
    format!("-{:05}-of-{:05}.gguf", split_no.wrapping_add(1), split_count)
}

/// Copies as much of `text` as fits before a NUL into `buf` of `size` bytes (snprintf's
/// truncation); nothing is written when `size` is 0.
unsafe fn copy_truncated(text: &[u8], buf: *mut c_char, size: usize) {
    if !buf.is_null() && size > 0 {
        let n = text.len().min(size - 1);
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
}

/// `llama_split_path`: writes "<prefix>-NNNNN-of-MMMMM.gguf" into `split_path` (cut to
/// `maxlen` as snprintf does) and returns its length, or 0 when it did not fit.
#[no_mangle]
pub unsafe extern "C" fn llama_split_path(split_path: *mut c_char, maxlen: usize, path_prefix: *const c_char, split_no: i32, split_count: i32) -> i32 {
    const F: &str = "llama_split_path";
    guard(F, 0, || {
        if path_prefix.is_null() {
            error(F, "path_prefix is NULL");
            return 0;
        }
        let mut path = CStr::from_ptr(path_prefix).to_bytes().to_vec();
        path.extend_from_slice(split_postfix(split_no, split_count).as_bytes());
        copy_truncated(&path, split_path, maxlen);
        if path.len() >= maxlen {
            return 0;
        }
        i32::try_from(path.len()).unwrap_or(0)
    })
}

/// `llama_split_prefix`: when `split_path` ends with split `split_no` of `split_count`'s
/// ending (and has something before it), writes what comes before into `split_prefix` (cut
/// to `maxlen`) and returns its full length; otherwise 0 and nothing written.
#[no_mangle]
pub unsafe extern "C" fn llama_split_prefix(split_prefix: *mut c_char, maxlen: usize, split_path: *const c_char, split_no: i32, split_count: i32) -> i32 {
    const F: &str = "llama_split_prefix";
    guard(F, 0, || {
        if split_path.is_null() {
            error(F, "split_path is NULL");
            return 0;
        }
        let path = CStr::from_ptr(split_path).to_bytes();
        let postfix = split_postfix(split_no, split_count);
        if path.len() <= postfix.len() || !path.ends_with(postfix.as_bytes()) {
            return 0;
        }
        let prefix = &path[..path.len() - postfix.len()];
        copy_truncated(prefix, split_prefix, maxlen);
        i32::try_from(prefix.len()).unwrap_or(0)
    })
}

/// `enum llama_model_meta_key` in order, each key's name (llama-model.cpp,
/// `llama_model_meta_key_str`).
const META_KEYS: [&CStr; 12] = [
    c"general.sampling.sequence",
    c"general.sampling.top_k",
    c"general.sampling.top_p",
    c"general.sampling.min_p",
    c"general.sampling.xtc_probability",
    c"general.sampling.xtc_threshold",
    c"general.sampling.temp",
    c"general.sampling.penalty_last_n",
    c"general.sampling.penalty_repeat",
    c"general.sampling.mirostat",
    c"general.sampling.mirostat_tau",
    c"general.sampling.mirostat_eta",
];

/// `llama_model_meta_key_str`: the metadata key's name; NULL for a value outside the enum.
#[no_mangle]
pub extern "C" fn llama_model_meta_key_str(key: i32) -> *const c_char {
    usize::try_from(key).ok().and_then(|k| META_KEYS.get(k)).map_or(std::ptr::null(), |k| k.as_ptr())
}

/// `LLAMA_QUANT_MAX_BUF_SIZE` (llama-quant.cpp): 8 GiB.
const QUANT_MAX_BUF_SIZE: usize = 8 << 30;
/// `LLAMA_FTYPE_MOSTLY_Q8_0`.
const FTYPE_MOSTLY_Q8_0: i32 = 7;
/// `GGML_TYPE_COUNT` (ggml.h of this llama.cpp): "no type chosen" for the tensor type fields.
const GGML_TYPE_COUNT: i32 = 43;

/// `llama_model_quantize_default_params`: llama.cpp's defaults (quantizing itself is not
/// offered; `llama_model_quantize` fails).
#[no_mangle]
pub extern "C" fn llama_model_quantize_default_params() -> ModelQuantizeParams {
    ModelQuantizeParams {
        ftype: FTYPE_MOSTLY_Q8_0,
        output_tensor_type: GGML_TYPE_COUNT,
        token_embedding_type: GGML_TYPE_COUNT,
        quantize_output_tensor: true,
        max_buf_size: QUANT_MAX_BUF_SIZE,
        ..ModelQuantizeParams::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(p: *const c_char) -> Option<String> {
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    #[test]
    fn enum_names_are_llama_cpps() {
        assert_eq!(text(llama_flash_attn_type_name(-1)).as_deref(), Some("auto"));
        assert_eq!(text(llama_flash_attn_type_name(0)).as_deref(), Some("disabled"));
        assert_eq!(text(llama_flash_attn_type_name(1)).as_deref(), Some("enabled"));
        assert_eq!(text(llama_flash_attn_type_name(2)), None);
        let modes = [(-1, "auto"), (0, "none"), (1, "mmap"), (2, "mlock"), (3, "mmap+mlock"), (4, "dio")];
        for (mode, name) in modes {
            assert_eq!(text(llama_load_mode_name(mode)).as_deref(), Some(name));
            let c = std::ffi::CString::new(name).unwrap();
            assert_eq!(unsafe { llama_load_mode_from_str(c.as_ptr()) }, mode);
        }
        assert_eq!(text(llama_load_mode_name(5)), None);
        assert_eq!(unsafe { llama_load_mode_from_str(c"MMAP".as_ptr()) }, LOAD_MODE_UNKNOWN);
        assert_eq!(unsafe { llama_load_mode_from_str(std::ptr::null()) }, LOAD_MODE_UNKNOWN);
    }

    #[test]
    fn meta_key_names_are_llama_cpps() {
        assert_eq!(text(llama_model_meta_key_str(0)).as_deref(), Some("general.sampling.sequence"));
        assert_eq!(text(llama_model_meta_key_str(6)).as_deref(), Some("general.sampling.temp"));
        assert_eq!(text(llama_model_meta_key_str(11)).as_deref(), Some("general.sampling.mirostat_eta"));
        assert_eq!(text(llama_model_meta_key_str(12)), None);
        assert_eq!(text(llama_model_meta_key_str(-1)), None);
    }

    #[test]
    fn ftype_names_are_llama_cpps() {
        assert_eq!(text(llama_ftype_name(0)).as_deref(), Some("all F32"));
        assert_eq!(text(llama_ftype_name(7)).as_deref(), Some("Q8_0"));
        assert_eq!(text(llama_ftype_name(15)).as_deref(), Some("Q4_K - Medium"));
        assert_eq!(text(llama_ftype_name(27)).as_deref(), Some("IQ3_S mix - 3.66 bpw"));
        assert_eq!(text(llama_ftype_name(32)).as_deref(), Some("BF16"));
        assert_eq!(text(llama_ftype_name(1024 + 1)).as_deref(), Some("(guessed) F16"));
        // Removed values (4, 5, 6, 33..35) and anything past the enum are unknown.
        assert_eq!(text(llama_ftype_name(4)).as_deref(), Some("unknown, may not work"));
        assert_eq!(text(llama_ftype_name(33)).as_deref(), Some("unknown, may not work"));
        // -1 has the guessed bit set, as in llama.cpp's `ftype & LLAMA_FTYPE_GUESSED`.
        assert_eq!(text(llama_ftype_name(-1)).as_deref(), Some("(guessed) unknown, may not work"));
        assert_eq!(text(llama_ftype_name(1024 + 99)).as_deref(), Some("(guessed) unknown, may not work"));
    }

    #[test]
    fn split_path_and_prefix_are_llama_cpps() {
        // llama.h's own examples.
        let mut buf = [0 as c_char; 128];
        let n = unsafe { llama_split_path(buf.as_mut_ptr(), buf.len(), c"/models/ggml-model-q4_0".as_ptr(), 2, 4) };
        assert_eq!(text(buf.as_ptr()).as_deref(), Some("/models/ggml-model-q4_0-00003-of-00004.gguf"));
        assert_eq!(n, 43);
        let mut prefix = [0 as c_char; 64];
        let path = c"/models/ggml-model-q4_0-00002-of-00004.gguf";
        let n = unsafe { llama_split_prefix(prefix.as_mut_ptr(), 64, path.as_ptr(), 1, 4) };
        assert_eq!((n, text(prefix.as_ptr()).as_deref()), (23, Some("/models/ggml-model-q4_0")));
        // Another split's number, or nothing before the ending: 0.
        assert_eq!(unsafe { llama_split_prefix(prefix.as_mut_ptr(), 64, path.as_ptr(), 2, 4) }, 0);
        assert_eq!(unsafe { llama_split_prefix(prefix.as_mut_ptr(), 64, c"-00001-of-00001.gguf".as_ptr(), 0, 1) }, 0);
        // Too small a buffer: split_path cuts and returns 0; split_prefix cuts and returns the full length.
        let mut small = [0 as c_char; 8];
        assert_eq!(unsafe { llama_split_path(small.as_mut_ptr(), 8, c"abc".as_ptr(), 0, 1) }, 0);
        assert_eq!(text(small.as_ptr()).as_deref(), Some("abc-000"));
        assert_eq!(unsafe { llama_split_prefix(small.as_mut_ptr(), 4, path.as_ptr(), 1, 4) }, 23);
        assert_eq!(text(small.as_ptr()).as_deref(), Some("/mo"));
    }

    #[test]
    fn tensor_override_limit_is_llama_cpps() {
        assert_eq!(crate::model::llama_max_tensor_buft_overrides(), 4096);
    }

    #[test]
    fn quantize_defaults_are_llama_cpps() {
        let p = llama_model_quantize_default_params();
        assert_eq!((p.nthread, p.ftype, p.output_tensor_type, p.token_embedding_type), (0, 7, 43, 43));
        assert!(p.quantize_output_tensor && !p.allow_requantize && !p.only_copy && !p.pure && !p.keep_split && !p.dry_run);
        assert!(p.imatrix.is_null() && p.kv_overrides.is_null() && p.tt_overrides.is_null() && p.prune_layers.is_null());
        assert_eq!(p.max_buf_size, 8 * 1024 * 1024 * 1024);
    }
}
